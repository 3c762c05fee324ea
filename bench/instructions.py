"""Instructions `cohort serve` spends per request, counted by valgrind's callgrind: repeatable on
a shared machine where CPU time is not (identical servers differ by 30 % in CPU per heartbeat
here, and by about 1.5 % in instructions).

Starts the broker under `valgrind --tool=callgrind` (Debian's valgrind), prepares the load,
zeroes the counters (`callgrind_control -z`), sends the measured requests, dumps the counters
(`callgrind_control -d`) and reports instructions per request.

* **heartbeat**: 100 KIP-848 members (groups of 10) join and settle, then `--requests` steady
  ConsumerGroupHeartbeats, one per member per round, pipelined over 4 connections.
* **produce**: `--requests` Produce v9 requests (acks=-1), each one batch of 100 x 1 KiB records;
  **produce-idempotent** the same from an idempotent producer (each batch sequence-checked).
* **transaction**: a confluent-kafka transactional producer runs `--requests` transactions of
  100 records of 100 B to one partition (begin, produce, commit), after 5 unmeasured ones: what
  the broker spends per committed transaction, markers and `__transaction_state` writes included.

`--src` runs another tree's broker (e.g. a `git worktree` of an older commit) for an A/B:

    .venv/bin/python bench/instructions.py heartbeat|produce|produce-idempotent|transaction [--requests N] [--src DIR/src] [--acls]
                                           [--shards N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import glob
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", choices=["heartbeat", "produce", "produce-idempotent", "transaction"])
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--acls", action="store_true", help="run the broker with ACLs on (allow.everyone.if.no.acl.found=true)")
    ap.add_argument("--src", default=os.path.join(HERE, "..", "src"), help="the src/ directory of the broker to measure")
    ap.add_argument("--shards", type=int, default=None, help="offsets.topic.num.partitions (group coordinator shards)")
    args = ap.parse_args()
    src = os.path.abspath(args.src)
    sys.path.insert(0, src)
    sys.path.insert(0, HERE)
    os.environ["PYTHONPATH"] = src  # the broker subprocess imports this tree
    import cohort_testing as testing

    tmp = tempfile.mkdtemp()
    out = os.path.join(tmp, "callgrind.out")
    popen = subprocess.Popen

    def under_valgrind(cmd, *a, **kw):
        if "cohort.server" in cmd:
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + list(cmd)
        return popen(cmd, *a, **kw)

    testing.subprocess.Popen = under_valgrind
    overrides = ("authorizer.class.name=cohort", "allow.everyone.if.no.acl.found=true") if args.acls else ()
    if args.shards is not None:
        overrides += (f"offsets.topic.num.partitions={args.shards}",)
    srv = testing.ServerProcess(os.path.join(tmp, "data"), *overrides, log_path=os.path.join(tmp, "server.log")).start(timeout=900)
    try:
        if args.case == "heartbeat":
            n = heartbeat(srv, args.requests or 3000)
        elif args.case == "transaction":
            n = transactions(srv, args.requests or 50)
        else:
            n = produce(srv, args.requests or 500, idempotent=args.case == "produce-idempotent")
    finally:
        srv.stop(timeout=300)
    dumps = sorted(glob.glob(out + ".*"))
    total = next(int(line.split()[1]) for line in open(dumps[0]) if line.startswith("summary:"))
    print(f"{args.case}: {n:,} requests, {total:,} instructions in the broker = {total / n:,.0f} per request ({src})")


def zero(srv) -> None:
    subprocess.run(["callgrind_control", "-z", str(srv.proc.pid)], check=True, capture_output=True)


def dump(srv) -> None:
    subprocess.run(["callgrind_control", "-d", str(srv.proc.pid)], check=True, capture_output=True)


def heartbeat(srv, requests: int) -> int:
    import heartbeats as hb

    hb.setup(srv, 20)

    async def run() -> int:
        members = [hb.Member(f"g{i // 10}", f"member-{i:06d}") for i in range(100)]
        conns, by_conn, _ = await hb.settle(srv.port, members, 4)
        for _ in range(2):
            await hb.round_trip_all(conns, by_conn)
        zero(srv)
        rounds = max(1, requests // len(members))
        for _ in range(rounds):
            await hb.round_trip_all(conns, by_conn)
        dump(srv)
        for _, writer in conns:
            writer.close()
        return rounds * len(members)

    return asyncio.run(run())


def produce(srv, requests: int, idempotent: bool = False) -> int:
    from kio.index import load_request_schema

    from cohort.protocol.entities import build, nested
    from cohort.protocol.records import build_batch
    from cohort_testing import WireClient

    schema = load_request_schema(0, 9)

    def body(seq: int):
        idem = {"producer_id": 1, "producer_epoch": 0, "base_sequence": seq * 100} if idempotent else {}
        part = build(nested(nested(schema, "topic_data"), "partition_data"), index=0,
                     records=build_batch([(None, b"x" * 1024)] * 100, **idem))
        return build(schema, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                     topic_data=(build(nested(schema, "topic_data"), name="p", partition_data=(part,)),))

    bodies = [body(i) for i in range(20 + requests)] if idempotent else [body(0)] * (20 + requests)
    create = load_request_schema(19, 7)
    topic = build(nested(create, "topics"), name="p", num_partitions=1, replication_factor=-1, assignments=(), configs=())
    with WireClient(srv.port, timeout=900) as c:
        c.request(19, 7, build(create, topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False))
        for i in range(20):
            c.request(0, 9, bodies[i])
        zero(srv)
        for i in range(requests):
            assert c.request(0, 9, bodies[20 + i]).responses[0].partition_responses[0].error_code == 0
        dump(srv)
    return requests


def transactions(srv, count: int) -> int:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic("txn", 1)])["txn"].result(300)
    p = ck.Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "instructions", "linger.ms": 1,
                     "transaction.timeout.ms": 600000, "socket.timeout.ms": 300000, "message.timeout.ms": 300000})
    p.init_transactions(300)

    def one() -> None:
        p.begin_transaction()
        for _ in range(100):
            p.produce("txn", b"v" * 100, partition=0)
        p.commit_transaction(300)

    for _ in range(5):
        one()
    zero(srv)
    for _ in range(count):
        one()
    dump(srv)
    return count


if __name__ == "__main__":
    main()

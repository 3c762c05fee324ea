"""Transactions against `cohort serve`: committed transactions per second, and what read_committed
costs a consumer.

1. Throughput: `--producers` confluent-kafka transactional producers (one thread each, their own
   transactional.id) each run begin / `--records` records to one partition of a `--partitions`
   topic / commit, for `--seconds`. Reports committed transactions and records per second, the
   latency of commit_transaction, and the broker's CPU time per transaction and its share of
   one core (from /proc), since the broker is one Python process.
2. Consumers: the records those transactions wrote (plus as many again from aborted
   transactions when `--abort-share` > 0) are read from the start by a fresh consumer, with
   read_committed and read_uncommitted alternately (`--rounds` each); reports records/s of each
   (counting what the consumer hands out: read_committed delivers fewer records when some
   transactions were aborted) and the ratio of their elapsed times.

The issue's targets: at least 1,000 committed transactions of 100 records per second on one
core, and read_committed within 20 % of read_uncommitted.

    .venv/bin/python bench/transactions.py [--producers 8] [--seconds 10] [--records 100] [--rounds 3]

The broker runs the tree that `PYTHONPATH` names first (default: this checkout's src/), so a
side-by-side run of an older commit is `PYTHONPATH=/path/to/worktree/src python bench/...`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from cohort_testing import ServerProcess  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, topic: str, args: argparse.Namespace) -> tuple[int, int, list[float]]:
    """Run the producers; returns (committed transactions, aborted transactions, commit latencies)."""
    stop = time.monotonic() + args.seconds
    committed, aborted, latencies = [0], [0], []
    lock = threading.Lock()
    payload = b"v" * args.value_bytes

    def run(i: int) -> None:
        p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4()}", "linger.ms": 1})
        p.init_transactions(30)
        n = 0
        while time.monotonic() < stop:
            p.begin_transaction()
            for _ in range(args.records):
                p.produce(topic, payload, partition=i % args.partitions)
            abort = args.abort_share > 0 and n % round(1 / args.abort_share) == 0
            started = time.perf_counter()
            if abort:
                p.flush(30)  # else the client drops the unsent records instead of writing them
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
            took = time.perf_counter() - started
            n += 1
            with lock:
                if abort:
                    aborted[0] += 1
                else:
                    committed[0] += 1
                    latencies.append(took)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(args.producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return committed[0], aborted[0], latencies


def consume(bootstrap: str, topic: str, isolation: str, expected: int) -> tuple[int, float]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "isolation.level": isolation, "fetch.max.bytes": 52428800})
    c.subscribe([topic])
    n = 0
    started = None
    idle_since = time.monotonic()
    while True:
        msgs = c.consume(10_000, 0.2)
        got = sum(1 for m in msgs if not m.error())
        if got:
            if started is None:
                started = time.perf_counter()
            n += got
            idle_since = time.monotonic()
            last = time.perf_counter()
        elif n >= expected or time.monotonic() - idle_since > 5:
            break
    c.close()
    return n, (last - started) if started is not None else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records", type=int, default=100, help="records per transaction")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--abort-share", type=float, default=0.0, help="share of transactions aborted (e.g. 0.5)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(os.path.join(tmp, "data"), f"num.partitions={args.partitions}",
                            log_path=os.path.join(tmp, "server.log"))
        os.makedirs(os.path.join(tmp, "data"))
        srv.start()
        try:
            admin = AdminClient({"bootstrap.servers": srv.bootstrap})
            admin.create_topics([NewTopic("bench", args.partitions)])["bench"].result(20)
            cpu0, t0 = cpu_seconds(srv.proc.pid), time.perf_counter()
            committed, aborted, lat = produce(srv.bootstrap, "bench", args)
            wall, cpu = time.perf_counter() - t0, cpu_seconds(srv.proc.pid) - cpu0
            total = committed + aborted
            print(f"load: {args.producers} transactional producers, {args.records} records of {args.value_bytes} B per "
                  f"transaction, {args.partitions} partitions, {args.seconds:g} s")
            print(f"committed {committed} transactions ({aborted} aborted): {committed / wall:,.0f} committed/s, "
                  f"{committed * args.records / wall:,.0f} records/s")
            lat.sort()
            print(f"commit_transaction latency: median {statistics.median(lat) * 1000:.1f} ms, "
                  f"p99 {lat[int(len(lat) * 0.99)] * 1000:.1f} ms")
            print(f"broker CPU: {cpu:.2f} s over {wall:.1f} s ({cpu / wall * 100:.0f} % of one core), "
                  f"{cpu / max(total, 1) * 1e6:,.0f} us per transaction")
            expected_uncommitted = total * args.records
            expected_committed = committed * args.records
            times: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
            counts: dict[str, int] = {}
            for _ in range(args.rounds):
                for iso, expected in (("read_uncommitted", expected_uncommitted), ("read_committed", expected_committed)):
                    n, took = consume(srv.bootstrap, "bench", iso, expected)
                    assert n == expected, (iso, n, expected)
                    counts[iso] = n
                    times[iso].append(took)
            for iso, ts in times.items() if args.rounds else ():  # --rounds 0: throughput only
                best = min(ts)
                print(f"{iso}: {counts[iso]:,} records in {best:.2f} s (best of {args.rounds}): "
                      f"{counts[iso] / best:,.0f} records/s; all rounds {', '.join(f'{t:.2f}' for t in ts)} s")
            if args.rounds:
                ratio = min(times["read_committed"]) / min(times["read_uncommitted"])
                print(f"read_committed / read_uncommitted elapsed time: {ratio:.2f}")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()

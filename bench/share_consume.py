"""Share groups against consumer groups: records per second that three confluent-kafka share
consumers (implicit acknowledgement) reach on a 3-partition topic of 1 KiB records, beside three
confluent-kafka consumers of a KIP-848 consumer group, from one cohort broker, in one run; and
the same share consumers through a second cohort in front of that broker as its upstream
(`share-upstream`: the records stay in the upstream, the front serves the share group and keeps
its state in the upstream's topics; clients produce and consume through the front).

Each round and kind gets a fresh topic and group in a child process: three consumers (three
threads; librdkafka does its I/O on its own threads) subscribe and are left 8 s to form their
group (a KIP-848 group settles within a heartbeat interval, 5 s); then a producer process writes
the records as fast as it can, and the figure is records per second from its start until the
consumers have every record: a queue's throughput, the group already formed, with the CPU
seconds the consumers and the broker used over that span. Rounds alternate the kinds; the
median is reported. The producer alone is timed too, since on two cores it shares the machine.

    .venv/bin/python bench/share_consume.py                 # 100,000 records (98 MiB), 3 rounds
    .venv/bin/python bench/share_consume.py --records 30000 --rounds 1 --kinds share,share-upstream
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

VALUE_SIZE = 1024
TOPIC = "bench-share"
PARTITIONS = 3


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS)]).values():
        f.result(30)


def produce(bootstrap: str, records: int, topic: str = TOPIC) -> None:
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                            "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(VALUE_SIZE)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def child(kind: str, bootstrap: str, records: int) -> None:
    """Three consumers of a fresh group on a fresh topic form their group, then a producer writes
    the records; prints the figures as JSON."""
    import threading

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic, group = f"{TOPIC}-{uuid.uuid4().hex[:6]}", f"{kind}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    if kind != "group":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(30)
        del admin
    counts = [0, 0, 0]
    marks: list[float] = []
    done = threading.Event()
    lock = threading.Lock()

    def run(i: int) -> None:
        if kind != "group":
            c = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        else:
            c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                             "auto.offset.reset": "earliest", "enable.auto.commit": True})
        c.subscribe([topic])
        try:
            while not done.is_set():
                msgs = c.poll(0.2) if kind != "group" else c.consume(500, 0.2)
                n = sum(1 for m in msgs or [] if m.error() is None)
                if n:
                    with lock:
                        counts[i] += n
                        if sum(counts) >= records and not done.is_set():
                            marks.append(time.perf_counter())
                            done.set()
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(8)  # the group forms
    cpu0 = os.times()
    start = time.perf_counter()
    producer = subprocess.run([sys.executable, __file__, "--produce", bootstrap, str(records), topic], timeout=600)
    produced = time.perf_counter() - start
    if producer.returncode:
        raise SystemExit("the producer failed")
    for t in threads:
        t.join()
    cpu1 = os.times()
    print(json.dumps({"kind": kind, "records": sum(counts), "seconds": marks[0] - start, "producer_seconds": produced,
                      "per_consumer": counts,
                      "client_cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kinds", default="group,share,share-upstream", help="which of group, share, share-upstream")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "BOOTSTRAP", "RECORDS"), help=argparse.SUPPRESS)
    ap.add_argument("--produce", nargs=3, metavar=("BOOTSTRAP", "RECORDS", "TOPIC"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.produce:
        produce(args.produce[0], int(args.produce[1]), args.produce[2])
        return
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from cohort_testing import ServerProcess

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    tmp = tempfile.mkdtemp()
    srv = ServerProcess(os.path.join(tmp, "data"), f"num.partitions={PARTITIONS}",
                        log_path=os.path.join(tmp, "server.log")).start()
    front = None
    try:
        if "share-upstream" in kinds:
            front = ServerProcess(os.path.join(tmp, "front"), f"upstream.bootstrap.servers={srv.bootstrap}",
                                  "upstream.metadata.refresh.ms=500", log_path=os.path.join(tmp, "front.log")).start()
            time.sleep(3)  # it reads the upstream and loads its shards
        results: dict[str, list[dict]] = {k: [] for k in kinds}
        for _ in range(args.rounds):
            for kind in kinds:
                target = front if kind == "share-upstream" else srv
                cpu0 = {"broker": _cpu(srv.proc.pid), "front": _cpu(front.proc.pid) if front else 0.0}
                out = subprocess.run([sys.executable, __file__, "--child", kind, target.bootstrap, str(args.records)],
                                     capture_output=True, text=True, timeout=600)
                if out.returncode:
                    raise SystemExit(out.stderr)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                r["broker_cpu"] = _cpu(srv.proc.pid) - cpu0["broker"]
                r["front_cpu"] = (_cpu(front.proc.pid) - cpu0["front"]) if front else 0.0
                results[kind].append(r)
                print(f"{kind:14}  {r['records'] / r['seconds']:>9,.0f} records/s  {r['seconds']:6.2f} s  "
                      f"(producer alone {r['producer_seconds']:5.2f} s)  "
                      f"client CPU {r['client_cpu']:5.1f} s  broker CPU {r['broker_cpu']:5.1f} s  "
                      f"front CPU {r['front_cpu']:5.1f} s  per consumer {r['per_consumer']}", flush=True)
        rate = {k: statistics.median(r["records"] / r["seconds"] for r in v) for k, v in results.items()}
        line = ", ".join(f"{k} {v:,.0f} records/s" for k, v in rate.items())
        if "share" in rate and "group" in rate:
            line += f"; share / group {100 * rate['share'] / rate['group']:.0f} %"
        if "share" in rate and "share-upstream" in rate:
            line += f"; share-upstream / share {100 * rate['share-upstream'] / rate['share']:.0f} %"
        print(f"median: {line}")
    finally:
        if front is not None:
            front.stop()
        srv.stop()


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()

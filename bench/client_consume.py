"""Consumer throughput: cohort.client beside confluent-kafka (librdkafka) and aiokafka, each
consuming the same topic of 1 KiB records from a cohort broker in its own process, as a group
member (KIP-848 for cohort.client and confluent-kafka; aiokafka speaks only the classic protocol).

Each client runs in a child process; the figure is records (and MB) per second from the end of
its first batch to its last record (the first batch, prefetched while the group formed, is not
counted), with the CPU seconds the child used over the same span (librdkafka's threads
included). The broker is another process, so on two cores each side has one.

    .venv/bin/python bench/client_consume.py                 # 200,000 records (195 MiB), 3 rounds
    .venv/bin/python bench/client_consume.py --records 50000 --rounds 1 --only cohort
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

VALUE_SIZE = 1024
TOPIC = "bench-consume"
PARTITIONS = 6
CLIENTS = ("cohort", "confluent", "aiokafka")


def produce(bootstrap: str, records: int) -> None:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS)]).values():
        f.result(30)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                            "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(VALUE_SIZE)
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, key=str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def child(client: str, bootstrap: str, records: int, group: str) -> dict:
    """Runs in the child: consume `records` records; (seconds, cpu seconds, bytes) from the first record."""
    if client == "cohort":
        return asyncio.run(_cohort(bootstrap, records, group))
    if client == "aiokafka":
        return asyncio.run(_aiokafka(bootstrap, records, group))
    return _confluent(bootstrap, records, group)


def _span(first: tuple[float, float] | None, count: int, size: int) -> dict:
    wall, cpu = time.monotonic() - first[0], time.process_time() - first[1]
    return {"records": count, "bytes": size, "seconds": wall, "cpu": cpu}


async def _cohort(bootstrap: str, records: int, group: str) -> dict:
    from cohort.client import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 4 << 20, "check.crcs": True})
    consumer.subscribe([TOPIC])
    await consumer.start()
    out = await _drain(consumer, records)
    await consumer.close()
    return out


async def _drain(consumer, records: int) -> dict:
    """getmany() until `records` came (cohort.client and aiokafka share the call)."""
    count = size = 0
    first = None
    while count < records:
        batch = await consumer.getmany(timeout_ms=1000)
        for recs in batch.values():
            count += len(recs)
            for r in recs:
                size += len(r.value)
        if batch and first is None:
            first, base = (time.monotonic(), time.process_time()), (count, size)
    return _span(first, count - base[0], size - base[1])


async def _aiokafka(bootstrap: str, records: int, group: str) -> dict:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    try:
        return await _drain(consumer, records)
    finally:
        await consumer.stop()


def _confluent(bootstrap: str, records: int, group: str) -> dict:
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    count = size = 0
    first = None
    try:
        while count < records:
            msgs = consumer.consume(10_000, 1.0)
            for m in msgs:
                if m.error() is None:
                    count += 1
                    size += len(m.value())
            if msgs and first is None:
                first, base = (time.monotonic(), time.process_time()), (count, size)
        return _span(first, count - base[0], size - base[1])
    finally:
        consumer.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", choices=CLIENTS, action="append")
    p.add_argument("--child", nargs=4, metavar=("CLIENT", "BOOTSTRAP", "RECORDS", "GROUP"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        client, bootstrap, records, group = args.child
        print(json.dumps(child(client, bootstrap, int(records), group)))
        return

    from cohort_testing import ServerProcess

    clients = args.only or list(CLIENTS)
    with tempfile.TemporaryDirectory() as base:
        srv = ServerProcess(os.path.join(base, "data"), log_path=os.path.join(base, "server.log")).start(timeout=60)
        try:
            bootstrap = f"127.0.0.1:{srv.port}"
            produce(bootstrap, args.records)
            print(f"{args.records:,} records of {VALUE_SIZE} B in {PARTITIONS} partitions; one consumer per run, "
                  f"{os.cpu_count()} cores; load before: {os.getloadavg()[0]:.2f}")
            results: dict[str, list[dict]] = {c: [] for c in clients}
            for r in range(args.rounds):
                for client in clients:  # alternating, so drift in the machine's load hits every client
                    out = subprocess.run([sys.executable, __file__, "--child", client, bootstrap, str(args.records),
                                          f"bench-{client}-{r}"], capture_output=True, text=True, timeout=600)
                    if out.returncode:
                        raise SystemExit(f"{client} failed: {out.stderr[-2000:]}")
                    results[client].append(json.loads(out.stdout.strip().splitlines()[-1]))
            if any(x["records"] == 0 for runs in results.values() for x in runs):
                raise SystemExit("every record came in the first batch: use more --records (100,000 or more)")
            print(f"{'client':<12} {'records/s':>12} {'MB/s':>8} {'CPU s / s':>10}   (best of {args.rounds}; all rounds MB/s)")
            for client, runs in results.items():
                best = max(runs, key=lambda x: x["bytes"] / x["seconds"])
                rates = ", ".join(f"{x['bytes'] / x['seconds'] / 1e6:.0f}" for x in runs)
                print(f"{client:<12} {best['records'] / best['seconds']:>12,.0f} {best['bytes'] / best['seconds'] / 1e6:>8.1f} "
                      f"{best['cpu'] / best['seconds']:>10.2f}   ({rates})")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()

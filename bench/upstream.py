"""Produce and fetch through cohort in front of an upstream against going to the upstream directly.

Starts two `cohort serve` processes on free ports of 127.0.0.1: the upstream, and cohort with
`upstream.bootstrap.servers` pointing at it. Each round, for each path (direct, through cohort,
alternating which goes first), a confluent-kafka producer writes `--records` records of
`--value-bytes` to a new topic (acks=all, linger.ms=5) and a consumer reads them back from the
start. Reports records/s and MB/s of each, and through/direct as a ratio (best round of each).
The issue's target: through cohort at least 70 % of direct.

Both brokers, the proxy and the clients share the machine's cores: the proxy's CPU competes
with the upstream's, which a real deployment does not.

    .venv/bin/python bench/upstream.py [--records 50000] [--value-bytes 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from cohort_testing import ServerProcess  # noqa: E402


def produce(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                     "queue.buffering.max.messages": n + 1})
    started = time.perf_counter()
    for i in range(n):
        p.produce(topic, value, partition=i % 4)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return time.perf_counter() - started


def consume(bootstrap: str, topic: str, n: int) -> float:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False,
                     "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(4)])
    got = 0
    started = time.perf_counter()
    while got < n:
        got += sum(1 for m in c.consume(10_000, 5) if m.error() is None)
        assert time.perf_counter() - started < 120, f"consumed {got} of {n}"
    took = time.perf_counter() - started
    c.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    value = b"v" * args.value_bytes
    mb = args.records * args.value_bytes / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "up"))
        os.makedirs(os.path.join(tmp, "proxy"))
        upstream = ServerProcess(os.path.join(tmp, "up", "data"), log_path=os.path.join(tmp, "up.log")).start()
        proxy = ServerProcess(os.path.join(tmp, "proxy", "data"), f"upstream.bootstrap.servers={upstream.bootstrap}",
                              log_path=os.path.join(tmp, "proxy.log")).start()
        try:
            paths = {"direct": upstream.bootstrap, "through cohort": proxy.bootstrap}
            admin = AdminClient({"bootstrap.servers": upstream.bootstrap})
            best: dict[str, dict[str, float]] = {p: {"produce": float("inf"), "fetch": float("inf")} for p in paths}
            print(f"load: {args.records:,} records of {args.value_bytes} B ({mb:.0f} MB) per run, 4 partitions, "
                  f"acks=all; {args.rounds} rounds")
            for r in range(args.rounds):
                order = list(paths) if r % 2 == 0 else list(reversed(paths))
                for path in order:
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    admin.create_topics([NewTopic(topic, 4)])[topic].result(30)
                    time.sleep(0.5)
                    p = produce(paths[path], topic, args.records, value)
                    f = consume(paths[path], topic, args.records)
                    best[path]["produce"] = min(best[path]["produce"], p)
                    best[path]["fetch"] = min(best[path]["fetch"], f)
                    print(f"  round {r + 1} {path}: produce {args.records / p:,.0f} records/s, "
                          f"fetch {args.records / f:,.0f} records/s")
            for what in ("produce", "fetch"):
                d, t = best["direct"][what], best["through cohort"][what]
                print(f"{what}: direct {args.records / d:,.0f} records/s ({mb / d:.1f} MB/s), through cohort "
                      f"{args.records / t:,.0f} records/s ({mb / t:.1f} MB/s): {d / t:.2f} of direct")
        finally:
            proxy.stop()
            upstream.stop()


if __name__ == "__main__":
    main()

"""What a Prometheus scrape of /metrics costs the broker, at a fleet of groups.

Prepares a data directory holding `--groups` KIP-848 groups (one member each, owning the `--partitions`
partitions of one of `--topics` topics, with committed offsets behind a log of 100 records per
partition), starts `cohort serve` on it with the HTTP listener on, waits until the coordinator has
loaded, then scrapes /metrics `--scrapes` times in each of three modes: idle (nothing changes
between scrapes), active (a record lands on every partition before each scrape, so every group's
lag changes) and committing (every group's member commits new offsets for its partitions before
each scrape, as consumers with auto-commit do, so every group's offsets and lag change). Reports
the broker's CPU time per scrape (from /proc, idle background subtracted, so neither the client's
work nor the produce and commit requests are counted), its share of one core at 60 s
(Prometheus' default), 15 s and 5 s scrape intervals, the wall time of one scrape, and the size
of the answer. The issue's target: < 1% at 10,000 groups.

    .venv/bin/python bench/metrics_scrape.py [--groups 10000] [--scrapes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

from cohort.broker import Broker  # noqa: E402
from cohort.config import Config  # noqa: E402
from cohort.coordinator import MemberState, Record, encode  # noqa: E402
from cohort.coordinator.records import (  # noqa: E402
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from cohort.protocol.records import build_batch  # noqa: E402
from cohort_testing import ServerProcess  # noqa: E402

import confluent_kafka as ck  # noqa: E402

SESSION_MS = 3_600_000  # members must outlive the benchmark (nobody heartbeats)


def prepare(data_dir: str, groups: int, topics: int, partitions: int) -> None:
    broker = Broker(Config({"log.dir": data_dir}))
    made = [broker.create_topic(f"topic-{t:03d}", partitions) for t in range(topics)]
    batch = build_batch([(None, b"x" * 50)] * 100)
    for topic in made:
        for p in range(partitions):
            assert broker.produce(topic.name, p, batch).error == 0
    clog = broker.coordinator_log

    async def write() -> None:
        pending = []
        for g in range(groups):
            gid, member = f"group-{g:05d}", f"member-{g:05d}"
            topic = made[g % topics]
            assignment = {topic.id: tuple(range(partitions))}
            records = [
                Record(ConsumerGroupMemberMetadataKey(gid, member), ConsumerGroupMemberMetadataValue(
                    None, None, "bench-client", "/127.0.0.1", (topic.name,), None, 300_000, None)),
                Record(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(1, 0)),
                Record(ConsumerGroupTargetAssignmentMemberKey(gid, member),
                       ConsumerGroupTargetAssignmentMemberValue(assignment)),
                Record(ConsumerGroupTargetAssignmentMetadataKey(gid), ConsumerGroupTargetAssignmentMetadataValue(1)),
                Record(ConsumerGroupCurrentMemberAssignmentKey(gid, member), ConsumerGroupCurrentMemberAssignmentValue(
                    1, 0, MemberState.STABLE, assignment, {})),
            ]
            records += [Record(OffsetCommitKey(gid, topic.name, p), OffsetCommitValue(50 + p, -1, "", 0))
                        for p in range(partitions)]
            pending.append(clog.append_records([encode(r) for r in records]))
            if len(pending) >= 500:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)

    asyncio.run(write())
    broker.close()


def commit_frames(groups: int, topics: int, partitions: int) -> list[list[bytes]]:
    """Two rounds of OffsetCommit v9 requests, one per group from its member (epoch 1), with
    different offsets, so that alternating them moves every committed offset."""
    from kio.index import load_request_schema

    from cohort.protocol.codec import encode_request
    from cohort.protocol.entities import build, nested

    req_cls = load_request_schema(8, 9)
    topic_cls = nested(req_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    rounds = []
    for shift in (1, 2):
        frames = []
        for g in range(groups):
            parts = tuple(build(part_cls, partition_index=p, committed_offset=50 + p + shift, committed_leader_epoch=-1,
                                committed_metadata="") for p in range(partitions))
            body = build(req_cls, group_id=f"group-{g:05d}", generation_id_or_member_epoch=1,
                         member_id=f"member-{g:05d}", group_instance_id=None, retention_time_ms=-1,
                         topics=(build(topic_cls, name=f"topic-{g % topics:03d}", partitions=parts),))
            frames.append(encode_request(8, 9, g, "bench", body))
        rounds.append(frames)
    return rounds


def commit_all(port: int, frames: list[bytes]) -> None:
    """Send the commits on one connection, 500 at a time, and read every answer (each after its fsync)."""
    from cohort_testing import WireClient

    with WireClient(port, timeout=60) as c:
        for start in range(0, len(frames), 500):
            batch = frames[start:start + 500]
            c.send_raw(b"".join(batch))
            for _ in batch:
                _, resp = c.decode(8, 9, c.recv_frame())
                err = int(resp.topics[0].partitions[0].error_code)
                if err:
                    raise SystemExit(f"OffsetCommit answered error {err}")


def cpu_seconds(pid: int, part: str = "both") -> float:
    """User + system CPU time of a process (or just one of them)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    user, system = int(fields[11]), int(fields[12])
    return {"both": user + system, "user": user, "system": system}[part] / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="cohort-metrics-")
    data = os.path.join(base, "data")
    started = time.monotonic()
    prepare(data, args.groups, args.topics, args.partitions)
    print(f"prepared {args.groups} groups on {args.topics} topics x {args.partitions} partitions "
          f"in {time.monotonic() - started:.1f} s")
    srv = ServerProcess(data, "http.listener=127.0.0.1:0", f"group.consumer.session.timeout.ms={SESSION_MS}",
                        f"group.consumer.min.session.timeout.ms={SESSION_MS}",
                        f"group.consumer.max.session.timeout.ms={SESSION_MS}",
                        "group.consumer.heartbeat.interval.ms=5000", log_path=os.path.join(base, "server.log"))
    srv.start(timeout=120)
    try:
        url = f"http://127.0.0.1:{srv.http_port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(url + "/readyz", timeout=10).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        body = urllib.request.urlopen(url + "/metrics", timeout=60).read()  # warm
        lag_series = body.count(b"\nkafka_consumergroup_group_lag{")
        time.sleep(1)
        idle0, t0 = cpu_seconds(srv.proc.pid), time.monotonic()
        time.sleep(3)
        idle_rate = (cpu_seconds(srv.proc.pid) - idle0) / (time.monotonic() - t0)  # background work, per second
        producer = ck.Producer({"bootstrap.servers": srv.bootstrap, "linger.ms": 5, "log_level": 0})
        commits = commit_frames(args.groups, args.topics, args.partitions)
        for mode in ("idle", "active", "committing"):
            walls, busy, system = [], 0.0, 0.0
            for n in range(args.scrapes):
                if mode == "active":  # every partition moves: every group's lag lines are rebuilt
                    for t in range(args.topics):
                        for p in range(args.partitions):
                            producer.produce(f"topic-{t:03d}", b"y", partition=p)
                    producer.flush(30)
                    time.sleep(0.3)
                elif mode == "committing":  # every group's offsets move: every group is read again
                    commit_all(srv.port, commits[n % 2])
                    time.sleep(0.3)
                cpu0, sys0, t0 = cpu_seconds(srv.proc.pid), cpu_seconds(srv.proc.pid, "system"), time.monotonic()
                s = time.perf_counter()
                body = urllib.request.urlopen(url + "/metrics", timeout=60).read()
                walls.append(time.perf_counter() - s)
                busy += cpu_seconds(srv.proc.pid) - cpu0 - idle_rate * (time.monotonic() - t0)
                system += cpu_seconds(srv.proc.pid, "system") - sys0
            per_scrape, system = busy / args.scrapes, system / args.scrapes
            lines = body.count(b"\n")
            print(f"{mode}: {args.groups} groups, /metrics is {len(body) / 1e6:.1f} MB, {lines} lines "
                  f"({lag_series} kafka_consumergroup_group_lag series)")
            print(f"  broker CPU per scrape: {per_scrape * 1000:.0f} ms ({system * 1000:.0f} ms of it in the kernel); "
                  f"wall per scrape: median {statistics.median(walls) * 1000:.0f} ms, max {max(walls) * 1000:.0f} ms")
            for interval in (60, 15, 5):
                print(f"  scraped every {interval:>2} s: {100 * per_scrape / interval:.2f}% of one core")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()

"""Durability benchmarks (issue 6).

Usage:
  .venv/bin/python bench/durability.py restart [--records 1000000] [--groups 2000]
  .venv/bin/python bench/durability.py commits [--members 100] [--seconds 5]
  .venv/bin/python bench/durability.py wire    [--members 100] [--seconds 5]

restart: writes N realistic coordinator records (offset commits, member joins and leaves with
    their tombstones, epoch bumps, reconciliation) through the coordinator log's append path
    (fsync, group commit), once with the cleaner off and once with compaction running as the
    background cleaner would. Each restart is timed in a fresh process: open the data
    directory (recovery) + read and decode every record + replay into a new
    GroupCoordinatorShard + on_loaded. Target: <= 5 s for 1,000,000 records. Then the same
    directory is served by `cohort serve`, timed until ListGroups answers.
commits: 100 concurrent members, each committing an offset and waiting until it is durable,
    through CoordinatorLog.append_records (the path groups.py uses). Target >= 5,000/s.
wire: the same over TCP against a `cohort serve` subprocess: 100 connections, each sending
    OffsetCommit v9 requests one at a time (every answer waits for the fsync).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

from cohort.broker import OFFSETS_TOPIC, Broker
from cohort.config import Config
from cohort.coordinator import GroupCoordinatorShard, MemberState, Record, decode, encode
from cohort.coordinator.records import (
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

TOPICS = [(f"topic-{i}", uuid.uuid5(uuid.NAMESPACE_OID, f"topic-{i}")) for i in range(4)]
PARTITIONS = 8


class Workload:
    """A coordinator's write history: groups whose members come and go and commit offsets."""

    def __init__(self, groups: int, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.groups = [f"group-{g:05d}" for g in range(groups)]
        self.members: dict[str, list[str]] = {g: [] for g in self.groups}
        self.epoch = dict.fromkeys(self.groups, 0)
        self.member_epoch: dict[tuple[str, str], int] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.serial = 0

    def _assignment(self, group: str, member: str):
        members = sorted(self.members[group])
        i = members.index(member)
        parts = {}
        for name, tid in TOPICS[:2]:
            mine = tuple(p for p in range(PARTITIONS) if p % len(members) == i)
            if mine:
                parts[tid] = mine
        return parts

    def _bump(self, group: str) -> list[Record]:
        self.epoch[group] += 1
        e = self.epoch[group]
        out = [Record(ConsumerGroupMetadataKey(group), ConsumerGroupMetadataValue(e, 12345))]
        for m in self.members[group]:
            out.append(Record(ConsumerGroupTargetAssignmentMemberKey(group, m),
                              ConsumerGroupTargetAssignmentMemberValue(self._assignment(group, m))))
        out.append(Record(ConsumerGroupTargetAssignmentMetadataKey(group), ConsumerGroupTargetAssignmentMetadataValue(e)))
        return out

    def join(self, group: str) -> list[Record]:
        self.serial += 1
        member = f"member-{self.serial:08d}"
        self.members[group].append(member)
        names = tuple(n for n, _ in TOPICS[:2])
        out = [Record(ConsumerGroupMemberMetadataKey(group, member), ConsumerGroupMemberMetadataValue(
            None, None, "bench-client", "/127.0.0.1", names, None, 300000, "uniform"))]
        out += self._bump(group)
        out += self.reconcile(group, member)
        return out

    def leave(self, group: str) -> list[Record]:
        member = self.rng.choice(self.members[group])
        self.members[group].remove(member)
        self.member_epoch.pop((group, member), None)
        out = [Record(ConsumerGroupCurrentMemberAssignmentKey(group, member), None),
               Record(ConsumerGroupTargetAssignmentMemberKey(group, member), None),
               Record(ConsumerGroupMemberMetadataKey(group, member), None)]
        return out + self._bump(group)

    def reconcile(self, group: str, member: str) -> list[Record]:
        prev = self.member_epoch.get((group, member), 0)
        self.member_epoch[(group, member)] = self.epoch[group]
        return [Record(ConsumerGroupCurrentMemberAssignmentKey(group, member), ConsumerGroupCurrentMemberAssignmentValue(
            self.epoch[group], prev, MemberState.STABLE, self._assignment(group, member), {}))]

    def commit(self, group: str) -> list[Record]:
        out = []
        name, _ = TOPICS[self.rng.randrange(2)]
        for p in self.rng.sample(range(PARTITIONS), self.rng.randint(1, 4)):
            key = (group, name, p)
            self.offsets[key] = self.offsets.get(key, 0) + self.rng.randint(1, 500)
            out.append(Record(OffsetCommitKey(group, name, p), OffsetCommitValue(self.offsets[key], 3, "", 1_700_000_000_000)))
        return out

    def operation(self) -> list[Record]:
        group = self.rng.choice(self.groups)
        roll = self.rng.random()
        if not self.members[group] or (roll < 0.06 and len(self.members[group]) < 8):
            return self.join(group)
        if roll < 0.10:
            return self.leave(group)
        if roll < 0.20:
            return self.reconcile(group, self.rng.choice(self.members[group]))
        return self.commit(group)


def write_history(data_dir: str, records: int, groups: int, compact: bool) -> dict:
    config = Config({"log.dir": data_dir, "log.cleaner.enable": compact})
    broker = Broker(config)
    clog = broker.coordinator_log
    workload = Workload(groups)
    written = compactions = 0
    started = time.monotonic()

    async def run() -> None:
        nonlocal written, compactions
        pending = []
        while written < records:
            recs = workload.operation()
            written += len(recs)
            pending.append(clog.append_records([encode(r) for r in recs]))
            if len(pending) >= 100:  # 100 operations in flight share fsyncs
                await asyncio.gather(*pending)
                pending = []
                if compact and broker.compaction_candidates():
                    await broker.compact(OFFSETS_TOPIC, 0)
                    compactions += 1
        await asyncio.gather(*pending)

    asyncio.run(run())
    elapsed = time.monotonic() - started
    size = clog.log.size_bytes
    broker.close()
    return {"written": written, "seconds": elapsed, "bytes": size, "compactions": compactions}


def restart(data_dir: str) -> dict:
    """One timed restart (run in a fresh process, so no cache of an earlier pass helps)."""
    started = time.monotonic()
    broker = Broker(Config({"log.dir": data_dir}))
    opened = time.monotonic()
    shard = GroupCoordinatorShard()
    n = 0
    for _offset, key, value in broker.coordinator_log.read_all():
        shard.replay(decode(key, value))
        n += 1
    shard.on_loaded(int(time.time() * 1000))
    done = time.monotonic()
    groups = len(shard.state.groups)
    members = sum(len(g.members) for g in shard.state.groups.values())
    broker.close()
    return {"open_s": opened - started, "total_s": done - started, "replayed": n, "groups": groups, "members": members}


def serve_ready(data_dir: str) -> tuple[float, float, int, str]:
    """Seconds from starting `cohort serve` on ``data_dir`` until it listens and until ListGroups
    answers without COORDINATOR_LOAD_IN_PROGRESS (the coordinator log is replayed), the groups
    it lists, and the coordinator's own "loaded" log line."""
    from kio.index import load_request_schema

    from cohort.protocol.entities import build
    from cohort_testing import ServerProcess, WireClient

    log_path = os.path.join(os.path.dirname(data_dir), "server.log")
    started = time.monotonic()
    srv = ServerProcess(data_dir, log_path=log_path).start(timeout=120)
    listening = time.monotonic() - started
    try:
        request = build(load_request_schema(16, 5), states_filter=(), types_filter=())
        with WireClient(srv.port, timeout=60) as c:
            while True:
                resp = c.request(16, 5, request)
                if int(resp.error_code) == 0:
                    ready = time.monotonic() - started
                    break
                time.sleep(0.01)
    finally:
        srv.stop()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        loaded = [line.split(": ", 1)[-1].strip() for line in f if "group coordinator loaded" in line]
    return listening, ready, len(resp.groups), loaded[-1] if loaded else "?"


def bench_restart(args) -> None:
    base = tempfile.mkdtemp(prefix="cohort-durability-")
    try:
        for compact in (False, True):
            d = os.path.join(base, "compacted" if compact else "plain")
            w = write_history(d, args.records, args.groups, compact)
            out = subprocess.run([sys.executable, __file__, "_restart", d], check=True, capture_output=True, text=True)
            r = json.loads(out.stdout)
            label = "with compaction" if compact else "no compaction  "
            print(f"{label}: wrote {w['written']:,} records in {w['seconds']:.1f} s "
                  f"({w['written'] / w['seconds']:,.0f}/s, {w['compactions']} compactions), log {w['bytes'] / 1e6:.1f} MB")
            print(f"    restart: open {r['open_s']:.2f} s, replayed {r['replayed']:,} records, ready in {r['total_s']:.2f} s "
                  f"({r['groups']:,} groups, {r['members']:,} members)")
            listening, ready, listed, loaded = serve_ready(d)
            print(f"    cohort serve on it: listening after {listening:.2f} s (interpreter, imports, version table), "
                  f"group APIs ready after {ready:.2f} s, ListGroups lists {listed:,} groups; server log: {loaded}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def bench_commits(args) -> None:
    base = tempfile.mkdtemp(prefix="cohort-commits-")
    broker = Broker(Config({"log.dir": base}))
    clog = broker.coordinator_log
    fsyncs = 0
    real_flush = clog.log.flush

    def counting_flush():
        nonlocal fsyncs
        fsyncs += 1
        real_flush()

    clog.log.flush = counting_flush
    done = 0

    async def member(i: int, deadline: float) -> None:
        nonlocal done
        offset = 0
        while time.monotonic() < deadline:
            offset += 1
            rec = Record(OffsetCommitKey("bench-group", "topic-0", i), OffsetCommitValue(offset, 0, "", int(time.time() * 1000)))
            await clog.append_records([encode(rec)])
            done += 1

    async def run() -> float:
        start = time.monotonic()
        await asyncio.gather(*(member(i, start + args.seconds) for i in range(args.members)))
        return time.monotonic() - start

    elapsed = asyncio.run(run())
    broker.close()
    shutil.rmtree(base, ignore_errors=True)
    print(f"{args.members} members, durable commits through CoordinatorLog.append_records: "
          f"{done / elapsed:,.0f}/s ({done:,} in {elapsed:.1f} s, {fsyncs:,} fsyncs, {done / max(fsyncs, 1):.1f} commits per fsync)")


def bench_wire(args) -> None:
    from kio.index import load_request_schema
    from cohort.protocol.entities import build, nested
    from cohort_testing import ServerProcess, WireClient

    base = tempfile.mkdtemp(prefix="cohort-wire-")
    srv = ServerProcess(os.path.join(base, "data"), log_path=os.path.join(base, "server.log")).start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        for fut in admin.create_topics([NewTopic("bench", 1)]).values():
            fut.result(10)
        req_cls = load_request_schema(8, 9)
        topic_cls = nested(req_cls, "topics")
        part_cls = nested(topic_cls, "partitions")
        frames = []
        with WireClient(srv.port) as c:
            for i in range(args.members):
                body = build(req_cls, group_id=f"wire-group-{i}", generation_id_or_member_epoch=-1, member_id="",
                             group_instance_id=None, retention_time_ms=-1, topics=(build(topic_cls, name="bench", partitions=(
                                 build(part_cls, partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                                       committed_metadata=""),)),))
                frames.append(c.encode(8, 9, body, correlation_id=1))
            # check one answer decodes without error
            c.send_raw(frames[0])
            _, resp = c.decode(8, 9, c.recv_frame())
            err = resp.topics[0].partitions[0].error_code
            if int(err) != 0:
                raise SystemExit(f"OffsetCommit answered {err}")
        done = 0

        async def member(frame: bytes, deadline: float) -> None:
            nonlocal done
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            while time.monotonic() < deadline:
                writer.write(frame)
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                await reader.readexactly(size)
                done += 1
            writer.close()

        async def run() -> float:
            start = time.monotonic()
            await asyncio.gather(*(member(f, start + args.seconds) for f in frames))
            return time.monotonic() - start

        cpu_before = _cpu_seconds(srv.proc.pid)
        try:
            import uvloop  # the client's own overhead competes with the server for the 2 cores

            elapsed = uvloop.run(run())
        except ImportError:
            elapsed = asyncio.run(run())
        cpu = _cpu_seconds(srv.proc.pid) - cpu_before
        print(f"{args.members} connections, OffsetCommit v9 over TCP, each answer after its fsync: "
              f"{done / elapsed:,.0f}/s ({done:,} in {elapsed:.1f} s); server CPU {cpu:.2f} s "
              f"= {cpu / max(done, 1) * 1e6:.0f} us per commit")
    finally:
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "_restart":
        print(json.dumps(restart(sys.argv[2])))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["restart", "commits", "wire"])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--groups", type=int, default=2000)
    p.add_argument("--members", type=int, default=100)
    p.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args()
    {"restart": bench_restart, "commits": bench_commits, "wire": bench_wire}[args.what](args)


if __name__ == "__main__":
    main()

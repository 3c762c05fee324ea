"""Coordinator benchmarks: steady-state heartbeat, one join into a large group, record replay, and
a classic-protocol rebalance.

Usage: .venv/bin/python bench/coordinator.py [--members 10000] [--topics 10] [--partitions-per-topic 10000]
                                            [--assignor uniform] [--repeat 5] [--only consumer|classic]

"One member joins, first after a load" is the first rebalance of a freshly loaded shard, after a
full collection; "one member joins the running group" is a join into the group as it runs (each
joiner leaves again, untimed), the common case. Member ids are Kafka's (22 characters of base64)
unless --member-ids says otherwise.

Targets (issue 3): steady-state heartbeat <= 20 us in the core; one member joining a 10,000-member
group (target assignment + records) <= 100 ms; replay >= 200,000 records/s.
"""

from __future__ import annotations

import argparse
import base64
import gc
import random
import statistics
import time
import uuid

from cohort.coordinator import (
    ConsumerGroupHeartbeatRequest,
    CoordinatorConfig,
    GroupCoordinatorShard,
    MemberState,
    MetadataImage,
    Record,
    TopicImage,
    decode,
    encode,
)
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
from cohort.coordinator.consumer_protocol import Assignment as ProtocolAssignment
from cohort.coordinator.consumer_protocol import Subscription, encode_assignment, encode_subscription
from cohort.coordinator.requests import HeartbeatRequest, JoinGroupRequest, Parked, SyncGroupRequest
from cohort.assignors import GroupSpec, MemberSubscription, get
from cohort.coordinator.target import GroupTopicDescriber

GROUP = "bench"

# CPU time of this process: the machine is shared, and wall-clock time would also count the time
# other processes hold the cores. `--wall` switches back to wall-clock time.
CLOCK = time.process_time
MEMBER_IDS = "kafka"  # or "uuid", or "sequential" (member-000000, ...): --member-ids


def make_image(topics: int, partitions: int) -> MetadataImage:
    return MetadataImage.of(
        [TopicImage(f"topic-{i}", uuid.uuid5(uuid.NAMESPACE_OID, f"topic-{i}"), partitions) for i in range(topics)], 1)


def member_id_list(members: int) -> list[str]:
    rng = random.Random(848)  # seeded
    if MEMBER_IDS == "kafka":  # as Kafka's clients generate them: 22 characters of URL-safe base64
        return [base64.urlsafe_b64encode(rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()
                for _ in range(members)]
    if MEMBER_IDS == "uuid":
        return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(members)]
    return [f"member-{i:06d}" for i in range(members)]


def stable_group_records(image: MetadataImage, members: int, assignor_name: str) -> list[Record]:
    """The records of a group of `members` dynamic members, all stable at epoch 1 on one assignment."""
    names = tuple(sorted(image.by_name))
    topic_ids = frozenset(t.topic_id for t in image.topics)
    member_ids = member_id_list(members)
    spec = GroupSpec.of({m: MemberSubscription(topic_ids) for m in member_ids})
    assignment = get(assignor_name).assign(spec, GroupTopicDescriber(image, GROUP, None))
    records = []
    for m in member_ids:
        records.append(Record(ConsumerGroupMemberMetadataKey(GROUP, m), ConsumerGroupMemberMetadataValue(
            None, None, "client", "/127.0.0.1", names, None, 300_000, None)))
    records.append(Record(ConsumerGroupMetadataKey(GROUP),
                          ConsumerGroupMetadataValue(1, image.subscription_hash(names))))
    for m in member_ids:
        records.append(Record(ConsumerGroupTargetAssignmentMemberKey(GROUP, m),
                              ConsumerGroupTargetAssignmentMemberValue(assignment.get(m, {}))))
    records.append(Record(ConsumerGroupTargetAssignmentMetadataKey(GROUP), ConsumerGroupTargetAssignmentMetadataValue(1)))
    for m in member_ids:
        records.append(Record(ConsumerGroupCurrentMemberAssignmentKey(GROUP, m), ConsumerGroupCurrentMemberAssignmentValue(
            1, 0, MemberState.STABLE, assignment.get(m, {}), {})))
    return records


def load(image: MetadataImage, records: list[Record], assignor_name: str) -> GroupCoordinatorShard:
    shard = GroupCoordinatorShard(CoordinatorConfig(consumer_assignors=(assignor_name,)), image=image)
    for record in records:
        shard.replay(record)
    shard.on_loaded(0)
    shard.group(GROUP).refresh_metadata = False  # as after the first heartbeat following a load
    return shard


def bench_heartbeat(shard: GroupCoordinatorShard, iterations: int, with_owned: bool) -> float:
    group = shard.group(GROUP)
    requests = []
    for member in list(group.members.values())[:1000]:
        owned = dict(member.assigned_partitions) if with_owned else None
        requests.append(ConsumerGroupHeartbeatRequest(GROUP, member.member_id, 1, topic_partitions=owned,
                                                      client_id="client", client_host="/127.0.0.1"))
    handle = shard.handle
    n = len(requests)
    for r in requests:  # warm up
        handle(r, 1)
    gc.collect()
    gc.disable()
    start = CLOCK()
    for i in range(iterations):
        result = handle(requests[i % n], 2 + i)
    elapsed = CLOCK() - start
    gc.enable()
    assert result.records == [] and result.response.error_code == 0
    return elapsed / iterations * 1e6


def bench_join(image: MetadataImage, records: list[Record], assignor_name: str, repeat: int) -> list[float]:
    names = sorted(image.by_name)
    timings = []
    for _ in range(repeat):
        shard = load(image, records, assignor_name)
        request = ConsumerGroupHeartbeatRequest(GROUP, "newcomer", 0, rebalance_timeout_ms=300_000,
                                                subscribed_topic_names=names, topic_partitions={})
        gc.collect()
        start = CLOCK()
        result = shard.handle(request, 1)
        timings.append((CLOCK() - start) * 1e3)
        assert result.response.error_code == 0, result.response
    return timings


def bench_running_join(image: MetadataImage, records: list[Record], assignor_name: str, joins: int) -> list[float]:
    """CPU us of a member joining the running group (the heartbeat in; the new target, its records
    and the joiner's answer out), each joiner leaving again untimed; the first 20 are not counted."""
    names = sorted(image.by_name)
    shard = load(image, records, assignor_name)
    timings, now = [], 1
    for i in range(joins + 20):
        request = ConsumerGroupHeartbeatRequest(GROUP, f"joiner-{i}", 0, rebalance_timeout_ms=300_000,
                                                subscribed_topic_names=names, topic_partitions={})
        start = CLOCK()
        result = shard.handle(request, now)
        timings.append((CLOCK() - start) * 1e6)
        assert result.response.error_code == 0 and result.response.assignment is not None, result.response
        shard.handle(ConsumerGroupHeartbeatRequest(GROUP, result.response.member_id, -1), now + 1)
        now += 2
    return timings[20:]


def bench_replay(records: list[Record], image: MetadataImage, assignor_name: str, repeat: int) -> tuple[float, float]:
    """Best of `repeat` runs: records/s replaying Record objects, and decoding bytes + replaying."""
    encoded = [encode(r) for r in records]
    replay_best = decode_best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = CLOCK()
        shard = GroupCoordinatorShard(CoordinatorConfig(consumer_assignors=(assignor_name,)), image=image)
        for record in records:
            shard.replay(record)
        replay_best = min(replay_best, CLOCK() - start)
        gc.collect()
        start = CLOCK()
        shard = GroupCoordinatorShard(CoordinatorConfig(consumer_assignors=(assignor_name,)), image=image)
        for key, value in encoded:
            shard.replay(decode(key, value))
        decode_best = min(decode_best, CLOCK() - start)
    return len(records) / replay_best, len(records) / decode_best


def history_records(members: list[str], image: MetadataImage, rounds: int) -> list[Record]:
    """What a long-lived group keeps writing: offset commits and reconciliations of the same keys."""
    topics = [t.name for t in image.topics]
    out = []
    for r in range(rounds):
        for i, m in enumerate(members):
            topic = topics[i % len(topics)]
            out.append(Record(OffsetCommitKey(GROUP, topic, i), OffsetCommitValue(1000 * r + i, 1, "", 1000 * r)))
    return out


class ClassicRun:
    """Drives classic members against one shard on a simulated clock; only shard calls are timed."""

    def __init__(self, partitions: int):
        self.shard = GroupCoordinatorShard(CoordinatorConfig(), image=make_image(1, partitions))
        self.shard.on_loaded(0)
        self.partitions = partitions
        self.cpu = 0.0
        self.parked: dict[int, str] = {}
        self.joined: dict[str, object] = {}  # member id -> its JoinGroup response
        self.synced: dict[str, object] = {}
        self.subscription = encode_subscription(Subscription(("topic-0",)))

    def call(self, request, now: int):
        start = CLOCK()
        result = self.shard.handle(request, now)
        self.shard.commit(result.end_offset)
        self.cpu += CLOCK() - start
        return self._absorb(result, getattr(request, "member_id", ""))

    def expire(self, now: int) -> None:
        start = CLOCK()
        result = self.shard.expire(now)
        self.shard.commit(result.end_offset)
        self.cpu += CLOCK() - start
        self._absorb(result, "")

    def _absorb(self, result, member_id: str):
        for rid, response in result.completions:
            self._store(self.parked.pop(rid), response)
        response = result.response
        if isinstance(response, Parked):
            self.parked[response.request_id] = member_id
        elif member_id:
            self._store(member_id, response)
        return response

    def _store(self, member_id: str, response) -> None:
        (self.joined if hasattr(response, "generation_id") else self.synced)[member_id] = response

    def join(self, client: str, now: int, member_id: str = "") -> str:
        request = JoinGroupRequest("classic-bench", member_id, "consumer", (("range", self.subscription),), 10_000,
                                   60_000, client_id=client)
        response = self.call(request, now)
        if not member_id and not isinstance(response, Parked) and response.error_code == 79:
            member_id = response.member_id
            self.call(JoinGroupRequest("classic-bench", member_id, "consumer", (("range", self.subscription),),
                                       10_000, 60_000, client_id=client), now)
        return member_id

    def sync_all(self, generation: int, now: int) -> None:
        """Followers sync first (parked), then the leader with a range assignment (built untimed)."""
        leader = next(r for r in self.joined.values() if r.members)
        ids = sorted(m.member_id for m in leader.members)
        quota, extra = divmod(self.partitions, len(ids))
        assignments, start = [], 0
        for i, m in enumerate(ids):
            size = quota + (1 if i < extra else 0)
            assignments.append((m, encode_assignment(ProtocolAssignment((("topic-0", tuple(range(start, start + size))),)))))
            start += size
        for m in ids:
            if m != leader.member_id:
                self.call(SyncGroupRequest("classic-bench", generation, m), now)
        self.call(SyncGroupRequest("classic-bench", generation, leader.member_id, assignments=assignments), now)
        assert len(self.synced) == len(ids) and all(r.error_code == 0 for r in self.synced.values())


def bench_classic(members: int, partitions: int, repeat: int) -> None:
    """A classic group of `members` on `partitions` partitions forms, then one more member joins.

    Heartbeats every 3 s: the existing members learn about the rebalance from their next heartbeat
    (spread evenly over the interval) and re-join; the join phase ends with the last of them.
    Reports shard CPU time and the simulated time each phase waits on timers and heartbeats."""
    form_cpu, form_sim, join_cpu, join_sim = [], [], [], []
    for _ in range(repeat):
        run = ClassicRun(partitions)
        gc.collect()
        ids = [run.join(f"client-{i}", 0) for i in range(members)]
        now = 0
        while len(run.joined) < members:
            now = run.shard.next_deadline()
            run.expire(now)
        run.sync_all(1, now)
        form_cpu.append(run.cpu * 1e3)
        form_sim.append(now)
        run.cpu, run.joined, run.synced = 0.0, {}, {}
        start = now + 1_000
        newcomer = run.join("newcomer", start)
        interval = 3_000
        for i, member_id in enumerate(ids):
            t = start + (i + 1) * interval // members
            response = run.call(HeartbeatRequest("classic-bench", 1, member_id), t)
            assert response.error_code == 27, response  # REBALANCE_IN_PROGRESS
            run.join(f"client-{i}", t, member_id)
        assert newcomer in run.joined and len(run.joined) == members + 1
        run.sync_all(2, t)
        join_cpu.append(run.cpu * 1e3)
        join_sim.append(t - start)
    print(f"classic group forms ({members} members, {partitions} partitions, Empty -> Stable):")
    print(f"    shard CPU                            : median {statistics.median(form_cpu):7.2f} ms")
    print(f"    simulated time (initial delay)       : {statistics.median(form_sim):7.0f} ms")
    print("one more classic member joins (-> next Stable generation):")
    print(f"    shard CPU                            : median {statistics.median(join_cpu):7.2f} ms, "
          f"min {min(join_cpu):.2f} ms, max {max(join_cpu):.2f} ms")
    print(f"    simulated time (heartbeats, re-joins): {statistics.median(join_sim):7.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions-per-topic", type=int, default=10_000)
    parser.add_argument("--assignor", default="uniform")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--heartbeats", type=int, default=200_000)
    parser.add_argument("--wall", action="store_true", help="measure wall-clock instead of process CPU time")
    parser.add_argument("--only", choices=["consumer", "classic"], help="run only one family of cases")
    parser.add_argument("--member-ids", choices=["kafka", "uuid", "sequential"], default="kafka",
                        help="random ids as Kafka's clients send them (default), UUID strings, or member-000000, ...")
    parser.add_argument("--classic-members", type=int, default=10)
    parser.add_argument("--classic-partitions", type=int, default=900)
    args = parser.parse_args()
    global CLOCK, MEMBER_IDS
    MEMBER_IDS = args.member_ids
    if args.wall:
        CLOCK = time.perf_counter
    print(f"clock: {'wall' if args.wall else 'process CPU'} time")
    if args.only != "consumer":
        bench_classic(args.classic_members, args.classic_partitions, args.repeat)
    if args.only == "classic":
        return

    image = make_image(args.topics, args.partitions_per_topic)
    records = stable_group_records(image, args.members, args.assignor)
    total = args.topics * args.partitions_per_topic
    print(f"group: {args.members} members, {args.topics} topics x {args.partitions_per_topic} partitions "
          f"({total} partitions), assignor {args.assignor}")

    shard = load(image, records, args.assignor)
    print(f"steady-state heartbeat, owned=null       : {bench_heartbeat(shard, args.heartbeats, False):7.2f} us")
    print(f"steady-state heartbeat, owned partitions : {bench_heartbeat(shard, args.heartbeats, True):7.2f} us")

    timings = bench_join(image, records, args.assignor, args.repeat)
    print(f"one member joins, first after a load   : median {statistics.median(timings):7.1f} ms, "
          f"min {min(timings):.1f} ms, max {max(timings):.1f} ms")

    timings = bench_running_join(image, records, args.assignor, 200 * args.repeat)
    print(f"one member joins the running group     : median {statistics.median(timings):7.1f} us, "
          f"min {min(timings):.1f} us")

    member_ids = member_id_list(args.members)
    cold = records
    replay_rate, decode_rate = bench_replay(cold, image, args.assignor, args.repeat)
    print(f"load a fresh group ({len(cold)} records, every key new):")
    print(f"    replay                               : {replay_rate:10,.0f} records/s")
    print(f"    decode + replay                      : {decode_rate:10,.0f} records/s")
    log = records + history_records(member_ids, image, 5)
    replay_rate, decode_rate = bench_replay(log, image, args.assignor, args.repeat)
    print(f"load group + 5 rounds of offset commits ({len(log)} records):")
    print(f"    replay                               : {replay_rate:10,.0f} records/s")
    print(f"    decode + replay                      : {decode_rate:10,.0f} records/s")


if __name__ == "__main__":
    main()

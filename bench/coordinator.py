"""Coordinator benchmarks: steady-state heartbeat, one join into a large group, record replay.

Usage: .venv/bin/python bench/coordinator.py [--members 10000] [--topics 10] [--partitions-per-topic 10000]
                                            [--assignor uniform] [--repeat 5]

Targets (issue 3): steady-state heartbeat <= 20 us in the core; one member joining a 10,000-member
group (target assignment + records) <= 100 ms; replay >= 200,000 records/s.
"""

from __future__ import annotations

import argparse
import gc
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
from cohort.assignors import GroupSpec, MemberSubscription, get
from cohort.coordinator.target import GroupTopicDescriber

GROUP = "bench"

# CPU time of this process: the machine is shared, and wall-clock time would also count the time
# other processes hold the cores. `--wall` switches back to wall-clock time.
CLOCK = time.process_time


def make_image(topics: int, partitions: int) -> MetadataImage:
    return MetadataImage.of(
        [TopicImage(f"topic-{i}", uuid.uuid5(uuid.NAMESPACE_OID, f"topic-{i}"), partitions) for i in range(topics)], 1)


def stable_group_records(image: MetadataImage, members: int, assignor_name: str) -> list[Record]:
    """The records of a group of `members` dynamic members, all stable at epoch 1 on one assignment."""
    names = tuple(sorted(image.by_name))
    topic_ids = frozenset(t.topic_id for t in image.topics)
    member_ids = [f"member-{i:06d}" for i in range(members)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions-per-topic", type=int, default=10_000)
    parser.add_argument("--assignor", default="uniform")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--heartbeats", type=int, default=200_000)
    parser.add_argument("--wall", action="store_true", help="measure wall-clock instead of process CPU time")
    args = parser.parse_args()
    if args.wall:
        global CLOCK
        CLOCK = time.perf_counter
    print(f"clock: {'wall' if args.wall else 'process CPU'} time")

    image = make_image(args.topics, args.partitions_per_topic)
    records = stable_group_records(image, args.members, args.assignor)
    total = args.topics * args.partitions_per_topic
    print(f"group: {args.members} members, {args.topics} topics x {args.partitions_per_topic} partitions "
          f"({total} partitions), assignor {args.assignor}")

    shard = load(image, records, args.assignor)
    print(f"steady-state heartbeat, owned=null       : {bench_heartbeat(shard, args.heartbeats, False):7.2f} us")
    print(f"steady-state heartbeat, owned partitions : {bench_heartbeat(shard, args.heartbeats, True):7.2f} us")

    timings = bench_join(image, records, args.assignor, args.repeat)
    print(f"one member joins ({args.members} members)   : median {statistics.median(timings):7.1f} ms, "
          f"min {min(timings):.1f} ms, max {max(timings):.1f} ms")

    member_ids = [f"member-{i:06d}" for i in range(args.members)]
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

"""Lag evaluation benchmark: one `lag-evaluation-{group}` timer of a large group using `lag`.

Usage: .venv/bin/python bench/lag.py [--members 1000] [--topics 10] [--partitions-per-topic 1000]
                                     [--repeat 20] [--wall]

Target (issue 7): a group of 1,000 members on 10,000 partitions evaluated in <= 20 ms. The group is
loaded from records (every partition committed, log offsets fed), then `shard.expire(now)` is timed:

* evaluation, balanced: lag of every partition from log + committed offsets, member loads, ratio
  check; no decision (the steady state, every `group.lag.rebalance.interval.ms`);
* evaluation, decision: the same on a skewed backlog, when the streak is reached: the lag assignor
  runs on the current assignment and the epoch bump + new target records are written;
* lag of one topic (1,000 partitions) through the shard's local provider, for scale.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from coordinator import GROUP, make_image, stable_group_records  # noqa: E402  (bench/coordinator.py)

from cohort.coordinator import CoordinatorConfig, GroupCoordinatorShard, Record  # noqa: E402
from cohort.coordinator.lag import TopicOffsets  # noqa: E402
from cohort.coordinator.lag_balance import evaluation_key  # noqa: E402
from cohort.coordinator.records import OffsetCommitKey, OffsetCommitValue  # noqa: E402

INTERVAL = 100  # evaluations stay well inside the members' 45 s session timeout


def build(image, records, committed, ends):
    config = CoordinatorConfig(consumer_assignors=("lag",), lag_imbalance_evaluations=1,
                               lag_rebalance_min_interval_ms=0, lag_rebalance_interval_ms=INTERVAL)
    shard = GroupCoordinatorShard(config, image=image)
    for record in records:
        shard.replay(record)
    for record in committed:
        shard.replay(record)
    shard.on_loaded(0)
    shard.group(GROUP).refresh_metadata = False
    shard.update_log_offsets({t.topic_id: TopicOffsets((0,) * t.num_partitions, ends[t.name]) for t in image.topics})
    return shard


def timed(fn, clock) -> float:
    gc.collect()
    gc.disable()
    start = clock()
    fn()
    elapsed = clock() - start
    gc.enable()
    return elapsed * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions-per-topic", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--wall", action="store_true", help="wall-clock time instead of process CPU time")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    n = args.partitions_per_topic
    image = make_image(args.topics, n)
    records = stable_group_records(image, args.members, "lag")
    committed = [Record(OffsetCommitKey(GROUP, t.name, p), OffsetCommitValue(1_000 * p))
                 for t in image.topics for p in range(n)]
    even = {t.name: tuple(1_000 * p + 500 for p in range(n)) for t in image.topics}
    shard = build(image, records, committed, even)
    group = shard.group(GROUP)
    print(f"group: {len(group.members)} members, {args.topics * n} partitions "
          f"({'wall' if args.wall else 'CPU'} time, median of {args.repeat})")

    balanced = []
    for i in range(1, args.repeat + 1):
        now = i * INTERVAL
        result = None

        def run():
            nonlocal result
            result = shard.expire(now)
        balanced.append(timed(run, clock))
        assert result.response == [evaluation_key(GROUP)] and result.records == []
    print(f"evaluation, balanced (no decision):  median {statistics.median(balanced):6.2f} ms "
          f"(min {min(balanced):.2f}, max {max(balanced):.2f})")

    # Skewed: one member's partitions hold 100x the backlog of the others.
    heavy = {(t, p) for t, ps in group.target_assignment[sorted(group.members)[0]].items() for p in ps}
    by_id = {t.topic_id: t.name for t in image.topics}
    heavy_names = {(by_id[t], p) for t, p in heavy}
    skewed = {t.name: tuple(1_000 * p + (50_000 if (t.name, p) in heavy_names else 500) for p in range(n))
              for t in image.topics}
    decisions, moved = [], []
    for _ in range(max(3, args.repeat // 4)):
        shard = build(image, records, committed, skewed)
        result = None

        def run():
            nonlocal result
            result = shard.expire(INTERVAL)
        decisions.append(timed(run, clock))
        assert result.records, "the skewed group was expected to be rebalanced"
        moved.append(len(result.records) - 2)
    print(f"evaluation, decision (assignor run + records): median {statistics.median(decisions):6.2f} ms "
          f"(min {min(decisions):.2f}, max {max(decisions):.2f}); members with a new target: {moved[0]}")

    topic = image.topics[0]
    lags = []
    for _ in range(args.repeat):
        lags.append(timed(lambda: shard.local_lags(GROUP, topic.topic_id, n), clock))
    print(f"lag of one topic ({n} partitions):   median {statistics.median(lags):6.3f} ms")


if __name__ == "__main__":
    main()

"""Consumer lag from what the coordinator holds: log offsets (an input) and committed offsets.

The broker owns the partition logs, the shard owns the committed offsets, so the coordinator can
compute a group's lag without a second consumer or a network round trip (the KAFKA-5337
prototype's costs). The broker hands the shard a `LogOffsets` value — log start and end offset
per partition, by topic id — with `shard.update_log_offsets(...)`; storing it is O(1), so the
broker may refresh it as often as it likes.

Per partition, for a group:

* committed offset c within the log (c >= start): lag = max(end - c, 0);
* no committed offset, or one below the log start (the records were deleted, so the consumer
  resets): the group's `consumer.offset.reset` decides, as `auto.offset.reset` does in the
  client: `latest` (the default) gives 0, `earliest` gives end - start;
* a topic with no known log offsets (not fed yet, or deleted): no lag (None), which the lag
  assignor reads as 0 everywhere; partitions beyond the known ones (a topic that just grew) get 0.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cohort.coordinator.records import Assignment, OffsetCommitValue


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """Log start and end offsets of one topic's partitions (index = partition)."""

    start: Sequence[int]
    end: Sequence[int]


LogOffsets = Mapping[uuid.UUID, TopicOffsets]
NO_LOG_OFFSETS: LogOffsets = {}


def partition_lags(
    offsets: TopicOffsets,
    committed: Mapping[tuple[str, int], OffsetCommitValue] | None,
    topic_name: str,
    num_partitions: int,
    reset_to_earliest: bool,
) -> list[int]:
    """The group's lag on each of `num_partitions` partitions of one topic (see the module docstring)."""
    start, end = offsets.start, offsets.end
    known = min(len(start), len(end), num_partitions)
    lags = [0] * num_partitions
    get = (committed or {}).get
    for p in range(known):
        s, e = start[p], end[p]
        c = get((topic_name, p))
        if c is None or c.offset < s:
            if reset_to_earliest and e > s:
                lags[p] = e - s
        elif e > c.offset:
            lags[p] = e - c.offset
    return lags


def member_loads(
    assignments: Mapping[str, Assignment],
    lags: Mapping[uuid.UUID, Sequence[int] | None],
) -> dict[str, int]:
    """Total lag of each member's partitions (a topic without lags counts 0).

    Topics are looked up by `UUID.int`: `UUID.__hash__` is Python code, and a large group has one
    (member, topic) pair per member and topic."""
    by_int = {topic_id.int: topic_lags for topic_id, topic_lags in lags.items() if topic_lags}
    loads = {}
    for member_id, assignment in assignments.items():
        total = 0
        for topic_id, parts in assignment.items():
            topic_lags = by_int.get(topic_id.int)
            if topic_lags is not None:
                try:
                    total += sum(map(topic_lags.__getitem__, parts))
                except IndexError:  # a partition beyond the lags known (the topic was replaced)
                    n = len(topic_lags)
                    total += sum(topic_lags[p] for p in parts if p < n)
        loads[member_id] = total
    return loads


def imbalance(loads: Iterable[int]) -> float:
    """Heaviest load over mean load (1.0 for a group with no lag at all)."""
    values = list(loads)
    total = sum(values)
    if not values or total <= 0:
        return 1.0
    return max(values) * len(values) / total

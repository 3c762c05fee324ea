"""The homogeneous uniform builder in plain Python, for small groups.

The numpy builder pays microseconds per array operation whatever the size, which for a group
of a few members and partitions is several times the work itself. Small groups (the common
case) take this loop instead; it follows exactly the same rules and is tested against the
numpy path and against a transcription of Kafka's algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping

from cohort.assignors._uniform_common import partition_tuple, reuse
from cohort.assignors.api import GroupAssignment, PartitionAssignorError

# Up to about these sizes the plain loop beats numpy (measured for new and stable groups).
SMALL_PARTITIONS = 1024
SMALL_MEMBERS = 128


def assign_homogeneous_small(member_ids: list[str], currents: list[Mapping], topic_ids: list,
                             counts: list[int]) -> GroupAssignment:
    """The homogeneous builder (see _uniform_homogeneous) one partition at a time."""
    by_identity = {id(t): i for i, t in enumerate(topic_ids)}
    by_value = {t: i for i, t in enumerate(topic_ids)}
    owners = [[-1] * n for n in counts]
    member_count = len(member_ids)
    changed = [False] * member_count
    walks: list[list[tuple[int, int]]] = []
    for index, current in enumerate(currents):
        walk: list[tuple[int, int]] = []
        walks.append(walk)
        if not current:
            continue
        rows = []
        for topic_id, parts in current.items():
            t = by_identity.get(id(topic_id))
            if t is None:
                t = by_value.get(topic_id)
            if t is None or not parts:
                changed[index] = True
                continue
            if type(parts) is not tuple or any(a >= b for a, b in zip(parts, parts[1:])):
                changed[index] = True
                parts = partition_tuple(parts)
                if parts is None:
                    continue
            rows.append((t, parts))
        rows.sort()
        for t, parts in rows:
            owner = owners[t]
            for p in parts:
                if 0 <= p < len(owner) and owner[p] == -1:
                    owner[p] = index
                    walk.append((t, p))
                else:
                    changed[index] = True

    unassigned = [(t, p) for t, owner in enumerate(owners) for p, o in enumerate(owner) if o == -1]
    min_quota, extra = divmod(sum(counts), member_count)
    targets: list[list[tuple[int, int]]] = []
    unfilled = []
    for index, walk in enumerate(walks):
        quota, granted = min_quota, extra > 0
        if granted:
            quota += 1
        if len(walk) > quota:
            unassigned += walk[quota:]
            walk = walk[:quota]
            changed[index] = True
        targets.append(walk)
        quota -= len(walk)
        if granted and quota > 0 and member_count - index > extra:
            quota, granted = quota - 1, False
        if quota > 0:
            unfilled.append((index, quota))
            changed[index] = True
        if granted:
            extra -= 1
    position = 0
    for index, quota in unfilled:
        targets[index] = sorted(targets[index] + unassigned[position:position + quota])
        position += quota
    if position != len(unassigned):
        raise PartitionAssignorError("Partitions were left unassigned")

    result: GroupAssignment = {}
    for index, member_id in enumerate(member_ids):
        result[member_id] = _as_assignment(targets[index], topic_ids) if changed[index] else reuse(currents[index])
    return result


def _as_assignment(pairs: list[tuple[int, int]], topic_ids: list) -> dict:
    """Ascending (topic index, partition) pairs -> {topic id: partitions}."""
    grouped: dict = {}
    for t, p in pairs:
        grouped.setdefault(t, []).append(p)
    return {topic_ids[t]: tuple(ps) for t, ps in grouped.items()}

"""The homogeneous uniform builder in plain Python, for small groups.

The numpy builder pays microseconds per array operation whatever the size, which for a group
of a few members and partitions is several times the work itself. Small groups (the common
case) take the plain code here instead; it follows exactly the same rules and is tested against
the numpy path and against a transcription of Kafka's algorithm.

Three shortcuts cover the common cases and give the same result as the general loop:

* a new group (nobody owns anything): the partitions in canonical order are cut into one
  contiguous slice per member, the extra partitions going to the last members;
* a stable group (the current assignment is complete, well formed and balanced): it is a
  fixed point, so every member gets its current mapping back;
* a member joined or left (the current tuples, well formed, still cover every partition
  exactly once, but the shares are no longer balanced): the same rules applied to whole
  tuples, cut where a quota ends, instead of one partition at a time.

Anything else (lists, unsorted or out-of-range partitions, double claims, unowned partitions)
runs the rules one partition at a time, which also normalises the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain, groupby
from operator import ge, itemgetter

from cohort.assignors._uniform_common import ints, partition_tuple, reuse, reused
from cohort.assignors.api import GroupAssignment, PartitionAssignorError

# Up to about these sizes the plain loop beats numpy (measured for new and stable groups).
SMALL_PARTITIONS = 1024
SMALL_MEMBERS = 128


def assign_homogeneous_small(member_ids: list[str], currents: list[Mapping], topic_ids: list,
                             counts: list[int]) -> GroupAssignment:
    """The homogeneous builder (see _uniform_homogeneous) for members and topics in canonical order."""
    if not any(currents):
        return assign_new_group(member_ids, currents, topic_ids, counts)
    if len(counts) == 1:
        result = keep_single_topic(member_ids, currents, topic_ids[0], counts[0])
    else:
        result = keep_balanced(member_ids, currents, topic_ids, counts)
    if result is None:
        result = rebalance_tiled(member_ids, currents, topic_ids, counts)
    if result is None:
        result = assign_by_partition(member_ids, currents, topic_ids, counts)
    return result


def assign_new_group(member_ids: list[str], currents: list[Mapping], topic_ids: list,
                     counts: list[int]) -> GroupAssignment:
    """Nobody owns anything: every partition is unassigned and dealt out in canonical order.

    Each member hands its extra slot back while enough members remain to take the extra
    partitions, so the first `M - P % M` members get `P // M` and the last `P % M` one more;
    a member left with nothing keeps its (empty) current mapping, as in the general rules.
    """
    member_count = len(member_ids)
    min_quota, extra = divmod(sum(counts), member_count)
    cutoff = member_count - extra
    run = ints(max(counts, default=0))
    result: GroupAssignment = {}
    if len(counts) == 1:
        topic_id = topic_ids[0]
        start = 0
        for index, member_id in enumerate(member_ids):
            quota = min_quota + 1 if index >= cutoff else min_quota
            if quota:
                result[member_id] = {topic_id: run[start:start + quota]}
                start += quota
            else:
                result[member_id] = reuse(currents[index])
        return result
    t = start = 0
    for index, member_id in enumerate(member_ids):
        quota = min_quota + 1 if index >= cutoff else min_quota
        if not quota:
            result[member_id] = reuse(currents[index])
            continue
        assignment = {}
        while quota:
            available = counts[t] - start
            if not available:
                t, start = t + 1, 0
                continue
            taken = quota if quota < available else available
            assignment[topic_ids[t]] = run[start:start + taken]
            start += taken
            quota -= taken
        result[member_id] = assignment
    return result


def keep_single_topic(member_ids: list[str], currents: list[Mapping], topic_id, count: int) -> GroupAssignment | None:
    """The common stable group on one topic, or None: every member holds part of it, together all of it, balanced.

    Such an assignment is a fixed point (KAFKA-18688), so every member gets its mapping back.
    Usually each member holds a run: sorted by first partition, the tuples concatenate to
    exactly (0, ..., count-1). Otherwise the partitions together must sort to that, and each
    tuple must be sorted already. The sum of the partitions is an int only if they all are ints.
    Anything else takes the general rules.
    """
    member_count = len(currents)
    try:
        values = list(chain.from_iterable(map(dict.values, currents)))
        if len(values) != member_count or not _TUPLE_ONLY.issuperset(map(type, values)):
            return None
        if not _tiles(values, ints(count)[:count]):
            return None
    except TypeError:
        return None
    lengths = list(map(len, values))
    shortest = min(lengths)
    if (not shortest or max(lengths) > shortest + 1 or type(sum(chain.from_iterable(values))) is not int
            or list(chain.from_iterable(currents)).count(topic_id) != member_count):
        return None
    return _kept(member_ids, currents)


def keep_balanced(member_ids: list[str], currents: list[Mapping], topic_ids: list,
                  counts: list[int]) -> GroupAssignment | None:
    """`keep_single_topic` for several topics: per topic, the members' tuples make up the whole topic.

    Members may hold several topics (or nothing, when there are fewer partitions than members);
    the check is on each member's total. Entries must name the subscription's own topic id
    objects (as the assignor's output does); equal copies take the general rules.
    """
    if sum(counts) >= len(currents) and not all(currents):
        return None  # someone holds nothing although there is enough for everyone
    totals = _tiled_totals(currents, topic_ids, counts)
    if totals is None or max(totals) > min(totals) + 1:
        return None
    return _kept(member_ids, currents)


def _tiled_totals(currents: list[Mapping], topic_ids: list, counts: list[int],
                  walks: list | None = None) -> list[int] | None:
    """How many partitions each member holds, if every entry names one of the subscription's own
    topic id objects with a non-empty tuple of ints and, per topic, the tuples together are
    exactly the topic's partitions; else None. With ``walks``, each member's (topic index,
    partitions) entries are appended to it, in the member's order."""
    by_identity = {id(t): i for i, t in enumerate(topic_ids)}
    runs: list[list[tuple]] = [[] for _ in counts]
    totals = []
    try:
        for current in currents:
            total = 0
            walk = [] if walks is not None else None
            for topic_id, parts in current.items():
                t = by_identity.get(id(topic_id))
                if t is None or type(parts) is not tuple or not parts:
                    return None
                runs[t].append(parts)
                total += len(parts)
                if walk is not None:
                    walk.append((t, parts))
            totals.append(total)
            if walks is not None:
                walks.append(walk)
        every = ints(max(counts, default=0))
        for t, count in enumerate(counts):
            if not _tiles(runs[t], every[:count]):
                return None
    except TypeError:
        return None
    if type(sum(chain.from_iterable(chain.from_iterable(runs)))) is not int:
        return None
    return totals


def rebalance_tiled(member_ids: list[str], currents: list[Mapping], topic_ids: list,
                    counts: list[int]) -> GroupAssignment | None:
    """`assign_by_partition` for current tuples that tile every topic, or None: the rules run on
    whole tuples, cut where a member's quota ends, so a member joining a group costs a walk
    over its members' tuples rather than over every partition.

    As there: members in order keep the start of their walk (topics ascending) up to their
    quota, the rest of each walk queues in member order, and members below quota take from the
    queue's front and sort what they hold. Entries must name the subscription's own topic id
    objects; anything `keep_balanced` would refuse besides the balance takes the general rules.
    """
    entries: list[list[tuple[int, tuple]]] = []  # each member's (topic index, partitions), as listed
    helds = _tiled_totals(currents, topic_ids, counts, entries)
    if helds is None:
        return None

    walks: dict[int, list[tuple[int, tuple]]] = {}  # the members that change: what they end up with
    member_count = len(member_ids)
    min_quota, extra = divmod(sum(counts), member_count)
    queue: list[tuple[int, tuple]] = []  # (topic index, partitions) beyond their member's quota
    unfilled = []
    for index, held in enumerate(helds):
        quota, granted = min_quota, extra > 0
        if granted:
            quota += 1
        if held > quota:
            kept, room = [], quota
            for t, parts in _ascending(entries[index]):
                if room >= len(parts):
                    kept.append((t, parts))
                    room -= len(parts)
                elif room:
                    kept.append((t, parts[:room]))
                    queue.append((t, parts[room:]))
                    room = 0
                else:
                    queue.append((t, parts))
            walks[index], held = kept, quota
        quota -= held
        if granted and quota > 0 and member_count - index > extra:
            quota, granted = quota - 1, False
        if quota > 0:
            unfilled.append((index, quota))
        if granted:
            extra -= 1
    position = offset = 0  # the queue's front: entry, partitions of it already taken
    for index, quota in unfilled:
        taken = entries[index]  # a member below its quota kept all it held (_merged sorts)
        while quota and position < len(queue):
            t, parts = queue[position]
            end = min(offset + quota, len(parts))
            taken.append((t, parts[offset:end]))
            quota -= end - offset
            position, offset = (position + 1, 0) if end == len(parts) else (position, end)
        walks[index] = _merged(taken)
    if position != len(queue):
        raise PartitionAssignorError("Partitions were left unassigned")
    return {member_id: {topic_ids[t]: parts for t, parts in walks[index]} if index in walks else reuse(currents[index])
            for index, member_id in enumerate(member_ids)}


def _ascending(entries: list[tuple[int, tuple]]) -> list[tuple[int, tuple]]:
    """A member's entries, topics ascending (each is named once)."""
    return sorted(entries, key=_topic) if len(entries) > 1 else entries


def _merged(pieces: list[tuple[int, tuple]]) -> list[tuple[int, tuple]]:
    """(topic index, partitions) pieces -> one sorted tuple per topic, topics ascending."""
    by_topic: dict[int, list] = {}
    for t, parts in pieces:
        by_topic.setdefault(t, []).append(parts)
    return [(t, tuple(sorted(chain.from_iterable(by_topic[t])))) for t in sorted(by_topic)]


def _tiles(parts: list[tuple], every: tuple[int, ...]) -> bool:
    """Whether the tuples `parts`, each sorted, together are exactly `every` (0, ..., count-1).

    Usually each is a run, and sorted by first partition they concatenate to it. TypeError when a
    tuple holds something that does not compare with ints.
    """
    return sum(sorted(parts), ()) == every or (
        tuple(sorted(chain.from_iterable(parts))) == every and list(map(tuple, map(sorted, parts))) == parts)


def _kept(member_ids: list[str], currents: list[Mapping]) -> GroupAssignment:
    """Every member's current mapping handed back (as a dict when it is not one)."""
    return dict(zip(member_ids, reused(currents)))

_TUPLE_ONLY = frozenset((tuple,))


def assign_by_partition(member_ids: list[str], currents: list[Mapping], topic_ids: list,
                        counts: list[int]) -> GroupAssignment:
    """The builder one partition at a time, normalising any current assignment on the way."""
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
            if type(parts) is not tuple or any(map(ge, parts, parts[1:])):
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
    """(topic index, partition) pairs, grouped by ascending topic index -> {topic id: partitions}."""
    if not pairs:
        return {}
    t = pairs[0][0]
    if t == pairs[-1][0]:  # one topic
        return {topic_ids[t]: tuple(map(_partition, pairs))}
    return {topic_ids[t]: tuple(map(_partition, group)) for t, group in groupby(pairs, _topic)}


_topic = itemgetter(0)
_partition = itemgetter(1)

"""The homogeneous uniform builder on numpy arrays (see `_uniform_homogeneous` for the rules).

Everything per partition runs in numpy, and the output is assembled from runs of consecutive
partitions with C-level `map`s; members whose assignment did not change get their input mapping
back unchanged. Imported by the first assignment that needs it: the C builder and the plain one
serve the coordinator's groups, and importing numpy costs a process 0.18 s of CPU.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from itertools import chain
from operator import methodcaller

import numpy as np
import numpy.ma  # noqa: F401 - numpy 2.4 imports it lazily inside the first np.unique (6-9 ms, measured): not in a request

from cohort.assignors._uniform_common import ints, partition_tuple, reused, singles
from cohort.assignors.api import GroupAssignment, PartitionAssignorError


def assign_arrays(member_ids: list[str], currents: list[Mapping], topic_ids: list, counts: list[int]) -> GroupAssignment:
    """The assignment of members (in member id order) with their current assignments, over the
    topics (in topic order) with their partition counts."""
    member_count = len(member_ids)
    offsets = np.zeros(len(topic_ids) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(counts, np.int64, len(counts)), out=offsets[1:])
    total = int(offsets[-1])

    entries = _CurrentEntries(currents, topic_ids, offsets, total)
    owned = entries.owned
    quota = _quotas(owned, total, member_count)
    kept = np.minimum(owned, quota)
    remaining = quota - kept

    # Each member's entries are contiguous and ascending: it keeps a prefix and revokes the rest.
    keep = None
    revoked = entries.global_partition[:0]
    if bool((kept < owned).any()):
        ends = np.cumsum(owned)
        excess = np.flatnonzero(kept < owned)
        size = len(entries.keys) + 1
        boundary = (np.bincount(ends[excess] - owned[excess] + kept[excess], minlength=size)
                    - np.bincount(ends[excess], minlength=size))
        keep = np.cumsum(boundary[:-1]) == 0
        revoked = entries.global_partition[~keep]
    if int(remaining.sum()) != total - len(entries.keys) + len(revoked):
        raise PartitionAssignorError("Partitions were left unassigned")

    # The rest works on runs of consecutive partitions, not on single partitions.
    free_start, free_length = _mask_runs(entries.never_owned)
    revoked_start, revoked_length = _sequence_runs(revoked)
    receivers = np.flatnonzero(remaining)
    member, start, length = _deal(np.concatenate((free_start, revoked_start)),
                                  np.concatenate((free_length, revoked_length)), receivers, remaining[receivers])

    changed = entries.dirty | (kept != owned) | (remaining > 0)
    rebuild = np.repeat(changed, owned)
    if keep is not None:
        rebuild &= keep
    if bool(rebuild.any()):
        stride = max(total, 1)
        kept_keys = entries.keys[rebuild]
        kept_member, kept_start, kept_length = _key_runs(kept_keys // stride, kept_keys % stride)
        member = np.concatenate((kept_member, member))
        start = np.concatenate((kept_start, start))
        length = np.concatenate((kept_length, length))
    receiving, assignments = _member_dicts(member, start, length, offsets, topic_ids)

    if len(receiving) == member_count:
        return dict(zip(member_ids, assignments))
    result: GroupAssignment = dict(zip(member_ids, reused(currents)))
    emptied = changed.copy()
    emptied[receiving] = False
    for index in np.flatnonzero(emptied).tolist():
        result[member_ids[index]] = {}
    result.update(zip(map(member_ids.__getitem__, receiving), assignments))
    return result



class _CurrentEntries:
    """The valid current assignment as sorted keys `member * P + global partition`, one per owned partition.

    Entries for unsubscribed or unknown topics, out-of-range partitions and partitions claimed
    by an earlier member are dropped, and their members marked dirty so their output is rebuilt.
    The fast path (ascending tuples, topics known, nothing claimed twice) stays in C loops.
    """

    __slots__ = ("keys", "global_partition", "owned", "dirty", "never_owned")

    def __init__(self, currents: list[Mapping], topic_ids: list, offsets: np.ndarray, total: int):
        member_count = len(currents)
        dirty = np.zeros(member_count, dtype=bool)
        self.dirty = dirty
        self.never_owned = np.ones(total, dtype=bool)
        if not any(currents):  # a new group
            self.keys = self.global_partition = np.zeros(0, dtype=np.int64)
            self.owned = np.zeros(member_count, dtype=np.int64)
            return
        rows_per_member = np.fromiter(map(len, currents), np.int64, member_count)
        row_member = np.repeat(np.arange(member_count, dtype=np.int64), rows_per_member)
        row_topic_ids = list(chain.from_iterable(currents))
        try:
            row_parts = list(chain.from_iterable(map(dict.values, currents)))
        except TypeError:
            row_parts = list(chain.from_iterable(map(_values, currents)))
        # Output dicts carry the subscription's own topic id objects, so an identity lookup
        # almost always hits; it avoids hashing (uuid.UUID hashes in Python code).
        by_identity = {id(t): i for i, t in enumerate(topic_ids)}
        row_topic = list(map(by_identity.get, map(id, row_topic_ids)))
        lengths = list(map(len, row_parts))
        if None in row_topic or 0 in lengths or set(map(type, row_parts)) - {tuple}:
            row_member, row_topic, row_parts, lengths = _clean_rows(
                row_member.tolist(), row_topic_ids, row_topic, row_parts, topic_ids, dirty)

        row_member = np.asarray(row_member, dtype=np.int64)
        row_topic = np.asarray(row_topic, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        partition = np.fromiter(chain.from_iterable(row_parts), np.int64, int(lengths.sum()))
        stride = max(total, 1)
        row_offset = offsets[row_topic]
        keys = np.repeat(row_member * stride + row_offset, lengths) + partition
        row_last = np.cumsum(lengths) - 1
        # Strictly ascending keys mean every tuple is ascending; then its ends bound it.
        fast = (
            bool(np.all(keys[1:] > keys[:-1]))
            and bool(np.all(partition[row_last - lengths + 1] >= 0))
            and bool(np.all(partition[row_last] < offsets[row_topic + 1] - row_offset))
        )
        if fast:
            global_partition = np.repeat(row_offset, lengths) + partition
        else:
            keys, global_partition = _clean_entries(row_member, row_topic, lengths, partition, offsets, stride,
                                                    dirty)

        never_owned = self.never_owned
        never_owned[global_partition] = False
        if total - int(np.count_nonzero(never_owned)) != len(keys):
            # Ownership is exclusive: the first member (in member order) to claim a partition keeps it.
            _, first = np.unique(global_partition, return_index=True)
            winner = np.zeros(len(keys), dtype=bool)
            winner[first] = True
            dirty[keys[~winner] // stride] = True
            keys, global_partition = keys[winner], global_partition[winner]

        self.keys = keys
        self.global_partition = global_partition
        self.owned = np.bincount(keys // stride, minlength=member_count).astype(np.int64)


_values = methodcaller("values")


def _clean_rows(row_member, row_topic_ids, row_topic, row_parts, topic_ids, dirty):
    """Slow path: drop rows for unsubscribed topics or without partitions, normalise non-tuples."""
    by_value = {t: i for i, t in enumerate(topic_ids)}
    members, topics, parts_out, lengths = [], [], [], []
    for member, topic_id, t, parts in zip(row_member, row_topic_ids, row_topic, row_parts):
        if t is None:
            t = by_value.get(topic_id)
        if type(parts) is not tuple:
            dirty[member] = True
            parts = partition_tuple(parts) if t is not None else None
        if t is None or not parts:
            dirty[member] = True
            continue
        members.append(member)
        topics.append(t)
        parts_out.append(parts)
        lengths.append(len(parts))
    return members, topics, parts_out, lengths


def _clean_entries(row_member, row_topic, lengths, partition, offsets, stride, dirty):
    """Slow path: drop out-of-range partitions and repeats, sort each member's entries.

    A member whose tuples were not ascending is marked dirty (its output must be rebuilt);
    topics merely listed out of order only need sorting.
    """
    member = np.repeat(row_member, lengths)
    topic = np.repeat(row_topic, lengths)
    in_range = (partition >= 0) & (partition < offsets[topic + 1] - offsets[topic])
    dirty[member[~in_range]] = True
    same_row = np.repeat(np.arange(len(lengths)), lengths)
    unordered = (same_row[1:] == same_row[:-1]) & (partition[1:] <= partition[:-1])
    dirty[member[1:][unordered]] = True
    member, topic, partition = member[in_range], topic[in_range], partition[in_range]
    global_partition = offsets[topic] + partition
    keys = np.unique(member * stride + global_partition)
    return keys, keys % stride


def _quotas(owned: np.ndarray, total: int, member_count: int) -> np.ndarray:
    """Each member's quota: `min_quota`, plus one for the members that end up holding an extra slot.

    Walking members in order, a member offered the extra slot keeps it if it already owns more
    than `min_quota` partitions, or if the members left (itself included) are exactly as many as
    the extra slots left; otherwise it hands the slot back to later members. Vectorised: before
    that forced tail begins, the extra slots left when reaching member i are
    `max(extra - (number of earlier members owning more than min_quota), 0)`.
    """
    min_quota, extra = divmod(total, member_count)
    quota = np.full(member_count, min_quota, dtype=np.int64)
    if not extra:
        return quota
    over = owned > min_quota
    earlier_over = np.cumsum(over) - over
    extra_left = np.maximum(extra - earlier_over, 0)
    slack = (member_count - np.arange(member_count)) - extra_left
    forced = np.flatnonzero(slack == 0)
    holds = over & (extra_left > 0)
    if len(forced):
        holds[forced[0]:] = True
    quota += holds
    return quota


def _mask_runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each run of True in a boolean array."""
    edges = np.diff(mask.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    return starts, np.flatnonzero(edges == -1) - starts


def _sequence_runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each run of consecutive increasing values, in sequence order."""
    if not len(values):
        return values, values
    starts = np.flatnonzero(np.append(True, values[1:] != values[:-1] + 1))
    return values[starts], np.diff(np.append(starts, len(values)))


def _deal(run_start: np.ndarray, run_length: np.ndarray, receivers: np.ndarray, wanted: np.ndarray):
    """Hand out the sequence described by runs, in order, `wanted[i]` items to `receivers[i]`.

    Returns (member, start, length) pieces: the runs cut wherever a receiver's share begins.
    """
    if not len(receivers):
        return receivers, run_start, run_length
    if len(run_start) == 1:  # one run (e.g. nothing owned yet): each share is a slice of it
        return receivers, run_start[0] + np.cumsum(wanted) - wanted, wanted
    run_position = np.cumsum(run_length) - run_length
    share_position = np.cumsum(wanted) - wanted
    cuts = np.union1d(run_position, share_position)
    run = np.searchsorted(run_position, cuts, side="right") - 1
    share = np.searchsorted(share_position, cuts, side="right") - 1
    length = np.diff(np.append(cuts, int(run_length.sum())))
    return receivers[share], run_start[run] + cuts - run_position[run], length


def _key_runs(member: np.ndarray, partition: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(member, start, length) runs of a (member, global partition) sequence sorted by both."""
    if not len(member):
        return member, partition, partition
    starts = np.flatnonzero(np.append(True, (member[1:] != member[:-1]) | (partition[1:] != partition[:-1] + 1)))
    return member[starts], partition[starts], np.diff(np.append(starts, len(member)))


def _member_dicts(member: np.ndarray, start: np.ndarray, length: np.ndarray, offsets: np.ndarray,
                  topic_ids: list) -> tuple[list, list]:
    """Runs of global partitions per member -> (member indices, their {topic id: partitions}).

    Runs are split at topic boundaries, sorted, and merged per (member, topic). Values are
    slices of one shared tuple of ints and dicts are built with C-level `map`s: with tens of
    thousands of members, building the output is most of the cost.
    """
    if not len(member):
        return [], []
    topic = np.searchsorted(offsets, start, side="right") - 1
    last_topic = np.searchsorted(offsets, start + length - 1, side="right") - 1
    if bool((last_topic != topic).any()):
        pieces = last_topic - topic + 1
        origin = np.repeat(np.arange(len(member)), pieces)
        topic = topic[origin] + np.arange(len(origin)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        end = np.minimum(start[origin] + length[origin], offsets[topic + 1])
        start = np.maximum(start[origin], offsets[topic])
        member, length = member[origin], end - start
        nonempty = length > 0  # topics without partitions inside a run
        member, topic, start, length = member[nonempty], topic[nonempty], start[nonempty], length[nonempty]
    if len(member) > 1 and not bool(np.all((member[1:] > member[:-1])
                                           | ((member[1:] == member[:-1]) & (start[1:] > start[:-1])))):
        order = np.lexsort((start, member))
        member, topic, start, length = member[order], topic[order], start[order], length[order]

    group = np.flatnonzero(np.append(True, (member[1:] != member[:-1]) | (topic[1:] != topic[:-1])))
    first = start[group] - offsets[topic[group]]
    size = np.add.reduceat(length, group)
    widest = int(np.diff(offsets).max())
    runs_per_group = np.diff(np.append(group, len(member)))
    several = np.flatnonzero(runs_per_group > 1)
    if len(several) * 8 > len(group):
        # Many groups hold several runs (e.g. every k-th partition): expand to single partitions
        # once and slice each group's share out of that list.
        run_offset = start - offsets[topic] - (np.cumsum(length) - length)
        partitions = (np.repeat(run_offset, length) + np.arange(int(length.sum()))).tolist()
        bounds = np.cumsum(size).tolist()
        values = list(map(tuple, map(partitions.__getitem__, map(slice, [0] + bounds[:-1], bounds))))
    elif not len(several) and bool((size == 1).all()):
        values = list(map(singles(widest).__getitem__, first.tolist()))
    else:
        run = ints(widest)
        values = list(map(run.__getitem__, map(slice, first.tolist(), (first + size).tolist())))
        local = (start - offsets[topic]).tolist()
        lengths = length.tolist()
        for g in several.tolist():
            i = int(group[g])
            parts = (run[local[k]:local[k] + lengths[k]] for k in range(i, i + int(runs_per_group[g])))
            values[g] = tuple(chain.from_iterable(parts))
    # dict.fromkeys over a one-entry dict reuses its stored hash: topic ids such as uuid.UUID
    # hash in Python code, which would otherwise cost a call per output entry.
    group_topic = topic[group]
    templates = [None] * len(topic_ids)
    for t in np.flatnonzero(np.bincount(group_topic, minlength=len(topic_ids))).tolist():
        templates[t] = {topic_ids[t]: None}
    pieces = list(map(dict.fromkeys, map(templates.__getitem__, group_topic.tolist()), values))

    group_member = member[group]
    member_start = np.flatnonzero(np.append(True, group_member[1:] != group_member[:-1]))
    owners = group_member[member_start].tolist()
    if len(member_start) == len(group):
        return owners, pieces
    groups_per_member = np.diff(np.append(member_start, len(group)))
    assignments = [pieces[i] for i in member_start.tolist()]
    for m in np.flatnonzero(groups_per_member > 1).tolist():
        i = int(member_start[m])
        deque(map(assignments[m].update, pieces[i + 1:i + int(groups_per_member[m])]), maxlen=0)
    return owners, assignments

"""Score assignors on lag samples: rebuild each group at each sample, assign, measure. No Spark here.

Input is a stream of Arrow record batches of group samples (`cohort.pipeline.group_samples`): one
row per (group, sample) with the members and partitions as lists. A group's samples are
contiguous and ascending; groups come in any order, and a group may straddle batches
(`score_batches` holds it back until its last sample has arrived).

Per (group, sample) the Python work is only what the assignor interface needs (a `GroupSpec` and
a describer answering from the batch's columns) plus one walk over the returned assignment.
Every score is computed for the whole batch at once with numpy.

An assignor that offers `fresh_owners` (the three built-ins) gets the batch's fresh group samples
(first samples whose members share one subscription, `_Batch.fresh_everyone`) all at once, in
columns, and answers with arrays: the same owners as its `assign`, without a spec, a describer
or a result dict per group (one is built only for a group whose next sample needs it).

Each assignor gets its own previous result as the current assignment, so stickiness is measured
on its own history. A group's first sample is assigned fresh, and its moves are counted against
the owners observed in the sample (the cost of switching to this assignor); an observed owner
that is not a member of the sample does not count.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.assignors._arrays import ranges
from cohort.assignors._lag_small import assignment_of
from cohort.assignors.api import (
    EMPTY,
    FreshGroups,
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
)
from cohort.pipeline.codec import GROUP_COLUMN, _np, decode, list_offsets, unpack
from cohort.pipeline.group_samples import _codes, _run_starts, whole_groups

MASK_BITS = 62  # topics or racks of one sample that fit a bitmask; beyond it the slow paths run

SCORE_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("sample_seq", pa.int64()),
        ("sample_time", pa.timestamp("us", tz="UTC")),
        ("assignor", pa.string()),
        ("members", pa.int32()),
        ("partitions", pa.int32()),
        ("unassigned", pa.int32()),
        ("total_lag", pa.int64()),
        ("max_member_lag", pa.int64()),
        ("mean_member_lag", pa.float64()),
        ("max_member_partitions", pa.int32()),
        ("min_member_partitions", pa.int32()),
        ("partition_skew", pa.int32()),
        ("moved", pa.int32()),
        ("rack_local_fraction", pa.float64()),
        ("error", pa.string()),
    ]
)


class _Pairs:
    """A packed (position, value) pair column: bitmasks of the values per item, lists on demand.

    Positions are relative to each row's items (members or partitions), which start at
    `item_offsets[row]`.
    """

    def __init__(self, column: pa.Array, item_offsets: np.ndarray):
        pair_off, flat = unpack(column, np.int32)
        flat = flat.astype(np.int64)
        rows = np.repeat(np.arange(len(pair_off) - 1), np.diff(pair_off) // 2)
        item = item_offsets[rows] + flat[0::2]
        value = flat[1::2]
        if len(item) > 1 and (item[1:] < item[:-1]).any():
            order = np.argsort(item, kind="stable")
            item, value = item[order], value[order]
        self.item, self.value = item, value
        self.masks = np.zeros(int(item_offsets[-1]), np.int64)
        keep = value >= 0
        kept = item[keep]
        if len(kept):  # items ascending: OR each item's bits together (np.bitwise_or.at is 10x slower)
            starts = np.flatnonzero(np.concatenate(([True], kept[1:] != kept[:-1])))
            self.masks[kept[starts]] = np.bitwise_or.reduceat(np.left_shift(1, np.minimum(value[keep], MASK_BITS)), starts)

    def of(self, item: int) -> list[int]:
        """The values of one item, in pair order."""
        a, b = np.searchsorted(self.item, [item, item + 1])
        return [v for v in self.value[a:b].tolist() if v >= 0]


def _ascending_within(values: pa.Array, offsets: np.ndarray) -> np.ndarray:
    """Per row, whether its values (offsets[row]..offsets[row + 1]) are strictly ascending."""
    rows = len(offsets) - 1
    if len(values) < 2:
        return np.ones(rows, bool)
    n = len(values)
    less = _np(pc.less(values.slice(0, n - 1), values.slice(1)), null=False)
    # Pair i compares values i and i + 1; it counts for the row only when both are in it.
    inside = np.ones(n - 1, bool)
    inside[offsets[1:-1][(offsets[1:-1] > 0) & (offsets[1:-1] < n)] - 1] = False
    bad = np.flatnonzero(inside & ~less)
    ascending = np.ones(rows, bool)
    ascending[np.searchsorted(offsets, bad, side="right") - 1] = False
    return ascending


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    cs = np.concatenate(([0], np.cumsum(values)))
    return cs[offsets[1:]] - cs[offsets[:-1]]


class _RowTopics:
    """The topic describer of one group sample, answered from the batch's columns.

    Lags and replica racks are built only for the assignors that ask for them (`lag` reads lags,
    `range` racks, `uniform` neither), and at most once per sample; `partition_racks` hands out
    the cached tuple itself, with equal layouts shared across the batch.
    """

    __slots__ = ("_b", "_runs", "_lags", "_racks")

    def __init__(self, batch: "_Batch", runs: dict):
        self._b, self._runs = batch, runs  # topic -> run index
        self._lags: dict = {}
        self._racks: dict = {}

    def num_partitions(self, topic_id) -> int:
        r = self._runs.get(topic_id)
        return -1 if r is None else self._b.run_count[r]

    def partition_lags(self, topic_id):
        r = self._runs.get(topic_id)
        if r is None:
            return None
        lags = self._lags.get(r)
        if lags is None:
            lags = self._lags[r] = self._b.lags_of(r)
        return lags

    def racks_for_partition(self, topic_id, partition: int) -> frozenset:
        racks = self.partition_racks(topic_id)
        return frozenset() if partition >= len(racks) else racks[partition]

    def partition_racks(self, topic_id) -> tuple:
        r = self._runs.get(topic_id)
        if r is None:
            return ()
        racks = self._racks.get(r)
        if racks is None:
            racks = self._racks[r] = self._b.racks_of(r)
        return racks


def _subsets(cache: dict, names: tuple):
    """mask -> frozenset of the `names` whose bits are set, one table per distinct `names` in `cache`.

    A list of every subset when there are few names (indexing it is the cheapest lookup), else a
    dict that builds each subset on first use.
    """
    table = cache.get(names)
    if table is None:
        if len(names) <= 8:
            table = [frozenset(n for j, n in enumerate(names) if mask >> j & 1) for mask in range(1 << len(names))]
        else:
            table = _Subsets(names)
        cache[names] = table
    return table


class _Subsets(dict):
    """mask -> frozenset of those of `names`, built on first use (for rows with many racks)."""

    def __init__(self, names: tuple):
        super().__init__()
        self.names = names

    def __missing__(self, mask: int) -> frozenset:
        found = self[mask] = frozenset(n for j, n in enumerate(self.names) if mask >> j & 1)
        return found


class _Batch:
    """Column views of one batch of group samples, decoded once for all of its rows."""

    def __init__(self, batch: pa.RecordBatch):
        n = batch.num_rows
        col = batch.column
        group = batch.column(GROUP_COLUMN)
        first = np.ones(n, bool)
        if n > 1:
            first[1:] = _np(pc.not_equal(group.slice(1), group.slice(0, n - 1)), null=True)
        self.first_of_group = first

        self.m_off, member_ids = list_offsets(col(5))
        self._member_id_array = member_ids
        self.member_ids = member_ids.to_pylist()
        # Member ids as codes, to compare owners across a group's samples; when every row is a
        # group's first sample, owners are only compared within a row, where slots do.
        self.member_code = np.arange(len(member_ids)) if first.all() else _codes(member_ids)
        self.n_members = np.diff(self.m_off)
        instances = list_offsets(col(6))[1]
        self.instances = instances.to_pylist()
        # Rows whose members are all alike but for their id and rack (one subscription, no static
        # id): their specs are one per rack, and a member's is picked without a Python step.
        plain = _np(instances.is_null()).astype(np.int64) if len(instances) else np.zeros(0, np.int64)
        self.member_rack = unpack(col(7), np.int32)[1].astype(np.int64)

        self.t_off, topic_names = list_offsets(col(3))
        self._topic_name_array = topic_names
        self.topic_names = topic_names.to_pylist()
        self.r_off, rack_names = list_offsets(col(4))
        self.rack_names = rack_names.to_pylist()

        # Subscriptions as bitmasks over the row's topics; equal masks share one frozenset.
        self.subscribed = _Pairs(col(8), self.m_off)
        masks = self.subscribed.masks
        self.sub_mask = masks.tolist()
        starts = self.m_off[:-1]
        alike = np.zeros(n, bool)
        full = np.flatnonzero(self.n_members > 0)
        if len(full):
            same = np.minimum.reduceat(masks, starts[full]) == np.maximum.reduceat(masks, starts[full])
            alike[full] = same & (np.minimum.reduceat(plain, starts[full]) == 1)
        self.alike = (alike & (np.diff(self.t_off) <= MASK_BITS)).tolist()

        self.p_off, ptopic = unpack(col(9), np.int32)
        self.p_topic = ptopic.astype(np.int64)
        self.partition = unpack(col(10), np.int32)[1].astype(np.int64)
        self.lag = np.maximum(unpack(col(11), np.int64)[1], 0)
        self.observed = unpack(col(12), np.int32)[1].astype(np.int64)
        self.replicas = _Pairs(col(13), self.p_off)
        self.p_row = np.repeat(np.arange(n), np.diff(self.p_off))
        self.replica_mask = self.replicas.masks
        self.many_racks = np.diff(self.r_off) > MASK_BITS  # locality is not scored for these rows

        # Topic runs: partitions [run_start, run_end) are one topic of one row.
        run_starts = _run_starts(self.p_row, self.p_topic)
        run_ends = np.append(run_starts[1:], len(self.p_row))
        self.row_first_run = np.searchsorted(run_starts, self.p_off).tolist()
        first_p = self.partition[run_starts] if len(run_starts) else run_starts
        last_p = self.partition[run_ends - 1] if len(run_starts) else run_starts
        contiguous_runs = (first_p == 0) & (last_p == run_ends - run_starts - 1)
        contiguous = contiguous_runs.tolist()
        has_replicas = (self.replica_mask != 0).astype(np.int64)
        racked = (_segment_sums(has_replicas, np.append(run_starts, len(self.p_row))) > 0).tolist() if len(run_starts) else []
        run_rows = self.p_row[run_starts] if len(run_starts) else run_starts
        self.run_topic = list(map(self.topic_names.__getitem__, (self.t_off[run_rows] + self.p_topic[run_starts]).tolist()))
        self.run_arrays = (run_starts, run_ends, run_rows, contiguous_runs)
        self.run_start = run_starts.tolist()
        self.run_end = run_ends.tolist()
        self.run_contiguous, self.run_racked = contiguous, racked
        self.run_count = np.where(contiguous_runs, run_ends - run_starts, np.maximum(last_p + 1, 0)).tolist()
        # Partitions of runs that are not 0..n-1 in order: partition -> index in the batch.
        self.run_positions: dict[int, dict[int, int]] = {}
        for r in np.flatnonzero(~contiguous_runs).tolist():
            r0, r1, count = self.run_start[r], self.run_end[r], self.run_count[r]
            self.run_positions[r] = {p: i for i, p in enumerate(self.partition[r0:r1].tolist(), r0) if 0 <= p < count}
        self._rack_cache: dict[tuple, tuple] = {}
        self._rack_sets: dict[tuple, list] = {}

        self.prev_partition = self._previous_partitions(topic_names)

    def fresh_everyone(self) -> np.ndarray:
        """Rows that are a group's first sample, with one subscription covering every topic that has
        partitions (no static ids), members in id order and topics in name order, each topic's
        partitions 0..n-1 in order, and racks that fit a bitmask (`FreshGroups` numbers them): the
        groups an assignor's `fresh_owners` can take, laid out as it wants them."""
        n = len(self.first_of_group)
        ok = self.first_of_group & (self.n_members > 0) & np.array(self.alike, bool) & ~self.many_racks
        ok &= _ascending_within(self._member_id_array, self.m_off)
        ok &= _ascending_within(self._topic_name_array, self.t_off)
        run_starts, run_ends, run_rows, contiguous = self.run_arrays
        ok &= np.bincount(run_rows, minlength=n) > 0
        if not ok.any():
            return ok
        # Every run contiguous, subscribed (the row's one mask: its first member's), topics
        # ascending within the row.
        masks = self.subscribed.masks
        row_mask = masks[np.minimum(self.m_off[:-1], len(masks) - 1)]
        topic = self.p_topic[run_starts]
        good = contiguous & ((row_mask[run_rows] >> np.minimum(topic, MASK_BITS)) & 1).astype(bool)
        if len(topic) > 1:
            same_row = run_rows[1:] == run_rows[:-1]
            good[1:] &= ~same_row | (topic[1:] > topic[:-1])
        ok &= np.bincount(run_rows, weights=~good, minlength=n) == 0
        return ok

    @cached_property
    def _lag_list(self) -> list[int]:  # only for assignors that read lags
        return self.lag.tolist()

    @cached_property
    def _mask_list(self) -> list[int]:  # only for assignors that read replica racks
        return self.replica_mask.tolist()

    def lags_of(self, r: int) -> tuple:
        """Run r's lags by partition id (0 where a partition has no row)."""
        r0, r1 = self.run_start[r], self.run_end[r]
        if self.run_contiguous[r]:
            return tuple(self._lag_list[r0:r1])
        dense = [0] * self.run_count[r]
        for p, i in self.run_positions[r].items():
            dense[p] = self._lag_list[i]
        return tuple(dense)

    def racks_of(self, r: int) -> tuple:
        """Run r's replica racks by partition id (empty sets where unknown); equal layouts shared."""
        if not self.run_racked[r]:
            return ()
        r0, r1 = self.run_start[r], self.run_end[r]
        rows = range(r0, r1) if self.run_contiguous[r] else [self.run_positions[r].get(p) for p in range(self.run_count[r])]
        row = int(self.p_row[r0])
        if self.many_racks[row]:
            return tuple(frozenset() if i is None else self._replica_racks(i) for i in rows)
        names = tuple(self.rack_names[self.r_off[row] : self.r_off[row + 1]])
        masks = self._mask_list
        key = (names, tuple(masks[r0:r1] if self.run_contiguous[r] else [0 if i is None else masks[i] for i in rows]))
        racks = self._rack_cache.get(key)
        if racks is None:
            racks = self._rack_cache[key] = tuple(map(_subsets(self._rack_sets, names).__getitem__, key[1]))
        return racks

    def _replica_racks(self, i: int) -> frozenset:
        names, base = self.rack_names, self.r_off[self.p_row[i]]
        return frozenset(names[base + j] for j in self.replicas.of(i))

    def subscription(self, row: int, member: int) -> frozenset:
        """Member slot `member`'s subscription as topic names (the slow path for rows of many topics)."""
        base, names = self.t_off[row], self.topic_names
        return frozenset(names[base + j] for j in self.subscribed.of(member))

    def _previous_partitions(self, topic_names: pa.Array) -> np.ndarray:
        """Each partition's index in the group's previous sample (-1: none, or the group's first sample);
        `topic_names` are the batch's topic lists, flattened."""
        prev = np.full(len(self.p_row), -1, np.int64)
        if len(prev) == 0 or self.first_of_group.all():
            return prev
        tcode = _codes(topic_names)[self.t_off[self.p_row] + self.p_topic]
        width = int(self.partition.max()) + 2
        topics = int(tcode.max()) + 2
        key = (self.p_row * topics + tcode) * width + self.partition
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        want = key - topics * width
        at = np.minimum(np.searchsorted(ordered, want), len(ordered) - 1)
        found = (ordered[at] == want) & ~self.first_of_group[self.p_row]
        prev[found] = order[at[found]]
        return prev


def score_batches(batches: Iterable[pa.RecordBatch], assignors: Sequence) -> Iterator[pa.RecordBatch]:
    """Score batches of group samples (wide or stored); a group's samples may be split across the batches."""
    for batch in whole_groups(batches, GROUP_COLUMN):
        with _collector_paused():
            scored = _score(decode(batch), assignors)
        yield scored


@contextmanager
def _collector_paused():
    """Python's cycle collector off while a batch is scored, back on (if it was) afterwards.

    A batch allocates a few dicts and tuples per member and topic of every group, and the
    collector's passes over them (none of them in a cycle) cost 5-7 % of the scoring time
    (measured on 10,000 fleet groups per assignor); whatever cycles a batch leaves are collected
    after it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _score(batch: pa.RecordBatch, assignors: Sequence) -> pa.RecordBatch:
    """Run every assignor on every group sample of the batch; returns their score rows."""
    b = _Batch(batch)
    n_assignors = len(assignors)
    owners = [[-1] * len(b.p_row) for _ in assignors]  # lists: cheaper to fill one item at a time
    errors: list[dict] = [{} for _ in assignors]
    member_ids, instances, rack_names, member_rack = b.member_ids, b.instances, b.rack_names, b.member_rack.tolist()
    run_topic, run_start, run_positions = b.run_topic, b.run_start, b.run_positions
    sub_mask, topic_names, r_off_list = b.sub_mask, b.topic_names, b.r_off.tolist()
    homogeneous, heterogeneous = SubscriptionType.HOMOGENEOUS, SubscriptionType.HETEROGENEOUS
    previous: list = [None] * n_assignors
    m_off, t_off = b.m_off.tolist(), b.t_off.tolist()
    first_run = b.row_first_run
    alike = b.alike
    subscription_tables: dict = {}  # topic names -> mask -> subscription, shared across rows
    shared: dict = {}
    fresh_owner, fresh_done = _fresh_owners(b, assignors)
    continues = np.append(~b.first_of_group[1:], False)
    # Rows every assignor has assigned with the whole batch, whose result no later sample needs.
    finished = ~continues
    for done in fresh_done:
        finished &= False if done is None else done
    finished, continues = finished.tolist(), continues.tolist()
    fresh_done = [None if done is None else done.tolist() for done in fresh_done]
    for row, first in enumerate(b.first_of_group.tolist()):
        if first:
            previous = [None] * n_assignors
        if finished[row]:
            continue
        m0, m1 = m_off[row], m_off[row + 1]
        if m0 == m1:
            continue
        r0, r1 = first_run[row], first_run[row + 1]
        if r1 - r0 == 1:
            name = run_topic[r0]
            runs = {name: r0}
            base_of = {name: run_start[r0]}
        else:
            runs = {run_topic[r]: r for r in range(r0, r1)}
            base_of = {run_topic[r]: run_start[r] for r in range(r0, r1)}
        positions = {run_topic[r]: run_positions[r] for r in range(r0, r1) if r in run_positions} if run_positions else EMPTY
        describer = _RowTopics(b, runs)
        ids = member_ids[m0:m1]
        slot_of = dict(zip(ids, range(m1 - m0)))

        t0, t1 = t_off[row], t_off[row + 1]
        if alike[row]:
            sub = _subsets(subscription_tables, tuple(topic_names[t0:t1]))[sub_mask[m0]]
            rack_base, rack_end = r_off_list[row], r_off_list[row + 1]
            racks = None
            if rack_base == rack_end:
                alike_fresh = dict.fromkeys(ids, _shared_spec(shared, sub, None))
            else:  # by rack position + 1 (0: no rack)
                names = [None, *rack_names[rack_base:rack_end]]
                specs = [_shared_spec(shared, sub, name) for name in names]
                at = [r + 1 for r in member_rack[m0:m1]]
                alike_fresh = dict(zip(ids, map(specs.__getitem__, at)))
                racks = list(map(names.__getitem__, at))
            for a, assignor in enumerate(assignors):
                current = previous[a]
                if current is None and fresh_done[a] is not None and fresh_done[a][row]:
                    # Assigned with the whole batch; the next sample needs the result as a dict.
                    if continues[row]:
                        previous[a] = _fresh_result(b, row, ids, fresh_owner[a])
                    continue
                if current is None:
                    members = alike_fresh
                elif racks is None:
                    members = {mid: MemberSubscription(sub, None, None, current.get(mid, EMPTY)) for mid in ids}
                else:
                    members = {mid: MemberSubscription(sub, rk, None, current.get(mid, EMPTY)) for mid, rk in zip(ids, racks)}
                result = _assign(assignor, GroupSpec(members, homogeneous), describer, errors[a], row)
                if result is not None:
                    _record(result, owners[a], slot_of, positions, base_of)
                previous[a] = result
            continue
        if t1 - t0 > MASK_BITS:
            subscriptions = [b.subscription(row, m) for m in range(m0, m1)]
        else:
            subscriptions = list(map(_subsets(subscription_tables, tuple(topic_names[t0:t1])).__getitem__,
                                     sub_mask[m0:m1]))
        first_sub = subscriptions[0]
        sub_type = homogeneous
        for sub in subscriptions:
            if sub is not first_sub and sub != first_sub:
                sub_type = heterogeneous
                break
        rack_base = r_off_list[row]
        if rack_base == r_off_list[row + 1]:
            racks = [None] * (m1 - m0)
        else:
            racks = [None if r < 0 else rack_names[rack_base + r] for r in member_rack[m0:m1]]
        inst = instances[m0:m1]
        fresh = None
        for a, assignor in enumerate(assignors):
            current = previous[a]
            if current is None:
                if fresh is None:
                    # A MemberSubscription without a current assignment does not name its member:
                    # equal ones are shared across the batch.
                    fresh = {}
                    for mid, s, rk, ins in zip(ids, subscriptions, racks, inst):
                        sub = shared.get((s, rk, ins))
                        if sub is None:
                            sub = shared[s, rk, ins] = MemberSubscription(s, rk, ins)
                        fresh[mid] = sub
                members = fresh
            else:
                members = {
                    mid: MemberSubscription(s, rk, ins, current.get(mid, EMPTY))
                    for mid, s, rk, ins in zip(ids, subscriptions, racks, inst)
                }
            result = _assign(assignor, GroupSpec(members, sub_type), describer, errors[a], row)
            if result is not None:
                _record(result, owners[a], slot_of, positions, base_of)
            previous[a] = result
    owner = np.array(owners, np.int64).reshape(n_assignors, len(b.p_row))
    for a, computed in enumerate(fresh_owner):
        if computed is not None:
            owner[a] = np.where(computed >= 0, computed, owner[a])
    return _assemble(b, batch, assignors, owner, errors)


def _fresh_owners(b: _Batch, assignors: Sequence) -> tuple[list, list]:
    """Per assignor that offers `fresh_owners` (the built-ins): its owner slot of every partition
    of the batch's fresh rows it took (-1 elsewhere), and which rows it took; None for the others.

    The rows are `_Batch.fresh_everyone`'s: their members are in id order, so an owner's member
    index is its slot in the row.
    """
    owners: list = [None] * len(assignors)
    done: list = [None] * len(assignors)
    kernels = [getattr(assignor, "fresh_owners", None) for assignor in assignors]
    if not any(kernels):
        return owners, done
    fresh = b.fresh_everyone()
    rows = np.flatnonzero(fresh)
    if len(rows) == 0:
        return owners, done
    run_starts, run_ends, run_rows, _ = b.run_arrays
    runs = fresh[run_rows]
    renumber = np.cumsum(fresh) - 1
    at = np.flatnonzero(fresh[b.p_row])
    members = ranges(b.m_off[rows], b.n_members[rows])
    groups = FreshGroups(b.n_members[rows], renumber[run_rows[runs]], (run_ends - run_starts)[runs], b.lag[at],
                         b.member_rack[members], b.replica_mask[at])
    for a, kernel in enumerate(kernels):
        if kernel is not None:
            owner, took = kernel(groups)
            owners[a] = np.full(len(b.p_row), -1, np.int64)
            owners[a][at] = owner
            done[a] = np.zeros(len(fresh), bool)
            done[a][rows[np.asarray(took, bool)]] = True
    return owners, done


def _fresh_result(b: _Batch, row: int, ids: list, owner: np.ndarray) -> dict:
    """The assignment dict of a row taken by `fresh_owners`, built by the lag assignor's own
    builder: members in id order, topics in name order, ascending tuples, as `lag`'s and
    `uniform`'s `assign` return it (`range`, which may order a member's topics otherwise, ignores
    current assignments)."""
    runs = range(b.row_first_run[row], b.row_first_run[row + 1])
    return assignment_of(ids, [b.run_topic[r] for r in runs],
                         [owner[b.run_start[r] : b.run_end[r]].tolist() for r in runs], [None] * len(ids))


def _shared_spec(shared: dict, subscription: frozenset, rack) -> MemberSubscription:
    """The batch's one MemberSubscription without static id or current assignment for (subscription, rack)."""
    spec = shared.get((subscription, rack, None))
    if spec is None:
        spec = shared[subscription, rack, None] = MemberSubscription(subscription, rack)
    return spec


def _assign(assignor, spec: GroupSpec, describer, errors: dict, row: int):
    """The assignor's result, or None after noting its PartitionAssignorError for the row."""
    try:
        return assignor.assign(spec, describer)
    except PartitionAssignorError as e:
        errors[row] = f"{type(e).__name__}: {e}"
        return None


def _record(result, owner: list, slot_of: dict, positions, base_of: dict) -> None:
    """Write a result's owners (member slots within the row) into the batch's owner list."""
    for mid, tps in result.items():
        slot = slot_of[mid]
        for topic, parts in tps.items():
            pos = positions.get(topic)
            if pos is None:
                base = base_of.get(topic)
                if base is not None:
                    for p in parts:
                        owner[base + p] = slot
            else:
                for p in parts:
                    i = pos.get(p)
                    if i is not None:
                        owner[i] = slot


def _assemble(b: _Batch, batch: pa.RecordBatch, assignors, owner, errors) -> pa.RecordBatch:
    """Every score of every (group sample, assignor) of the batch, computed with whole-batch numpy."""
    scored = np.flatnonzero(b.n_members > 0)
    if len(scored) == 0:
        return pa.RecordBatch.from_pylist([], schema=SCORE_SCHEMA)
    n_members = b.n_members[scored]
    n_parts = np.diff(b.p_off)[scored]
    lag = b.lag
    # Partition sums over scored rows only: rows are contiguous, so sum per row and pick.
    total_lag = _segment_sums(lag, b.p_off)[scored]
    m_base = b.m_off[b.p_row]  # slot of the row's first member, per partition
    last_slot = len(b.member_code) - 1
    observed = np.where(b.observed >= 0, b.member_code[np.minimum(m_base + np.maximum(b.observed, 0), last_slot)], -1)
    has_prev = b.prev_partition >= 0
    m_starts = np.concatenate(([0], np.cumsum(n_members)))
    row_rack_many = b.many_racks[b.p_row]
    take = pa.array(scored)
    group_ids = batch.column(GROUP_COLUMN).take(take)
    sample_times = batch.column(1).take(take)
    seqs = batch.column(0).take(take)
    n_slots = len(b.member_ids)
    columns: dict[str, list] = {name: [] for name in SCORE_SCHEMA.names}
    for a, assignor in enumerate(assignors):
        own = owner[a]
        assigned = own >= 0
        slot = np.where(assigned, m_base + own, 0)  # only read where assigned
        idx = np.flatnonzero(assigned)
        owner_slot = slot[idx]
        # Every member slot belongs to a scored row (rows without members have no slots).
        member_lag = np.bincount(owner_slot, weights=lag[idx], minlength=n_slots)
        member_parts = np.bincount(owner_slot, minlength=n_slots)
        max_lag = np.maximum.reduceat(member_lag, m_starts[:-1])
        max_parts = np.maximum.reduceat(member_parts, m_starts[:-1])
        min_parts = np.minimum.reduceat(member_parts, m_starts[:-1])
        sum_lag = _segment_sums(member_lag, m_starts)
        unassigned = n_parts - _segment_sums(member_parts, m_starts)  # a row's partitions are its members' or nobody's

        # Moves: the owner (by member id) differs from the previous sample's, or at a group's first
        # sample from the owner observed in the sample.
        new_code = np.where(assigned, b.member_code[slot], -1)
        before = np.where(has_prev, new_code[np.maximum(b.prev_partition, 0)], observed)
        moved = _segment_sums(((before >= 0) & (new_code != before)).astype(np.int64), b.p_off)[scored]

        owner_rack = np.where(assigned, b.member_rack[slot], -1)
        known = assigned & (owner_rack >= 0) & (b.replica_mask != 0) & ~row_rack_many
        local = known & ((b.replica_mask >> np.clip(owner_rack, 0, MASK_BITS)) & 1).astype(bool)
        n_known = _segment_sums(known.astype(np.int64), b.p_off)[scored]
        n_local = _segment_sums(local.astype(np.int64), b.p_off)[scored]
        with np.errstate(invalid="ignore", divide="ignore"):
            locality = n_local / n_known
        failed_at = errors[a]
        failed = np.isin(scored, np.fromiter(failed_at, np.int64, len(failed_at)))
        columns["group_id"].append(group_ids)
        columns["sample_seq"].append(seqs)
        columns["sample_time"].append(sample_times)
        columns["assignor"].append(pa.array([assignor.name] * len(scored), pa.string()))
        columns["members"].append(pa.array(n_members, pa.int32()))
        columns["partitions"].append(pa.array(n_parts, pa.int32()))
        columns["unassigned"].append(pa.array(unassigned, pa.int32(), mask=failed))
        columns["total_lag"].append(pa.array(total_lag, pa.int64()))
        columns["max_member_lag"].append(pa.array(max_lag.astype(np.int64), pa.int64(), mask=failed))
        columns["mean_member_lag"].append(pa.array(sum_lag / n_members, pa.float64(), mask=failed))
        columns["max_member_partitions"].append(pa.array(max_parts, pa.int32(), mask=failed))
        columns["min_member_partitions"].append(pa.array(min_parts, pa.int32(), mask=failed))
        columns["partition_skew"].append(pa.array(max_parts - min_parts, pa.int32(), mask=failed))
        columns["moved"].append(pa.array(moved, pa.int32(), mask=failed))
        columns["rack_local_fraction"].append(pa.array(locality, pa.float64(), mask=failed | (n_known == 0)))
        columns["error"].append(pa.array([failed_at.get(s) for s in scored.tolist()] if failed_at else pa.nulls(len(scored), pa.string()), pa.string()))
    arrays = [pa.concat_arrays(parts) if len(parts) > 1 else parts[0] for parts in map(columns.get, SCORE_SCHEMA.names)]
    return pa.RecordBatch.from_arrays(arrays, schema=SCORE_SCHEMA)

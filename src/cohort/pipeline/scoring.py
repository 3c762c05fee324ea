"""Score assignors on lag samples: rebuild each group at each sample, assign, measure. No Spark here.

Input is a stream of Arrow record batches of *evaluation rows* (`EVAL_SCHEMA`): the member rows and
partition rows of the lag-sample layout in one table. A group's rows are contiguous and ordered by
(sample_seq, kind, topic, partition, member_id), so member rows (kind 0) come before partition
rows (kind 1); groups themselves may come in any order. A group may straddle batches;
`score_batches` holds a group back until its last row has arrived.

Per (group, sample) the Python work is only what the assignor interface needs (a `GroupSpec` and
a `TopicDescriber` built from list slices) plus one walk over the returned assignment. Every score
is then computed for the whole batch at once with numpy, which is what makes a million groups
affordable: per-group pandas costs ~1 ms, this costs tens of microseconds.

Each assignor gets its own previous result as the current assignment, so stickiness is measured
on its own history; at a group's first sample that is the owners observed in the sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.assignors.api import (
    EMPTY,
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicDescriber,
    TopicMetadata,
)

MEMBER_ROW, PARTITION_ROW = 0, 1

EVAL_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("sample_seq", pa.int64()),
        ("sample_time", pa.timestamp("us", tz="UTC")),
        ("kind", pa.int8()),
        ("member_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("lag", pa.int64()),
        ("rack", pa.string()),
        ("instance_id", pa.string()),
        ("subscribed_topics", pa.list_(pa.string())),
        ("replica_racks", pa.list_(pa.string())),
    ]
)

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


def _run_starts(*keys: np.ndarray) -> np.ndarray:
    """Indices where any of the (equal-length) key arrays changes value, starting with 0."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, np.int64)
    change = np.zeros(n, bool)
    change[0] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(change)


def _codes(array: pa.Array) -> tuple[np.ndarray, list]:
    """Dictionary codes (-1 for null) and the dictionary as Python values."""
    encoded = pc.dictionary_encode(array)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    if encoded.indices.null_count:
        codes = np.where(encoded.indices.is_null().to_numpy(zero_copy_only=False), -1, codes)
    return codes.astype(np.int64), encoded.dictionary.to_pylist()


def _list_masks(lists: pa.ListArray, codes_of: dict) -> np.ndarray:
    """A bitmask per row of which racks (by code) a list<string> holds; 0 for empty or null lists."""
    offsets = lists.offsets.to_numpy()
    values = lists.flatten().to_pylist()
    masks = np.zeros(len(lists), np.int64)
    if not values:
        return masks
    bits = np.array([1 << codes_of[v] for v in values], np.int64)
    lengths = np.diff(offsets)
    nonempty = np.flatnonzero(lengths > 0)
    masks[nonempty] = np.bitwise_or.reduceat(bits, offsets[:-1][nonempty] - offsets[0])
    return masks


class _Batch:
    """Column views of one batch of evaluation rows, decoded once for all of its groups."""

    def __init__(self, batch: pa.RecordBatch):
        n = self.n = batch.num_rows
        col = batch.column
        seq = self.seq = col(1).to_numpy(zero_copy_only=False)
        kind = self.kind = col(3).to_numpy(zero_copy_only=False)
        group_codes, _ = _codes(col(0))
        seg_starts = self.seg_starts = _run_starts(group_codes, seq)
        seg_ends = self.seg_ends = np.append(seg_starts[1:], n)
        self.first_of_group = np.isin(seg_starts, _run_starts(group_codes))
        is_member = kind == MEMBER_ROW
        self.n_members = np.add.reduceat(is_member.astype(np.int64), seg_starts)
        self.seg_id = seg_id = np.repeat(np.arange(len(seg_starts)), seg_ends - seg_starts)
        self.member_code, member_names = _codes(col(4))
        topic_codes, topic_names = _codes(col(5))
        self.partition = partition = col(6).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        self.lag = np.maximum(col(7).fill_null(0).to_numpy(zero_copy_only=False), 0)

        # Racks: one code space for member racks and replica racks, replica racks as bitmasks.
        rack_codes, rack_names = _codes(pa.concat_arrays([col(8), col(11).flatten()]))
        self.rack_names = rack_names
        self.member_rack = rack_codes[:n]
        if len(rack_names) <= 62:
            self.replica_mask = _list_masks(col(11), {name: i for i, name in enumerate(rack_names)})
        else:  # too many racks for a bitmask: locality is not scored
            self.replica_mask = np.zeros(n, np.int64)

        # Per member row: id, subscription (frozensets shared between equal lists), rack, instance id.
        member_rows = np.flatnonzero(is_member)
        codes = self.member_code[member_rows].tolist()
        self.member_ids = [None] * n
        for row, code in zip(member_rows.tolist(), codes):
            self.member_ids[row] = member_names[code]
        # Subscriptions: equal lists share one frozenset, found by joining each list into one string.
        joined = pc.binary_join(col(10).take(pa.array(member_rows)), "\x00")
        sub_codes, sub_keys = _codes(joined)
        sub_sets = [frozenset(key.split("\x00")) if key else frozenset() for key in sub_keys]
        subscribed = [None] * n
        for row, code in zip(member_rows.tolist(), sub_codes.tolist()):
            subscribed[row] = sub_sets[code] if code >= 0 else frozenset()
        self.subscribed = subscribed
        racks = self.member_rack.tolist()
        self.member_rack_names = rack_list = [None] * n
        for row in np.flatnonzero(self.member_rack >= 0).tolist():
            rack_list[row] = rack_names[racks[row]]
        self.instance = instance = [None] * n
        instance_col = col(9)
        if instance_col.null_count < n:
            valid = np.flatnonzero(instance_col.is_valid().to_numpy(zero_copy_only=False))
            for row, value in zip(valid.tolist(), instance_col.take(pa.array(valid)).to_pylist()):
                instance[row] = value

        # Topic runs: rows [run_start, run_end) are one topic of one (group, sample).
        topic_key = np.where(is_member, -1, topic_codes)
        run_starts = _run_starts(seg_id, topic_key)
        run_starts = run_starts[topic_key[run_starts] >= 0]
        run_ends = np.minimum(np.append(run_starts[1:], n), seg_ends[seg_id[run_starts]])
        self.seg_first_run = np.searchsorted(run_starts, seg_starts).tolist()
        self.seg_last_run = np.searchsorted(run_starts, seg_ends).tolist()
        first_p = partition[run_starts]
        last_p = partition[run_ends - 1]
        contiguous = ((first_p == 0) & (last_p == run_ends - run_starts - 1)).tolist()
        racked = (np.maximum.reduceat(self.replica_mask, run_starts) != 0).tolist() if len(run_starts) else []
        self.run_topic = [topic_names[c] for c in topic_key[run_starts].tolist()]
        self.run_start = run_starts.tolist()
        self.run_meta = self._topic_metadata(run_starts.tolist(), run_ends.tolist(), contiguous, racked)

        # Align each partition row with the same partition in the group's previous sample (-1: none).
        self.prev_row = self._previous_rows(topic_key, len(topic_names))

    def _topic_metadata(self, starts, ends, contiguous, racked):
        lag_list = self.lag.tolist()
        partition_list = self.partition.tolist()
        mask_list = self.replica_mask.tolist()
        rack_cache: dict[tuple, tuple] = {}
        self._rack_sets: dict[int, frozenset] = {}
        meta = []
        self.run_positions = positions = {}
        for r, (r0, r1) in enumerate(zip(starts, ends)):
            if contiguous[r]:
                count = r1 - r0
                lags = tuple(lag_list[r0:r1])
                masks = mask_list[r0:r1] if racked[r] else None
            else:
                count = partition_list[r1 - 1] + 1
                dense = [0] * count
                masks = [0] * count
                pos = {}
                for row in range(r0, r1):
                    p = partition_list[row]
                    dense[p] = lag_list[row]
                    masks[p] = mask_list[row]
                    pos[p] = row
                positions[r] = pos
                lags = tuple(dense)
            racks = ()
            if racked[r]:
                key = tuple(masks)
                racks = rack_cache.get(key)
                if racks is None:
                    sets = self._rack_sets
                    racks = rack_cache[key] = tuple([sets.get(m) or self._racks_of(m) for m in masks])
            meta.append(TopicMetadata(count, racks, lags))
        return meta

    def _racks_of(self, mask: int) -> frozenset:
        racks = self._rack_sets[mask] = frozenset(name for i, name in enumerate(self.rack_names) if mask >> i & 1)
        return racks

    def _previous_rows(self, topic_key: np.ndarray, n_topics: int) -> np.ndarray:
        rows = np.flatnonzero(topic_key >= 0)
        prev = np.full(self.n, -1, np.int64)
        if len(rows) == 0:
            return prev
        width = int(self.partition.max()) + 2
        seg = self.seg_id[rows]
        key = (seg * (n_topics + 1) + topic_key[rows]) * width + self.partition[rows]
        order = np.argsort(key, kind="stable")
        sorted_keys = key[order]
        prev_key = key - (n_topics + 1) * width
        at = np.searchsorted(sorted_keys, prev_key)
        at_clipped = np.minimum(at, len(sorted_keys) - 1)
        found = (at < len(sorted_keys)) & (sorted_keys[at_clipped] == prev_key) & ~self.first_of_group[seg]
        prev[rows[found]] = rows[order[at_clipped[found]]]
        return prev


def score_batches(batches: Iterable[pa.RecordBatch], assignors: Sequence) -> Iterator[pa.RecordBatch]:
    """Score rows of whole groups; groups may be split across the incoming batches."""
    pending: list[pa.RecordBatch] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        last_group = batch.column(0)[-1]
        if len(pending) > 1 and batch.column(0)[0] == last_group:
            continue  # the whole batch is one group that may go on
        merged = _merge(pending)
        cut = int(np.argmax(pc.equal(merged.column(0), last_group).to_numpy(zero_copy_only=False)))
        if cut == 0:
            pending = [merged]
            continue
        yield _score(merged.slice(0, cut), assignors)
        pending = [merged.slice(cut)]
    if pending:
        yield _score(_merge(pending), assignors)


def _merge(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _score(batch: pa.RecordBatch, assignors: Sequence) -> pa.RecordBatch:
    """Run every assignor on every (group, sample) of the batch; returns their score rows."""
    b = _Batch(batch)
    n_assignors = len(assignors)
    owner = np.full((n_assignors, b.n), -1, np.int64)
    errors: list[dict] = [{} for _ in assignors]
    member_ids, subscribed, racks, instance = b.member_ids, b.subscribed, b.member_rack_names, b.instance
    run_topic, run_meta, run_start, run_positions = b.run_topic, b.run_meta, b.run_start, b.run_positions
    homogeneous, heterogeneous = SubscriptionType.HOMOGENEOUS, SubscriptionType.HETEROGENEOUS
    previous: list = [None] * n_assignors
    fresh_previous = [None] * n_assignors
    segments = zip(
        b.seg_starts.tolist(), b.n_members.tolist(), b.first_of_group.tolist(), b.seg_first_run, b.seg_last_run
    )
    for s, (start, n_m, first, r0, r1) in enumerate(segments):
        if first:
            previous = list(fresh_previous)
        if n_m == 0:
            continue
        member_rows = range(start, start + n_m)
        slot_of = {member_ids[row]: row for row in member_rows}
        if r1 - r0 == 1:
            name = run_topic[r0]
            topics = {name: run_meta[r0]}
            base_of = {name: run_start[r0]}
        else:
            topics = {run_topic[r]: run_meta[r] for r in range(r0, r1)}
            base_of = {run_topic[r]: run_start[r] for r in range(r0, r1)}
        positions = {run_topic[r]: run_positions[r] for r in range(r0, r1) if r in run_positions} if run_positions else EMPTY
        describer = TopicDescriber(topics)
        first_sub = subscribed[start]
        sub_type = homogeneous
        for row in member_rows:
            if subscribed[row] != first_sub:
                sub_type = heterogeneous
                break
        fresh = None
        for a, assignor in enumerate(assignors):
            current = previous[a]
            if current is None:
                if fresh is None:
                    fresh = {member_ids[row]: MemberSubscription(subscribed[row], racks[row], instance[row]) for row in member_rows}
                members = fresh
            else:
                members = {
                    member_ids[row]: MemberSubscription(
                        subscribed[row], racks[row], instance[row], current.get(member_ids[row], EMPTY)
                    )
                    for row in member_rows
                }
            try:
                result = assignor.assign(GroupSpec(members, sub_type), describer)
            except PartitionAssignorError as e:
                errors[a][s] = f"{type(e).__name__}: {e}"
                previous[a] = None
                continue
            owner_a = owner[a]
            for mid, tps in result.items():
                row_m = slot_of[mid]
                for topic, parts in tps.items():
                    pos = positions.get(topic)
                    if pos is None:
                        base = base_of.get(topic)
                        if base is not None:
                            for p in parts:
                                owner_a[base + p] = row_m
                    else:
                        for p in parts:
                            row = pos.get(p)
                            if row is not None:
                                owner_a[row] = row_m
            previous[a] = result
    return _assemble(b, batch, assignors, owner, errors)


def _segment_sums(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    cs = np.concatenate(([0], np.cumsum(values)))
    return cs[ends] - cs[starts]


def _assemble(b: _Batch, batch: pa.RecordBatch, assignors, owner, errors) -> pa.RecordBatch:
    """Every score of every (group, sample, assignor) of the batch, computed with whole-batch numpy."""
    seg = np.flatnonzero(b.n_members > 0)
    starts, ends = b.seg_starts[seg], b.seg_ends[seg]
    n_members = b.n_members[seg]
    n_parts = (ends - starts) - n_members
    total_lag = _segment_sums(b.lag, starts, ends)
    member_rows = np.flatnonzero(b.kind == MEMBER_ROW)  # all in scored segments, in segment order
    m_starts = np.concatenate(([0], np.cumsum(n_members)[:-1]))
    is_partition = b.kind == PARTITION_ROW
    lag, rack, mask, prev_row = b.lag, b.member_rack, b.replica_mask, b.prev_row
    has_prev = prev_row >= 0
    first_sample = is_partition & b.first_of_group[b.seg_id]
    observed = np.where(first_sample, b.member_code, -1)  # the owner recorded in the first sample
    group_ids = batch.column(0).take(pa.array(starts))
    sample_times = batch.column(2).take(pa.array(starts))
    seqs = pa.array(b.seq[starts], pa.int64())
    columns: dict[str, list] = {name: [] for name in SCORE_SCHEMA.names}
    for a, assignor in enumerate(assignors):
        own = owner[a]
        assigned = own >= 0
        rows = np.flatnonzero(assigned)
        member_lag = np.bincount(own[rows], weights=lag[rows], minlength=b.n)[member_rows]
        member_parts = np.bincount(own[rows], minlength=b.n)[member_rows]
        max_lag = np.maximum.reduceat(member_lag, m_starts) if len(seg) else member_lag
        max_parts = np.maximum.reduceat(member_parts, m_starts) if len(seg) else member_parts
        min_parts = np.minimum.reduceat(member_parts, m_starts) if len(seg) else member_parts
        sum_lag = _segment_sums(member_lag, m_starts, m_starts + n_members)
        unassigned = n_parts - _segment_sums(assigned.astype(np.int64), starts, ends)

        # Moves: the owner (by member id code) differs from the previous sample's, or at a group's
        # first sample from the owner recorded in the sample (the cost of switching to this assignor).
        new_code = np.where(assigned, b.member_code[np.where(assigned, own, 0)], -1)
        before = np.where(has_prev, new_code[np.maximum(prev_row, 0)], observed)
        moved = _segment_sums((is_partition & (before >= 0) & (new_code != before)).astype(np.int64), starts, ends)

        owner_rack = np.where(assigned, rack[np.where(assigned, own, 0)], -1)
        known = assigned & (owner_rack >= 0) & (mask != 0)
        local = known & ((mask >> np.maximum(owner_rack, 0)) & 1).astype(bool)
        n_known = _segment_sums(known.astype(np.int64), starts, ends)
        n_local = _segment_sums(local.astype(np.int64), starts, ends)
        with np.errstate(invalid="ignore", divide="ignore"):
            locality = n_local / n_known
        failed_at = errors[a]
        failed = np.isin(seg, np.fromiter(failed_at, np.int64, len(failed_at)))
        columns["group_id"].append(group_ids)
        columns["sample_seq"].append(seqs)
        columns["sample_time"].append(sample_times)
        columns["assignor"].append(pa.array([assignor.name] * len(seg), pa.string()))
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
        columns["error"].append(pa.array([failed_at.get(s) for s in seg.tolist()] if failed_at else pa.nulls(len(seg), pa.string()), pa.string()))
    arrays = [pa.concat_arrays(columns[name]) for name in SCORE_SCHEMA.names]
    return pa.RecordBatch.from_arrays(arrays, schema=SCORE_SCHEMA)


EVAL_ORDER = ("group_id", "sample_seq", "kind", "topic", "partition", "member_id")


def eval_rows(partitions: pa.Table, members: pa.Table) -> pa.Table:
    """Member and partition rows of the lag-sample layout as sorted evaluation rows (pyarrow only)."""
    n_p, n_m = partitions.num_rows, members.num_rows

    def nulls(typ, n):
        return pa.nulls(n, typ)

    part = pa.table(
        {
            "group_id": partitions["group_id"],
            "sample_seq": partitions["sample_seq"],
            "sample_time": partitions["sample_time"],
            "kind": pa.array(np.full(n_p, PARTITION_ROW, np.int8)),
            "member_id": partitions["member_id"],
            "topic": partitions["topic"],
            "partition": partitions["partition"],
            "lag": partitions["lag"],
            "rack": nulls(pa.string(), n_p),
            "instance_id": nulls(pa.string(), n_p),
            "subscribed_topics": nulls(pa.list_(pa.string()), n_p),
            "replica_racks": partitions["replica_racks"],
        },
        schema=EVAL_SCHEMA,
    )
    memb = pa.table(
        {
            "group_id": members["group_id"],
            "sample_seq": members["sample_seq"],
            "sample_time": members["sample_time"],
            "kind": pa.array(np.full(n_m, MEMBER_ROW, np.int8)),
            "member_id": members["member_id"],
            "topic": nulls(pa.string(), n_m),
            "partition": nulls(pa.int32(), n_m),
            "lag": nulls(pa.int64(), n_m),
            "rack": members["rack"],
            "instance_id": members["instance_id"],
            "subscribed_topics": members["subscribed_topics"],
            "replica_racks": nulls(pa.list_(pa.string()), n_m),
        },
        schema=EVAL_SCHEMA,
    )
    both = pa.concat_tables([memb, part])
    return both.sort_by([(c, "ascending") for c in EVAL_ORDER])

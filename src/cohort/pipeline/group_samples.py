"""Group samples: one row per (group, sample) holding the sample's members and partitions.

`evaluate` needs whole groups. From the flat tables (one row per partition, one per member) Spark
must shuffle and sort some 25 rows per group, each repeating the group, topic and member names as
strings; that costs more than running the assignors. A group-sample row carries the same facts
with each name once: partitions point at their topic, owner and replica racks by position in the
row's own `topics`, `members` and `racks` lists. So a fleet with one sample per group needs no
shuffle at all, and several samples need one over ~25 times fewer, smaller rows.

The rows' formats are in `cohort.pipeline.codec`: in memory *wide* (`SCHEMA`: name lists and
packed number arrays), on disk *stored* (`STORED_SCHEMA`: two binary values per row, which Spark
hands to Python for a third of the work).

`from_flat` builds the wide rows from the flat tables with pyarrow and numpy (no Python per row);
the writers of the flat tables (`simulate`, `lag`) store them beside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipeline.codec import SCHEMA, STORED_SCHEMA, _np, encode, pack

TABLE = "group_samples"


# The flat rows of both layout tables in one stream (kind 0: member, 1: partition), as the
# conversion reads them when it runs in Spark.
MEMBER_ROW, PARTITION_ROW = 0, 1
FLAT_SCHEMA = pa.schema(
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


def _codes(array) -> np.ndarray:
    """Dictionary codes of a string array (equal strings, equal codes); -1 for null."""
    encoded = pc.dictionary_encode(array)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    if encoded.indices.null_count:
        codes = np.where(encoded.indices.is_null().to_numpy(zero_copy_only=False), -1, codes)
    return codes.astype(np.int64)


def _offsets(counts: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate(([0], np.cumsum(counts))), pa.int32())


def _positions(keys: np.ndarray, names: pa.Array, n_keys: int):
    """Per key, the ascending distinct non-null names, and for every (key, name) its position there.

    Returns (list offsets, values, lookup) where lookup(keys, names) gives positions (-1: absent).
    """
    present = np.flatnonzero(_np(names.is_valid()))
    table = pa.table({"k": pa.array(keys[present], pa.int64()), "name": names.take(pa.array(present))})
    distinct = table.group_by(["k", "name"]).aggregate([]).sort_by([("k", "ascending"), ("name", "ascending")])
    dk = _np(distinct["k"]).astype(np.int64)
    dname = distinct["name"].combine_chunks()
    counts = np.bincount(dk, minlength=n_keys)
    starts = np.concatenate(([0], np.cumsum(counts)))
    universe = pc.unique(dname)
    width = max(len(universe), 1)
    combined = dk * width + _np(pc.index_in(dname, value_set=universe)).astype(np.int64)
    order = np.argsort(combined, kind="stable")
    ordered = combined[order]

    def lookup(k: np.ndarray, values) -> np.ndarray:
        code = _np(pc.index_in(values, value_set=universe), null=-1).astype(np.int64)
        want = k * width + code
        at = np.minimum(np.searchsorted(ordered, want), max(len(ordered) - 1, 0))
        if len(ordered) == 0:
            return np.full(len(k), -1, np.int64)
        hit = (code >= 0) & (ordered[at] == want)
        return np.where(hit, order[at] - starts[k], -1)

    return _offsets(counts), dname, lookup


def _exploded(lists, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """A list<string> column as (length per row, the row's key per element, the elements)."""
    lists = lists.combine_chunks()
    lengths = _np(lists.value_lengths(), null=0).astype(np.int64)
    return lengths, np.repeat(keys, lengths), lists.flatten()


def _pairs(key: np.ndarray, first: np.ndarray, second: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs per key and the flattened (first, second) pairs, in input order, where second >= 0."""
    keep = second >= 0  # a null name names nothing
    pairs = np.stack([first[keep], second[keep]], axis=1).ravel()
    return np.bincount(key[keep], minlength=n), pairs


def from_flat(partitions: pa.Table, members: pa.Table) -> pa.Table:
    """The group-sample rows of flat partition and member tables (any row order), sorted by group and sample."""
    asc = "ascending"
    p = partitions.select(["group_id", "sample_seq", "sample_time", "topic", "partition", "lag", "member_id",
                           "replica_racks"])
    p = p.sort_by([("group_id", asc), ("sample_seq", asc), ("topic", asc), ("partition", asc)])
    m = members.select(["group_id", "sample_seq", "sample_time", "member_id", "instance_id", "rack",
                        "subscribed_topics"])
    m = m.sort_by([("group_id", asc), ("sample_seq", asc), ("member_id", asc)])

    def runs(t):
        starts = _run_starts(_codes(t["group_id"]), _np(t["sample_seq"]))
        lengths = np.diff(np.append(starts, t.num_rows))
        at = pa.array(starts)
        keys = pa.table({"group_id": t["group_id"].take(at), "sample_seq": t["sample_seq"].take(at),
                         "time": t["sample_time"].take(at), "run": pa.array(np.arange(len(starts)))})
        return keys, lengths

    p_keys, p_len = runs(p)
    m_keys, m_len = runs(m)
    keys = p_keys.join(m_keys, ["group_id", "sample_seq"], join_type="full outer", left_suffix="_p",
                       right_suffix="_m", coalesce_keys=True)
    keys = keys.sort_by([("group_id", asc), ("sample_seq", asc)])
    n = keys.num_rows

    def key_of_rows(run_col, lengths):
        run = _np(keys[run_col], null=-1).astype(np.int64)
        key_of_run = np.empty(len(lengths), np.int64)
        key_of_run[run[run >= 0]] = np.flatnonzero(run >= 0)
        return np.repeat(key_of_run, lengths)

    p_key, m_key = key_of_rows("run_p", p_len), key_of_rows("run_m", m_len)
    per_member = np.bincount(m_key, minlength=n)
    per_partition = np.bincount(p_key, minlength=n)
    member_offsets, partition_offsets = _offsets(per_member), _offsets(per_partition)

    sub_len, sub_key, sub_names = _exploded(m["subscribed_topics"], m_key)
    p_topic = p["topic"].combine_chunks()
    topic_offsets, topic_names, topic_at = _positions(
        np.concatenate([p_key, sub_key]), pa.concat_arrays([p_topic, sub_names]), n)

    rep_len, rep_key, rep_names = _exploded(p["replica_racks"], p_key)
    m_rack = m["rack"].combine_chunks()
    rack_offsets, rack_names, rack_at = _positions(
        np.concatenate([m_key, rep_key]), pa.concat_arrays([m_rack, rep_names]), n)

    member_ids = m["member_id"].combine_chunks()
    m_pos = np.arange(len(m_key)) - np.asarray(member_offsets)[m_key] if len(m_key) else np.zeros(0, np.int64)
    member_universe = pc.unique(member_ids)
    width = max(len(member_universe), 1)
    member_combined = m_key * width + _np(pc.index_in(member_ids, value_set=member_universe)).astype(np.int64)
    owner_code = _np(pc.index_in(p["member_id"].combine_chunks(), value_set=member_universe), null=-1).astype(np.int64)
    owner_want = p_key * width + owner_code
    order = np.argsort(member_combined, kind="stable")
    ordered = member_combined[order]
    owner = np.full(len(p_key), -1, np.int64)
    if len(ordered):
        at = np.minimum(np.searchsorted(ordered, owner_want), len(ordered) - 1)
        hit = (owner_code >= 0) & (ordered[at] == owner_want)
        owner[hit] = m_pos[order[at[hit]]]

    p_pos = np.arange(len(p_key)) - np.asarray(partition_offsets)[p_key] if len(p_key) else np.zeros(0, np.int64)
    n_sub, sub_pairs = _pairs(sub_key, np.repeat(m_pos, sub_len), topic_at(sub_key, sub_names), n)
    n_rep, rep_pairs = _pairs(rep_key, np.repeat(p_pos, rep_len), rack_at(rep_key, rep_names), n)
    times = pc.coalesce(keys["time_p"], keys["time_m"])  # the join suffixes both tables' `time`, as their `run`
    columns = [
        keys["sample_seq"].combine_chunks(),
        times.combine_chunks().cast(SCHEMA.field("sample_time").type),
        keys["group_id"].combine_chunks(),
        pa.ListArray.from_arrays(topic_offsets, topic_names),
        pa.ListArray.from_arrays(rack_offsets, rack_names),
        pa.ListArray.from_arrays(member_offsets, member_ids),
        pa.ListArray.from_arrays(member_offsets, m["instance_id"].combine_chunks()),
        pack(per_member, rack_at(m_key, m_rack), np.int32),
        pack(2 * n_sub, sub_pairs, np.int32),
        pack(per_partition, topic_at(p_key, p_topic), np.int32),
        pack(per_partition, _np(p["partition"].combine_chunks()), np.int32),
        pack(per_partition, _np(p["lag"].combine_chunks(), null=-1), np.int64),
        pack(per_partition, owner, np.int32),
        pack(2 * n_rep, rep_pairs, np.int32),
    ]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def whole_groups(batches: Iterable[pa.RecordBatch], group_column: int) -> Iterator[pa.RecordBatch]:
    """The rows of the incoming batches re-cut so that no group straddles two outgoing batches."""
    pending: list[pa.RecordBatch] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        last_group = batch.column(group_column)[-1]
        if len(pending) > 1 and batch.column(group_column)[0] == last_group:
            continue  # the whole batch is one group that may go on
        merged = _merge(pending)
        cut = int(np.argmax(_np(pc.equal(merged.column(group_column), last_group))))
        if cut == 0:
            pending = [merged]
            continue
        yield merged.slice(0, cut)
        pending = [merged.slice(cut)]
    if pending:
        yield _merge(pending)


def _merge(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


FLAT_ORDER = ("group_id", "sample_seq", "kind", "topic", "partition", "member_id")


def flat_rows(partitions: pa.Table, members: pa.Table) -> pa.Table:
    """Member and partition rows of the lag-sample layout as one sorted table of FLAT_SCHEMA rows.

    Each kind of row carries the FLAT_SCHEMA columns its table has; the others are null.
    """

    def rows(table: pa.Table, kind: int) -> pa.Table:
        n = table.num_rows
        return pa.table(
            [
                pa.array(np.full(n, kind, np.int8)) if f.name == "kind"
                else table[f.name] if f.name in table.column_names else pa.nulls(n, f.type)
                for f in FLAT_SCHEMA
            ],
            schema=FLAT_SCHEMA,
        )

    both = pa.concat_tables([rows(members, MEMBER_ROW), rows(partitions, PARTITION_ROW)])
    return both.sort_by([(c, "ascending") for c in FLAT_ORDER])


def convert_flat_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stored group-sample batches of a stream of FLAT_SCHEMA batches in which each group's rows are contiguous."""
    kind = FLAT_SCHEMA.get_field_index("kind")
    for batch in whole_groups(batches, FLAT_SCHEMA.get_field_index("group_id")):
        table = pa.Table.from_batches([batch])
        is_member = pc.equal(batch.column(kind), MEMBER_ROW)
        yield from encode(from_flat(table.filter(pc.invert(is_member)), table.filter(is_member))).to_batches()


def spark_frame(partitions, members, num_partitions: int):
    """Stored group-sample rows of the flat layout tables (Spark DataFrames), built in Spark with `from_flat`.

    Within each Spark partition the rows come out sorted by group and sample, and all samples of a
    group are in one partition, which is what scoring needs without a further shuffle.
    """
    from pyspark.sql import functions as F

    from cohort.pipeline.layout import spark_schema

    flat = spark_schema(FLAT_SCHEMA)

    def rows(df, kind: int):  # as `flat_rows`: the FLAT_SCHEMA columns the table has, the others null
        return df.select(*(
            (F.lit(kind) if f.name == "kind" else F.col(f.name) if f.name in df.columns else F.lit(None))
            .cast(f.dataType).alias(f.name)
            for f in flat
        ))

    # A hash of the group id first gives the sorter an 8-byte prefix that tells groups apart (group
    # ids often share their first 8 bytes); groups stay contiguous either way.
    both = rows(partitions, PARTITION_ROW).unionByName(rows(members, MEMBER_ROW))
    both = both.repartition(num_partitions, "group_id").sortWithinPartitions(F.xxhash64("group_id"), *FLAT_ORDER)
    return both.mapInArrow(convert_flat_batches, spark_schema(STORED_SCHEMA))

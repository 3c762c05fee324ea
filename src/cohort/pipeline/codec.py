"""Group-sample rows in their two formats: wide in memory, stored on disk.

A group-sample row (see `cohort.pipeline.group_samples`) holds one group's sample. *Wide*
(`SCHEMA`), it has four string lists and seven *packed* number columns: little-endian int32 or
int64 arrays in a binary value (`pack` / `unpack`), because Spark hands a binary value to Python
as one buffer where an array<bigint> costs work per element. The scoring code reads wide rows, and
`to_pylist` shows them to people and tests.

Spark's cost of handing a row to Python grows with its columns and list elements more than with
its bytes: on 1,000,000 rows, 8.9 s of CPU for the wide rows against 5.1 s for the same facts in
two binary values. So the table is *stored* (`STORED_SCHEMA`) that way, and `decode` turns a
batch back into wide rows with numpy, in about a microsecond per row.

`names` holds the row's strings in UTF-8, one after another: its topics, its racks, its member ids,
then the instance ids of the members that have one. `body` holds little-endian int32 words:

    header       topics, racks, members, partitions, subscription pairs, replica pairs
    lengths      byte length of each name, in `names` order, a member without instance id as -1
                 (so there are topics + racks + 2 x members of them)
    member racks one per member (position in the racks, -1: none)
    subscribed   (member position, topic position) pairs
    partitions   (topic position, partition id, owner position) per partition
    replicas     (partition position, rack position) pairs
    padding      one zero word if the count so far is odd
    lags         one int64 per partition

Every body is a whole number of 8-byte words, so the lags of every row of a batch are aligned
once the first row is. Both formats keep `sample_seq`, `sample_time` and `group_id` first.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.assignors._arrays import ranges


# Packed columns and their element type; -1 stands for "none" (null) in each.
PACKED = {
    "member_racks": np.int32,  # per member: position in racks
    "member_topics": np.int32,  # (member position, topic position) pairs, ascending: the subscriptions
    "partition_topics": np.int32,  # per partition, ordered by (topic, partition): position in topics
    "partitions": np.int32,  # per partition: partition index
    "lags": np.int64,  # per partition: lag (-1: never committed)
    "owners": np.int32,  # per partition: position in members (-1: nobody, or not a member here)
    "replica_racks": np.int32,  # (partition position, rack position) pairs, ascending
}
SCHEMA = pa.schema(
    [
        pa.field("sample_seq", pa.int64(), nullable=False),
        pa.field("sample_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topics", pa.list_(pa.string())),  # ascending: partition topics and subscribed topics
        pa.field("racks", pa.list_(pa.string())),  # ascending: member racks and replica racks
        pa.field("members", pa.list_(pa.string())),  # ascending member ids
        pa.field("member_instances", pa.list_(pa.string())),
        *(pa.field(name, pa.binary()) for name in PACKED),
    ]
)

# Stored rows compress poorly with Spark's default (snappy: 247 MB per 1,000,000 rows, and slower to
# read than uncompressed); zstd makes them 98 MB and reads about as fast as uncompressed.
STORED_COMPRESSION = "zstd"
# The columns both formats start with; `group_id` is what batches are cut on.
GROUP_COLUMN = 2
STORED_SCHEMA = pa.schema(
    [
        SCHEMA.field("sample_seq"),
        SCHEMA.field("sample_time"),
        SCHEMA.field("group_id"),
        pa.field("names", pa.binary()),
        pa.field("body", pa.binary()),
    ]
)
_NAMES, _BODY = 3, 4
_HEADER = 6
_I4, _I8 = np.dtype("<i4"), np.dtype("<i8")
_STRING_LISTS = ("topics", "racks", "members", "member_instances")


class CodecError(ValueError):
    """A stored group-sample row whose body does not match its own header."""


def _np(array, null=None) -> np.ndarray:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if null is not None:
        array = array.fill_null(null)
    return array.to_numpy(zero_copy_only=False)


def _binary_array(lengths: np.ndarray, data: pa.Buffer) -> pa.Array:
    """A binary array whose i-th value is the next lengths[i] bytes of `data`."""
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    if offsets[-1] >= 1 << 31:
        raise ValueError("too many bytes for one binary array: convert fewer rows at a time")
    return pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(offsets.astype(np.int32)), data])


def pack(counts: np.ndarray, values: np.ndarray, dtype) -> pa.Array:
    """A binary array whose i-th value holds the next counts[i] of `values` as little-endian `dtype`."""
    data = np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<"))
    return _binary_array(np.asarray(counts, np.int64) * data.itemsize, pa.py_buffer(data))


def unpack(column, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(element offsets per value, all values) of a packed binary column (binary or large_binary)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    width = np.dtype(dtype).itemsize
    large = pa.types.is_large_binary(column.type)
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64 if large else np.int32, count=n + 1, offset=column.offset * (8 if large else 4))
    start, end = int(offsets[0]), int(offsets[-1])
    values = np.frombuffer(data_buf, np.dtype(dtype).newbyteorder("<"), count=(end - start) // width, offset=start) if end > start else np.zeros(0, dtype)
    return (offsets.astype(np.int64) - start) // width, values.astype(dtype, copy=False)


def to_pylist(table: pa.Table) -> list[dict]:
    """Wide or stored rows as dicts of the wide columns, packed ones as lists (pairs as 2-tuples, -1 as None)."""
    if is_stored(table.schema):
        table = pa.Table.from_batches(list(map(decode, table.combine_chunks().to_batches())), schema=SCHEMA)
    rows = table.select([f.name for f in SCHEMA if f.name not in PACKED]).to_pylist()
    for name, dtype in PACKED.items():
        offsets, values = unpack(table[name], dtype)
        items = [None if v < 0 else v for v in values.tolist()]
        pairs = name in ("member_topics", "replica_racks")
        for i, row in enumerate(rows):
            chunk = items[offsets[i] : offsets[i + 1]]
            row[name] = [tuple(chunk[j : j + 2]) for j in range(0, len(chunk), 2)] if pairs else chunk
    return rows


def is_stored(schema: pa.Schema) -> bool:
    return "body" in schema.names


def list_offsets(column: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(offsets rebased to 0, values) of a list column."""
    offsets = _np(column.offsets).astype(np.int64)
    return offsets - offsets[0], column.flatten()


def _binary_buffer(column) -> tuple[np.ndarray, pa.Buffer]:
    """(value offsets rebased to 0, data buffer from the first value on) of a binary column."""
    _, offsets_buf, data_buf = column.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, count=len(column) + 1, offset=column.offset * 4).astype(np.int64)
    return offsets - offsets[0], data_buf.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def encode(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """The stored rows (`STORED_SCHEMA`) of wide group-sample rows (`SCHEMA`), in the same order."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    lists = [(np.diff(offsets), values) for offsets, values in (list_offsets(table[name].combine_chunks()) for name in _STRING_LISTS)]
    n_topics, n_racks, n_members = lists[0][0], lists[1][0], lists[2][0]
    if not np.array_equal(lists[3][0], n_members):
        raise ValueError("member_instances must list one entry (or null) per member")
    packed = {name: unpack(table[name], dtype) for name, dtype in PACKED.items()}
    n_parts = np.diff(packed["partitions"][0])
    n_subs = np.diff(packed["member_topics"][0]) // 2
    n_reps = np.diff(packed["replica_racks"][0]) // 2

    # Names: per row its topics, racks, members and instance ids, taken from the four flat lists.
    counts = np.stack([lengths for lengths, _ in lists], axis=1)
    flat_starts = np.stack([np.concatenate(([0], np.cumsum(lengths)))[:-1] for lengths, _ in lists], axis=1)
    bases = np.cumsum([0] + [len(values) for _, values in lists[:-1]])
    order = ranges((flat_starts + bases).ravel(), counts.ravel())
    names = pa.concat_arrays([values.cast(pa.string()) for _, values in lists]).take(pa.array(order, pa.int64()))
    name_lengths = _np(pc.binary_length(names), null=-1).astype(np.int64)
    row_of_name = np.repeat(np.arange(n), counts.sum(axis=1))
    name_bytes = np.bincount(row_of_name, weights=np.maximum(name_lengths, 0), minlength=n).astype(np.int64)
    present = names.drop_null()
    if len(present):
        _, data = _binary_buffer(present.cast(pa.binary()))
    else:
        data = pa.py_buffer(b"")
    names_column = _binary_array(name_bytes, data)

    # Body: the sections of each row, written at the row's own positions in one word array.
    sections = [
        np.full(n, _HEADER),
        counts.sum(axis=1),
        n_members,
        2 * n_subs,
        3 * n_parts,
        2 * n_reps,
    ]
    words_before_lags = sum(sections)
    padding = words_before_lags % 2
    row_words = words_before_lags + padding + 2 * n_parts
    row_start = np.concatenate(([0], np.cumsum(row_words)))
    words = np.zeros(int(row_start[-1]), _I4)
    header = np.stack([n_topics, n_racks, n_members, n_parts, n_subs, n_reps], axis=1)
    triples = np.stack([packed["partition_topics"][1], packed["partitions"][1], packed["owners"][1]], axis=1)
    contents = [header, name_lengths, packed["member_racks"][1], packed["member_topics"][1], triples,
                packed["replica_racks"][1]]
    at = row_start[:-1].copy()
    for size, values in zip(sections, contents):
        words[ranges(at, size)] = np.asarray(values).ravel()
        at += size
    words.view(_I8)[ranges((at + padding) // 2, n_parts)] = packed["lags"][1]
    body = _binary_array(4 * row_words, pa.py_buffer(words))
    return pa.Table.from_arrays(
        [table["sample_seq"], table["sample_time"], table["group_id"], names_column, body], schema=STORED_SCHEMA
    )


def decode(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The wide rows (`SCHEMA`) of a batch of stored rows; a batch already wide is returned as is."""
    if not is_stored(batch.schema):
        return batch
    n = batch.num_rows
    row_offsets, data = _binary_buffer(batch.column(_BODY))
    raw = np.frombuffer(data, np.uint8, count=len(data))
    if raw.ctypes.data % 8:
        raw = raw.copy()  # aligned, so the lags can be read as int64 in place
    words = raw[: len(raw) - len(raw) % 4].view(_I4)
    row_start = row_offsets[:-1] // 4
    row_words = np.diff(row_offsets) // 4
    short = row_words < _HEADER
    if short.any():
        raise CodecError(f"group sample {int(np.argmax(short))}: a body of {int(row_words[short][0] * 4)} bytes has no header")
    header = words[ranges(row_start, np.full(n, _HEADER))].reshape(n, _HEADER).astype(np.int64)
    n_topics, n_racks, n_members, n_parts, n_subs, n_reps = header.T
    n_names = n_topics + n_racks + 2 * n_members
    sections = [n_names, n_members, 2 * n_subs, 3 * n_parts, 2 * n_reps]
    before_lags = _HEADER + sum(sections)
    expected = before_lags + before_lags % 2 + 2 * n_parts
    wrong = (expected != row_words) | (header < 0).any(axis=1) | (np.diff(row_offsets) % 8 != 0)
    if wrong.any():
        row = int(np.argmax(wrong))
        raise CodecError(f"group sample {row}: its body of {int(row_words[row]) * 4} bytes does not match its header")
    at = row_start + _HEADER
    values = []
    for size in sections:
        values.append(words[ranges(at, size)])
        at = at + size
    name_lengths, member_racks, subscribed, triples, replicas = values
    triples = triples.reshape(-1, 3)
    lags = raw.view(_I8)[ranges((at + (at - row_start) % 2) // 2, n_parts)]  # every body is whole 8-byte words

    names_offsets, names_data = _binary_buffer(batch.column(_NAMES))
    name_bytes = np.maximum(name_lengths, 0).astype(np.int64)
    string_offsets = np.concatenate(([0], np.cumsum(name_bytes)))
    if string_offsets[-1] != names_offsets[-1]:
        raise CodecError("group samples: the names do not have the lengths their bodies give")
    missing = name_lengths < 0
    validity = pa.array(~missing).buffers()[1] if missing.any() else None
    names = pa.Array.from_buffers(pa.string(), len(name_lengths),
                                  [validity, pa.py_buffer(string_offsets.astype(np.int32)), names_data])
    counts = np.stack([n_topics, n_racks, n_members, n_members], axis=1)
    name_start = np.concatenate(([0], np.cumsum(n_names)))[:-1]
    kind_start = name_start[:, None] + np.concatenate((np.zeros((n, 1), np.int64), np.cumsum(counts, axis=1)[:, :-1]), axis=1)
    string_lists = [
        pa.ListArray.from_arrays(
            pa.array(np.concatenate(([0], np.cumsum(counts[:, k]))), pa.int32()),
            names.take(pa.array(ranges(kind_start[:, k], counts[:, k]), pa.int64())),
        )
        for k in range(4)
    ]
    columns = [
        batch.column(0), batch.column(1), batch.column(2), *string_lists,
        pack(n_members, member_racks, np.int32),
        pack(2 * n_subs, subscribed, np.int32),
        pack(n_parts, triples[:, 0], np.int32),
        pack(n_parts, triples[:, 1], np.int32),
        pack(n_parts, lags, np.int64),
        pack(n_parts, triples[:, 2], np.int32),
        pack(2 * n_reps, replicas, np.int32),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)

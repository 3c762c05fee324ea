"""The group-sample table read by the Python workers themselves, a group bucket at a time.

Spark's Parquet reader hands every row to Python through the JVM: on 1,000,000 stored group
samples that is some 7 us of JVM CPU per row (the scan 3.9, the Arrow conversion 3.2), while the
JVM never looks at the rows. And when groups have several samples, Spark must shuffle and sort the
rows by group first. Neither is needed: the layout already puts every sample of a group under one
`group_bucket` directory, and a row is all the facts of its group sample. So `evaluate` plans
tasks over the buckets' files (`plan`, on the driver), and each task reads its files with
pyarrow, puts the rows in (group, sample) order (they usually are: each file is written sorted)
and scores them (`read_task`, in a worker). Spark still schedules the tasks and writes the scores.

Only tables on the local filesystem are read this way (a path, or a `file:` URI): the driver lists
them with pyarrow and every worker opens them by the same path, on one machine or a shared mount.
Other URIs (hdfs:, s3a:, ...) keep Spark's reader, which carries the cluster's Hadoop settings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from cohort.pipeline import codec

BATCH_ROWS = 10_000  # rows per scored batch, as Spark's Arrow batches (maxRecordsPerBatch)
UNIT_BYTES = 64 << 20  # a bucket bigger than this on disk is read in parts, by ranges of group ids
ORDER = [("group_id", "ascending"), ("sample_seq", "ascending")]


class SampleFilesError(Exception):
    """A file of the group-sample table is not a group-sample file."""


@dataclass(frozen=True)
class Unit:
    """Some of one bucket's groups: those of `files` with low <= group id < high (None: unbounded)."""

    files: tuple[str, ...]
    low: str | None = None
    high: str | None = None


def local_path(location: str) -> str | None:
    """The local filesystem path of a table location, or None for a location on another filesystem."""
    parsed = urlparse(location)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return unquote(parsed.path)
    if parsed.scheme == "":
        return os.path.abspath(location)
    return None


def plan(location: str, tasks: int) -> list[list[Unit]] | None:
    """Tasks over the table's files, largest first: one per bucket part, packed into `tasks` when
    there are more parts; None when the table is not on the local filesystem or its files are not
    under bucket directories."""
    path = local_path(location)
    if path is None or not os.path.isdir(path):
        return None
    try:
        dataset = ds.dataset(path, format="parquet", partitioning="hive")
    except (pa.ArrowInvalid, OSError):
        return None
    table_format(dataset.schema.names, path)
    buckets: dict[int, list[str]] = {}
    for fragment in dataset.get_fragments():
        bucket = ds.get_partition_keys(fragment.partition_expression).get("group_bucket")
        if bucket is None:
            return None  # not the layout: Spark's reader, which checks the schema, says what is wrong
        buckets.setdefault(int(bucket), []).append(fragment.path)
    units = [unit for files in buckets.values() for unit in _units(sorted(files))]
    return _pack(units, max(1, tasks))


def _units(files: list[str]) -> list[tuple[int, Unit]]:
    """(bytes, unit) parts of one bucket, each under UNIT_BYTES where the files' row groups allow it.

    Files are sorted by group id, so a row group's statistics bound its group ids: a part's
    boundary is the smallest group id of the row group that starts it.
    """
    size = sum(os.path.getsize(f) for f in files)
    if size <= UNIT_BYTES:
        return [(size, Unit(tuple(files)))]
    starts: list[tuple[str, int]] = []
    for f in files:
        meta = pq.ParquetFile(f).metadata
        column = meta.schema.names.index("group_id") if "group_id" in meta.schema.names else -1
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            stats = rg.column(column).statistics if column >= 0 else None
            if stats is None or not stats.has_min_max:
                return [(size, Unit(tuple(files)))]  # no bounds to cut on: the bucket in one part
            starts.append((stats.min, sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))))
    starts.sort()
    bounds, taken = [], 0
    for low, weight in starts:
        if taken >= UNIT_BYTES and (not bounds or low > bounds[-1]):
            bounds.append(low)
            taken = 0
        taken += weight
    edges = [None, *bounds, None]
    part = size // len(edges[1:])
    return [(part, Unit(tuple(files), lo, hi)) for lo, hi in zip(edges[:-1], edges[1:])]


def _pack(units: list[tuple[int, Unit]], tasks: int) -> list[list[Unit]]:
    """Units into at most `tasks` bins of about equal bytes (largest first, each to the lightest bin)."""
    units = sorted(units, key=lambda u: -u[0])
    if len(units) <= tasks:
        return [[unit] for _, unit in units]
    bins: list[tuple[int, int, list[Unit]]] = [(0, i, []) for i in range(tasks)]
    for size, unit in units:
        load, i, members = min(bins)
        members.append(unit)
        bins[i] = (load + size, i, members)
    return [members for _, _, members in bins]


def to_json(task: list[Unit]) -> str:
    return json.dumps([[list(u.files), u.low, u.high] for u in task])


def from_json(text: str) -> list[Unit]:
    return [Unit(tuple(files), low, high) for files, low, high in json.loads(text)]


def read_task(task: list[Unit]) -> Iterator[pa.RecordBatch]:
    """The task's group-sample rows in batches of whole groups' rows, each group's samples ascending."""
    for unit in task:
        table = _read_unit(unit)
        if table.num_rows:
            yield from table.to_batches(max_chunksize=BATCH_ROWS)


def table_format(names: list[str], where: str) -> pa.Schema:
    """The group-sample schema (stored, or the older wide one) whose columns `names` include."""
    schema = next((s for s in (codec.STORED_SCHEMA, codec.SCHEMA) if set(s.names) <= set(names)), None)
    if schema is None:
        missing = sorted(set(codec.STORED_SCHEMA.names) - set(names))
        raise SampleFilesError(f"{where}: not a group_samples table, missing columns {', '.join(missing)}")
    return schema


def _read_unit(unit: Unit) -> pa.Table:
    """The unit's rows in (group, sample) order; each file's footer is read once."""
    bounded = unit.low is not None or unit.high is not None
    if bounded:
        expression = None
        if unit.low is not None:
            expression = pc.field("group_id") >= unit.low
        if unit.high is not None:
            upper = pc.field("group_id") < unit.high
            expression = upper if expression is None else expression & upper
    tables = []
    for f in unit.files:
        parquet = pq.ParquetFile(f)
        schema = table_format(parquet.schema_arrow.names, f)
        if bounded:
            groups = _row_groups_within(parquet.metadata, unit.low, unit.high)
            tables.append(parquet.read_row_groups(groups, columns=schema.names).filter(expression))
        else:
            tables.append(parquet.read(columns=schema.names))
    if len({tuple(t.schema.names) for t in tables}) > 1:
        raise SampleFilesError(f"{os.path.dirname(unit.files[0])}: stored and wide group-sample files in one bucket")
    table = pa.concat_tables(tables).combine_chunks() if len(tables) > 1 else tables[0]
    return table if _in_order(table) else table.sort_by(ORDER)


def _row_groups_within(meta, low: str | None, high: str | None) -> list[int]:
    """Row groups whose group ids may fall in [low, high): all but those their statistics rule out."""
    column = meta.schema.names.index("group_id")
    kept = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(column).statistics
        if stats is not None and stats.has_min_max and (
                (high is not None and stats.min >= high) or (low is not None and stats.max < low)):
            continue
        kept.append(i)
    return kept


def _in_order(table: pa.Table) -> bool:
    """Whether the rows are in (group id, sample) order, samples strictly ascending within a group."""
    n = table.num_rows
    if n < 2:
        return True
    group, seq = table["group_id"], table["sample_seq"]
    g0, g1 = group.slice(0, n - 1), group.slice(1)
    ahead = pc.or_(pc.less(g0, g1), pc.and_(pc.equal(g0, g1), pc.less(seq.slice(0, n - 1), seq.slice(1))))
    return pc.all(ahead).as_py()

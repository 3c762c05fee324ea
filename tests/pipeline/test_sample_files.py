"""The group-sample table read by the Python workers: planning over bucket files, reading in group order."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cohort import assignors
from cohort.pipeline import codec, layout, sample_files
from cohort.pipeline.fleet import FleetParams, generate
from cohort.pipeline.group_samples import from_flat
from cohort.pipeline.scoring import score_batches
from cohort.pipeline.sample_files import SampleFilesError, Unit, local_path, plan, read_task

ASSIGNORS = ("uniform", "range", "lag")


def stored_fleet(groups: int, samples: int) -> pa.Table:
    p, m = generate(np.arange(groups), FleetParams(samples=samples, partitions=8))
    return codec.encode(from_flat(p, m))


def write_table(root: Path, table: pa.Table, files_per_bucket: int = 1, shuffle: bool = False,
                row_group_size: int | None = None) -> None:
    """`table` in the layout's bucket directories, each bucket's rows spread over several files."""
    buckets = np.array([layout.group_bucket(g) for g in table["group_id"].to_pylist()])
    rng = random.Random(3)
    for bucket in np.unique(buckets).tolist():
        rows = table.filter(pa.array(buckets == bucket))
        directory = root / "date=2026-07-01" / f"group_bucket={bucket}"
        directory.mkdir(parents=True)
        order = list(range(rows.num_rows))
        if shuffle:
            rng.shuffle(order)
        for i in range(files_per_bucket):
            part = rows.take(pa.array(order[i::files_per_bucket], pa.int64()))
            pq.write_table(part, directory / f"part-{i:05d}.parquet", row_group_size=row_group_size)
    (root / "_SUCCESS").touch()


def scores(batches) -> list[dict]:
    rows = []
    for batch in score_batches(batches, [assignors.get(n) for n in ASSIGNORS]):
        rows += batch.to_pylist()
    return sorted(rows, key=lambda r: (r["group_id"], r["sample_seq"], r["assignor"]))


def read_all(tasks) -> list[pa.RecordBatch]:
    return [batch for task in tasks for batch in read_task(task)]


@pytest.fixture(scope="module")
def fleet_table() -> pa.Table:
    return stored_fleet(groups=150, samples=3)


def test_local_paths_and_other_filesystems():
    assert local_path("/data/samples") == "/data/samples"
    assert local_path("file:/data/samples") == "/data/samples"
    assert local_path("file:///data/my%20samples") == "/data/my samples"
    assert local_path("relative/dir") == str(Path("relative/dir").resolve())
    for remote in ("s3a://bucket/samples", "hdfs://namenode/samples", "file://otherhost/samples"):
        assert local_path(remote) is None
        assert plan(remote, 4) is None


def test_a_table_outside_the_layout_is_left_to_spark(tmp_path, fleet_table):
    assert plan(str(tmp_path / "missing"), 4) is None
    pq.write_table(fleet_table, tmp_path / "part-0.parquet")  # no bucket directories
    assert plan(str(tmp_path), 4) is None


def test_files_of_another_table_are_refused_with_the_missing_columns(tmp_path):
    directory = tmp_path / "date=2026-07-01" / "group_bucket=3"
    directory.mkdir(parents=True)
    pq.write_table(pa.table({"group_id": ["g"], "sample_seq": [1]}), directory / "part-0.parquet")
    with pytest.raises(SampleFilesError, match="not a group_samples table, missing columns body, names, sample_time"):
        plan(str(tmp_path), 4)


def test_every_group_is_read_once_with_its_samples_in_order(tmp_path, fleet_table):
    # Rows shuffled over three files per bucket: each task puts its bucket back in order.
    write_table(tmp_path, fleet_table, files_per_bucket=3, shuffle=True)
    tasks = plan(str(tmp_path), 5)
    assert 0 < len(tasks) <= 5
    seen = []
    for batch in read_all(tasks):
        assert batch.num_rows <= sample_files.BATCH_ROWS
        seen += list(zip(batch["group_id"].to_pylist(), batch["sample_seq"].to_pylist()))
    want = list(zip(fleet_table["group_id"].to_pylist(), fleet_table["sample_seq"].to_pylist()))
    assert sorted(seen) == sorted(want) and len(seen) == len(want)
    for unit in (u for task in tasks for u in task):  # each bucket comes sorted by group and sample
        keys = [k for batch in read_task([unit]) for k in zip(batch["group_id"].to_pylist(), batch["sample_seq"].to_pylist())]
        assert keys == sorted(keys)


def test_scores_are_those_of_the_rows_in_one_stream(tmp_path, fleet_table):
    write_table(tmp_path, fleet_table, files_per_bucket=2, shuffle=True)
    assert scores(read_all(plan(str(tmp_path), 3))) == scores(fleet_table.to_batches(max_chunksize=97))


def test_a_big_bucket_is_read_in_parts_by_group_range(tmp_path, fleet_table, monkeypatch):
    # One bucket, two files of many row groups (a group may straddle them): parts are cut at
    # row-group boundaries, and every group is read whole, in exactly one part.
    rows = fleet_table.sort_by(sample_files.ORDER)
    directory = tmp_path / "date=2026-07-01" / "group_bucket=0"
    directory.mkdir(parents=True)
    half = rows.num_rows // 2 + 1
    pq.write_table(rows.slice(0, half), directory / "part-0.parquet", row_group_size=30)
    pq.write_table(rows.slice(half), directory / "part-1.parquet", row_group_size=30)
    size = sum(f.stat().st_size for f in directory.iterdir())
    monkeypatch.setattr(sample_files, "UNIT_BYTES", size // 6)
    tasks = plan(str(tmp_path), 64)
    units = [u for task in tasks for u in task]
    assert len(units) >= 3
    assert units[0].files == units[1].files
    bounds = sorted((u.low or "", u.high) for u in units)
    assert bounds[0][0] == "" and any(high is None for _, high in bounds)
    whole = [(g, s) for batch in read_all([[Unit(units[0].files)]])
             for g, s in zip(batch["group_id"].to_pylist(), batch["sample_seq"].to_pylist())]
    parts = [[(g, s) for batch in read_task([u]) for g, s in zip(batch["group_id"].to_pylist(), batch["sample_seq"].to_pylist())]
             for u in units]
    assert sorted(k for part in parts for k in part) == sorted(whole)
    groups_of = [{g for g, _ in part} for part in parts]
    assert sum(map(len, groups_of)) == len(set().union(*groups_of))  # no group in two parts


def test_tasks_are_balanced_by_bytes():
    units = [(size, Unit((f"f{i}",))) for i, size in enumerate([90, 50, 40, 30, 30, 20, 10, 10])]
    tasks = sample_files._pack(units, 3)
    loads = sorted(sum(dict((u, s) for s, u in units)[unit] for unit in task) for task in tasks)
    assert loads == [90, 90, 100]
    assert sample_files._pack(units, 20) == [[u] for _, u in sorted(units, key=lambda x: -x[0])]


def test_wide_files_are_read_and_a_bucket_mixing_formats_is_refused(tmp_path, fleet_table):
    wide = pa.Table.from_batches([codec.decode(b) for b in fleet_table.to_batches()])
    write_table(tmp_path / "wide", wide)
    assert scores(read_all(plan(str(tmp_path / "wide"), 4))) == scores(fleet_table.to_batches())
    mixed = tmp_path / "mixed" / "date=2026-07-01" / "group_bucket=1"
    mixed.mkdir(parents=True)
    pq.write_table(fleet_table.slice(0, 10), mixed / "part-0.parquet")
    pq.write_table(wide.slice(10, 10), mixed / "part-1.parquet")
    with pytest.raises(SampleFilesError, match="stored and wide group-sample files in one bucket"):
        read_all(plan(str(tmp_path / "mixed"), 4))

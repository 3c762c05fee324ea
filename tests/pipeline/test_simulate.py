"""`simulate` on Spark writes the documented layout: schemas, partition directories, row counts."""

from __future__ import annotations

from pyspark.sql import functions as F

from cohort.pipeline import layout
from cohort.pipeline.fleet import FleetParams, generate



def test_tables_have_the_documented_schema(spark, fleet):
    for table, schema in ((layout.PARTITIONS_TABLE, layout.PARTITION_SCHEMA), (layout.MEMBERS_TABLE, layout.MEMBER_SCHEMA)):
        df = spark.read.parquet(str(fleet.dir / table))
        expected = [(f.name, f.dataType.simpleString()) for f in layout.spark_schema(schema)]
        assert [(f.name, f.dataType.simpleString()) for f in df.schema][: len(expected)] == expected
        assert [(f.name, f.dataType.simpleString()) for f in df.schema][len(expected):] == [("date", "date"), ("group_bucket", "int")]


def test_directories_are_date_and_group_bucket(spark, fleet):
    dates = sorted(p.name for p in (fleet.dir / "partitions").iterdir() if p.is_dir())
    assert dates == ["date=2026-07-01"]
    buckets = {p.name for p in (fleet.dir / "partitions" / dates[0]).iterdir()}
    assert buckets <= {f"group_bucket={b}" for b in range(layout.BUCKETS)}
    assert len(buckets) > layout.BUCKETS // 2  # 240 groups spread over most of the 64 buckets
    df = spark.read.parquet(str(fleet.dir / "partitions"))
    pairs = df.select("group_id", "group_bucket").distinct().collect()
    assert len(pairs) == fleet.groups
    assert all(layout.group_bucket(r.group_id) == r.group_bucket for r in pairs)


def test_rows_are_the_generators_rows(spark, fleet):
    df = spark.read.parquet(str(fleet.dir / "partitions"))
    assert df.count() == fleet.groups * fleet.samples * 20
    members = spark.read.parquet(str(fleet.dir / "members"))
    expected_p, expected_m = generate(range(fleet.groups), FleetParams(samples=fleet.samples, seed=fleet.seed))
    assert members.count() == expected_m.num_rows
    key = ["group_id", "sample_seq", "topic", "partition"]
    got = df.drop("date", "group_bucket").orderBy(*key).toPandas()
    want = expected_p.to_pandas().sort_values(key).reset_index(drop=True)
    assert got[["group_id", "topic", "partition", "lag", "committed_offset", "end_offset", "member_id"]].equals(
        want[["group_id", "topic", "partition", "lag", "committed_offset", "end_offset", "member_id"]]
    )
    # Spark hands back naive timestamps in the session time zone (UTC)
    assert (got["sample_time"] == want["sample_time"].dt.tz_convert(None).astype("datetime64[ns]")).all()
    lag_ok = df.where(F.col("committed_offset").isNotNull()).where(
        F.col("lag") != F.col("end_offset") - F.col("committed_offset")
    )
    assert lag_ok.count() == 0


def test_group_samples_are_the_flat_tables_grouped(spark, fleet):
    from cohort.pipeline import group_samples

    df = spark.read.parquet(str(fleet.dir / group_samples.TABLE))
    expected = [(f.name, f.dataType.simpleString()) for f in layout.spark_schema(group_samples.SCHEMA)]
    assert [(f.name, f.dataType.simpleString()) for f in df.schema][: len(expected)] == expected
    assert df.count() == fleet.groups * fleet.samples
    pairs = df.select("group_id", "group_bucket").distinct().collect()
    assert all(layout.group_bucket(r.group_id) == r.group_bucket for r in pairs)
    flat_p, flat_m = generate(range(fleet.groups), FleetParams(samples=fleet.samples, seed=fleet.seed))
    got = group_samples.to_pylist(df.drop("date", "group_bucket").toArrow())
    want = group_samples.to_pylist(group_samples.from_flat(flat_p, flat_m))
    key = lambda r: (r["group_id"], r["sample_seq"])  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    # the lags are the partition table's, null as -1 -> None
    first = min(want, key=key)
    rows = sorted((r for r in flat_p.to_pylist() if r["group_id"] == first["group_id"] and r["sample_seq"] == 0),
                  key=lambda r: (r["topic"], r["partition"]))
    assert first["lags"] == [r["lag"] for r in rows]
    assert [first["members"][o] for o in first["owners"]] == [r["member_id"] for r in rows]

"""`evaluate` on a simulated fleet: tables, the lag-vs-range verdict, and the report."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

ASSIGNORS = ("uniform", "range", "lag")


@pytest.fixture(scope="module")
def evaluated(evaluation):
    """The CLI run's output directory and its headline facts, read from the `overall` table."""
    overall = pq.read_table(evaluation.out / "overall").to_pylist()
    from cohort.pipeline.report import rank_key

    ranking = sorted(overall, key=rank_key)
    facts = {
        "winner": ranking[0]["assignor"],
        "runner_up": ranking[1]["assignor"],
        "margin": 1 - ranking[0]["avg_max_member_lag"] / ranking[1]["avg_max_member_lag"],
        "stdout": evaluation.stdout,
    }
    return evaluation.out, facts


def test_scores_cover_every_group_sample_and_assignor(spark, fleet, evaluated):
    out, _ = evaluated
    scores = spark.read.parquet(str(out / "scores"))
    assert scores.count() == fleet.groups * fleet.samples * len(ASSIGNORS)
    assert scores.where(F.col("error").isNotNull()).count() == 0
    assert scores.where(F.col("unassigned") != 0).count() == 0
    # every assignor sees the same total lag, and it is the samples' own sum
    totals = scores.groupBy("assignor").agg(F.sum("total_lag").alias("t")).collect()
    assert len({r.t for r in totals}) == 1


def test_total_lag_matches_the_partition_table(spark, fleet, evaluated):
    out, _ = evaluated
    want = spark.read.parquet(str(fleet.dir / "partitions")).agg(F.sum(F.coalesce("lag", F.lit(0)))).first()[0]
    got = spark.read.parquet(str(out / "scores")).where("assignor = 'lag'").agg(F.sum("total_lag")).first()[0]
    assert got == want


def test_lag_beats_range_on_max_member_lag(spark, fleet, evaluated):
    out, facts = evaluated
    overall = {r.assignor: r for r in spark.read.parquet(str(out / "overall")).collect()}
    assert set(overall) == set(ASSIGNORS)
    assert overall["lag"].avg_max_member_lag < overall["range"].avg_max_member_lag
    assert overall["lag"].groups_won > overall["range"].groups_won
    # group by group, lag's worst member is never far behind range's, and usually ahead
    g = spark.read.parquet(str(out / "group_summary"))
    pivot = g.groupBy("group_id").pivot("assignor", list(ASSIGNORS)).agg(F.first("avg_max_member_lag")).collect()
    assert len(pivot) == fleet.groups
    ahead = sum(r["lag"] <= r["range"] for r in pivot)
    assert ahead > 0.8 * fleet.groups
    assert facts["winner"] == "lag"
    assert facts["stdout"].startswith(f"lag wins: average max member lag {100 * facts['margin']:.1f} % below")


def test_group_winners_have_the_lowest_average(spark, fleet, evaluated):
    out, _ = evaluated
    winners = {r.group_id: r for r in spark.read.parquet(str(out / "group_winners")).collect()}
    assert len(winners) == fleet.groups
    summary = spark.read.parquet(str(out / "group_summary")).collect()
    best = {}
    for r in summary:
        best[r.group_id] = min(best.get(r.group_id, float("inf")), r.avg_max_member_lag)
    for gid, w in winners.items():
        assert w.winner_max_member_lag == best[gid]
        assert w.runner_up_max_member_lag >= w.winner_max_member_lag
        assert 0.0 <= w.margin < 1.0


def test_report_names_the_winner_and_has_charts(evaluated):
    out, facts = evaluated
    text = (out / "report.md").read_text()
    assert f"**{facts['winner']}** wins overall" in text
    assert f"{100 * facts['margin']:.1f} % below the runner-up **{facts['runner_up']}**" in text
    for chart in ("wins.png", "max_member_lag.png", "moves_skew.png"):
        data = (out / "charts" / chart).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert f"(charts/{chart})" in text
    assert "| group-" in text


def test_samples_without_the_group_sample_table_score_the_same(spark, fleet, evaluated, tmp_path):
    """A samples directory holding only the flat tables (as older `lag` runs wrote) is grouped in Spark."""
    import shutil

    from cohort.pipeline import evaluate, layout

    out, _ = evaluated
    flat_only = tmp_path / "flat-only"
    for table in (layout.PARTITIONS_TABLE, layout.MEMBERS_TABLE):
        shutil.copytree(fleet.dir / table, flat_only / table)
    p, m = evaluate.load_samples(spark, str(flat_only))
    rows, grouped = evaluate.load_group_samples(spark, str(flat_only), p, m)
    assert grouped
    key = ["group_id", "sample_seq", "assignor"]
    got = evaluate.score(spark, rows, ASSIGNORS, grouped).orderBy(*key).collect()
    want = spark.read.parquet(str(out / "scores")).orderBy(*key).collect()
    assert len(got) == fleet.groups * fleet.samples * len(ASSIGNORS)
    assert [r.asDict() for r in got] == [r.asDict() for r in want]


def test_the_table_read_by_spark_scores_as_read_by_the_workers(spark, fleet, evaluated):
    """The CLI read the fleet's table in the Python workers (it is local and in the layout); Spark's
    reader, with its shuffle by group (three samples per group), gives the very same scores."""
    from cohort.pipeline import evaluate

    out, _ = evaluated
    tasks = evaluate.table_tasks(spark, str(fleet.dir))
    assert tasks and all(unit.files for task in tasks for unit in task)
    p, m = evaluate.load_samples(spark, str(fleet.dir))
    rows, grouped = evaluate.load_group_samples(spark, str(fleet.dir), p, m)
    assert "body" in rows.columns and not grouped
    key = ["group_id", "sample_seq", "assignor"]
    got = evaluate.score(spark, rows, ASSIGNORS, grouped).orderBy(*key).collect()
    want = spark.read.parquet(str(out / "scores")).orderBy(*key).collect()
    assert len(got) == fleet.groups * fleet.samples * len(ASSIGNORS)
    assert [r.asDict() for r in got] == [r.asDict() for r in want]
    direct = evaluate.score_tasks(spark, tasks, ASSIGNORS).orderBy(*key).collect()
    assert [r.asDict() for r in direct] == [r.asDict() for r in want]


def test_a_group_sample_table_of_wide_rows_scores_the_same(spark, fleet, evaluated, tmp_path):
    """Tables written before the stored format (wide rows: name lists and packed columns) are read as they are."""
    import shutil

    import pyarrow as pa

    from cohort.pipeline import codec, evaluate, layout

    out, _ = evaluated
    old = tmp_path / "wide"
    for table in (layout.PARTITIONS_TABLE, layout.MEMBERS_TABLE):
        shutil.copytree(fleet.dir / table, old / table)
    stored = spark.read.parquet(str(fleet.dir / "group_samples")).select(*codec.STORED_SCHEMA.names).toArrow()
    (old / "group_samples").mkdir()
    pq.write_table(pa.Table.from_batches([codec.decode(b) for b in stored.combine_chunks().to_batches()]),
                   old / "group_samples" / "part-0.parquet")
    p, m = evaluate.load_samples(spark, str(old))
    rows, grouped = evaluate.load_group_samples(spark, str(old), p, m)
    assert "members" in rows.columns and "body" not in rows.columns
    key = ["group_id", "sample_seq", "assignor"]
    got = evaluate.score(spark, rows, ASSIGNORS, grouped).orderBy(*key).collect()
    want = spark.read.parquet(str(out / "scores")).orderBy(*key).collect()
    assert len(got) == fleet.groups * fleet.samples * len(ASSIGNORS)
    assert [r.asDict() for r in got] == [r.asDict() for r in want]


def test_even_splits_reads_in_many_tasks_and_restores_the_session(spark, fleet):
    from cohort.pipeline import evaluate

    key = "spark.sql.files.minPartitionNum"
    assert spark.conf.get(key, None) is None
    rows = spark.read.parquet(str(fleet.dir / "group_samples"))

    def splits():  # a new query each time: a DataFrame's own plan is fixed once it has run
        return rows.select("group_id").rdd.getNumPartitions()

    before = splits()
    cores = spark.sparkContext.defaultParallelism
    with evaluate.even_splits(spark):
        assert spark.conf.get(key) == str(evaluate.SPLITS_PER_CORE * cores)
        inside = splits()
    assert spark.conf.get(key, None) is None
    assert before <= cores < evaluate.SPLITS_PER_CORE * cores // 2 <= inside
    # A session that chose its own split count keeps it.
    spark.conf.set(key, "3")
    try:
        with evaluate.even_splits(spark):
            assert spark.conf.get(key) == "3"
        assert spark.conf.get(key) == "3"
    finally:
        spark.conf.unset(key)


@pytest.mark.parametrize("layout_dirs", [True, False])
def test_a_group_sample_table_of_other_rows_is_refused_with_its_missing_columns(spark, fleet, tmp_path, layout_dirs):
    """Read by the workers (bucket directories) or by Spark (not in the layout), the same one-line error."""
    import shutil

    import pyarrow as pa

    from cohort.pipeline import evaluate, layout

    samples = tmp_path / "samples"
    for table in (layout.PARTITIONS_TABLE, layout.MEMBERS_TABLE):
        shutil.copytree(fleet.dir / table, samples / table)
    where = samples / "group_samples" / ("date=2026-07-01/group_bucket=3" if layout_dirs else "")
    where.mkdir(parents=True)
    pq.write_table(pa.table({"group_id": ["g"], "sample_seq": [1]}), where / "part-0.parquet")
    with pytest.raises(evaluate.SamplesError, match="not a group_samples table, missing columns body, names, sample_time"):
        evaluate.run(spark, str(samples), tmp_path / "out", ASSIGNORS)


def _fleet_with_empty_groups(spark, fleet, path, empty: int, keep_members: bool):
    """The fleet's flat tables plus `empty` groups that have partitions but never a member."""
    from pyspark.sql import functions as F

    from cohort.pipeline import layout

    parts = spark.read.parquet(str(fleet.dir / layout.PARTITIONS_TABLE))
    one = parts.where(F.col("group_id") == parts.select(F.min("group_id")).first()[0])
    extra = None
    for i in range(empty):
        rows = one.withColumn("group_id", F.lit(f"empty-{i}")).withColumn("member_id", F.lit(None).cast("string"))
        extra = rows if extra is None else extra.unionByName(rows)
    base = parts if keep_members else parts.limit(0)
    table = base.unionByName(extra).withColumn("group_bucket", layout.bucket_column())
    table.write.partitionBy(*layout.PARTITION_COLUMNS).parquet(str(path / layout.PARTITIONS_TABLE))
    if keep_members:
        spark.read.parquet(str(fleet.dir / layout.MEMBERS_TABLE)).write.partitionBy(*layout.PARTITION_COLUMNS).parquet(
            str(path / layout.MEMBERS_TABLE))


def test_groups_without_members_are_counted_as_skipped(spark, fleet, tmp_path):
    from cohort.pipeline import evaluate

    samples = tmp_path / "samples"
    _fleet_with_empty_groups(spark, fleet, samples, empty=3, keep_members=True)
    facts = evaluate.run(spark, str(samples), tmp_path / "out", ASSIGNORS)
    assert facts["groups"] == fleet.groups and facts["skipped"] == 3
    text = (tmp_path / "out" / "report.md").read_text()
    assert "3 groups of the samples never had a member and were skipped" in text


def test_a_fleet_of_empty_groups_reports_that_nothing_was_scored(spark, fleet, tmp_path):
    from cohort.pipeline import evaluate

    samples = tmp_path / "samples"
    _fleet_with_empty_groups(spark, fleet, samples, empty=4, keep_members=False)
    assert not (samples / "members").exists()
    facts = evaluate.run(spark, str(samples), tmp_path / "out", ASSIGNORS)
    assert facts["winner"] is None and facts["skipped"] == 4
    text = (tmp_path / "out" / "report.md").read_text()
    assert "No group had members in the samples" in text and "4 groups of the samples never had a member" in text


def test_report_defines_its_columns_and_states_its_provenance(evaluated, fleet):
    out, facts = evaluated
    text = (out / "report.md").read_text()
    from cohort import __version__
    from cohort.pipeline.report import COLUMNS

    header = next(line for line in text.splitlines() if line.startswith("| assignor |"))
    for column in [c.strip() for c in header.strip("|").split("|")][1:]:
        defined = {name for name, _ in COLUMNS} | {"p50", "p90", "p99"}
        assert column in defined, column
    assert "| avg max member lag | messages;" in text
    provenance = text.split("## Provenance", 1)[1]
    assert f"- input: {fleet.dir}" in provenance and f"- cohort: {__version__}" in provenance
    assert f"seed {fleet.seed}" in provenance and "- evaluated: " in provenance


def test_the_headline_ranks_as_the_tables_do():
    from cohort.pipeline.report import rank_key

    lag = {"assignor": "lag", "avg_max_member_lag": 10.0, "avg_moved": 2.0, "avg_partition_skew": 0.0, "groups_won": 3}
    rng = {"assignor": "range", "avg_max_member_lag": 10.0, "avg_moved": 0.5, "avg_partition_skew": 1.0, "groups_won": 7}
    assert sorted([lag, rng], key=rank_key)[0]["assignor"] == "range"  # equal lag: fewer moves wins, not the name
    rng["avg_moved"] = 2.0
    rng["avg_partition_skew"] = 0.0
    assert sorted([rng, lag], key=rank_key)[0]["assignor"] == "range"  # then more groups won
    rng["groups_won"] = 3
    assert rank_key(lag) == rank_key(rng)  # a tie the report states as one

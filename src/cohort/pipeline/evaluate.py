"""`cohort pipeline evaluate`: which assignor would serve each group best, on recorded lag samples.

The input is the samples' group-sample table (`cohort.pipeline.group_samples`: one row per group
and sample), or, for a samples directory without one, the same rows built in Spark from the flat
tables. Batches of whole groups go to `cohort.pipeline.scoring`, which runs the assignors (the
same code the broker runs) and scores them. A table on the local filesystem is read by the Python
workers themselves, one task per group bucket (`cohort.pipeline.sample_files`: no JVM per row, no
shuffle). Otherwise Spark reads it and `mapInArrow` hands over the batches: when every group has
one sample they go straight from the files to the assignors, else they are first shuffled by
group and sorted by sample. The scores are written first and the summaries read them back, so the
assignors run once.
Runnable as `spark-submit src/cohort/pipeline/evaluate.py --samples DIR --out DIR`.

Outputs under OUT: `scores/` (group, sample, assignor), `group_summary/` (group, assignor),
`group_winners/` (group), `overall/` (assignor), `report.md` and `charts/*.png`.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path

from cohort.pipeline import group_samples, layout, options, runner, sample_files
from cohort.pipeline.scoring import SCORE_SCHEMA

DEFAULT_ASSIGNORS = ("uniform", "range", "lag")
QUANTILES = (0.5, 0.9, 0.99)
# File splits per core when scoring: many even tasks, so no core idles through a lone last task.
SPLITS_PER_CORE = 8
_MIN_SPLITS = "spark.sql.files.minPartitionNum"


class SamplesError(Exception):
    """The samples directory is not in the lag-sample layout."""


def _score_fn(names: tuple[str, ...]):
    def score(batches):
        from cohort import assignors
        from cohort.pipeline.scoring import score_batches

        yield from score_batches(batches, [assignors.get(name) for name in names])

    return score


def _score_tasks_fn(names: tuple[str, ...]):
    def score(batches):
        from cohort import assignors
        from cohort.pipeline.sample_files import from_json, read_task
        from cohort.pipeline.scoring import score_batches

        chosen = [assignors.get(name) for name in names]
        for batch in batches:
            for task in batch.column(0).to_pylist():
                yield from score_batches(read_task(from_json(task)), chosen)

    return score


def load_samples(spark, samples: str):
    """The (partitions, members) DataFrames of a samples directory, checked against the layout."""
    from pyspark.errors import AnalysisException

    frames = []
    for table, schema in ((layout.PARTITIONS_TABLE, layout.PARTITION_SCHEMA), (layout.MEMBERS_TABLE, layout.MEMBER_SCHEMA)):
        path = f"{samples.rstrip('/')}/{table}"
        try:
            df = spark.read.parquet(path)
        except AnalysisException:
            if table == layout.MEMBERS_TABLE and frames:
                # a fleet whose groups never had a member (all Empty) writes no member rows at all
                frames.append(spark.createDataFrame([], layout.spark_schema(schema)))
                continue
            raise SamplesError(f"{path}: no Parquet lag samples there (see docs/pipeline.md)") from None
        missing = sorted(set(schema.names) - set(df.columns))
        if missing:
            raise SamplesError(f"{path}: not a {table} table of lag samples, missing columns {', '.join(missing)}")
        frames.append(df)
    return frames[0], frames[1]


def load_group_samples(spark, samples: str, partitions, members, num_partitions: int | None = None):
    """The group-sample rows of a samples directory and whether they are already grouped.

    (frame, grouped): grouped means each group's samples sit in one Spark partition in ascending
    order, as `spark_frame` builds them from the flat tables when the directory has no table of
    its own, or as a table with a single sample number has them (each row is a whole group).
    """
    from pyspark.errors import AnalysisException

    path = f"{samples.rstrip('/')}/{group_samples.TABLE}"
    try:
        df = spark.read.parquet(path)
    except AnalysisException:
        n = num_partitions or _default_partitions(spark, partitions, members)
        return group_samples.spark_frame(partitions, members, n), True
    # Stored rows, or the wide rows that tables written before the stored format hold.
    try:
        schema = sample_files.table_format(df.columns, path)
    except sample_files.SampleFilesError as e:
        raise SamplesError(str(e)) from None
    rows = df.select(*schema.names)
    return rows, rows.select("sample_seq").distinct().limit(2).count() <= 1


def _default_partitions(spark, *frames) -> int:
    from cohort.pipeline.session import default_parallelism, is_remote

    if is_remote(spark):  # no RDDs through Spark Connect: the frames' files stand for their splits
        return max(2 * default_parallelism(spark), sum(len(f.inputFiles()) for f in frames))
    return max(2 * default_parallelism(spark), sum(f.rdd.getNumPartitions() for f in frames))


def score(spark, rows, assignor_names, grouped: bool = False, num_partitions: int | None = None):
    """The per (group, sample, assignor) scores DataFrame (lazy) of group-sample rows; rows that are
    not `grouped` (see `load_group_samples`) are shuffled by group and sorted by sample first."""
    from pyspark.sql import functions as F

    if not grouped:
        n = num_partitions or _default_partitions(spark, rows)
        rows = rows.repartition(n, "group_id").sortWithinPartitions(F.xxhash64("group_id"), "group_id", "sample_seq")
    return rows.mapInArrow(_score_fn(tuple(assignor_names)), layout.spark_schema(SCORE_SCHEMA))


def table_tasks(spark, samples: str, num_partitions: int | None = None):
    """The tasks that read the samples' group-sample table in the Python workers, or None when
    Spark must read it (not on the local filesystem, or not in the layout; see `sample_files`)."""
    from cohort.pipeline.session import default_parallelism

    tasks = num_partitions or SPLITS_PER_CORE * default_parallelism(spark)
    try:
        return sample_files.plan(f"{samples.rstrip('/')}/{group_samples.TABLE}", tasks)
    except sample_files.SampleFilesError as e:
        raise SamplesError(str(e)) from None


def task_frame(spark, tasks):
    """A DataFrame of `table_tasks`' tasks: one row (the task, as JSON) per Spark partition, in order.

    A range of one number per split, each turned into its task inside the split: no RDD (Spark
    Connect has none), and the tasks travel with the function."""
    from pyspark.sql.types import StringType, StructField, StructType

    text = [sample_files.to_json(task) for task in tasks]

    def to_tasks(batches):
        import pyarrow as pa

        for batch in batches:
            ids = batch.column(0).to_pylist()
            yield pa.record_batch([pa.array([text[i] for i in ids], pa.string())], names=["task"])

    return spark.range(0, len(text), 1, len(text)).mapInArrow(
        to_tasks, StructType([StructField("task", StringType(), False)]))


def score_tasks(spark, tasks, assignor_names):
    """The scores DataFrame (lazy) of `table_tasks`' tasks, each a Spark task of its own."""
    return task_frame(spark, tasks).mapInArrow(_score_tasks_fn(tuple(assignor_names)), layout.spark_schema(SCORE_SCHEMA))


@contextmanager
def even_splits(spark):
    """Read files in about SPLITS_PER_CORE splits per core within the block (unless the session sets
    its own `spark.sql.files.minPartitionNum`).

    Spark's default aims at one split per core, capped at 128 MB, so a fleet of a few hundred MB
    becomes a dozen tasks on two cores and the last one runs alone (on 1,000,000 groups, 11 equal
    tasks and a small one: a twelfth of the time on one core). Eight per core bound that tail to
    a sixteenth of a task's share. The setting is read when a query runs, so the block must cover
    the action, not just the DataFrame's definition.
    """
    conf = spark.conf
    if conf.get(_MIN_SPLITS, None) is not None:
        yield
        return
    from cohort.pipeline.session import default_parallelism

    conf.set(_MIN_SPLITS, str(SPLITS_PER_CORE * default_parallelism(spark)))
    try:
        yield
    finally:
        conf.unset(_MIN_SPLITS)


def group_summary(scores):
    """One row per (group, assignor): averages over the group's samples, its rank, and whether it wins.

    A group's winner has the lowest average max member lag; ties go to fewer moves, then lower skew.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_group = scores.groupBy("group_id", "assignor").agg(
        F.count("*").alias("samples"),
        F.count("max_member_lag").alias("scored_samples"),
        F.avg("max_member_lag").alias("avg_max_member_lag"),
        F.max("max_member_lag").alias("worst_max_member_lag"),
        F.avg("mean_member_lag").alias("avg_mean_member_lag"),
        F.avg("partition_skew").alias("avg_partition_skew"),
        F.sum("moved").alias("moved"),
        F.avg("rack_local_fraction").alias("avg_rack_local_fraction"),
        F.count("error").alias("errors"),
    )
    rank = Window.partitionBy("group_id").orderBy(
        F.col("avg_max_member_lag").asc_nulls_last(), F.col("moved").asc_nulls_last(),
        F.col("avg_partition_skew").asc_nulls_last(), "assignor",
    )
    ranked = per_group.withColumn("rank", F.row_number().over(rank))
    return ranked.withColumn("wins", F.col("rank") == 1)


def group_winners(summary):
    """One row per group: the winner, the runner-up, and the winner's margin on average max member lag."""
    from pyspark.sql import functions as F

    best = summary.where("rank = 1").select(
        "group_id", F.col("assignor").alias("winner"), F.col("avg_max_member_lag").alias("winner_max_member_lag"),
        F.col("moved").alias("winner_moved"),
    )
    second = summary.where("rank = 2").select(
        "group_id", F.col("assignor").alias("runner_up"), F.col("avg_max_member_lag").alias("runner_up_max_member_lag"),
    )
    return (
        best.join(second, "group_id", "left")
        .withColumn(
            "margin",
            F.when(F.col("runner_up_max_member_lag") > 0,
                   1 - F.col("winner_max_member_lag") / F.col("runner_up_max_member_lag")).otherwise(F.lit(0.0)),
        )
        .withColumn("tie", F.coalesce(F.col("winner_max_member_lag") == F.col("runner_up_max_member_lag"), F.lit(False)))
    )


def overall(scores, winners):
    """One row per assignor: fleet-wide averages and quantiles, moves, errors and groups won."""
    from pyspark.sql import functions as F

    wins = winners.groupBy(F.col("winner").alias("assignor")).agg(
        F.count("*").alias("groups_won"),
        F.sum(F.when(~F.col("tie"), 1).otherwise(0)).alias("groups_won_outright"),
        F.avg(F.when(~F.col("tie"), F.col("margin"))).alias("avg_margin_when_won"),
    )
    stats = scores.groupBy("assignor").agg(
        F.count("max_member_lag").alias("group_samples"),
        F.avg("max_member_lag").alias("avg_max_member_lag"),
        F.percentile_approx("max_member_lag", list(QUANTILES)).alias("max_member_lag_quantiles"),
        F.avg("mean_member_lag").alias("avg_mean_member_lag"),
        F.avg("partition_skew").alias("avg_partition_skew"),
        F.max("partition_skew").alias("max_partition_skew"),
        F.sum("moved").alias("moved"),
        F.avg("moved").alias("avg_moved"),
        F.avg("rack_local_fraction").alias("avg_rack_local_fraction"),
        F.count("error").alias("errors"),
    )
    return (
        stats.join(wins, "assignor", "left")
        .fillna({"groups_won": 0, "groups_won_outright": 0})
        .orderBy("assignor")
    )


def provenance(spark, samples: str, assignor_names, partitions) -> dict:
    """Where the report's figures come from: input, its fleet's seed when simulated, when, what ran."""
    import datetime
    import json

    from cohort import __version__
    from cohort.pipeline.session import master_of

    facts = {"input": samples,
             "samples per group": f"{partitions.select('sample_seq').distinct().count():,}",
             "assignors": ", ".join(assignor_names)}
    local = sample_files.local_path(samples)
    fleet_file = Path(local) / FLEET_FILE if local is not None else None
    if fleet_file is not None and fleet_file.is_file():
        try:
            fleet = json.loads(fleet_file.read_text())
            facts["fleet"] = ", ".join(f"{k} {v}" for k, v in fleet.items())
        except (OSError, ValueError):
            pass
    facts.update({
        "evaluated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cohort": __version__,
        "Spark": f"{spark.version} (master {master_of(spark)})",
    })
    return facts


# What `simulate` records next to the tables it writes (Spark skips names starting with `_`).
FLEET_FILE = "_fleet.json"


def run(spark, samples: str, out: str | Path, assignor_names=DEFAULT_ASSIGNORS, num_partitions=None) -> dict:
    """Score, summarise, write every table and the report under `out`; returns the report's facts.

    Each table is written, then read back for the next, so no step recomputes the one before.
    """
    from cohort.pipeline import report, session

    out = Path(out)
    steps = {"scores": f"scoring every group sample with {', '.join(assignor_names)}",
             "group_summary": "summarising each group", "group_winners": "choosing each group's winner",
             "overall": "summarising each assignor"}

    def written(df, name, files=None):
        session.step(f"{steps[name]} (the {name} table)")
        (df.coalesce(files) if files else df).write.mode("overwrite").parquet(str(out / name))
        return spark.read.parquet(str(out / name))

    partitions, members = load_samples(spark, samples)
    tasks = table_tasks(spark, samples, num_partitions)
    if tasks:
        scores = written(score_tasks(spark, tasks, assignor_names), "scores")
    else:
        rows, grouped = load_group_samples(spark, samples, partitions, members, num_partitions)
        with even_splits(spark):
            scores = written(score(spark, rows, assignor_names, grouped, num_partitions), "scores")
    summary = written(group_summary(scores), "group_summary")
    winners = written(group_winners(summary), "group_winners")
    totals = written(overall(scores, winners), "overall", files=1)
    session.step("writing the report")
    in_samples = partitions.select("group_id").distinct().count()
    skipped = max(in_samples - winners.count(), 0)  # groups that never had a member: nothing to assign
    return report.write_report(spark, out, list(assignor_names), scores, winners, totals,
                               provenance(spark, samples, assignor_names, partitions), skipped)


def run_args(args) -> int:
    """`cohort pipeline evaluate`: check the options, then score and report."""
    from cohort import assignors

    names = [n.strip() for n in args.assignors.split(",") if n.strip()]
    if not names:
        raise options.UsageError("--assignors: give at least one assignor name")
    if len(set(names)) != len(names):
        raise options.UsageError(f"--assignors: {args.assignors!r} names an assignor twice")
    for name in names:
        try:
            assignors.get(name)
        except assignors.UnknownAssignorError as e:
            raise options.UsageError(f"--assignors: {e}") from None
    from cohort.pipeline.sample_files import local_path

    local = local_path(args.samples)
    if local is not None:
        samples = Path(local)
        if not samples.is_dir():
            raise options.UsageError(f"--samples {args.samples}: no such directory")
        if not (samples / "partitions").is_dir():
            raise options.UsageError(f"--samples {args.samples}: not a lag-sample directory (no partitions/ table)")
    out = options.out_dir(args.out)
    if local is not None and out.resolve() == Path(local).resolve():
        raise options.UsageError("--out must differ from --samples")
    from cohort.pipeline.session import spark_session

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with spark_session(out, master=args.master, remote=args.remote, app_name="cohort-pipeline-evaluate",
                       driver_memory=args.driver_memory, verbose=args.verbose,
                       progress="cohort pipeline evaluate") as spark:
        try:
            facts = run(spark, args.samples, out, names, args.shuffle_partitions)
        except SamplesError as e:
            raise options.UsageError(str(e)) from None
    elapsed = time.perf_counter() - started
    skipped = f"; {facts['skipped']:,} groups without members skipped" if facts.get("skipped") else ""
    if facts["winner"] is None:
        print(f"no group with members in {args.samples}{skipped}; report: {out / 'report.md'}")
    elif facts.get("tie"):
        print(f"{facts['winner']} and {facts['runner_up']} tie over {facts['groups']:,} groups{skipped} "
              f"({elapsed:.1f} s); report: {out / 'report.md'}")
    elif facts["runner_up"] is None:
        print(f"scored {facts['groups']:,} groups with {facts['winner']}{skipped} in {elapsed:.1f} s; "
              f"report: {out / 'report.md'}")
    else:
        print(f"{facts['winner']} wins: average max member lag {100 * facts['margin']:.1f} % below "
              f"{facts['runner_up']} over {facts['groups']:,} groups{skipped} ({elapsed:.1f} s); "
              f"report: {out / 'report.md'}")
    return 0


def main(argv=None) -> int:
    """`spark-submit src/cohort/pipeline/evaluate.py ARGS`: the job's own options, as `cohort pipeline evaluate` takes them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return runner.run_parsed(options.build_parser().parse_args(["evaluate", *argv]), run_args)


if __name__ == "__main__":
    sys.exit(main())

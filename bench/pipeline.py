"""Benchmark of the Spark pipeline: `evaluate` throughput per assignor, and lag aggregation vs DuckDB.

    python bench/pipeline.py                        # 1,000,000 groups, 10,000,000 partition samples
    python bench/pipeline.py --groups 100000 --agg-rows 2000000   # a quicker run

1. Simulate GROUPS groups (20 partitions each, --samples samples) with `cohort pipeline simulate`'s code.
2. For each assignor alone, then all together: the scoring stage of `evaluate`, timed, as groups/s
   (group samples per second when --samples > 1): as `evaluate.run` does it, the Python workers
   read the group-sample table a bucket at a time (`evaluate.table_tasks`), run the assignor and
   hand the scores to Spark, which writes them as Parquet. With --spark-reader, Spark reads the
   table instead (in the splits `evaluate.even_splits` sets, with more than one sample shuffled by
   group and sorted) and mapInArrow runs the assignor. Then the whole `evaluate` job once.
3. Lag aggregation over AGG_ROWS partition samples (a simulated fleet with one sample): per group
   and sample, total lag, max partition lag and partition count, and per member the total lag.
   Spark (the same session) beside DuckDB (threads = Spark's cores) on the same Parquet files; the
   checksums must agree. Best of --repeat warm runs; the first (cold) run is reported too.

Everything is written under --work (default: a temporary directory, removed afterwards).
DuckDB comes from the `bench` extra; the pipeline itself does not use it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _timed(fn, repeat=1):
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return times, value


def bench_evaluate(spark, work: Path, groups: int, samples: int, partitions: int, names: list[str],
                   spark_reader: bool = False) -> dict:
    from cohort.pipeline import evaluate
    from cohort.pipeline.fleet import FleetParams
    from cohort.pipeline.simulate import write_fleet

    fleet = work / "fleet"
    (sim_t,), _ = _timed(lambda: write_fleet(spark, fleet, groups, FleetParams(samples=samples, partitions=partitions)))
    print(f"simulate: {groups:,} groups x {samples} samples x {partitions} partitions in {sim_t:.1f} s", flush=True)
    p, m = evaluate.load_samples(spark, str(fleet))
    rows, grouped = evaluate.load_group_samples(spark, str(fleet), p, m)
    tasks = None if spark_reader else evaluate.table_tasks(spark, str(fleet))
    print(f"reader: {'Spark' if tasks is None else f'Python workers, {len(tasks)} tasks'}", flush=True)

    def scores(names, warm_up=False):
        if tasks is not None:
            return evaluate.score_tasks(spark, tasks[: 2 * spark.sparkContext.defaultParallelism] if warm_up else tasks, names)
        return evaluate.score(spark, rows.sample(fraction=0.01, seed=1) if warm_up else rows, names, grouped)

    results = {"simulate_s": sim_t, "reader": "spark" if tasks is None else "workers", "assignors": {}}
    with evaluate.even_splits(spark):  # as `evaluate.run` scores with Spark's reader
        # Warm-up on a few tasks or 1 % of the rows: starts the Python workers and imports the
        # assignors, which would otherwise be charged to the first assignor timed.
        scores(names, warm_up=True).write.mode("overwrite").parquet(str(work / "warm-up"))
        shutil.rmtree(work / "warm-up", ignore_errors=True)
        group_samples = groups * samples
        for run in [[n] for n in names] + ([names] if len(names) > 1 else []):
            label = ",".join(run)
            out = work / f"scores-{label}"
            (t,), _ = _timed(lambda: scores(run).write.mode("overwrite").parquet(str(out)))
            rate = group_samples / t
            results["assignors"][label] = {"seconds": t, "group_samples_per_s": rate}
            print(f"evaluate scoring [{label}]: {t:.1f} s, {rate:,.0f} group samples/s", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    (t,), facts = _timed(lambda: evaluate.run(spark, str(fleet), work / "evaluation", names))
    results["evaluate_job_s"] = t
    print(f"evaluate job [{','.join(names)}] (scores, summaries, report): {t:.1f} s; winner {facts['winner']}", flush=True)
    shutil.rmtree(fleet, ignore_errors=True)
    shutil.rmtree(work / "evaluation", ignore_errors=True)
    return results


AGG_SQL = """
SELECT count(*) AS n, sum(total) AS total, sum(peak) AS peaks, sum(parts) AS parts FROM (
  SELECT group_id, sample_seq, sum(coalesce(lag, 0)) AS total, max(lag) AS peak, count(*) AS parts
  FROM {src} GROUP BY group_id, sample_seq
) g
"""
MEMBER_SQL = """
SELECT count(*) AS n, sum(total) AS total FROM (
  SELECT group_id, sample_seq, member_id, sum(coalesce(lag, 0)) AS total
  FROM {src} GROUP BY group_id, sample_seq, member_id
) m
"""


def bench_aggregation(spark, work: Path, rows: int, partitions: int, cores: int, repeat: int) -> dict:
    import duckdb

    from cohort.pipeline.fleet import FleetParams
    from cohort.pipeline.simulate import write_fleet

    groups = rows // partitions
    fleet = work / "agg"
    write_fleet(spark, fleet, groups, FleetParams(samples=1, partitions=partitions))
    path = str(fleet / "partitions")
    spark.read.parquet(path).createOrReplaceTempView("lag_samples")
    results = {"rows": groups * partitions}
    for name, sql in (("group", AGG_SQL), ("member", MEMBER_SQL)):
        spark_times, spark_row = _timed(lambda: spark.sql(sql.format(src="lag_samples")).collect()[0], repeat + 1)
        con = duckdb.connect()
        con.execute(f"SET threads = {cores}")
        src = f"read_parquet('{path}/**/*.parquet', hive_partitioning = true)"
        duck_times, duck_row = _timed(lambda: con.execute(sql.format(src=src)).fetchone(), repeat + 1)
        con.close()
        assert tuple(spark_row) == tuple(duck_row), (spark_row, duck_row)
        results[name] = {
            "spark_cold_s": spark_times[0], "spark_best_s": min(spark_times[1:]),
            "duckdb_cold_s": duck_times[0], "duckdb_best_s": min(duck_times[1:]),
            "checksum": list(spark_row),
        }
        print(f"aggregation per {name} over {groups * partitions:,} partition samples: "
              f"Spark {min(spark_times[1:]):.2f} s (cold {spark_times[0]:.2f} s), "
              f"DuckDB {min(duck_times[1:]):.2f} s (cold {duck_times[0]:.2f} s); checksums equal", flush=True)
    shutil.rmtree(fleet, ignore_errors=True)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--assignors", default="uniform,range,lag")
    parser.add_argument("--agg-rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temp dir, removed)")
    parser.add_argument("--spark-reader", action="store_true", help="score with Spark reading the group-sample table")
    parser.add_argument("--skip-evaluate", action="store_true")
    parser.add_argument("--skip-aggregation", action="store_true")
    args = parser.parse_args(argv)

    from cohort.pipeline.session import local_cores, spark_session

    own_work = args.work is None
    work = Path(tempfile.mkdtemp(prefix="cohort-bench-pipeline-") if own_work else args.work)
    work.mkdir(parents=True, exist_ok=True)
    cores = local_cores(args.master)
    results = {"master": args.master, "groups": args.groups, "samples": args.samples, "partitions": args.partitions,
               "cpu_count": os.cpu_count(), "load_avg_at_start": os.getloadavg()}
    try:
        started = time.perf_counter()
        with spark_session(work, master=args.master, app_name="cohort-bench-pipeline",
                           driver_memory=args.driver_memory) as spark:
            results["session_start_s"] = time.perf_counter() - started
            if not args.skip_evaluate:
                names = [n for n in args.assignors.split(",") if n]
                results["evaluate"] = bench_evaluate(spark, work, args.groups, args.samples, args.partitions, names,
                                                    args.spark_reader)
            if not args.skip_aggregation:
                results["aggregation"] = bench_aggregation(spark, work, args.agg_rows, args.partitions, cores, args.repeat)
        results["load_avg_at_end"] = os.getloadavg()
        print(json.dumps(results))
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

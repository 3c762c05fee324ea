"""Stored against wide group-sample rows, and Spark's reader against the Python workers' own.

    python bench/pipeline_formats.py                            # 1,000,000 groups, 3 rounds
    python bench/pipeline_formats.py --groups 200000 --rounds 2

Two runs of bench/pipeline.py on this VM differ by 5-15 %, more than the formats do, so this
bench simulates one fleet, writes its group samples a second time as wide rows (the table's format
before `cohort.pipeline.codec`: name lists and packed columns, Spark's default compression), and
alternates between three ways of reading them in one Spark session, round after round:
`stored` and `wide`, read by Spark and handed over by mapInArrow, and `workers`, the stored rows
read by the Python workers a bucket at a time (`evaluate.table_tasks`, what `evaluate` does):

1. read: every row handed to a Python function that only counts them (what reading itself costs);
2. scoring, one assignor at a time (read, score, write Parquet).

Each line gives the wall time and the machine's CPU time per group (user + nice + system from
/proc/stat, so Linux only; the JVM and the Python workers together), split into the JVM's and the
Python workers' (from /proc/<pid>/stat), and the end the medians. The machine's speed drifts
between runs; the split says where a difference comes from.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _cpu_seconds() -> float:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:4]
    return sum(map(int, fields)) / os.sysconf("SC_CLK_TCK")


def _process_cpu() -> tuple[float, float]:
    """CPU seconds so far of the JVM and of the Python processes other than this one (the workers,
    with the CPU of their exited children), from /proc/<pid>/stat."""
    tick, me, jvm, python = os.sysconf("SC_CLK_TCK"), os.getpid(), 0, 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == "java":
            jvm += int(fields[11]) + int(fields[12])
        elif name.startswith("python") and int(pid) != me:
            python += sum(map(int, fields[11:15]))
    return jvm / tick, python / tick


def _count_rows(batches):
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_arrays([pa.array([batch.num_rows], pa.int64())], names=["n"])


def _count_task_rows(batches):
    import pyarrow as pa

    from cohort.pipeline.sample_files import from_json, read_task

    for batch in batches:
        for task in batch.column(0).to_pylist():
            n = sum(b.num_rows for b in read_task(from_json(task)))
            yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["n"])


def _decode(batches):
    from cohort.pipeline import codec

    for batch in batches:
        yield codec.decode(batch)


def write_wide_copy(spark, fleet: Path, wide: Path) -> None:
    """`wide`: the fleet's flat tables (linked) and its group samples rewritten as wide rows."""
    from cohort.pipeline import codec, group_samples, layout

    wide.mkdir(parents=True)
    for table in (layout.PARTITIONS_TABLE, layout.MEMBERS_TABLE):
        os.symlink(fleet / table, wide / table)
    stored = spark.read.parquet(str(fleet / group_samples.TABLE)).select(*codec.STORED_SCHEMA.names)
    rows = layout.with_partition_columns(stored.mapInArrow(_decode, layout.spark_schema(codec.SCHEMA)))
    layout.write_partitioned(rows.repartition(*layout.PARTITION_COLUMNS), str(wide / group_samples.TABLE),
                             ("group_id", "sample_seq"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--assignors", default="uniform,range,lag")
    parser.add_argument("--readers", default="stored,wide,workers", help="which of stored, wide, workers to run")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temp dir, removed)")
    args = parser.parse_args(argv)

    from cohort.pipeline import evaluate
    from cohort.pipeline.fleet import FleetParams
    from cohort.pipeline.session import spark_session
    from cohort.pipeline.simulate import write_fleet

    own_work = args.work is None
    work = Path(tempfile.mkdtemp(prefix="cohort-bench-formats-") if own_work else args.work)
    work.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.assignors.split(",") if n]
    results: dict[str, list[float]] = {}
    try:
        with spark_session(work, master=args.master, app_name="cohort-bench-formats") as spark:
            fleet, wide = work / "stored", work / "wide"
            readers = [r for r in args.readers.split(",") if r]
            write_fleet(spark, fleet, args.groups, FleetParams(samples=1, partitions=20))
            if "wide" in readers:
                write_wide_copy(spark, fleet, wide)
            loaded = {}
            for label, path in (("stored", fleet), ("wide", wide)):
                if label in readers:
                    p, m = evaluate.load_samples(spark, str(path))
                    loaded[label] = evaluate.load_group_samples(spark, str(path), p, m)
            tasks = evaluate.table_tasks(spark, str(fleet))
            assert tasks, "the stored table is local and in the layout"
            if "workers" in readers:
                loaded["workers"] = (tasks, None)
            task_frame = evaluate.task_frame(spark, tasks)

            def read(label, rows, grouped):
                if label == "workers":
                    return task_frame.mapInArrow(_count_task_rows, "n long").groupBy().sum("n").collect()[0][0]
                return rows.mapInArrow(_count_rows, "n long").groupBy().sum("n").collect()[0][0]

            def scores(label, rows, grouped, step_names):
                if label == "workers":
                    return evaluate.score_tasks(spark, rows, step_names)
                return evaluate.score(spark, rows, step_names, grouped)

            with evaluate.even_splits(spark):
                for label, (rows, grouped) in loaded.items():  # warm-up: workers, imports, the JIT
                    few = rows[:4] if label == "workers" else rows.sample(fraction=0.02, seed=1)
                    scores(label, few, grouped, names).write.mode("overwrite").parquet(str(work / "warm-up"))
                    read(label, rows, grouped)
                for rnd in range(1, args.rounds + 1):
                    for step in ["read"] + names:
                        for label, (rows, grouped) in loaded.items():
                            cpu, split, start = _cpu_seconds(), _process_cpu(), time.perf_counter()
                            if step == "read":
                                total = read(label, rows, grouped)
                                assert total == args.groups, total
                            else:
                                scores(label, rows, grouped, [step]).write.mode("overwrite").parquet(str(work / "scores"))
                            wall, used = time.perf_counter() - start, _cpu_seconds() - cpu
                            jvm, python = (b - a for a, b in zip(split, _process_cpu()))
                            results.setdefault(f"{step} {label}", []).append(used / args.groups * 1e6)
                            results.setdefault(f"{step} {label} JVM", []).append(jvm / args.groups * 1e6)
                            results.setdefault(f"{step} {label} Python", []).append(python / args.groups * 1e6)
                            print(f"round {rnd} {step:8} {label:7}: {wall:6.2f} s, {args.groups / wall:9,.0f} groups/s, "
                                  f"{used / args.groups * 1e6:5.1f} us of CPU per group (JVM {jvm / args.groups * 1e6:4.1f}, "
                                  f"Python workers {python / args.groups * 1e6:4.1f})", flush=True)
        print("median us of CPU per group over the rounds:")
        for key, values in results.items():
            print(f"  {key:23} {statistics.median(values):5.1f}  ({', '.join(f'{v:.1f}' for v in values)})")
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

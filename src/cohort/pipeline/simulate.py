"""`cohort pipeline simulate`: write a synthetic fleet's lag samples in the layout `lag` writes.

Spark only distributes group indices; each task turns its indices into Arrow tables with numpy
(`cohort.pipeline.fleet.generate`), so no Python code runs per row. Runnable as
`spark-submit src/cohort/pipeline/simulate.py --groups N --out DIR`.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from cohort.pipeline import codec, group_samples, layout, options, runner, session
from cohort.pipeline.fleet import FleetParams, generate

ROWS_PER_TASK = 4_000_000


def _generator(params: FleetParams, which: int):
    """Arrow batches of table `which` (0: partitions, 1: members, 2: group samples) for a task's group indices."""

    def gen(batches):
        for batch in batches:
            ids = batch.column(0).to_numpy(zero_copy_only=False)
            if len(ids):
                tables = generate(ids, params)
                table = codec.encode(group_samples.from_flat(*tables)) if which == 2 else tables[which]
                yield from table.to_batches(max_chunksize=1 << 17)

    return gen


def fleet_frames(spark, groups: int, params: FleetParams, tasks: int | None = None):
    """The (partitions, members, group samples) DataFrames of a fleet of `groups` groups, with the
    layout's partition columns."""
    if tasks is None:
        rows = groups * params.samples * max(params.partitions, 1)
        tasks = max(session.default_parallelism(spark), math.ceil(rows / ROWS_PER_TASK))
    tasks = max(1, min(tasks, groups))
    ids = spark.range(0, groups, 1, numPartitions=tasks)
    frames = []
    for which, schema in enumerate((layout.PARTITION_SCHEMA, layout.MEMBER_SCHEMA, codec.STORED_SCHEMA)):
        df = ids.mapInArrow(_generator(params, which), layout.spark_schema(schema))
        frames.append(layout.with_partition_columns(df))
    return tuple(frames)


def write_fleet(spark, out: str | Path, groups: int, params: FleetParams, tasks: int | None = None) -> dict:
    """Generate and write a fleet under `out` (overwriting its three tables); returns the sizes."""
    partitions, members, grouped = fleet_frames(spark, groups, params, tasks)
    out = str(out).rstrip("/")
    # The group samples are what `evaluate` reads, and Spark pays some 15 ms of CPU per Parquet file
    # it opens: shuffled by bucket, each (date, bucket) is one file instead of one per generating task.
    grouped = grouped.repartition(*layout.PARTITION_COLUMNS)
    for name, df, order, compression in (
        (layout.PARTITIONS_TABLE, partitions, ("group_id", "sample_seq", "topic", "partition"), None),
        (layout.MEMBERS_TABLE, members, ("group_id", "sample_seq", "member_id"), None),
        (group_samples.TABLE, grouped, ("group_id", "sample_seq"), codec.STORED_COMPRESSION),
    ):
        session.step(f"generating {groups:,} groups and writing the {name} table")
        layout.write_partitioned(df, f"{out}/{name}", order, compression)
    _record_fleet(out, groups, params)
    return {"groups": groups, "samples": params.samples}


def _record_fleet(out: str, groups: int, params: FleetParams) -> None:
    """The fleet's parameters beside its tables, for the provenance of reports made from it."""
    import dataclasses
    import json

    from cohort.pipeline.evaluate import FLEET_FILE
    from cohort.pipeline.sample_files import local_path

    local = local_path(out)
    if local is not None:
        facts = {"simulated groups": groups, **{k.replace("_", " "): v for k, v in dataclasses.asdict(params).items()}}
        Path(local, FLEET_FILE).write_text(json.dumps(facts))


def run_args(args) -> int:
    """`cohort pipeline simulate`: check the options, then write the fleet."""
    out = options.out_dir(args.out)
    from cohort.pipeline.fleet import FleetParams
    from cohort.pipeline.session import spark_session

    params = FleetParams(samples=args.samples, partitions=args.partitions, seed=args.seed,
                         skewed_fraction=args.skewed_fraction, churn=args.churn)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with spark_session(out, master=args.master, remote=args.remote, app_name="cohort-pipeline-simulate",
                       driver_memory=args.driver_memory, verbose=args.verbose,
                       progress="cohort pipeline simulate") as spark:
        write_fleet(spark, out, args.groups, params)
    print(f"wrote {args.groups:,} groups x {args.samples} samples x {args.partitions} partitions to {out} "
          f"in {time.perf_counter() - started:.1f} s")
    return 0


def main(argv=None) -> int:
    """`spark-submit src/cohort/pipeline/simulate.py ARGS`: the job's own options, as `cohort pipeline simulate` takes them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return runner.run_parsed(options.build_parser().parse_args(["simulate", *argv]), run_args)


if __name__ == "__main__":
    sys.exit(main())

"""`cohort pipeline lag`: Structured Streaming from `cohort-lag` into the sample layout, with status.

Every micro-batch is one sample of the cluster (`cohort.pipeline.sources`). `foreachBatch` writes:

    OUT/partitions/, OUT/members/      the sample, in the layout of docs/pipeline.md
    OUT/group_samples/                 the same sample, one row per group (what `evaluate` reads)
    OUT/status/                        per group, topic, partition: Burrow's status over the window
    OUT/group_status/                  per group: worst status, total lag, partitions by status
    OUT/member_lag/                    per member: partitions owned and their total lag
    SNAPSHOTS/lag-<seq>.json           the broker's `cohort-lag-snapshot/1` file

all partitioned by date and group bucket. A micro-batch that Spark replays after a crash writes
the same sample number again: its files are first written under OUT/_staging/<seq>/, then the
sample's earlier files (`part-s<seq>-*`) are removed and the new ones renamed into place, so a
sample is never in a table twice. At the job's first sample and at the first of each new day,
earlier days are compacted to one file per table and bucket (`compact_closed_dates`).
"""

from __future__ import annotations

import datetime as dt
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa

from cohort.broker import lag_snapshot
from cohort.pipeline import burrow, codec, group_samples, layout, options, runner
from cohort.pipeline.session import default_parallelism, is_remote

STATUS_TABLE, GROUP_STATUS_TABLE, MEMBER_LAG_TABLE = "status", "group_status", "member_lag"
STAGING, CHECKPOINTS = "_staging", "_checkpoints"

STATUS_SCHEMA = pa.schema(
    [
        pa.field("sample_seq", pa.int64(), nullable=False),
        pa.field("sample_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("status", pa.string()),
        pa.field("window_samples", pa.int32(), nullable=False),
        pa.field("first_lag", pa.int64()),
        pa.field("last_lag", pa.int64()),
        pa.field("committed_offset", pa.int64()),
        pa.field("member_id", pa.string()),
    ]
)


def _statuses(pdf):
    """One partition's status row from its samples in the window (an `applyInPandas` function)."""
    import pandas as pd

    pdf = pdf.sort_values("sample_seq")
    last = pdf.iloc[-1]
    committed = [None if pd.isna(v) else int(v) for v in pdf["committed_offset"]]
    lags = [None if pd.isna(v) else int(v) for v in pdf["lag"]]
    owner = None if pd.isna(last["member_id"]) else last["member_id"]
    known = [v for v in lags if v is not None]
    return pd.DataFrame([{
        "sample_seq": int(last["sample_seq"]), "sample_time": last["sample_time"], "group_id": last["group_id"],
        "topic": last["topic"], "partition": int(last["partition"]),
        "status": burrow.partition_status(committed, lags, owner is not None),
        "window_samples": len(pdf), "first_lag": known[0] if known else None,
        "last_lag": lags[-1], "committed_offset": committed[-1], "member_id": owner,
    }])


def _publish(staged: Path, final: Path, seq: int) -> None:
    """Move a staged table's files into `final`, replacing whatever an earlier attempt of `seq` left."""
    prefix = f"part-s{seq:020d}-"
    for old in final.glob(f"*/*/{prefix}*"):
        old.unlink()
    for n, f in enumerate(sorted(staged.glob("*/*/part-*.parquet"))):
        target = final / f.parent.parent.name / f.parent.name
        target.mkdir(parents=True, exist_ok=True)
        f.rename(target / f"{prefix}{n:05d}.parquet")


def write_snapshot(directory: Path, seq: int, sample_time: str, groups: dict) -> Path:
    """One `cohort-lag-snapshot/1` file (docs/lag.md), in the broker's own format and writer."""
    directory.mkdir(parents=True, exist_ok=True)
    return Path(lag_snapshot.write_snapshot(str(directory), seq, sample_time, groups))


# Each table's order within a compacted file: by group, then sample, then the table's own key.
COMPACT_ORDER = {
    layout.PARTITIONS_TABLE: (("group_id", "sample_seq", "topic", "partition"), None),
    layout.MEMBERS_TABLE: (("group_id", "sample_seq", "member_id"), None),
    group_samples.TABLE: (("group_id", "sample_seq"), codec.STORED_COMPRESSION),
    STATUS_TABLE: (("group_id", "sample_seq", "topic", "partition"), None),
    GROUP_STATUS_TABLE: (("group_id", "sample_seq"), None),
    MEMBER_LAG_TABLE: (("group_id", "sample_seq", "member_id"), None),
}
COMPACTING = "compact"  # under STAGING: <table>/date=D being written, old/<table>/date=D being replaced


def compact_closed_dates(spark, out: Path, today: dt.date) -> list[tuple[str, str]]:
    """Rewrite every date before `today` whose buckets hold more than one file as one file per
    bucket, sorted by group and sample; returns the (table, date) pairs rewritten.

    A sample writes a file per table and bucket, so a day of 10 s samples leaves 8,640 files in
    each bucket directory, and every reader pays per file. Days before the current sample's date
    are closed (a replayed sample is always the latest one), so rewriting them races with nothing:
    the job calls this between samples. A date is swapped by two renames, the old directory moved
    aside under `_staging` first; `recover_compaction` finishes or undoes a swap a crash cut short.
    """
    recover_compaction(out)
    done = []
    for table, (order, compression) in COMPACT_ORDER.items():
        for date_dir in sorted((out / table).glob("date=*")):
            date = date_dir.name.split("=", 1)[1]
            if date >= today.isoformat() or not _scattered(date_dir):
                continue
            _compact(spark, out, table, date, order, compression)
            done.append((table, date))
    shutil.rmtree(out / STAGING / COMPACTING, ignore_errors=True)
    return done


def _scattered(date_dir: Path) -> bool:
    return any(len(list(bucket.glob("*.parquet"))) > 1 for bucket in date_dir.glob("group_bucket=*"))


def _compact(spark, out: Path, table: str, date: str, order, compression) -> None:
    from pyspark.sql import functions as F

    live = out / table / f"date={date}"
    staged = out / STAGING / COMPACTING / table
    aside = out / STAGING / COMPACTING / "old" / table / f"date={date}"
    shutil.rmtree(staged, ignore_errors=True)
    # Read through the table so `date` is its partition column: a literal date would let Spark
    # drop it from the sort and then re-sort by the partition columns alone, losing the order.
    rows = spark.read.parquet(str(out / table)).where(F.col("date") == F.lit(date).cast("date"))
    layout.write_partitioned(rows.repartition("group_bucket"), str(staged), order, compression)
    aside.parent.mkdir(parents=True, exist_ok=True)
    live.rename(aside)
    (staged / f"date={date}").rename(live)
    shutil.rmtree(aside)
    shutil.rmtree(staged, ignore_errors=True)


def recover_compaction(out: Path) -> None:
    """Put back a date whose swap a crash interrupted (moved aside, new one not yet in place), and
    drop whatever else a compaction left under `_staging`."""
    root = out / STAGING / COMPACTING
    if not root.is_dir():
        return
    for aside in (root / "old").glob("*/date=*"):
        live = out / aside.parent.name / aside.name
        if not live.exists():
            aside.rename(live)
    shutil.rmtree(root)


def process_sample(spark, batch, out: Path, snapshots: Path, window: int) -> dict | None:
    """Write one sample (a `cohort-lag` frame with table=all) and its status; returns counts, None if empty."""
    from pyspark.sql import functions as F

    batch = batch.persist()
    try:
        seqs = [r[0] for r in batch.select("sample_seq").distinct().collect()]
        if not seqs:
            return None
        seq = max(seqs)
        partitions = batch.where(F.col("kind") == "partition").select(*layout.PARTITION_SCHEMA.names)
        members = batch.where(F.col("kind") == "member").select(*layout.MEMBER_SCHEMA.names)
        staging = out / STAGING / f"{seq:020d}"
        shutil.rmtree(staging, ignore_errors=True)

        def stage(name, df, order, compression=None):
            layout.write_partitioned(layout.with_partition_columns(df), str(staging / name), order, compression)

        stage(layout.PARTITIONS_TABLE, partitions, ("group_id", "topic", "partition"))
        stage(layout.MEMBERS_TABLE, members, ("group_id", "member_id"))
        grouped = group_samples.spark_frame(partitions, members, default_parallelism(spark))
        stage(group_samples.TABLE, grouped, ("group_id",), codec.STORED_COMPRESSION)
        member_lag = (partitions.where(F.col("member_id").isNotNull())
                      .groupBy("sample_seq", "sample_time", "group_id", "member_id", "client_id", "client_host")
                      .agg(F.count("*").cast("int").alias("partitions"), F.sum(F.coalesce("lag", F.lit(0))).alias("total_lag")))
        stage(MEMBER_LAG_TABLE, member_lag, ("group_id", "member_id"))
        # the window: this sample and the window-1 before it, read back from what earlier batches published
        earlier = out / layout.PARTITIONS_TABLE
        history = partitions.select("sample_seq", "sample_time", "group_id", "topic", "partition",
                                    "committed_offset", "lag", "member_id")
        if any(earlier.glob("*/*/*.parquet")):
            past = (spark.read.schema(layout.spark_schema(layout.PARTITION_SCHEMA)).parquet(str(earlier))
                    .where((F.col("sample_seq") > seq - window) & (F.col("sample_seq") < seq))
                    .select(*history.columns))
            history = history.unionByName(past.join(partitions.select("group_id", "topic", "partition"),
                                                    ["group_id", "topic", "partition"], "left_semi"))
        status = history.groupBy("group_id", "topic", "partition").applyInPandas(
            _statuses, layout.spark_schema(STATUS_SCHEMA)).persist()
        stage(STATUS_TABLE, status, ("group_id", "topic", "partition"))
        rows = status.select("group_id", "topic", "partition", "status").collect()
        lags = partitions.select("group_id", "topic", "partition", "lag", "sample_time").collect()
        by_group: dict[str, list] = {}
        for r in rows:
            by_group.setdefault(r.group_id, []).append(r.status)
        totals: dict[str, int] = {}
        snapshot: dict[str, dict[str, list]] = {}
        for r in lags:
            totals[r.group_id] = totals.get(r.group_id, 0) + (r.lag or 0)
            topic = snapshot.setdefault(r.group_id, {}).setdefault(r.topic, [])
            topic.extend([None] * (r.partition + 1 - len(topic)))
            topic[r.partition] = r.lag
        sample_time = lags[0].sample_time if lags else batch.select(F.min("sample_time")).first()[0]
        group_rows = [{"sample_seq": seq, "sample_time": sample_time, "group_id": g,
                       "status": burrow.group_status(s), "total_lag": totals.get(g, 0),
                       **{f"partitions_{name.lower()}": s.count(name) for name in burrow.SEVERITY}}
                      for g, s in sorted(by_group.items())]
        if group_rows:
            stage(GROUP_STATUS_TABLE, spark.createDataFrame(group_rows), ("group_id",))
        tables = (layout.PARTITIONS_TABLE, layout.MEMBERS_TABLE, group_samples.TABLE, STATUS_TABLE,
                  GROUP_STATUS_TABLE, MEMBER_LAG_TABLE)
        for name in tables:
            if (staging / name).is_dir():
                _publish(staging / name, out / name, seq)
        shutil.rmtree(staging, ignore_errors=True)
        status.unpersist()
        when = sample_time.astimezone(dt.timezone.utc)  # collect() gives naive local time, which this reads right
        write_snapshot(snapshots, seq, when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), snapshot)
        return {"seq": seq, "date": when.date(), "groups": len(group_rows), "partitions": len(lags),
                "status": {g["group_id"]: g["status"] for g in group_rows}}
    finally:
        batch.unpersist()


def run(spark, bootstrap: str, out: Path, snapshots: Path, *, interval_s: float, once: bool,
        window: int = 10, timeout: float = 15.0, on_sample=None, max_samples: int | None = None):
    """Run the stream until it stops (`once`, or `max_samples` sweeps taken) or is interrupted;
    returns the last sample's counts."""
    from cohort.pipeline.sources import register

    register(spark)
    if is_remote(spark):
        return _run_sweeps(spark, bootstrap, out, snapshots, interval_s=interval_s, once=once, window=window,
                           timeout=timeout, on_sample=on_sample, max_samples=max_samples)
    samples = _Samples(spark, out, snapshots, window, on_sample)
    taken = [0]  # sweeps written
    busy = threading.Event()  # a sample is being written

    def each(batch, batch_id):
        if max_samples is not None and taken[0] >= max_samples:
            return  # a sweep the trigger started before the query was stopped: not written
        busy.set()
        try:
            facts = samples.write(batch)
        finally:
            taken[0] += 1
            busy.clear()
        samples.report(facts)

    stream = (spark.readStream.format("cohort-lag").option("bootstrap", bootstrap).option("table", "all")
              .option("timeout", str(timeout)).load())
    writer = stream.writeStream.foreachBatch(each).option("checkpointLocation", str(out / CHECKPOINTS / "lag"))
    writer = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=f"{interval_s} seconds")
    stopping = threading.Event()
    previous = _stop_on_sigint(stopping)
    query = writer.start()
    try:
        while not query.awaitTermination(0.5):
            if max_samples is not None and taken[0] >= max_samples and not busy.is_set():
                query.stop()
                break
            if stopping.is_set():  # Ctrl-C: let the running sample finish, then stop between samples
                deadline = time.monotonic() + 120
                while busy.is_set() and time.monotonic() < deadline:
                    time.sleep(0.2)
                query.stop()
                break
    finally:
        _end_sampling(out, previous)
    return samples.last


class _Samples:
    """What both ways of sampling do with a sample's batch: write it, compact the closed days at
    the job's first sample and at the first of each new day, then report it."""

    def __init__(self, spark, out: Path, snapshots: Path, window: int, on_sample=None) -> None:
        self.spark, self.out, self.snapshots, self.window, self.on_sample = spark, out, snapshots, window, on_sample
        self.last: dict = {}  # the last written sample's counts
        self._compacted_before = None  # the date before which every day is compacted

    def write(self, batch) -> dict | None:
        facts = process_sample(self.spark, batch, self.out, self.snapshots, self.window)
        if facts and facts["date"] != self._compacted_before:
            compact_closed_dates(self.spark, self.out, facts["date"])
            self._compacted_before = facts["date"]
        return facts

    def report(self, facts: dict | None) -> None:
        if facts:
            self.last.update(facts)
            if self.on_sample:
                self.on_sample(facts)


def _stop_on_sigint(stopping: threading.Event):
    """Ctrl-C sets `stopping` (the running sample finishes); returns the handler it replaced."""
    if threading.current_thread() is threading.main_thread():
        return signal.signal(signal.SIGINT, lambda *_: stopping.set())
    return None


def _end_sampling(out: Path, previous_handler) -> None:
    """Give SIGINT back its handler and remove `_staging` if nothing is left in it."""
    if previous_handler is not None:
        signal.signal(signal.SIGINT, previous_handler)
    staging = out / STAGING
    if staging.is_dir() and not any(staging.iterdir()):
        staging.rmdir()


def last_published_seq(out: Path) -> int:
    """The newest sample in `out`'s partitions table (0 when none): its files carry their sample
    in their names until a later day compacts them, and the newest one is never compacted."""
    newest = 0
    for f in (out / layout.PARTITIONS_TABLE).glob("*/*/part-s*-*.parquet"):
        digits = f.name[len("part-s"):].split("-", 1)[0]
        if digits.isdigit():
            newest = max(newest, int(digits))
    return newest


def _run_sweeps(spark, bootstrap: str, out: Path, snapshots: Path, *, interval_s: float, once: bool,
                window: int, timeout: float, on_sample=None, max_samples: int | None = None) -> dict:
    """The sampling loop through Spark Connect: each sweep is a batch read of `cohort-lag` at the
    next sample number, written by this process as a micro-batch would be.

    Structured Streaming's foreachBatch runs its function inside a Spark Connect server, where this
    job's report lines, stop handling and `--out` bookkeeping cannot follow; so the client drives
    the sweeps. A restarted job continues after the newest published sample, as a checkpointed
    query does, and Ctrl-C lets the running sweep finish."""
    samples = _Samples(spark, out, snapshots, window, on_sample)
    stopping = threading.Event()
    previous = _stop_on_sigint(stopping)
    seq, taken = last_published_seq(out), 0
    try:
        while max_samples is None or taken < max_samples:
            taken += 1
            started = time.monotonic()
            seq += 1
            batch = (spark.read.format("cohort-lag").option("bootstrap", bootstrap).option("table", "all")
                     .option("timeout", str(timeout)).option("sample_seq", str(seq)).load())
            samples.report(samples.write(batch))
            if once or taken == max_samples or stopping.wait(max(0.0, started + interval_s - time.monotonic())):
                break
    finally:
        _end_sampling(out, previous)
    return samples.last


def run_args(args, spark=None) -> int:
    """`cohort pipeline lag`: check the options and the cluster, then sample (on `spark` if given)."""
    out = options.out_dir(args.out)
    snapshots = Path(args.snapshot_dir) if args.snapshot_dir else out / "snapshots"
    if snapshots.exists() and not snapshots.is_dir():
        raise options.UsageError(f"--snapshot-dir {args.snapshot_dir}: exists and is not a directory")
    from cohort.pipeline.session import spark_session
    from cohort.pipeline.wire import WireError, check, group_count

    check(args.bootstrap, args.timeout)  # a wrong address fails here, in seconds, before Spark starts
    if args.once and group_count(args.bootstrap, args.timeout) == 0:  # so does one sample of nothing
        raise WireError(f"no consumer group at {args.bootstrap}; nothing to sample")
    out.mkdir(parents=True, exist_ok=True)

    def report(facts):
        statuses = ", ".join(f"{g}={s}" for g, s in sorted(facts["status"].items())[:10])
        print(f"sample {facts['seq']}: {facts['groups']} groups, {facts['partitions']} partitions"
              + (f" ({statuses})" if statuses else ""), flush=True)

    def go(session):
        return run(session, args.bootstrap, out, snapshots, interval_s=args.interval, once=args.once,
                   max_samples=args.max_samples, window=args.window, timeout=args.timeout, on_sample=report)

    if spark is not None:
        last = go(spark)
    else:
        with spark_session(out, master=args.master, remote=args.remote, app_name="cohort-pipeline-lag",
                           driver_memory=args.driver_memory, verbose=args.verbose) as session:
            last = go(session)
    if not last:
        print(f"no consumer group at {args.bootstrap}; nothing written to {out}")
    return 0


def main(argv=None) -> int:
    """`spark-submit src/cohort/pipeline/lag.py --bootstrap HOST:PORT --out DIR ...`: the job's own
    options, as `cohort pipeline lag` takes them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return runner.run_parsed(options.build_parser().parse_args(["lag", *argv]), run_args)


if __name__ == "__main__":
    sys.exit(main())

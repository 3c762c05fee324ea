"""The three jobs on a Spark standalone cluster and through Spark Connect, as on `local[2]`.

One cluster for the module (a master and two workers, `tests/spark_cluster.py`) and a Spark
Connect server. Each job runs as users run it: `spark-submit src/cohort/pipeline/JOB.py` against
the standalone master (as docs/pipeline.md describes) and `cohort pipeline ... --remote
sc://...`; their tables must hold what a `local[2]` run writes. A submitted application runs in
one executor of two cores (an executor is a JVM of its own: 8-10 s of CPU), except `evaluate`'s,
whose aggregations shuffle between two executors of one core, one on each worker. `lag` takes
three sweeps of a live broker with a KIP-848 group and a classic group, each with a member, whose
committed offsets do not move while the runs take their samples.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from spark_cluster import SparkCluster, spark_home

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

JOBS_DIR = Path(__file__).resolve().parents[2] / "src" / "cohort" / "pipeline"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SparkCluster(tmp_path_factory.mktemp("cluster"), executor_cores=2) as made:
        # The Connect server runs its own local[2] (not two more executors on the workers): what
        # is tested through it is Spark Connect; the cluster is tested by spark-submit.
        made.start_connect(master="local[2]")
        yield made


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    """A broker with topic `orders` (4 partitions, 30 records each), group `kip848` (consumer
    protocol) and group `classic`, each with one member that committed part of the topic and then
    keeps polling without committing: the lag of every partition stays as it is."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    from cohort_testing import ServerProcess

    base = tmp_path_factory.mktemp("broker")
    server = ServerProcess(base / "data", log_path=str(base / "server.log")).start()
    consumers, stop, poller = [], threading.Event(), None
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})  # kept until the topic exists
        admin.create_topics([NewTopic("orders", num_partitions=4, replication_factor=1)])["orders"].result(10)
        producer = ck.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        for p in range(4):
            for i in range(30):
                producer.produce("orders", value=b"%d" % i, partition=p)
        assert producer.flush(20) == 0
        for protocol, group, wanted in (("consumer", "kip848", 40), ("classic", "classic", 70)):
            c = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "group.protocol": protocol,
                             "client.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "max.partition.fetch.bytes": 256, "log_level": 0})
            consumers.append(c)
            c.subscribe(["orders"])
            seen, deadline = 0, time.monotonic() + 60
            while seen < wanted:
                assert time.monotonic() < deadline, f"{group} consumed only {seen}"
                m = c.poll(0.1)
                if m is not None and not m.error():
                    seen += 1
            c.commit(asynchronous=False)

        def keep_polling():
            while not stop.wait(0.2):
                for c in consumers:
                    c.poll(0)

        poller = threading.Thread(target=keep_polling, name="test-clusters-members")
        poller.start()
        yield server
    finally:
        stop.set()
        if poller is not None:
            poller.join()
        for c in consumers:
            c.close()
        assert server.stop() == 0


# --- running the jobs ------------------------------------------------------------------------


def run_job(cluster: SparkCluster, way: str, job: str, out: Path, *args: str) -> str:
    """`job` run `way` (local, submit or connect) writing to `out`; returns its stdout."""
    return run_jobs(cluster, [(way, job, out, args)])[0]


def run_jobs(cluster: SparkCluster, jobs) -> list[str]:
    """(way, job, out, args) run side by side (a spark-submit application takes the cluster's
    cores, a Connect job the server's own); their stdouts, in order."""
    started = [(way, job, subprocess.Popen(_command(cluster, way, job, out, *args), env=_env(cluster, way),
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                           start_new_session=True))
               for way, job, out, args in jobs]
    outputs = []
    try:
        for way, job, proc in started:
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, f"{way} {job}: {stderr[-3000:]}"
            outputs.append(stdout)
    finally:
        for _, _, proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return outputs


def _env(cluster: SparkCluster, way: str) -> dict:
    env = cluster.env()
    if way == "local":  # the suite's own defaults for local jobs, not the cluster's
        env["SPARK_CONF_DIR"] = str(Path(__file__).parent / "spark-conf")
    return env


def _command(cluster: SparkCluster, way: str, job: str, out: Path, *args: str) -> list[str]:
    if way == "submit":
        two_executors = ["--conf", "spark.executor.cores=1"] if job == "evaluate" else []
        return [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url, *two_executors,
                str(JOBS_DIR / f"{job}.py"), *args, "--out", str(out)]
    where = ["--master", "local[2]"] if way == "local" else ["--remote", cluster.remote]
    return [sys.executable, "-m", "cohort.pipeline.cli", job, *args, "--out", str(out), *where]


ON_CLUSTERS = ("submit", "connect")
TIMES = {"sample_time", "evaluated"}
PLACES = {"date", "group_bucket"}  # the layout's partition columns (directories)


def rows(table, key: tuple[str, ...], drop=frozenset()) -> list[dict]:
    """A table's rows (a directory or an Arrow table) without time columns and `drop`, floats to 9
    significant digits (Spark may sum a group's values in another order on another layout),
    sorted by `key`."""
    read = pq.read_table(table) if isinstance(table, Path) else table
    out = [{k: _rounded(v) for k, v in row.items() if k not in TIMES and k not in drop} for row in read.to_pylist()]
    return sorted(out, key=lambda r: tuple(str(r[k]) for k in key))


def _rounded(v):
    if isinstance(v, float) and math.isfinite(v) and v != 0:
        return float(f"{v:.9g}")
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    return v


# --- the jobs ---------------------------------------------------------------------------------
# `simulate` and `lag` are checked against what their Python code gives without Spark (the fleet
# generator, one sweep of the cluster): what a local[2] run writes, row for row, without paying
# for a third JVM. `evaluate` runs on local[2] as well, its reference.

SIMULATE = ("--groups", "48", "--samples", "2", "--seed", "5")


@pytest.fixture(scope="module")
def fleets(cluster, tmp_path_factory):
    base = tmp_path_factory.mktemp("simulate")
    for stdout in run_jobs(cluster, [(way, "simulate", base / way, SIMULATE) for way in ON_CLUSTERS]):
        assert "wrote 48 groups x 2 samples x 20 partitions" in stdout
    return {way: base / way for way in ON_CLUSTERS}


def test_simulate_writes_the_fleet_of_its_generator_on_a_cluster_and_through_connect(fleets):
    import numpy as np

    from cohort.pipeline import codec, group_samples
    from cohort.pipeline.fleet import FleetParams, generate

    # `cohort pipeline simulate`'s defaults, with SIMULATE's samples and seed
    partitions, members = generate(np.arange(48), FleetParams(samples=2, partitions=20, seed=5,
                                                              skewed_fraction=0.5, churn=0.3))
    grouped = codec.encode(group_samples.from_flat(partitions, members))
    for table, made, key in (("partitions", partitions, ("group_id", "sample_seq", "topic", "partition")),
                             ("members", members, ("group_id", "sample_seq", "member_id")),
                             ("group_samples", grouped, ("group_id", "sample_seq"))):
        expected = rows(made, key)
        assert len(expected) >= 96
        for way in ON_CLUSTERS:
            assert rows(fleets[way] / table, key, drop=PLACES) == expected, f"{way}: {table}"


def test_evaluate_scores_and_ranks_as_on_local_2(cluster, fleets, tmp_path):
    outs = {way: tmp_path / way for way in ("local", *ON_CLUSTERS)}
    for stdout in run_jobs(cluster, [(way, "evaluate", out, ("--samples", str(fleets["submit"])))
                                     for way, out in outs.items()]):
        assert "over 48 groups" in stdout, stdout
    for table, key in (("scores", ("group_id", "sample_seq", "assignor")),
                       ("group_summary", ("group_id", "assignor")),
                       ("group_winners", ("group_id",)), ("overall", ("assignor",))):
        local = rows(outs["local"] / table, key)
        assert len(local) >= 3
        for way in ON_CLUSTERS:
            assert rows(outs[way] / table, key) == local, f"{way}: {table}"
    assert f"master {cluster.master_url}" in (outs["submit"] / "report.md").read_text()
    assert f"master {cluster.remote}" in (outs["connect"] / "report.md").read_text()


def test_lag_takes_three_sweeps_on_a_cluster_and_through_connect(cluster, groups, tmp_path):
    from cohort.pipeline import burrow, layout, wire

    sweep = wire.sample_cluster(groups.bootstrap, 0)  # what every sample must find: nothing moves
    partitions = wire.project(sweep, layout.PARTITIONS_TABLE).to_pylist()
    members = wire.project(sweep, layout.MEMBERS_TABLE).to_pylist()
    assert {(r["group_id"], r["group_type"]) for r in partitions} == {("kip848", "consumer"), ("classic", "classic")}
    assert len(partitions) == 8 and all(r["member_id"] for r in partitions)
    assert any(r["lag"] for r in partitions)

    def each_sample(found):
        return [{**r, "sample_seq": seq} for seq in (1, 2, 3) for r in found]

    def status(r):  # the sweeps see the same commits: never moved since the first sample
        if r["committed_offset"] is None:
            return None
        return "OK" if r["lag"] == 0 or r["sample_seq"] == 1 else "STALL"

    expected = {"partitions": each_sample(partitions), "members": each_sample(members)}
    statuses = [{"sample_seq": r["sample_seq"], "group_id": r["group_id"], "topic": r["topic"],
                 "partition": r["partition"], "status": status(r)} for r in expected["partitions"]]
    worst = {}
    for r in statuses:
        seen = worst.setdefault((r["sample_seq"], r["group_id"]), [])
        seen.append(r["status"])
    group_statuses = [{"sample_seq": s, "group_id": g, "status": burrow.group_status(found)}
                      for (s, g), found in worst.items()]
    keys = {"partitions": ("sample_seq", "group_id", "topic", "partition"),
            "members": ("sample_seq", "group_id", "member_id")}
    sweep_args = ("--bootstrap", groups.bootstrap, "--interval", "1s")
    # side by side: three sweeps on the cluster; through Connect two, then a restarted job's third,
    # which continues after the last published sample, as a checkpointed query does
    on_cluster, first_two = run_jobs(cluster, [("submit", "lag", tmp_path / "submit", (*sweep_args, "--max-samples", "3")),
                                               ("connect", "lag", tmp_path / "connect", (*sweep_args, "--max-samples", "2"))])
    stdouts = {"submit": on_cluster, "connect": first_two + run_job(cluster, "connect", "lag", tmp_path / "connect",
                                                                      *sweep_args, "--once")}
    for way in ON_CLUSTERS:
        out, stdout = tmp_path / way, stdouts[way]
        samples = [line.split(" (")[0] for line in stdout.splitlines() if line.startswith("sample ")]
        assert samples == [f"sample {n}: 2 groups, 8 partitions" for n in (1, 2, 3)], stdout
        for table, key in keys.items():
            assert rows(out / table, key, drop=PLACES) == rows(pa_table(expected[table]), key), f"{way}: {table}"
        got = rows(out / "status", keys["partitions"], drop=PLACES)
        assert [{k: r[k] for k in statuses[0]} for r in got] == rows(pa_table(statuses), keys["partitions"]), way
        got = rows(out / "group_status", ("sample_seq", "group_id"), drop=PLACES)
        assert [{k: r[k] for k in group_statuses[0]} for r in got] == rows(pa_table(group_statuses),
                                                                            ("sample_seq", "group_id")), way


def pa_table(found: list[dict]):
    import pyarrow as pa

    return pa.Table.from_pylist(found)


def test_a_connect_address_with_no_server_is_one_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens: bound, never listening
        result = subprocess.run([sys.executable, "-m", "cohort.pipeline.cli", "simulate", "--groups", "2",
                                 "--out", str(tmp_path / "out"), "--remote", f"sc://127.0.0.1:{port}"],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"cohort pipeline simulate: failed: no Spark Connect server answers at sc://127.0.0.1:{port} (Connection refused)"]


@pytest.mark.parametrize("args, message", [
    (["--remote", "http://x:1"], "argument --remote: expected sc://HOST:PORT, got 'http://x:1'"),
    (["--remote", "sc://x:99999"], "argument --remote: expected sc://HOST:PORT, got 'sc://x:99999'"),
    (["--remote", "sc://x:1", "--master", "local[2]"], "argument --master: not allowed with argument --remote"),
])
def test_bad_remote_options_are_one_line(tmp_path, args, message):
    result = subprocess.run([sys.executable, "-m", "cohort.pipeline.cli", "simulate", "--groups", "2",
                             "--out", str(tmp_path / "out"), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == f"cohort pipeline simulate: error: {message}"
    assert not (tmp_path / "out").exists()


def test_a_failure_on_the_connect_server_is_one_line_with_its_cause(cluster, tmp_path):
    bad = tmp_path / "samples" / "partitions" / "date=2026-01-01" / "group_bucket=1"
    bad.mkdir(parents=True)
    (bad / "part-0.parquet").write_bytes(b"not parquet")
    result = subprocess.run([sys.executable, "-m", "cohort.pipeline.cli", "evaluate", "--samples",
                             str(tmp_path / "samples"), "--out", str(tmp_path / "out"), "--remote", cluster.remote],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("cohort pipeline evaluate: failed: ") and "FAILED_READ_FILE" in line, line
    assert "part-0.parquet" in line
    assert not (tmp_path / "out" / "_spark").exists()


def test_progress_lines_through_connect_count_tasks(cluster, slow_count_progress):
    """The lines of a job through Spark Connect come from its progress reports: tasks per stage."""
    from pyspark.sql import SparkSession

    from cohort.pipeline import session

    spark = SparkSession.builder.remote(cluster.remote).create()
    try:
        assert session.is_remote(spark) and session.default_parallelism(spark) == 2  # the server's local[2]
        lines = slow_count_progress(spark, "connect", rows=400, tasks=8, sleep_s=0.01)
    finally:
        spark.stop()
    assert any(re.search(r"stage \d+: \d+/8 tasks done", line) for line in lines), lines
    assert all("tasks/s" in line and "rows read" not in line for line in lines), lines

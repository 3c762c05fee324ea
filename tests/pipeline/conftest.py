"""One quiet local[2] SparkSession for the whole pipeline suite, and a small simulated fleet.

The session follows the reference's recommended test config (C1 JIT only, quiet log4j, AQE off,
two shuffle partitions, everything on 127.0.0.1) with its scratch space under pytest's temp dir.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# must be set before the first SparkSession starts the JVM
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# spark-defaults.conf for the jobs run as a user runs them (their own process and JVM)
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "spark-conf"))
for _name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    from cohort.pipeline.session import LOG4J2

    tmp = tmp_path_factory.mktemp("spark")
    (tmp / "jvm-tmp").mkdir()
    log4j = tmp / "log4j2-test.properties"
    log4j.write_text(LOG4J2)
    os.environ["SPARK_LOCAL_DIRS"] = str(tmp / "local")
    java_opts = " ".join([
        f"-Dlog4j2.configurationFile=file:{log4j}",
        f"-Djava.io.tmpdir={tmp / 'jvm-tmp'}",
        "-XX:TieredStopAtLevel=1",
        # C1 alone sizes the code cache at 48 MB, which this session (the whole unit's Spark code)
        # filled once in a CI run: "Out of space in CodeCache for adapters", and the JVM was gone
        "-XX:ReservedCodeCacheSize=240m",
        "-XX:+UseSerialGC",  # no concurrent GC threads beside five other workers on 2 cores
        "-XX:-UsePerfData",
    ])
    session = (
        SparkSession.builder.master("local[2]").appName("cohort-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass(frozen=True)
class Fleet:
    dir: Path
    groups: int
    samples: int
    seed: int


# Started in the background as soon as the fleet is written (see `fleet`), taken by `evaluation`.
_STARTED: dict = {}
# Modules whose worker runs no test that needs `evaluation` (tests/conftest.py: units of their own).
_NO_EVALUATION = ("tests/pipeline/test_cli.py",)


@pytest.fixture(scope="session")
def fleet(spark, tmp_path_factory, request) -> Fleet:
    """A simulated fleet (240 groups x 3 samples, 20 partitions each) written in the sample layout.

    The `evaluation` of it, a job of its own process and JVM, starts right away and runs while
    the suite's other Spark tests do (the tests that take it run last, tests/conftest.py)."""
    from cohort.pipeline.fleet import FleetParams
    from cohort.pipeline.simulate import write_fleet

    made = Fleet(tmp_path_factory.mktemp("fleet"), groups=240, samples=3, seed=7)
    write_fleet(spark, made.dir, made.groups, FleetParams(samples=made.samples, seed=made.seed))
    if not request.node.nodeid.startswith(_NO_EVALUATION):
        run = _STARTED["evaluation"] = IsolatedRun(tmp_path_factory.mktemp("evaluation"), "evaluate",
                                                      "--samples", str(made.dir))
        request.addfinalizer(run.stop)
    return made


JVM_NAMES = re.compile(r"spark|blockmgr|hsperfdata|snappy|lz4|netty|zstd|jna|py4j|pyspark|jetty|artifacts-|\.java", re.I)


@dataclass(frozen=True)
class Evaluation:
    out: Path            # the --out directory
    stdout: str
    work: Path           # the process's working directory (empty before)
    tmpdir: Path         # its $TMPDIR (empty before)
    home: Path           # its $HOME (empty before)
    new_in_tmp: set      # entries with JVM/Spark names that appeared in /tmp during the run


class IsolatedRun:
    """`cohort pipeline ARGS --out BASE/out` as a user runs it: its own process and JVM.

    The working directory, $TMPDIR and $HOME are fresh empty directories, so a test can check
    that nothing was written outside --out. The JVM ignores $TMPDIR, so /tmp is listed before
    and after; other processes share /tmp, so only names Spark and the JVM use count.
    """

    def __init__(self, base: Path, *args: str) -> None:
        self.work, self.tmpdir, self.home, self.out = (base / name for name in ("work", "tmpdir", "home", "out"))
        for d in (self.work, self.tmpdir, self.home):
            d.mkdir()
        env = {**os.environ, "TMPDIR": str(self.tmpdir), "HOME": str(self.home)}
        for key in ("SPARK_LOCAL_DIRS", "MPLCONFIGDIR", "PYSPARK_GATEWAY_PORT", "HYPOTHESIS_STORAGE_DIRECTORY"):
            env.pop(key, None)
        self.before = set(os.listdir("/tmp"))
        self.stdout_path, self.stderr_path = base / "stdout", base / "stderr"
        with open(self.stdout_path, "wb") as stdout, open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cohort.pipeline.cli", *args, "--out", str(self.out), "--master", "local[2]"],
                cwd=self.work, env=env, stdout=stdout, stderr=stderr)

    def result(self, timeout: float = 300) -> Evaluation:
        """Wait for the job; it must succeed."""
        try:
            code = self.process.wait(timeout)
        finally:
            self.stop()
        assert code == 0, self.stderr_path.read_text()
        new_in_tmp = {name for name in set(os.listdir("/tmp")) - self.before if JVM_NAMES.search(name)}
        return Evaluation(self.out, self.stdout_path.read_text(), self.work, self.tmpdir, self.home, new_in_tmp)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def run_isolated(base: Path, *args: str) -> Evaluation:
    """`IsolatedRun`, waited for."""
    return IsolatedRun(base, *args).result()


@pytest.fixture(scope="session")
def evaluation(fleet, tmp_path_factory) -> Evaluation:
    """`cohort pipeline evaluate` on the fleet, run as a user runs it (`IsolatedRun`), started
    when the fleet was written."""
    run = _STARTED.pop("evaluation", None) or IsolatedRun(tmp_path_factory.mktemp("evaluation"), "evaluate",
                                                             "--samples", str(fleet.dir))
    return run.result()


@pytest.fixture
def slow_count_progress(capsys, monkeypatch):
    """A function that counts `rows` rows through `tasks` tasks of a UDF sleeping `sleep_s` a row
    (nondeterministic, so it stays above the shuffle) on `spark`, under a `session.Progress`
    reporter named `name` reporting every 0.1 s, and returns the lines of that step."""
    from pyspark.sql import functions as F

    from cohort.pipeline import session

    monkeypatch.setattr(session, "PROGRESS_EVERY_S", 0.1)

    def run(spark, name: str, rows: int, tasks: int, sleep_s: float) -> list[str]:
        slow = F.udf(lambda x: __import__("time").sleep(sleep_s) or x, "long").asNondeterministic()
        reporter = session.Progress(spark, name)
        try:
            session.step("filtering slowly")
            assert spark.range(0, rows, 1, 2).repartition(tasks).where(slow("id") >= 0).count() == rows
        finally:
            reporter.stop()
        return [line for line in capsys.readouterr().err.splitlines()
                if line.startswith(f"{name}: progress: filtering slowly (")]

    return run


@pytest.fixture(scope="session")
def isolated():
    """`run_isolated`, for tests that run a job of their own."""
    return run_isolated


@dataclass(frozen=True)
class LiveGroup:
    bootstrap: str
    group: str
    topic: str
    partitions: int
    produced: dict       # partition -> records produced
    client_id: str


@pytest.fixture(scope="session")
def live(tmp_path_factory):
    """`cohort serve` with a skewed topic and a KIP-848 consumer group that consumed part of it.

    Yields (cluster, consumer); the consumer stays a member until a test closes it.
    """
    import time

    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    from cohort_testing import ServerProcess

    base = tmp_path_factory.mktemp("live")
    server = ServerProcess(base / "data", "group.consumer.heartbeat.interval.ms=300",
                           "group.consumer.min.heartbeat.interval.ms=100", "group.consumer.session.timeout.ms=4000",
                           "group.consumer.min.session.timeout.ms=1000", log_path=str(base / "server.log")).start()
    topic, partitions, group, client_id = "orders", 4, "lagging", "lag-e2e"
    produced = {0: 200, 1: 20, 2: 20, 3: 20}
    consumer = None
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for name, n in ((topic, partitions), ("unread", 1)):
            admin.create_topics([NewTopic(name, num_partitions=n, replication_factor=1)])[name].result(10)
        producer = ck.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        for p, count in produced.items():
            for i in range(count):
                producer.produce(topic, value=b"%d" % i, partition=p)
        producer.produce("unread", value=b"x", partition=0)
        assert producer.flush(20) == 0
        consumer = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "group.protocol": "consumer",
                                "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": client_id,
                                "max.partition.fetch.bytes": 256})
        consumer.subscribe([topic])
        seen = {p: 0 for p in produced}
        deadline = time.monotonic() + 30
        while not (sum(seen.values()) >= 60 and seen[0] >= 10):  # p0 stays far behind: 200 records
            assert time.monotonic() < deadline, f"consumed only {seen}"
            m = consumer.poll(0.1)
            if m is None or m.error():
                continue
            for _ in range(50):  # a heartbeat may bump the epoch while the commit is in flight
                try:
                    consumer.commit(message=m, asynchronous=False)
                    break
                except ck.KafkaException as exc:
                    if exc.args[0].code() != ck.KafkaError.STALE_MEMBER_EPOCH:
                        raise
                    time.sleep(0.05)
            seen[m.partition()] += 1
        yield LiveGroup(server.bootstrap, group, topic, partitions, produced, client_id), consumer
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except RuntimeError:  # a test closed it already
                pass
        assert server.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"

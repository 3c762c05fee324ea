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


@pytest.fixture(scope="session")
def fleet(spark, tmp_path_factory) -> Fleet:
    """A simulated fleet (240 groups x 3 samples, 20 partitions each) written in the sample layout."""
    from cohort.pipeline.fleet import FleetParams
    from cohort.pipeline.simulate import write_fleet

    made = Fleet(tmp_path_factory.mktemp("fleet"), groups=240, samples=3, seed=7)
    write_fleet(spark, made.dir, made.groups, FleetParams(samples=made.samples, seed=made.seed))
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


@pytest.fixture(scope="session")
def evaluation(fleet, tmp_path_factory) -> Evaluation:
    """`cohort pipeline evaluate` on the fleet, run as a user runs it: its own process and JVM.

    The working directory, $TMPDIR and $HOME are fresh empty directories, so a test can check
    that nothing was written outside --out. The JVM ignores $TMPDIR, so /tmp is listed before
    and after; other processes share /tmp, so only names Spark and the JVM use count.
    """
    base = tmp_path_factory.mktemp("evaluation")
    work, tmpdir, home, out = (base / name for name in ("work", "tmpdir", "home", "out"))
    for d in (work, tmpdir, home):
        d.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir), "HOME": str(home)}
    for key in ("SPARK_LOCAL_DIRS", "MPLCONFIGDIR", "PYSPARK_GATEWAY_PORT"):
        env.pop(key, None)
    before = set(os.listdir("/tmp"))
    args = ["evaluate", "--samples", str(fleet.dir), "--out", str(out), "--master", "local[2]"]
    result = subprocess.run([sys.executable, "-m", "cohort.pipeline.cli", *args], cwd=work, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    new_in_tmp = {name for name in set(os.listdir("/tmp")) - before if JVM_NAMES.search(name)}
    return Evaluation(out, result.stdout, work, tmpdir, home, new_in_tmp)

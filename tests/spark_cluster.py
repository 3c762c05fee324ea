"""A Spark standalone cluster and a Spark Connect server on 127.0.0.1, from pyspark's own scripts.

`SparkCluster(base).start()` starts a master and two workers (`bin/spark-class`, separate JVMs,
free ports, their own work, log and scratch directories under `base`); `start_connect()` adds a
Spark Connect server (`SparkConnectServer` through `bin/spark-submit`, as
`sbin/start-connect-server.sh` does), on the cluster or on a master of its own. `stop()` ends every
process group it started, executors included. Used by tests/pipeline/test_clusters.py and
bench/pipeline_clusters.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Every JVM of the cluster: the quick compiler only (with the code cache C2 would have: C1 alone
# sizes it at 48 MB, too small for a long-lived Spark JVM) and one GC thread (2 cores).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC -XX:-UsePerfData"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkCluster:
    """A master and `workers` workers of `cores` cores each; every application on it gets at most
    `app_cores` cores, in executors of `executor_cores` (an application may ask for other sizes:
    `--conf spark.executor.cores=N`)."""

    def __init__(self, base: Path, workers: int = 2, cores: int = 2, app_cores: int = 2,
                 executor_cores: int = 1) -> None:
        self.base = Path(base)
        self.workers, self.cores, self.app_cores, self.executor_cores = workers, cores, app_cores, executor_cores
        self.processes: list[subprocess.Popen] = []
        self.master_url = ""
        self.remote = ""
        self.conf_dir = self.base / "conf"

    # --- the environment every process of the cluster (and every job on it) gets -------------

    def env(self) -> dict[str, str]:
        tmp = self.base / "tmp"
        jvm = f"{JVM_OPTIONS} -Djava.io.tmpdir={tmp}"
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(self.conf_dir),
               "SPARK_LOG_DIR": str(self.base / "logs"), "SPARK_PID_DIR": str(self.base / "pids"),
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_JAVA_OPTS": jvm,
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "TMPDIR": str(tmp),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        for key in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_LOCAL_DIRS", "SPARK_REMOTE"):
            env.pop(key, None)
        return env

    def _write_conf(self) -> None:
        tmp = self.base / "tmp"
        for d in (self.conf_dir, tmp, self.base / "logs", self.base / "pids"):
            d.mkdir(parents=True, exist_ok=True)
        jvm = f"{JVM_OPTIONS} -Djava.io.tmpdir={tmp}"
        (self.conf_dir / "spark-defaults.conf").write_text("\n".join([
            "spark.driver.host 127.0.0.1",
            "spark.driver.bindAddress 127.0.0.1",
            "spark.ui.enabled false",
            f"spark.cores.max {self.app_cores}",
            f"spark.executor.cores {self.executor_cores}",
            "spark.executor.memory 512m",
            f"spark.driver.defaultJavaOptions {jvm}",
            f"spark.executor.defaultJavaOptions {jvm}",
            "spark.sql.adaptive.enabled false",
            "spark.sql.shuffle.partitions 4",  # Spark's 200 are 200 tasks per shuffle for a few rows
        ]) + "\n")
        (self.conf_dir / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
            "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
            "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex\n")

    def _spawn(self, name: str, *cmd: str, daemon: bool = True) -> subprocess.Popen:
        env = self.env()
        if daemon:  # the master's and workers' heap (an application's driver sizes its own)
            env["SPARK_DAEMON_MEMORY"] = "256m"
        log = open(self.base / "logs" / f"{name}.out", "ab")
        try:
            proc = subprocess.Popen(list(cmd), env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.base)
        finally:
            log.close()
        self.processes.append(proc)
        return proc

    # --- starting and stopping ---------------------------------------------------------------

    def start(self, timeout: float = 90) -> "SparkCluster":
        self._write_conf()
        spark_class = str(spark_home() / "bin" / "spark-class")
        port, ui = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        try:
            self._spawn("master", spark_class, "org.apache.spark.deploy.master.Master",
                        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui))
            _wait_for_port(port, timeout, self.processes[0], self.base / "logs" / "master.out")
            for i in range(self.workers):
                work = self.base / f"worker-{i}"
                (work / "local").mkdir(parents=True, exist_ok=True)
                self._spawn(f"worker-{i}", spark_class, "org.apache.spark.deploy.worker.Worker",
                            "--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", str(self.cores),
                            "--memory", "2g", "--work-dir", str(work), self.master_url)
            deadline = time.monotonic() + timeout
            while self.alive_workers(ui) < self.workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.workers} workers did not register; see {self.base / 'logs'}")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def alive_workers(ui_port: int) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def start_connect(self, master: str | None = None, timeout: float = 120) -> str:
        """A Spark Connect server (its executors on the cluster, or `master`, such as local[2]);
        returns its sc:// address."""
        port = free_port()
        proc = self._spawn("connect", str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER,
                           "--name", "Spark Connect server", "--master", master or self.master_url,
                           "--driver-memory", "1g",
                           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                           "--conf", f"spark.connect.grpc.binding.port={port}", daemon=False)
        self._connect_index = len(self.processes) - 1
        _wait_for_port(port, timeout, proc, self.base / "logs" / "connect.out")
        self.remote = f"sc://127.0.0.1:{port}"
        return self.remote

    def stop_connect(self) -> None:
        """Stop the Spark Connect server, if one runs (the cluster stays)."""
        if not self.remote:
            return
        self._end(self.processes.pop(self._connect_index))
        self.remote = ""

    def _end(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group
        except ProcessLookupError:
            pass
        proc.wait()

    def stop(self) -> None:
        """End every process group started (a worker's executors are in its group), newest first."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for proc in reversed(self.processes):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group (an executor, a shell)
            except ProcessLookupError:
                pass
            proc.wait()
        self.processes.clear()

    def __enter__(self) -> "SparkCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _wait_for_port(port: int, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"nothing listens on {port} (exit {proc.poll()}): {tail}")
        time.sleep(0.2)

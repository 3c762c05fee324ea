"""A quiet SparkSession whose scratch space lives inside the job's output directory.

Everything Spark and the JVM would write elsewhere (shuffle and block-manager dirs, the
warehouse, java.io.tmpdir, hsperfdata, Python temp files, matplotlib's font cache, the unicode
cache hypothesis writes when kio, the protocol codec, is imported) goes under
OUT/_spark, which is removed when the job ends; a killed job leaves it inside OUT and nowhere else. Under spark-submit the JVM
already exists, so only the SQL settings and matplotlib's cache dir apply; the cluster manager
owns Spark's scratch space.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

SCRATCH = "_spark"

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.pgs.name = org.apache.spark.api.python.PythonGatewayServer
logger.pgs.level = error
"""

# PySpark 4 logs every converted exception as a multi-KB JSON record, even when it is caught.
_NOISY_LOGGERS = ("DataFrameQueryContextLogger", "SQLQueryContextLogger")


def under_spark_submit() -> bool:
    """True when spark-submit started this process (it hands us its gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_cores(master: str) -> int:
    """Cores a local master uses (local, local[N], local[*], local[N,F]); the machine's count otherwise."""
    cpus = os.cpu_count() or 2
    if master == "local":
        return 1
    if master.startswith("local["):
        n = master[len("local["):].split(",")[0].rstrip("]")
        return cpus if n == "*" else max(1, int(n)) if n.isdigit() else cpus
    return cpus


DEFAULT_CONNECT_PORT = 15002


class SparkUnreachable(Exception):
    """The Spark Connect server named by --remote does not answer: one line, exit 1."""


def connect_address(remote: str) -> tuple[str, int]:
    """Host and port of a Spark Connect URL (``sc://HOST[:PORT][/;key=value...]``); ValueError
    when it is not one."""
    if not remote.startswith("sc://"):
        raise ValueError(f"expected sc://HOST:PORT, got {remote!r}")
    authority = remote[len("sc://"):].split("/", 1)[0].split(";", 1)[0]
    host, sep, port = authority.rpartition(":")
    if not sep:
        host, port = authority, str(DEFAULT_CONNECT_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected sc://HOST:PORT, got {remote!r}")
    return host, int(port)


def check_remote(remote: str, timeout: float = 10.0) -> None:
    """Fail in seconds, as one line, when nothing listens at the Spark Connect address (the
    client itself would retry for minutes)."""
    import socket

    host, port = connect_address(remote)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise SparkUnreachable(f"no Spark Connect server answers at {remote} ({e.strerror or e})") from None


def is_remote(spark) -> bool:
    """A Spark Connect session: no JVM in this process, no SparkContext."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark) -> int:
    """The cluster's default parallelism (the cores of its executors). Spark Connect has no
    SparkContext to ask, so one tiny job counts the splits of a range, which Spark cuts into
    exactly that many; the answer is kept for the session."""
    if not is_remote(spark):
        return spark.sparkContext.defaultParallelism
    known = getattr(spark, "_cohort_parallelism", None)
    if known is None:
        from pyspark.sql import functions as F

        splits = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("split"))
        known = splits.agg(F.max("split")).first()[0] + 1
        spark._cohort_parallelism = known
    return known


def master_of(spark) -> str:
    """Where the session runs: its master URL, or the Spark Connect address."""
    if is_remote(spark):
        return getattr(spark, "_cohort_remote", "Spark Connect")
    return spark.sparkContext.master


def _jvm_options(scratch: Path, verbose: bool) -> str:
    log4j = scratch / "log4j2.properties"
    # Quiet by default: a failed task logs its whole stack, which the job's one-line error replaces.
    log4j.write_text(LOG4J2 if verbose else LOG4J2.replace("level = error", "level = fatal"))
    return " ".join(
        [
            f"-Dlog4j2.configurationFile=file:{log4j}",
            f"-Djava.io.tmpdir={scratch / 'jvm-tmp'}",
            "-XX:-UsePerfData",
        ]
    )


@contextlib.contextmanager
def spark_session(
    out: str | os.PathLike,
    *,
    master: str | None = "local[*]",
    remote: str | None = None,
    app_name: str = "cohort-pipeline",
    driver_memory: str = "2g",
    shuffle_partitions: int | None = None,
    extra_conf: dict[str, str] | None = None,
    verbose: bool = False,
    progress: str | None = None,
) -> Iterator:
    """Start (or join, under spark-submit) a session for a job writing to `out`; stop it afterwards.
    With `remote` (sc://HOST:PORT), a Spark Connect session instead: the server runs the work, this
    process only its Python client. With `progress` (a label), a line on stderr every
    PROGRESS_EVERY_S tells what Spark is doing."""
    if remote is not None:
        with _connect_session(out, remote, shuffle_partitions, extra_conf, progress) as session:
            yield session
        return
    from pyspark.sql import SparkSession

    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    out = Path(out)
    scratch = out / SCRATCH
    submitted = under_spark_submit()
    saved_env = {k: os.environ.get(k) for k in ("SPARK_LOCAL_DIRS", "TMPDIR", "MPLCONFIGDIR", "HYPOTHESIS_STORAGE_DIRECTORY")}
    saved_tempdir = tempfile.tempdir
    builder = SparkSession.builder.appName(app_name)
    local = not submitted and (master or "local").startswith("local")
    os.environ["MPLCONFIGDIR"] = str(scratch / "matplotlib")  # its font cache, built by the report
    # kio (the wire sources' protocol codec) imports hypothesis, whose unicode cache would land in
    # the working directory; the Python workers inherit this from the JVM.
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(scratch / "hypothesis")
    if not submitted:
        (scratch / "jvm-tmp").mkdir(parents=True, exist_ok=True)
        (scratch / "local").mkdir(exist_ok=True)
        (scratch / "py-tmp").mkdir(exist_ok=True)
        if local:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ["SPARK_LOCAL_DIRS"] = str(scratch / "local")
        os.environ["TMPDIR"] = str(scratch / "py-tmp")
        tempfile.tempdir = str(scratch / "py-tmp")
        builder = (
            builder.master(master or "local[*]")
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.extraJavaOptions", _jvm_options(scratch, verbose))
            .config("spark.ui.enabled", "false")
            .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        )
        if local:  # executors live in this JVM and nobody else connects; a cluster needs neither setting
            builder = (
                builder.config("spark.executor.extraJavaOptions", f"-Djava.io.tmpdir={scratch / 'jvm-tmp'}")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.driver.host", "127.0.0.1")
            )
    elif master:
        builder = builder.master(master)
    builder = (
        builder.config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if shuffle_partitions is None and local:
        shuffle_partitions = 2 * local_cores(master or "local[*]")
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    on_interrupt = signal.getsignal(signal.SIGINT) if main_thread else None
    session = builder.getOrCreate()
    if main_thread and callable(on_interrupt) and on_interrupt is not signal.default_int_handler:
        signal.signal(signal.SIGINT, on_interrupt)  # the job's own handler stays, not PySpark's
    session.sparkContext.setLogLevel("ERROR" if verbose else "FATAL")
    reporter = Progress(session, progress) if progress else None
    try:
        yield session
    finally:
        if reporter is not None:
            reporter.stop()
        if not submitted:
            try:
                session.stop()
            except Exception:  # noqa: BLE001 - an interrupted job's py4j connection may be broken
                _stop_jvm(session)
        _restore(saved_env, saved_tempdir, scratch)


@contextlib.contextmanager
def _connect_session(out, remote: str, shuffle_partitions: int | None, extra_conf: dict[str, str] | None,
                     progress: str | None) -> Iterator:
    """A Spark Connect session for a job writing to `out`. The JVM, its scratch space and its
    Python workers are the server's; only this process's temp files and matplotlib's cache go
    under OUT/_spark. Settings are SQL settings of the session (the server's own are its
    administrator's)."""
    check_remote(remote)
    from pyspark.sql import SparkSession

    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    scratch = Path(out) / SCRATCH
    (scratch / "py-tmp").mkdir(parents=True, exist_ok=True)
    saved_env = {k: os.environ.get(k) for k in ("MPLCONFIGDIR", "HYPOTHESIS_STORAGE_DIRECTORY")}
    saved_tempdir = tempfile.tempdir
    os.environ["MPLCONFIGDIR"] = str(scratch / "matplotlib")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(scratch / "hypothesis")
    tempfile.tempdir = str(scratch / "py-tmp")
    session = reporter = None
    try:
        session = SparkSession.builder.remote(remote).create()  # a session of its own, not a shared one
        session._cohort_remote = remote
        settings = {"spark.sql.session.timeZone": "UTC", "spark.sql.execution.arrow.pyspark.enabled": "true"}
        if shuffle_partitions:
            settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
        for key, value in {**settings, **(extra_conf or {})}.items():
            session.conf.set(key, value)
        reporter = Progress(session, progress) if progress else None
        yield session
    finally:
        if reporter is not None:
            reporter.stop()
        try:
            if session is not None:
                session.stop()  # ends this session on the server; the server itself stays up
        except Exception:  # noqa: BLE001 - an interrupted job's channel may be broken
            pass
        _restore(saved_env, saved_tempdir, scratch)


def _restore(saved_env: dict, saved_tempdir: str | None, scratch: Path) -> None:
    """Put back the environment a session changed and remove its scratch space."""
    for key, value in saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = saved_tempdir
    shutil.rmtree(scratch, ignore_errors=True)


_PYTHON_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit|Interrupt)): (.+)$")


PROGRESS_EVERY_S = 10.0
_current: "Progress | None" = None


def step(text: str) -> None:
    """Name what the job does now ("writing the partitions table"), for the progress lines."""
    if _current is not None:
        _current.step = text


class Progress:
    """Prints, every PROGRESS_EVERY_S while a job runs, what it does: the step, the rows the
    running stages have read and written, the rate since the previous line, their tasks done of all,
    and the time since the start. Short jobs print nothing; lines start with "LABEL: progress:" so
    scripts can drop them."""

    def __init__(self, session, label: str) -> None:
        import threading
        import time

        global _current
        self._session, self._tracker, self._store = session, None, None
        if is_remote(session):
            # Spark Connect streams each running stage's tasks and input bytes with the results
            # of a request; no row counts. The lines count tasks and bytes.
            self._connect: list = []
            session.registerProgressHandler(self._on_connect_progress)
        else:
            self._tracker = session.sparkContext.statusTracker()
            # Row counts are only in the JVM's status store (what the web UI reads); PySpark's
            # status tracker has task counts alone.
            jsc = getattr(session.sparkContext, "_jsc", None)
            self._store = jsc.sc().statusStore() if jsc is not None else None
        self._label = label
        self.step = "starting"
        _current = self
        self._started = time.monotonic()
        self._before = (0, 0, 0)  # (tasks done, rows read, rows written) of the stages running at the previous line
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cohort-pipeline-progress", daemon=True)
        self._thread.start()

    def _on_connect_progress(self, stages, inflight_tasks, operation_id, done) -> None:
        """Spark Connect's progress handler: the running stages of the request in flight."""
        self._connect = [] if done else [
            (st.stage_id, st.num_completed_tasks, st.num_tasks, -1, -1, -1, st.num_bytes_read)
            for st in stages or () if not st.done]

    def _stages(self) -> list[tuple[int, ...]]:
        """(stage id, tasks done, tasks, tasks running, rows read, rows written) per running stage;
        through Spark Connect (stage id, tasks done, tasks, -1, -1, -1, bytes read)."""
        if self._tracker is None:
            return sorted(self._connect)
        if self._store is not None:
            out, it = [], self._store.activeStages().iterator()
            while it.hasNext():
                st = it.next()
                out.append((st.stageId(), st.numCompleteTasks(), st.numTasks(), st.numActiveTasks(),
                            st.inputRecords() + st.shuffleReadRecords(), st.outputRecords() + st.shuffleWriteRecords()))
            return sorted(out)
        stages = [self._tracker.getStageInfo(i) for i in self._tracker.getActiveStageIds()]
        return [(st.stageId, st.numCompletedTasks, st.numTasks, st.numActiveTasks, -1, -1)
                for st in stages if st is not None]

    def line(self, stages: list[tuple[int, int, int, int, int, int]], seconds: float, elapsed: float) -> str:
        """One progress line; the rates are over `seconds` since the previous line."""
        done = sum(s[1] for s in stages)
        read, written = sum(max(s[4], 0) for s in stages), sum(max(s[5], 0) for s in stages)
        before_done, before_read, before_written = self._before
        self._before = (done, read, written)
        text = f"{self._label}: progress: {self.step}"
        if stages:
            parts = []
            for sid, complete, total, running, rows_in, rows_out, *bytes_in in stages:
                counts = f", {rows_in:,} rows read, {rows_out:,} written" if rows_in >= 0 else ""
                counts += f", {bytes_in[0] / 1e6:,.1f} MB read" if bytes_in else ""
                busy = f", {running} running" if running >= 0 else ""
                parts.append(f"stage {sid}: {complete}/{total} tasks done{busy}{counts}")
            if stages[0][4] >= 0:  # a stage that ended since the previous line takes its rows along: rates >= 0
                rate = (f"{max(read - before_read, 0) / seconds:,.0f} rows/s read, "
                        f"{max(written - before_written, 0) / seconds:,.0f} written")
            else:
                rate = f"{max(done - before_done, 0) / seconds:.1f} tasks/s"
            text += f" ({'; '.join(parts)}; {rate})"
        return text + f"; {elapsed:.0f} s elapsed"

    def _run(self) -> None:
        import time

        last = time.monotonic()
        while not self._stop.wait(PROGRESS_EVERY_S):
            try:
                stages = self._stages()
            except Exception:  # noqa: BLE001 - the session is stopping
                return
            now = time.monotonic()
            print(self.line(stages, max(now - last, 1e-9), now - self._started), file=sys.stderr, flush=True)
            last = now

    def stop(self) -> None:
        global _current
        self._stop.set()
        self._thread.join(2)
        if self._tracker is None:
            try:
                self._session.removeProgressHandler(self._on_connect_progress)
            except Exception:  # noqa: BLE001 - the session is gone
                pass
        if _current is self:
            _current = None


def stop_children(timeout: float = 3.0) -> None:
    """Kill this process's descendants (the JVM a session launched, and spark-submit's shell
    before it, when a signal interrupted the start before PySpark kept a handle on it) and wait
    until they are gone, so nothing writes to the scratch space after it is removed."""
    import signal
    import time

    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier and pid not in tree}
        tree |= frontier
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while tree and time.monotonic() < deadline:
        for pid in list(tree):
            try:
                os.waitpid(pid, os.WNOHANG)  # reap our own children; others are reparented
            except ChildProcessError:
                pass
            if not os.path.exists(f"/proc/{pid}") or _zombie(pid):
                tree.discard(pid)
        time.sleep(0.02)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def remove_scratch(out: str | os.PathLike) -> None:
    shutil.rmtree(Path(out) / SCRATCH, ignore_errors=True)


def _stop_jvm(session) -> None:
    """End the gateway JVM when the session could not be stopped (so nothing writes to the
    scratch space after it is removed)."""
    try:
        process = session.sparkContext._gateway.proc  # pyspark's handle on the JVM it launched
        process.terminate()
        process.wait(3)
    except Exception:  # noqa: BLE001 - best effort: the JVM also exits when this process does
        pass


def spark_error_line(error: BaseException) -> str | None:
    """One line naming the cause of a Spark/JVM failure, or None when `error` is not one (a bug
    to surface).

    A Java failure is its top exception's message (Spark's error class and what it was doing; the
    py4j wrapper only says which call failed). A Python worker's failure is the last exception
    line of its traceback; a cluster that stopped answering a source's sweep shows as the
    `WireError` message inside it.
    """
    try:
        from py4j.protocol import Py4JError, Py4JJavaError
        from pyspark.errors import PySparkException
    except ImportError:
        return None
    if isinstance(error, SparkUnreachable):
        return str(error)
    if not isinstance(error, (PySparkException, Py4JError)):
        return None
    text = str(error).strip() or type(error).__name__
    wire_error = re.search(r"WireError: (.+)", text)
    if wire_error:
        return wire_error.group(1).strip()
    if isinstance(error, Py4JJavaError):
        try:
            java = error.java_exception
            message = str(java.getMessage() or "").strip()
            text = f"{java.getClass().getSimpleName()}: {message}" if message else text
        except Exception:  # noqa: BLE001 - the gateway may be gone; keep py4j's own text
            pass
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    python = [m for m in map(_PYTHON_ERROR.match, lines) if m]
    if "Traceback (most recent call last)" in text and python:
        return f"{python[-1].group(1)}: {python[-1].group(2)}"[:500]
    return " ".join(lines[:3])[:500] if lines else type(error).__name__

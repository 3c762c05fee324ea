import os
import sys

import pytest

from cohort.server.testing import ServerProcess

# The coordinator's sans-IO state machines are reused here with the upstream-backed log.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "coordinator"))


@pytest.fixture(scope="session")
def upstream(tmp_path_factory):
    """A `cohort serve` standing in for the upstream Kafka-compatible cluster."""
    root = tmp_path_factory.mktemp("upstream")
    srv = ServerProcess(root / "data", log_path=str(root / "upstream.log")).start()
    yield srv
    assert srv.stop() == 0

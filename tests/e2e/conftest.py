import pytest

from cohort_testing import ServerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A `cohort serve` subprocess shared by one test module; it must shut down cleanly."""
    base = tmp_path_factory.mktemp("e2e")
    srv = ServerProcess(base / "data", log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"

import pytest

from cohort_testing import ServerThread


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # The core broker alone: these tests check what it serves before any plug-in is added.
    srv = ServerThread(tmp_path_factory.mktemp("data"), {"socket.request.max.bytes": 65536, "num.partitions": 2}, plugins=())
    srv.start()
    yield srv
    srv.stop()

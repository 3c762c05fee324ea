"""Stop the server (SIGINT, then SIGTERM), start it again on the same data directory: the data is there."""

import signal
import time

import confluent_kafka as ck
import pytest

from cohort_testing import ServerProcess

pytestmark = pytest.mark.e2e


def test_restart_keeps_topics_and_data(tmp_path):
    first = ServerProcess(tmp_path / "data", "num.partitions=2", log_path=str(tmp_path / "server.log")).start()
    try:
        p = ck.Producer({"bootstrap.servers": first.bootstrap, "acks": "all"})
        for i in range(400):
            p.produce("durable", key=b"%d" % i, value=b"v%d" % i)
        assert p.flush(20) == 0
        partitions_before = len(p.list_topics("durable", timeout=10).topics["durable"].partitions)
    finally:
        assert first.stop(sig=signal.SIGINT) == 0  # Ctrl-C is a clean shutdown too

    second = ServerProcess(tmp_path / "data", log_path=str(tmp_path / "server.log")).start()
    try:
        c = ck.Consumer({"bootstrap.servers": second.bootstrap, "group.id": "restart", "enable.auto.commit": False})
        assert len(c.list_topics("durable", timeout=10).topics["durable"].partitions) == partitions_before == 2
        c.assign([ck.TopicPartition("durable", part, ck.OFFSET_BEGINNING) for part in range(2)])
        seen = set()
        deadline = time.monotonic() + 20
        while len(seen) < 400 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.add(m.value())
        c.close()
        assert seen == {b"v%d" % i for i in range(400)}
        # and it keeps appending after the old end
        p2 = ck.Producer({"bootstrap.servers": second.bootstrap})
        offsets = []
        p2.produce("durable", value=b"after", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
        assert p2.flush(10) == 0
        probe = ck.Consumer({"bootstrap.servers": second.bootstrap, "group.id": "x"})
        lo, hi = probe.get_watermark_offsets(ck.TopicPartition("durable", 0), timeout=10)
        probe.close()
        assert offsets == [hi - 1] and lo == 0 and hi > 1
    finally:
        assert second.stop() == 0


def test_killed_mid_produce_restarts_with_a_valid_log(tmp_path):
    """SIGKILL while a producer is writing: on restart every acknowledged record is there,
    offsets are dense and every stored batch reads back (recovery cut any torn tail)."""
    first = ServerProcess(tmp_path / "data", log_path=str(tmp_path / "server.log")).start()
    acked = []
    p = ck.Producer({"bootstrap.servers": first.bootstrap, "acks": "all", "linger.ms": 1,
                     "message.timeout.ms": 3000, "retries": 0})

    def on_delivery(err, msg):
        if err is None:
            acked.append(msg.value())

    try:
        for i in range(300):
            p.produce("crash", value=b"before-%d" % i, on_delivery=on_delivery)
        assert p.flush(10) == 0
        for i in range(20000):  # keep writing while the broker dies
            try:
                p.produce("crash", value=b"during-%d" % i, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.01)
            if i == 2000:
                first.proc.kill()
            p.poll(0)
        p.flush(5)
    finally:
        first.stop()
    second = ServerProcess(tmp_path / "data", log_path=str(tmp_path / "server.log")).start()
    try:
        c = ck.Consumer({"bootstrap.servers": second.bootstrap, "group.id": "crash", "enable.auto.commit": False})
        lo, hi = c.get_watermark_offsets(ck.TopicPartition("crash", 0), timeout=10)
        c.assign([ck.TopicPartition("crash", 0, ck.OFFSET_BEGINNING)])
        offsets, values = [], set()
        deadline = time.monotonic() + 20
        while len(offsets) < hi and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                offsets.append(m.offset())
                values.add(m.value())
        c.close()
        assert offsets == list(range(hi)) and hi >= 300
        assert set(acked) <= values
    finally:
        assert second.stop() == 0

"""Creating and deleting topics cannot leave a data directory that will not start, and the
number of partitions is bounded by settings, not by the process's file descriptors."""

import asyncio
import logging
import os
import subprocess
import sys
import threading

import pytest

from cohort.broker import Broker, BrokerError
from cohort.broker import broker as codes
from cohort.broker.topics import Topic, new_topic_id
from cohort.config import Config
from cohort.log import fileio
from cohort.protocol.records import build_batch, decode_batch, iter_batches


def make(tmp_path, **settings):
    values = {"log.dir": str(tmp_path / "data")}
    values.update(settings)
    return Broker(Config(values))


def values(b, topic, partition):
    err, data = b.read(topic, partition, 0, 1 << 20)
    assert err == codes.NONE
    return [r.value for pos, _ in iter_batches(data) for r in decode_batch(data, pos)]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_segments_share_a_bounded_set_of_descriptors(tmp_path):
    b = make(tmp_path, **{"log.open.files.max": 8})
    try:
        before = open_fds()
        b.create_topic("many", 60)
        for rnd in range(3):
            for p in range(60):
                assert b.produce("many", p, build_batch([(None, b"%d-%d" % (p, rnd))])).error == codes.NONE
        assert len(fileio.FILES) <= 8
        assert open_fds() - before <= 2 * 8  # a log and an index descriptor per cached segment
        for p in range(60):
            assert values(b, "many", p) == [b"%d-%d" % (p, rnd) for rnd in range(3)]
        assert fileio.FILES.evicted > 0
    finally:
        b.close()
    b = make(tmp_path, **{"log.open.files.max": 8})
    try:
        assert all(b.high_watermark("many", p) == 3 for p in range(60))
        assert b.produce("many", 59, build_batch([(None, b"after")])).base_offset == 3
    finally:
        b.close()


def test_a_worker_thread_never_loses_a_descriptor_it_uses(tmp_path):
    b = make(tmp_path, **{"log.open.files.max": 4})
    try:
        b.create_topic("w", 12)
        for p in range(12):
            b.produce("w", p, build_batch([(None, b"x")]))
        mine = [b.logs[("w", p)].segments[-1] for p in range(6)]
        holding, done = threading.Event(), threading.Event()
        seen = []

        def worker():
            with fileio.worker():
                fds = [s.fd for s in mine]  # pinned until the block ends
                holding.set()
                done.wait(10)
                # still open, and still the same files, after the owner opened six others
                seen.extend(os.fstat(fd).st_ino == os.stat(s.log_path).st_ino for s, fd in zip(mine, fds))

        t = threading.Thread(target=worker)
        t.start()
        holding.wait(10)
        for p in range(6, 12):  # the owner's opens may evict only what is not pinned
            assert values(b, "w", p) == [b"x"]
        done.set()
        t.join(10)
        assert seen == [True] * 6 and all(s._pins == 0 for s in mine)
        for p in range(12):
            assert values(b, "w", p) == [b"x"]
        assert len(fileio.FILES) <= 4
    finally:
        b.close()


def test_a_create_that_fails_half_way_leaves_nothing_behind(tmp_path, monkeypatch):
    b = make(tmp_path)
    disk = fileio.FaultyIO()
    monkeypatch.setattr(fileio, "IO", disk)
    real_open = disk.open
    made = []

    def failing_open(path, flags, mode=0o644):
        if "/half-" in path:
            made.append(path)
            if len(made) == 5:
                raise OSError(28, "No space left on device")
        return real_open(path, flags, mode)

    monkeypatch.setattr(disk, "open", failing_open)

    async def create():
        return await b.create_topic_async("half", 10)

    with pytest.raises(BrokerError) as exc:
        asyncio.run(create())
    assert exc.value.code == codes.KAFKA_STORAGE_ERROR
    assert "half" not in b.topics and not any(k[0] == "half" for k in b.logs)
    assert not any(n.startswith("half-") for n in os.listdir(b.data_dir))
    monkeypatch.setattr(disk, "open", real_open)
    topic = asyncio.run(create())  # the name is free again
    assert topic.partitions == 10
    b.close()
    b = make(tmp_path)
    assert b.topics["half"].partitions == 10
    b.close()


def test_metadata_that_cannot_be_saved_fails_the_create_and_removes_its_partitions(tmp_path, monkeypatch):
    b = make(tmp_path)

    def no_save(state):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(b.store, "save", no_save)
    with pytest.raises(BrokerError) as exc:
        asyncio.run(b.create_topic_async("meta", 3))
    assert exc.value.code == codes.KAFKA_STORAGE_ERROR
    assert not any(n.startswith("meta-") for n in os.listdir(b.data_dir))
    b.close()
    b = make(tmp_path)
    assert "meta" not in b.topics
    b.close()


def test_start_repairs_half_created_and_half_deleted_topics(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "cohort.broker")
    b = make(tmp_path)
    b.create_topic("kept", 2)
    b.produce("kept", 1, build_batch([(None, b"v")]))
    data = b.data_dir
    # a create cut short after its directories, before the metadata: directories, no topic
    b.close()
    for p in range(3):
        os.makedirs(os.path.join(data, f"ghost-{p}"))
        open(os.path.join(data, f"ghost-{p}", "00000000000000000000.log"), "wb").close()
    # a topic in the metadata whose partition directory is gone
    os.rename(os.path.join(data, "kept-0"), os.path.join(data, "kept-0.x.deleted"))
    b = make(tmp_path)
    try:
        assert "ghost" not in b.topics
        assert not any(n.startswith("ghost-") or n.endswith(".deleted") for n in os.listdir(data))
        assert b.high_watermark("kept", 0) == 0 and values(b, "kept", 1) == [b"v"]
    finally:
        b.close()
    assert "removing ghost-0" in caplog.text
    assert "topic kept: partition 0 had no directory" in caplog.text


def test_partition_limits(tmp_path):
    b = make(tmp_path, **{"max.partitions.per.topic": 10, "max.broker.partitions": 25})
    try:
        with pytest.raises(BrokerError, match=r"max.partitions.per.topic \(10\)") as exc:
            b.create_topic("wide", 11)
        assert exc.value.code == codes.INVALID_PARTITIONS
        b.create_topic("a", 10)
        b.create_topic("b", 10)
        with pytest.raises(BrokerError, match=r"max.broker.partitions \(25\)") as exc:
            b.create_topic("c", 3)  # 3 internal (offsets, transactions, share state) + 20 + 3 > 25
        assert exc.value.code == codes.POLICY_VIOLATION
        b.create_topic("c", 2)
    finally:
        b.close()


SCRIPT = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from cohort.broker import Broker
from cohort.config import Config
from cohort.protocol.records import build_batch
b = Broker(Config({"log.dir": sys.argv[1]}))
if sys.argv[2] == "create":
    b.create_topic("wide", 5000)
for p in (0, 1234, 4999):
    assert b.produce("wide", p, build_batch([(None, b"p%d" % p)])).error == 0
err, data = b.read("wide", 4999, 0, 1 << 20)
assert err == 0 and data
b.close()
print("ok")
"""


def test_5000_partitions_with_1024_descriptors(tmp_path):
    for step in ("create", "reopen"):
        out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "data"), step], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]

"""Topics, persistence, produce validation, the coordinator log and the metadata image."""

import asyncio
import json
import os

import pytest

from cohort.broker import OFFSETS_TOPIC, Broker, BrokerError
from cohort.broker.coordinator_log import SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from cohort.broker import broker as codes
from cohort.config import Config
from cohort.protocol.records import build_batch, decode_batch, iter_batches


def make(tmp_path, **settings):
    values = {"log.dir": str(tmp_path / "data")}
    values.update({k.replace("_", "."): v for k, v in settings.items()})
    return Broker(Config(values))


def batch(*values, ts=5):
    return build_batch([(None, v) for v in values], timestamp=ts)


def test_topics_persist_across_restart(tmp_path):
    b = make(tmp_path)
    t = b.create_topic("orders", 3, {"retention.ms": "1000"})
    assert b.produce("orders", 2, batch(b"x", b"y")).base_offset == 0
    cluster = b.cluster_id
    b.close()
    b2 = make(tmp_path)
    assert b2.cluster_id == cluster
    got = b2.topics["orders"]
    assert (got.id, got.partitions, got.configs) == (t.id, 3, {"retention.ms": "1000"})
    assert b2.topic_by_id(t.id).name == "orders"
    assert b2.high_watermark("orders", 2) == 2
    assert b2.topics[OFFSETS_TOPIC].internal
    b2.close()


def test_create_topic_errors(tmp_path):
    b = make(tmp_path)
    b.create_topic("a")
    cases = [
        (("a",), codes.TOPIC_ALREADY_EXISTS),
        (("bad name",), codes.INVALID_TOPIC_EXCEPTION),
        (("x" * 250,), codes.INVALID_TOPIC_EXCEPTION),
        ((".",), codes.INVALID_TOPIC_EXCEPTION),
        ((OFFSETS_TOPIC,), codes.TOPIC_ALREADY_EXISTS),
        (("b", 0), codes.INVALID_PARTITIONS),
        (("b", 1, {"no.such.config": "1"}), codes.INVALID_CONFIG),
        (("b", 1, {"segment.bytes": "tiny"}), codes.INVALID_CONFIG),
    ]
    for args, code in cases:
        with pytest.raises(BrokerError) as exc:
            b.create_topic(*args)
        assert exc.value.code == code, args
    with pytest.raises(BrokerError) as exc:
        b.create_topic("b", 1, replication_factor=3)
    assert exc.value.code == codes.INVALID_REPLICATION_FACTOR
    assert set(b.topics) == {"a", OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC}
    # Like Kafka, a name starting with "__" is a user's topic unless it is an internal one
    # (Debezium's __debezium-heartbeat.<server>, cohort's own __cohort_groups on an upstream).
    assert not b.create_topic("__mine").internal
    b.close()


def test_default_partitions_and_auto_create(tmp_path):
    b = make(tmp_path, num_partitions=4)
    assert b.create_topic("d").partitions == 4
    assert b.auto_create("auto").partitions == 4
    assert b.auto_create("bad name!") is None
    b.close()
    off = make(tmp_path, **{"auto.create.topics.enable": False})
    assert off.auto_create("other") is None
    off.close()


def test_delete_topic_removes_data_and_recreate_is_empty(tmp_path):
    b = make(tmp_path)
    old = b.create_topic("t", 2)
    b.produce("t", 0, batch(b"old"))
    b.delete_topic("t")
    assert "t" not in b.topics and ("t", 0) not in b.logs
    b.settle()  # the files go in the storage thread
    assert not any(n.startswith("t-") for n in os.listdir(b.data_dir))
    new = b.create_topic("t", 1)
    assert new.id != old.id and b.high_watermark("t", 0) == 0
    with pytest.raises(BrokerError) as exc:
        b.delete_topic(OFFSETS_TOPIC)
    assert exc.value.code == codes.INVALID_TOPIC_EXCEPTION
    with pytest.raises(BrokerError):
        b.delete_topic("missing")
    b.close()


def test_orphan_partition_dirs_are_removed_on_start(tmp_path):
    b = make(tmp_path)
    b.create_topic("t")
    b.produce("t", 0, batch(b"v"))
    data_dir = b.data_dir
    b.close()
    meta = os.path.join(data_dir, "cohort-meta.json")
    state = json.load(open(meta))
    state["topics"] = [t for t in state["topics"] if t["name"] != "t"]  # a crash right after the metadata write
    json.dump(state, open(meta, "w"))
    b2 = make(tmp_path)
    assert "t" not in b2.topics and not os.path.exists(os.path.join(data_dir, "t-0"))
    b2.close()


def test_produce_validation(tmp_path):
    b = make(tmp_path, **{"message.max.bytes": 200})
    b.create_topic("t")
    assert b.produce("t", 1, batch(b"x")).error == codes.UNKNOWN_TOPIC_OR_PARTITION
    assert b.produce("nope", 0, batch(b"x")).error == codes.UNKNOWN_TOPIC_OR_PARTITION
    bad = bytearray(batch(b"x"))
    bad[-1] ^= 1
    assert b.produce("t", 0, bytes(bad)).error == codes.CORRUPT_MESSAGE
    assert b.produce("t", 0, b"\x00" * 10).error == codes.INVALID_RECORD  # no whole batch in it
    assert b.produce("t", 0, None).error == codes.INVALID_RECORD  # Kafka: "at least one record batch"
    assert b.produce("t", 0, batch(b"x") + batch(b"y")).error == codes.INVALID_RECORD  # exactly one batch
    old_magic = bytearray(batch(b"x"))
    old_magic[16] = 1
    assert b.produce("t", 0, bytes(old_magic)).error == codes.INVALID_RECORD
    assert b.produce("t", 0, batch(b"y" * 300)).error == codes.MESSAGE_TOO_LARGE
    assert b.produce(OFFSETS_TOPIC, 0, batch(b"x")).error == codes.INVALID_TOPIC_EXCEPTION
    assert b.high_watermark("t", 0) == 0  # nothing stored by any of the above
    ok = b.produce("t", 0, batch(b"fine"))
    assert (ok.error, ok.base_offset) == (codes.NONE, 0)
    b.close()


def test_read_errors(tmp_path):
    b = make(tmp_path)
    b.create_topic("t")
    b.produce("t", 0, batch(b"a", b"b"))
    assert b.read("t", 0, 3, 100)[0] == codes.OFFSET_OUT_OF_RANGE
    assert b.read("t", 0, 2, 100) == (codes.NONE, b"")
    assert b.read("t", 5, 0, 100)[0] == codes.UNKNOWN_TOPIC_OR_PARTITION
    b.close()


def test_data_dir_is_locked(tmp_path):
    b = make(tmp_path)
    with pytest.raises(OSError, match="in use"):
        make(tmp_path)
    b.close()


def test_producer_ids_are_unique_across_restarts(tmp_path):
    b = make(tmp_path)
    first = [b.next_producer_id() for _ in range(3)]
    b.close()
    b2 = make(tmp_path)
    later = b2.next_producer_id()
    assert later > max(first) and len(set(first)) == 3
    b2.close()


def test_coordinator_log_appends_durably_and_replays(tmp_path):
    b = make(tmp_path)
    log = b.coordinator_log
    fsyncs = []
    real_flush = log.log.flush
    log.log.flush = lambda: (fsyncs.append(log.log.end_offset), real_flush())

    async def scenario():
        f1 = log.append_records([(b"k1", b"v1"), (b"k2", b"v2")])
        f2 = log.append_records([(b"k1", None)])
        f3 = log.append_records([(b"k3", b"v3")])
        assert log.high_watermark == 0  # nothing is visible before it is durable
        return await asyncio.gather(f1, f2, f3)

    assert asyncio.run(scenario()) == [1, 2, 3]
    assert log.high_watermark == 4
    assert len(fsyncs) <= 2  # concurrent appends share fsyncs (group commit)
    assert list(log.read_all()) == [(0, b"k1", b"v1"), (1, b"k2", b"v2"), (2, b"k1", None), (3, b"k3", b"v3")]
    # Fetch sees it like any topic.
    err, data = b.read(OFFSETS_TOPIC, 0, 0, 1 << 20)
    assert err == codes.NONE
    assert [r.key for pos, _ in iter_batches(data) for r in decode_batch(data, pos)] == [b"k1", b"k2", b"k1", b"k3"]
    b.close()
    b2 = make(tmp_path)
    assert [r[1] for r in b2.coordinator_log.read_all()] == [b"k1", b"k2", b"k1", b"k3"]
    assert b2.coordinator_log.high_watermark == 4
    b2.close()


def test_coordinator_log_fsync_failure_fails_the_future_and_cuts_the_log(tmp_path):
    b = make(tmp_path)
    log = b.coordinator_log
    real_flush = log.log.flush

    def broken():
        raise OSError(5, "I/O error")

    async def scenario():
        assert await log.append_records([(b"good", b"1")]) == 0
        log.log.flush = broken
        f1 = log.append_records([(b"lost", b"2")])
        f2 = log.append_records([(b"lost", b"3"), (b"lost", b"4")])
        for f in (f1, f2):
            with pytest.raises(OSError):
                await f
        log.log.flush = real_flush
        return await log.append_records([(b"after", b"5")])

    assert asyncio.run(scenario()) == 1  # the failed records are gone; offsets continue from the durable end
    assert [(o, k) for o, k, _ in log.read_all()] == [(0, b"good"), (1, b"after")]
    b.close()
    b2 = make(tmp_path)
    assert [k for _, k, _ in b2.coordinator_log.read_all()] == [b"good", b"after"]
    b2.close()


def test_metadata_snapshot(tmp_path):
    b = make(tmp_path)
    seen = []
    b.topic_listeners.append(lambda: seen.append(b.topic_version))
    t = b.create_topic("s", 2)
    b.produce("s", 1, batch(b"a", b"b", b"c"))
    snap = b.metadata_snapshot()
    img = snap.topics["s"]
    assert (img.topic_id, img.num_partitions, img.start_offsets, img.end_offsets) == (t.id, 2, (0, 0), (0, 3))
    assert snap.topic_ids[t.id] == "s" and snap.topics[OFFSETS_TOPIC].internal
    b.delete_topic("s")
    later = b.metadata_snapshot()
    assert "s" not in later.topics and later.version > snap.version and seen == [snap.version, later.version]
    b.close()


def test_topic_config_changes_persist_and_apply(tmp_path):
    b = make(tmp_path)
    b.create_topic("c", 1)
    b.set_topic_configs("c", {"segment.bytes": "2048", "max.message.bytes": "300"})
    assert b.logs[("c", 0)].segment_bytes == 2048
    assert b.produce("c", 0, batch(b"x" * 400)).error == codes.MESSAGE_TOO_LARGE
    with pytest.raises(BrokerError) as exc:
        b.set_topic_configs("c", {"segment.bytes": "1"})
    assert exc.value.code == codes.INVALID_CONFIG
    b.close()
    b2 = make(tmp_path)
    assert b2.topics["c"].configs == {"segment.bytes": "2048", "max.message.bytes": "300"}
    assert b2.logs[("c", 0)].segment_bytes == 2048
    b2.close()

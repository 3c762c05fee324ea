"""The broker's storage policies: per-topic retention and rolling applied by housekeeping,
coordinator-log compaction, group commit, and storage faults (KAFKA_STORAGE_ERROR, recovery
when space returns), down to a real client over a real socket."""

import asyncio
import errno
import time

import confluent_kafka as ck
import pytest

from cohort.broker import OFFSETS_TOPIC, Broker
from cohort.broker import broker as codes
from cohort.config import Config
from cohort.log import fileio
from cohort.protocol.records import build_batch


def make(tmp_path, **settings):
    values = {"log.dir": str(tmp_path / "data")}
    values.update(settings)
    return Broker(Config(values))


def batch(*values, ts):
    return build_batch([(None, v) for v in values], timestamp=ts)


def values_from(b, topic, partition, offset):
    from cohort.protocol.records import decode_batch, iter_batches

    err, data = b.read(topic, partition, offset, 1 << 20)
    assert err == codes.NONE
    return [r.value for pos, _ in iter_batches(data) for r in decode_batch(data, pos) if r.offset >= offset]


def test_topic_retention_configs_are_applied_by_housekeeping(tmp_path):
    b = make(tmp_path)
    b.create_topic("t", 1, {"segment.bytes": "1024", "retention.ms": "60000"})
    b.create_topic("keep", 1, {"segment.bytes": "1024", "retention.ms": "-1"})
    now = int(time.time() * 1000)
    for i in range(30):
        for name in ("t", "keep"):
            assert b.produce(name, 0, batch(b"%02d" % i * 50, ts=now - 3_600_000)).error == codes.NONE
    assert b.maintenance(now)["deleted_segments"] > 0
    snap = b.metadata_snapshot()
    assert snap.topics["t"].start_offsets == (30,) and snap.topics["t"].end_offsets == (30,)
    assert snap.topics["keep"].start_offsets == (0,)
    assert b.read("t", 0, 0, 1000)[0] == codes.OFFSET_OUT_OF_RANGE
    assert b.produce("t", 0, batch(b"fresh", ts=now)).base_offset == 30
    # a config change applies at once: now "keep" is limited by size
    b.set_topic_configs("keep", {"segment.bytes": "1024", "retention.bytes": "2048"})
    b.maintenance(now)
    log = b.logs[("keep", 0)]
    assert 0 < log.start_offset < 30 and log.size_bytes - log.segments[0].size < 2048
    assert values_from(b, "keep", 0, log.start_offset)[0] == b"%02d" % log.start_offset * 50
    b.close()
    b2 = make(tmp_path)
    assert b2.logs[("t", 0)].start_offset == 30 and b2.logs[("keep", 0)].start_offset == log.start_offset
    b2.close()


def test_compact_policy_topic_is_not_deleted_by_retention(tmp_path):
    b = make(tmp_path)
    b.create_topic("c", 1, {"segment.bytes": "1024", "cleanup.policy": "compact", "retention.ms": "1"})
    for i in range(20):
        b.produce("c", 0, build_batch([(b"k%d" % (i % 3), b"v%d" % i + b"." * 60)], timestamp=1))
    b.maintenance()
    assert b.logs[("c", 0)].start_offset == 0
    assert ("c", 0) in b.compaction_candidates()
    plan = asyncio.run(b.compact("c", 0))
    assert plan is not None and plan.records_out < plan.records_in
    b.close()


def test_coordinator_log_compaction_keeps_the_newest_record_per_key(tmp_path):
    b = make(tmp_path, **{"offsets.topic.segment.bytes": 1024, "log.cleaner.delete.retention.ms": 0})
    clog = b.coordinator_log
    model = {}

    async def scenario():
        for i in range(200):
            key = b"group-%d" % (i % 9)
            value = None if i % 17 == 0 else b"state-%d" % i + b"#" * 30
            await clog.append_records([(key, value)])
            model[key] = value
        assert b.compaction_candidates() == [(OFFSETS_TOPIC, 0)]
        return await b.compact(OFFSETS_TOPIC, 0)

    end = clog.log.end_offset
    plan = asyncio.run(scenario())
    assert plan.records_out < plan.records_in / 5
    replay = {}
    for _off, key, value in clog.read_all():
        replay[key] = value
    assert {k: v for k, v in replay.items() if v is not None} == {k: v for k, v in model.items() if v is not None}
    assert clog.log.end_offset == clog.high_watermark == end + 200
    b.close()
    b2 = make(tmp_path)
    after = {}
    count = 0
    for _off, key, value in b2.coordinator_log.read_all():
        after[key] = value
        count += 1
    assert after == replay and count < 200 / 3
    b2.close()


def test_group_commit_shares_fsyncs_and_linger_batches_more(tmp_path):
    b = make(tmp_path, **{"group.coordinator.append.linger.ms": 20})
    clog = b.coordinator_log
    fsyncs = []
    real = clog.log.flush
    clog.log.flush = lambda: (fsyncs.append(1), real())

    async def scenario():
        futs = []
        start = time.monotonic()
        for i in range(50):
            futs.append(clog.append_records([(b"k%d" % i, b"v")]))
            await asyncio.sleep(0.001)  # arrivals spread over ~50 ms
        offsets = await asyncio.gather(*futs)
        return offsets, time.monotonic() - start

    offsets, elapsed = asyncio.run(scenario())
    assert offsets == list(range(50))
    assert len(fsyncs) <= elapsed / 0.020 + 1  # at most one fsync per linger period
    assert len(fsyncs) < 25
    b.close()


def test_appends_before_an_fsync_are_written_as_one_batch_in_order_around_a_transactional_one(tmp_path):
    from cohort.protocol.records import TxnBatch, iter_batches

    b = make(tmp_path)
    clog = b.coordinator_log

    async def scenario():
        first = [clog.append_records([(b"a%d" % i, b"v")]) for i in range(5)]  # one tick: nothing written yet
        assert clog.end_offset == 5 and clog.log.end_offset == 0
        txn = clog.append_records([(b"t", b"v")], TxnBatch(7, 0))  # writes the five first, then itself
        assert clog.log.end_offset == 6
        last = [clog.append_records([(b"b%d" % i, b"v"), (b"c%d" % i, b"v")]) for i in range(3)]
        return await asyncio.gather(*first, txn, *last)

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4, 5, 7, 9, 11]
    data = clog.log.read(0, 1 << 20)
    layout = [(h.base_offset, h.last_offset, h.producer_id) for _, h in iter_batches(data)]
    assert layout == [(0, 4, -1), (5, 5, 7), (6, 11, -1)]
    keys = [k for _, k, _ in clog.read_all()]
    assert keys == [b"a0", b"a1", b"a2", b"a3", b"a4", b"t", b"b0", b"c0", b"b1", b"c1", b"b2", b"c2"]
    b.close()


@pytest.fixture
def disk(monkeypatch):
    faulty = fileio.FaultyIO()
    monkeypatch.setattr(fileio, "IO", faulty)
    return faulty


def test_full_disk_gives_storage_error_and_keeps_serving(tmp_path, disk):
    b = make(tmp_path)
    b.create_topic("t", 2)
    assert b.produce("t", 0, batch(b"before", ts=1)).error == codes.NONE
    disk.space = 10
    r = b.produce("t", 0, batch(b"x" * 200, ts=1))
    assert r.error == codes.KAFKA_STORAGE_ERROR and "No space" in r.message
    disk.fail_write = True
    assert b.produce("t", 1, batch(b"y", ts=1)).error == codes.KAFKA_STORAGE_ERROR
    assert values_from(b, "t", 0, 0) == [b"before"]  # reads still work
    assert b.high_watermark("t", 0) == 1 and b.high_watermark("t", 1) == 0
    disk.space, disk.fail_write = None, False
    assert b.produce("t", 0, batch(b"after", ts=1)).base_offset == 1
    b.close()
    b2 = make(tmp_path)
    assert values_from(b2, "t", 0, 0) == [b"before", b"after"] and b2.logs[("t", 0)].recovered_bytes == 0
    b2.close()


def test_coordinator_log_append_on_full_disk_fails_cleanly_and_recovers(tmp_path, disk):
    b = make(tmp_path)
    clog = b.coordinator_log

    async def scenario():
        assert await clog.append_records([(b"a", b"1")]) == 0
        disk.space = 5
        fut = clog.append_records([(b"b", b"2")])  # written behind, just before its fsync ...
        assert clog.end_offset == 2
        with pytest.raises(OSError) as exc:
            await fut
        assert exc.value.errno == errno.ENOSPC  # ... where the disk refuses it
        assert clog.end_offset == clog.log.end_offset == clog.high_watermark == 1
        disk.space = None
        disk.fail_fsync = True  # now the write works but its fsync fails ...
        fut = clog.append_records([(b"c", b"3")])
        with pytest.raises(OSError):
            await fut
        assert clog.log.end_offset == clog.high_watermark == 1  # ... and the record is cut back
        disk.fail_fsync = False
        return await clog.append_records([(b"d", b"4")])

    assert asyncio.run(scenario()) == 1
    assert [(o, k) for o, k, _ in clog.read_all()] == [(0, b"a"), (1, b"d")]
    b.close()


def test_coordinator_log_that_cannot_cut_back_refuses_appends_until_the_disk_heals(tmp_path, disk, monkeypatch):
    b = make(tmp_path)
    clog = b.coordinator_log
    real_truncate = disk.ftruncate

    async def scenario():
        await clog.append_records([(b"a", b"1")])
        disk.fail_fsync = True
        monkeypatch.setattr(disk, "ftruncate", lambda fd, n: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
        with pytest.raises(OSError):
            await clog.append_records([(b"b", b"2")])
        assert clog.failed is not None
        with pytest.raises(OSError, match="unusable"):
            clog.append_records([(b"c", b"3")])
        disk.fail_fsync = False
        monkeypatch.setattr(disk, "ftruncate", real_truncate)
        return await clog.append_records([(b"d", b"4")])

    assert asyncio.run(scenario()) == 1
    assert [k for _, k, _ in clog.read_all()] == [b"a", b"d"]
    b.close()


def test_maintenance_loop_runs_retention_and_compaction(tmp_path):
    b = make(tmp_path, **{"log.retention.check.interval.ms": 50, "log.cleaner.backoff.ms": 50,
                          "offsets.topic.segment.bytes": 1024})
    b.create_topic("old", 1, {"segment.bytes": "1024", "retention.ms": "1000"})
    for i in range(20):
        b.produce("old", 0, batch(b"%d" % i * 80, ts=1))

    async def scenario():
        for i in range(60):
            await b.coordinator_log.append_records([(b"same-key", b"v%d" % i + b"." * 50)])
        task = asyncio.ensure_future(b.maintenance_loop())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if b.logs[("old", 0)].start_offset == 20 and sum(1 for _ in b.coordinator_log.read_all()) < 10:
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert b.logs[("old", 0)].start_offset == 20
    assert sum(1 for _ in b.coordinator_log.read_all()) < 10
    b.close()


def test_client_sees_storage_error_then_recovers_when_space_returns(tmp_path, disk):
    from cohort_testing import ServerThread

    with ServerThread(tmp_path / "srv", {"num.partitions": 1}, plugins=()) as srv:
        p = ck.Producer({"bootstrap.servers": srv.bootstrap, "acks": "all", "message.timeout.ms": 3000, "retries": 0,
                         "retry.backoff.ms": 50, "linger.ms": 0})
        results = []
        cb = lambda err, msg: results.append(err)  # noqa: E731
        p.produce("full", value=b"ok-1", on_delivery=cb)
        assert p.flush(10) == 0 and results == [None]
        disk.space = 0
        p.produce("full", value=b"lost" * 100, on_delivery=cb)
        p.flush(10)
        assert results[1] is not None and results[1].code() == ck.KafkaError.KAFKA_STORAGE_ERROR
        disk.space = None
        p.produce("full", value=b"ok-2", on_delivery=cb)
        assert p.flush(10) == 0 and results[2] is None
        c = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "g", "enable.auto.commit": False})
        c.assign([ck.TopicPartition("full", 0, ck.OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        c.close()
        assert got == [(0, b"ok-1"), (1, b"ok-2")]


def test_offset_commit_on_full_disk_answers_not_coordinator_then_recovers(tmp_path, disk):
    from kio.index import load_request_schema

    from cohort.protocol.entities import build, nested
    from cohort_testing import ServerThread, WireClient

    commit_cls = load_request_schema(8, 9)
    topic_cls = nested(commit_cls, "topics")
    part_cls = nested(topic_cls, "partitions")

    def commit(c, offset):
        body = build(commit_cls, group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                     retention_time_ms=-1, topics=(build(topic_cls, name="t", partitions=(build(
                         part_cls, partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                         committed_metadata=""),)),))
        return int(c.request(8, 9, body).topics[0].partitions[0].error_code)

    with ServerThread(tmp_path / "srv", {"num.partitions": 1}) as srv:
        if srv.server.apis.lookup(8, 9) is None:
            pytest.fail("OffsetCommit is not served (cohort.server.groups missing)")
        srv.call(lambda: srv.server.broker.create_topic("t", 1))
        with WireClient(srv.port) as c:
            deadline = time.monotonic() + 10
            while (code := commit(c, 5)) == 14 and time.monotonic() < deadline:  # COORDINATOR_LOAD_IN_PROGRESS
                time.sleep(0.05)
            assert code == 0
            disk.space = 3
            assert commit(c, 6) == 16  # NOT_COORDINATOR: the record could not be written
            disk.space = None
            assert commit(c, 7) == 0
        consumer = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "g"})
        try:
            got = consumer.committed([ck.TopicPartition("t", 0)], timeout=10)
        finally:
            consumer.close()
        assert got[0].offset == 7
    with ServerThread(tmp_path / "srv", {"num.partitions": 1}) as again:
        consumer = ck.Consumer({"bootstrap.servers": again.bootstrap, "group.id": "g"})
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    got = consumer.committed([ck.TopicPartition("t", 0)], timeout=5)
                    break
                except ck.KafkaException:
                    if time.monotonic() > deadline:
                        raise
        finally:
            consumer.close()
        assert got[0].offset == 7


def test_clients_see_the_log_start_move_after_retention(tmp_path):
    from cohort_testing import ServerThread

    settings = {"log.retention.check.interval.ms": 100, "log.segment.bytes": 1024}
    with ServerThread(tmp_path / "srv", settings, plugins=()) as srv:
        srv.call(lambda: srv.server.broker.create_topic("expiring", 1, {"retention.ms": "3600000"}))
        p = ck.Producer({"bootstrap.servers": srv.bootstrap, "acks": "all", "linger.ms": 0})
        old = int(time.time() * 1000) - 2 * 3600_000
        for i in range(30):
            p.produce("expiring", value=b"%02d" % i * 40, timestamp=old)
            p.flush(10)
        srv.call(lambda: srv.server.broker.logs[("expiring", 0)].roll())  # the recent record starts a segment
        p.produce("expiring", value=b"recent")
        assert p.flush(10) == 0
        srv.call(lambda: srv.server.spawn(srv.server.broker.maintenance_loop()))
        c = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "w", "enable.auto.commit": False})
        try:
            deadline = time.monotonic() + 10
            # The server's own housekeeping runs from its start, so retention may already have
            # removed part of the old records by now; wait for a pass after the roll above.
            while time.monotonic() < deadline:
                lo, hi = c.get_watermark_offsets(ck.TopicPartition("expiring", 0), timeout=5, cached=False)
                if lo >= 30:
                    break
                time.sleep(0.1)
            assert (lo, hi) == (30, 31)  # the old records' segments are gone, the recent one stays
            c.assign([ck.TopicPartition("expiring", 0, ck.OFFSET_BEGINNING)])
            m = None
            while m is None and time.monotonic() < deadline:
                m = c.poll(0.2)
            assert m is not None and m.error() is None and (m.offset(), m.value()) == (30, b"recent")
        finally:
            c.close()


def shard_summary(shard):
    """What a restart must reproduce: epochs, members (all fields), targets and offsets."""
    groups = {gid: (g.group_epoch, g.assignment_epoch, dict(g.members), {m: dict(a) for m, a in g.target_assignment.items()})
              for gid, g in shard.state.groups.items()}
    return groups, {gid: dict(o) for gid, o in shard.state.offsets.items()}


def test_compacted_coordinator_log_replays_to_the_same_state(tmp_path):
    """Records of real coordinator types with member churn, metadata rewritten after the
    assignment (which compaction would reorder), commits and leaves: replaying the compacted
    log gives exactly the state of replaying everything."""
    import random
    import uuid

    from cohort.coordinator import GroupCoordinatorShard, MemberState, Record, decode, encode
    from cohort.coordinator import records as r

    rng = random.Random(3)
    tid = uuid.uuid5(uuid.NAMESPACE_OID, "t")
    history = []
    members = {f"g{i}": [] for i in range(6)}
    serial = 0
    for step in range(700):
        g = rng.choice(sorted(members))
        roll = rng.random()
        if not members[g] or roll < 0.1:
            serial += 1
            m = f"m{serial}"
            members[g].append(m)
            history += [Record(r.ConsumerGroupMemberMetadataKey(g, m), r.ConsumerGroupMemberMetadataValue(
                            None, None, "c", "/h0", ("t",), None, 30000, None)),
                        Record(r.ConsumerGroupMetadataKey(g), r.ConsumerGroupMetadataValue(step)),
                        Record(r.ConsumerGroupTargetAssignmentMemberKey(g, m), r.ConsumerGroupTargetAssignmentMemberValue({tid: (step % 4,)})),
                        Record(r.ConsumerGroupTargetAssignmentMetadataKey(g), r.ConsumerGroupTargetAssignmentMetadataValue(step)),
                        Record(r.ConsumerGroupCurrentMemberAssignmentKey(g, m), r.ConsumerGroupCurrentMemberAssignmentValue(
                            step, 0, MemberState.STABLE, {tid: (step % 4,)}, {}))]
        elif roll < 0.3:  # metadata rewritten, assignment untouched: compaction puts it after the assignment
            m = rng.choice(members[g])
            history.append(Record(r.ConsumerGroupMemberMetadataKey(g, m), r.ConsumerGroupMemberMetadataValue(
                None, None, "c", f"/h{step}", ("t",), None, 30000, None)))
        elif roll < 0.38 and len(members[g]) > 1:
            m = members[g].pop(rng.randrange(len(members[g])))
            history += [Record(r.ConsumerGroupCurrentMemberAssignmentKey(g, m), None),
                        Record(r.ConsumerGroupTargetAssignmentMemberKey(g, m), None),
                        Record(r.ConsumerGroupMemberMetadataKey(g, m), None)]
        else:
            history.append(Record(r.OffsetCommitKey(g, "t", rng.randrange(4)), r.OffsetCommitValue(step)))

    def replay(records):
        shard = GroupCoordinatorShard()
        for rec in records:
            shard.replay(rec)
        return shard_summary(shard)

    b = make(tmp_path, **{"offsets.topic.segment.bytes": 2048, "log.cleaner.delete.retention.ms": 0})

    async def scenario():
        for i in range(0, len(history), 3):
            await b.coordinator_log.append_records([encode(rec) for rec in history[i:i + 3]])
        return await b.compact(OFFSETS_TOPIC, 0)

    plan = asyncio.run(scenario())
    assert plan.records_out < plan.records_in / 2
    b.close()
    b2 = make(tmp_path)
    compacted = [decode(k, v) for _, k, v in b2.coordinator_log.read_all()]
    b2.close()
    assert len(compacted) < len(history) / 2
    assert replay(compacted) == replay(history)


def test_bad_storage_configs_are_refused_with_invalid_config(tmp_path):
    from cohort.broker import BrokerError

    b = make(tmp_path)
    for key, value in [("delete.retention.ms", "soon"), ("flush.ms", "-1"), ("min.cleanable.dirty.ratio", "2"),
                       ("min.cleanable.dirty.ratio", "half"), ("segment.ms", "0"), ("retention.bytes", "-2")]:
        with pytest.raises(BrokerError) as exc:
            b.create_topic("t", 1, {key: value})
        assert exc.value.code == codes.INVALID_CONFIG, (key, value)
    assert "t" not in b.topics
    b.create_topic("t", 1, {"min.cleanable.dirty.ratio": "0.1", "delete.retention.ms": "0", "flush.ms": "10"})
    assert b.logs[("t", 0)].flush_ms == 10
    b.close()


def test_a_failed_metadata_write_leaves_topics_as_they_were(tmp_path):
    b = make(tmp_path)
    try:
        b.create_topic("kept", 2, {"retention.ms": "1000"})
        real_save = b.store.save

        def full_disk(state):
            raise OSError(errno.ENOSPC, "No space left on device")

        b.store.save = full_disk
        for attempt in (lambda: b.create_topic("new", 1),
                        lambda: b.delete_topic("kept"),
                        lambda: b.set_topic_configs("kept", {"retention.ms": "5"})):
            with pytest.raises(codes.BrokerError) as info:
                attempt()
            assert info.value.code == codes.KAFKA_STORAGE_ERROR
        assert "new" not in b.state.topics
        assert b.state.topics["kept"].configs == {"retention.ms": "1000"}
        b.store.save = real_save
        b.delete_topic("kept")
        assert "kept" not in b.state.topics
    finally:
        b.close()

"""UpstreamRecordLog against a real upstream (a `cohort serve`): appends are upstream
transactions, a new owner fences the old one before it reads, and a foreign writer is noticed."""

from __future__ import annotations

import asyncio
import uuid

import confluent_kafka as ck
import pytest

from cohort.upstream import UpstreamLogError, UpstreamRecordLog, ensure_topic

pytestmark = pytest.mark.timeout(120)


def client(upstream) -> dict:
    return {"bootstrap.servers": upstream.bootstrap}


def fresh_topic(upstream, partitions: int = 1) -> str:
    topic = f"__cohort_groups_{uuid.uuid4().hex[:8]}"
    assert ensure_topic(client(upstream), topic, partitions, -1, 20) == (True, partitions)
    return topic


def run(coro):
    return asyncio.run(coro)


async def opened(upstream, topic: str, partition: int = 0, txn_id: str | None = None) -> tuple[UpstreamRecordLog, list]:
    log = UpstreamRecordLog(topic, partition, txn_id or f"cohort-test-{topic}-{partition}", client(upstream),
                            timeout_s=20)
    await log.open()
    return log, [r async for r in log.records()]


def test_appends_are_group_committed_and_read_back_by_the_next_owner(upstream):
    topic = fresh_topic(upstream, 2)

    async def scenario():
        log, before = await opened(upstream, topic, 1)
        assert before == [] and log.end_offset == 0
        # Appends made while one transaction is in flight go out together in the next one.
        futures = [log.append_records([(b"k%d" % i, b"v%d" % i), (b"k%d" % i, None)]) for i in range(10)]
        assert log.end_offset == 20
        lasts = await asyncio.gather(*futures)
        assert lasts == [2 * i + 1 for i in range(10)] and log.high_watermark == 20
        await log.close()
        nxt, records = await opened(upstream, topic, 1)
        assert [(o, k, v) for o, k, v, _ in records] == [
            (2 * i + j, b"k%d" % i, None if j else b"v%d" % i) for i in range(10) for j in (0, 1)]
        assert nxt.end_offset == 20
        await nxt.close()
        other, nothing = await opened(upstream, topic, 0)  # the other shard's partition is its own
        assert nothing == []
        await other.close()

    run(scenario())
    # the topic is compacted, as __consumer_offsets is
    admin = ck.admin.AdminClient(client(upstream))
    res = ck.admin.ConfigResource(ck.admin.ResourceType.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(20)
    assert configs["cleanup.policy"].value == "compact"


def test_a_new_owner_fences_the_old_one(upstream):
    topic = fresh_topic(upstream)

    async def scenario():
        old, _ = await opened(upstream, topic)
        await old.append_records([(b"a", b"1")])
        new, records = await opened(upstream, topic)  # same transactional id: the epoch is bumped
        assert [(k, v) for _, k, v, _ in records] == [(b"a", b"1")]
        with pytest.raises(UpstreamLogError, match="fenced"):
            await old.append_records([(b"zombie", b"write")])
        assert old.end_offset == 1  # what was not durable is gone; the runtime reverts to here
        with pytest.raises(UpstreamLogError, match="unusable"):
            old.append_records([(b"again", b"x")])  # refused at once from now on
        await new.append_records([(b"b", b"2")])
        reader, seen = await opened(upstream, topic)
        assert [(k, v) for _, k, v, _ in seen] == [(b"a", b"1"), (b"b", b"2")]  # no zombie record
        for log in (old, new, reader):
            await log.close()

    run(scenario())


def test_a_log_handed_over_and_taken_back_reads_what_the_other_owner_wrote(upstream):
    """A cohort cluster moving a shard away and back: the same log object is closed, another
    instance owns the shard meanwhile, and opening it again fences that one and reads its records."""
    topic = fresh_topic(upstream)

    async def scenario():
        here, _ = await opened(upstream, topic)
        await here.append_records([(b"a", b"1")])
        await here.close()
        there, records = await opened(upstream, topic)
        assert [(k, v) for _, k, v, _ in records] == [(b"a", b"1")]
        await there.append_records([(b"b", b"2")])
        await here.open()  # taken back: the other owner is fenced
        assert [(k, v) for _, k, v, _ in [r async for r in here.records()]] == [(b"a", b"1"), (b"b", b"2")]
        assert here.end_offset == 2
        with pytest.raises(UpstreamLogError, match="fenced"):
            await there.append_records([(b"zombie", b"write")])
        assert await here.append_records([(b"c", b"3")]) == 2
        for log in (here, there):
            await log.close()

    run(scenario())


def intrude(upstream, topic: str) -> None:
    """Another writer's record on the log's partition (its producer gone when this returns)."""
    p = ck.Producer(client(upstream))
    p.produce(topic, b"intruder", b"x", partition=0)
    assert p.flush(20) == 0


def test_a_foreign_write_makes_the_log_refuse_appends(upstream):
    topic = fresh_topic(upstream)

    async def scenario():
        log, _ = await opened(upstream, topic)
        await log.append_records([(b"a", b"1")])
        intrude(upstream, topic)
        with pytest.raises(UpstreamLogError, match="another writer"):
            await log.append_records([(b"b", b"2")])
        with pytest.raises(UpstreamLogError):
            log.append_records([(b"c", b"3")])
        await log.close()

    run(scenario())


def test_a_client_transactional_batch_is_refused_at_once(upstream):
    topic = fresh_topic(upstream)

    async def scenario():
        log, _ = await opened(upstream, topic)
        with pytest.raises(UpstreamLogError, match="transactional"):
            log.append_records([(b"a", b"1")], transaction=object())
        assert log.end_offset == 0
        await log.close()

    run(scenario())


def test_an_existing_topic_keeps_its_partition_count(upstream):
    topic = fresh_topic(upstream, 2)
    assert ensure_topic(client(upstream), topic, 2, -1, 20) == (False, 2)  # found, not created
    assert ensure_topic(client(upstream), topic, 3, -1, 20) == (False, 2)  # the caller adopts it or refuses


def test_an_unreachable_upstream_is_a_one_line_error():
    async def scenario():
        log = UpstreamRecordLog("t", 0, "cohort-test-nowhere", {"bootstrap.servers": "127.0.0.1:1"}, timeout_s=2)
        with pytest.raises(UpstreamLogError, match="cannot take ownership"):
            await log.open()

    run(scenario())

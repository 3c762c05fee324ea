"""Exactly-once with real clients over real sockets: confluent-kafka's transactional producer
commits and aborts, read_committed consumers see exactly the committed records,
`send_offsets_to_transaction` commits a KIP-848 and a classic group's offsets inside the
transaction, a second producer with the same transactional.id fences the first, aiokafka's
transactional producer works too, and a transaction left open by a killed broker is aborted."""

from __future__ import annotations

import asyncio
import time
import uuid

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cohort_testing import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    base = tmp_path_factory.mktemp("txn")
    server = ServerProcess(base / "data", "num.partitions=2", "transaction.max.timeout.ms=60000",
                           log_path=str(base / "server.log")).start()
    yield server
    assert server.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(20)
    return name


def _read(bootstrap: str, topic: str, isolation: str, expect: int, timeout: float = 20) -> list[str]:
    """Every value of the topic as a consumer with ``isolation`` sees it (stops once ``expect``
    values arrived and half a second passed without more)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}", "auto.offset.reset": "earliest",
                     "isolation.level": isolation, "enable.auto.commit": False})
    try:  # assigned, not subscribed: no group to join (a classic join waits group.initial.rebalance.delay.ms)
        partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        got: list[str] = []
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None or msg.error():
                if len(got) >= expect:
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > 0.5:
                        break
                continue
            quiet_since = None
            got.append(msg.value().decode())
        return sorted(got)
    finally:
        c.close()


def _producer(bootstrap: str, txn_id: str, **extra) -> ck.Producer:
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    p.init_transactions(20)
    return p


def test_commit_and_abort_are_seen_only_by_read_uncommitted(srv):
    topic = _topic(srv.bootstrap)
    p = _producer(srv.bootstrap, f"tx-{topic}")
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=f"a{i}".encode(), partition=i % 2)
    p.flush(20)
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce(topic, value=b"c-last", partition=1)
    p.commit_transaction(20)
    committed = sorted([f"c{i}" for i in range(6)] + ["c-last"])
    assert _read(srv.bootstrap, topic, "read_committed", len(committed)) == committed
    assert _read(srv.bootstrap, topic, "read_uncommitted", 11) == sorted(committed + [f"a{i}" for i in range(4)])


def test_an_open_transaction_holds_read_committed_back_at_the_lso(srv):
    topic = _topic(srv.bootstrap, 1)
    plain = ck.Producer({"bootstrap.servers": srv.bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(20)
    p = _producer(srv.bootstrap, f"tx-{topic}")
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(20)
    plain.produce(topic, value=b"after", partition=0)  # beyond the LSO until the transaction ends
    plain.flush(20)
    assert _read(srv.bootstrap, topic, "read_committed", 1, timeout=4) == ["before"]
    c = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 1)  # ListOffsets latest, read_committed: the LSO
    finally:
        c.close()
    p.commit_transaction(20)
    assert _read(srv.bootstrap, topic, "read_committed", 3) == ["after", "before", "open"]


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_send_offsets_to_transaction_commits_the_group_offsets_with_the_output(srv, protocol):
    source, sink = _topic(srv.bootstrap), _topic(srv.bootstrap)
    plain = ck.Producer({"bootstrap.servers": srv.bootstrap})
    for i in range(20):
        plain.produce(source, value=f"in{i}".encode(), partition=i % 2)
    plain.flush(20)
    group = f"eos-{protocol}-{uuid.uuid4().hex[:6]}"
    consumer = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group, "group.protocol": protocol,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
    producer = _producer(srv.bootstrap, f"eos-{group}")
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})

    def committed(expected: dict[int, int]) -> dict[int, int]:
        """The group's offsets once they equal ``expected`` (EndTxn is answered before the markers
        are written, as in Kafka, so the offsets may be pending for a moment), else the last seen."""
        deadline = time.monotonic() + 10
        while True:
            result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
            found = {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0 and not tp.error}
            if found == expected or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    try:
        consumer.subscribe([source])
        seen: list = []
        deadline = time.monotonic() + 60
        while len(seen) < 20:
            assert time.monotonic() < deadline, len(seen)
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(msg)
        first, second = seen[:10], seen[10:]

        def positions(msgs) -> list[TopicPartition]:
            last: dict[int, int] = {}
            for m in msgs:
                last[m.partition()] = max(last.get(m.partition(), -1), m.offset() + 1)
            return [TopicPartition(source, p, o) for p, o in sorted(last.items())]

        # First batch: produced and its input offsets committed in one transaction.
        producer.begin_transaction()
        for m in first:
            producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
        producer.send_offsets_to_transaction(positions(first), consumer.consumer_group_metadata(), 20)
        producer.commit_transaction(20)
        after_first = {tp.partition: tp.offset for tp in positions(first)}
        assert committed(after_first) == after_first

        # Second batch aborted: neither its output nor its offsets are visible.
        producer.begin_transaction()
        for m in second:
            producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
        producer.send_offsets_to_transaction(positions(seen), consumer.consumer_group_metadata(), 20)
        producer.abort_transaction(20)
        time.sleep(0.5)  # the abort markers land; the offsets must not move
        assert committed(after_first) == after_first
        assert _read(srv.bootstrap, sink, "read_committed", 10) == sorted(f"out-{m.value().decode()}" for m in first)

        # Retried and committed: everything once.
        producer.begin_transaction()
        for m in second:
            producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
        producer.send_offsets_to_transaction(positions(seen), consumer.consumer_group_metadata(), 20)
        producer.commit_transaction(20)
        everything = {tp.partition: tp.offset for tp in positions(seen)}
        assert committed(everything) == everything
        assert _read(srv.bootstrap, sink, "read_committed", 20) == sorted(f"out-in{i}" for i in range(20))
    finally:
        consumer.close()


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(srv):
    topic = _topic(srv.bootstrap)
    txn_id = f"zombie-{topic}"
    old = _producer(srv.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, value=b"zombie", partition=0)
    old.flush(20)
    new = _producer(srv.bootstrap, txn_id)  # fences the old epoch and aborts its open transaction
    new.begin_transaction()
    new.produce(topic, value=b"fresh", partition=0)
    new.commit_transaction(20)
    with pytest.raises(ck.KafkaException) as raised:
        old.produce(topic, value=b"late", partition=1)
        old.commit_transaction(20)
    err = raised.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                         ck.KafkaError.INVALID_PRODUCER_EPOCH), err
    assert _read(srv.bootstrap, topic, "read_committed", 1) == ["fresh"]


def test_aiokafka_transactional_producer_and_send_offsets(srv):
    import aiokafka
    source, sink = _topic(srv.bootstrap, 1), _topic(srv.bootstrap, 1)
    plain = ck.Producer({"bootstrap.servers": srv.bootstrap})
    for i in range(5):
        plain.produce(source, value=f"a{i}".encode(), partition=0)
    plain.flush(20)
    group = f"aio-{uuid.uuid4().hex[:6]}"

    async def run() -> None:
        consumer = aiokafka.AIOKafkaConsumer(source, bootstrap_servers=srv.bootstrap, group_id=group,
                                             enable_auto_commit=False, auto_offset_reset="earliest",
                                             isolation_level="read_committed")
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=srv.bootstrap, transactional_id=f"aio-{group}")
        await consumer.start()
        await producer.start()
        try:
            got = []
            while len(got) < 5:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    got.extend(records)
            async with producer.transaction():
                for r in got:
                    await producer.send_and_wait(sink, b"out-" + r.value, partition=0)
                await producer.send_offsets_to_transaction({aiokafka.TopicPartition(source, 0): got[-1].offset + 1}, group)
            await producer.begin_transaction()
            await producer.send_and_wait(sink, b"aborted", partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()
            await consumer.stop()

    asyncio.run(run())
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
    assert {tp.partition: tp.offset for tp in result.topic_partitions} == {0: 5}
    assert _read(srv.bootstrap, sink, "read_committed", 5) == sorted(f"out-a{i}" for i in range(5))


def test_a_transaction_open_when_the_broker_is_killed_is_aborted_after_restart(tmp_path):
    srv = ServerProcess(tmp_path / "data", "num.partitions=1", log_path=str(tmp_path / "server.log"))
    (tmp_path / "data").mkdir()
    srv.start()
    try:
        topic = _topic(srv.bootstrap, 1)
        committed = _producer(srv.bootstrap, "crash-a")
        committed.begin_transaction()
        committed.produce(topic, value=b"kept", partition=0)
        committed.commit_transaction(20)
        hanging = _producer(srv.bootstrap, "crash-b", **{"transaction.timeout.ms": 3000})
        hanging.begin_transaction()
        hanging.produce(topic, value=b"lost", partition=0)
        hanging.flush(20)
        assert srv.stop(sig=9) == -9
        srv.start()
        # The coordinator replays "crash-b" as Ongoing and aborts it once its timeout passes;
        # until then read_committed stops at its first record.
        assert _read(srv.bootstrap, topic, "read_committed", 1, timeout=15) == ["kept"]
        c = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "x", "isolation.level": "read_committed"})
        try:
            deadline = time.monotonic() + 20
            while c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] < 4:  # kept, marker, lost, abort
                assert time.monotonic() < deadline
                time.sleep(0.2)
        finally:
            c.close()
        assert _read(srv.bootstrap, topic, "read_uncommitted", 2) == ["kept", "lost"]
        assert _read(srv.bootstrap, topic, "read_committed", 1) == ["kept"]
    finally:
        assert srv.stop() in (0, None)


def _stable_offset_fetch(client, group: str, topic: str) -> tuple[int, int]:
    """(error code, offset) of partition 0 from OffsetFetch v8 with RequireStable, as a
    read_committed librdkafka consumer asks for its start position."""
    from kio.index import load_request_schema

    from cohort.protocol.entities import build, nested

    schema = load_request_schema(9, 8)
    groups_cls = nested(schema, "groups")
    topic_cls = nested(groups_cls, "topics")
    body = build(schema, require_stable=True, groups=(
        build(groups_cls, group_id=group, topics=(build(topic_cls, name=topic, partition_indexes=(0,)),)),))
    answer = client.request(9, 8, body).groups[0]
    assert answer.error_code == 0, answer
    p = answer.topics[0].partitions[0]
    return p.error_code, p.committed_offset


def test_a_stable_offset_fetch_right_after_commit_never_answers_an_older_offset(srv):
    """Kafka runs a RequireStable fetch against the latest state after the writes before it:
    UNSTABLE_OFFSET_COMMIT while the marker is pending, the committed offset after; never the
    offset before the transaction (nor none at all), which would make a read_committed
    consumer start over from an older position."""
    from cohort_testing import WireClient

    source, sink = _topic(srv.bootstrap, 1), _topic(srv.bootstrap, 1)
    group = f"stable-{uuid.uuid4().hex[:6]}"
    # not subscribed: its group metadata is the old-style one (generation -1), no join needed
    consumer = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group})
    producer = _producer(srv.bootstrap, f"stable-{group}")
    unstable = 0
    try:
        with WireClient(srv.port) as wire:
            for i in range(1, 201):
                producer.begin_transaction()
                producer.produce(sink, value=b"out", partition=0)
                producer.send_offsets_to_transaction([TopicPartition(source, 0, i)], consumer.consumer_group_metadata(), 20)
                producer.commit_transaction(20)
                deadline = time.monotonic() + 10
                while True:
                    code, offset = _stable_offset_fetch(wire, group, source)
                    if code != 88:  # UNSTABLE_OFFSET_COMMIT: the client retries
                        break
                    unstable += 1
                    assert time.monotonic() < deadline, "the offsets stayed pending"
                    time.sleep(0.001)
                assert (code, offset) == (0, i), f"commit {i}: answered {(code, offset)}"
    finally:
        consumer.close()
    print(f"{unstable} UNSTABLE_OFFSET_COMMIT answers over 200 commits")

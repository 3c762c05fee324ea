"""Unmodified Kafka clients against `cohort serve` over 127.0.0.1."""

import asyncio
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.e2e


def create(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(10)


def read_all(bootstrap, topic, partitions, expected, timeout=20):
    """Manually assign every partition from the beginning and collect (partition, offset, key, value)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-reader", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.partition(), m.offset(), m.key(), m.value()))
        extra = c.poll(0.3)  # nothing beyond what was written
        assert extra is None or extra.error() is not None
    finally:
        c.close()
    return out


def test_confluent_producer_acks_all_and_manual_assign_reads_everything(broker):
    create(broker.bootstrap, "ck-orders", 3)
    delivered = []
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2})
    for i in range(3000):
        p.produce("ck-orders", key=b"k%d" % (i % 17), value=b"value-%05d" % i,
                  on_delivery=lambda err, msg: delivered.append((err, msg.partition(), msg.offset())))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(20) == 0
    assert all(err is None for err, _, _ in delivered) and len(delivered) == 3000
    got = read_all(broker.bootstrap, "ck-orders", 3, 3000)
    assert sorted(v for *_, v in got) == sorted(b"value-%05d" % i for i in range(3000))
    by_partition = {}
    for part, off, key, value in got:
        by_partition.setdefault(part, []).append(off)
    for part, offsets in by_partition.items():
        assert offsets == list(range(len(offsets)))  # dense offsets, in order
    assert sorted((p_, o) for _, p_, o in delivered) == sorted((p_, o) for p_, o, *_ in got)
    # same key, same partition (librdkafka's partitioner), order preserved per key
    for key in {k for _, _, k, _ in got}:
        values = [v for _, _, k, v in sorted(got) if k == key]
        assert len({p_ for p_, _, k, _ in got if k == key}) == 1
        assert values == sorted(values)


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_compressed_batches_pass_through(broker, codec):
    topic = f"ck-{codec}"
    create(broker.bootstrap, topic, 1)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
    for i in range(500):
        p.produce(topic, value=(b"compressible-%04d-" % i) * 20)
    assert p.flush(20) == 0
    got = read_all(broker.bootstrap, topic, 1, 500)
    assert [v for *_, v in got] == [(b"compressible-%04d-" % i) * 20 for i in range(500)]


def test_watermarks_and_offsets_for_times(broker):
    create(broker.bootstrap, "ck-times", 1)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce("ck-times", value=b"%d" % i, timestamp=1_000_000 + i * 1000)
        p.flush(10)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "e2e-times"})
    try:
        assert c.get_watermark_offsets(ck.TopicPartition("ck-times", 0), timeout=10) == (0, 10)
        found = c.offsets_for_times([ck.TopicPartition("ck-times", 0, 1_004_500)], timeout=10)
        assert found[0].offset == 5
    finally:
        c.close()


def test_kafka_python_and_aiokafka_producers_confluent_reads(broker):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap)  # idempotent by default (InitProducerId)
    assert kp.config["enable_idempotence"]
    futures = [kp.send("mixed", key=b"kp", value=b"kp-%d" % i) for i in range(200)]
    kp.flush(20)
    assert [f.get(10).offset for f in futures][-1] >= 199
    kp.close()

    async def aio():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(200):
                await producer.send("mixed", key=b"aio", value=b"aio-%d" % i)
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(aio())
    got = read_all(broker.bootstrap, "mixed", 1, 400)  # auto-created with num.partitions=1
    values = [v for *_, v in got]
    assert values[:200] == [b"kp-%d" % i for i in range(200)]
    assert values[200:] == [b"aio-%d" % i for i in range(200)]


def test_kafka_python_admin_and_metadata(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic("kp-admin", 4, 1, topic_configs={"retention.ms": "777"})])
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        assert modified["topic"]["kp-admin"]["retention.ms"]["value"] == "777"
        assert list(modified["topic"]["kp-admin"]) == ["retention.ms"]  # only non-defaults by default
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KpNewTopic("kp-admin", 4, 1)])
        assert "kp-admin" in admin.list_topics()
        assert admin.describe_cluster()["controller_id"] == 1
        admin.delete_topics(["kp-admin"])
        deadline = time.monotonic() + 5
        while "kp-admin" in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "kp-admin" not in admin.list_topics()
    finally:
        admin.close()


def test_kafka_python_and_aiokafka_consumers_read_with_manual_assign(broker):
    """kafka-python asks for a fetch session (epoch 0) and gets session id 0; aiokafka is sessionless."""
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer, TopicPartition

    create(broker.bootstrap, "py-readers", 2)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(300):
        p.produce("py-readers", value=b"r%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    expected = {b"r%d" % i for i in range(300)}

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, consumer_timeout_ms=1500)
    c.assign([TopicPartition("py-readers", 0), TopicPartition("py-readers", 1)])
    c.seek_to_beginning()
    got = [m.value for m in c]
    c.close()
    assert sorted(got) == sorted(expected)

    async def aio():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition("py-readers", 0), TopicPartition("py-readers", 1)])
            await consumer.seek_to_beginning()
            values = []
            deadline = time.monotonic() + 15
            while len(values) < 300 and time.monotonic() < deadline:
                for msgs in (await consumer.getmany(timeout_ms=300)).values():
                    values += [m.value for m in msgs]
            return values
        finally:
            await consumer.stop()

    assert sorted(asyncio.run(aio())) == sorted(expected)

"""The data plane APIs of issue 18 through kafka-python and aiokafka, where they expose them:
CreatePartitions, DeleteRecords, offsets_for_times (compressed batches) and idempotent
producers."""

import asyncio

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

BASE = 1_700_000_000_000


def test_kafka_python(broker):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewPartitions, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("kp-data", 1, 1, topic_configs={"message.timestamp.after.max.ms": str(2**62)})])
        admin.create_partitions({"kp-data": NewPartitions(total_count=3)})
        assert len(admin.describe_topics(["kp-data"])[0]["partitions"]) == 3
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", enable_idempotence=True,
                                 linger_ms=50)
        for i in range(300):
            producer.send("kp-data", value=b"%d" % i, partition=0, timestamp_ms=BASE + 10 * i)
        producer.flush()
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        tp = TopicPartition("kp-data", 0)
        found = consumer.offsets_for_times({tp: BASE + 1555})[tp]
        assert (found.offset, found.timestamp) == (156, BASE + 1560)  # inside a gzip batch, exactly
        assert admin.delete_records({tp: 100})[tp]["low_watermark"] == 100
        assert consumer.beginning_offsets([tp])[tp] == 100
        consumer.close()
    finally:
        admin.close()


@pytest.fixture
def run():
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


def test_aiokafka_admin_and_idempotent_producer(broker, run):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("aio-data", 1, 1, topic_configs={"message.timestamp.after.max.ms": str(2**62)})])
            await admin.create_partitions({"aio-data": NewPartitions(total_count=2)})
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, compression_type="lz4",
                                        linger_ms=20)
            await producer.start()
            try:
                futures = [await producer.send("aio-data", b"%d" % i, partition=1, timestamp_ms=BASE + 10 * i) for i in range(200)]
                offsets = [(await f).offset for f in futures]
            finally:
                await producer.stop()
            assert offsets == list(range(200))
            tp = TopicPartition("aio-data", 1)
            consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
            await consumer.start()
            try:
                found = (await consumer.offsets_for_times({tp: BASE + 555}))[tp]
                assert (found.offset, found.timestamp) == (56, BASE + 560)
                low = await admin.delete_records({tp: RecordsToDelete(before_offset=50)})
                assert low[tp] == 50
                assert (await consumer.beginning_offsets([tp]))[tp] == 50
            finally:
                await consumer.stop()
        finally:
            await admin.close()

    run(asyncio.wait_for(scenario(), 60))

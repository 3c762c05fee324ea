"""The group coordinator with `offsets.topic.num.partitions=8`: real clients (confluent-kafka with
the KIP-848 and the classic protocol, kafka-python) use groups that Kafka's hash places on
different shards, commit, survive a kill -9 of the broker, and find everything after the restart.
The records are in the `__consumer_offsets` partitions the hash picks, and only there."""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.coordinator import partition_for
from cohort_testing import ServerProcess

pytestmark = pytest.mark.e2e

SHARDS = 8
TOPIC = "sharded"
GROUPS = {"kip848": "orders-kip848", "classic": "orders-classic", "kafka-python": "orders-kafka-python"}


def test_the_groups_land_on_different_shards():
    assert len({partition_for(g, SHARDS) for g in GROUPS.values()}) == len(GROUPS)


def _consume_and_commit(bootstrap: str, protocol: str, group: str, upto: dict[int, int]) -> None:
    """Consume until the offsets in `upto` are reached, then commit them synchronously."""
    if protocol == "kafka-python":
        import kafka
        from kafka.structs import OffsetAndMetadata

        c = kafka.KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest")
        try:
            deadline = time.monotonic() + 60
            positions: dict[int, int] = {}
            while any(positions.get(p, 0) < o for p, o in upto.items()):
                assert time.monotonic() < deadline, positions
                for tp, records in c.poll(timeout_ms=200).items():
                    positions[tp.partition] = records[-1].offset + 1
            c.commit({kafka.TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in upto.items()})
        finally:
            c.close()
        return
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "group.protocol": "consumer" if protocol == "kip848" else "classic"}
    c = ck.Consumer(conf)
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        positions = {}
        while any(positions.get(p, 0) < o for p, o in upto.items()):
            assert time.monotonic() < deadline, positions
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                positions[msg.partition()] = msg.offset() + 1
        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in upto.items()], asynchronous=False)
    finally:
        c.close()


def _committed(admin: AdminClient, group: str) -> dict[int, int]:
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(20)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def _offsets_partitions_with_records(bootstrap: str) -> set[int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return {p for p in range(SHARDS) if c.get_watermark_offsets(TopicPartition("__consumer_offsets", p),
                                                                     timeout=10)[1] > 0}
    finally:
        c.close()


def test_clients_use_groups_on_several_shards_and_survive_kill_9(tmp_path):
    srv = ServerProcess(tmp_path / "data", f"offsets.topic.num.partitions={SHARDS}", "num.partitions=2",
                        "group.consumer.session.timeout.ms=45000", log_path=str(tmp_path / "server.log"))
    (tmp_path / "data").mkdir()
    srv.start()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(20)
        producer = ck.Producer({"bootstrap.servers": srv.bootstrap, "acks": "all"})
        for p in range(2):
            for i in range(10):
                producer.produce(TOPIC, f"r{i}".encode(), partition=p)
        assert producer.flush(20) == 0
        want = {"kip848": {0: 10, 1: 10}, "classic": {0: 7, 1: 10}, "kafka-python": {0: 10, 1: 4}}
        for protocol, group in GROUPS.items():
            _consume_and_commit(srv.bootstrap, protocol, group, want[protocol])
        for protocol, group in GROUPS.items():
            assert _committed(admin, group) == want[protocol], protocol
        listed = admin.list_consumer_groups().result(20)
        assert set(GROUPS.values()) <= {g.group_id for g in listed.valid} and not listed.errors
        described = admin.describe_consumer_groups(list(GROUPS.values()))  # one request spanning three shards
        assert {g: f.result(20).group_id for g, f in described.items()} == {g: g for g in GROUPS.values()}
        shards = {partition_for(g, SHARDS) for g in GROUPS.values()}
        assert _offsets_partitions_with_records(srv.bootstrap) == shards

        assert srv.stop(sig=9) == -9  # kill -9: no shutdown hook runs
        srv.start()
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        deadline = time.monotonic() + 30
        while True:  # COORDINATOR_LOAD_IN_PROGRESS is retried by the client; give the replay a moment
            try:
                found = {protocol: _committed(admin, group) for protocol, group in GROUPS.items()}
                break
            except ck.KafkaException:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert found == want
        assert _offsets_partitions_with_records(srv.bootstrap) == shards

        # A member that joins after the restart resumes from the group's committed offsets.
        c = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": GROUPS["classic"],
                         "group.protocol": "consumer", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            c.subscribe([TOPIC])
            first: dict[int, int] = {}
            deadline = time.monotonic() + 60
            while len(first) < 1:
                assert time.monotonic() < deadline
                msg = c.poll(0.2)
                if msg is not None and not msg.error():
                    first.setdefault(msg.partition(), msg.offset())
            assert first == {0: 7}  # partition 1 was consumed to its end
        finally:
            c.close()
    finally:
        assert srv.stop() in (0, None)

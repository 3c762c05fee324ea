"""`offsets.topic.num.partitions`: the `__consumer_offsets` partitions and their coordinator logs,
read when the topic is created (as in Kafka), kept as they are afterwards."""

import logging

from cohort.broker import OFFSETS_TOPIC, Broker
from cohort.config import Config


def open_broker(tmp_path, shards=None):
    values = {"log.dir": str(tmp_path / "data")}
    if shards is not None:
        values["offsets.topic.num.partitions"] = shards
    return Broker(Config(values))


def test_a_new_data_dir_gets_one_log_per_partition(tmp_path):
    b = open_broker(tmp_path, 8)
    try:
        assert b.topics[OFFSETS_TOPIC].partitions == 8
        assert [clog.log is b.logs[(OFFSETS_TOPIC, p)] for p, clog in enumerate(b.coordinator_logs)] == [True] * 8
        assert b.coordinator_log is b.coordinator_logs[0]
        assert len({id(c.append_seconds) for c in b.coordinator_logs}) == 1  # one histogram over every shard
    finally:
        b.close()


def test_a_data_dir_keeps_the_count_it_was_created_with(tmp_path, caplog):
    open_broker(tmp_path).close()  # today's layout: one partition
    with caplog.at_level(logging.WARNING):
        b = open_broker(tmp_path, 8)
    try:
        assert b.topics[OFFSETS_TOPIC].partitions == 1 and len(b.coordinator_logs) == 1
        assert "offsets.topic.num.partitions is 8, but __consumer_offsets was created with 1 partitions" in caplog.text
    finally:
        b.close()
    b = open_broker(tmp_path, 1)  # and back: no warning, nothing changed
    try:
        assert len(b.coordinator_logs) == 1
    finally:
        b.close()

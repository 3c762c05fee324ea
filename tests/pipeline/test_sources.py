"""The `cohort-lag` and `cohort-records` data sources against a live `cohort serve`."""

from __future__ import annotations

import confluent_kafka as ck
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient

from cohort.pipeline import layout, wire
from cohort.pipeline.sources import register

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def sources(spark):
    register(spark)
    return spark


def committed_offsets(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    req = ck.ConsumerGroupTopicPartitions(cluster.group, [ck.TopicPartition(cluster.topic, p) for p in range(cluster.partitions)])
    return {tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in admin.list_consumer_group_offsets([req])[cluster.group].result(10).topic_partitions}


def test_batch_lag_read_gives_partition_rows_in_the_layout(sources, live):
    cluster, _ = live
    committed = committed_offsets(cluster)
    df = sources.read.format("cohort-lag").option("bootstrap", cluster.bootstrap).option("sample_seq", "7").load()
    assert df.schema == layout.spark_schema(layout.PARTITION_SCHEMA)
    mine = sorted((r.asDict() for r in df.collect() if r.group_id == cluster.group), key=lambda r: r["partition"])
    assert [(r["sample_seq"], r["topic"], r["partition"]) for r in mine] == [
        (7, cluster.topic, p) for p in range(cluster.partitions)]
    for r in mine:
        p = r["partition"]
        assert (r["committed_offset"], r["start_offset"], r["end_offset"]) == (committed[p], 0, cluster.produced[p])
        assert r["lag"] == (None if committed[p] is None else cluster.produced[p] - committed[p])


def test_members_table_has_the_member_schema(sources, live):
    cluster, _ = live
    df = sources.read.format("cohort-lag").option("bootstrap", cluster.bootstrap).option("table", "members").load()
    assert df.schema == layout.spark_schema(layout.MEMBER_SCHEMA)
    for r in df.collect():  # the member may have left already (test_lag_job closes it); if not, it is ours
        assert (r.group_id, r.client_id, r.subscribed_topics) == (cluster.group, cluster.client_id, [cluster.topic])


@pytest.mark.parametrize("options, message", [
    ({}, "option 'bootstrap' (HOST:PORT) is required"),
    ({"bootstrap": "127.0.0.1:1", "table": "groups"}, "option 'table': expected one of partitions, members, all"),
    ({"bootstrap": "127.0.0.1:1", "timeout": "-1"}, "option 'timeout': expected seconds > 0"),
])
def test_bad_options_are_reported(sources, options, message):
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
        sources.read.format("cohort-lag").options(**options).load().collect()


def test_records_decode_joins_epochs_and_offset_commits(sources, live):
    cluster, _ = live
    committed = committed_offsets(cluster)
    df = sources.read.format("cohort-records").option("bootstrap", cluster.bootstrap).load()
    assert df.schema == layout.spark_schema(wire.RECORD_SCHEMA)
    records = sorted((r.asDict() for r in df.collect()), key=lambda r: r["offset"])
    assert [r["offset"] for r in records] == list(range(len(records)))  # the whole log, in order
    assert not [r for r in records if r["error"]]
    mine = [r for r in records if r["group_id"] == cluster.group]
    joins = [r for r in mine if r["record_type"] == "CONSUMER_GROUP_MEMBER_METADATA" and not r["tombstone"]]
    assert joins and joins[0]["client_id"] == cluster.client_id and joins[0]["subscribed_topics"] == [cluster.topic]
    member_id = joins[0]["member_id"]
    epochs = [r["group_epoch"] for r in mine if r["record_type"] == "CONSUMER_GROUP_METADATA" and not r["tombstone"]]
    assert epochs and epochs[0] >= 1 and epochs == sorted(set(epochs))
    current = [r for r in mine if r["record_type"] == "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT"
               and r["member_id"] == member_id and not r["tombstone"]]
    assert current and current[-1]["member_epoch"] >= 1 and current[-1]["member_state"] == "STABLE"
    assert sorted(int(tp.rsplit(":", 1)[1]) for tp in current[-1]["assigned_partitions"]) == list(range(cluster.partitions))
    targets = [r for r in mine if r["record_type"] == "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER" and not r["tombstone"]]
    assert sorted(targets[-1]["target_assignment"]) == sorted(current[-1]["assigned_partitions"])
    last_commit = {}
    for r in mine:
        if r["record_type"] == "OFFSET_COMMIT" and not r["tombstone"]:
            assert r["topic"] == cluster.topic and r["committed_offset"] > last_commit.get(r["partition"], 0)
            last_commit[r["partition"]] = r["committed_offset"]
    assert last_commit == {p: c for p, c in committed.items() if c is not None}


def test_an_undecodable_record_becomes_a_row_with_its_error():
    row = wire.record_row(5, None, b"\x00\x63\x00\x01g", b"\x00\x00")
    assert (row["offset"], row["record_type"], row["tombstone"]) == (5, "UNDECODABLE", False)
    assert "record" in row["error"]
    assert pa.RecordBatch.from_pylist([row], schema=wire.RECORD_SCHEMA).num_rows == 1  # fits the schema

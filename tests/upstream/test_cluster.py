"""UpstreamCluster reads the upstream's brokers, topics (with the ids clients see) and offsets."""

from __future__ import annotations

import uuid

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.upstream.cluster import UpstreamCluster

pytestmark = pytest.mark.timeout(60)


def test_brokers_topics_ids_and_offsets_are_the_upstreams(upstream):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": upstream.bootstrap})
    admin.create_topics([NewTopic(topic, 3)])[topic].result(20)
    p = ck.Producer({"bootstrap.servers": upstream.bootstrap})
    for i in range(10):
        p.produce(topic, b"x", partition=i % 2)  # 5, 5 and 0 records
    assert p.flush(20) == 0
    seen = []
    cluster = UpstreamCluster({"bootstrap.servers": upstream.bootstrap}, frozenset({"__cohort_groups_mine"}),
                              timeout_s=20)
    cluster.topic_listeners.append(lambda: seen.append(cluster.topic_version))
    brokers, topics, offsets = cluster.fetch()
    assert brokers.nodes == {1: ("127.0.0.1", upstream.port)} and brokers.controller_id == 1
    described = admin.describe_topics(ck.TopicCollection([topic]))[topic].result(20)
    assert str(topics[topic].id) == str(uuid.UUID(bytes=described.topic_id.get_most_significant_bits().to_bytes(
        8, "big", signed=True) + described.topic_id.get_least_significant_bits().to_bytes(8, "big", signed=True)))
    assert topics[topic].partitions == 3 and not topics[topic].internal
    assert topics["__consumer_offsets"].internal
    assert [(offsets[(topic, q)].start_offset, offsets[(topic, q)].end_offset) for q in range(3)] == [(0, 5), (0, 5), (0, 0)]
    assert cluster.apply(brokers, topics, offsets) and seen == [1]
    assert not cluster.apply(brokers, dict(topics), offsets) and seen == [1]  # unchanged: nobody told
    assert cluster.topic_by_id(topics[topic].id).name == topic
    snap = cluster.metadata_snapshot()
    assert snap.topics[topic].end_offsets == (5, 5, 0) and snap.topic_ids[topics[topic].id] == topic

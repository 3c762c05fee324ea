"""The upstream's group requests over cohort's own wire client (`cohort.upstream.admin`), against a
live broker: a classic group's members and assignments as DescribeGroups gives them, admin
commits taken by an empty group and refused by a live one, and a one-line error, not a hang or
an abort, when nobody answers."""

from __future__ import annotations

import socket
import time

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.upstream.admin import AdminError, GroupAdmin
from cohort.upstream.membership import Instance, read_view
from cohort_testing import ServerThread


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    srv = ServerThread(str(tmp_path_factory.mktemp("data")), {"group.initial.rebalance.delay.ms": 0}).start()
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    for f in admin.create_topics([NewTopic("shards", 4), NewTopic("orders", 2)]).values():
        f.result(10)
    yield srv
    srv.stop()


def test_describe_gives_each_members_client_id_and_partitions(broker):
    me = Instance(1000000, "127.0.0.1", 9092, {1: 9101}, "ab" * 16, False)
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cohort-c1", "client.id": me.client_id(),
                            "partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False})
    try:
        consumer.subscribe(["shards"])
        deadline = time.monotonic() + 20
        while len(consumer.assignment()) < 4:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.1)
        admin = GroupAdmin({"bootstrap.servers": broker.bootstrap}, 5)
        (member,) = admin.describe_members("cohort-c1")
        assert member.client_id == me.client_id()
        assert member.assignment == (("shards", (0, 1, 2, 3)),)
        view = read_view(admin, "cohort-c1", "shards")
        assert view.instances == (me,) and view.shards_of(me.node_id) == [0, 1, 2, 3]
        # a live group refuses an admin commit (generation -1): the error comes back per partition
        refused = admin.commit_offsets("cohort-c1", {("shards", 0): 5})
        assert refused[("shards", 0)] != 0
    finally:
        consumer.close()
    assert GroupAdmin({"bootstrap.servers": broker.bootstrap}, 5).describe_members("nobody-here") == []


def test_admin_commits_land_and_read_back(broker):
    admin = GroupAdmin({"bootstrap.servers": broker.bootstrap}, 5)
    assert admin.commit_offsets("mirrored", {("orders", 0): 7, ("orders", 1): 11}) == {("orders", 0): 0, ("orders", 1): 0}
    check = AdminClient({"bootstrap.servers": broker.bootstrap})
    got = check.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "mirrored", [TopicPartition("orders", 0), TopicPartition("orders", 1)])])["mirrored"].result(10)
    assert {tp.partition: tp.offset for tp in got.topic_partitions} == {0: 7, 1: 11}


def test_nobody_answering_is_one_error_within_the_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    admin = GroupAdmin({"bootstrap.servers": f"127.0.0.1:{port}"}, 2)
    started = time.monotonic()
    with pytest.raises(AdminError) as caught:
        admin.describe_members("cohort-c1")
    assert time.monotonic() - started < 5
    assert "\n" not in str(caught.value) and str(caught.value)
    with socket.socket() as silent:  # accepts and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        admin = GroupAdmin({"bootstrap.servers": f"127.0.0.1:{silent.getsockname()[1]}"}, 1)
        started = time.monotonic()
        with pytest.raises(AdminError, match="no answer within 1 s|timed out"):
            admin.commit_offsets("g", {("orders", 0): 1})
        assert time.monotonic() - started < 4

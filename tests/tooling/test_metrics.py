"""/metrics served from what the previous scrape kept: after every step real clients take (commits,
produces, KIP-848 and classic members coming and going, a classic rebalance, group and topic
deletions), the long-lived renderer's answer is byte for byte what a renderer with nothing kept
builds from scratch, and an idle scrape reads no group at all."""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from cohort_testing import ServerThread
from cohort.tooling.metrics import FleetRenderer


@pytest.fixture
def srv(tmp_path):
    server = ServerThread(str(tmp_path / "data"), {"metrics.cluster.name": "c\"1",
                                                   "group.initial.rebalance.delay.ms": 0})
    server.start()
    yield server
    server.stop()


def wait_for(condition, timeout=30.0, poll=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if poll is not None:
            poll()
        else:
            time.sleep(0.1)
    raise AssertionError("timed out")


def test_kept_lines_match_a_fresh_render_after_every_change(srv):
    kept = FleetRenderer()
    reads: list[list[str]] = []
    coordinator = srv.server.group_coordinator
    group_lags = coordinator.group_lags

    def counting(only=None):
        reads.append(list(only) if only is not None else ["*"])
        return group_lags(only)

    coordinator.group_lags = counting

    def check(step: str) -> str:
        # The two renders run one after the other while clients keep going (a rebalance may move
        # between them); a change the kept renderer missed stays missed, so it is asked again,
        # and must agree with a fresh one by the third time.
        for _ in range(3):
            reads.clear()
            ours = b"".join(srv.run(kept.exposition(srv.server))).decode()
            read_by_kept = list(reads)
            fresh = b"".join(srv.run(FleetRenderer().exposition(srv.server))).decode()
            if ours == fresh:
                break
        assert ours == fresh, step
        reads[:] = read_by_kept
        return ours

    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    for f in admin.create_topics([NewTopic("ma", 2, 1), NewTopic("mb", 1, 1)]).values():
        f.result(10)
    producer = ck.Producer({"bootstrap.servers": srv.bootstrap})

    def produce(topic, partition, n):
        for _ in range(n):
            producer.produce(topic, b"v", partition=partition)
        assert producer.flush(10) == 0

    def commit(group, topic, partition, offset):
        request = ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, partition, offset)])
        admin.alter_consumer_group_offsets([request])[group].result(10)

    produce("ma", 0, 5)
    produce("ma", 1, 3)
    produce("mb", 0, 4)
    check("topics")
    commit("offsets-only", "ma", 0, 2)
    text = check("a commit")
    assert 'group="offsets-only",topic="ma",partition="0",member_host="",consumer_id="",client_id=""} 3' in text
    check("idle")
    assert reads == []  # nothing changed: no group is read again
    produce("ma", 0, 2)
    text = check("a log end moved")
    assert 'group="offsets-only",topic="ma",partition="0",member_host="",consumer_id="",client_id=""} 5' in text
    assert reads == []  # only lag lines, from what was kept

    modern = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "modern", "group.protocol": "consumer",
                          "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": "m1"})
    classic_one = classic_two = None
    try:
        modern.subscribe(["ma"])
        wait_for(lambda: len(modern.assignment()) == 2, poll=lambda: modern.poll(0.2))
        check("a KIP-848 member owns both partitions")
        modern.commit(offsets=[ck.TopicPartition("ma", 0, 4), ck.TopicPartition("ma", 1, 1)], asynchronous=False)
        text = check("the member committed")
        assert 'group="modern",topic="ma",partition="1",member_host="/127.0.0.1"' in text

        classic_one = KafkaConsumer("mb", bootstrap_servers=srv.bootstrap, group_id="classic", client_id="k1",
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        # kafka-python's leader assigns from the metadata it holds; before its first poll that may not
        # include mb yet ("No partition metadata for topic mb"), and it would assign nothing until its
        # next metadata refresh, minutes later. Asking for mb's partitions loads it first.
        wait_for(lambda: classic_one.partitions_for_topic("mb") == {0})
        wait_for(lambda: bool(classic_one.assignment()), poll=lambda: classic_one.poll(100))
        classic_one.commit()
        check("a classic member joined and committed")
        classic_two = KafkaConsumer("mb", bootstrap_servers=srv.bootstrap, group_id="classic", client_id="k2",
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        for _ in range(5):  # caught during the rebalance or after it: either must match
            classic_two.poll(50)
            check("a second classic member joins")
        wait_for(lambda: 'group="classic",type="classic"} 2' in check("two classic members"),
                 poll=lambda: (classic_one.poll(50), classic_two.poll(50)))
        classic_two.close()
        classic_two = None
        wait_for(lambda: 'group="classic",type="classic"} 1' in check("one left"), poll=lambda: classic_one.poll(50))
    finally:
        modern.close()
        for c in (classic_one, classic_two):
            if c is not None:
                c.close()
    check("members gone")
    txn = ck.Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "metrics-txn"})
    txn.init_transactions(20)
    txn.begin_transaction()
    txn.send_offsets_to_transaction([ck.TopicPartition("ma", 1, 3)], ck.Consumer(
        {"bootstrap.servers": srv.bootstrap, "group.id": "transactional"}).consumer_group_metadata(), 20)
    assert 'group="transactional"' not in check("offsets pending in a transaction")  # invisible until its marker
    txn.commit_transaction(20)
    wait_for(lambda: 'group="transactional",topic="ma",partition="1",member_host="",consumer_id="",client_id=""} 0'
             in check("offsets committed by a transaction's marker"))  # ma-1 ends at 3: no lag
    admin.delete_consumer_groups(["offsets-only"])["offsets-only"].result(10)
    text = check("a group deleted")
    assert 'group="offsets-only"' not in text
    admin.delete_topics(["mb"])["mb"].result(10)
    text = check("a topic deleted")
    assert 'topic="mb"' not in text.split("# HELP cohort_groups")[0]  # its partitions are gone
    produce("ma", 1, 1)
    check("after the deletions")

"""librdkafka clients across kill -9 restarts of a one-node cohort.

librdkafka 2.10+ re-bootstraps when every broker it knows is down, which for one node is every
restart, and its open bugs (#5456, #5511) then hang a transactional producer's
send_offsets_to_transaction() and leave an admin client's cached group coordinators unasked.
With cohort.librdkafka.RESTART_SAFE (what docs/operations.md, "Clients", tells users to set) a
transactional producer, a multi-group admin client and the `cohort consume` tool carry on."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.librdkafka import RESTART_SAFE
from cohort_testing import ServerProcess

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """A broker on a fixed free port, so that a restarted one is where the clients left it."""
    srv = ServerProcess(tmp_path / "data", "num.partitions=1", "transaction.max.timeout.ms=60000",
                        args=("--port", str(_free_port())), log_path=str(tmp_path / "server.log")).start()
    yield srv
    srv.stop()


def _kill_and_restart(srv: ServerProcess) -> None:
    srv.proc.kill()
    assert srv.stop() == -9
    time.sleep(0.5)  # the clients notice the broker is gone
    srv.start()


def test_a_transactional_producer_and_a_multi_group_admin_survive_two_kill_9_restarts(server):
    source, sink = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    settings = {"bootstrap.servers": server.bootstrap, **RESTART_SAFE}
    admin = AdminClient(settings)
    for f in admin.create_topics([NewTopic(source, 1), NewTopic(sink, 1)]).values():
        f.result(20)
    groups = [f"g{i}-{uuid.uuid4().hex[:4]}" for i in range(9)]
    for i, g in enumerate(groups):
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(g, [TopicPartition(source, 0, i + 1)])])[g].result(20)

    def offsets() -> dict[str, int]:
        out = {}
        for g in groups:
            result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])[g].result(30)
            out[g] = {tp.partition: tp.offset for tp in result.topic_partitions}[0]
        return out

    assert offsets() == {g: i + 1 for i, g in enumerate(groups)}
    eos_group = groups[0]
    meta_consumer = ck.Consumer({**settings, "group.id": eos_group})
    producer = ck.Producer({**settings, "transactional.id": f"tx-{sink}"})
    producer.init_transactions(30)
    try:
        for round_ in range(1, 4):
            if round_ > 1:
                _kill_and_restart(server)
            started = time.monotonic()
            producer.begin_transaction()
            producer.produce(sink, value=f"round {round_}".encode())
            producer.send_offsets_to_transaction([TopicPartition(source, 0, 100 + round_)],
                                                 meta_consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            assert time.monotonic() - started < 30
            expected = {g: i + 1 for i, g in enumerate(groups)} | {eos_group: 100 + round_}
            deadline = time.monotonic() + 15
            while (got := offsets()) != expected and time.monotonic() < deadline:
                time.sleep(0.2)  # the COMMIT marker lands just after EndTxn's answer
            assert got == expected
    finally:
        meta_consumer.close()


def test_the_consume_tool_carries_on_across_a_kill_9_restart(server, tmp_path):
    topic = f"tool-{uuid.uuid4().hex[:6]}"
    producer = ck.Producer({"bootstrap.servers": server.bootstrap, **RESTART_SAFE})
    for i in range(10):
        producer.produce(topic, value=f"before-{i}".encode())
    assert producer.flush(20) == 0
    out = open(tmp_path / "consumed.txt", "wb")
    tool = subprocess.Popen([sys.executable, "-m", "cohort", "consume", "--bootstrap-server", server.bootstrap,
                             "--topic", topic, "--group", "tool-g", "--from-beginning", "--max-messages", "20"],
                            stdout=out, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while (tmp_path / "consumed.txt").read_bytes().count(b"\n") < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        _kill_and_restart(server)
        for i in range(10):
            producer.produce(topic, value=f"after-{i}".encode())
        assert producer.flush(30) == 0
        assert tool.wait(60) == 0, tool.stderr.read().decode()
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
        tool.stderr.close()
        out.close()
    lines = (tmp_path / "consumed.txt").read_text().split()
    assert sorted(lines) == sorted([f"before-{i}" for i in range(10)] + [f"after-{i}" for i in range(10)])

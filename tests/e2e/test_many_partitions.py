"""Thousands of partitions with `ulimit -n 1024`, and a broker killed while it creates them: it
keeps serving, and it restarts with every topic either whole or gone."""

import datetime
import signal
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from cohort.protocol.entities import build, nested

from cohort_testing import ServerProcess, WireClient

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]


def create_topics_request(name, partitions):
    schema = load_request_schema(19, 7)
    topic = build(nested(schema, "topics"), name=name, num_partitions=partitions, replication_factor=-1,
                  assignments=(), configs=())
    return build(schema, topics=(topic,), timeout=datetime.timedelta(seconds=60), validate_only=False)


def produce_and_read(bootstrap, topic, partitions):
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for part in partitions:
        p.produce(topic, value=b"%s %d" % (topic.encode(), part), partition=part)
    assert p.flush(60) == 0
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "many", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, part, ck.OFFSET_BEGINNING) for part in partitions])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < len(partitions) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.add(m.value())
    c.close()
    return seen == {b"%s %d" % (topic.encode(), part) for part in partitions}


def test_5000_partitions_with_1024_descriptors_and_a_kill_mid_create(tmp_path):
    log = str(tmp_path / "server.log")
    srv = ServerProcess(tmp_path / "data", log_path=log, nofile=1024).start()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic("wide", 5000, 1)], operation_timeout=120)["wide"].result(180)
        assert produce_and_read(srv.bootstrap, "wide", [0, 1717, 4999])
        # kill -9 while a second 5,000-partition topic is being created
        with WireClient(srv.port, timeout=120) as c:
            c.send_raw(c.encode(19, 7, create_topics_request("doomed", 5000)))
            time.sleep(0.5)
            srv.proc.send_signal(signal.SIGKILL)
            srv.proc.wait(30)
    finally:
        srv.stop()
    again = ServerProcess(tmp_path / "data", log_path=log, nofile=1024).start()
    try:
        md = ck.Consumer({"bootstrap.servers": again.bootstrap, "group.id": "md"}).list_topics(timeout=60)
        assert len(md.topics["wide"].partitions) == 5000
        assert "doomed" not in md.topics or len(md.topics["doomed"].partitions) == 5000
        assert produce_and_read(again.bootstrap, "wide", [0, 4999])
    finally:
        assert again.stop() == 0

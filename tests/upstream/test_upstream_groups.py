"""cohort in front of an upstream cluster (`upstream.bootstrap.servers`; the upstream is another
`cohort serve`): clients bootstrapped to cohort create topics, produce and consume through it,
the groups' records live upstream so a new instance with an empty data dir has every group and
offset back, and a second instance of the same cohort cluster shares the shards with the first."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cohort_testing import ServerProcess
from upstream_clients import committed_offsets, coordinator_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

TOPIC, PARTITIONS, RECORDS = "orders", 4, 400
LOCAL = "local-orders"  # a topic only the broker keeping its data local has
GROUPS_TOPIC = "__cohort_groups_e2e"  # the cohort upstream is shared by the package's tests: a topic of its own
FAST = ("group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        "group.consumer.session.timeout.ms=6000", "group.consumer.min.session.timeout.ms=1000",
        "group.initial.rebalance.delay.ms=100", "group.min.session.timeout.ms=1000")


def instance(path, upstream, *extra) -> ServerProcess:
    path.mkdir(exist_ok=True)
    return ServerProcess(path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                         "offsets.topic.num.partitions=2", f"upstream.groups.topic={GROUPS_TOPIC}", *FAST, *extra,
                         log_path=str(path / "server.log")).start()


def consume_all(bootstrap: str, group: str, protocol: str, members: int = 2, topic: str = TOPIC) -> set[bytes]:
    """``members`` consumers of one group read every record, committing each one."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    consumers = [ck.Consumer(conf) for _ in range(members)]
    for c in consumers:
        c.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < RECORDS:
            assert time.monotonic() < deadline, f"{group}: consumed {len(seen)} of {RECORDS}"
            for c in consumers:
                m = c.poll(0.05)
                if m is not None and m.error() is None:
                    seen.add(m.value())
                    commit(c, m)
    finally:
        for c in consumers:
            c.close()
    return seen


def commit(consumer, message, attempts: int = 60) -> None:
    """A synchronous commit, retried as Kafka's own consumer retries it when a heartbeat bumped the
    member epoch while the commit was in flight (STALE_MEMBER_EPOCH: the next try carries the new one)."""
    for attempt in range(attempts):
        try:
            consumer.commit(message=message, asynchronous=False)
            return
        except ck.KafkaException as exc:
            if exc.args[0].code() != ck.KafkaError.STALE_MEMBER_EPOCH or attempt == attempts - 1:
                raise
            time.sleep(0.05)


def committed(bootstrap: str, group: str, topic: str = TOPIC) -> dict[int, int]:
    return committed_offsets(bootstrap, group, topic, PARTITIONS)


def upstream_records(upstream, topic: str = GROUPS_TOPIC) -> int:
    """Committed records of the group coordinator's topic, read from the upstream itself."""
    c = ck.Consumer({"bootstrap.servers": upstream.bootstrap, "group.id": "reader", "enable.partition.eof": True,
                     "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(2)])
    count, eof, deadline = 0, set(), time.monotonic() + 30
    try:
        while len(eof) < 2 and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    count += 1
                elif m.error().code() == ck.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
        return count
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["upstream", "tansu"])  # another cohort; Tansu, which speaks only classic groups
def test_groups_come_back_from_the_upstream_and_instances_share_the_shards(tmp_path, request, kind):
    upstream = request.getfixturevalue(kind)
    a = instance(tmp_path / "a", upstream, "upstream.cluster.name=e2e")
    b = None
    try:
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(20)
        p = ck.Producer({"bootstrap.servers": a.bootstrap})
        for i in range(RECORDS):
            p.produce(TOPIC, b"r%d" % i, partition=i % PARTITIONS)
        assert p.flush(20) == 0
        expected = {b"r%d" % i for i in range(RECORDS)}
        assert consume_all(a.bootstrap, "kip848", "consumer") == expected
        assert consume_all(a.bootstrap, "old-school", "classic") == expected
        ends = {q: RECORDS // PARTITIONS for q in range(PARTITIONS)}
        assert committed(a.bootstrap, "kip848") == ends
        written = upstream_records(upstream)
        assert written >= 2 * RECORDS  # every commit and membership change went to the upstream

        # kill -9, and start a new instance with an empty data dir: the upstream has it all
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        a.stop()
        a = instance(tmp_path / "a2", upstream, "upstream.cluster.name=e2e")
        assert committed(a.bootstrap, "kip848") == ends
        assert committed(a.bootstrap, "old-school") == ends
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        described = admin.describe_consumer_groups(["kip848", "old-school"])
        assert str(described["kip848"].result(20).type).endswith("CONSUMER")
        assert str(described["old-school"].result(20).type).endswith("CLASSIC")

        if kind == "tansu":
            return  # Tansu's DescribeGroups lists no members: instances cannot find one another (docs/upstream.md)
        # A second instance of the same cohort cluster shares the shards (two, one each): every
        # group is reachable through either, and its commits land with whichever owns it.
        b = instance(tmp_path / "b", upstream, "upstream.cluster.name=e2e", "upstream.coordinator.node.id=1000001")
        deadline = time.monotonic() + 60
        while {coordinator_of(a.port, g) for g in ("g0", "g1", "g2", "g3", "g4", "g5")} != {1000000, 1000001}:
            assert time.monotonic() < deadline, "the shards were not shared"
            time.sleep(0.2)
        assert committed(b.bootstrap, "kip848") == ends
        assert committed(b.bootstrap, "old-school") == ends
        _commit(b.bootstrap, "kip848", 1)
        assert committed(a.bootstrap, "kip848")[0] == 1
        # b leaves cleanly: its shard comes back to a at once, nothing lost
        assert b.stop() == 0
        b = None
        assert committed(a.bootstrap, "kip848") == {**ends, 0: 1}
        assert committed(a.bootstrap, "old-school") == ends
        assert upstream_records(upstream) > written
    finally:
        assert a.stop() == 0
        if b is not None:
            assert b.stop() == 0


def test_without_forwarding_only_the_groups_records_go_upstream(tmp_path, upstream):
    """upstream.forward=false: topics and data stay on this broker; the groups come back from the
    upstream when the local coordinator log is gone."""
    a = instance(tmp_path / "a", upstream, "upstream.forward=false", "upstream.cluster.name=local-data",
                 "upstream.groups.topic=__cohort_groups_local")
    try:
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_topics([NewTopic(LOCAL, PARTITIONS)])[LOCAL].result(20)
        assert LOCAL not in AdminClient({"bootstrap.servers": upstream.bootstrap}).list_topics(timeout=20).topics
        p = ck.Producer({"bootstrap.servers": a.bootstrap})
        for i in range(RECORDS):
            p.produce(LOCAL, b"r%d" % i, partition=i % PARTITIONS)
        assert p.flush(20) == 0
        assert len(consume_all(a.bootstrap, "local", "consumer", members=1, topic=LOCAL)) == RECORDS
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        a.stop()
        for name in os.listdir(a.data_dir):
            if name.startswith("__consumer_offsets"):
                shutil.rmtree(os.path.join(a.data_dir, name))
        a = instance(tmp_path / "a", upstream, "upstream.forward=false", "upstream.cluster.name=local-data",
                     "upstream.groups.topic=__cohort_groups_local")
        assert committed(a.bootstrap, "local", LOCAL) == {q: RECORDS // PARTITIONS for q in range(PARTITIONS)}
        assert upstream_records(upstream, "__cohort_groups_local") > RECORDS
    finally:
        assert a.stop() == 0


def _commit(bootstrap: str, group: str, offset: int, deadline_s: float = 40) -> None:
    """An admin-style commit of ``offset`` on partition 0, retried while the coordinator cannot take it."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            try:
                c.commit(offsets=[ck.TopicPartition(TOPIC, 0, offset)], asynchronous=False)
                return
            except ck.KafkaException as exc:
                assert time.monotonic() < deadline, f"commit of {offset} still failing: {exc}"
                time.sleep(0.3)
    finally:
        c.close()


def test_groups_ride_out_an_upstream_outage_and_a_shard_whose_log_failed_is_loaded_again(tmp_path):
    """The upstream goes away: commits fail meanwhile (nothing acknowledged is lost) and work
    again once it is back. Then a foreign record lands in a shard's partition: the shard's next
    append finds its records where it did not expect them, the shard stops being served and is
    loaded again from the upstream (the foreign record skipped), with every acknowledged offset."""
    from cohort.coordinator import partition_for

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "up").mkdir()
    up = ServerProcess(tmp_path / "up" / "data", log_path=str(tmp_path / "up" / "server.log"),
                       args=("--port", str(port))).start()
    a = instance(tmp_path / "a", up, "upstream.forward=false", "upstream.request.timeout.ms=3000")
    try:
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result(20)
        _commit(a.bootstrap, "survivor", 5)
        assert up.stop() == 0  # the upstream goes away
        c = ck.Consumer({"bootstrap.servers": a.bootstrap, "group.id": "survivor"})
        with pytest.raises(ck.KafkaException):
            c.commit(offsets=[ck.TopicPartition(TOPIC, 0, 6)], asynchronous=False)
        c.close()
        up = ServerProcess(tmp_path / "up" / "data", log_path=str(tmp_path / "up" / "server.log"),
                           args=("--port", str(port))).start()  # back, with what it had
        _commit(a.bootstrap, "survivor", 7)
        assert committed(a.bootstrap, "survivor")[0] == 7

        intruder = ck.Producer({"bootstrap.servers": up.bootstrap})
        intruder.produce(GROUPS_TOPIC, b"not a coordinator record", b"x", partition=partition_for("survivor", 2))
        assert intruder.flush(20) == 0
        _commit(a.bootstrap, "survivor", 9)  # fails once (the shard reloads), then lands
        assert committed(a.bootstrap, "survivor")[0] == 9
        with open(tmp_path / "a" / "server.log") as f:
            text = f.read()
        assert "another writer reached" in text and "loaded again after its log failed" in text
    finally:
        assert a.stop() == 0
        up.stop()

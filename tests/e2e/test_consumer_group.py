"""KIP-848 consumers against `cohort serve`: confluent-kafka (librdkafka 2.16) with
group.protocol=consumer, and the same tests with cohort.client (through cohort_client_sync)."""

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cohort_testing import ServerProcess
from cohort_client_sync import SyncConsumer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

# Short intervals so the test runs in seconds (the bounds are lowered to allow them).
FAST = ("group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        "group.consumer.session.timeout.ms=4000", "group.consumer.min.session.timeout.ms=1000",
        "num.partitions=1")


def start(data_dir, log_path):
    return ServerProcess(data_dir, *FAST, log_path=str(log_path)).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("groups")
    srv = start(base / "data", base / "server.log")
    yield srv
    assert srv.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"


def create(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(10)


def produce(bootstrap, topic, partitions, start, count):
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for i in range(start, start + count):
        p.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert p.flush(20) == 0


CLIENTS = {"confluent-kafka": ck.Consumer, "cohort.client": SyncConsumer}


@pytest.fixture(params=sorted(CLIENTS))
def kind(request):
    return request.param


def consumer(bootstrap, group, assignor=None, kind="confluent-kafka", **extra):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": extra.pop("client_id", "e2e")}
    if assignor:
        conf["group.remote.assignor"] = assignor
    conf.update(extra)
    return CLIENTS[kind](conf)


def commit(c, m, attempts=60):
    """Commit synchronously. A heartbeat may bump the member epoch while the commit is in flight
    (STALE_MEMBER_EPOCH, as Kafka 4.0 answers): retry once the client has the new epoch. Not
    polling in between keeps the partition owned, so nothing is consumed twice."""
    for _ in range(attempts):
        try:
            c.commit(message=m, asynchronous=False)
            return
        except ck.KafkaException as exc:
            if exc.args[0].code() != ck.KafkaError.STALE_MEMBER_EPOCH:
                raise
            time.sleep(0.05)
    raise AssertionError("commit kept failing with STALE_MEMBER_EPOCH")


class Group:
    """Consumers polled round-robin from this thread; each message is committed (synchronously)
    before the next poll, so a partition moving to another member resumes exactly after it."""

    def __init__(self):
        self.members = {}
        self.seen = []

    def poll_until(self, done, timeout=30, what="condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, c in list(self.members.items()):
                m = c.poll(0.05)
                if m is None:
                    continue
                assert m.error() is None, m.error()
                self.seen.append((name, m.topic(), m.partition(), m.offset(), m.value()))
                commit(c, m)
            if done():
                return
        raise AssertionError(f"timed out waiting for {what}; assignments: {self.assignments()}")

    def assignments(self):
        return {name: sorted((tp.topic, tp.partition) for tp in c.assignment()) for name, c in self.members.items()}


def end_offsets(bootstrap, topic, partitions):
    probe = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return {p: probe.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        probe.close()


def committed(bootstrap, group, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    req = ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([req])[group].result(10)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_and_leave_and_every_message_is_consumed_once(server, assignor, kind):
    topic, group, n = f"orders-{assignor}-{kind}", f"g-{assignor}-{kind}", 6
    create(server.bootstrap, topic, n)
    produce(server.bootstrap, topic, n, 0, 240)
    g = Group()
    try:
        g.members["a"] = consumer(server.bootstrap, group, assignor, kind)
        g.members["a"].subscribe([topic])
        g.poll_until(lambda: len(g.assignments()["a"]) == n and len(g.seen) >= 60, what="a owns everything")
        g.members["b"] = consumer(server.bootstrap, group, assignor, kind)
        g.members["c"] = consumer(server.bootstrap, group, assignor, kind)
        g.members["b"].subscribe([topic])
        g.members["c"].subscribe([topic])
        g.poll_until(lambda: sorted(len(a) for a in g.assignments().values()) == [2, 2, 2], what="2/2/2")
        owned = g.assignments()
        assert sorted(tp for a in owned.values() for tp in a) == [(topic, p) for p in range(n)]
        if assignor == "range":  # range gives each member a contiguous block
            for a in owned.values():
                assert a[1][1] - a[0][1] == 1
        g.poll_until(lambda: len(g.seen) >= 240, what="the first 240 messages")
        g.members.pop("a").close()  # leaves the group (epoch -1); its partitions move to b and c
        produce(server.bootstrap, topic, n, 240, 120)
        g.poll_until(lambda: sorted(len(a) for a in g.assignments().values()) == [3, 3] and len(g.seen) >= 360,
                     what="3/3 and every message")
        consumed = [(p, o) for _, _, p, o, _ in g.seen]
        assert len(consumed) == len(set(consumed)) == 360  # exactly once across the group
        assert {v for *_, v in g.seen} == {b"v%d" % i for i in range(360)}
        assert {name for name, *_ in g.seen} == {"a", "b", "c"}
        assert committed(server.bootstrap, group, topic, n) == end_offsets(server.bootstrap, topic, n)
    finally:
        for c in g.members.values():
            c.close()


def test_static_member_rejoins_with_its_partitions(server, kind):
    topic, group = f"static-t-{kind}", f"g-static-{kind}"
    create(server.bootstrap, topic, 4)
    g = Group()
    try:
        for name in ("s1", "s2"):
            g.members[name] = consumer(server.bootstrap, group, "uniform", kind, **{"group.instance.id": f"inst-{name}"})
            g.members[name].subscribe([topic])
        g.poll_until(lambda: sorted(len(a) for a in g.assignments().values()) == [2, 2], what="2/2")
        before = g.assignments()
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(10)
        assert sorted(m.group_instance_id for m in desc.members) == ["inst-s1", "inst-s2"]
        g.members.pop("s1").close()  # a static member leaves with epoch -2: its partitions stay reserved
        g.poll_until(lambda: True, timeout=1)
        assert g.assignments()["s2"] == before["s2"]
        g.members["s1"] = consumer(server.bootstrap, group, "uniform", kind, **{"group.instance.id": "inst-s1"})
        g.members["s1"].subscribe([topic])
        g.poll_until(lambda: g.assignments()["s1"] == before["s1"], what="s1 gets its partitions back")
        assert g.assignments()["s2"] == before["s2"]
    finally:
        for c in g.members.values():
            c.close()


def test_regex_subscription_picks_up_a_topic_created_later(server, kind):
    pat = "pat" if kind == "confluent-kafka" else "cpat"
    create(server.bootstrap, f"{pat}-one", 2)
    create(server.bootstrap, f"other-one-{kind}", 2)
    group = f"g-regex-{kind}"
    g = Group()
    try:
        g.members["r"] = consumer(server.bootstrap, group, kind=kind)
        g.members["r"].subscribe([f"^{pat}-.*"])
        g.poll_until(lambda: g.assignments()["r"] == [(f"{pat}-one", 0), (f"{pat}-one", 1)], what=f"{pat}-one")
        create(server.bootstrap, f"{pat}-two", 1)
        produce(server.bootstrap, f"{pat}-two", 1, 0, 5)
        g.poll_until(lambda: (f"{pat}-two", 0) in g.assignments()["r"] and len(g.seen) >= 5, what=f"{pat}-two")
        assert {t for _, t, *_ in g.seen} == {f"{pat}-two"}
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(10)
        assert desc.state == ck.ConsumerGroupState.STABLE
        [member] = desc.members
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) == [
            (f"{pat}-one", 0), (f"{pat}-one", 1), (f"{pat}-two", 0)]
    finally:
        for c in g.members.values():
            c.close()


def test_admin_describe_and_list_and_restart_keeps_offsets(tmp_path, kind):
    srv = start(tmp_path / "data", tmp_path / "server.log")
    try:
        create(srv.bootstrap, "kept", 3)
        produce(srv.bootstrap, "kept", 3, 0, 30)
        g = Group()
        g.members["k"] = consumer(srv.bootstrap, "g-kept", kind=kind, client_id="keeper")
        g.members["k"].subscribe(["kept"])
        g.poll_until(lambda: len(g.seen) >= 30, what="30 messages")
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        desc = admin.describe_consumer_groups(["g-kept"])["g-kept"].result(10)
        assert desc.group_id == "g-kept" and desc.state == ck.ConsumerGroupState.STABLE
        [member] = desc.members
        assert member.client_id == "keeper" and member.host == "/127.0.0.1"
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1, 2]
        listed = admin.list_consumer_groups().result(10)
        assert "g-kept" in {x.group_id for x in listed.valid}
        assert committed(srv.bootstrap, "g-kept", "kept", 3) == {0: 10, 1: 10, 2: 10}
        g.members.pop("k").close()
    finally:
        assert srv.stop() == 0
    again = start(tmp_path / "data", tmp_path / "server.log")
    try:
        assert committed(again.bootstrap, "g-kept", "kept", 3) == {0: 10, 1: 10, 2: 10}
        produce(again.bootstrap, "kept", 3, 30, 3)
        g = Group()
        g.members["k"] = consumer(again.bootstrap, "g-kept", kind=kind)
        g.members["k"].subscribe(["kept"])
        g.poll_until(lambda: len(g.seen) >= 3, what="the 3 new messages")
        assert sorted(v for *_, v in g.seen) == [b"v30", b"v31", b"v32"]  # resumed at the committed offsets
        g.members.pop("k").close()
    finally:
        assert again.stop() == 0

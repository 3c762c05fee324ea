"""A rolling upgrade: confluent-kafka consumers move one by one from `group.protocol=classic` to
`consumer` while a producer keeps writing (KIP-848 online migration of a classic group).

Every produced message must be consumed at least once, and the group's committed offsets, read
all along by an observer that never joins, must never go backwards.
"""

import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(120)]

PARTITIONS, MEMBERS = 6, 3
FAST = ("group.initial.rebalance.delay.ms=200", "group.min.session.timeout.ms=1000",
        "group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        "group.consumer.session.timeout.ms=4000", "group.consumer.min.session.timeout.ms=1000")


# The producer's pace, well below what three members committing every message synchronously
# consume on a loaded machine, so that a backlog left by a rebalance drains.
RATE = 200
RETRIABLE = (ck.KafkaError.REBALANCE_IN_PROGRESS, ck.KafkaError.STALE_MEMBER_EPOCH)


class Member:
    """One consumer on its own thread; commits each message synchronously before the next."""

    def __init__(self, bootstrap, group, topic, protocol, consumed):
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        if protocol == "classic":
            conf.update({"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 300})
        self.consumer = ck.Consumer(conf)
        self.consumer.subscribe([topic])
        self.consumed = consumed
        self.protocol = protocol
        self.partitions = frozenset()
        self.commit_errors = []
        self.error = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        c = self.consumer
        try:
            while not self._halt.is_set():
                m = c.poll(0.1)
                self.partitions = frozenset(tp.partition for tp in c.assignment())
                if m is None or m.error() is not None:
                    continue
                self.consumed.add(m.value())
                self._commit(m)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc
        finally:
            c.close()

    def _commit(self, m, attempts=60):
        """Retry what a client retries: a commit racing a rebalance (classic) or an epoch bump
        (consumer) is accepted once the member has caught up; the partition stays owned meanwhile."""
        for _ in range(attempts):
            try:
                self.consumer.commit(message=m, asynchronous=False)
                return
            except ck.KafkaException as exc:
                code = exc.args[0].code()
                self.commit_errors.append(code)
                if code not in RETRIABLE:
                    return  # the partition moved: its new owner consumes from the last commit
                time.sleep(0.05)

    def stop(self):
        self._halt.set()
        self._thread.join(30)
        assert not self._thread.is_alive() and self.error is None, self.error


class Producer(threading.Thread):
    def __init__(self, bootstrap, topic):
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self.topic = topic
        self.sent = 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            self.producer.produce(self.topic, value=b"m%d" % self.sent, partition=self.sent % PARTITIONS)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(1 / RATE)
        assert self.producer.flush(20) == 0

    def stop(self):
        self._halt.set()
        self.join(30)


def test_rolling_migration_from_classic_to_consumer(tmp_path):
    srv = ServerProcess(tmp_path / "data", *FAST, log_path=str(tmp_path / "server.log")).start()
    members = []
    producer = observer = None
    try:
        bootstrap, topic, group = srv.bootstrap, "rolling", "rolling-group"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(10)
        everything = set(range(PARTITIONS))
        tps = [ck.TopicPartition(topic, p) for p in range(PARTITIONS)]
        observer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        history = {p: [] for p in range(PARTITIONS)}

        def observe():
            for tp in observer.committed(tps, timeout=10):
                if tp.offset >= 0:
                    history[tp.partition].append(tp.offset)

        def settled(what):
            deadline = time.monotonic() + 30
            while True:
                owned = [m.partitions for m in members]
                if set().union(*owned) == everything and sum(map(len, owned)) == PARTITIONS and all(owned):
                    return
                assert time.monotonic() < deadline, f"group did not settle after {what}: {owned}"
                observe()
                time.sleep(0.1)

        consumed: set[bytes] = set()
        members.extend(Member(bootstrap, group, topic, "classic", consumed) for _ in range(MEMBERS))
        producer = Producer(bootstrap, topic)
        producer.start()
        settled("the classic members joined")
        described = admin.describe_consumer_groups([group])[group].result(10)
        assert str(described.type).endswith("CLASSIC") and len(described.members) == MEMBERS
        def caught_up(what):
            """Everything produced so far is consumed (the producer keeps going meanwhile). A stall
            fails: 20 s in which nothing more of it was consumed; slow progress on a busy machine
            does not."""
            target = {b"m%d" % i for i in range(producer.sent)}
            deadline, left = time.monotonic() + 20, len(target)
            while not consumed >= target:
                if len(target - consumed) < left:
                    deadline, left = time.monotonic() + 20, len(target - consumed)
                if time.monotonic() >= deadline:
                    missing = sorted(int(v[1:]) for v in target - consumed)
                    by_partition = {p: sum(1 for i in missing if i % PARTITIONS == p) for p in range(PARTITIONS)}
                    owners = {id(m): (m.protocol, sorted(m.partitions), m.commit_errors[-5:])
                              for m in members}
                    committed = {p: (h[-1] if h else None) for p, h in history.items()}
                    try:
                        d = admin.describe_consumer_groups([group])[group].result(10)
                        server_view = [(x.member_id, sorted(tp.partition for tp in x.assignment.topic_partitions))
                                       for x in d.members]
                    except Exception as exc:  # noqa: BLE001 - diagnostics only
                        server_view = repr(exc)
                    raise AssertionError(
                        f"{len(missing)} messages not consumed {what}: missing per partition {by_partition}, "
                        f"first missing {missing[:6]}, {len(producer.producer)} not yet delivered by the producer; "
                        f"members {owners}; committed {committed}; "
                        f"the coordinator's view {server_view}\n"
                        f"server log tail:\n{_tail(tmp_path / 'server.log')}")
                observe()
                time.sleep(0.05)

        caught_up("by the classic group")
        for i in range(MEMBERS):  # replace each classic member by a consumer-protocol one
            members.pop(0).stop()
            members.append(Member(bootstrap, group, topic, "consumer", consumed))
            settled(f"migrating member {i}")
            caught_up(f"after migrating member {i}")
        described = admin.describe_consumer_groups([group])[group].result(10)
        assert str(described.type).endswith("CONSUMER") and len(described.members) == MEMBERS
        assert {m.protocol for m in members} == {"consumer"}
        producer.stop()
        caught_up("after the producer stopped")
        for m in members:
            m.stop()
        members.clear()
        observe()
        observer.close()
        observer = None
        ends = {p: (producer.sent - p + PARTITIONS - 1) // PARTITIONS for p in range(PARTITIONS)}
        assert {p: h[-1] for p, h in history.items()} == ends
        for p, h in history.items():
            assert h == sorted(h), f"committed offset of partition {p} went backwards: {h}"
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            m.stop()
        if observer is not None:
            observer.close()
        assert srv.stop() == 0


def _tail(path, lines=60):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as exc:
        return f"(no server log: {exc})"

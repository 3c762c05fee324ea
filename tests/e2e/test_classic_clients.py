"""Every real client in a classic-protocol group against `cohort serve` over 127.0.0.1.

One scenario per client: its producer writes, two members consume in one group (each member
commits each message before taking the next one), one member leaves and the other takes over
its partitions, then every member stops and a restarted member resumes exactly from the
committed offsets. kcat and kafkajs are installed by `make e2e-tools` (run by `make test`);
their absence is a failure, not a skip.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PARTITIONS = 4
N = 40  # messages per phase
FAST = ("group.initial.rebalance.delay.ms=200", "group.min.session.timeout.ms=1000", f"num.partitions={PARTITIONS}")
NODE_DIR = os.path.join(os.path.dirname(__file__), "node")
SESSION_MS, HEARTBEAT_MS = 6000, 300


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("classic")
    srv = ServerProcess(base / "data", *FAST, log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"


def create(bootstrap, name):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])[name].result(10)


def values(first, count):
    return {f"v{i}" for i in range(first, first + count)}


def wait_for(condition, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# --- members: each consumes in the background and records (partition, value) ---------------------


class Member:
    def __init__(self):
        self.consumed: list[tuple[int, str]] = []
        self.partitions: frozenset = frozenset()
        self.error: BaseException | None = None

    def values(self):
        return {v for _, v in list(self.consumed)}


class ThreadMember(Member):
    """A Python client driven by its own thread (so a member blocked in a join blocks no other)."""

    def __init__(self):
        super().__init__()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self._thread.start()

    def _guarded(self):
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def running(self):
        return self._thread.is_alive()

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "member did not stop"
        assert self.error is None, f"member failed: {self.error!r}"


class ConfluentMember(ThreadMember):
    def __init__(self, bootstrap, topic, group, strategy):
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "classic",
                     "partition.assignment.strategy": strategy, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                     "heartbeat.interval.ms": HEARTBEAT_MS}
        self.topic = topic
        super().__init__()

    def run(self):
        c = ck.Consumer(self.conf)
        c.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                m = c.poll(0.1)
                self.partitions = frozenset(tp.partition for tp in c.assignment())
                if m is None or m.error() is not None:
                    continue
                try:
                    c.commit(message=m, asynchronous=False)
                except ck.KafkaException:
                    pass  # a rebalance began: the message may be consumed again (at least once)
                self.consumed.append((m.partition(), m.value().decode()))
        finally:
            c.close()


class KafkaPythonMember(ThreadMember):
    def __init__(self, bootstrap, topic, group):
        self.args = (bootstrap, topic, group)
        super().__init__()

    def run(self):
        import kafka
        from kafka.structs import OffsetAndMetadata

        bootstrap, topic, group = self.args
        c = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                heartbeat_interval_ms=HEARTBEAT_MS)
        try:
            while not self._stop.is_set():
                batches = c.poll(timeout_ms=100)
                self.partitions = frozenset(tp.partition for tp in c.assignment())
                for tp, records in batches.items():
                    for r in records:
                        try:
                            c.commit({tp: OffsetAndMetadata(r.offset + 1, "", -1)})
                        except kafka.errors.CommitFailedError:
                            pass
                        self.consumed.append((tp.partition, r.value.decode()))
        finally:
            c.close()


class AiokafkaMember(ThreadMember):
    def __init__(self, bootstrap, topic, group):
        self.args = (bootstrap, topic, group)
        super().__init__()

    def run(self):
        asyncio.run(self._consume())

    async def _consume(self):
        import aiokafka
        from aiokafka.errors import CommitFailedError, RebalanceInProgressError

        bootstrap, topic, group = self.args
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                      auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                      heartbeat_interval_ms=HEARTBEAT_MS)
        await c.start()
        try:
            while not self._stop.is_set():
                batches = await c.getmany(timeout_ms=100)
                self.partitions = frozenset(tp.partition for tp in c.assignment())
                for tp, records in batches.items():
                    for r in records:
                        try:
                            await c.commit({tp: r.offset + 1})
                        except (CommitFailedError, RebalanceInProgressError):
                            pass
                        self.consumed.append((tp.partition, r.value.decode()))
        finally:
            await c.stop()


class ProcessMember(Member):
    """A client in a child process; its output lines are parsed by ``on_line`` / ``on_err``."""

    def __init__(self, cmd):
        super().__init__()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.errors: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.on_line), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.on_err), daemon=True)]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, handle):
        for line in stream:
            handle(line.rstrip("\n"))

    def on_err(self, line):
        self.errors.append(line)

    def running(self):
        return self.proc.poll() is None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)  # both clients commit and leave the group on SIGTERM
        code = self.proc.wait(30)
        for t in self._readers:
            t.join(5)
        assert code == 0, f"exit code {code}: {self.errors[-10:]}"


class KcatMember(ProcessMember):
    ASSIGNED = re.compile(r"rebalanced .*: (assigned|revoked): (.*)$")

    def __init__(self, bootstrap, topic, group):
        super().__init__([KCAT, "-b", bootstrap, "-G", group, "-u", "-f", "%p %s\\n",
                          "-X", f"session.timeout.ms={SESSION_MS}", "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}",
                          "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=100", topic])

    def on_line(self, line):
        partition, value = line.split(" ", 1)
        self.consumed.append((int(partition), value))

    def on_err(self, line):
        super().on_err(line)
        found = self.ASSIGNED.search(line)
        if found:
            parts = frozenset(int(p) for p in re.findall(r"\[(\d+)\]", found.group(2)))
            self.partitions = parts if found.group(1) == "assigned" else frozenset()


class KafkajsMember(ProcessMember):
    def __init__(self, bootstrap, topic, group):
        super().__init__(["node", os.path.join(NODE_DIR, "client.js"), "consume", bootstrap, topic, group, "kafkajs"])

    def on_line(self, line):
        event = json.loads(line)
        if "assigned" in event:
            self.partitions = frozenset(event["assigned"])
        elif "value" in event:
            self.consumed.append((event["partition"], event["value"]))


# --- producers: values v<first>..v<first+count-1>, value i to partition i % PARTITIONS ----------


def produce_confluent(bootstrap, topic, first, count):
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for i in range(first, first + count):
        p.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(20) == 0


def produce_kafka_python(bootstrap, topic, first, count):
    import kafka

    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for f in [p.send(topic, value=f"v{i}".encode(), partition=i % PARTITIONS) for i in range(first, first + count)]:
        f.get(20)
    p.close()


def produce_aiokafka(bootstrap, topic, first, count):
    import aiokafka

    async def go():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await p.start()
        try:
            sent = [await p.send(topic, f"v{i}".encode(), partition=i % PARTITIONS) for i in range(first, first + count)]
            for f in sent:
                await f
        finally:
            await p.stop()

    asyncio.run(go())


def produce_kcat(bootstrap, topic, first, count):
    for partition in range(PARTITIONS):
        lines = "".join(f"v{i}\n" for i in range(first, first + count) if i % PARTITIONS == partition)
        subprocess.run([KCAT, "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-X", "acks=all"],
                       input=lines, text=True, check=True, timeout=30)


def produce_kafkajs(bootstrap, topic, first, count):
    subprocess.run(["node", os.path.join(NODE_DIR, "client.js"), "produce", bootstrap, topic, str(PARTITIONS),
                    str(first), str(count)], check=True, timeout=30, capture_output=True)


# --- the scenario -------------------------------------------------------------------------------


def scenario(bootstrap, name, produce, member):
    topic, group = f"{name}-topic", f"{name}-group"
    create(bootstrap, topic)
    everything = set(range(PARTITIONS))

    # a group of two: once both own partitions, the first batch is shared between them
    a, b = member(bootstrap, topic, group), member(bootstrap, topic, group)
    try:
        wait_for(lambda: a.partitions and b.partitions and a.partitions | b.partitions == everything
                 and not a.partitions & b.partitions, "two members sharing the partitions")
        produce(bootstrap, topic, 0, N)
        wait_for(lambda: a.values() | b.values() >= values(0, N), "the first batch")
        assert a.values() | b.values() == values(0, N)
        for m in (a, b):  # each consumed its own partitions only
            assert m.consumed and {p for p, _ in m.consumed} == m.partitions
        # b leaves: a takes over every partition and consumes the second batch from all of them
        b.stop()
        wait_for(lambda: a.partitions == everything, "the rebalance after a member left")
        produce(bootstrap, topic, N, N)
        wait_for(lambda: a.values() >= values(N, N), "the second batch")
    finally:
        for m in (a, b):
            if m.running():
                m.stop()
    assert {p for p, v in a.consumed if v in values(N, N)} == everything

    # a restarted member resumes from the committed offsets: only the third batch is consumed
    produce(bootstrap, topic, 2 * N, N)
    c = member(bootstrap, topic, group)
    try:
        wait_for(lambda: c.values() >= values(2 * N, N), "the third batch after a restart")
        time.sleep(0.3)
        assert c.values() == values(2 * N, N)
    finally:
        c.stop()


KCAT = shutil.which("kcat") or "kcat"


def test_tools_are_installed():
    """`make test` installs them (`make e2e-tools`); a missing tool is an error, not a skip."""
    assert shutil.which("kcat"), "kcat is missing: run `make e2e-tools` (apt-get install -y kcat)"
    assert shutil.which("node"), "node is missing"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "kafkajs")), "kafkajs is missing: run `make e2e-tools`"


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_kafka_classic(server, strategy):
    scenario(server.bootstrap, f"ck-{strategy}", produce_confluent,
             lambda b, t, g: ConfluentMember(b, t, g, strategy))


def test_kafka_python(server):
    scenario(server.bootstrap, "kafka-python", produce_kafka_python, KafkaPythonMember)


def test_aiokafka(server):
    scenario(server.bootstrap, "aiokafka", produce_aiokafka, AiokafkaMember)


def test_kcat_balanced_consumer(server):
    assert shutil.which("kcat"), "kcat is missing: run `make e2e-tools`"
    scenario(server.bootstrap, "kcat", produce_kcat, KcatMember)


def test_kafkajs(server):
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "kafkajs")), "kafkajs is missing: run `make e2e-tools`"
    scenario(server.bootstrap, "kafkajs", produce_kafkajs, KafkajsMember)

"""Crash harness: kill -9 a `cohort serve` at random moments while confluent-kafka producers
(acks=all, idempotent) write and a consumer group member (KIP-848 protocol) commits offsets in a loop, then
restart it on the same data directory and port. After every restart:

* every acknowledged record is readable at the offset it was acknowledged with, and none is
  stored twice (requests the kill cut off are retried);
* every acknowledged offset commit is returned by OffsetFetch (the value is the last
  acknowledged commit, or a later one whose answer the kill cut off);
* the group epoch, assignment epoch, and the member's epoch and assignment (ConsumerGroupDescribe)
  are what they were before the kill, and the member that keeps heartbeating through the outage
  carries on without being fenced (no partitions lost or revoked).
"""

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import confluent_kafka as ck
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]

KILLS = 8
TOPIC = "crash"
PARTITIONS = 2
GROUP = "crash-group"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cohort:
    """`cohort serve` on a fixed port, so clients reconnect to the restarted process."""

    def __init__(self, data_dir: str, port: int, log_path: str) -> None:
        self.cmd = [sys.executable, "-m", "cohort.server", "serve", "--host", "127.0.0.1", "--port", str(port),
                    "--data-dir", data_dir, "-o", f"num.partitions={PARTITIONS}",
                    "-o", "group.consumer.session.timeout.ms=45000", "-o", "http.listener="]
        self.log = open(log_path, "ab")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"cohort: listening on ") or not line:
                break
        if not line.startswith(b"cohort: listening on "):
            self.kill()
            raise RuntimeError("cohort serve did not start")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        return code


class Producing(threading.Thread):
    """Writes numbered records until stopped; remembers what was acknowledged where."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        # Idempotent: requests cut off by a kill are retried, and the broker must store each once.
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                     "enable.idempotence": True, "message.timeout.ms": 20000,
                                     "reconnect.backoff.max.ms": 200, "error_cb": self._error})
        self.acked: dict[tuple[int, int], bytes] = {}
        self.fatal: list = []
        self.stopping = threading.Event()

    def _error(self, err) -> None:
        if err.fatal():
            self.fatal.append(err)

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[(msg.partition(), msg.offset())] = msg.value()

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            for _ in range(20):
                try:
                    self.producer.produce(TOPIC, value=b"record-%d" % i, on_delivery=self._delivered)
                    i += 1
                except BufferError:
                    break
            self.producer.poll(0.01)  # about 2,000 records a second
            time.sleep(0.005)
        self.producer.flush(30)


class Committing(threading.Thread):
    """A group member that commits ever-growing offsets for its partitions, synchronously, and
    records which commits were acknowledged. ``pause()`` waits until no commit is in flight."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                     "reconnect.backoff.max.ms": 200})
        self.assigned: set[int] = set()
        self.lost = self.revoked = 0
        self.attempted: dict[int, int] = {}
        self.acknowledged: dict[int, int] = {}
        self.next_value = 1
        self.errors = 0
        self._run = threading.Event()
        self._idle = threading.Event()
        self.stopping = threading.Event()

    def _assign(self, consumer, parts) -> None:
        self.assigned |= {p.partition for p in parts}

    def _revoke(self, consumer, parts) -> None:
        self.revoked += len(parts)
        self.assigned -= {p.partition for p in parts}

    def _lose(self, consumer, parts) -> None:
        self.lost += len(parts)
        self.assigned -= {p.partition for p in parts}

    def pause(self, timeout: float = 30) -> None:
        self._run.clear()
        assert self._idle.wait(timeout), "a commit stayed in flight"

    def resume(self) -> None:
        self._idle.clear()
        self._run.set()

    def run(self) -> None:
        self.consumer.subscribe([TOPIC], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lose)
        while not self.stopping.is_set():
            self.consumer.poll(0.02)  # serves the rebalance callbacks
            if not self._run.is_set():
                self._idle.set()
                continue
            for p in sorted(self.assigned):
                value = self.next_value
                self.next_value += 1
                self.attempted[p] = value
                try:
                    self.consumer.commit(offsets=[ck.TopicPartition(TOPIC, p, value)], asynchronous=False)
                except ck.KafkaException:
                    self.errors += 1
                    continue
                self.acknowledged[p] = value
        self.consumer.close()


def read_everything(bootstrap: str) -> dict[tuple[int, int], bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-checker", "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(ck.TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        c.assign([ck.TopicPartition(TOPIC, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 30
        seen = dict.fromkeys(ends, 0)
        while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                out[(m.partition(), m.offset())] = m.value()
                seen[m.partition()] = max(seen[m.partition()], m.offset() + 1)
        assert all(seen[p] >= ends[p] for p in ends), f"read {seen} of {ends}"
        return out
    finally:
        c.close()


def describe_group(port: int) -> tuple:
    """(group epoch, assignment epoch, {member id: (member epoch, assigned, target)}) from
    ConsumerGroupDescribe, retried while the coordinator is still loading."""
    from kio.index import load_request_schema

    from cohort.protocol.entities import build
    from cohort_testing import WireClient

    request = build(load_request_schema(69, 0), group_ids=(GROUP,), include_authorized_operations=False)
    deadline = time.monotonic() + 20
    with WireClient(port) as c:
        while True:
            g = c.request(69, 0, request).groups[0]
            if int(g.error_code) == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert int(g.error_code) == 0, g

    def parts(a):
        return sorted((str(t.topic_id), tuple(sorted(t.partitions))) for t in a.topic_partitions)

    return g.group_epoch, g.assignment_epoch, {
        m.member_id: (m.member_epoch, parts(m.assignment), parts(m.target_assignment)) for m in g.members}


def committed_offsets(bootstrap: str) -> dict[int, int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        got = c.committed([ck.TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def test_kill_9_at_random_moments_loses_nothing_acknowledged(tmp_path):
    rng = random.Random(os.environ.get("CRASH_SEED", "cohort"))
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    server = Cohort(str(tmp_path / "data"), port, str(tmp_path / "server.log"))
    server.start()
    producing = Producing(bootstrap)
    committing = Committing(bootstrap)
    try:
        producing.start()
        committing.start()
        committing.resume()
        deadline = time.monotonic() + 30
        while len(committing.assigned) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert committing.assigned == set(range(PARTITIONS)), "the member never got its partitions"
        for kill in range(KILLS):
            time.sleep(rng.uniform(0.4, 1.6))  # records and commits are in flight
            group_before = describe_group(port)
            server.kill()
            acked_at_kill = len(producing.acked)
            server.start()
            committing.pause()
            acked = dict(producing.acked)  # before reading: all of these are below the high watermark read next
            stored = read_everything(bootstrap)
            missing = [k for k, v in acked.items() if stored.get(k) != v]
            assert not missing, f"kill {kill}: {len(missing)} acknowledged records lost or moved, e.g. {missing[:3]}"
            values = list(stored.values())
            duplicated = len(values) - len(set(values))
            assert duplicated == 0, f"kill {kill}: {duplicated} records stored twice by the idempotent producer's retries"
            assert not producing.fatal, f"kill {kill}: the idempotent producer failed: {producing.fatal[0]}"
            fetched = committed_offsets(bootstrap)
            for p, value in committing.acknowledged.items():
                assert fetched.get(p, -1) >= value, f"kill {kill}: acknowledged commit {value} of partition {p} lost ({fetched})"
                assert fetched[p] in (value, committing.attempted[p])
            assert describe_group(port) == group_before, "group epoch, member epoch or assignment changed"
            assert committing.lost == 0 and committing.revoked == 0, "the member was fenced or lost partitions"
            assert committing.assigned == set(range(PARTITIONS))
            assert acked_at_kill > 0 and committing.acknowledged
            committing.resume()
        assert len(producing.acked) > KILLS * 100
    finally:
        producing.stopping.set()
        committing.stopping.set()
        committing.resume()
        producing.join(40)
        committing.join(40)
        assert server.stop() == 0

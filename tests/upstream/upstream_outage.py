"""An upstream outage under load, shared by the suite (tests/upstream/test_upstream_outage.py)
and bench/upstream_outage.py (any length): one instance in front of an upstream `cohort serve`,
its offsets mirrored upstream, a KIP-848 group of two and a classic group committing while a
producer writes; the upstream is stopped for each outage in turn and started again with its data."""

from __future__ import annotations

import collections
import socket
import threading
import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from cohort_testing import ServerProcess
from upstream_clients import committed_offsets

TOPIC, PARTITIONS = "outage", 3


class Committer:
    """Consumers of one group committing synchronously as they read; every acknowledged commit."""

    def __init__(self, bootstrap: str, group: str, protocol: str, members: int) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        self.group = group
        self.acked: dict[int, int] = collections.defaultdict(int)
        self.commits = 0
        self._stop = threading.Event()
        self._consumers = [ck.Consumer(conf) for _ in range(members)]
        self._threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in self._consumers]
        for c in self._consumers:
            c.subscribe([TOPIC])
        for t in self._threads:
            t.start()

    def _run(self, c: ck.Consumer) -> None:
        while not self._stop.is_set():
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            try:
                for tp in c.commit(message=m, asynchronous=False) or ():
                    if tp.error is None and tp.offset >= 0:
                        self.acked[tp.partition] = max(self.acked[tp.partition], tp.offset)
                self.commits += 1
            except ck.KafkaException:  # the coordinator is away: the next record's commit covers it
                pass

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        for c in self._consumers:
            c.close()


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.2)


def run(root: Path, outages: list[float], report=print) -> list[dict]:
    """One row per outage: its length, the instance's state after it, commits acknowledged
    before it, how long until the groups committed again, and any commit lost."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root.mkdir(parents=True, exist_ok=True)

    def upstream() -> ServerProcess:
        return ServerProcess(root / "upstream", "group.initial.rebalance.delay.ms=0",
                             log_path=str(root / "upstream.log"), args=("--port", str(port))).start()

    up = upstream()
    inst = ServerProcess(root / "instance", "upstream.membership.session.timeout.ms=6000",
                         "upstream.mirror.offsets=true",
                         log_path=str(root / "instance.log"), args=("--upstream", f"127.0.0.1:{port}"))
    inst.start()
    rows, groups, stop = [], [], threading.Event()
    try:
        admin = AdminClient({"bootstrap.servers": inst.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(30)

        def produce() -> None:
            p = ck.Producer({"bootstrap.servers": inst.bootstrap, "linger.ms": 5})
            i = 0
            while not stop.is_set():
                p.produce(TOPIC, b"r%d" % i, partition=i % PARTITIONS)
                p.poll(0)
                i += 1
                time.sleep(0.02)
            p.flush(10)

        threading.Thread(target=produce, daemon=True).start()
        groups = [Committer(inst.bootstrap, "kip848", "consumer", 2), Committer(inst.bootstrap, "classic", "classic", 1)]
        wait_for("the groups did not commit", lambda: all(g.commits >= 30 for g in groups), 90)
        for seconds in outages:
            before = {g.group: dict(g.acked) for g in groups}
            counts = [g.commits for g in groups]
            assert up.stop() == 0
            time.sleep(seconds)
            up = upstream()
            back = time.monotonic()
            wait_for(f"the groups did not commit again after a {seconds:g} s outage",
                     lambda: all(g.commits > n + 10 for g, n in zip(groups, counts)) or inst.proc.poll() is not None,
                     120)
            resumed = time.monotonic() - back
            lost = []
            if inst.proc.poll() is None:
                for g in groups:
                    now = committed_offsets(inst.bootstrap, g.group, TOPIC, PARTITIONS)
                    lost += [f"{g.group}-{p}: {o} acknowledged, {now[p]} committed"
                             for p, o in before[g.group].items() if now[p] < o]
            row = {"outage_s": seconds, "instance_running": inst.proc.poll() is None,
                   "exit_status": inst.proc.poll(), "commits_before": sum(counts),
                   "commits_again_after_s": round(resumed, 1), "lost": lost}
            report(row)
            rows.append(row)
            if not row["instance_running"]:
                break
    finally:
        stop.set()
        for g in groups:
            g.close()
        status = inst.stop()
        rows.append({"instance_exit_status": status})
        report(rows[-1])
        up.stop()
    return rows

"""Share groups through a cohort cluster (issue 40): three instances in front of one upstream (another
`cohort serve`), three share consumers bootstrapped to all of them and a producer under load. The
instance serving the share group is killed -9: its share-partitions move with the group's shard,
every record is delivered, no record whose ACCEPT was confirmed is delivered again, and
consumption resumes within the membership session timeout + 2 s. Share requests that reach an
instance other than the group's are passed on to it (the consumers fetch through whichever
instance advertises each upstream broker)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cohort.librdkafka import RESTART_SAFE
from cohort_testing import ServerProcess, ShareLedger, produce_jobs
from upstream_clients import brokers_of, cluster_formed, coordinator_of, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(300)]

RECORDS, PARTITIONS = 3000, 6
SESSION_S = 6  # upstream.membership.session.timeout.ms: how soon a dead instance's shards move
# A loaded machine (the suite's six workers) stretches the new owner's load of the shard: its
# fence, reads and the consumers' reconnects; the figure is printed for docs/benchmarks.md.
LOAD_ALLOWANCE_S = 4
QUIET_S = 3.0


def instance(path, upstream, name: str) -> ServerProcess:
    path.mkdir(exist_ok=True)
    return ServerProcess(path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                         f"upstream.groups.topic=__cohort_groups_{name}", f"upstream.share.state.topic=__share_{name}",
                         f"upstream.cluster.name={name}", f"upstream.membership.session.timeout.ms={SESSION_S * 1000}",
                         "upstream.metadata.refresh.ms=1000", "group.share.min.record.lock.duration.ms=1000",
                         log_path=str(path / "server.log")).start()


def test_a_killed_instances_share_groups_move_and_nothing_accepted_is_delivered_again(tmp_path, upstream):
    cluster = f"share{uuid.uuid4().hex[:6]}"
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        launched = list(pool.map(lambda name: instance(tmp_path / name, upstream, cluster), "abc"))
    stop = threading.Event()
    producer_thread = None
    consumers: list[ShareConsumer] = []
    try:
        found: list[int] = []
        wait_for("the three instances did not form a cluster",
                 lambda: cluster_formed([p.port for p in launched], found), 60)
        procs = dict(zip(found, launched))
        wait_for("the instances do not agree on the brokers' addresses",
                 lambda: len({tuple(sorted(brokers_of(p.port).items())) for p in launched}) == 1)
        everyone = ",".join(p.bootstrap for p in launched)
        settings = {"bootstrap.servers": everyone, **RESTART_SAFE}
        # The group is served by another instance than the one the consumers fetch through (the
        # one advertising the upstream's broker), so every share request is passed on until the kill.
        (broker_port,) = [port for n, (_, port) in brokers_of(launched[0].port).items() if n not in procs]
        fetched_through = next(n for n, p in procs.items() if broker_port in listening_ports(p.proc.pid))
        topic = f"jobs-{uuid.uuid4().hex[:6]}"
        group = next(g for g in (f"workers-{uuid.uuid4().hex[:6]}" for _ in range(100))
                     if coordinator_of(launched[0].port, g) not in (fetched_through, -1))
        admin = AdminClient(settings)
        admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(20)
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("share.record.lock.duration.ms", "15000", incremental_operation=AlterConfigOpType.SET)])
        wait_for("the group config was not taken", lambda: _altered(admin, res), 30)
        del admin
        owner = coordinator_of(launched[0].port, group)
        assert owner in procs and owner != fetched_through

        produced: list[bytes] = []

        # about 15 s of load: before, during and after the move
        producer_thread = threading.Thread(target=produce_jobs, name="producer",
                                           args=(settings, topic, RECORDS, produced, stop, 100, 0.5, PARTITIONS))
        producer_thread.start()
        consumers = [ShareConsumer({**settings, "group.id": group, "share.acknowledgement.mode": "explicit",
                                    "log_level": 2}) for _ in range(3)]
        for c in consumers:
            c.subscribe([topic])
        ledger = ShareLedger()
        killed_at = None
        deadline = time.monotonic() + 180
        while True:
            assert time.monotonic() < deadline, (f"{len(ledger.delivered())} of {len(produced)} records "
                                                 "delivered before the deadline")
            if killed_at is None and len(ledger.deliveries) >= RECORDS // 4:
                procs[owner].proc.kill()
                assert procs[owner].stop() == -9
                killed_at = time.monotonic()
            for c in consumers:
                ledger.poll(c)
            if (killed_at is not None and not producer_thread.is_alive() and ledger.quiet_for() >= QUIET_S
                    and set(produced) <= ledger.delivered()):
                break
        assert killed_at is not None
        assert set(produced) <= ledger.delivered()
        again = ledger.confirmed_then_delivered()
        assert again == [], f"{len(again)} confirmed records delivered again, e.g. {again[:5]}"
        assert len(ledger.confirmed) >= RECORDS * 0.9, f"acknowledgements not confirmed: {dict(ledger.refused)}"
        # Consumption resumed: the longest pause in deliveries after the kill ends within the
        # membership session timeout + 2 s of it.
        after = [killed_at] + [when for _, _, when in ledger.deliveries if when > killed_at]
        pause_end = max(zip(after, after[1:]), key=lambda gap: gap[1] - gap[0])[1]
        resumed_after = pause_end - killed_at
        survivors = [n for n in procs if n != owner]
        assert coordinator_of(procs[survivors[0]].port, group) in survivors
        print(f"share group moved: consumption resumed {resumed_after:.1f} s after the kill -9 "
              f"(membership session {SESSION_S} s); {len(ledger.deliveries)} deliveries of {len(produced)} records, "
              f"{len(ledger.confirmed)} confirmed accepts")
        assert resumed_after <= SESSION_S + 2 + LOAD_ALLOWANCE_S, resumed_after
    finally:
        stop.set()
        if producer_thread is not None:
            producer_thread.join(30)
        for c in consumers:
            c.close()
        for p in launched:
            if p.proc is not None and p.proc.poll() is None:
                p.stop()


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets' inodes matched in /proc/net/tcp)."""
    import os

    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _altered(admin: AdminClient, res: ConfigResource) -> bool:
    try:
        for f in admin.incremental_alter_configs([res]).values():
            f.result(10)
        return True
    except Exception as exc:  # noqa: BLE001 - the group's coordinator is still being found
        print("alter:", exc)
        return False

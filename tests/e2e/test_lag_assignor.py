"""The `lag` assignor live: confluent-kafka consumers (group.protocol=consumer) against `cohort serve`,
lag computed by the coordinator from the broker's log end offsets and the group's committed offsets."""

from __future__ import annotations

import itertools
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PARTITIONS = 12
FAST = ("group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        "group.consumer.session.timeout.ms=6000", "group.consumer.min.session.timeout.ms=1000",
        "group.lag.rebalance.interval.ms=500", "group.lag.rebalance.min.interval.ms=2000",
        "group.lag.imbalance.evaluations=2", "group.lag.imbalance.ratio=1.5")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("lag")
    srv = ServerProcess(base / "data", *FAST, log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"


def setup_topic(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(10)
    produce(bootstrap, topic, counts)


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"x", partition=partition)
    assert p.flush(20) == 0


def earliest_reset(bootstrap: str, group: str) -> None:
    """The operator's way: uncommitted partitions count their whole log as lag."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    probe = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return [probe.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    finally:
        probe.close()


class Members:
    """Consumers polled from this thread. Nothing is committed, so the coordinator's view of the
    group's lag is the whole log of each partition (reset policy `earliest`)."""

    def __init__(self, bootstrap: str, group: str, topic: str, assignor: str, count: int):
        self.consumers = {}
        for i in range(count):
            c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                             "group.remote.assignor": assignor, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "client.id": f"m{i}"})
            c.subscribe([topic])
            self.consumers[f"m{i}"] = c

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for c in self.consumers.values():
                c.poll(0.02)

    def owners(self) -> dict[int, str] | None:
        """Each partition's owner as the consumers report it, or None while two report the same
        one: librdkafka applies a KIP-848 assignment on its own thread, so between the reads of one
        sweep a consumer may revoke a partition and another receive it (seen under CI load). A
        settled group never shows one, so a partition held twice for good never settles."""
        out = {}
        for name, c in self.consumers.items():
            for tp in c.assignment():
                if tp.partition in out:
                    return None
                out[tp.partition] = name
        return out

    def settle(self, timeout: float = 30) -> dict[int, str]:
        """Poll until every partition is owned and the ownership held still for a second."""
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            self.poll(0.1)
            owners = self.owners()
            if owners is None or owners != last:
                last, since = owners, time.monotonic()
            elif len(owners) == PARTITIONS and time.monotonic() - since >= 1.0:
                return owners
        raise AssertionError(f"the group did not settle: {last}")

    def close(self) -> None:
        for c in self.consumers.values():
            c.close()


def member_lags(owners: dict[int, str], lags: list[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p, m in owners.items():
        out[m] = out.get(m, 0) + lags[p]
    return out


def best_split(lags: list[int], members: int) -> int:
    """The smallest possible heaviest-member lag over count-balanced splits (brute force)."""
    size = len(lags) // members
    best = None
    rest = list(range(len(lags)))

    def go(rest, groups_left, worst):
        nonlocal best
        if best is not None and worst >= best:
            return
        if groups_left == 1:
            worst = max(worst, sum(lags[p] for p in rest))
            best = worst if best is None else min(best, worst)
            return
        first, others = rest[0], rest[1:]
        for combo in itertools.combinations(others, size - 1):
            group = (first, *combo)
            left = [p for p in others if p not in combo]
            go(left, groups_left - 1, max(worst, sum(lags[p] for p in group)))

    go(rest, members, 0)
    return best


SKEWED = {p: (400 if p in (0, 1, 2) else 20) for p in range(PARTITIONS)}


@pytest.mark.parametrize("assignor", ["lag", "range"])
def test_skewed_backlog(server, assignor):
    topic, group = f"skewed-{assignor}", f"skewed-{assignor}"
    setup_topic(server.bootstrap, topic, SKEWED)
    earliest_reset(server.bootstrap, group)
    lags = end_offsets(server.bootstrap, topic)
    assert lags == [SKEWED[p] for p in range(PARTITIONS)]
    members = Members(server.bootstrap, group, topic, assignor, 3)
    try:
        owners = members.settle()
    finally:
        members.close()
    counts = [list(owners.values()).count(m) for m in ("m0", "m1", "m2")]
    assert max(counts) - min(counts) <= 1
    heaviest = max(member_lags(owners, lags).values())
    best = best_split(lags, 3)
    if assignor == "lag":
        assert heaviest <= 1.2 * best, (owners, heaviest, best)
        assert len({owners[p] for p in (0, 1, 2)}) == 3  # the heavy partitions are spread
    else:  # range keeps contiguous blocks: the three heavy partitions end up together
        assert len({owners[p] for p in (0, 1, 2)}) == 1
        assert heaviest > 1.2 * best


def test_lag_drift_rebalances_by_itself_then_stays_put(server):
    topic, group = "drift", "drift"
    setup_topic(server.bootstrap, topic, {p: 20 for p in range(PARTITIONS)})
    earliest_reset(server.bootstrap, group)
    members = Members(server.bootstrap, group, topic, "lag", 3)
    try:
        before = members.settle()
        # production shifts to the partitions of one member: its backlog grows 20x
        hot = [p for p, m in sorted(before.items()) if m == before[0]]
        produce(server.bootstrap, topic, {p: 400 for p in hot})
        started = time.monotonic()
        changed_at, owners = None, before
        while time.monotonic() - started < 8:  # 16 evaluation intervals (about 2 + reconciliation locally)
            members.poll(0.1)
            owners = members.owners()
            if owners is not None and len(owners) == PARTITIONS and owners != before:
                changed_at = time.monotonic() - started
                break
        assert changed_at is not None, "the coordinator did not rebalance the drifted group within 16 intervals"
        after = members.settle()
        moved = sum(before[p] != after[p] for p in range(PARTITIONS))
        lags = end_offsets(server.bootstrap, topic)
        assert 0 < moved <= 4, (before, after)
        assert max(member_lags(after, lags).values()) <= 1.2 * best_split(lags, 3)
        # lag is stable now (nothing is committed, nothing produced): no further moves
        changes, last = 0, after
        quiet_until = time.monotonic() + 6  # 12 evaluation intervals, 3 minimum intervals
        while time.monotonic() < quiet_until:
            members.poll(0.1)
            owners = members.owners()
            if owners is None:  # a partition changing hands
                changes += 1
            elif len(owners) == PARTITIONS and owners != last:
                changes += 1
                last = owners
        assert changes == 0 and last == after
    finally:
        members.close()


def test_lag_from_snapshot_files(tmp_path):
    """`group.lag.source=DIR`: the broker's own offsets say nothing (the topic is empty); the newest
    snapshot in DIR says partitions 0-2 hold the backlog, and the assignment follows it."""
    from cohort.broker.lag_snapshot import write_snapshot

    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    write_snapshot(str(snapshots), 1, "2026-07-01T00:00:00Z", {"snap": {"snap-t": [5] * PARTITIONS}})  # superseded
    lags = [400 if p in (0, 1, 2) else 20 for p in range(PARTITIONS)]
    write_snapshot(str(snapshots), 2, "2026-07-01T00:00:10Z", {"snap": {"snap-t": lags}})
    srv = ServerProcess(tmp_path / "data", *FAST, f"group.lag.source={snapshots}",
                        log_path=str(tmp_path / "server.log")).start()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic("snap-t", num_partitions=PARTITIONS, replication_factor=1)])["snap-t"].result(10)
        members = Members(srv.bootstrap, "snap", "snap-t", "lag", 3)
        try:
            owners = members.settle()
        finally:
            members.close()
    finally:
        assert srv.stop() == 0, f"unclean shutdown, see {tmp_path / 'server.log'}"
    assert len({owners[p] for p in (0, 1, 2)}) == 3
    assert max(member_lags(owners, lags).values()) <= 1.2 * best_split(lags, 3)

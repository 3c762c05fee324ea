"""Three cohort instances in front of one upstream (another `cohort serve`) share the group
coordinator's shards through the upstream's group membership: groups spread over them; when one
is killed -9 under load its groups move, no acknowledged commit is lost, no partition is ever
owned by two members of a group at once, and consumption completes; a frozen instance whose
shards moved away (a zombie) cannot append to them any more."""

from __future__ import annotations

import collections
import concurrent.futures
import signal
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from cohort.coordinator.consumer_protocol import decode_assignment
from cohort.protocol.entities import build, nested
from cohort_testing import ServerProcess, WireClient
from upstream_clients import brokers_of, cluster_formed, committed_offsets, coordinator_of, own_node_id, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(300)]

TOPIC, PARTITIONS, RECORDS = "stream", 6, 3000
GROUPS_TOPIC, CLUSTER = "__cohort_groups_cluster", "trio"
FAST = ("group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        "group.consumer.session.timeout.ms=6000", "group.consumer.min.session.timeout.ms=1000",
        "group.initial.rebalance.delay.ms=100", "group.min.session.timeout.ms=1000")
NOT_COORDINATOR = 16


def instance(path, upstream, *settings: str) -> ServerProcess:
    """An instance of the cohort cluster as a new user starts it: the upstream and the cluster's
    name (node id and shard count left to cohort), plus short timeouts for the test."""
    path.mkdir(exist_ok=True)
    return ServerProcess(path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                         f"upstream.groups.topic={GROUPS_TOPIC}", f"upstream.cluster.name={CLUSTER}",
                         "upstream.membership.session.timeout.ms=6000", *FAST, *settings,
                         log_path=str(path / "server.log")).start()


class Group:
    """Two members of one group reading every record, committing synchronously every few
    records; what they saw, and every offset a commit acknowledged."""

    def __init__(self, bootstrap: str, name: str, protocol: str) -> None:
        self.name, self.protocol = name, protocol
        conf = {"bootstrap.servers": bootstrap, "group.id": name, "group.protocol": protocol,
                "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        self.consumers = [ck.Consumer(conf) for _ in range(2)]
        self.seen: set[tuple[int, int]] = set()
        self.acked: dict[int, int] = collections.defaultdict(int)  # partition -> highest acknowledged commit
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in self.consumers]

    def start(self) -> None:
        for c in self.consumers:
            c.subscribe([TOPIC])
        for t in self.threads:
            t.start()

    def _run(self, c: ck.Consumer) -> None:
        pending = 0
        while not self.stop.is_set():
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                self.seen.add((m.partition(), m.offset()))
                pending += 1
            if pending >= 20 or (pending and m is None):
                try:
                    for tp in c.commit(asynchronous=False) or ():
                        if tp.error is None and tp.offset >= 0:
                            self.acked[tp.partition] = max(self.acked[tp.partition], tp.offset)
                    pending = 0
                except ck.KafkaException as exc:  # a coordinator moving: retried with the next batch
                    self.errors.append(str(exc))

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        for c in self.consumers:
            c.close()


def owned_twice(port: int, g: Group) -> list[str] | None:
    """Partitions two members of the group hold at the same moment, per the describe APIs of the
    group's coordinator (found through the instance on ``port``); None if the coordinator could
    not answer (it is moving)."""
    node_port = coordinator_port(port, g.name)
    if node_port is None:
        return None
    try:
        with WireClient(node_port, timeout=5) as w:
            if g.protocol == "consumer":
                (desc,) = w.request(69, 0, build(load_request_schema(69, 0), group_ids=(g.name,),
                                                 include_authorized_operations=False)).groups
                held = [(m.member_id, [p for t in m.assignment.topic_partitions for p in t.partitions])
                        for m in desc.members]
            else:
                (desc,) = w.request(15, 5, build(load_request_schema(15, 5), groups=(g.name,),
                                                 include_authorized_operations=False)).groups
                held = [(m.member_id, [p for _, ps in decode_assignment(m.member_assignment).partitions for p in ps]
                         if m.member_assignment else []) for m in desc.members]
    except OSError:
        return None
    if desc.error_code != 0:
        return None
    found, owners = [], {}
    for member, partitions in held:
        for p in partitions:
            if p in owners:
                found.append(f"{g.name}: partition {p} held by {owners[p]} and {member}")
            owners[p] = member
    return found


def coordinator_port(port: int, group: str) -> int | None:
    try:
        with WireClient(port, timeout=5) as w:
            found = w.request(10, 3, build(load_request_schema(10, 3), key=group, key_type=0))
    except OSError:
        return None
    return found.port if found.error_code == 0 else None


def committed(bootstrap: str, group: str) -> dict[int, int]:
    return committed_offsets(bootstrap, group, TOPIC, PARTITIONS)


def test_three_instances_share_the_shards_move_a_killed_ones_groups_and_fence_a_zombie(tmp_path, upstream):
    launched: list[ServerProcess] = []
    procs: dict[int, ServerProcess] = {}
    groups: list[Group] = []
    producer_done = threading.Event()
    try:
        # Started at the same moment, so that they likely choose the same node id first and
        # have to sort it out among themselves.
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            launched.extend(pool.map(lambda name: instance(tmp_path / name, upstream), "abc"))
        probe = [f"group-{i}" for i in range(30)]  # the groups cluster_formed looks at
        found: list[int] = []
        wait_for("the three instances did not form a cluster",
                 lambda: cluster_formed([p.port for p in launched], found), 60)
        formed_after = time.monotonic() - started
        nodes = {n: name for n, name in zip(found, "abc")}
        procs.update(zip(found, launched))
        ports = {n: p.port for n, p in procs.items()}
        everyone = ",".join(p.bootstrap for p in procs.values())
        assert len(set(nodes)) == 3 and all(n >= 1000000 for n in nodes)
        print(f"formed in {formed_after:.1f} s as nodes {sorted(nodes)}")
        assert formed_after < 10 + 10  # the 10 s, with room for a loaded machine
        # Metadata from any instance lists every instance's coordinator, and one address for each
        # upstream broker that all instances agree on (clients must never see two for one id)
        wait_for("the instances do not agree on the brokers' addresses",
                 lambda: len({tuple(sorted(brokers_of(port).items())) for port in ports.values()}) == 1)
        listed = brokers_of(ports[found[0]])
        assert {n: listed[n] for n in nodes} == {n: ("127.0.0.1", ports[n]) for n in nodes}
        upstream_nodes = set(listed) - set(nodes)
        assert upstream_nodes and all(listed[n][1] not in ports.values() for n in upstream_nodes)

        admin = AdminClient({"bootstrap.servers": everyone})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(20)
        producer = ck.Producer({"bootstrap.servers": everyone, "linger.ms": 5})

        def produce() -> None:
            for i in range(RECORDS):
                producer.produce(TOPIC, b"r%d" % i, partition=i % PARTITIONS)
                if i % 100 == 99:  # about 15 s of load: before, during and after the move
                    producer.poll(0)
                    time.sleep(0.5)
            producer.flush(60)
            producer_done.set()

        threading.Thread(target=produce, daemon=True).start()
        groups = [Group(everyone, "k1", "consumer"), Group(everyone, "k2", "consumer"), Group(everyone, "c1", "classic")]
        for g in groups:
            g.start()
        victim = coordinator_of(ports[found[0]], "k1")
        assert victim in nodes
        wait_for("nothing consumed before the kill", lambda: all(len(g.seen) >= 300 for g in groups))

        violations: list[str] = []
        samples: list[tuple[float, str]] = []
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                for g in groups:
                    for port in [p for n, p in ports.items() if n != victim or not killed]:
                        seen = owned_twice(port, g)
                        if seen is not None:
                            violations.extend(seen)
                            samples.append((time.monotonic(), g.name))
                            break
                time.sleep(0.1)

        killed = False
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        wait_for("the describe APIs were not sampled", lambda: len(samples) >= 3 * len(groups))
        acked_before = {g.name: dict(g.acked) for g in groups}
        procs[victim].proc.send_signal(signal.SIGKILL)
        procs[victim].proc.wait()
        killed, killed_at = True, time.monotonic()
        survivors = [n for n in nodes if n != victim]
        wait_for("k1's shard did not move", lambda: coordinator_of(ports[survivors[0]], "k1") in survivors, 30)
        moved_after = time.monotonic() - killed_at
        # nothing a commit acknowledged before the kill is lost with the instance
        after = committed(procs[survivors[0]].bootstrap, "k1")
        assert all(after[p] >= o for p, o in acked_before["k1"].items()), (acked_before["k1"], after)

        wait_for("the producer did not finish", producer_done.is_set, 90)
        wait_for("consumption did not complete",
                 lambda: all(len(g.seen) == RECORDS for g in groups), 120)
        sampling.set()
        sampler.join(10)
        for g in groups:
            g.close()
        assert violations == []
        for g in groups:  # each group sampled after the kill too, the moved one once it served again
            assert sum(1 for t, name in samples if name == g.name and t > killed_at) >= 5, (g.name, samples)
        survivor = procs[survivors[0]].bootstrap
        for g in groups:
            assert committed(survivor, g.name) == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}, g.name
        assert moved_after < 6 + 2 + 3  # session timeout + 2 s, and the time to find it out here

        # The killed instance comes back with its data dir: the same node id, and its share again.
        procs[victim].stop()
        procs[victim] = instance(tmp_path / nodes[victim], upstream)
        ports[victim] = procs[victim].port
        wait_for("the restarted instance took no shards",
                 lambda: {coordinator_of(ports[survivors[0]], g) for g in probe} == set(nodes))
        assert own_node_id(ports[victim]) == victim

        # A zombie: freeze an instance until its shards have moved, then hand it a commit of a
        # group it used to coordinate before it notices. The commit must not land.
        zombie = survivors[1]
        group = next(g for g in probe if coordinator_of(ports[zombie], g) == zombie)
        setter = ck.Consumer({"bootstrap.servers": everyone, "group.id": group})
        setter.commit(offsets=[ck.TopicPartition(TOPIC, 0, 10)], asynchronous=False)
        setter.close()
        procs[zombie].proc.send_signal(signal.SIGSTOP)
        try:
            others = [n for n in nodes if n != zombie]
            wait_for("the frozen instance's shards did not move",
                     lambda: coordinator_of(ports[others[0]], group) in others, 30)
            assert committed(procs[others[0]].bootstrap, group)[0] == 10  # its new owner has loaded it
            body = build(load_request_schema(8, 8), group_id=group, generation_id_or_member_epoch=-1, member_id="",
                         group_instance_id=None, topics=(build(nested(load_request_schema(8, 8), "topics"), name=TOPIC,
                         partitions=(build(nested(nested(load_request_schema(8, 8), "topics"), "partitions"),
                                           partition_index=0, committed_offset=99, committed_leader_epoch=-1,
                                           committed_metadata=""),)),))
            w = WireClient(ports[zombie], timeout=30)  # the kernel accepts while the process is frozen
            w.send_raw(w.encode(8, 8, body))
        finally:
            procs[zombie].proc.send_signal(signal.SIGCONT)
        frame = w.recv_frame()
        w.close()
        _, answer = w.decode(8, 8, frame)
        assert answer.topics[0].partitions[0].error_code == NOT_COORDINATOR
        assert committed(procs[others[0]].bootstrap, group)[0] == 10
        wait_for("the zombie did not rejoin", lambda: {coordinator_of(ports[others[0]], g) for g in probe} == set(nodes))
        assert committed(everyone, group)[0] == 10
    finally:
        producer_done.set()
        for g in groups:
            g.close()
        for p in {id(p): p for p in [*launched, *procs.values()]}.values():
            p.proc is not None and p.proc.poll() is None and p.proc.send_signal(signal.SIGCONT)
            p.stop()


def test_an_instance_cut_off_from_the_upstream_stops_serving_on_its_own_deadline(tmp_path):
    """Classic membership is no lease: an instance that cannot reach the upstream does not hear
    that its shards may have moved. It stops serving them once its session has timed out, and
    serves them again, with every committed offset, when the upstream is back."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "up").mkdir()

    def upstream_up() -> ServerProcess:
        return ServerProcess(tmp_path / "up" / "data", "group.initial.rebalance.delay.ms=0",
                             log_path=str(tmp_path / "up" / "server.log"), args=("--port", str(port))).start()

    up = upstream_up()
    a = instance(tmp_path / "a", up)
    try:
        group = "deadline"
        wait_for("the instance took no shards", lambda: coordinator_of(a.port, group) == 1000000)
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result(20)
        setter = ck.Consumer({"bootstrap.servers": a.bootstrap, "group.id": group})
        deadline = time.monotonic() + 30
        while True:  # FindCoordinator names the owner as soon as it is assigned the shard, maybe still loading
            try:
                setter.commit(offsets=[ck.TopicPartition(TOPIC, 0, 42)], asynchronous=False)
                break
            except ck.KafkaException as exc:
                if exc.args[0].code() != ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        setter.close()

        assert up.stop() == 0  # cut off
        cut = time.monotonic()
        wait_for("the instance kept serving without its membership",
                 lambda: coordinator_of(a.port, group) == -1, 30)
        assert time.monotonic() - cut >= 5  # not before its session (6 s) could have timed out
        fetch = build(load_request_schema(9, 8), groups=(build(nested(load_request_schema(9, 8), "groups"),
                      group_id=group, member_id=None, member_epoch=-1, topics=None),), require_stable=False)
        with WireClient(a.port) as w:  # asked directly, it does not answer from the state it no longer owns
            assert w.request(9, 8, fetch).groups[0].error_code == NOT_COORDINATOR

        up = upstream_up()  # back, with what it had
        wait_for("the instance did not take its shards back", lambda: coordinator_of(a.port, group) == 1000000, 60)
        assert committed(a.bootstrap, group)[0] == 42
    finally:
        a.stop()
        up.stop()

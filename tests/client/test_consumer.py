"""cohort.client against a real cohort broker over TCP: server-side and client-side assignors,
exactly-once consumption with committed offsets through membership changes, a group shared with
librdkafka, static membership, regex subscriptions."""

from __future__ import annotations

import asyncio
import json
import time

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.client import ClientGroupSpec, Consumer, MemberAssignment, ServerSideAssignor, TopicPartition
from cohort_testing import ServerThread

pytestmark = pytest.mark.e2e

PACE = 0.05  # s per batch of 25: about 500 records/s per consumer
FAST = {"group.consumer.heartbeat.interval.ms": 300, "group.consumer.min.heartbeat.interval.ms": 100,
        "group.consumer.session.timeout.ms": 6000, "group.consumer.min.session.timeout.ms": 1000}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = ServerThread(tmp_path_factory.mktemp("client"), FAST).start()
    yield s
    s.stop()


def bootstrap(srv) -> str:
    return f"127.0.0.1:{srv.port}"


def produce(srv, topic: str, partitions: int, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(srv)})
    for f in admin.create_topics([NewTopic(topic, partitions)]).values():
        f.result(10)
    producer = ck.Producer({"bootstrap.servers": bootstrap(srv), "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(20) == 0


def committed(srv, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap(srv)})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def describe(srv, group: str):
    admin = AdminClient({"bootstrap.servers": bootstrap(srv)})
    return admin.describe_consumer_groups([group])[group].result(10)


class Affinity:
    """A client-side assignor: each member publishes the partitions whose local state it holds
    (its metadata); those stay with it, the rest go round-robin by member id."""

    name = "affinity"
    minimum_version = 0
    maximum_version = 1

    def __init__(self, holds: list[int]) -> None:
        self.holds = holds
        self.runs = 0

    def metadata(self) -> tuple[int, bytes]:
        return 1, json.dumps(self.holds).encode()

    def assign(self, spec: ClientGroupSpec) -> dict[str, MemberAssignment]:
        self.runs += 1
        out: dict[str, dict[str, list[int]]] = {m: {} for m in spec.members}
        for topic, count in sorted(spec.partitions.items()):
            subscribers = sorted(m for m, member in spec.members.items() if topic in member.topics)
            free = []
            for p in range(count):
                owner = next((m for m in subscribers if p in json.loads(spec.members[m].metadata or b"[]")), None)
                if owner is None:
                    free.append(p)
                else:
                    out[owner].setdefault(topic, []).append(p)
            for i, p in enumerate(free):
                out[subscribers[i % len(subscribers)]].setdefault(topic, []).append(p)
        return {m: MemberAssignment({t: tuple(ps) for t, ps in parts.items()}, f"epoch {spec.group_epoch}".encode(), 1)
                for m, parts in out.items()}


class Recorder:
    """Counts every value a consumer hands out and commits after each batch."""

    def __init__(self) -> None:
        self.seen: dict[bytes, int] = {}
        self.by_client: dict[str, int] = {}
        self.revoked: list[set] = []
        self.assigned: list[set] = []

    def on_partitions_revoked(self, partitions):
        self.revoked.append(partitions)

    def on_partitions_assigned(self, partitions):
        self.assigned.append(partitions)


async def consume(consumer: Consumer, recorder: Recorder, stop: asyncio.Event, pace: float = 0.0) -> None:
    """Hand every record to `recorder`, commit after each batch; `pace` s per batch of at most 25
    records keeps the input from running out before the membership changes of a test."""
    while not stop.is_set():
        batch = await consumer.getmany(timeout_ms=200, max_records=25 if pace else None)
        for records in batch.values():
            for r in records:
                recorder.seen[r.value] = recorder.seen.get(r.value, 0) + 1
                recorder.by_client[consumer.config["client.id"]] = recorder.by_client.get(consumer.config["client.id"], 0) + 1
        if batch:
            await consumer.commit()
            await asyncio.sleep(pace)


async def run_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what() if callable(what) else what
        await asyncio.sleep(0.05)


def test_three_consumers_with_a_client_side_assignor_consume_exactly_once_while_one_leaves_and_one_joins(srv):
    produce(srv, "aff", 6, 3000)

    async def scenario():
        recorder, stop = Recorder(), asyncio.Event()
        assignors = {"a": Affinity([0]), "b": Affinity([1]), "c": Affinity([2]), "d": Affinity([3])}

        def member(name):
            c = Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "aff-group", "client.id": name,
                          "auto.offset.reset": "earliest", "max.poll.interval.ms": 5000},
                         assignors=[assignors[name]], listener=recorder)
            c.subscribe(["aff"])
            return c

        consumers = {n: member(n) for n in "abc"}
        tasks = {}
        for name, c in consumers.items():
            await c.start()
            tasks[name] = asyncio.create_task(consume(c, recorder, stop, PACE))
        await run_until(lambda: len(recorder.seen) >= 600, 30, "the first third was not consumed")
        await run_until(lambda: all(c.assignment() for c in consumers.values()), 30, "not every member got partitions")
        assert TopicPartition("aff", 0) in consumers["a"].assignment()  # its state's partition stayed with it
        assert consumers["b"].assignment_metadata[1:] == (1, f"epoch {consumers['b'].member_epoch}".encode())
        tasks["b"].cancel()
        await consumers["b"].close()
        left_at = len(recorder.seen)
        await run_until(lambda: len(recorder.seen) >= 1500, 30, "the group stopped after b left")
        consumers["d"] = member("d")
        await consumers["d"].start()
        tasks["d"] = asyncio.create_task(consume(consumers["d"], recorder, stop, PACE))
        await run_until(lambda: TopicPartition("aff", 3) in consumers["d"].assignment(), 30, "d never got partition 3")
        joined_at = len(recorder.seen)
        await run_until(lambda: len(recorder.seen) >= 3000, 60, lambda: f"not every record was consumed: {len(recorder.seen)}, "
                        f"{recorder.by_client}, " + "; ".join(f"{n}: {sorted(c.assignment())} {c.member_epoch} {c._positions} {c._fetch_positions} {c._fatal!r}" for n, c in consumers.items() if n != "b"))
        stop.set()
        for name in "acd":
            await tasks[name]
            await consumers[name].close()
        return recorder, assignors, left_at, joined_at

    recorder, assignors, left_at, joined_at = asyncio.run(asyncio.wait_for(scenario(), 180))
    assert left_at < 3000 and joined_at < 3000, "the membership changed after the input ran out"
    assert all(recorder.by_client.get(name) for name in "abcd"), recorder.by_client
    assert sorted(int(v) for v in recorder.seen) == list(range(3000))
    assert set(recorder.seen.values()) == {1}, "a record was handed out twice"
    assert committed(srv, "aff-group") == {p: 500 for p in range(6)}
    assert sum(a.runs for a in assignors.values()) >= 3  # at least: the first join, b leaving, d joining


def test_a_mixed_group_runs_the_server_side_default_and_shares_partitions_with_librdkafka(srv):
    """confluent-kafka names no assignor, so the seeds' rules select the broker's default."""
    produce(srv, "mixed", 4, 800)

    async def scenario():
        recorder, stop = Recorder(), asyncio.Event()
        ours = Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "mixed-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False}, assignors=[Affinity([0, 1, 2, 3])], listener=recorder)
        ours.subscribe(["mixed"])
        await ours.start()
        task = asyncio.create_task(consume(ours, recorder, stop))
        theirs = ck.Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "mixed-group", "group.protocol": "consumer",
                              "auto.offset.reset": "earliest", "enable.auto.commit": False})
        theirs.subscribe(["mixed"])
        deadline = time.monotonic() + 40
        try:
            # Our consumer may read all 800 records before librdkafka's first heartbeat, so the loop also waits
            # for the two members to settle on shares of the four partitions (sampled both ways round).
            while True:
                ours_now = ours.assignment()
                theirs_now = {TopicPartition(tp.topic, tp.partition) for tp in theirs.assignment()}
                settled = ours_now and theirs_now and len(ours_now) + len(theirs_now) == 4
                if len(recorder.seen) >= 800 and settled and ours.assignment() == ours_now:
                    break
                assert time.monotonic() < deadline, f"the mixed group did not settle: {len(recorder.seen)} records, " \
                                                    f"ours {sorted(ours_now)}, theirs {sorted(theirs_now)}"
                for m in await asyncio.to_thread(theirs.consume, 100, 0.2):
                    if not m.error():
                        recorder.seen[m.value()] = recorder.seen.get(m.value(), 0) + 1
                        theirs.commit(m, asynchronous=False)
                await asyncio.sleep(0)
            described = describe(srv, "mixed-group")
        finally:
            theirs.close()
            stop.set()
            await task
            await ours.close()
        return recorder, ours_now, theirs_now, described

    recorder, ours_now, theirs_now, described = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert sorted(int(v) for v in recorder.seen) == list(range(800)) and set(recorder.seen.values()) == {1}
    assert ours_now | theirs_now == {TopicPartition("mixed", p) for p in range(4)}
    assert described.partition_assignor == "uniform"


def test_a_server_side_assignor_runs_as_a_client_side_one(srv):
    produce(srv, "rng", 4, 40)

    async def scenario():
        members = []
        for name in ("m1", "m2"):
            c = Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "rng-group", "auto.offset.reset": "earliest"},
                         assignors=[ServerSideAssignor("range", name="client-range")])
            c.subscribe(["rng"])
            await c.start()
            members.append(c)
        await run_until(lambda: all(len(c.assignment()) == 2 for c in members), 30, "range did not split 2 + 2")
        got = [sorted(p for _, p in c.assignment()) for c in members]
        described = describe(srv, "rng-group")
        for c in members:
            await c.close()
        return got, described

    got, described = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert sorted(got) == [[0, 1], [2, 3]]  # range: contiguous halves
    assert described.partition_assignor == "client-range"


def test_a_static_member_gets_its_partitions_back_after_a_restart(srv):
    produce(srv, "static", 4, 0)

    async def scenario():
        def member(instance):
            c = Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "static-group", "group.instance.id": instance,
                          "group.remote.assignor": "uniform"})
            c.subscribe(["static"])
            return c

        a, b = member("i-a"), member("i-b")
        await a.start()
        await b.start()
        await run_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30, "no 2 + 2 split")
        before = a.assignment()
        await a.close()  # a static member leaves for a while: its partitions wait for it
        await asyncio.sleep(1)
        assert len(b.assignment()) == 2
        again = member("i-a")
        await again.start()
        await run_until(lambda: again.assignment() == before, 30, "the static member did not get its partitions back")
        await again.close()
        await b.close()

    asyncio.run(asyncio.wait_for(scenario(), 90))


def test_a_regex_subscription_follows_the_brokers_resolution(srv):
    produce(srv, "rx-one", 2, 10)
    produce(srv, "rx-two", 1, 5)

    async def scenario():
        c = Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "rx-group", "auto.offset.reset": "earliest"})
        c.subscribe(pattern="rx-.*")
        await c.start()
        seen = set()
        deadline = time.monotonic() + 30
        while len(seen) < 15:
            assert time.monotonic() < deadline, f"only {len(seen)} records"
            for tp, records in (await c.getmany(timeout_ms=200)).items():
                seen.update((tp.topic, r.value) for r in records)
        assignment = c.assignment()
        await c.close()
        return assignment

    assignment = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert assignment == {TopicPartition("rx-one", 0), TopicPartition("rx-one", 1), TopicPartition("rx-two", 0)}


def test_bad_settings_are_refused_with_one_clear_line():
    with pytest.raises(ValueError, match="unknown consumer settings: fetch.max.bites"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "fetch.max.bites": 1})
    with pytest.raises(ValueError, match="group.id is required"):
        Consumer({"bootstrap.servers": "127.0.0.1:1"})


def test_async_for_yields_every_record_in_offset_order_per_partition(srv):
    produce(srv, "iter", 2, 50)

    async def scenario():
        c = Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "iter-group", "auto.offset.reset": "earliest"})
        c.subscribe(["iter"])
        got: dict[int, list[int]] = {0: [], 1: []}
        async with c:
            async for record in c:
                got[record.partition].append(record.offset)
                if sum(map(len, got.values())) == 50:
                    break
            positions = {p: c.position(TopicPartition("iter", p)) for p in (0, 1)}
        return got, positions

    got, positions = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert got == {0: list(range(25)), 1: list(range(25))} and positions == {0: 25, 1: 25}


def test_record_headers_from_a_librdkafka_producer_arrive(srv):
    admin = AdminClient({"bootstrap.servers": bootstrap(srv)})
    for f in admin.create_topics([NewTopic("hdr", 1)]).values():
        f.result(10)
    producer = ck.Producer({"bootstrap.servers": bootstrap(srv)})
    producer.produce("hdr", key=b"k", value=b"v", headers=[("trace", b"abc"), ("empty", None)])
    assert producer.flush(10) == 0

    async def scenario():
        c = Consumer({"bootstrap.servers": bootstrap(srv), "group.id": "hdr-group", "auto.offset.reset": "earliest"})
        c.subscribe(["hdr"])
        async with c:
            async for record in c:
                return record

    record = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert (record.key, record.value, record.headers) == (b"k", b"v", (("trace", b"abc"), ("empty", None)))


def test_a_revocation_waits_for_the_application_to_finish_the_records_it_was_given(srv):
    """As Kafka's consumers revoke only inside poll(): a member that was handed records keeps
    their partitions until its next getmany, so its commit after them lands before another
    member starts from the committed offset; nothing is consumed twice."""
    produce(srv, "handover", 2, 40)
    conf = {"bootstrap.servers": bootstrap(srv), "group.id": "handover-group", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "group.remote.assignor": "uniform"}

    async def scenario():
        a, b = Consumer({**conf, "client.id": "a"}), Consumer({**conf, "client.id": "b"})
        a.subscribe(["handover"])
        async with a:
            await run_until(lambda: len(a.assignment()) == 2, 20, "a owns both partitions")
            batch = {}
            while not batch:
                batch = await a.getmany(timeout_ms=500, max_records=1)
            (tp, (record,)), = batch.items()
            b.subscribe(["handover"])
            async with b:
                await asyncio.sleep(3)  # ten heartbeat intervals: the coordinator asked a to give one up
                held = set(a.assignment())
                assert held == {TopicPartition("handover", 0), TopicPartition("handover", 1)}
                assert not b.assignment()
                await a.commit({tp: record.offset + 1})
                seen = [(tp.partition, record.offset)]
                stop = asyncio.Event()

                async def collect(c):
                    while not stop.is_set():
                        for part, records in (await c.getmany(timeout_ms=200)).items():
                            seen.extend((part.partition, r.offset) for r in records)
                        await c.commit()

                tasks = [asyncio.create_task(collect(a)), asyncio.create_task(collect(b))]
                await run_until(lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1 and len(seen) >= 40,
                                20, lambda: f"a {a.assignment()}, b {b.assignment()}, {len(seen)} records")
                stop.set()
                await asyncio.gather(*tasks)
        return seen

    seen = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 40

"""Share groups with a real client: confluent-kafka's ShareConsumer (librdkafka 2.16) against cohort.

Queue semantics over the wire: several consumers on one partition, acknowledgement types,
delivery counts and the delivery limit, lock timeouts, release on close, implicit and explicit
acknowledgement, read_committed, two groups on one topic."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cohort_testing import ServerProcess, ServerThread, TansuProcess

pytestmark = pytest.mark.e2e

LOCK_MS = 1500


SETTINGS = {"group.share.min.record.lock.duration.ms": 1000, "group.share.delivery.count.limit": 3}


# Every test runs standalone and in front of both upstreams, but for three that Tansu 0.6 itself
# cannot pass: its high watermark is the last batch's base offset + 1 (50 records in two batches:
# 41), it does not hide aborted transactions from read_committed readers, and it has no
# DeleteRecords (each seen against its binary with confluent-kafka's own clients).
EVERYWHERE = pytest.mark.parametrize("server", ["standalone", "upstream", "tansu"], indirect=True)
FULL_LOG = pytest.mark.parametrize("server", ["standalone", "upstream"], indirect=True)


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    """cohort on its own, or cohort in front of an upstream that holds the records while cohort
    keeps the share groups (issue 40): another cohort (as a process), or Tansu, which has no
    share groups of its own. The same semantics either way."""
    root = tmp_path_factory.mktemp(f"share-e2e-{request.param}")
    if request.param == "standalone":
        srv = ServerThread(str(root / "data"), {"num.partitions": 1, **SETTINGS}).start()
        yield srv
        srv.stop()
        return
    if request.param == "tansu":
        upstream = TansuProcess(str(root / "tansu.log"))
    else:
        upstream = ServerProcess(root / "upstream", "num.partitions=1", log_path=str(root / "upstream.log")).start()
    try:
        srv = ServerThread(str(root / "data"), {"upstream.bootstrap.servers": upstream.bootstrap,
                                                "upstream.metadata.refresh.ms": 500, **SETTINGS}).start()
        try:
            wait_until_serving(srv)
            yield srv
        finally:
            srv.stop()
    finally:
        assert upstream.stop() == 0


def wait_until_serving(srv, timeout=30) -> None:
    deadline = time.monotonic() + timeout
    while not srv.server.group_coordinator.loaded:
        assert time.monotonic() < deadline, "the instance in front of the upstream did not load its shards"
        time.sleep(0.1)


@pytest.fixture
def admin(server):
    """An admin client per test, dropped by the test itself (a fixture's value outlives the
    test's leak check)."""
    holder = [AdminClient({"bootstrap.servers": server.bootstrap})]
    yield _Admin(holder)
    holder.clear()


class _Admin:
    def __init__(self, holder):
        self._holder = holder

    def __getattr__(self, name):
        return getattr(self._holder[0], name)


def new_topic(admin, partitions=1) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(name, partitions)]).values():
        f.result(20)
    return name


def group_config(admin, group, **configs) -> None:
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(20)


def new_group(admin, **configs) -> str:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    group_config(admin, group, share_auto_offset_reset="earliest", **configs)
    return group


def produce(server, topic, n, batch=None) -> list[bytes]:
    """n records; with `batch`, flushed every `batch` records (so many small log batches)."""
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    values = [b"r%d" % i for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, value=v)
        if batch and (i + 1) % batch == 0:
            p.flush(20)
    assert p.flush(20) == 0
    return values


def consumer(server, group, topic, **extra) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group, "log_level": 3,
                       **{k.replace("_", "."): v for k, v in extra.items()}})
    c.subscribe([topic])
    return c


def poll_until(consumers, want, timeout=30, on_message=None):
    """Poll every consumer in turn until `want(received)`; received: (consumer index, message)."""
    received = []
    deadline = time.monotonic() + timeout
    while not want(received):
        assert time.monotonic() < deadline, f"timed out with {len(received)} records"
        for i, c in enumerate(consumers):
            for m in c.poll(0.2) or []:
                assert m.error() is None, m.error()
                received.append((i, m))
                if on_message is not None:
                    on_message(i, c, m)
    return received


def drain(consumers, seconds):
    """Whatever arrives within `seconds` (nothing is expected)."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in consumers:
            out.extend(m for m in c.poll(0.2) or [] if m.error() is None)
    return out


@EVERYWHERE
def test_five_consumers_on_one_partition_each_record_delivered_exactly_once(server, admin):
    topic = new_topic(admin)
    group = new_group(admin)
    consumers = [consumer(server, group, topic, max_poll_records=10) for _ in range(5)]
    try:
        drain(consumers, 2)  # every member joins and gets the (shared) partition
        values = produce(server, topic, 500, batch=10)
        received = poll_until(consumers, lambda r: len(r) >= 500)
        assert sorted(m.value() for _, m in received) == sorted(values)  # each exactly once
        assert {m.delivery_count() for _, m in received} == {1}
        assert len({i for i, _ in received}) >= 2, "the partition is shared: more than one member got records"
        assert drain(consumers, 2) == []
    finally:
        for c in consumers:
            c.close()


@EVERYWHERE
def test_release_redelivers_with_a_higher_count_reject_and_accept_do_not(server, admin):
    topic = new_topic(admin)
    group = new_group(admin)
    values = produce(server, topic, 30)
    c = consumer(server, group, topic, share_acknowledgement_mode="explicit")
    fate = {}

    def ack(i, c, m):
        if m.value() in fate:
            assert fate[m.value()] == AcknowledgeType.RELEASE and m.delivery_count() == 2
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            fate[m.value()] = "accepted again"
            return
        kind = [AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT][int(m.value()[1:]) % 3]
        assert m.delivery_count() == 1
        fate[m.value()] = kind
        c.acknowledge(m, kind)

    try:
        poll_until([c], lambda r: len(r) >= 40, on_message=ack)  # 30 first deliveries, 10 redeliveries
        c.commit_sync()
        assert drain([c], 2) == []
        assert sorted(fate) == sorted(values)
        assert sum(1 for v in fate.values() if v == "accepted again") == 10
    finally:
        c.close()


@EVERYWHERE
def test_a_record_released_up_to_the_delivery_limit_is_archived(server, admin):
    topic = new_topic(admin)
    group = new_group(admin)
    produce(server, topic, 1)
    c = consumer(server, group, topic, share_acknowledgement_mode="explicit")
    counts = []

    def release(i, c, m):
        counts.append(m.delivery_count())
        c.acknowledge(m, AcknowledgeType.RELEASE)

    try:
        poll_until([c], lambda r: len(r) >= 3, on_message=release)
        c.commit_sync()
        assert counts == [1, 2, 3]  # group.share.delivery.count.limit=3
        assert drain([c], 2) == []
    finally:
        c.close()


@EVERYWHERE
def test_an_unacknowledged_record_comes_back_after_the_lock_duration(server, admin):
    topic = new_topic(admin)
    group = new_group(admin, share_record_lock_duration_ms=1000)
    produce(server, topic, 5)
    slow = consumer(server, group, topic, share_acknowledgement_mode="explicit")
    other = consumer(server, group, topic)
    try:
        first = poll_until([slow], lambda r: len(r) >= 5)
        # `slow` keeps its session but acknowledges nothing: after the lock (1 s) the records go
        # to the other member, delivery count 2
        started = time.monotonic()
        again = poll_until([other], lambda r: len(r) >= 5, timeout=15)
        assert time.monotonic() - started >= 0.5
        assert sorted(m.offset() for _, m in again) == sorted(m.offset() for _, m in first)
        assert {m.delivery_count() for _, m in again} == {2}
    finally:
        other.close()
        slow.close()


@EVERYWHERE
def test_closing_without_acknowledging_releases_the_records_to_another_member(server, admin):
    topic = new_topic(admin)
    group = new_group(admin, share_record_lock_duration_ms=60000)
    values = produce(server, topic, 20)
    a = consumer(server, group, topic, share_acknowledgement_mode="explicit")
    got = poll_until([a], lambda r: len(r) >= 20)
    a.close()  # acquired, never acknowledged: released at once, not after the 60 s lock
    b = consumer(server, group, topic)
    try:
        again = poll_until([b], lambda r: len(r) >= 20, timeout=20)
        assert sorted(m.value() for _, m in again) == sorted(values) == sorted(m.value() for _, m in got)
        assert {m.delivery_count() for _, m in again} == {2}
    finally:
        b.close()


@EVERYWHERE
def test_implicit_acknowledgement_accepts_what_was_polled(server, admin):
    topic = new_topic(admin)
    group = new_group(admin)
    produce(server, topic, 50)
    a = consumer(server, group, topic)
    poll_until([a], lambda r: len(r) >= 50)
    a.commit_sync()  # implicit mode: what the last poll returned is accepted (librdkafka sends no acks on close)
    a.close()
    b = consumer(server, group, topic)
    try:
        assert drain([b], 3) == []
    finally:
        b.close()


@FULL_LOG
def test_read_committed_hides_aborted_transactions(server, admin):
    topic = new_topic(admin)
    committed_group = new_group(admin, share_isolation_level="read_committed")
    dirty_group = new_group(admin)
    tx = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    tx.init_transactions(20)
    for commit, prefix in ((True, b"keep"), (False, b"drop"), (True, b"keep2")):
        tx.begin_transaction()
        for i in range(5):
            tx.produce(topic, value=prefix + b"-%d" % i)
        assert tx.flush(20) == 0  # in the log before the abort (an abort drops what is unsent)
        tx.commit_transaction(20) if commit else tx.abort_transaction(20)
    clean = consumer(server, committed_group, topic)
    dirty = consumer(server, dirty_group, topic)
    del tx
    try:
        values = [m.value() for _, m in poll_until([clean], lambda r: len(r) >= 10)]
        assert sorted(values) == sorted([b"keep-%d" % i for i in range(5)] + [b"keep2-%d" % i for i in range(5)])
        assert drain([clean], 2) == []
        every = [m.value() for _, m in poll_until([dirty], lambda r: len(r) >= 15)]
        assert sum(v.startswith(b"drop") for v in every) == 5  # read_uncommitted shows aborted data
    finally:
        clean.close()
        dirty.close()


@EVERYWHERE
def test_two_share_groups_each_get_every_record(server, admin):
    topic = new_topic(admin, partitions=3)
    groups = [new_group(admin), new_group(admin)]
    consumers = [consumer(server, g, topic) for g in groups for _ in range(2)]
    try:
        values = produce(server, topic, 90)
        received = poll_until(consumers, lambda r: len(r) >= 180)
        for g in (0, 1):
            mine = sorted(m.value() for i, m in received if i // 2 == g)
            assert mine == sorted(values)
    finally:
        for c in consumers:
            c.close()


@FULL_LOG
def test_offsets_are_described_reset_and_deleted_with_the_group(server, admin):
    from kio.index import load_request_schema

    from cohort.protocol.entities import build, nested
    from cohort_testing import WireClient

    def req(api_key, version, **kw):
        return build(load_request_schema(api_key, version), **kw)

    def sub(api_key, version, *path, **kw):
        cls = load_request_schema(api_key, version)
        for name in path:
            cls = nested(cls, name)
        return build(cls, **kw)

    topic = new_topic(admin)
    group = new_group(admin)
    produce(server, topic, 40)
    c = consumer(server, group, topic)
    poll_until([c], lambda r: len(r) >= 40)
    c.commit_sync()
    c.close()
    produce(server, topic, 10)  # not consumed: lag 10

    def describe(topics=None):
        body = req(90, 1, groups=(sub(90, 1, "groups", group_id=group, topics=None if topics is None else tuple(
            sub(90, 1, "groups", "topics", topic_name=t, partitions=ps) for t, ps in topics)),))
        g = wc.request(90, 1, body).groups[0]
        return g.error_code, {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
                              for t in g.topics for p in t.partitions}

    with WireClient(server.port) as wc:
        assert describe() == (0, {(topic, 0): (40, 10, 0)})
        assert describe([(topic, (0, 7))])[1][(topic, 7)][2] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        # reset to the start while the group is empty: everything is delivered again
        alter = req(91, 0, group_id=group, topics=(sub(91, 0, "topics", topic_name=topic, partitions=(
            sub(91, 0, "topics", "partitions", partition_index=0, start_offset=0),)),))
        r = wc.request(91, 0, alter)
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
        assert describe() == (0, {(topic, 0): (0, 50, 0)})
        again = consumer(server, group, topic)
        try:
            got = poll_until([again], lambda r: len(r) >= 50)
            assert sorted(m.offset() for _, m in got) == list(range(50))
            # a group with members cannot be reset
            assert wc.request(91, 0, alter).error_code == 68  # NON_EMPTY_GROUP
            again.commit_sync()
        finally:
            again.close()
        delete = req(92, 0, group_id=group, topics=(sub(92, 0, "topics", topic_name=topic),))
        deadline = time.monotonic() + 60
        while (r := wc.request(92, 0, delete)).error_code == 68:  # the member's session times out first
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert r.error_code == 0 and r.responses[0].error_code == 0
        assert describe() == (0, {})
        deleted = wc.request(42, 2, req(42, 2, groups_names=(group,))).results[0]
        assert deleted.error_code == 0
        assert describe()[0] == 69  # GROUP_ID_NOT_FOUND
    state = server.call(lambda: [k for r in server.server.share_partitions.runtimes for k in r.shard.state
                                 if k.group_id == group])
    assert state == []


@EVERYWHERE
def test_a_deleted_topic_takes_its_share_state_and_a_recreated_one_starts_afresh(server, admin):
    topic = new_topic(admin)
    group = new_group(admin)
    produce(server, topic, 5)
    c = consumer(server, group, topic, share_acknowledgement_mode="explicit")
    try:
        got = poll_until([c], lambda r: len(r) >= 5)
        for f in admin.delete_topics([topic]).values():
            f.result(20)
        for _, m in got:
            c.acknowledge(m)
        results = c.commit_sync(20)
        assert results and all(err is not None for err in results.values())  # the topic is gone
        names = {"UNKNOWN_TOPIC_ID", "UNKNOWN_TOPIC_OR_PART"}
        assert all(err.args[0].name() in names for err in results.values()), results

        def state_keys():
            return server.call(lambda: [k for r in server.server.share_partitions.runtimes for k in r.shard.state
                                        if k.group_id == group])
        deadline = time.monotonic() + 10
        while state_keys():
            assert time.monotonic() < deadline, state_keys()
            time.sleep(0.1)
        # the same name again: a new topic id, so the group starts on it afresh
        for f in admin.create_topics([NewTopic(topic, 1)]).values():
            f.result(20)
        values = produce(server, topic, 3)
        again = poll_until([c], lambda r: len(r) >= 3, timeout=30,
                           on_message=lambda i, c, m: c.acknowledge(m))
        assert sorted(m.value() for _, m in again) == sorted(values)
        assert [m.offset() for _, m in again] == [0, 1, 2] and {m.delivery_count() for _, m in again} == {1}
        c.commit_sync()
    finally:
        c.close()


@FULL_LOG
def test_a_group_starts_at_the_log_start_after_delete_records(server, admin):
    from confluent_kafka import TopicPartition

    topic = new_topic(admin)
    produce(server, topic, 10)
    for f in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        f.result(20)
    group = new_group(admin)  # earliest: the log start, now 5
    c = consumer(server, group, topic)
    try:
        got = poll_until([c], lambda r: len(r) >= 5)
        assert sorted(m.offset() for _, m in got) == [5, 6, 7, 8, 9]
        c.commit_sync()
        assert drain([c], 1) == []
    finally:
        c.close()

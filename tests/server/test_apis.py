"""The broker APIs over a real socket: answers, ordering, long-polls, and the handler seam."""

import asyncio
import struct
import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from cohort.broker import OFFSETS_TOPIC
from cohort.protocol.entities import build
from cohort.protocol.records import build_batch, decode_batch, iter_batches
from cohort_testing import WireClient
from rawreq import create_topics, fetch, list_offsets, metadata, ms, produce, req, sub

CORE = {0, 1, 2, 3, 10, 17, 18, 19, 20, 21, 22, 23, 29, 30, 31, 32, 33, 36, 37, 44, 50, 51, 60}


def records_of(data):
    return [(r.offset, r.value) for pos, _ in iter_batches(data) for r in decode_batch(data, pos)]


def test_api_versions_advertises_core_apis_only(server):
    with WireClient(server.port) as c:
        for v in (0, 3, 4):
            resp = c.request(18, v, req(18, v, client_software_name="t", client_software_version="1"))
            ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert set(ranges) == CORE
            assert ranges[3] == (0, 13) and ranges[0] == (3, 10) and ranges[1] == (4, 16)


def test_metadata_ids_lookup_and_auto_create(server):
    with WireClient(server.port) as c:
        m = c.request(3, 12, metadata(12, names=["auto-made"], auto=True))
        t = m.topics[0]
        assert t.error_code == ErrorCode.none and len(t.partitions) == 2  # num.partitions=2 in this fixture
        by_id = c.request(3, 12, metadata(12, ids=[t.topic_id]))
        assert by_id.topics[0].name == "auto-made" and by_id.topics[0].topic_id == t.topic_id
        no_auto = c.request(3, 12, metadata(12, names=["not-made"], auto=False))
        assert no_auto.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        bad = c.request(3, 12, metadata(12, names=["bad name"], auto=True))
        assert bad.topics[0].error_code == ErrorCode.invalid_topic_exception
        everything = c.request(3, 1, metadata(1))  # null topics: all, internal included
        names = {t.name: t.is_internal for t in everything.topics}
        assert names["auto-made"] is False and names[OFFSETS_TOPIC] is True
        v0 = c.request(3, 0, metadata(0, names=[]))  # v0: empty list means all
        assert {t.name for t in v0.topics} == set(names)
        assert [(b.node_id, b.host, b.port) for b in m.brokers] == [(1, "127.0.0.1", server.port)]
        assert m.controller_id == 1 and m.cluster_id


@pytest.mark.parametrize("version", [12, 13])
@pytest.mark.parametrize("id_name", [None, ""], ids=["null-name", "empty-name"])
def test_metadata_by_topic_id_ignores_the_names_as_kafka_does(server, version, id_name):
    """Kafka 4.1's MetadataRequest.Builder.forTopicIds sends "" beside each id; Kafka answers
    by id whenever any topic carries one (KafkaApis.handleTopicMetadataRequest)."""
    import uuid
    with WireClient(server.port) as c:
        c.request(19, 7, create_topics(7, ("by-id-a", 3), ("by-id-b", 1)))
        known = {t.name: t.topic_id for t in c.request(3, version, metadata(version, names=["by-id-a", "by-id-b"])).topics}
        stranger = uuid.uuid4()
        m = c.request(3, version, metadata(version, ids=[known["by-id-a"], stranger, known["by-id-b"]], id_name=id_name))
        got = {t.topic_id: (t.error_code, t.name, len(t.partitions)) for t in m.topics}
        assert got == {known["by-id-a"]: (ErrorCode.none, "by-id-a", 3), known["by-id-b"]: (ErrorCode.none, "by-id-b", 1),
                       stranger: (ErrorCode.unknown_topic_id, None, 0)}
        # an id asked for twice is answered once, as Kafka's set of ids does
        twice = c.request(3, version, metadata(version, ids=[known["by-id-b"], known["by-id-b"]], id_name=id_name))
        assert [(t.name, t.error_code) for t in twice.topics] == [("by-id-b", ErrorCode.none)]
        assert "" not in {t.name for t in c.request(3, version, metadata(version)).topics}  # nothing named "" made


def test_metadata_topic_ids_before_v12_are_an_invalid_request(server):
    import uuid
    with WireClient(server.port) as c:
        m = c.request(3, 10, metadata(10, ids=[uuid.uuid4()], id_name=""))
        assert [t.error_code for t in m.topics] == [ErrorCode.invalid_request]


def test_produce_fetch_list_offsets_roundtrip(server):
    with WireClient(server.port) as c:
        c.request(19, 7, create_topics(7, ("rt", 1)))
        r1 = c.request(0, 10, produce(10, "rt", 0, build_batch([(b"a", b"1"), (b"b", b"2")], timestamp=1000)))
        r2 = c.request(0, 3, produce(3, "rt", 0, build_batch([(b"c", b"3")], timestamp=2000)))
        assert r1.responses[0].partition_responses[0].base_offset == 0
        assert r2.responses[0].partition_responses[0].base_offset == 2
        f = c.request(1, 12, fetch(12, [("rt", [(0, 0)])]))
        p = f.responses[0].partitions[0]
        assert p.high_watermark == 3 and p.log_start_offset == 0
        assert records_of(p.records) == [(0, b"1"), (1, b"2"), (2, b"3")]
        f4 = c.request(1, 4, fetch(4, [("rt", [(0, 2)])]))
        assert records_of(f4.responses[0].partitions[0].records)[-1] == (2, b"3")
        topic_id = c.request(3, 12, metadata(12, names=["rt"])).topics[0].topic_id
        f16 = c.request(1, 16, fetch(16, [(topic_id, [(0, 1)])]))
        assert f16.responses[0].topic_id == topic_id
        assert records_of(f16.responses[0].partitions[0].records)[1:] == [(1, b"2"), (2, b"3")]

        def lo(ts, v=7):
            p = c.request(2, v, list_offsets(v, "rt", 0, ts)).topics[0].partitions[0]
            return p.offset, p.timestamp

        assert lo(-2)[0] == 0 and lo(-1)[0] == 3 and lo(-1, v=1)[0] == 3
        assert lo(1500) == (2, 2000)
        assert lo(999) == (0, 1000)
        assert lo(5000) == (-1, -1)
        assert lo(-3) == (2, 2000)


def test_acks_zero_sends_no_response(server):
    with WireClient(server.port) as c:
        c.request(19, 7, create_topics(7, ("acks0", 1)))
        c.send_raw(c.encode(0, 9, produce(9, "acks0", 0, build_batch([(None, b"fire")]), acks=0), correlation_id=500))
        c.send_raw(c.encode(2, 7, list_offsets(7, "acks0", 0, -1), correlation_id=501))
        corr, body = c.decode(2, 7, c.recv_frame())
        assert corr == 501 and body.topics[0].partitions[0].offset == 1


def test_responses_keep_request_order_behind_a_long_poll(server):
    with WireClient(server.port) as c:
        c.request(19, 7, create_topics(7, ("order", 1)))
        start = time.monotonic()
        c.send_raw(c.encode(1, 12, fetch(12, [("order", [(0, 0)])], max_wait=400), correlation_id=10))
        c.send_raw(c.encode(18, 3, req(18, 3, client_software_name="t", client_software_version="1"), correlation_id=11))
        first = struct.unpack_from(">i", c.recv_frame())[0]
        second = struct.unpack_from(">i", c.recv_frame())[0]
        assert (first, second) == (10, 11)
        assert time.monotonic() - start >= 0.35  # the empty fetch waited for max_wait


def test_long_poll_wakes_on_append_and_does_not_block_others(server):
    with WireClient(server.port) as poller, WireClient(server.port) as other:
        other.request(19, 7, create_topics(7, ("wake", 1)))
        poller.send_raw(poller.encode(1, 12, fetch(12, [("wake", [(0, 0)])], max_wait=10_000), correlation_id=1))
        time.sleep(0.2)
        t0 = time.monotonic()
        assert other.request(3, 12, metadata(12, names=["wake"])).topics[0].name == "wake"
        assert time.monotonic() - t0 < 1  # another connection is not held up by the long-poll
        other.request(0, 10, produce(10, "wake", 0, build_batch([(None, b"hello")])))
        _, resp = poller.decode(1, 12, poller.recv_frame())
        assert time.monotonic() - t0 < 3
        assert records_of(resp.responses[0].partitions[0].records) == [(0, b"hello")]


def test_create_and_delete_topics(server):
    with WireClient(server.port) as c:
        r = c.request(19, 7, create_topics(7, ("ct-a", 3, {"retention.ms": "60000"}), ("ct-a", 1), ("ct-b", -1), ("bad name", 1), ("ct-c", 1, {"nope": "1"})))
        got = {(t.name, t.error_code) for t in r.topics}
        assert ("ct-a", ErrorCode.invalid_request) in got and ("ct-b", ErrorCode.none) in got
        assert ("bad name", ErrorCode.invalid_topic_exception) in got and ("ct-c", ErrorCode.invalid_config) in got
        b = next(t for t in r.topics if t.name == "ct-b")
        assert b.num_partitions == 2 and b.topic_id.int != 0
        dup = c.request(19, 4, create_topics(4, ("ct-b", 1)))
        assert dup.topics[0].error_code == ErrorCode.topic_already_exists
        dry = c.request(19, 7, create_topics(7, ("ct-dry", 4), validate_only=True))
        assert dry.topics[0].error_code == ErrorCode.none and dry.topics[0].num_partitions == 4
        assert c.request(3, 12, metadata(12, names=["ct-dry"])).topics[0].error_code == ErrorCode.unknown_topic_or_partition
        d = c.request(20, 4, req(20, 4, topic_names=("ct-b", "ct-missing"), timeout=ms(1000)))
        assert [(x.name, x.error_code) for x in d.responses] == [("ct-b", ErrorCode.none), ("ct-missing", ErrorCode.unknown_topic_or_partition)]
        c.request(19, 7, create_topics(7, ("ct-id", 1)))
        tid = c.request(3, 12, metadata(12, names=["ct-id"])).topics[0].topic_id
        state = sub(20, 6, "topics", name=None, topic_id=tid)
        d6 = c.request(20, 6, req(20, 6, topics=(state,), timeout=ms(1000)))
        assert (d6.responses[0].name, d6.responses[0].error_code) == ("ct-id", ErrorCode.none)
        internal = c.request(20, 4, req(20, 4, topic_names=(OFFSETS_TOPIC,), timeout=ms(1000)))
        assert internal.responses[0].error_code == ErrorCode.invalid_topic_exception


def test_find_coordinator_init_producer_id_describe_cluster(server):
    with WireClient(server.port) as c:
        single = c.request(10, 2, req(10, 2, key="grp", key_type=0))
        assert (single.error_code, single.node_id, single.port) == (ErrorCode.none, 1, server.port)
        batched = c.request(10, 6, req(10, 6, key_type=0, coordinator_keys=("a", "b")))
        assert [(x.key, x.node_id, x.error_code) for x in batched.coordinators] == [("a", 1, ErrorCode.none), ("b", 1, ErrorCode.none)]
        txn = c.request(10, 2, req(10, 2, key="t", key_type=1))  # transactional ids are coordinated here too
        assert (txn.error_code, txn.node_id, txn.port) == (ErrorCode.none, 1, server.port)
        ids = {c.request(22, 4, req(22, 4, transactional_id=None, transaction_timeout=ms(1000), producer_id=-1, producer_epoch=-1)).producer_id for _ in range(3)}
        assert len(ids) == 3
        # Kafka (TransactionCoordinator.handleInitProducerId): no transactional id, always a fresh id at epoch 0.
        again = c.request(22, 4, req(22, 4, transactional_id=None, transaction_timeout=ms(1000), producer_id=min(ids), producer_epoch=0))
        assert again.error_code == ErrorCode.none and again.producer_id not in ids and again.producer_epoch == 0
        half = c.request(22, 4, req(22, 4, transactional_id=None, transaction_timeout=ms(1000), producer_id=min(ids), producer_epoch=-1))
        assert half.error_code == ErrorCode.invalid_request
        dc = c.request(60, 1, req(60, 1, include_cluster_authorized_operations=False, endpoint_type=1))
        assert dc.error_code == ErrorCode.none and dc.controller_id == 1 and [b.port for b in dc.brokers] == [server.port]
        controllers = c.request(60, 1, req(60, 1, include_cluster_authorized_operations=False, endpoint_type=2))
        assert controllers.error_code == ErrorCode.unsupported_endpoint_type


def test_consumer_offsets_is_fetchable(server):
    async def write():
        return await server.server.broker.coordinator_log.append_records([(b"group-key", b"group-value")])

    last = server.run(write())
    with WireClient(server.port) as c:
        f = c.request(1, 12, fetch(12, [(OFFSETS_TOPIC, [(0, last)])]))
        p = f.responses[0].partitions[0]
        assert p.high_watermark == last + 1
        assert [(r.key, r.value) for pos, _ in iter_batches(p.records) for r in decode_batch(p.records, pos)][-1] == (b"group-key", b"group-value")


def test_registered_handler_is_advertised_and_served_in_order(server):
    """The coordinator seam: a plug-in registers an API; awaitable results still keep order."""
    release = asyncio.Event()

    async def slow_heartbeat(ctx, request):
        await release.wait()
        return build(request.codec.response_type, throttle_time=ms(0), error_code=ErrorCode.rebalance_in_progress)

    server.call(lambda: server.server.apis.register(12, slow_heartbeat, min_version=0, max_version=4))
    try:
        with WireClient(server.port) as c:
            ranges = {k.api_key: (k.min_version, k.max_version) for k in
                      c.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1")).api_keys}
            assert ranges[12] == (0, 4)
            c.send_raw(c.encode(12, 4, req(12, 4, group_id="g", generation_id=1, member_id="m", group_instance_id=None), correlation_id=70))
            c.send_raw(c.encode(18, 3, req(18, 3, client_software_name="t", client_software_version="1"), correlation_id=71))
            threading.Timer(0.2, lambda: server.loop.call_soon_threadsafe(release.set)).start()
            corr, hb = c.decode(12, 4, c.recv_frame())
            assert corr == 70 and hb.error_code == ErrorCode.rebalance_in_progress
            assert struct.unpack_from(">i", c.recv_frame())[0] == 71
    finally:
        server.call(lambda: server.server.apis.unregister(12))


def test_unknown_tagged_field_on_the_wire_is_ignored(server):
    with WireClient(server.port) as c:
        frame = bytearray(c.encode(18, 3, req(18, 3, client_software_name="t", client_software_version="1"), correlation_id=9))
        assert frame[-1] == 0
        frame[-1:] = bytes([1, 77, 2, 0xAB, 0xCD])  # unknown tag 77 in the body
        struct.pack_into(">i", frame, 0, len(frame) - 4)
        c.send_raw(bytes(frame))
        corr, body = c.decode(18, 3, c.recv_frame())
        assert corr == 9 and body.error_code == ErrorCode.none


@pytest.mark.parametrize("n", [50])
def test_pipelined_requests_answer_in_order(server, n):
    with WireClient(server.port) as c:
        c.send_raw(b"".join(c.encode(3, 12, metadata(12, names=[]), correlation_id=1000 + i) for i in range(n)))
        assert [struct.unpack_from(">i", c.recv_frame())[0] for _ in range(n)] == list(range(1000, 1000 + n))


def test_fetch_limits_only_the_first_partition_may_exceed(server):
    with WireClient(server.port) as c:
        c.request(19, 7, create_topics(7, ("limits", 2)))
        for part in (0, 1):
            for i in range(3):
                c.request(0, 10, produce(10, "limits", part, build_batch([(None, b"%d" % i * 400)])))
        # total limit below one batch: partition 0 still gets its first batch whole, partition 1 nothing
        f = c.request(1, 12, fetch(12, [("limits", [(0, 0), (1, 0)])], max_bytes=100))
        p0, p1 = f.responses[0].partitions
        assert [o for o, _ in records_of(p0.records)] == [0] and p1.records == b""
        assert p1.error_code == ErrorCode.none and p1.high_watermark == 3
        # per-partition limit fitting two batches
        size = len(p0.records)
        f = c.request(1, 12, fetch(12, [("limits", [(0, 0), (1, 0)])], partition_max_bytes=2 * size + 10))
        assert [[o for o, _ in records_of(p.records)] for p in f.responses[0].partitions] == [[0, 1], [0, 1]]


def test_offloaded_cpu_work_does_not_stall_other_connections(server):
    """A plug-in handler running a long pure-Python computation through Server.offload (as a
    large group's assignment would) leaves the event loop free for other connections."""

    def busy(seconds):
        end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < end:
            n += 1
        return n

    async def heavy(ctx, request):
        await ctx.server.offload(busy, 1.5)
        return build(request.codec.response_type, throttle_time=ms(0), error_code=ErrorCode.none)

    server.call(lambda: server.server.apis.register(12, heavy))
    try:
        with WireClient(server.port) as slow, WireClient(server.port) as fast:
            slow.send_raw(slow.encode(12, 4, req(12, 4, group_id="g", generation_id=1, member_id="m", group_instance_id=None)))
            time.sleep(0.1)
            latencies = []
            while len(latencies) < 20:
                t0 = time.perf_counter()
                fast.request(3, 12, metadata(12, names=[]))
                latencies.append(time.perf_counter() - t0)
                time.sleep(0.02)
            assert max(latencies) < 0.5, latencies
            assert slow.decode(12, 4, slow.recv_frame())[1].error_code == ErrorCode.none
    finally:
        server.call(lambda: server.server.apis.unregister(12))

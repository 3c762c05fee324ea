"""Malformed, truncated, oversized and unknown requests sent as raw bytes: each gets Kafka's
error or a closed connection, and the server keeps serving everyone else."""

import socket
import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from cohort.protocol.records import build_batch
from cohort_testing import WireClient
from rawreq import create_topics, fetch, list_offsets, metadata, ms, produce, req


def still_serving(server):
    with WireClient(server.port) as c:
        resp = c.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1"))
        assert resp.error_code == ErrorCode.none


def end_offset(client, topic, partition=0):
    resp = client.request(2, 7, list_offsets(7, topic, partition, -1))
    return resp.topics[0].partitions[0].offset


@pytest.fixture(scope="module")
def topic(server):
    with WireClient(server.port) as c:
        resp = c.request(19, 7, create_topics(7, ("bad-input", 1)))
        assert resp.topics[0].error_code == ErrorCode.none
    return "bad-input"


def test_truncated_frame_then_disconnect(server):
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(struct.pack(">i", 100) + b"\x00\x03\x00\x0c")  # promises 100 bytes, sends 4
    s.close()
    still_serving(server)


def test_frame_with_truncated_body_closes_connection(server):
    with WireClient(server.port) as c:
        frame = c.encode(3, 12, metadata(12, names=["abc"]))
        body = frame[4:-6]
        c.send_raw(struct.pack(">i", len(body)) + body)
        assert c.closed_by_server()
    still_serving(server)


def test_header_shorter_than_minimum_closes(server):
    with WireClient(server.port) as c:
        c.send_raw(struct.pack(">i", 3) + b"\x00\x12\x00")
        assert c.closed_by_server()
    still_serving(server)


@pytest.mark.parametrize("size", [65537, 2**31 - 1, -5])
def test_oversized_or_negative_frame_closes(server, size):
    with WireClient(server.port) as c:
        c.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert c.closed_by_server()
    still_serving(server)


def test_unknown_api_key_closes(server):
    with WireClient(server.port) as c:
        c.send_raw(struct.pack(">ihhih", 10, 999, 0, 1, -1))
        assert c.closed_by_server()
    still_serving(server)


def test_unsupported_version_of_known_api_closes(server):
    with WireClient(server.port) as c:
        c.send_raw(struct.pack(">ihhih", 10, 3, 99, 1, -1))
        assert c.closed_by_server()


def test_unregistered_group_api_closes(server):
    # ConsumerGroupHeartbeat has a codec but no handler until the coordinator plugs in.
    with WireClient(server.port) as c:
        c.send_raw(c.encode(68, 1, req(68, 1, group_id="g", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
                                        rebalance_timeout=ms(1000), subscribed_topic_names=("a",),
                                        subscribed_topic_regex=None, server_assignor=None, topic_partitions=None)))
        assert c.closed_by_server()
    still_serving(server)


def test_api_versions_above_supported_gets_v0_fallback(server):
    with WireClient(server.port) as c:
        c.send_raw(struct.pack(">ihhih", 10, 18, 9, 1234, -1))
        frame = c.recv_frame()
        corr, body = c.decode(18, 0, frame)
        assert corr == 1234 and body.error_code == ErrorCode.unsupported_version
        ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        assert ranges[18] == (0, 4) and 68 not in ranges
        # the connection stays usable at a supported version
        assert c.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1")).error_code == ErrorCode.none


def test_corrupt_batch_gets_corrupt_message_and_stores_nothing(server, topic):
    with WireClient(server.port) as c:
        before = end_offset(c, topic)
        bad = bytearray(build_batch([(b"k", b"v")]))
        bad[-2] ^= 0x55
        resp = c.request(0, 10, produce(10, topic, 0, bytes(bad)))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
        # Kafka finds no whole batch in these (the length runs past the data): INVALID_RECORD.
        garbage = c.request(0, 7, produce(7, topic, 0, b"\x01" * 80))
        assert garbage.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
        truncated = c.request(0, 7, produce(7, topic, 0, build_batch([(b"k", b"v")])[:-3]))
        assert truncated.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record
        short = c.request(0, 7, produce(7, topic, 0, struct.pack(">qi", 0, 5) + b"\x02" * 10))
        assert short.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
        assert end_offset(c, topic) == before
        ok = c.request(0, 10, produce(10, topic, 0, build_batch([(b"k", b"v")])))
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert ok.responses[0].partition_responses[0].base_offset == before


def test_unknown_topic_and_partition(server, topic):
    with WireClient(server.port) as c:
        r = c.request(0, 10, produce(10, "no-such-topic", 0, build_batch([(None, b"v")])))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
        r = c.request(0, 10, produce(10, topic, 7, build_batch([(None, b"v")])))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
        f = c.request(1, 12, fetch(12, [("no-such-topic", [(0, 0)]), (topic, [(0, 0), (9, 0)])]))
        errors = [(t.topic, p.partition_index, p.error_code) for t in f.responses for p in t.partitions]
        assert errors == [("no-such-topic", 0, ErrorCode.unknown_topic_or_partition), (topic, 0, ErrorCode.none),
                          (topic, 9, ErrorCode.unknown_topic_or_partition)]
        lo = c.request(2, 7, list_offsets(7, "no-such-topic", 0, -1))
        assert lo.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_unknown_topic_id(server, topic):
    missing = uuid.uuid4()
    with WireClient(server.port) as c:
        f = c.request(1, 16, fetch(16, [(missing, [(0, 0), (1, 5)])]))
        assert [p.error_code for p in f.responses[0].partitions] == [ErrorCode.unknown_topic_id] * 2
        assert f.responses[0].topic_id == missing
        m = c.request(3, 12, metadata(12, ids=[missing]))
        assert m.topics[0].error_code == ErrorCode.unknown_topic_id and m.topics[0].topic_id == missing
    still_serving(server)


def test_offset_out_of_range(server, topic):
    with WireClient(server.port) as c:
        end = end_offset(c, topic)
        f = c.request(1, 12, fetch(12, [(topic, [(0, end + 100)])]))
        assert f.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
        assert f.responses[0].partitions[0].high_watermark == end


def test_fetch_session_is_refused_with_session_id_zero(server, topic):
    with WireClient(server.port) as c:
        new = c.request(1, 12, fetch(12, [(topic, [(0, 0)])], session_id=0, session_epoch=0))
        assert new.error_code == ErrorCode.none and new.session_id == 0
        stale = c.request(1, 12, fetch(12, [(topic, [(0, 0)])], session_id=12345, session_epoch=3))
        assert stale.error_code == ErrorCode.fetch_session_id_not_found


def test_bad_acks_value(server, topic):
    with WireClient(server.port) as c:
        r = c.request(0, 9, produce(9, topic, 0, build_batch([(None, b"v")]), acks=2))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks


def test_failed_acks_zero_produce_closes_the_connection(server, topic):
    with WireClient(server.port) as c:
        before = end_offset(c, topic)
        bad = bytearray(build_batch([(None, b"v")]))
        bad[-1] ^= 1
        c.send_raw(c.encode(0, 9, produce(9, topic, 0, bytes(bad), acks=0)))
        assert c.closed_by_server()  # no response can carry the error, so the client must notice this way
    with WireClient(server.port) as c:
        assert end_offset(c, topic) == before

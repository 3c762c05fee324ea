"""Request decoding / response encoding on top of kio, including the gaps cohort wraps."""

import datetime
import io
import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as TopicV1
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from cohort.protocol.codec import (
    MalformedRequest,
    UnsupportedApi,
    api_versions_fallback,
    decode_request,
    encode_response,
)
from cohort.protocol.entities import build
from cohort.protocol.versions import SUPPORTED, default_table


@pytest.fixture(scope="module")
def table():
    return default_table()


def heartbeat_frame(client_id="cid", header_tags=b"\x00", body_tags=b"\x00"):
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=12, request_api_version=4, correlation_id=77, client_id=client_id))
    header = buf.getvalue()[:-1] + header_tags  # replace the empty tag section
    buf = io.BytesIO()
    entity_writer(HeartbeatRequest)(buf, HeartbeatRequest(group_id="grp", generation_id=3, member_id="m-1", group_instance_id=None))
    body = buf.getvalue()[:-1] + body_tags
    return header + body


def test_decodes_flexible_header_and_body(table):
    req = decode_request(heartbeat_frame(), table)
    assert (req.api_key, req.version, req.correlation_id, req.client_id) == (12, 4, 77, "cid")
    assert req.body == HeartbeatRequest(group_id="grp", generation_id=3, member_id="m-1", group_instance_id=None)


def test_decodes_null_client_id(table):
    req = decode_request(heartbeat_frame(client_id=None), table)
    assert req.client_id is None


def test_unknown_tagged_field_in_body_is_skipped(table):
    # Tag 99 with 3 bytes, and tag 120 with 0 bytes: neither exists in Heartbeat v4.
    frame = heartbeat_frame(body_tags=bytes([2, 99, 3, 1, 2, 3, 120, 0]))
    req = decode_request(frame, table)
    assert req.body.member_id == "m-1" and req.body.generation_id == 3


def test_unknown_tagged_field_in_header_is_skipped(table):
    req = decode_request(heartbeat_frame(header_tags=bytes([1, 7, 2, 0xAA, 0xBB])), table)
    assert req.body.group_id == "grp"


def test_unknown_tag_in_nested_entity_is_skipped(table):
    # Metadata v12: the topic entries are flexible entities with their own tag sections.
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=3, request_api_version=12, correlation_id=1, client_id="c"))
    entity_writer(MetadataRequest)(buf, MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="abc"),),
                                                         allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    frame = buf.getvalue()
    marker = b"\x04abc"  # compact string "abc", followed by the topic's empty tag section
    i = frame.index(marker) + len(marker)
    assert frame[i] == 0
    patched = frame[:i] + bytes([1, 42, 1, 0xFF]) + frame[i + 1 :]
    req = decode_request(patched, table)
    assert [t.name for t in req.body.topics] == ["abc"]
    assert req.body.allow_auto_topic_creation is False


def test_truncated_body_is_malformed(table):
    frame = heartbeat_frame()
    for cut in (len(frame) - 1, len(frame) - 5, 12):
        with pytest.raises(MalformedRequest):
            decode_request(frame[:cut], table)


def test_short_header_is_malformed(table):
    with pytest.raises(MalformedRequest):
        decode_request(b"\x00\x12\x00", table)
    with pytest.raises(MalformedRequest):  # client_id length runs past the end
        decode_request(struct.pack(">hhih", 18, 0, 1, 50) + b"ab", table)


def test_unknown_api_key_and_version(table):
    with pytest.raises(UnsupportedApi) as exc:
        decode_request(struct.pack(">hhih", 999, 0, 5, -1), table)
    assert (exc.value.api_key, exc.value.correlation_id) == (999, 5)
    with pytest.raises(UnsupportedApi):
        decode_request(struct.pack(">hhih", 3, 99, 5, -1), table)


def test_legacy_version_decodes(table):
    buf = io.BytesIO()
    from kio.schema.request_header.v1.header import RequestHeader as H1

    entity_writer(H1)(buf, H1(request_api_key=3, request_api_version=1, correlation_id=9, client_id="old"))
    entity_writer(MetadataRequestV1)(buf, MetadataRequestV1(topics=(TopicV1(name="a"),)))
    req = decode_request(buf.getvalue(), table)
    assert req.client_id == "old" and req.body.topics[0].name == "a"


def test_api_versions_response_uses_header_v0(table):
    codec = table.codec(18, 3)
    resp = build(ApiVersionsResponse, error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0))
    frame = encode_response(42, codec, resp)
    size, corr = struct.unpack_from(">ii", frame, 0)
    assert size == len(frame) - 4 and corr == 42
    body, n = entity_reader(ApiVersionsResponse)(frame, 8)  # no header tag byte
    assert 8 + n == len(frame) and body.api_keys == ()


def test_flexible_response_has_header_tag_section(table):
    from kio.schema.heartbeat.v4.response import HeartbeatResponse

    codec = table.codec(12, 4)
    frame = encode_response(5, codec, HeartbeatResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none))
    assert frame[8] == 0  # empty tag section of response header v1
    body, n = entity_reader(HeartbeatResponse)(frame, 9)
    assert 9 + n == len(frame)


def test_api_versions_fallback_is_v0_with_unsupported_version():
    frame = api_versions_fallback(11, {18: (0, 4), 3: (0, 13)})
    from kio.schema.api_versions.v0.response import ApiVersionsResponse as V0

    size, corr = struct.unpack_from(">ii", frame, 0)
    assert size == len(frame) - 4 and corr == 11
    body, _ = entity_reader(V0)(frame, 8)
    assert body.error_code == 35
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(3, 0, 13), (18, 0, 4)]


def test_every_supported_version_has_a_codec(table):
    for key, (_, lo, hi) in SUPPORTED.items():
        for v in range(lo, hi + 1):
            assert table.get(key, v) is not None
    assert table.get(18, 5) is None


def test_api_versions_v3_request_parses(table):
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=18, request_api_version=3, correlation_id=1, client_id="c"))
    entity_writer(ApiVersionsRequest)(buf, ApiVersionsRequest(client_software_name="x", client_software_version="1"))
    assert decode_request(buf.getvalue(), table).body.client_software_name == "x"


@pytest.mark.parametrize("api_key, version", [(12, 4), (18, 3), (3, 1)])
def test_the_client_side_round_trips_through_the_server_side(table, api_key, version):
    """encode_request / decode_response (what the pipeline's client sends and reads) against
    decode_request / encode_response (the broker's side), headers v0-v2 included."""
    from kio.index import load_request_schema, load_response_schema

    from cohort.protocol.codec import decode_response, encode_request

    bodies = {
        12: HeartbeatRequest(group_id="grp", generation_id=3, member_id="m-1", group_instance_id=None),
        18: ApiVersionsRequest(client_software_name="cohort", client_software_version="1"),
        3: MetadataRequestV1(topics=(TopicV1(name="a"),)),
    }
    assert type(bodies[api_key]) is load_request_schema(api_key, version)
    frame = encode_request(api_key, version, 31, "pipeline", bodies[api_key])
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    req = decode_request(frame[4:], table)
    assert (req.api_key, req.version, req.correlation_id, req.client_id, req.body) == (
        api_key, version, 31, "pipeline", bodies[api_key])

    codec = table.codec(api_key, version)
    schema = load_response_schema(api_key, version)
    fields = {"error_code": ErrorCode.none, "throttle_time": datetime.timedelta(0), "api_keys": (), "brokers": (),
              "topics": ()}
    response = build(schema, **{k: v for k, v in fields.items() if k in schema.__dataclass_fields__})
    correlation, decoded = decode_response(api_key, version, encode_response(31, codec, response)[4:])
    assert (correlation, decoded) == (31, response)


def test_a_response_that_does_not_parse_is_one_clear_error():
    from cohort.protocol.codec import MalformedResponse, decode_response

    with pytest.raises(MalformedResponse, match="a response frame of 2 bytes"):
        decode_response(12, 4, b"\x00\x01")
    with pytest.raises(MalformedResponse, match="cannot parse the api 12 v4 response"):
        decode_response(12, 4, struct.pack(">i", 5) + b"\x00\x00")


def test_every_advertised_pair_has_a_codec_and_no_other_does():
    """Codecs are built on first use: each pair ApiVersions advertises must build one, and a
    pair outside the ranges gets none (the caller answers UNSUPPORTED_VERSION)."""
    from cohort.protocol.versions import VersionTable

    table = VersionTable()
    assert table.pairs() and len(table.pairs()) == sum(hi - lo + 1 for _, lo, hi in SUPPORTED.values())
    for api_key, version in table.pairs():
        codec = table.get(api_key, version)
        assert (codec.api_key, codec.version) == (api_key, version)
        assert table.get(api_key, version) is codec  # built once
    for api_key, (_, lo, hi) in SUPPORTED.items():
        assert table.get(api_key, hi + 1) is None and (lo == 0 or table.get(api_key, lo - 1) is None)
    assert table.get(max(SUPPORTED) + 1000, 0) is None
    with pytest.raises(KeyError):
        table.codec(max(SUPPORTED) + 1000, 0)

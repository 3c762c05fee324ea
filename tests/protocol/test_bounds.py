"""The schema-driven bounds check that runs before kio's native reader."""

import datetime
import io
import os
import random

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from cohort.protocol.versions import request_schema as load_request_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from cohort.protocol.bounds import CHECK_ERRORS, BodyError, NullField, body_checker
from cohort.protocol.codec import InvalidRequest, MalformedRequest, UnsupportedApi, decode_request
from cohort.protocol.versions import SUPPORTED, default_table
from cohort_fuzzing import Mutator, load_corpus

CORPUS = os.path.join(os.path.dirname(__file__), "corpus", "client-frames.bin")
PAIRS = [(k, v) for k, (_, lo, hi) in sorted(SUPPORTED.items()) for v in range(lo, hi + 1)]

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


@pytest.mark.parametrize("api_key,version", PAIRS)
def test_every_valid_body_passes_and_ends_where_kio_ends(api_key, version):
    schema = load_request_schema(api_key, version)
    write, read, check = entity_writer(schema), entity_reader(schema), body_checker(schema)

    @settings(max_examples=6, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(schema))
    def roundtrip(body):
        buf = io.BytesIO()
        try:
            write(buf, body)
        except ValueError as exc:  # kio's strategies draw timedeltas its writer cannot encode
            assert "overflow" in str(exc)
            reject()
        data = b"\x07" + buf.getvalue()  # not at offset 0, as in a frame
        try:
            _, size = read(data, 1)  # kio answers the bytes it read
        except ValueError as exc:
            # kio's reader refuses some durations its writer wrote: OffsetCommit v4 with
            # retention_time=timedelta(days=208499982, seconds=64681, microseconds=984000) is written
            # as 2**54 ms, and reading it back raises "timedelta milliseconds overflow"
            assert "overflow" in str(exc)
            reject()
        assert check(data, 1, len(data)) == 1 + size == len(data)
        with pytest.raises(CHECK_ERRORS):  # one byte short
            check(data[:-1], 1, len(data) - 1)

    roundtrip()


def frame(hexed: str) -> bytes:
    return bytes.fromhex(hexed)[4:]  # without the size prefix


def test_a_count_that_cannot_fit_is_malformed_before_kio_allocates():
    # Metadata v12 with 2**32-1 topics: kio alone asks for 34 GB and aborts the process.
    with pytest.raises(MalformedRequest, match=r"MetadataRequest.topics: 4294967294 elements cannot fit in 0 bytes"):
        decode_request(frame("000000100003000c00000001ffff00ffffffff0f"), default_table())


def test_string_and_bytes_lengths_past_the_end_are_malformed():
    table = default_table()
    # Metadata v1 naming one topic whose name claims 30,000 bytes
    with pytest.raises(MalformedRequest, match="MetadataRequestTopic runs past the end"):
        decode_request(bytes.fromhex("0003000100000007ffff" "00000001" "7530") + b"abc", table)
    # a negative string length other than -1
    with pytest.raises(MalformedRequest, match="length -2"):
        decode_request(bytes.fromhex("0003000100000007ffff" "00000001" "fffe"), table)


def test_a_null_array_where_none_is_allowed_is_an_invalid_request():
    with pytest.raises(InvalidRequest, match="ListOffsetsRequest.topics is null") as exc:
        decode_request(frame("000000120002000700000001ffff00ffffffff000000"), default_table())
    assert (exc.value.api_key, exc.value.version, exc.value.correlation_id) == (2, 7, 1)


def test_null_stays_null_where_kafka_gives_it_a_meaning():
    # Metadata v1+ topics=null means every topic
    request = decode_request(bytes.fromhex("0003000100000007ffff" "ffffffff"), default_table())
    assert request.body.topics is None


def test_known_tagged_fields_are_checked_inside_their_size():
    schema = load_request_schema(1, 12)  # Fetch v12: tag 0 is cluster_id, a compact nullable string
    check = body_checker(schema)
    write = entity_writer(schema)
    body = schema(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=100,
                  isolation_level=0, session_id=0, session_epoch=-1, topics=(), forgotten_topics_data=(), rack_id="")
    buf = io.BytesIO()
    write(buf, body)
    data = bytearray(buf.getvalue())
    assert data[-1] == 0  # the top-level tag buffer, empty
    ok = data[:-1] + bytes([1, 0, 3, 3]) + b"ab"  # tag 0, 3 bytes: a 2-character string
    assert check(bytes(ok), 0, len(ok)) == len(ok)
    lying = data[:-1] + bytes([1, 0, 3, 0x7F]) + b"ab"  # the string claims 126 bytes inside a 3-byte tag
    with pytest.raises(CHECK_ERRORS):
        check(bytes(lying), 0, len(lying))


def test_unknown_tags_are_still_skipped():
    schema = load_request_schema(68, 0)  # ConsumerGroupHeartbeat v0
    check = body_checker(schema)
    buf = io.BytesIO()
    entity_writer(schema)(buf, schema(group_id="g", member_id="", member_epoch=0, instance_id=None, rack_id=None,
                                      rebalance_timeout=datetime.timedelta(seconds=30),
                                      subscribed_topic_names=("t",), server_assignor=None, topic_partitions=()))
    data = buf.getvalue()[:-1] + bytes([1, 9, 2, 0xAA, 0xBB])  # one unknown tag, 2 bytes
    assert check(data, 0, len(data)) == len(data)


def test_null_field_is_a_body_error_too():
    assert issubclass(NullField, BodyError)


def test_mutated_client_frames_only_raise_the_codecs_errors():
    """In-process: any crash in kio here would take the test process down with it."""
    table = default_table()
    mutator = Mutator(load_corpus(CORPUS), seed=random.randrange(1 << 30))
    outcomes = {"ok": 0, "malformed": 0, "invalid": 0, "unsupported": 0}
    for _ in range(20_000):
        data = mutator.frame()
        try:
            decode_request(data, table)
            outcomes["ok"] += 1
        except InvalidRequest:
            outcomes["invalid"] += 1
        except MalformedRequest:
            outcomes["malformed"] += 1
        except UnsupportedApi:
            outcomes["unsupported"] += 1
    assert all(outcomes.values()), outcomes  # the mix reaches every outcome


def test_the_corpus_holds_real_clients_frames_for_the_hot_apis():
    seen = {int.from_bytes(f[:2], "big") for f in load_corpus(CORPUS)}
    # Produce, Fetch, ListOffsets, Metadata, OffsetCommit/Fetch, FindCoordinator, the classic
    # group APIs, ApiVersions, CreateTopics, ConsumerGroupHeartbeat
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 68} <= seen


def test_a_repeated_small_body_is_checked_once_and_a_bad_one_every_time():
    import dataclasses

    from cohort.protocol.versions import VersionTable

    table = VersionTable({68: ("ConsumerGroupHeartbeat", 1, 1)})
    real = table.codec(68, 1)
    calls = []

    def counting(buf, pos, end):
        calls.append(pos)
        return real.check_request(buf, pos, end)

    table._codecs[(68, 1)] = dataclasses.replace(real, check_request=counting, checked={})
    frame = next(f for f in load_corpus(CORPUS) if f[:4] == b"\x00\x44\x00\x01")
    other_corr = frame[:4] + b"\x00\x00\x30\x39" + frame[8:]
    assert decode_request(frame, table).correlation_id != decode_request(other_corr, table).correlation_id
    assert len(calls) == 1  # the same body with another correlation id: remembered
    bad = frame[:-2]
    for _ in range(2):
        with pytest.raises(MalformedRequest):
            decode_request(bad, table)
    assert len(calls) == 3  # a body that failed is never remembered

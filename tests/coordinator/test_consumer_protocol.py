"""The ConsumerProtocol codec: byte layouts of every version, round trips, malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def s16(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_subscription_v0_layout():
    assert encode_subscription(Subscription(("a", "bb"), b"ud", version=0)) == (
        b"\x00\x00" + struct.pack(">i", 2) + s16("a") + s16("bb") + struct.pack(">i", 2) + b"ud")


def test_subscription_v3_layout():
    sub = Subscription(("t",), None, (("t", (0, 2)),), 7, "r1")
    assert encode_subscription(sub) == (
        b"\x00\x03" + struct.pack(">i", 1) + s16("t") + struct.pack(">i", -1)
        + struct.pack(">i", 1) + s16("t") + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">i", 7) + s16("r1"))
    assert decode_subscription(encode_subscription(sub)) == sub


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_versions_drop_the_fields_they_do_not_have(version):
    full = Subscription(("t", "u"), b"x", (("t", (1,)),), 4, "rack", version)
    decoded = decode_subscription(encode_subscription(full))
    assert decoded.topics == ("t", "u") and decoded.user_data == b"x" and decoded.version == version
    assert decoded.owned_partitions == ((("t", (1,)),) if version >= 1 else ())
    assert decoded.generation_id == (4 if version >= 2 else -1)
    assert decoded.rack_id == ("rack" if version >= 3 else None)


def test_assignment_layout_and_empty_forms():
    data = encode_assignment(Assignment((("t", (0, 1)),), None, 1))
    assert data == b"\x00\x01" + struct.pack(">i", 1) + s16("t") + struct.pack(">iii", 2, 0, 1) + struct.pack(">i", -1)
    assert decode_assignment(data) == Assignment((("t", (0, 1)),), None, 1)
    assert decode_assignment(b"") == Assignment()  # a member the leader gave nothing
    assert decode_assignment(b"\x00\x00").partitions == ()


def test_newer_versions_are_read_as_the_highest_known_with_trailing_fields_ignored():
    data = encode_subscription(Subscription(("t",), None, (), 1, "r"))
    future = b"\x00\x09" + data[2:] + b"future-field"
    assert decode_subscription(future) == Subscription(("t",), None, (), 1, "r", 3)
    assert decode_assignment(b"\x00\x07" + encode_assignment(Assignment())[2:] + b"xx") == Assignment()


@pytest.mark.parametrize("data", [
    b"", b"\x00", b"\xff\xff", b"\x00\x00\x00\x00\x00\x01", b"\x00\x00\x7f\xff\xff\xff",
    b"\x00\x00\x00\x00\x00\x01\x00\x05ab", b"\x00\x00" + struct.pack(">i", 0) + struct.pack(">i", -1) + b"extra",
    b"\x00\x00" + struct.pack(">i", 1) + b"\x00\x02\xff\xfe" + struct.pack(">i", -1),
])
def test_malformed_subscriptions_are_rejected(data):
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x00\x00\x00\x00\x01", b"\x00\x00" + struct.pack(">i", -1)])
def test_malformed_assignments_are_rejected(data):
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)


names = st.text(min_size=0, max_size=8)
tps = st.lists(st.tuples(names, st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple)), max_size=3).map(tuple)


@settings(max_examples=200, deadline=None)
@given(st.lists(names, max_size=4).map(tuple), st.none() | st.binary(max_size=8), tps,
       st.integers(-1, 2**31 - 1), st.none() | names, st.integers(0, 3))
def test_subscription_round_trip_property(topics, user_data, owned, generation, rack, version):
    sub = Subscription(topics, user_data, owned if version >= 1 else (), generation if version >= 2 else -1,
                       rack if version >= 3 else None, version)
    assert decode_subscription(encode_subscription(sub)) == sub


@settings(max_examples=200, deadline=None)
@given(tps, st.none() | st.binary(max_size=8), st.integers(0, 3))
def test_assignment_round_trip_property(partitions, user_data, version):
    assignment = Assignment(partitions, user_data, version)
    assert decode_assignment(encode_assignment(assignment)) == assignment


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_arbitrary_bytes_decode_or_raise_the_codec_error(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except ConsumerProtocolError:
            pass

"""Record serde: byte layouts of docs/records.md, round trips, and malformed input."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator.records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupConfigurationKey,
    GroupConfigurationValue,
    GroupMetadataKey,
    GroupMetadataMember,
    GroupMetadataValue,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    RecordFormatError,
    decode,
    encode,
)

T1 = uuid.UUID("0123456789abcdef0123456789abcdef")
T2 = uuid.UUID(int=7)

SAMPLES = [
    Record(OffsetCommitKey("grp", "topic", 3), OffsetCommitValue(42, 5, "meta", 1000)),
    Record(OffsetCommitKey("grp", "topic", 3), OffsetCommitValue(42, -1, "", 1000, 2000)),
    Record(OffsetCommitKey("grp", "tøpic", 0), None),
    Record(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7)),
    Record(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(7, -123456789)),
    Record(ConsumerGroupMetadataKey("g"), None),
    Record(ConsumerGroupMemberMetadataKey("g", "m"), ConsumerGroupMemberMetadataValue(
        "inst", "rack", "client", "/1.2.3.4", ("a", "b"), "re.*", 30000, "uniform")),
    Record(ConsumerGroupMemberMetadataKey("g", "m"), ConsumerGroupMemberMetadataValue(
        None, None, "", "", (), None, -1, None, ClassicMemberMetadata(10000, (("range", b"\x00\x01"),)))),
    Record(ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(9)),
    Record(ConsumerGroupTargetAssignmentMemberKey("g", "m"), ConsumerGroupTargetAssignmentMemberValue(
        {T1: (0, 2), T2: (1,)})),
    Record(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), ConsumerGroupCurrentMemberAssignmentValue(
        5, 4, MemberState.UNREVOKED_PARTITIONS, {T1: (0,)}, {T2: (1, 2)})),
    Record(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), None),
    Record(ConsumerGroupRegularExpressionKey("g", "x.*"), ConsumerGroupRegularExpressionValue(("xa", "xb"), 12, 99)),
    Record(GroupConfigurationKey("g"), GroupConfigurationValue((("consumer.session.timeout.ms", "50000"),))),
    Record(GroupMetadataKey("g"), GroupMetadataValue("consumer", 3, "range", "m1", 1234, (
        GroupMetadataMember("m1", None, "c", "/h", 60000, 10000, b"\x00\x01sub", b"\x00\x01asg"),
        GroupMetadataMember("m2", "i2", "c", "/h", 60000, 10000, b"", b"")))),
    Record(GroupMetadataKey("g"), GroupMetadataValue("consumer", 4, None, None, 99, ())),
    Record(GroupMetadataKey("g"), None),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r.key).__name__)
def test_round_trip(record):
    key, value = encode(record)
    assert (value is None) == (record.value is None)
    assert decode(key, value) == record


def test_key_layout_is_type_then_int16_strings():
    assert encode(Record(ConsumerGroupMetadataKey("g"), None))[0] == b"\x00\x03\x00\x01g"
    assert encode(Record(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), None))[0] == b"\x00\x08\x00\x01g\x00\x01m"
    assert encode(Record(OffsetCommitKey("g", "t", 2), None))[0] == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x02"
    assert encode(Record(GroupConfigurationKey("g"), None))[0] == b"\x04\x00\x00\x01g"


def test_group_metadata_value_layout_with_hash_as_tagged_field():
    _, plain = encode(Record(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(5)))
    assert plain == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
    _, tagged = encode(Record(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(5, 1)))
    assert tagged == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x01\x00\x08" + struct.pack(">q", 1)


def test_current_assignment_value_layout():
    _, value = encode(Record(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), ConsumerGroupCurrentMemberAssignmentValue(
        3, 2, MemberState.STABLE, {T2: (1, 4)}, {})))
    expected = (b"\x00\x00" + struct.pack(">ii", 3, 2) + b"\x00"
                + b"\x02" + T2.bytes + b"\x03" + struct.pack(">ii", 1, 4) + b"\x00"  # compact array of 1 topic
                + b"\x01"  # empty pending array
                + b"\x00")  # no tagged fields
    assert value == expected


def test_offset_commit_value_layouts_v3_and_v1():
    _, v3 = encode(Record(OffsetCommitKey("g", "t", 0), OffsetCommitValue(10, 2, "m", 99)))
    assert v3 == struct.pack(">hqi", 3, 10, 2) + b"\x00\x01m" + struct.pack(">q", 99)
    _, v1 = encode(Record(OffsetCommitKey("g", "t", 0), OffsetCommitValue(10, -1, "", 99, 500)))
    assert v1 == struct.pack(">hq", 1, 10) + b"\x00\x00" + struct.pack(">qq", 99, 500)


def test_kafka_flexible_offset_commit_v4_decodes():
    value = struct.pack(">hqi", 4, 10, 2) + b"\x02m" + struct.pack(">q", 99) + b"\x00"
    assert decode(encode(Record(OffsetCommitKey("g", "t", 0), None))[0], value).value == OffsetCommitValue(10, 2, "m", 99)


def test_unknown_member_state_byte_reads_as_unknown():
    key, value = encode(SAMPLES[10])
    patched = value[:10] + b"\x05" + value[11:]
    assert decode(key, patched).value.state is MemberState.UNKNOWN


@pytest.mark.parametrize("record", SAMPLES[:2] + SAMPLES[3:5] + SAMPLES[6:11] + SAMPLES[12:16],
                         ids=lambda r: type(r.key).__name__)
def test_truncated_and_padded_values_are_rejected(record):
    key, value = encode(record)
    with pytest.raises(RecordFormatError):
        decode(key, value[:-1])
    with pytest.raises(RecordFormatError):
        decode(key, value + b"\x00")


def test_unknown_types_and_versions_are_rejected():
    with pytest.raises(RecordFormatError, match="unsupported coordinator record type 4"):
        decode(b"\x00\x04\x00\x01g", b"\x00\x00")
    with pytest.raises(RecordFormatError, match="unsupported GroupMetadata value version 4"):
        decode(b"\x00\x02\x00\x01g", b"\x00\x04")
    with pytest.raises(RecordFormatError, match="unsupported value version 3"):
        decode(b"\x00\x03\x00\x01g", b"\x00\x03\x00\x00\x00\x01\x00")
    with pytest.raises(RecordFormatError):
        decode(b"\x00\x03\x00\x05g", None)


partitions = st.dictionaries(st.uuids(), st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5, unique=True)
                             .map(lambda ps: tuple(sorted(ps))), max_size=4)


@settings(max_examples=100, deadline=None)
@given(st.integers(-2, 2**31 - 1), st.integers(-2, 2**31 - 1), st.sampled_from(list(MemberState)[:3]),
       partitions, partitions, st.text(min_size=1, max_size=20))
def test_current_assignment_round_trip_property(epoch, prev, state, assigned, pending, member_id):
    record = Record(ConsumerGroupCurrentMemberAssignmentKey("g", member_id),
                    ConsumerGroupCurrentMemberAssignmentValue(epoch, prev, state, assigned, pending))
    assert decode(*encode(record)) == record


def test_classic_group_metadata_value_layout_v3():
    value = GroupMetadataValue("consumer", 3, "range", None, 5, (
        GroupMetadataMember("m", "i", "c", "h", 60000, 10000, b"S", b""),))
    _, data = encode(Record(GroupMetadataKey("g"), value))
    assert data == (struct.pack(">h", 3) + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 3)
                    + struct.pack(">h", 5) + b"range" + struct.pack(">h", -1) + struct.pack(">q", 5)
                    + struct.pack(">i", 1) + struct.pack(">h", 1) + b"m" + struct.pack(">h", 1) + b"i"
                    + struct.pack(">h", 1) + b"c" + struct.pack(">h", 1) + b"h" + struct.pack(">ii", 60000, 10000)
                    + struct.pack(">i", 1) + b"S" + struct.pack(">i", 0))

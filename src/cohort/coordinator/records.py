"""Typed coordinator records and their byte layout (see docs/records.md).

Every state change of a shard is one of these records; `replay` applies them. The byte layout
follows Kafka's `__consumer_offsets` so its tools can decode the Kafka-defined types:

* key   = int16 record type, then the key fields (non-flexible: int16-length strings);
* value = int16 version, then the fields; consumer-group values (types 3-8, 16) use Kafka's
  flexible encoding (compact strings/arrays as unsigned varint length+1, uuids as 16 bytes, a
  trailing tagged-field section); OffsetCommit values use Kafka's non-flexible v1/v3 layouts;
* a tombstone has a null value.

GroupMetadata (type 2, classic groups) uses Kafka's non-flexible GroupMetadataValue: written as v3,
v0-v3 read. GroupConfiguration (type 1024) is a cohort extension: Kafka keeps group configs in KRaft.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from cohort.protocol.records import ABORT_MARKER, COMMIT_MARKER, TxnBatch

Assignment = Mapping[uuid.UUID, tuple[int, ...]]


class _EmptyAssignment(Mapping):
    """The shared, immutable, hashable empty assignment (a valid dataclass default)."""

    __slots__ = ()

    def __getitem__(self, key):
        raise KeyError(key)

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"


EMPTY_ASSIGNMENT: Assignment = _EmptyAssignment()


class RecordType(enum.IntEnum):
    OFFSET_COMMIT_LEGACY = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2  # classic groups
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4  # superseded by the metadata hash (Kafka 4.1+)
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16
    GROUP_CONFIGURATION = 1024


class MemberState(enum.IntEnum):
    """Persisted as int8; any other byte reads as UNKNOWN."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


# ---------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int
    TYPE = RecordType.OFFSET_COMMIT


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str
    TYPE = RecordType.GROUP_METADATA


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str
    TYPE = RecordType.CONSUMER_GROUP_METADATA


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str
    TYPE = RecordType.CONSUMER_GROUP_MEMBER_METADATA


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str
    TYPE = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str
    TYPE = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str
    TYPE = RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regex: str
    TYPE = RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION


@dataclass(frozen=True, slots=True)
class GroupConfigurationKey:
    group_id: str
    TYPE = RecordType.GROUP_CONFIGURATION


# Share groups (KIP-932): Kafka's record types 10-15.


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str
    TYPE = RecordType.SHARE_GROUP_MEMBER_METADATA


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str
    TYPE = RecordType.SHARE_GROUP_METADATA


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str
    TYPE = RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str
    TYPE = RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str
    TYPE = RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str
    TYPE = RecordType.SHARE_GROUP_STATE_PARTITION_METADATA


SHARE_GROUP_KEYS = (ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey,
                    ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey,
                    ShareGroupStatePartitionMetadataKey)


# ---------------------------------------------------------------- values
# Values are NamedTuples: immutable and several times cheaper to build than frozen dataclasses,
# which matters when a shard loads millions of them. Keys stay dataclasses (distinct types never
# compare equal) and are shared through the decode cache.


class OffsetCommitValue(NamedTuple):
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = -1  # only OffsetCommit < v5 requests set it (written as value v1)


class GroupMetadataMember(NamedTuple):
    """One member of a classic group as persisted: its subscription (the metadata of the group's
    selected protocol) and the assignment bytes the leader gave it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class GroupMetadataValue(NamedTuple):
    """A classic group's last persisted generation (Kafka's GroupMetadataValue, written as v3)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[GroupMetadataMember, ...] = ()


class ConsumerGroupMetadataValue(NamedTuple):
    epoch: int
    metadata_hash: int = 0  # tagged field 0 (KIP-1101)


class ClassicMemberMetadata(NamedTuple):
    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...] = ()


class ClientAssignorMetadata(NamedTuple):
    """One client-side assignor a member supports (the seeds' `ClientAssignors` entry)."""

    name: str
    minimum_version: int
    maximum_version: int
    reason: int
    metadata_version: int
    metadata_bytes: bytes


class ConsumerGroupMemberMetadataValue(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged field 0
    client_assignors: tuple[ClientAssignorMetadata, ...] = ()  # cohort's tagged field 1000


class ConsumerGroupTargetAssignmentMetadataValue(NamedTuple):
    assignment_epoch: int


class ConsumerGroupTargetAssignmentMemberValue(NamedTuple):
    partitions: Assignment
    # What a client-side assignor gave the member beside its partitions (cohort's tagged field 1000)
    error: int = 0
    metadata_version: int = 0
    metadata_bytes: bytes = b""


class ConsumerGroupCurrentMemberAssignmentValue(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment


class ConsumerGroupRegularExpressionValue(NamedTuple):
    topics: tuple[str, ...]
    version: int
    timestamp: int


class GroupConfigurationValue(NamedTuple):
    configs: tuple[tuple[str, str], ...]


class ShareGroupMemberMetadataValue(NamedTuple):
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


class ShareGroupMetadataValue(NamedTuple):
    epoch: int
    metadata_hash: int = 0


class ShareGroupTargetAssignmentMetadataValue(NamedTuple):
    assignment_epoch: int


class ShareGroupTargetAssignmentMemberValue(NamedTuple):
    partitions: Assignment


class ShareGroupCurrentMemberAssignmentValue(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: Assignment


class SharePartitionsInfo(NamedTuple):
    """Partitions of one topic in a share group's state metadata (Kafka's TopicPartitionsInfo)."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]
    create_timestamp: int = 0


class ShareGroupStatePartitionMetadataValue(NamedTuple):
    """Which share-partitions of the group have durable state: being initialized, initialized
    (assignable), being deleted (topic id -> name)."""

    initializing: tuple[SharePartitionsInfo, ...] = ()
    initialized: tuple[SharePartitionsInfo, ...] = ()
    deleting: tuple[tuple[uuid.UUID, str], ...] = ()


class Record(NamedTuple):
    """One coordinator record; `value is None` is a tombstone."""

    key: object
    value: object | None


# ---------------------------------------------------------------- transactions (KIP-98 / KIP-447)
# A TxnOffsetCommit writes ordinary OffsetCommit records in a transactional batch of the
# producer; in memory they are told apart by their key type, so the state keeps them pending
# until the producer's marker. A marker is a control batch of its own.


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitKey:
    """An OffsetCommit record in a transactional batch of ``producer_id`` (value: the pending
    OffsetCommitValue; as an undo record, a PendingOffset or None)."""

    group_id: str
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int = field(default=-1, compare=False)
    TYPE = RecordType.OFFSET_COMMIT


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A COMMIT or ABORT marker of a producer's transaction (a control batch; value None)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int = 0
    groups: tuple[str, ...] = field(default=(), compare=False)  # in memory: the groups it settled here


class PendingOffset(NamedTuple):
    """A transactional offset awaiting its marker; ``beaten`` once a plain commit of the same
    partition came after it (a COMMIT marker then leaves the plain one in place, as Kafka does)."""

    value: OffsetCommitValue
    beaten: bool = False


@dataclass(frozen=True, slots=True)
class TxnOffsetsRestore:
    """Undo record: puts back a group's pending transactional offsets and the committed offsets
    a transactional step changed (``committed``: partition -> value or None)."""

    group_id: str
    pending: dict
    committed: dict


# ---------------------------------------------------------------- encoding primitives

_I8 = struct.Struct(">b")
_OFFSET_V3_HEAD = struct.Struct(">qih")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """Bytes that are not a valid coordinator record."""


_NO_TAGS: dict = {}
_uuid_cache: dict[bytes, uuid.UUID] = {}


def _uuid_from_bytes(b: bytes) -> uuid.UUID:
    """Topic ids repeat across records: share one UUID object per id (bounded cache)."""
    u = _uuid_cache.get(b)
    if u is None:
        if len(_uuid_cache) > 100_000:
            _uuid_cache.clear()
        u = _uuid_cache[b] = uuid.UUID(bytes=b)
    return u


_INT_ARRAYS: dict[int, struct.Struct] = {}


def _ints(n: int) -> struct.Struct:
    found = _INT_ARRAYS.get(n)
    if found is None:
        found = struct.Struct(f">{n}i")
        if n <= 4096:
            _INT_ARRAYS[n] = found
    return found


def _uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _str16(out: bytearray, s: str) -> None:
    b = s.encode()
    out += _I16.pack(len(b))
    out += b


def _bytes32(out: bytearray, b: bytes) -> None:
    out += _I32.pack(len(b))
    out += b


def _nstr16(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _I16.pack(-1)
    else:
        _str16(out, s)


def _cstr(out: bytearray, s: str | None) -> None:
    """Compact (nullable) string."""
    if s is None:
        out.append(0)
        return
    b = s.encode()
    _uvarint(out, len(b) + 1)
    out += b


def _cbytes(out: bytearray, b: bytes) -> None:
    _uvarint(out, len(b) + 1)
    out += b


def _topic_partitions(out: bytearray, assignment: Assignment) -> None:
    _uvarint(out, len(assignment) + 1)
    for topic_id in sorted(assignment):
        parts = assignment[topic_id]
        out += topic_id.bytes
        _uvarint(out, len(parts) + 1)
        for p in parts:
            out += _I32.pack(p)
        out.append(0)  # no tagged fields


# cohort's own tags in Kafka's record schemas, far above Kafka's (0, 1, ...) so they never meet.
CLIENT_ASSIGNORS_TAG = 1000
ASSIGNOR_RESULT_TAG = 1000


def _tags(out: bytearray, tags: list[tuple[int, bytes]]) -> None:
    """A tagged-field section: count, then (tag, size, bytes) in tag order."""
    _uvarint(out, len(tags))
    for tag, body in tags:
        _uvarint(out, tag)
        _uvarint(out, len(body))
        out += body


class _Reader:
    """Cursor over a record's bytes. Short input surfaces as IndexError / struct.error, which
    `decode` turns into RecordFormatError."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = bytes(buf)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        pos = self.pos
        end = pos + n
        if n < 0 or end > len(self.buf):
            raise RecordFormatError("record truncated")
        self.pos = end
        return self.buf[pos:end]

    def i8(self) -> int:
        (v,) = _I8.unpack_from(self.buf, self.pos)
        self.pos += 1
        return v

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def i64(self) -> int:
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def uvarint(self) -> int:
        buf, pos = self.buf, self.pos
        b = buf[pos]
        pos += 1
        if b < 0x80:
            self.pos = pos
            return b
        result, shift = b & 0x7F, 7
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return result
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def str16(self) -> str:
        n = self.i16()
        if n < 0:
            raise RecordFormatError("null where a string is required")
        return self._take(n).decode()

    def nstr16(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def bytes32(self) -> bytes:
        n = self.i32()
        if n < 0:
            raise RecordFormatError("null where bytes are required")
        return self._take(n)

    def cstr(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode()

    def cstr_required(self) -> str:
        n = self.uvarint()
        if n == 0:
            raise RecordFormatError("null where a string is required")
        return self._take(n - 1).decode()

    def cbytes(self) -> bytes:
        n = self.uvarint()
        if n == 0:
            raise RecordFormatError("null where bytes are required")
        return self._take(n - 1)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def count(self) -> int:
        n = self.uvarint()
        if n == 0:
            raise RecordFormatError("null where an array is required")
        return n - 1

    def tagged(self) -> dict[int, bytes]:
        n = self.uvarint()
        if n == 0:
            return _NO_TAGS
        fields = {}
        for _ in range(n):
            tag = self.uvarint()
            fields[tag] = self._take(self.uvarint())
        return fields

    def topic_partitions(self) -> dict[uuid.UUID, tuple[int, ...]]:
        """A compact array of {TopicId, Partitions, tagged fields}; the hot path of every load."""
        buf = self.buf
        size = len(buf)
        result = {}
        for _ in range(self.count()):
            pos = self.pos
            end = pos + 16
            if end > size:
                raise RecordFormatError("record truncated")
            topic_id = _uuid_from_bytes(buf[pos:end])
            n = buf[end]
            if n == 0 or n >= 0x80:
                self.pos = end
                n = self.count()
            else:
                n -= 1
                self.pos = end + 1
            parts = _ints(n).unpack_from(buf, self.pos)
            self.pos += 4 * n
            result[topic_id] = parts if n < 2 or list(parts) == sorted(parts) else tuple(sorted(parts))
            if buf[self.pos] == 0:
                self.pos += 1
            else:
                self.tagged()
        return result

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise RecordFormatError(f"{len(self.buf) - self.pos} trailing bytes")


# ---------------------------------------------------------------- keys: encode / decode


def encode_key(key: object) -> bytes:
    out = bytearray(_I16.pack(key.TYPE))  # type: ignore[attr-defined]
    if isinstance(key, (OffsetCommitKey, TxnOffsetCommitKey)):
        _str16(out, key.group_id)
        _str16(out, key.topic)
        out += _I32.pack(key.partition)
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        _str16(out, key.group_id)
        _str16(out, key.regex)
    elif isinstance(key, (ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                          ConsumerGroupCurrentMemberAssignmentKey, ShareGroupMemberMetadataKey,
                          ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey)):
        _str16(out, key.group_id)
        _str16(out, key.member_id)
    else:
        _str16(out, key.group_id)  # type: ignore[attr-defined]
    return bytes(out)


_GROUP_KEYS: dict[int, type] = {
    RecordType.GROUP_METADATA: GroupMetadataKey,
    RecordType.CONSUMER_GROUP_METADATA: ConsumerGroupMetadataKey,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
    RecordType.GROUP_CONFIGURATION: GroupConfigurationKey,
    RecordType.SHARE_GROUP_METADATA: ShareGroupMetadataKey,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: ShareGroupTargetAssignmentMetadataKey,
    RecordType.SHARE_GROUP_STATE_PARTITION_METADATA: ShareGroupStatePartitionMetadataKey,
}
_MEMBER_KEYS: dict[int, type] = {
    RecordType.CONSUMER_GROUP_MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
    RecordType.SHARE_GROUP_MEMBER_METADATA: ShareGroupMemberMetadataKey,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: ShareGroupTargetAssignmentMemberKey,
    RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: ShareGroupCurrentMemberAssignmentKey,
}


_key_cache: dict[bytes, object] = {}


def decode_key(data: bytes) -> object:
    """Parse a key. Keys repeat throughout a log (every heartbeat rewrites the same member's
    keys), so decoded keys are shared through a bounded cache; they are immutable."""
    data = bytes(data)
    key = _key_cache.get(data)
    if key is None:
        key = _decode_key(data)
        if len(_key_cache) >= 200_000:
            _key_cache.clear()
        _key_cache[data] = key
    return key


def _str16_at(data: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    end = pos + n
    if n < 0 or end > len(data):
        raise RecordFormatError("record key truncated")
    return data[pos:end].decode(), end


def _decode_key(data: bytes) -> object:
    (rtype,) = _I16.unpack_from(data, 0)
    group_id, pos = _str16_at(data, 2)
    if rtype == 1 or rtype == 0:
        topic, pos = _str16_at(data, pos)
        (partition,) = _I32.unpack_from(data, pos)
        key: object = OffsetCommitKey(group_id, topic, partition)
        pos += 4
    elif rtype in _MEMBER_KEYS:
        member_id, pos = _str16_at(data, pos)
        key = _MEMBER_KEYS[rtype](group_id, member_id)  # type: ignore[call-arg]
    elif rtype in _GROUP_KEYS:
        key = _GROUP_KEYS[rtype](group_id)  # type: ignore[call-arg]
    elif rtype == RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION:
        regex, pos = _str16_at(data, pos)
        key = ConsumerGroupRegularExpressionKey(group_id, regex)
    else:
        raise RecordFormatError(f"unsupported coordinator record type {rtype}")
    if pos != len(data):
        raise RecordFormatError(f"{len(data) - pos} trailing bytes in record key")
    return key


# ---------------------------------------------------------------- values: encode / decode


def encode_value(value: object | None) -> bytes | None:
    if value is None:
        return None
    out = bytearray()
    if isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
        out += b"\x00\x00"
        out += _I32.pack(value.member_epoch)
        out += _I32.pack(value.previous_member_epoch)
        out += struct.pack(">b", int(value.state))
        _topic_partitions(out, value.assigned_partitions)
        _topic_partitions(out, value.partitions_pending_revocation)
        out.append(0)
    elif isinstance(value, ConsumerGroupMemberMetadataValue):
        out += b"\x00\x00"
        _cstr(out, value.instance_id)
        _cstr(out, value.rack_id)
        _cstr(out, value.client_id)
        _cstr(out, value.client_host)
        _uvarint(out, len(value.subscribed_topic_names) + 1)
        for name in value.subscribed_topic_names:
            _cstr(out, name)
        _cstr(out, value.subscribed_topic_regex)
        out += _I32.pack(value.rebalance_timeout_ms)
        _cstr(out, value.server_assignor)
        tags: list[tuple[int, bytes]] = []
        classic = value.classic_member_metadata
        if classic is not None:
            body = bytearray(_I32.pack(classic.session_timeout_ms))
            _uvarint(body, len(classic.supported_protocols) + 1)
            for name, meta in classic.supported_protocols:
                _cstr(body, name)
                _cbytes(body, meta)
                body.append(0)
            body.append(0)
            tags.append((0, bytes(body)))
        if value.client_assignors:
            body = bytearray()
            _uvarint(body, len(value.client_assignors) + 1)
            for a in value.client_assignors:
                _cstr(body, a.name)
                body += struct.pack(">hhbh", a.minimum_version, a.maximum_version, a.reason, a.metadata_version)
                _cbytes(body, a.metadata_bytes)
                body.append(0)
            tags.append((CLIENT_ASSIGNORS_TAG, bytes(body)))
        _tags(out, tags)
    elif isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
        out += b"\x00\x00"
        _topic_partitions(out, value.partitions)
        if value.error or value.metadata_version or value.metadata_bytes:
            body = bytearray(struct.pack(">bh", value.error, value.metadata_version))
            _cbytes(body, value.metadata_bytes)
            _tags(out, [(ASSIGNOR_RESULT_TAG, bytes(body))])
        else:
            out.append(0)
    elif isinstance(value, ConsumerGroupMetadataValue):
        out += b"\x00\x00"
        out += _I32.pack(value.epoch)
        if value.metadata_hash:
            out += b"\x01\x00\x08"
            out += _I64.pack(value.metadata_hash)
        else:
            out.append(0)
    elif isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
        out += b"\x00\x00"
        out += _I32.pack(value.assignment_epoch)
        out.append(0)
    elif isinstance(value, OffsetCommitValue):
        if value.expire_timestamp != -1:
            out += _I16.pack(1)
            out += _I64.pack(value.offset)
            _str16(out, value.metadata)
            out += _I64.pack(value.commit_timestamp)
            out += _I64.pack(value.expire_timestamp)
        else:
            out += _I16.pack(3)
            out += _I64.pack(value.offset)
            out += _I32.pack(value.leader_epoch)
            _str16(out, value.metadata)
            out += _I64.pack(value.commit_timestamp)
    elif isinstance(value, ConsumerGroupRegularExpressionValue):
        out += b"\x00\x00"
        _uvarint(out, len(value.topics) + 1)
        for topic in value.topics:
            _cstr(out, topic)
        out += _I64.pack(value.version)
        out += _I64.pack(value.timestamp)
        out.append(0)
    elif isinstance(value, GroupMetadataValue):
        out += _I16.pack(3)
        _str16(out, value.protocol_type)
        out += _I32.pack(value.generation)
        _nstr16(out, value.protocol)
        _nstr16(out, value.leader)
        out += _I64.pack(value.current_state_timestamp)
        out += _I32.pack(len(value.members))
        for m in value.members:
            _str16(out, m.member_id)
            _nstr16(out, m.instance_id)
            _str16(out, m.client_id)
            _str16(out, m.client_host)
            out += _I32.pack(m.rebalance_timeout_ms)
            out += _I32.pack(m.session_timeout_ms)
            _bytes32(out, m.subscription)
            _bytes32(out, m.assignment)
    elif isinstance(value, GroupConfigurationValue):
        out += b"\x00\x00"
        _uvarint(out, len(value.configs) + 1)
        for name, val in value.configs:
            _cstr(out, name)
            _cstr(out, val)
            out.append(0)
        out.append(0)
    elif type(value) in _SHARE_ENCODERS:
        out += b"\x00\x00"
        _SHARE_ENCODERS[type(value)](out, value)
        out.append(0)
    else:
        raise TypeError(f"not a coordinator record value: {value!r}")
    return bytes(out)


def _flexible_version(r: _Reader, rtype: int) -> None:
    version = r.i16()
    if version != 0:
        raise RecordFormatError(f"unsupported value version {version} for {RecordType(rtype).name}")


def _offset_commit(r: _Reader) -> OffsetCommitValue:
    version = r.i16()
    if version == 3:
        offset, leader_epoch, n = _OFFSET_V3_HEAD.unpack_from(r.buf, 2)
        if n < 0:
            raise RecordFormatError("null where a string is required")
        r.pos = 16
        metadata = r._take(n).decode()
        (commit_ts,) = _I64.unpack_from(r.buf, r.pos)
        r.pos += 8
        return OffsetCommitValue(offset, leader_epoch, metadata, commit_ts)
    if version in (0, 2):
        return OffsetCommitValue(r.i64(), -1, r.str16(), r.i64())
    if version == 1:
        return OffsetCommitValue(r.i64(), -1, r.str16(), r.i64(), r.i64())
    if version == 4:
        value = OffsetCommitValue(r.i64(), r.i32(), r.cstr_required(), r.i64())
        r.tagged()
        return value
    raise RecordFormatError(f"unsupported OffsetCommit value version {version}")


_STATES = {int(s): s for s in MemberState}


def _current_assignment(r: _Reader) -> ConsumerGroupCurrentMemberAssignmentValue:
    _flexible_version(r, RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)
    epoch, prev = r.i32(), r.i32()
    state = _STATES.get(r.i8(), MemberState.UNKNOWN)
    value = ConsumerGroupCurrentMemberAssignmentValue(epoch, prev, state, r.topic_partitions(), r.topic_partitions())
    r.tagged()
    return value


def _member_metadata(r: _Reader) -> ConsumerGroupMemberMetadataValue:
    _flexible_version(r, RecordType.CONSUMER_GROUP_MEMBER_METADATA)
    instance_id, rack_id = r.cstr(), r.cstr()
    client_id, client_host = r.cstr_required(), r.cstr_required()
    names = tuple([r.cstr_required() for _ in range(r.count())])
    regex = r.cstr()
    rebalance_timeout = r.i32()
    assignor = r.cstr()
    classic = None
    tags = r.tagged()
    if 0 in tags:
        c = _Reader(tags[0])
        session = c.i32()
        protocols = []
        for _ in range(c.count()):
            protocols.append((c.cstr_required(), c.cbytes()))
            c.tagged()
        c.tagged()
        c.done()
        classic = ClassicMemberMetadata(session, tuple(protocols))
    client_assignors: tuple[ClientAssignorMetadata, ...] = ()
    if CLIENT_ASSIGNORS_TAG in tags:
        c = _Reader(tags[CLIENT_ASSIGNORS_TAG])
        found = []
        for _ in range(c.count()):
            name = c.cstr_required()
            lo, hi, reason, version = c.i16(), c.i16(), c.i8(), c.i16()
            found.append(ClientAssignorMetadata(name, lo, hi, reason, version, c.cbytes()))
            c.tagged()
        c.done()
        client_assignors = tuple(found)
    return ConsumerGroupMemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                            rebalance_timeout, assignor, classic, client_assignors)


def _target_member(r: _Reader) -> ConsumerGroupTargetAssignmentMemberValue:
    _flexible_version(r, RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER)
    partitions = r.topic_partitions()
    tags = r.tagged()
    if ASSIGNOR_RESULT_TAG not in tags:
        return ConsumerGroupTargetAssignmentMemberValue(partitions)
    c = _Reader(tags[ASSIGNOR_RESULT_TAG])
    error, version = c.i8(), c.i16()
    metadata = c.cbytes()
    c.done()
    return ConsumerGroupTargetAssignmentMemberValue(partitions, error, version, metadata)


def _group_metadata(r: _Reader) -> ConsumerGroupMetadataValue:
    _flexible_version(r, RecordType.CONSUMER_GROUP_METADATA)
    epoch = r.i32()
    tags = r.tagged()
    metadata_hash = _I64.unpack(tags[0])[0] if 0 in tags else 0  # struct.error if not 8 bytes
    return ConsumerGroupMetadataValue(epoch, metadata_hash)


def _target_metadata(r: _Reader) -> ConsumerGroupTargetAssignmentMetadataValue:
    _flexible_version(r, RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
    value = ConsumerGroupTargetAssignmentMetadataValue(r.i32())
    r.tagged()
    return value


def _regular_expression(r: _Reader) -> ConsumerGroupRegularExpressionValue:
    _flexible_version(r, RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION)
    topics = tuple([r.cstr_required() for _ in range(r.count())])
    value = ConsumerGroupRegularExpressionValue(topics, r.i64(), r.i64())
    r.tagged()
    return value


def _classic_group_metadata(r: _Reader) -> GroupMetadataValue:
    """Kafka's GroupMetadataValue v0-v3 (non-flexible; v4+ is not written by any Kafka release)."""
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unsupported GroupMetadata value version {version}")
    protocol_type, generation, protocol, leader = r.str16(), r.i32(), r.nstr16(), r.nstr16()
    timestamp = r.i64() if version >= 2 else -1
    members = []
    n = r.i32()
    if n < 0:
        raise RecordFormatError("null where an array is required")
    for _ in range(n):
        member_id = r.str16()
        instance_id = r.nstr16() if version >= 3 else None
        client_id, client_host = r.str16(), r.str16()
        session = r.i32()
        rebalance = session
        if version >= 1:
            rebalance, session = session, r.i32()
        members.append(GroupMetadataMember(member_id, instance_id, client_id, client_host, rebalance, session,
                                           r.bytes32(), r.bytes32()))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))


def _group_configuration(r: _Reader) -> GroupConfigurationValue:
    _flexible_version(r, RecordType.GROUP_CONFIGURATION)
    configs = []
    for _ in range(r.count()):
        configs.append((r.cstr_required(), r.cstr_required()))
        r.tagged()
    r.tagged()
    return GroupConfigurationValue(tuple(configs))


# ---------------------------------------------------------------- share group values (flexible v0)


def _encode_share_member(out: bytearray, v: ShareGroupMemberMetadataValue) -> None:
    _cstr(out, v.rack_id)
    _cstr(out, v.client_id)
    _cstr(out, v.client_host)
    _uvarint(out, len(v.subscribed_topic_names) + 1)
    for name in v.subscribed_topic_names:
        _cstr(out, name)


def _encode_share_partitions_info(out: bytearray, infos: tuple[SharePartitionsInfo, ...]) -> None:
    _uvarint(out, len(infos) + 1)
    for info in infos:
        out += info.topic_id.bytes
        _cstr(out, info.topic_name)
        _uvarint(out, len(info.partitions) + 1)
        for p in info.partitions:
            out += _I32.pack(p)
        out += _I64.pack(info.create_timestamp)
        out.append(0)


def _encode_share_state_partitions(out: bytearray, v: ShareGroupStatePartitionMetadataValue) -> None:
    _encode_share_partitions_info(out, v.initializing)
    _encode_share_partitions_info(out, v.initialized)
    _uvarint(out, len(v.deleting) + 1)
    for topic_id, name in v.deleting:
        out += topic_id.bytes
        _cstr(out, name)
        out.append(0)


def _encode_share_current(out: bytearray, v: ShareGroupCurrentMemberAssignmentValue) -> None:
    out += _I32.pack(v.member_epoch)
    out += _I32.pack(v.previous_member_epoch)
    out += _I8.pack(int(v.state))
    _topic_partitions(out, v.assigned_partitions)


_SHARE_ENCODERS: dict[type, object] = {
    ShareGroupMemberMetadataValue: _encode_share_member,
    ShareGroupMetadataValue: lambda out, v: out.extend(_I32.pack(v.epoch) + _I64.pack(v.metadata_hash)),
    ShareGroupTargetAssignmentMetadataValue: lambda out, v: out.extend(_I32.pack(v.assignment_epoch)),
    ShareGroupTargetAssignmentMemberValue: lambda out, v: _topic_partitions(out, v.partitions),
    ShareGroupCurrentMemberAssignmentValue: _encode_share_current,
    ShareGroupStatePartitionMetadataValue: _encode_share_state_partitions,
}


def _share_member(r: _Reader) -> ShareGroupMemberMetadataValue:
    _flexible_version(r, RecordType.SHARE_GROUP_MEMBER_METADATA)
    rack_id, client_id, client_host = r.cstr(), r.cstr_required(), r.cstr_required()
    names = tuple([r.cstr_required() for _ in range(r.count())])
    r.tagged()
    return ShareGroupMemberMetadataValue(rack_id, client_id, client_host, names)


def _share_group(r: _Reader) -> ShareGroupMetadataValue:
    _flexible_version(r, RecordType.SHARE_GROUP_METADATA)
    epoch = r.i32()
    metadata_hash = r.i64() if len(r.buf) - r.pos > 1 else 0  # Kafka 4.0 wrote the epoch alone
    r.tagged()
    return ShareGroupMetadataValue(epoch, metadata_hash)


def _share_target_metadata(r: _Reader) -> ShareGroupTargetAssignmentMetadataValue:
    _flexible_version(r, RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA)
    value = ShareGroupTargetAssignmentMetadataValue(r.i32())
    r.tagged()
    return value


def _share_target_member(r: _Reader) -> ShareGroupTargetAssignmentMemberValue:
    _flexible_version(r, RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER)
    value = ShareGroupTargetAssignmentMemberValue(r.topic_partitions())
    r.tagged()
    return value


def _share_current(r: _Reader) -> ShareGroupCurrentMemberAssignmentValue:
    _flexible_version(r, RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT)
    epoch, prev = r.i32(), r.i32()
    state = _STATES.get(r.i8(), MemberState.UNKNOWN)
    value = ShareGroupCurrentMemberAssignmentValue(epoch, prev, state, r.topic_partitions())
    r.tagged()
    return value


def _share_partitions_info(r: _Reader) -> tuple[SharePartitionsInfo, ...]:
    infos = []
    for _ in range(r.count()):
        topic_id, name = r.uuid(), r.cstr_required()
        n = r.count()
        parts = _ints(n).unpack_from(r.buf, r.pos)
        r.pos += 4 * n
        infos.append(SharePartitionsInfo(topic_id, name, tuple(sorted(parts)), r.i64()))
        r.tagged()
    return tuple(infos)


def _share_state_partitions(r: _Reader) -> ShareGroupStatePartitionMetadataValue:
    _flexible_version(r, RecordType.SHARE_GROUP_STATE_PARTITION_METADATA)
    initializing, initialized = _share_partitions_info(r), _share_partitions_info(r)
    deleting = []
    for _ in range(r.count()):
        deleting.append((r.uuid(), r.cstr_required()))
        r.tagged()
    r.tagged()
    return ShareGroupStatePartitionMetadataValue(initializing, initialized, tuple(deleting))


_VALUE_DECODERS = {
    int(RecordType.SHARE_GROUP_MEMBER_METADATA): _share_member,
    int(RecordType.SHARE_GROUP_METADATA): _share_group,
    int(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA): _share_target_metadata,
    int(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER): _share_target_member,
    int(RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT): _share_current,
    int(RecordType.SHARE_GROUP_STATE_PARTITION_METADATA): _share_state_partitions,
    int(RecordType.OFFSET_COMMIT_LEGACY): _offset_commit,
    int(RecordType.OFFSET_COMMIT): _offset_commit,
    int(RecordType.GROUP_METADATA): _classic_group_metadata,
    int(RecordType.CONSUMER_GROUP_METADATA): _group_metadata,
    int(RecordType.CONSUMER_GROUP_MEMBER_METADATA): _member_metadata,
    int(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA): _target_metadata,
    int(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER): _target_member,
    int(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT): _current_assignment,
    int(RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION): _regular_expression,
    int(RecordType.GROUP_CONFIGURATION): _group_configuration,
}


def _decode_value(rtype: int, data: bytes) -> object:
    decoder = _VALUE_DECODERS.get(rtype)
    if decoder is None:
        raise RecordFormatError(f"unsupported coordinator record type {rtype}")
    r = _Reader(data)
    value = decoder(r)
    r.done()
    return value


_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def encode(record: Record) -> tuple[bytes, bytes | None]:
    """The (key, value) bytes of a record; value None for a tombstone. A marker's are those of
    its control record (`transaction_of` says which batch the records go in)."""
    key = record.key
    if type(key) is TxnMarker:
        return _CONTROL_KEY.pack(0, 1 if key.commit else 0), _CONTROL_VALUE.pack(0, key.coordinator_epoch)
    return encode_key(key), encode_value(record.value)


def transaction_of(records: list[Record]) -> TxnBatch | None:
    """The batch the records of one write must go in: a transactional batch for transactional
    offsets, a control batch for a marker, None for a plain batch."""
    if not records:
        return None
    key = records[0].key
    if type(key) is TxnMarker:
        return TxnBatch(key.producer_id, key.producer_epoch, COMMIT_MARKER if key.commit else ABORT_MARKER)
    if type(key) is TxnOffsetCommitKey:
        return TxnBatch(key.producer_id, key.producer_epoch)
    return None


def decode(key: bytes, value: bytes | None, transaction: TxnBatch | None = None) -> Record:
    """Parse a record written by `encode` (or by Kafka, for the shared types); ``transaction``
    is the batch's producer if the batch is transactional."""
    if transaction is not None:
        return _decode_transactional(key, value, transaction)
    try:
        decoded_key = decode_key(key)
        if value is None:
            return Record(decoded_key, None)
        rtype = decoded_key.TYPE  # type: ignore[attr-defined]
        if rtype == 1 and value[:2] == b"\x00\x03":  # the most common record of all: OffsetCommit v3
            offset, leader_epoch, n = _OFFSET_V3_HEAD.unpack_from(value, 2)
            if 0 <= n and len(value) == 24 + n:
                (commit_ts,) = _I64.unpack_from(value, 16 + n)
                return Record(decoded_key, OffsetCommitValue(offset, leader_epoch, value[16:16 + n].decode(), commit_ts))
        return Record(decoded_key, _decode_value(rtype, value))
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise RecordFormatError(f"malformed coordinator record: {exc}") from None


def _decode_transactional(key: bytes, value: bytes | None, transaction: TxnBatch) -> Record:
    if transaction.marker >= 0:
        try:
            _, epoch = _CONTROL_VALUE.unpack_from(value or b"")
        except struct.error:
            epoch = 0
        return Record(TxnMarker(transaction.producer_id, transaction.producer_epoch,
                                transaction.marker == COMMIT_MARKER, epoch), None)
    record = decode(key, value)
    k = record.key
    if type(k) is OffsetCommitKey and record.value is not None:
        return Record(TxnOffsetCommitKey(k.group_id, k.topic, k.partition, transaction.producer_id,
                                         transaction.producer_epoch), record.value)
    return record

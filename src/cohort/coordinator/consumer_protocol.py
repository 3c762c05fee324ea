"""Kafka's ConsumerProtocol: the subscription and assignment bytes classic consumers embed.

A classic consumer (protocol type "consumer") puts a `Subscription` in each JoinGroup protocol's
metadata and the leader's SyncGroup carries an `Assignment` per member. The broker treats them as
opaque except for online migration, where it must read a classic member's topics, owned
partitions and rack, and write the assignment the server-side assignor computed. Layout
(non-flexible, big-endian; strings int16-length, arrays int32-count, bytes int32-length with -1
for null), headed by an int16 version:

* Subscription v0: Topics [string], UserData bytes?; v1 + OwnedPartitions [{Topic string,
  Partitions [int32]}]; v2 + GenerationId int32 (-1); v3 + RackId string?.
* Assignment v0-v3: AssignedPartitions [{Topic string, Partitions [int32]}], UserData bytes?.

A version above the highest known one is read as the highest known one and trailing bytes are
ignored, as Kafka does for forward compatibility.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_HIGHEST_VERSION = 3
ASSIGNMENT_HIGHEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


class ConsumerProtocolError(ValueError):
    """Bytes that are not a valid ConsumerProtocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = SUBSCRIPTION_HIGHEST_VERSION


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: TopicPartitions = field(default=())
    user_data: bytes | None = None
    version: int = ASSIGNMENT_HIGHEST_VERSION


# ---------------------------------------------------------------- encoding


def _string(out: bytearray, s: str) -> None:
    data = s.encode()
    out += _I16.pack(len(data))
    out += data


def _nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _I16.pack(-1)
    else:
        _string(out, s)


def _nullable_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(b))
        out += b


def _topic_partitions(out: bytearray, tps: TopicPartitions) -> None:
    out += _I32.pack(len(tps))
    for topic, parts in tps:
        _string(out, topic)
        out += _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)


def encode_subscription(sub: Subscription) -> bytes:
    version = sub.version
    if not 0 <= version <= SUBSCRIPTION_HIGHEST_VERSION:
        raise ValueError(f"unsupported subscription version {version}")
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(sub.topics))
    for topic in sub.topics:
        _string(out, topic)
    _nullable_bytes(out, sub.user_data)
    if version >= 1:
        _topic_partitions(out, sub.owned_partitions)
    if version >= 2:
        out += _I32.pack(sub.generation_id)
    if version >= 3:
        _nullable_string(out, sub.rack_id)
    return bytes(out)


def encode_assignment(assignment: Assignment) -> bytes:
    version = assignment.version
    if not 0 <= version <= ASSIGNMENT_HIGHEST_VERSION:
        raise ValueError(f"unsupported assignment version {version}")
    out = bytearray(_I16.pack(version))
    _topic_partitions(out, assignment.partitions)
    _nullable_bytes(out, assignment.user_data)
    return bytes(out)


# ---------------------------------------------------------------- decoding


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = bytes(buf)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise ConsumerProtocolError("truncated")
        data = self.buf[self.pos:end]
        self.pos = end
        return data

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise ConsumerProtocolError("null where a string is required")
        return self._take(n).decode()

    def nullable_string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def count(self) -> int:
        n = self.i32()
        if n < 0:
            raise ConsumerProtocolError("null where an array is required")
        if n > len(self.buf) - self.pos:  # every element takes at least one byte
            raise ConsumerProtocolError("array count larger than the data")
        return n

    def topic_partitions(self) -> TopicPartitions:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            n = self.count()
            out.append((topic, struct.unpack(f">{n}i", self._take(4 * n))))
        return tuple(out)


def _decode(data: bytes, what: str, read):
    if data is None:
        raise ConsumerProtocolError(f"null {what}")
    r = _Reader(data)
    try:
        version = r.i16()
        if version < 0:
            raise ConsumerProtocolError(f"negative {what} version {version}")
        return read(r, version)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ConsumerProtocolError(f"malformed {what}: {exc}") from None


def decode_subscription(data: bytes) -> Subscription:
    def read(r: _Reader, version: int) -> Subscription:
        known = min(version, SUBSCRIPTION_HIGHEST_VERSION)
        topics = tuple(r.string() for _ in range(r.count()))
        user_data = r.nullable_bytes()
        owned = r.topic_partitions() if known >= 1 else ()
        generation = r.i32() if known >= 2 else -1
        rack = r.nullable_string() if known >= 3 else None
        if version == known and r.pos != len(r.buf):
            raise ConsumerProtocolError(f"{len(r.buf) - r.pos} trailing bytes in subscription")
        return Subscription(topics, user_data, owned, generation, rack, known)

    return _decode(data, "subscription", read)


def decode_assignment(data: bytes) -> Assignment:
    """Decode an assignment; zero bytes (what a leader sends a member it gave nothing) is empty."""
    if data is not None and len(data) == 0:
        return Assignment()

    def read(r: _Reader, version: int) -> Assignment:
        known = min(version, ASSIGNMENT_HIGHEST_VERSION)
        if not r.buf[r.pos:]:
            return Assignment((), None, known)  # an empty assignment sent as just a version
        partitions = r.topic_partitions()
        user_data = r.nullable_bytes()
        if version == known and r.pos != len(r.buf):
            raise ConsumerProtocolError(f"{len(r.buf) - r.pos} trailing bytes in assignment")
        return Assignment(partitions, user_data, known)

    return _decode(data, "assignment", read)

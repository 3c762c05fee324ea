"""The transaction coordinator's records, as Kafka writes them to ``__transaction_state``.

Key: int16 version 0, then the transactional id (int16-length string). Value: Kafka's
``TransactionLogValue`` version 0 (written while ``transaction.version`` is below 1, which is
all cohort advertises): producer id, producer epoch, timeout, state id, the partitions of the
transaction (null when Empty), last update and start timestamps. Version 1 values (flexible,
written by Kafka 4 brokers with transaction.version >= 1) are read too. A null value is a
tombstone: the transactional id expired.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD_V0 = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


class TxnState(enum.IntEnum):
    """Kafka's transaction states with their record ids (PrepareEpochFence is never written)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (DescribeTransactions, ListTransactions)."""
        return _NAMES[self]


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_NAME = {name.lower(): state for state, name in _NAMES.items()}


@dataclass(frozen=True, slots=True)
class TxnKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TxnValue:
    """One transactional id's metadata (Kafka's TransactionMetadata as logged)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1  # the id before a rotation (v1 tag 0; cohort keeps it in memory)
    last_producer_epoch: int = -1  # the epoch before the last bump (recognises a retried bump)


class RecordFormatError(ValueError):
    """Bytes that are not a valid transaction log record."""


def encode_key(key: TxnKey) -> bytes:
    raw = key.transactional_id.encode()
    return _I16.pack(0) + _I16.pack(len(raw)) + raw


def decode_key(data: bytes) -> TxnKey:
    try:
        (version,) = _I16.unpack_from(data, 0)
        (n,) = _I16.unpack_from(data, 2)
        if version != 0 or n < 0 or len(data) != 4 + n:
            raise RecordFormatError(f"not a transaction log key (version {version})")
        return TxnKey(data[4:4 + n].decode())
    except (struct.error, UnicodeDecodeError) as exc:
        raise RecordFormatError(f"malformed transaction log key: {exc}") from None


def encode_value(value: TxnValue | None) -> bytes | None:
    if value is None:
        return None
    out = bytearray(_I16.pack(0))
    out += _HEAD_V0.pack(value.producer_id, value.producer_epoch, value.timeout_ms, int(value.state))
    if value.state == TxnState.EMPTY:
        out += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        out += _I32.pack(len(by_topic))
        for topic in sorted(by_topic):
            raw = topic.encode()
            out += _I16.pack(len(raw)) + raw + _I32.pack(len(by_topic[topic]))
            for p in sorted(by_topic[topic]):
                out += _I32.pack(p)
    out += _TIMES.pack(value.last_update_ms, value.start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, s: struct.Struct) -> tuple:
        out = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return out

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("field runs past the end of the record")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out


def decode_value(data: bytes | None) -> TxnValue | None:
    if data is None:
        return None
    try:
        r = _Reader(data)
        (version,) = r.take(_I16)
        if version == 0:
            return _value_v0(r)
        if version == 1:
            return _value_v1(r)
        raise RecordFormatError(f"transaction log value version {version} is not supported")
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, RecordFormatError):
            raise
        raise RecordFormatError(f"malformed transaction log value: {exc}") from None


def _value_v0(r: _Reader) -> TxnValue:
    pid, epoch, timeout, status = r.take(_HEAD_V0)
    (count,) = r.take(_I32)
    partitions = set()
    for _ in range(max(count, 0)):
        (n,) = r.take(_I16)
        topic = r.raw(n).decode()
        (k,) = r.take(_I32)
        for _ in range(k):
            partitions.add((topic, r.take(_I32)[0]))
    last_update, start = r.take(_TIMES)
    if r.pos != len(r.data):
        raise RecordFormatError("trailing bytes after a transaction log value")
    return TxnValue(pid, epoch, timeout, TxnState(status), frozenset(partitions), last_update, start)


def _value_v1(r: _Reader) -> TxnValue:
    """The flexible version: compact strings and arrays, tagged fields (PreviousProducerId = 0)."""
    (pid,) = r.take(struct.Struct(">q"))
    (epoch,) = r.take(_I16)
    (timeout,) = r.take(_I32)
    (status,) = r.take(struct.Struct(">b"))
    count = r.uvarint() - 1
    partitions = set()
    for _ in range(max(count, 0)):
        topic = r.raw(r.uvarint() - 1).decode()
        for _ in range(r.uvarint() - 1):
            partitions.add((topic, r.take(_I32)[0]))
        r.tags()
    last_update, start = r.take(_TIMES)
    tags = r.tags()
    previous = struct.unpack(">q", tags[0])[0] if len(tags.get(0, b"")) == 8 else -1
    return TxnValue(pid, epoch, timeout, TxnState(status), frozenset(partitions), last_update, start, previous)


def encode(record: tuple[TxnKey, TxnValue | None]) -> tuple[bytes, bytes | None]:
    return encode_key(record[0]), encode_value(record[1])


def decode(key: bytes | None, value: bytes | None, transaction: object = None) -> tuple[TxnKey, TxnValue | None]:
    if key is None:
        raise RecordFormatError("a transaction log record needs a key")
    return decode_key(key), decode_value(value)

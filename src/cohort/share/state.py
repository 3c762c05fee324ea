"""The share coordinator (Kafka's `ShareCoordinatorShard`): the durable state of share-partitions,
one shard per `__share_group_state` partition, hosted by the coordinator runtime.

Its records are Kafka's ShareSnapshot (type 0) keyed by (group, topic id, partition). Kafka
writes a snapshot now and then and ShareUpdate deltas between them, on a topic it prunes with
DeleteRecords; cohort writes a whole snapshot for every change instead, on a compacted topic:
a key's latest record is its whole state, so compaction alone bounds the log and a load keeps
the last record per key. A snapshot holds the start offset and the ranges above it that are not
plain AVAILABLE-never-delivered (acknowledged, archived, or released with a delivery count), so
it stays small: the records in flight are at most `group.share.partition.max.record.locks`.

Contract with the runtime (as for the group coordinator's shard): `handle(request, now)` applies
and returns the records (a `Result`), `commit(offset)` once durable, `revert(offset)` if the
append failed, `replay(record)` while loading. `read(key)` sees committed state only.
"""

from __future__ import annotations

import collections
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from cohort.coordinator.requests import Result
from cohort.protocol.writers import uvarint
from cohort.share.partition import AVAILABLE, StateBatch

SNAPSHOT_TYPE, UPDATE_TYPE = 0, 1
INVALID_REQUEST = 42


class ShareStateKey(NamedTuple):
    group_id: str
    topic_id: uuid.UUID
    partition: int


class ShareSnapshot(NamedTuple):
    """Kafka's ShareSnapshotValue."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple[StateBatch, ...]


class Record(NamedTuple):
    key: ShareStateKey
    value: ShareSnapshot | None  # None: a tombstone (the state is deleted)


@dataclass(frozen=True, slots=True)
class InitializeShareState:
    """Set a share-partition's start offset (the first fetch resolved it, or an admin reset it);
    what was recorded before is dropped."""

    key: ShareStateKey
    start_offset: int
    state_epoch: int = 0


@dataclass(frozen=True, slots=True)
class WriteShareState:
    """Changed ranges of a share-partition and its start offset, merged into its state."""

    key: ShareStateKey
    start_offset: int
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class DeleteShareState:
    keys: tuple[ShareStateKey, ...]


@dataclass(frozen=True, slots=True)
class ShareStateResponse:
    error_code: int = 0
    error_message: str | None = None


class ShareCoordinatorShard:
    """See the module docstring."""

    def __init__(self) -> None:
        self.state: dict[ShareStateKey, ShareSnapshot] = {}
        self.last_written_offset = 0
        self.last_committed_offset = 0
        self._undo: collections.deque[tuple[int, ShareStateKey, ShareSnapshot | None]] = collections.deque()
        self._pending: collections.Counter[ShareStateKey] = collections.Counter()

    # --- writes ---------------------------------------------------------------------------------

    def handle(self, request: object, now: int) -> Result:
        records: list[Record] = []
        if isinstance(request, WriteShareState):
            old = self.state.get(request.key)
            if old is None:
                return Result([], ShareStateResponse(INVALID_REQUEST, "The share-partition's state is not "
                                                     "initialized."), self.last_written_offset)
            start = max(old.start_offset, request.start_offset)
            batches = merge(old.batches, request.batches, start)
            records.append(Record(request.key, old._replace(
                snapshot_epoch=old.snapshot_epoch + 1, start_offset=start, write_timestamp=now, batches=batches,
                delivery_complete_count=request.delivery_complete_count)))
        elif isinstance(request, InitializeShareState):
            old = self.state.get(request.key)
            records.append(Record(request.key, ShareSnapshot(
                0 if old is None else old.snapshot_epoch + 1, request.state_epoch, 0, request.start_offset,
                -1 if request.start_offset < 0 else 0, now, now, ())))
        elif isinstance(request, DeleteShareState):
            records.extend(Record(k, None) for k in request.keys if k in self.state)
        else:
            raise TypeError(f"not a share coordinator request: {type(request).__name__}")
        for record in records:
            self._apply(record)
        return Result(records, ShareStateResponse(), self.last_written_offset)

    def _apply(self, record: Record) -> None:
        key = record.key
        self._undo.append((self.last_written_offset, key, self.state.get(key)))
        self._pending[key] += 1
        self._set(key, record.value)
        self.last_written_offset += 1

    def _set(self, key: ShareStateKey, value: ShareSnapshot | None) -> None:
        if value is None:
            self.state.pop(key, None)
        else:
            self.state[key] = value

    def commit(self, offset: int) -> None:
        while self._undo and self._undo[0][0] < offset:
            key = self._undo.popleft()[1]
            self._pending[key] -= 1
            if not self._pending[key]:
                del self._pending[key]
        self.last_committed_offset = max(self.last_committed_offset, offset)

    def revert(self, to_offset: int) -> list:
        while self._undo and self._undo[-1][0] >= to_offset:
            _, key, previous = self._undo.pop()
            self._set(key, previous)
            self._pending[key] -= 1
            if not self._pending[key]:
                del self._pending[key]
        self.last_written_offset = max(to_offset, self.last_committed_offset)
        return []

    # --- reads, loading, timers -----------------------------------------------------------------

    def read(self, key: ShareStateKey) -> ShareSnapshot | None:
        """The committed state of a share-partition (None: never initialized, or deleted)."""
        if not self._pending.get(key):
            return self.state.get(key)
        for _, k, previous in self._undo:  # the oldest uncommitted change holds the committed value
            if k == key:
                return previous
        return self.state.get(key)

    def replay(self, record: Record) -> None:
        self._set(record.key, record.value)
        self.last_written_offset += 1
        self.last_committed_offset = self.last_written_offset

    def on_loaded(self, now: int) -> None:
        pass

    def next_deadline(self) -> int | None:
        return None

    def expire(self, now: int) -> Result:
        return Result([], [], self.last_written_offset)

    def unload(self) -> list:
        return []


def merge(old: Iterable[StateBatch], new: Iterable[StateBatch], start: int) -> tuple[StateBatch, ...]:
    """Kafka's PersisterStateBatchCombiner: the newer ranges win where they overlap, nothing below
    `start` is kept, and AVAILABLE ranges never delivered (a hole reads the same) are dropped."""
    new = sorted(new)
    pieces: list[StateBatch] = []
    for b in old:
        pieces.extend(_minus(b, new))
    pieces.extend(new)
    out: list[StateBatch] = []
    for b in sorted(pieces):
        if b.last_offset < start:
            continue
        if b.first_offset < start:
            b = b._replace(first_offset=start)
        if b.delivery_state == AVAILABLE and b.delivery_count == 0:
            continue
        if out and out[-1].last_offset + 1 == b.first_offset and out[-1][2:] == b[2:]:
            out[-1] = out[-1]._replace(last_offset=b.last_offset)
        else:
            out.append(b)
    return tuple(out)


def _minus(b: StateBatch, cuts: list[StateBatch]) -> list[StateBatch]:
    out = []
    at = b.first_offset
    for c in cuts:
        if c.last_offset < at or c.first_offset > b.last_offset:
            continue
        if c.first_offset > at:
            out.append(b._replace(first_offset=at, last_offset=c.first_offset - 1))
        at = max(at, c.last_offset + 1)
    if at <= b.last_offset:
        out.append(b._replace(first_offset=at))
    return out


# --- the byte layout: Kafka's ShareSnapshotKey / ShareSnapshotValue -------------------------------

_KEY_HEAD = struct.Struct(">hh")
_I32 = struct.Struct(">i")
_SNAPSHOT_HEAD = struct.Struct(">hiiiq")
_TIMES = struct.Struct(">qq")
_BATCH = struct.Struct(">qqbh")


class ShareRecordError(ValueError):
    """Bytes that are not a share coordinator record."""


def encode(record: Record) -> tuple[bytes, bytes | None]:
    key = record.key
    group = key.group_id.encode()
    key_bytes = _KEY_HEAD.pack(SNAPSHOT_TYPE, len(group)) + group + key.topic_id.bytes + _I32.pack(key.partition)
    value = record.value
    if value is None:
        return key_bytes, None
    out = bytearray(_SNAPSHOT_HEAD.pack(0, value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                        value.start_offset))
    out += _TIMES.pack(value.create_timestamp, value.write_timestamp)
    out += uvarint(len(value.batches) + 1)
    for b in value.batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out.append(0)
    if value.delivery_complete_count != -1:  # tagged field 0 (Kafka 4.2)
        out += b"\x01\x00\x04" + _I32.pack(value.delivery_complete_count)
    else:
        out.append(0)
    return key_bytes, bytes(out)


def decode(key: bytes | None, value: bytes | None, transaction: object = None) -> Record:
    try:
        rtype, n = _KEY_HEAD.unpack_from(key or b"")
        if rtype != SNAPSHOT_TYPE:
            raise ShareRecordError(f"share coordinator record type {rtype} is not supported")
        pos = 4 + n
        group = key[4:pos].decode()  # type: ignore[index]
        topic_id = uuid.UUID(bytes=key[pos:pos + 16])  # type: ignore[index]
        (partition,) = _I32.unpack_from(key, pos + 16)  # type: ignore[arg-type]
        if len(key) != pos + 20:  # type: ignore[arg-type]
            raise ShareRecordError("trailing bytes in a share state key")
        record_key = ShareStateKey(group, topic_id, partition)
        if value is None:
            return Record(record_key, None)
        version, snapshot_epoch, state_epoch, leader_epoch, start = _SNAPSHOT_HEAD.unpack_from(value)
        if version != 0:
            raise ShareRecordError(f"ShareSnapshot value version {version} is not supported")
        pos = _SNAPSHOT_HEAD.size
        created, written = _TIMES.unpack_from(value, pos)
        pos += _TIMES.size
        count, pos = _read_uvarint(value, pos)
        batches = []
        for _ in range(count - 1):
            first, last, state, delivered = _BATCH.unpack_from(value, pos)
            pos += _BATCH.size
            pos = _skip_tags(value, pos)
            batches.append(StateBatch(first, last, state, delivered))
        complete = -1
        tags, pos = _read_uvarint(value, pos)
        for _ in range(tags):
            tag, pos = _read_uvarint(value, pos)
            size, pos = _read_uvarint(value, pos)
            if tag == 0 and size == 4:
                (complete,) = _I32.unpack_from(value, pos)
            pos += size
        if pos != len(value):
            raise ShareRecordError("trailing bytes in a share state value")
        return Record(record_key, ShareSnapshot(snapshot_epoch, state_epoch, leader_epoch, start, complete, created,
                                                written, tuple(batches)))
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ShareRecordError):
            raise
        raise ShareRecordError(f"malformed share coordinator record: {exc}") from None


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise ShareRecordError("varint too long")


def _skip_tags(buf: bytes, pos: int) -> int:
    n, pos = _read_uvarint(buf, pos)
    for _ in range(n):
        _, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos

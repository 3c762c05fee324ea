"""Idempotent producer state of one partition: what makes a retried batch a no-op.

For each producer id the log remembers its epoch and the sequence ranges and offsets of its
last five batches (Kafka's ``ProducerStateManager``). A client batch that repeats one of them
is a duplicate: it is answered with the original offsets and not appended. Otherwise the
epoch must not go back (INVALID_PRODUCER_EPOCH) and the sequence must continue the last batch
(OUT_OF_ORDER_SEQUENCE_NUMBER); a producer the log does not know, or one with no epoch yet, may
start at any sequence, as in Kafka 4 (its state may have expired or been deleted).

The state is a function of the log: :meth:`ProducerState.apply` is called for every appended
batch, and recovery loads the newest snapshot (taken at each segment roll and on close) and
applies the batches after it.

Transactions: a producer's first transactional batch opens its transaction at that batch's
offset (``current_txn_first_offset``); its COMMIT or ABORT marker closes it. The smallest first
offset of the open transactions is the partition's first unstable offset, which bounds the last
stable offset (LSO) read_committed consumers read up to. An aborted transaction is handed back
to the log for its aborted-transaction index.
"""

from __future__ import annotations

import collections
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Iterable

from crc32c import crc32c

from cohort.log import fileio
from cohort.protocol.records import ABORT_MARKER, COMMIT_MARKER, CONTROL_FLAG, TRANSACTIONAL_FLAG, BatchHeader

BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
NO_EPOCH = -1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOTS_KEPT = 2
# Kafka error codes raised by the checks.
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48

# Snapshot layout, Kafka's ProducerSnapshot v1: int16 version, uint32 CRC32C of what follows,
# int32 entry count, then per entry producer id, epoch, last sequence, last offset, offset
# delta, timestamp, coordinator epoch, current transaction first offset. cohort writes one
# entry per retained batch (oldest first), so all five survive a clean restart.
_PREFIX = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")

_log = logging.getLogger("cohort.log")


class ProducerStateError(Exception):
    """A client batch the producer state refuses, with its Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: collections.deque = field(default_factory=lambda: collections.deque(maxlen=BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def duplicate_of(self, h: BatchHeader) -> BatchMetadata | None:
        if h.producer_epoch != self.epoch:
            return None
        last_seq = last_sequence(h)
        for b in self.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last_seq:
                return b
        return None


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An entry of the aborted-transaction index (Kafka's AbortedTxn): the transaction's first
    offset, its ABORT marker's offset, and the LSO just after the marker was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def last_sequence(h: BatchHeader) -> int:
    """The batch's last sequence; sequences wrap from 2^31-1 to 0."""
    seq = h.base_sequence + h.last_offset_delta
    return seq - INT32_MAX - 1 if seq > INT32_MAX else seq


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerState:
    """The producer entries of one partition log, as of ``end_offset``."""

    __slots__ = ("directory", "producers", "end_offset", "ongoing")

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.end_offset = 0  # every batch below this offset has been applied
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none is open)."""
        return min(self.ongoing.values()) if self.ongoing else None

    # --- client appends ----------------------------------------------------------------------

    def check(self, h: BatchHeader) -> BatchMetadata | None:
        """Validate a client batch of producer ``h.producer_id`` (>= 0) before it is appended.

        Returns the retained batch it duplicates (answer its offsets, append nothing), or None
        if it may be appended; raises :class:`ProducerStateError` otherwise. Kafka checks for a
        duplicate first, then the epoch, then the sequence."""
        entry = self.producers.get(h.producer_id)
        if entry is None:
            return None  # unknown producer: any sequence is accepted
        dup = entry.duplicate_of(h)
        if dup is not None:
            return dup
        if not h.attributes & TRANSACTIONAL_FLAG and entry.current_txn_first_offset >= 0:
            raise ProducerStateError(
                INVALID_TXN_STATE,
                f"producer {h.producer_id} sent a non-transactional batch while its transaction is open")
        if h.producer_epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH,
                f"epoch {h.producer_epoch} of producer {h.producer_id} is older than its current epoch {entry.epoch}")
        if h.producer_epoch != entry.epoch:
            if h.base_sequence != 0 and entry.epoch != NO_EPOCH:
                raise ProducerStateError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {h.producer_id} starts epoch {h.producer_epoch} at sequence {h.base_sequence}, not 0")
        elif entry.batches and not _in_sequence(entry.last_seq, h.base_sequence):
            raise ProducerStateError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"out of order sequence for producer {h.producer_id} epoch {h.producer_epoch}: "
                f"{h.base_sequence} after {entry.last_seq}")
        return None

    def check_marker(self, producer_id: int, producer_epoch: int) -> None:
        """Validate a transaction marker before it is appended: its epoch may not be older than
        the producer's (a fenced producer's transaction is aborted with a newer epoch)."""
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} of producer {producer_id} is older than its current epoch {entry.epoch}")

    def apply(self, h: BatchHeader, base_offset: int, marker: int = -1) -> AbortedTxn | None:
        """Record an appended batch with producer id >= 0 (from a client, a replay or a
        coordinator) whose first offset is ``base_offset``; the caller moves ``end_offset``.
        ``marker`` is the control type of a control batch. Returns the transaction an ABORT
        marker closed, for the aborted-transaction index."""
        last_offset = base_offset + h.last_offset_delta
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerEntry(h.producer_id)
        if h.producer_epoch != entry.epoch:
            if h.producer_epoch > entry.epoch or not h.attributes & CONTROL_FLAG:
                entry.epoch = h.producer_epoch
                entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if h.attributes & CONTROL_FLAG:
            if marker not in (COMMIT_MARKER, ABORT_MARKER):
                return None
            first = entry.current_txn_first_offset
            if first < 0:
                return None  # a marker with no open transaction completes nothing
            entry.current_txn_first_offset = -1
            del self.ongoing[h.producer_id]
            if marker == COMMIT_MARKER:
                return None
            unstable = self.first_unstable_offset()
            return AbortedTxn(h.producer_id, first, last_offset, last_offset + 1 if unstable is None else unstable)
        if h.base_sequence >= 0:
            entry.batches.append(BatchMetadata(h.base_sequence, last_sequence(h), last_offset,
                                               h.last_offset_delta, h.max_timestamp))
        if h.attributes & TRANSACTIONAL_FLAG and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self.ongoing[h.producer_id] = base_offset
        return None

    def replay(self, batches: Iterable[tuple[BatchHeader, int]]) -> list[AbortedTxn]:
        """Apply (header, control type) of batches read back from the log (their offsets are
        the stored ones); returns the aborted transactions met."""
        aborted = []
        for h, marker in batches:
            if h.producer_id >= 0:
                done = self.apply(h, h.base_offset, marker)
                if done is not None:
                    aborted.append(done)
            self.end_offset = h.last_offset + 1
        return aborted

    # --- expiry ------------------------------------------------------------------------------

    def remove_expired(self, now: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (by their batches' timestamps, as Kafka
        does) with no open transaction. Returns how many were removed."""
        doomed = [pid for pid, e in self.producers.items()
                  if e.current_txn_first_offset < 0 and now - e.last_timestamp >= expiration_ms]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    def describe(self) -> list[ProducerEntry]:
        """Every producer entry (DescribeProducers)."""
        return list(self.producers.values())

    # --- snapshots ---------------------------------------------------------------------------

    def snapshot_offsets(self, names: list[str] | None = None) -> list[int]:
        """Offsets of the snapshot files (``names``: the directory's listing, if at hand)."""
        out = []
        for name in os.listdir(self.directory) if names is None else names:
            if name.endswith(SNAPSHOT_SUFFIX) and name[: -len(SNAPSHOT_SUFFIX)].isdigit():
                out.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
        return sorted(out)

    def take_snapshot(self) -> None:
        """Write the state as of ``end_offset`` to ``<end_offset>.snapshot`` (temp file, fsync,
        rename) and keep only the newest few. Best effort: a missing snapshot only makes the
        next recovery replay more of the log."""
        rows = []
        for e in self.producers.values():
            tail = (e.coordinator_epoch, e.current_txn_first_offset)
            if not e.batches:
                rows.append(_ENTRY.pack(e.producer_id, e.epoch, -1, -1, 0, e.last_timestamp, *tail))
            for b in e.batches:
                ts = e.last_timestamp if b is e.batches[-1] else b.timestamp
                rows.append(_ENTRY.pack(e.producer_id, e.epoch, b.last_seq, b.last_offset, b.offset_delta, ts, *tail))
        entries = _COUNT.pack(len(rows)) + b"".join(rows)
        data = _PREFIX.pack(SNAPSHOT_VERSION, crc32c(entries)) + entries
        try:
            fileio.replace_file(os.path.join(self.directory, snapshot_name(self.end_offset)), data)
        except OSError as exc:
            _log.warning("%s: cannot write producer snapshot (%s)", self.directory, exc)
            return
        for offset in self.snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            self._remove_snapshot(offset)

    def _remove_snapshot(self, offset: int) -> None:
        try:
            os.unlink(os.path.join(self.directory, snapshot_name(offset)))
        except OSError:
            pass

    def _read_snapshot(self, offset: int) -> dict[int, ProducerEntry]:
        with open(os.path.join(self.directory, snapshot_name(offset)), "rb") as f:
            raw = f.read()
        if len(raw) < _PREFIX.size + _COUNT.size:
            raise ValueError("too short")
        version, crc = _PREFIX.unpack_from(raw)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"version {version}")
        if crc32c(raw[_PREFIX.size:]) != crc:
            raise ValueError("CRC mismatch")
        (count,) = _COUNT.unpack_from(raw, _PREFIX.size)
        if count < 0 or _PREFIX.size + _COUNT.size + count * _ENTRY.size != len(raw):
            raise ValueError("entry count does not match the size")
        producers: dict[int, ProducerEntry] = {}
        for pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first in _ENTRY.iter_unpack(
                raw[_PREFIX.size + _COUNT.size:]):
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerEntry(pid, epoch, coordinator_epoch=coord_epoch,
                                                       current_txn_first_offset=txn_first)
            if last_offset >= 0:
                first_seq = last_seq - delta if last_seq >= delta else last_seq - delta + INT32_MAX + 1
                entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset, delta, ts))
            entry.last_timestamp = max(entry.last_timestamp, ts)
        return producers

    def load(self, start_offset: int, end_offset: int, names: list[str] | None = None) -> int:
        """Load the newest readable snapshot in [start_offset, end_offset] and return its
        offset (the caller applies the log's batches from there); ``start_offset`` if none.
        Snapshots beyond the log end (its tail was cut) are deleted."""
        self.producers = {}
        for offset in reversed(self.snapshot_offsets(names)):
            if offset > end_offset:
                self._remove_snapshot(offset)
                continue
            if offset < start_offset:
                break
            try:
                self.producers = self._read_snapshot(offset)
            except (OSError, ValueError, struct.error) as exc:
                _log.warning("%s: producer snapshot %d is unreadable (%s); using an older one", self.directory, offset, exc)
                self._remove_snapshot(offset)
                continue
            self.end_offset = offset
            self._index_ongoing()
            return offset
        self.end_offset = start_offset
        self.ongoing = {}
        return start_offset

    def _index_ongoing(self) -> None:
        self.ongoing = {pid: e.current_txn_first_offset for pid, e in self.producers.items()
                        if e.current_txn_first_offset >= 0}

    def delete_snapshots_before(self, offset: int) -> None:
        """Remove snapshots below the log start offset (their log is gone)."""
        for o in self.snapshot_offsets():
            if o < offset:
                self._remove_snapshot(o)

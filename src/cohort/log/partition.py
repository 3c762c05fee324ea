"""An append-only, segmented log of record batches for one partition.

Offsets are assigned here: ``append`` rewrites each batch's baseOffset to the log end offset.
The log also rolls segments by size and age, deletes whole old segments for retention (which
moves the log start offset), and swaps in compacted segments (see :mod:`cohort.log.compaction`).

Recovery on open: an interrupted compaction swap is finished or discarded first. Segments below
the recovery point (a checkpoint written after each roll and on close, when everything before it
was fsynced) are loaded from their indexes; every later segment, and always the active one, is
validated batch by batch (length, CRC32C, increasing offsets). A torn or corrupt tail is cut off
and logged, so a crash mid-write never leaves a half batch that a reader or a replay would accept.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from typing import Sequence

from cohort.log import compaction, fileio
from cohort.log.producer_state import AbortedTxn, ProducerState
from cohort.log.segment import Segment, now_ms
from cohort.log.txn_index import TxnIndex
from cohort.protocol.records import (
    ABORT_MARKER,
    COMMIT_MARKER,
    CONTROL_FLAG,
    BatchHeader,
    assign_offsets,
    build_marker_batch,
    control_type,
    read_header,
    record_times,
)

DEFAULT_SEGMENT_BYTES = 1 << 30
DEFAULT_INDEX_INTERVAL = 4096
RECOVERY_POINT_FILE = "recovery-point"
LOG_START_FILE = "log-start-offset"  # written by DeleteRecords

_log = logging.getLogger("cohort.log")


class OffsetOutOfRange(ValueError):
    """The requested offset is outside [log start, log end]."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int


class PartitionLog:
    """Segments under ``directory``. Calls are synchronous and made from one thread, except
    :meth:`flush` and the build phase of compaction, which may run in a worker thread while
    appends continue.

    Policy knobs (``None`` = off) are plain attributes so a topic config change applies at once:
    ``segment_bytes``, ``roll_ms``, ``flush_messages``, ``flush_ms``, ``retention_ms``,
    ``retention_bytes``.
    """

    def __init__(
        self,
        directory: str,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        flush_messages: int | None = None,
        flush_ms: int | None = None,
        roll_ms: int | None = None,
        retention_ms: int | None = None,
        retention_bytes: int | None = None,
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.index_interval = index_interval
        self.flush_messages = flush_messages
        self.flush_ms = flush_ms
        self.roll_ms = roll_ms
        self.retention_ms = retention_ms
        self.retention_bytes = retention_bytes
        self._unflushed = 0
        self.last_flush_ms = now_ms()
        self.recovered_bytes = 0
        # Closed segments below this offset were compacted and nothing newer was closed since.
        self.cleaned_upto = 0
        os.makedirs(directory, exist_ok=True)
        compaction.recover_swap(directory)
        recovery_point = self._recovery_point = self._read_recovery_point()
        names = os.listdir(directory)
        bases = sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())
        for name in names:  # an index whose segment was deleted just before a crash
            stem, dot, suffix = name.rpartition(".")
            if suffix in ("index", "timeindex", "txnindex") and stem + ".log" not in names:
                os.unlink(os.path.join(directory, name))
        self.segments: list[Segment] = []
        for i, base in enumerate(bases):
            seg = Segment(directory, base, index_interval)
            last = i == len(bases) - 1
            trusted = not last and bases[i + 1] <= recovery_point
            if last or not trusted or not seg.load():
                truncated = seg.recover()
                if truncated:
                    level = logging.WARNING if last else logging.ERROR
                    _log.log(level, "%s: cut %d bytes of torn or corrupt batches from segment %d (records from offset %d on were lost)",
                             directory, truncated, base, seg.next_offset)
                self.recovered_bytes += truncated
            self.segments.append(seg)
        for a, b in zip(self.segments, self.segments[1:]):
            if a.next_offset > b.base_offset:
                raise OSError(f"{directory}: segment {b.base_offset} overlaps segment {a.base_offset} (ends at {a.next_offset})")
            a.next_offset = b.base_offset  # a compacted or damaged segment may end in a gap
        if not self.segments:
            self.segments.append(Segment(directory, 0, index_interval))
            fileio.fsync_dir(directory)  # a new log's directory entries must survive a power loss too
            fileio.fsync_dir(os.path.dirname(os.path.abspath(directory)))
        self._bases = [s.base_offset for s in self.segments]
        # A recovery point at the very end was written after the tail's last fsync.
        self.segments[-1].unsynced = self.segments[-1].unsynced and recovery_point != self.segments[-1].next_offset
        self._deleted_upto = min(self._read_checkpoint(LOG_START_FILE), self.end_offset)
        self.cleaned_upto = self.start_offset
        self.producers = ProducerState(directory)
        self.txn_index = TxnIndex(directory)
        self._load_producer_state(names)

    def _load_producer_state(self, names: list[str] | None = None) -> None:
        """The newest producer snapshot, then every batch after it (headers, and the type of each
        transaction marker); the aborted-transaction index is rebuilt from there on."""
        start = self.producers.load(self.start_offset, self.end_offset, names)
        self.txn_index.load(self._bases, start)
        if start < self.end_offset:
            for seg, p, h in self.batches_from(start):
                if h.producer_id < 0:
                    self.producers.end_offset = h.last_offset + 1
                    continue
                marker = control_type(os.pread(seg.fd, h.size, p)) if h.attributes & CONTROL_FLAG else -1
                for aborted in self.producers.replay(((h, marker),)):
                    self.txn_index.add(seg.base_offset, aborted)
        self.producers.end_offset = self.end_offset

    # --- transactions ------------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: the first offset of the oldest open transaction, capped at the high watermark."""
        unstable = self.producers.first_unstable_offset()
        return high_watermark if unstable is None else min(unstable, high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        return self.txn_index.collect(fetch_offset, upper_bound)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      now: int | None = None) -> AppendResult:
        """Append a COMMIT or ABORT marker for a producer's transaction (the coordinator's
        WriteTxnMarkers step). Raises ProducerStateError for a fenced epoch, OSError if the disk
        refuses the write."""
        self.producers.check_marker(producer_id, producer_epoch)
        data = bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                            now_ms() if now is None else now))
        return self.append(data, (read_header(data),), COMMIT_MARKER if commit else ABORT_MARKER)

    # --- offsets ---------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """The log start offset: the first segment's base, or beyond it after DeleteRecords."""
        return max(self.segments[0].base_offset, self._deleted_upto)

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (at most the log end) durably, and drop
        the segments wholly below it. Returns the new log start offset."""
        if offset > self.end_offset:
            raise OffsetOutOfRange(f"cannot delete records up to {offset}, beyond the log end {self.end_offset}")
        if offset <= self.start_offset:
            return self.start_offset
        self._write_checkpoint(LOG_START_FILE, offset, sync_dir=True)
        self._deleted_upto = offset
        doomed = 0
        while doomed < len(self.segments) - 1 and self.segments[doomed + 1].base_offset <= offset:
            doomed += 1
        if doomed:
            gone = self.segments[:doomed]
            del self.segments[:doomed]
            del self._bases[:doomed]
            for seg in gone:
                seg.remove()
        self.cleaned_upto = max(self.cleaned_upto, self.start_offset)
        self.producers.delete_snapshots_before(self.segments[0].base_offset)
        self.txn_index.drop_before(self.segments[0].base_offset)
        return self.start_offset

    @property
    def end_offset(self) -> int:
        """The offset the next record will get (the high watermark on a single node)."""
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- writing ---------------------------------------------------------------------------

    def append(self, data: bytearray, headers: Sequence[BatchHeader], marker: int = -1) -> AppendResult:
        """Assign offsets to validated batches (in place) and append them. ``marker``: the
        control type of a control batch the caller built (else it is read from the batch).

        Raises ``OSError`` if the disk refuses the write; the log is then exactly as before."""
        active = self.segments[-1]
        if active.size and (active.size + len(data) > self.segment_bytes or self._too_old(active, now_ms())):
            active = self._roll()
        first = active.next_offset
        nxt = assign_offsets(data, headers, first)
        active.append(data, first, nxt, max(h.max_timestamp for h in headers))
        offset = first
        pos = 0
        for h in headers:
            if h.producer_id >= 0:
                kind = (marker if marker >= 0 else control_type(data, pos)) if h.attributes & CONTROL_FLAG else -1
                aborted = self.producers.apply(h, offset, kind)
                if aborted is not None:
                    self.txn_index.add(active.base_offset, aborted)
            offset += h.last_offset_delta + 1
            pos += h.size
        self.producers.end_offset = nxt
        self._unflushed += nxt - first
        if self.flush_messages is not None and self._unflushed >= self.flush_messages:
            self.flush()
        return AppendResult(first, nxt - 1)

    def _too_old(self, seg: Segment, now: int) -> bool:
        return self.roll_ms is not None and seg.first_append_ms is not None and now - seg.first_append_ms >= self.roll_ms

    def _roll(self) -> Segment:
        """Seal the active segment and start a new one; on failure nothing changes."""
        old = self.segments[-1]
        seg = Segment(self.directory, self.end_offset, self.index_interval)
        try:
            old.seal()
            self.txn_index.sync(old.base_offset)
            fileio.fsync_dir(self.directory)  # the new file's name is durable before data goes in
        except OSError:
            seg.remove()
            raise
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self._unflushed = 0
        self._write_recovery_point(seg.base_offset)
        self.producers.take_snapshot()  # recovery replays only what comes after it
        return seg

    def roll(self) -> None:
        """Start a new segment now (if the active one holds anything)."""
        if self.segments[-1].size:
            self._roll()

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset``, which must start a batch (or be the end).

        Used when appended data must not survive, e.g. records whose fsync failed."""
        if offset >= self.end_offset:
            return
        if offset < self.start_offset:
            raise OffsetOutOfRange(f"cannot truncate to {offset}, before the log start {self.start_offset}")
        i = bisect.bisect_right(self._bases, offset) - 1
        seg = self.segments[i]
        pos = seg.find(offset)
        if pos is None or read_header(os.pread(seg.fd, 61, pos)).base_offset != offset:
            raise ValueError(f"offset {offset} is not at a batch boundary")
        for later in self.segments[i + 1 :]:
            later.remove()
        del self.segments[i + 1 :]
        del self._bases[i + 1 :]
        seg.truncate(pos, offset)
        self._load_producer_state()

    def flush(self) -> None:
        """fsync the active segment (sealed segments were synced when rolled). If it fails,
        the unflushed count stays, so a time-based flush tries again."""
        pending = self._unflushed
        self.segments[-1].flush()
        self._unflushed = max(0, self._unflushed - pending)
        self.last_flush_ms = now_ms()

    def flush_due(self, now: int) -> bool:
        """``flush_ms`` has passed since the last fsync and something was written since."""
        return self.flush_ms is not None and self._unflushed > 0 and now - self.last_flush_ms >= self.flush_ms

    # --- retention ---------------------------------------------------------------------------

    def roll_if_old(self, now: int) -> bool:
        """Time-based roll for an idle partition (appends check it themselves)."""
        active = self.segments[-1]
        if active.size and self._too_old(active, now):
            self._roll()
            return True
        return False

    def apply_retention(self, now: int) -> int:
        """Delete whole segments past ``retention_ms`` (by their largest timestamp) or beyond
        ``retention_bytes`` (oldest first); the log start offset moves to the first kept
        segment. An expired active segment is rolled first, as in Kafka. Returns the number of
        segments deleted."""
        doomed = 0
        if self.retention_ms is not None:
            limit = now - self.retention_ms
            if self.segments[-1].size and self._segment_time(self.segments[-1]) < limit:
                self._roll()
            while doomed < len(self.segments) - 1 and self._segment_time(self.segments[doomed]) < limit:
                doomed += 1
        if self.retention_bytes is not None:
            excess = self.size_bytes - self.retention_bytes - sum(s.size for s in self.segments[:doomed])
            while doomed < len(self.segments) - 1 and excess >= self.segments[doomed].size:
                excess -= self.segments[doomed].size
                doomed += 1
        if doomed:
            gone = self.segments[:doomed]
            del self.segments[:doomed]
            del self._bases[:doomed]
            self.cleaned_upto = max(self.cleaned_upto, self.start_offset)
            for seg in gone:
                seg.remove()
            self.producers.delete_snapshots_before(self.start_offset)
            self.txn_index.drop_before(self.segments[0].base_offset)
            _log.info("%s: retention deleted %d segment(s); log start offset is now %d", self.directory, doomed, self.start_offset)
        return doomed

    @staticmethod
    def _segment_time(seg: Segment) -> int:
        ts = seg.largest_timestamp()
        if ts < 0:
            ts = int(os.fstat(seg.fd).st_mtime * 1000)
        return ts

    # --- compaction --------------------------------------------------------------------------

    def closed_segments(self, upto: int | None = None) -> list[Segment]:
        """Sealed segments that end at or before ``upto`` (default: all but the active one)."""
        out = []
        for seg in self.segments[:-1]:
            if upto is not None and seg.next_offset > upto:
                break
            out.append(seg)
        return out

    def dirty_ratio(self, upto: int | None = None) -> float:
        """Share of closed-segment bytes written since the last compaction."""
        closed = self.closed_segments(upto)
        total = sum(s.size for s in closed)
        if not total:
            return 0.0
        return sum(s.size for s in closed if s.base_offset >= self.cleaned_upto) / total

    def swap_segments(self, old: list[Segment], new: list[Segment]) -> bool:
        """Replace the in-memory segments ``old`` (consecutive, files already swapped on disk
        by the compactor) with ``new``. Returns False if ``old`` is no longer current."""
        if not old:
            return False
        try:
            i = self.segments.index(old[0])
        except ValueError:
            return False
        if self.segments[i : i + len(old)] != old or i + len(old) >= len(self.segments):
            return False
        self.segments[i : i + len(old)] = new
        for j in range(i, i + len(new)):
            self.segments[j].next_offset = self.segments[j + 1].base_offset
        self._bases = [s.base_offset for s in self.segments]
        self.cleaned_upto = max(self.cleaned_upto, new[-1].next_offset)
        for seg in old:
            seg.close()
        return True

    # --- recovery point ----------------------------------------------------------------------

    def _read_recovery_point(self) -> int:
        return self._read_checkpoint(RECOVERY_POINT_FILE)

    def _read_checkpoint(self, name: str) -> int:
        try:
            with open(os.path.join(self.directory, name), encoding="ascii") as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _write_checkpoint(self, name: str, offset: int, sync_dir: bool = False) -> None:
        """Replace a one-number checkpoint file (raises OSError); with ``sync_dir`` the
        rename itself is made durable before this returns."""
        fileio.replace_file(os.path.join(self.directory, name), str(offset).encode())
        if sync_dir:
            fileio.fsync_dir(self.directory)

    def _write_recovery_point(self, offset: int) -> None:
        """Everything before ``offset`` is fsynced; a later open may trust those segments.
        Best effort: a stale checkpoint only makes the next recovery check more."""
        try:
            self._write_checkpoint(RECOVERY_POINT_FILE, offset)
            self._recovery_point = offset
        except OSError as exc:
            _log.warning("%s: cannot write the recovery point (%s)", self.directory, exc)

    # --- reading ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, allow_oversize: bool = True) -> bytes:
        """Whole batches starting with the one containing ``offset`` (or the next one, inside a
        compacted gap); b"" at the log end. See :meth:`Segment.read` for ``allow_oversize``."""
        if offset < self.start_offset or offset > self.end_offset:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self.start_offset}, {self.end_offset}]")
        i = bisect.bisect_right(self._bases, offset) - 1
        while i < len(self.segments):
            seg = self.segments[i]
            pos = seg.find(offset)
            if pos is not None:
                return seg.read(pos, max_bytes, allow_oversize)
            i += 1
        return b""

    def batches_from(self, offset: int):
        """(segment, position, header) of every batch from the one holding ``offset`` on."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for seg in self.segments[i:]:
            pos = seg.find(offset)
            if pos is None:
                continue
            for p, h in seg.headers(pos):
                yield seg, p, h

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start whose timestamp is
        >= ``timestamp``, or None. The segments' time indexes lead to one batch, which is read
        (and decompressed) to find the record."""
        for seg in self.segments:
            if seg.largest_timestamp() < timestamp:
                continue
            found = seg.batch_for_timestamp(timestamp)
            if found is None:
                continue
            for at, p, h in self._batches_at(seg, found[0]):
                if h.max_timestamp < timestamp or h.last_offset < self.start_offset:
                    continue
                for offset, ts in record_times(os.pread(at.fd, h.size, p)):
                    if ts >= timestamp and offset >= self.start_offset:
                        return offset, ts
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the log's largest timestamp
        (ListOffsets MAX_TIMESTAMP, as Kafka answers it since KAFKA-16310), or None if empty."""
        best = None
        for seg in self.segments:
            ts = seg.largest_timestamp()
            if ts >= 0 and (best is None or ts > best.largest_timestamp()):
                best = seg
        if best is None:
            return None
        target = best.largest_timestamp()
        pos = best.find(best.offset_of_max)
        if pos is None:
            return None
        for at, p, h in self._batches_at(best, pos):
            if h.max_timestamp == target:
                for offset, ts in record_times(os.pread(at.fd, h.size, p)):
                    if ts == target:
                        return offset, ts
        return None

    def _batches_at(self, seg: Segment, pos: int):
        """(segment, position, header) from position ``pos`` of ``seg`` to the log end."""
        i = self.segments.index(seg)
        for p, h in seg.headers(pos):
            yield seg, p, h
        for later in self.segments[i + 1 :]:
            for p, h in later.headers():
                yield later, p, h

    def close(self) -> None:
        """Close every segment and checkpoint the recovery point if the data is synced. A log
        untouched since its last checkpoint (synced, recovery point at its end) writes nothing."""
        try:
            if self.segments[-1].unsynced or self._recovery_point != self.end_offset:
                self.segments[-1].flush()
                self._write_recovery_point(self.end_offset)
                if self.end_offset > self.start_offset:
                    self.producers.take_snapshot()
        except OSError as exc:
            _log.error("%s: fsync on close failed (%s); the next start re-checks the tail", self.directory, exc)
        for seg in self.segments:
            seg.close()

"""One segment of a partition log: a ``.log`` file of whole record batches, a sparse
``.index`` of (relative offset, file position) pairs and a sparse ``.timeindex`` of (largest
timestamp so far, offset of the batch that set it) pairs, all named by the segment's base offset.

The time index gets an entry whenever the offset index does and the largest timestamp grew, and
a last one when the segment is sealed, so its last entry is the segment's largest timestamp (as
in Kafka). A lookup by timestamp bisects it and reads from the batch it names.

The index is an accelerator, never the source of truth: if it is missing or disagrees with the
log it is rebuilt by scanning batch headers, and failing to write it never fails an append.
Offsets increase from batch to batch but may skip (a compacted segment keeps only some records).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import time
from array import array

from cohort.log import fileio
from cohort.protocol.records import HEADER_SIZE, BatchHeader, InvalidBatch, check_batch, read_header

_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qi")  # Kafka's .timeindex entry: max timestamp so far, relative offset
# Index entries written to their files in one pwrite per this many (a syscall per entry cost a
# transactional producer two of its seven writes per transaction).
_SLOTS_PER_WRITE = 32
_log = logging.getLogger("cohort.log")


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def now_ms() -> int:
    return int(time.time() * 1000)


class Segment:
    """Append-only storage for batches with offsets in [base_offset, next_offset)."""

    def __init__(self, directory: str, base_offset: int, index_interval: int, *, create: bool = True) -> None:
        self.base_offset = base_offset
        self.log_path = os.path.join(directory, segment_name(base_offset, ".log"))
        self.index_path = os.path.join(directory, segment_name(base_offset, ".index"))
        self.timeindex_path = os.path.join(directory, segment_name(base_offset, ".timeindex"))
        self.txnindex_path = os.path.join(directory, segment_name(base_offset, ".txnindex"))  # see txn_index.py
        self.index_interval = index_interval
        self._pins = 0
        self._fd = -1
        self._index_writer = _SlotWriter(self.index_path)
        try:
            self.size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            if not create:
                raise
            os.close(fileio.IO.open(self.log_path, os.O_RDWR | os.O_CREAT))
            self.size = 0
        # Bytes that may not be on disk yet. An existing file counts as unsynced (a crash may have
        # left its tail in the page cache only); a new, empty one has nothing to sync.
        self.unsynced = self.size > 0
        # No descriptor is held yet: the first read or write opens one (fileio.OpenFiles).
        self.next_offset = base_offset
        # Largest batch timestamp; None = not known yet (sealed segments compute it on demand).
        self.max_timestamp: int | None = -1
        # When the segment got its first batch (broker clock), for time-based rolling.
        self.first_append_ms: int | None = None
        self._idx_offsets: list[int] = []
        self._idx_positions: list[int] = []
        self._bytes_since_index = index_interval  # the first batch is always indexed
        # The time index (absolute offsets) and the first batch holding max_timestamp.
        self._tidx_ts = array("q")
        self._tidx_off = array("q")
        self.offset_of_max = -1
        self._timeindex_writer = _SlotWriter(self.timeindex_path)

    # --- descriptors (opened on demand, see fileio.OpenFiles) -------------------------------

    @property
    def fd(self) -> int:
        """The log file's descriptor; valid until the next call that may open another segment,
        or, in a worker thread, until its :func:`fileio.worker` block ends."""
        return fileio.FILES.fd(self)

    def _open_fd(self) -> int:
        return fileio.IO.open(self.log_path, os.O_RDWR)

    def _close_fds(self) -> None:
        """Close the descriptors (the cache evicts, or the segment closes)."""
        self._close_index()
        self._close_time_index()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # --- opening ---------------------------------------------------------------------------

    def recover(self) -> int:
        """Validate every batch (length, CRC32C, increasing offsets), truncate a torn or corrupt
        tail, and rebuild the index. Returns the number of bytes truncated."""
        pos = 0
        expected = self.base_offset
        offsets, positions = [], []
        since = self.index_interval  # index the first batch
        max_ts = -1
        first_ts = None
        times = _TimeIndexBuilder()
        while pos < self.size:
            head = os.pread(self.fd, HEADER_SIZE, pos)
            try:
                h = read_header(head)
                if h.base_offset < expected or pos + h.size > self.size:
                    break
                check_batch(os.pread(self.fd, h.size, pos))
            except InvalidBatch:
                break
            times.batch(h)
            if since >= self.index_interval:
                offsets.append(h.base_offset - self.base_offset)
                positions.append(pos)
                times.entry()
                since = 0
            since += h.size
            expected = h.last_offset + 1
            max_ts = max(max_ts, h.max_timestamp)
            if first_ts is None:
                first_ts = h.max_timestamp
            pos += h.size
        truncated = self.size - pos
        if truncated:
            fileio.IO.ftruncate(self.fd, pos)
            fileio.IO.fsync(self.fd)
            self.size = pos
        self.next_offset = expected
        self.max_timestamp = max_ts
        self.first_append_ms = self._first_append_guess(first_ts)
        self._idx_offsets, self._idx_positions = offsets, positions
        self._bytes_since_index = since
        self._rewrite_index()
        self._set_time_index(times)
        return truncated

    def load(self) -> bool:
        """Open a sealed segment cheaply: trust the index if it is consistent and walk batch
        headers from its last entry to find the end. Returns False if the headers do not add
        up (the caller then runs :meth:`recover`)."""
        try:
            with open(self.index_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        n = len(raw) // _ENTRY.size
        entries = [_ENTRY.unpack_from(raw, i * _ENTRY.size) for i in range(n)]
        ok = bool(entries) and entries[0][1] == 0 and all(p < self.size for _, p in entries)
        ok = ok and all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:]))
        if ok:
            self._idx_offsets = [o for o, _ in entries]
            self._idx_positions = [p for _, p in entries]
        else:
            self._idx_offsets, self._idx_positions = [], []
        pos = self._idx_positions[-1] if ok else 0
        expected = self.base_offset + (self._idx_offsets[-1] if ok else 0)
        since = 0
        while pos < self.size:
            try:
                h = read_header(os.pread(self.fd, HEADER_SIZE, pos))
            except InvalidBatch:
                return False
            if h.base_offset < expected or h.batch_length < HEADER_SIZE - 12 or pos + h.size > self.size:
                return False
            if not ok and (not self._idx_positions or since >= self.index_interval):
                self._idx_offsets.append(h.base_offset - self.base_offset)
                self._idx_positions.append(pos)
                since = 0
            since += h.size
            expected = h.last_offset + 1
            pos += h.size
        self.next_offset = expected
        self.first_append_ms = self._first_append_guess(None)
        if not ok:
            self._rewrite_index()
        self._load_time_index()
        return True

    def _load_time_index(self) -> None:
        """Trust the ``.timeindex`` if its entries are increasing and inside the segment; its
        last entry is then the segment's largest timestamp. Otherwise it is rebuilt on first use."""
        self.max_timestamp = None
        try:
            with open(self.timeindex_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        n = len(raw) // _TIME_ENTRY.size
        entries = [_TIME_ENTRY.unpack_from(raw, i * _TIME_ENTRY.size) for i in range(n)]
        end = self.next_offset - self.base_offset
        ok = bool(entries) and len(raw) % _TIME_ENTRY.size == 0 and all(0 <= o < end for _, o in entries)
        ok = ok and all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(entries, entries[1:]))
        if ok:
            self._tidx_ts = array("q", (t for t, _ in entries))
            self._tidx_off = array("q", (self.base_offset + o for _, o in entries))
            self.max_timestamp, self.offset_of_max = entries[-1][0], self.base_offset + entries[-1][1]
        elif self.size == 0:
            self.max_timestamp, self.offset_of_max = -1, -1

    def _first_append_guess(self, first_ts: int | None) -> int | None:
        """After a restart the segment's age is taken from its first batch's timestamp (as
        Kafka does), else from the file's modification time."""
        if self.size == 0:
            return None
        if first_ts is None:
            first_ts = read_header(os.pread(self.fd, HEADER_SIZE, 0)).max_timestamp
        if first_ts >= 0:
            return first_ts
        return int(os.fstat(self.fd).st_mtime * 1000)

    def largest_timestamp(self) -> int:
        """Largest batch max-timestamp in the segment (-1 if none); a segment whose time index
        was missing or stale has it rebuilt from the batch headers first."""
        if self.max_timestamp is None:
            self._rebuild_time_index()
        return self.max_timestamp

    def _rebuild_time_index(self) -> None:
        times = _TimeIndexBuilder()
        since = self.index_interval
        for _, h in self.headers():
            times.batch(h)
            if since >= self.index_interval:
                times.entry()
                since = 0
            since += h.size
        self._set_time_index(times)

    def _set_time_index(self, times: "_TimeIndexBuilder") -> None:
        """Adopt a scan's time index, with the final entry, and write it out."""
        times.entry()
        self._tidx_ts, self._tidx_off = times.ts, times.off
        self.max_timestamp, self.offset_of_max = times.max_ts, times.max_off
        self._close_time_index()
        self._rewrite_time_index(sync=False)

    def _rewrite_time_index(self, sync: bool) -> None:
        """Write the whole time index (best effort, like the offset index)."""
        data = b"".join(_TIME_ENTRY.pack(t, o - self.base_offset) for t, o in zip(self._tidx_ts, self._tidx_off))
        _replace_index_file(self.timeindex_path, data, sync)

    def _add_time_entry(self) -> None:
        if self.max_timestamp is None or self.max_timestamp < 0:
            return
        if self._tidx_ts and self._tidx_ts[-1] >= self.max_timestamp:
            return
        self._tidx_ts.append(self.max_timestamp)
        self._tidx_off.append(self.offset_of_max)
        self._timeindex_writer.add(len(self._tidx_ts) - 1, _TIME_ENTRY.pack(self.max_timestamp, self.offset_of_max - self.base_offset))

    def _close_time_index(self) -> None:
        self._timeindex_writer.close()

    def batch_for_timestamp(self, timestamp: int) -> tuple[int, "BatchHeader"] | None:
        """(position, header) of the first batch whose max timestamp is >= ``timestamp``: the
        time index names a batch before which every timestamp is smaller."""
        if self.largest_timestamp() < timestamp:
            return None
        i = bisect.bisect_right(self._tidx_ts, timestamp) - 1
        pos = self.find(self._tidx_off[i]) if i >= 0 else 0
        if pos is None:
            return None
        for p, h in self.headers(pos):
            if h.max_timestamp >= timestamp:
                return p, h
        return None

    def _rebuild_index(self) -> None:
        """Recompute the index from the batch headers (the log itself is trusted here)."""
        offsets, positions = [], []
        since = self.index_interval
        for pos, h in self.headers():
            if since >= self.index_interval:
                offsets.append(h.base_offset - self.base_offset)
                positions.append(pos)
                since = 0
            since += h.size
        self._idx_offsets, self._idx_positions = offsets, positions
        self._bytes_since_index = since
        self._close_index()
        self._rewrite_index()

    def _rewrite_index(self) -> None:
        """Write the whole index file. Best effort: on failure (a full disk) the file is removed
        and rebuilt on a later open; the in-memory index stays correct."""
        data = b"".join(_ENTRY.pack(o, p) for o, p in zip(self._idx_offsets, self._idx_positions))
        _replace_index_file(self.index_path, data, sync=False)

    # --- writing ---------------------------------------------------------------------------

    def append(self, data: bytes | bytearray, first_offset: int, next_offset: int, max_timestamp: int) -> None:
        """Append whole batches whose offsets run [first_offset, next_offset).

        All or nothing: if the write fails or is short (a full disk), the file is cut back and
        nothing in memory changes, so no half batch becomes visible."""
        pos = self.size
        self.unsynced = True
        try:
            written = fileio.IO.pwrite(self.fd, data, pos)
            if written != len(data):
                raise OSError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        except OSError:
            try:
                fileio.IO.ftruncate(self.fd, pos)
            except OSError:
                pass  # the bytes past `size` are overwritten by the next append or cut by recovery
            raise
        if self.max_timestamp is None:
            self._rebuild_time_index()
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max = max_timestamp, first_offset
        if self._bytes_since_index >= self.index_interval:
            self._add_index_entry(first_offset - self.base_offset, pos)
            self._add_time_entry()
        self._bytes_since_index += len(data)
        self.size += len(data)
        self.next_offset = next_offset
        if self.first_append_ms is None:
            self.first_append_ms = now_ms()

    def _add_index_entry(self, rel_offset: int, pos: int) -> None:
        self._idx_offsets.append(rel_offset)
        self._idx_positions.append(pos)
        self._bytes_since_index = 0
        self._index_writer.add(len(self._idx_offsets) - 1, _ENTRY.pack(rel_offset, pos))

    def flush(self) -> None:
        """fsync the file, unless nothing was written since the last successful fsync (closing
        thousands of idle partitions then costs no disk round trips)."""
        if self.unsynced:
            # Cleared before the fsync: an append that lands while it runs (a coordinator log is
            # synced by a worker thread) sets it again, so its bytes are synced by the next flush.
            self.unsynced = False
            try:
                fileio.IO.fsync(self.fd)
            except BaseException:
                self.unsynced = True
                raise

    def seal(self) -> None:
        """No more appends: sync the data, add the time index's last entry (the segment's
        largest timestamp, which a later open trusts) and release the index writers."""
        self.flush()
        self._close_index()
        self._add_time_entry()
        self._close_time_index()
        self._rewrite_time_index(sync=True)

    def _close_index(self) -> None:
        self._index_writer.close()

    def close(self) -> None:
        fileio.FILES.forget(self)
        self._close_fds()

    # --- reading ---------------------------------------------------------------------------

    def find(self, offset: int) -> int | None:
        """File position of the first batch whose last offset is >= ``offset`` (None if past the end)."""
        if offset >= self.next_offset:
            return None
        i = bisect.bisect_right(self._idx_offsets, offset - self.base_offset) - 1
        pos = self._idx_positions[i] if i >= 0 else 0
        if i >= 0 and read_header(os.pread(self.fd, HEADER_SIZE, pos)).base_offset != self.base_offset + self._idx_offsets[i]:
            self._rebuild_index()  # a stale index (e.g. after a crash) must not misplace reads
            return self.find(offset)
        while pos < self.size:
            h = read_header(os.pread(self.fd, HEADER_SIZE, pos))
            if h.last_offset >= offset:
                return pos
            pos += h.size
        return None

    def read(self, pos: int, max_bytes: int, allow_oversize: bool = True) -> bytes:
        """Whole batches from ``pos`` totalling at most ``max_bytes``; if the first batch alone
        is larger, it is returned whole when ``allow_oversize`` (so a consumer still makes
        progress, as in Kafka) and nothing otherwise."""
        chunk = os.pread(self.fd, min(max(max_bytes, HEADER_SIZE), self.size - pos), pos)
        end = 0
        while len(chunk) - end >= 12:
            size = 12 + struct.unpack_from(">i", chunk, end + 8)[0]
            if end + size > len(chunk):
                break
            end += size
        if end == 0:
            if not allow_oversize:
                return b""
            size = 12 + struct.unpack_from(">i", os.pread(self.fd, 12, pos), 8)[0]
            return os.pread(self.fd, size, pos)
        return chunk[:end]

    def headers(self, pos: int = 0):
        """Walk batch headers from ``pos``: yields (position, header)."""
        while pos < self.size:
            h = read_header(os.pread(self.fd, HEADER_SIZE, pos))
            yield pos, h
            pos += h.size

    def truncate(self, pos: int, next_offset: int) -> None:
        """Cut the segment at batch boundary ``pos`` (the batch for ``next_offset`` starts there)."""
        fileio.IO.ftruncate(self.fd, pos)
        self.unsynced = True
        self.size = pos
        self.next_offset = next_offset
        keep = bisect.bisect_left(self._idx_positions, pos)
        self._idx_offsets = self._idx_offsets[:keep]
        self._idx_positions = self._idx_positions[:keep]
        self._bytes_since_index = self.index_interval if not keep else pos - self._idx_positions[-1]
        self._index_writer.discard()  # the whole index is written again below
        self._close_index()
        self._rewrite_index()
        self.flush()  # memory already matches the file, even if this fails
        self._rebuild_time_index()

    def remove(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.timeindex_path, self.txnindex_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _replace_index_file(path: str, data: bytes, sync: bool) -> None:
    """Write a whole index file (temp file, rename). Best effort: on failure (a full disk) the
    file is removed and rebuilt on a later open; the in-memory index stays correct."""
    tmp = path + ".tmp"
    try:
        fd = fileio.IO.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            fileio.IO.write(fd, data)
            if sync:
                fileio.IO.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        _log.warning("cannot write index %s (%s); it will be rebuilt", path, exc)
        for p in (tmp, path):
            try:
                os.unlink(p)
            except OSError:
                pass


class _SlotWriter:
    """Writes an index file's new entries at their slots (not appended, so a failed write
    cannot misalign later entries), _SLOTS_PER_WRITE entries a write and the rest before the
    descriptor closes: a crash loses at most that tail, which `Segment.load` walks over and
    `Segment.recover` rebuilds. On a failed write (a full disk) the file is removed, to be
    rebuilt on a later open; the in-memory index stays correct."""

    __slots__ = ("path", "fd", "first", "pending")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        self.first = 0  # the slot of pending[0]
        self.pending: list[bytes] = []

    def add(self, slot: int, entry: bytes) -> None:
        if not self.pending:
            self.first = slot
        self.pending.append(entry)
        if len(self.pending) >= _SLOTS_PER_WRITE:
            self.write()

    def write(self) -> None:
        if not self.pending:
            return
        data, position = b"".join(self.pending), self.first * len(self.pending[0])
        self.pending = []
        try:
            if self.fd < 0:
                self.fd = fileio.IO.open(self.path, os.O_WRONLY | os.O_CREAT)
            fileio.IO.pwrite(self.fd, data, position)
        except OSError as exc:
            _log.warning("cannot extend index %s (%s); it will be rebuilt", self.path, exc)
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def discard(self) -> None:
        """Forget unwritten entries (the whole file is about to be written again)."""
        self.pending = []

    def close(self) -> None:
        self.write()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _TimeIndexBuilder:
    """Time index entries from a scan of batch headers (recovery, rebuilds)."""

    def __init__(self) -> None:
        self.ts = array("q")
        self.off = array("q")
        self.max_ts = -1
        self.max_off = -1

    def batch(self, h: "BatchHeader") -> None:
        if h.max_timestamp > self.max_ts:
            self.max_ts, self.max_off = h.max_timestamp, h.base_offset

    def entry(self) -> None:
        if self.max_ts >= 0 and (not self.ts or self.ts[-1] < self.max_ts):
            self.ts.append(self.max_ts)
            self.off.append(self.max_off)

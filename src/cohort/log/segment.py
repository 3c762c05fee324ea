"""One segment of a partition log: a ``.log`` file of whole record batches and a sparse
``.index`` of (relative offset, file position) pairs, both named by the segment's base offset.

The index is an accelerator, never the source of truth: if it is missing or disagrees with the
log it is rebuilt by scanning batch headers.
"""

from __future__ import annotations

import bisect
import os
import struct

from cohort.protocol.records import HEADER_SIZE, InvalidBatch, check_batch, read_header

_ENTRY = struct.Struct(">II")


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    """Append-only storage for batches with offsets [base_offset, next_offset)."""

    def __init__(self, directory: str, base_offset: int, index_interval: int) -> None:
        self.base_offset = base_offset
        self.log_path = os.path.join(directory, segment_name(base_offset, ".log"))
        self.index_path = os.path.join(directory, segment_name(base_offset, ".index"))
        self.index_interval = index_interval
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self._idx_offsets: list[int] = []
        self._idx_positions: list[int] = []
        self._bytes_since_index = index_interval  # the first batch is always indexed
        self._index_fd = -1

    # --- opening ---------------------------------------------------------------------------

    def recover(self) -> int:
        """Validate every batch (length, CRC, offset continuity), truncate a torn or corrupt
        tail, and rebuild the index. Returns the number of bytes truncated."""
        pos = 0
        expected = self.base_offset
        offsets, positions = [], []
        since = self.index_interval  # index the first batch
        while pos < self.size:
            head = os.pread(self.fd, HEADER_SIZE, pos)
            try:
                h = read_header(head)
                if h.base_offset != expected or pos + h.size > self.size:
                    break
                check_batch(os.pread(self.fd, h.size, pos))
            except InvalidBatch:
                break
            if since >= self.index_interval:
                offsets.append(h.base_offset - self.base_offset)
                positions.append(pos)
                since = 0
            since += h.size
            expected = h.last_offset + 1
            self.max_timestamp = max(self.max_timestamp, h.max_timestamp)
            pos += h.size
        truncated = self.size - pos
        if truncated:
            os.ftruncate(self.fd, pos)
            os.fsync(self.fd)
            self.size = pos
        self.next_offset = expected
        self._idx_offsets, self._idx_positions = offsets, positions
        self._bytes_since_index = since
        self._rewrite_index()
        return truncated

    def load(self) -> None:
        """Open a sealed segment: trust the index if it is consistent, then walk from its last
        entry to find ``next_offset``; otherwise recover fully."""
        try:
            with open(self.index_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        n = len(raw) // _ENTRY.size
        entries = [_ENTRY.unpack_from(raw, i * _ENTRY.size) for i in range(n)]
        ok = bool(entries) and entries[0] == (0, 0) and all(p < self.size for _, p in entries)
        ok = ok and all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:]))
        if not ok:
            self.recover()
            return
        self._idx_offsets = [o for o, _ in entries]
        self._idx_positions = [p for _, p in entries]
        pos = self._idx_positions[-1]
        expected = self.base_offset + self._idx_offsets[-1]
        while pos < self.size:
            h = read_header(os.pread(self.fd, HEADER_SIZE, pos))
            if h.base_offset != expected or pos + h.size > self.size:
                self.recover()
                return
            expected = h.last_offset + 1
            pos += h.size
        self.next_offset = expected
        self.max_timestamp = -1  # only needed for the active segment's ListOffsets -3 shortcut

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
        if self._index_fd >= 0:
            os.close(self._index_fd)
            self._index_fd = -1
        self._rewrite_index()

    def _rewrite_index(self) -> None:
        data = b"".join(_ENTRY.pack(o, p) for o, p in zip(self._idx_offsets, self._idx_positions))
        tmp = self.index_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.index_path)

    # --- writing ---------------------------------------------------------------------------

    def append(self, data: bytes | bytearray, first_offset: int, next_offset: int, max_timestamp: int) -> None:
        """Append whole batches whose offsets run [first_offset, next_offset)."""
        pos = self.size
        written = os.pwrite(self.fd, data, pos)
        if written != len(data):
            os.ftruncate(self.fd, pos)
            raise OSError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        if self._bytes_since_index >= self.index_interval:
            self._add_index_entry(first_offset - self.base_offset, pos)
        self._bytes_since_index += len(data)
        self.size += len(data)
        self.next_offset = next_offset
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp

    def _add_index_entry(self, rel_offset: int, pos: int) -> None:
        self._idx_offsets.append(rel_offset)
        self._idx_positions.append(pos)
        self._bytes_since_index = 0
        if self._index_fd < 0:
            self._index_fd = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._index_fd, _ENTRY.pack(rel_offset, pos))

    def flush(self) -> None:
        os.fsync(self.fd)

    def seal(self) -> None:
        """No more appends: sync the data and release the index writer."""
        self.flush()
        if self._index_fd >= 0:
            os.close(self._index_fd)
            self._index_fd = -1

    def close(self) -> None:
        if self._index_fd >= 0:
            os.close(self._index_fd)
            self._index_fd = -1
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # --- reading ---------------------------------------------------------------------------

    def find(self, offset: int) -> int | None:
        """File position of the batch containing ``offset`` (None if past the end)."""
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
        os.ftruncate(self.fd, pos)
        os.fsync(self.fd)
        self.size = pos
        self.next_offset = next_offset
        keep = bisect.bisect_left(self._idx_positions, pos)
        self._idx_offsets = self._idx_offsets[:keep]
        self._idx_positions = self._idx_positions[:keep]
        self._bytes_since_index = self.index_interval if not keep else pos - self._idx_positions[-1]
        if self._index_fd >= 0:
            os.close(self._index_fd)
            self._index_fd = -1
        self._rewrite_index()

    def remove(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

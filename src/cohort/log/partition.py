"""An append-only, segmented log of record batches for one partition.

Offsets are assigned here: ``append`` rewrites each batch's baseOffset to the log end offset.
On open, sealed segments are loaded from their indexes and the active (last) segment is
validated batch by batch; a torn or corrupt tail is truncated, so a crash mid-write loses
at most the unacknowledged tail and never leaves a half batch behind.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import Sequence

from cohort.log.segment import Segment
from cohort.protocol.records import BatchHeader, assign_offsets, decode_batch, read_header

DEFAULT_SEGMENT_BYTES = 1 << 30
DEFAULT_INDEX_INTERVAL = 4096


class OffsetOutOfRange(ValueError):
    """The requested offset is outside [log start, log end]."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int


class PartitionLog:
    """Segments under ``directory``; all calls are synchronous and single-threaded except
    :meth:`flush`, which may run in a worker thread while appends continue."""

    def __init__(
        self,
        directory: str,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval: int = DEFAULT_INDEX_INTERVAL,
        flush_messages: int | None = None,
    ) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.index_interval = index_interval
        self.flush_messages = flush_messages
        self._unflushed = 0
        self.recovered_bytes = 0
        os.makedirs(directory, exist_ok=True)
        bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
        self.segments: list[Segment] = []
        for i, base in enumerate(bases):
            seg = Segment(directory, base, index_interval)
            if i == len(bases) - 1:
                self.recovered_bytes = seg.recover()
            else:
                seg.load()
            self.segments.append(seg)
        for a, b in zip(self.segments, self.segments[1:]):
            if a.next_offset != b.base_offset:
                raise OSError(f"{directory}: segment {b.base_offset} does not follow {a.base_offset} (ends at {a.next_offset})")
        if not self.segments:
            self.segments.append(Segment(directory, 0, index_interval))
        self._bases = [s.base_offset for s in self.segments]

    # --- offsets ---------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """The offset the next record will get (the high watermark on a single node)."""
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- writing ---------------------------------------------------------------------------

    def append(self, data: bytearray, headers: Sequence[BatchHeader]) -> AppendResult:
        """Assign offsets to validated batches (in place) and append them."""
        active = self.segments[-1]
        if active.size and active.size + len(data) > self.segment_bytes:
            active = self._roll()
        first = active.next_offset
        nxt = assign_offsets(data, headers, first)
        active.append(data, first, nxt, max(h.max_timestamp for h in headers))
        if self.flush_messages is not None:
            self._unflushed += nxt - first
            if self._unflushed >= self.flush_messages:
                self.flush()
        return AppendResult(first, nxt - 1)

    def _roll(self) -> Segment:
        seg = Segment(self.directory, self.end_offset, self.index_interval)
        self.segments[-1].seal()
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        return seg

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

    def flush(self) -> None:
        """fsync the active segment (sealed segments were synced when rolled)."""
        self._unflushed = 0
        self.segments[-1].flush()

    # --- reading ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, allow_oversize: bool = True) -> bytes:
        """Whole batches starting with the one containing ``offset``; b"" at the log end.
        See :meth:`Segment.read` for ``allow_oversize``."""
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

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, or None.

        Walks batch headers (there is no time index yet); within an uncompressed batch the
        exact record is found, for a compressed one its first offset is returned.
        """
        for seg in self.segments:
            for pos, h in seg.headers():
                if h.max_timestamp < timestamp:
                    continue
                if h.compression == 0:
                    batch = os.pread(seg.fd, h.size, pos)
                    for rec in decode_batch(batch):
                        if rec.timestamp >= timestamp:
                            return rec.offset, rec.timestamp
                return h.base_offset, h.max_timestamp
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the batch with the largest max timestamp (ListOffsets -3)."""
        best = None
        for seg in self.segments:
            for _, h in seg.headers():
                if best is None or h.max_timestamp > best[1]:
                    best = (h.last_offset, h.max_timestamp)
        return best

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

"""The aborted-transaction index of one partition log (Kafka's ``TransactionIndex``).

A read_committed consumer must drop the records of aborted transactions, so a Fetch names
every aborted transaction overlapping the records it returns. Each ABORT marker adds an entry
(producer id, first offset, marker offset, LSO after the marker) to the ``.txnindex`` file of the
segment that holds the marker, in Kafka's 34-byte layout. The entries are also kept in memory in
marker order, which is the order a fetch walks them.

The files follow their segments: retention deletes them with the segment, compaction merges a
group's files into the new segment's, and recovery keeps the entries below the point the
producer state is replayed from and rebuilds the rest from the markers it meets.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from typing import Sequence

from cohort.log import fileio
from cohort.log.producer_state import AbortedTxn
from cohort.log.segment import segment_name

SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")  # version 0, producer id, first offset, last offset, last stable offset

_log = logging.getLogger("cohort.log")


def path_for(directory: str, base_offset: int) -> str:
    return os.path.join(directory, segment_name(base_offset, SUFFIX))


def read_file(path: str) -> list[AbortedTxn]:
    """The entries of one index file; a torn tail (a crash mid-append) is ignored."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    out = []
    for i in range(len(raw) // ENTRY.size):
        version, pid, first, last, lso = ENTRY.unpack_from(raw, i * ENTRY.size)
        if version != 0:
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnIndex:
    """The aborted transactions of a log, oldest marker first (see the module docstring)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.entries: list[AbortedTxn] = []
        self._lasts: list[int] = []  # entries' marker offsets, for bisect

    def load(self, bases: Sequence[int], keep_below: int) -> None:
        """Read the files of segments ``bases`` and keep the entries whose marker lies below
        ``keep_below`` (the rest is rebuilt by the replay); files are rewritten to match."""
        entries = []
        for base in bases:
            path = path_for(self.directory, base)
            found = read_file(path)
            kept = [e for e in found if e.last_offset < keep_below]
            if len(kept) != len(found) or (not found and os.path.exists(path)):
                self._write(base, kept)
            entries.extend(kept)
        entries.sort(key=lambda e: e.last_offset)
        self.entries = entries
        self._lasts = [e.last_offset for e in entries]

    def add(self, segment_base: int, entry: AbortedTxn) -> None:
        """Record an abort whose marker was appended to segment ``segment_base``. Best effort on
        disk: a lost entry is rebuilt by the next recovery's replay of that segment."""
        self.entries.append(entry)
        self._lasts.append(entry.last_offset)
        try:
            fd = fileio.IO.open(path_for(self.directory, segment_base), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                fileio.IO.write(fd, ENTRY.pack(0, entry.producer_id, entry.first_offset, entry.last_offset,
                                               entry.last_stable_offset))
            finally:
                os.close(fd)
        except OSError as exc:
            _log.warning("%s: cannot append to the transaction index (%s)", self.directory, exc)

    def sync(self, segment_base: int) -> None:
        """fsync a sealed segment's index file (from then on recovery trusts it)."""
        try:
            fd = os.open(path_for(self.directory, segment_base), os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            fileio.IO.fsync(fd)
        finally:
            os.close(fd)

    def drop_before(self, offset: int) -> None:
        """Forget entries whose marker lies below ``offset`` (their segments were deleted)."""
        cut = bisect.bisect_left(self._lasts, offset)
        if cut:
            del self.entries[:cut]
            del self._lasts[:cut]

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound): those whose marker is at
        or after ``fetch_offset`` and whose first offset is below ``upper_bound``. The walk stops
        at an entry whose LSO reaches the bound: every later abort started after it."""
        out = []
        for i in range(bisect.bisect_left(self._lasts, fetch_offset), len(self.entries)):
            e = self.entries[i]
            if e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                break
        return out

    def _write(self, base: int, entries: list[AbortedTxn]) -> None:
        path = path_for(self.directory, base)
        if not entries:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return
        fileio.replace_file(path, b"".join(ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset,
                                                      e.last_stable_offset) for e in entries))

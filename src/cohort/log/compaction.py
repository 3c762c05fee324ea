"""Log compaction: rewrite closed segments keeping only the newest record per key.

A record survives if no later record in the compacted range has the same key; a surviving
tombstone (null value) is dropped once it is older than the tombstone horizon
(``delete.retention.ms``), by which time every reader of the log has seen it. Records without
a key and compressed batches are kept whole (their keys are not read), which is conservative:
nothing that might be live is ever dropped.

Transactions follow Kafka's cleaner: the caller compacts only below the last stable offset;
records of aborted transactions are removed whatever their keys; records of committed ones
are compacted like any other; a transaction whose marker is not in the range is kept whole and
shadows nothing. A marker is kept while any record of its transaction survives, and then until
it is older than the tombstone horizon. Surviving records keep their
offsets, so a compacted segment has gaps, which readers skip. An optional :class:`OrderGuard`
keeps superseded records that a replay needs in front of a surviving one.

Consecutive segments are grouped (at most ``segment_bytes`` of input each) and every group is
rewritten into exactly one new segment with the group's base offset. The swap is crash-safe:

1. the new segments are written as ``<base>.log.cleaned`` / ``.index.cleaned`` and fsynced;
2. a manifest ``cleaner.swap`` naming (new base, old bases) is written atomically - the commit point;
3. each new file is renamed over the old base's file, the group's other old segments are
   deleted, the directory is fsynced, and the manifest is removed.

On open, :func:`recover_swap` redoes step 3 if the manifest exists (every step is idempotent)
and otherwise deletes ``.cleaned`` leftovers, so a crash at any moment leaves either the old
or the new segments, never a mix that loses or duplicates records.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from dataclasses import dataclass
from typing import Protocol

from crc32c import crc32c

from cohort.log import fileio
from cohort.log.batches import batch_records
from cohort.log.segment import Segment, segment_name
from cohort.protocol.records import (
    ABORT_MARKER,
    COMMIT_MARKER,
    CONTROL_FLAG,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_FLAG,
    Record,
    check_batch,
    control_type,
    decode_batch,
)



class CompactedLog(Protocol):
    """What compaction needs of a partition log (`cohort.log.partition.PartitionLog`, which uses
    this module: the dependency goes one way)."""

    directory: str
    segment_bytes: int
    index_interval: int

    def closed_segments(self, upto: int | None = None) -> list[Segment]: ...

    def swap_segments(self, old: list[Segment], new: list[Segment]) -> bool: ...


MANIFEST = "cleaner.swap"
_log = logging.getLogger("cohort.log")
_INDEX_ENTRY = struct.Struct(">II")


@dataclass
class CompactionPlan:
    """The outcome of the build phase, ready to be swapped in on the owning thread."""

    old: list[Segment]
    new: list[Segment]
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int


def _keyed_batches(seg: Segment):
    """(raw batch, header, [(offset, key, value)] or None) for every batch; None = keep the
    batch whole (compressed or control batches, whose keys are not read)."""
    for pos, h in seg.headers():
        raw = os.pread(seg.fd, h.size, pos)
        check_batch(raw)
        if h.compression or h.attributes & CONTROL_FLAG:
            yield raw, h, None
        else:
            yield raw, h, batch_records(raw)


COMMITTED, ABORTED, UNDECIDED = "committed", "aborted", "undecided"


class Transactions:
    """The fate of every transactional batch in the compacted range, found by one pass over the
    batch headers (and the markers' records): committed, aborted, or undecided when the range
    holds no marker for it. Each marker is linked to the batches of its transaction."""

    def __init__(self, segments: list[Segment]) -> None:
        self.fate: dict[int, str] = {}  # base offset of a transactional data batch -> its fate
        self.marker_of: dict[int, int] = {}  # data batch base offset -> its marker's base offset
        open_batches: dict[int, list[int]] = {}  # producer id -> its open transaction's batches
        for seg in segments:
            for pos, h in seg.headers():
                if not h.attributes & TRANSACTIONAL_FLAG or h.producer_id < 0:
                    continue
                if not h.attributes & CONTROL_FLAG:
                    open_batches.setdefault(h.producer_id, []).append(h.base_offset)
                    continue
                kind = control_type(os.pread(seg.fd, h.size, pos))
                if kind not in (COMMIT_MARKER, ABORT_MARKER):
                    continue
                for base in open_batches.pop(h.producer_id, ()):
                    self.fate[base] = COMMITTED if kind == COMMIT_MARKER else ABORTED
                    self.marker_of[base] = h.base_offset
        for bases in open_batches.values():
            for base in bases:
                self.fate[base] = UNDECIDED

    def of(self, h) -> str | None:
        """The fate of a data batch (None: not transactional)."""
        if not h.attributes & TRANSACTIONAL_FLAG or h.attributes & CONTROL_FLAG or h.producer_id < 0:
            return None
        return self.fate.get(h.base_offset, UNDECIDED)


class OrderGuard(Protocol):
    """Keeps superseded records a replay still needs in front of a newer one (see
    ``CoordinatorLog.compaction_guard``): it sees every record in offset order, then names the
    extra offsets to keep."""

    def observe(self, offset: int, key: bytes, value: bytes | None) -> None: ...

    def extra_offsets(self, newest: dict[bytes, int]) -> set[int]: ...


def newest_offsets(segments: list[Segment], guard: OrderGuard | None = None,
                   txns: Transactions | None = None) -> dict[bytes, int]:
    """key -> offset of its newest record in ``segments`` (records of aborted or undecided
    transactions do not count)."""
    newest: dict[bytes, int] = {}
    for seg in segments:
        for _raw, h, records in _keyed_batches(seg):
            if records and txns is not None and txns.of(h) in (ABORTED, UNDECIDED):
                continue
            if records:
                for offset, key, value in records:
                    if key is not None:
                        newest[key] = offset
                        if guard is not None:
                            guard.observe(offset, key, value)
    return newest


def _varint(value: int, out: bytearray) -> None:
    v = (value << 1) ^ (value >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def encode_kept(raw: bytes, records: list[Record]) -> bytes:
    """A batch holding ``records`` (a subset of the batch ``raw``), with the original base
    offset, last offset delta, timestamps, producer fields and attributes."""
    h = HEADER.unpack_from(raw, 0)
    base_offset, base_ts = h[0], h[7]
    body = bytearray()
    for rec in records:
        r = bytearray(b"\0")
        _varint(rec.timestamp - base_ts, r)
        _varint(rec.offset - base_offset, r)
        for part in (rec.key, rec.value):
            if part is None:
                _varint(-1, r)
            else:
                _varint(len(part), r)
                r += part
        _varint(len(rec.headers), r)
        for hkey, hval in rec.headers:
            hk = hkey.encode()
            _varint(len(hk), r)
            r += hk
            if hval is None:
                _varint(-1, r)
            else:
                _varint(len(hval), r)
                r += hval
        _varint(len(r), body)
        body += r
    fields = list(h)
    fields[1] = HEADER_SIZE - LOG_OVERHEAD + len(body)  # batch length
    fields[4] = 0  # crc, set below
    fields[12] = len(records)
    out = bytearray(HEADER.pack(*fields)) + body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def group_segments(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Consecutive groups of at most ``max_bytes`` input (a larger segment is a group alone)."""
    groups: list[list[Segment]] = []
    size = 0
    for seg in segments:
        if groups and size + seg.size <= max_bytes:
            groups[-1].append(seg)
            size += seg.size
        else:
            groups.append([seg])
            size = seg.size
    return groups


def build(log: CompactedLog, segments: list[Segment], tombstone_horizon_ms: int,
          guard: OrderGuard | None = None) -> CompactionPlan:
    """Write compacted copies of ``segments`` and commit the swap on disk (steps 1-3).

    Safe to run in a worker thread while the owner appends to the active segment: it reads
    only the given sealed segments and touches only their files."""
    directory = log.directory
    txns = Transactions(segments)
    newest = newest_offsets(segments, guard, txns)
    extra = guard.extra_offsets(newest) if guard is not None else set()
    survivors: set[int] = set()  # markers (base offsets) with a surviving record of their transaction
    swaps = []
    records_in = records_out = bytes_out = 0
    for group in group_segments(segments, log.segment_bytes):
        base = group[0].base_offset
        cleaned_log = os.path.join(directory, segment_name(base, ".log.cleaned"))
        cleaned_index = os.path.join(directory, segment_name(base, ".index.cleaned"))
        out = bytearray()
        index = bytearray()
        since = log.index_interval
        for seg in group:
            for raw, h, records in _keyed_batches(seg):
                fate = txns.of(h)
                if fate == ABORTED:
                    records_in += h.record_count
                    continue
                if fate == COMMITTED and records is None:
                    survivors.add(txns.marker_of[h.base_offset])
                if records is None and h.attributes & CONTROL_FLAG and h.attributes & TRANSACTIONAL_FLAG \
                        and h.base_offset not in survivors and h.max_timestamp < tombstone_horizon_ms \
                        and control_type(raw) in (COMMIT_MARKER, ABORT_MARKER):
                    records_in += h.record_count
                    continue  # a marker whose transaction left nothing behind, past the horizon
                if records is None or fate == UNDECIDED:
                    kept_batch = raw
                    records_in += h.record_count
                    records_out += h.record_count
                else:
                    records_in += len(records)
                    kept = {off for off, key, value in records if key is None or off in extra or (
                        newest[key] == off and (value is not None or h.max_timestamp >= tombstone_horizon_ms))}
                    if not kept:
                        continue
                    if fate == COMMITTED:
                        survivors.add(txns.marker_of[h.base_offset])
                    records_out += len(kept)
                    if len(kept) == len(records):
                        kept_batch = raw
                    else:
                        kept_batch = encode_kept(raw, [r for r in decode_batch(raw) if r.offset in kept])
                if since >= log.index_interval:
                    index += _INDEX_ENTRY.pack(h.base_offset - base, len(out))
                    since = 0
                since += len(kept_batch)
                out += kept_batch
        _write_synced(cleaned_log, bytes(out))
        _write_synced(cleaned_index, bytes(index))
        aborted = b"".join(_read_or_empty(seg.txnindex_path) for seg in group)
        if aborted:  # the group's aborted-transaction entries move to the new segment
            _write_synced(os.path.join(directory, segment_name(base, ".txnindex.cleaned")), aborted)
        bytes_out += len(out)
        swaps.append({"base": base, "old": [s.base_offset for s in group]})
    fileio.fsync_dir(directory)
    _write_manifest(directory, swaps)
    _apply(directory, swaps)
    new = []
    for swap in swaps:
        seg = Segment(directory, swap["base"], log.index_interval, create=False)
        if not seg.load():
            seg.recover()
        new.append(seg)
    return CompactionPlan(segments, new, records_in, records_out, sum(s.size for s in segments), bytes_out)


def _write_synced(path: str, data: bytes) -> None:
    fd = fileio.IO.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            n = fileio.IO.write(fd, view)
            view = view[n:]
        fileio.IO.fsync(fd)
    finally:
        os.close(fd)


def _read_or_empty(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _write_manifest(directory: str, swaps: list[dict]) -> None:
    path = os.path.join(directory, MANIFEST)
    _write_synced(path + ".tmp", json.dumps({"swaps": swaps}).encode())
    os.replace(path + ".tmp", path)
    fileio.fsync_dir(directory)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _apply(directory: str, swaps: list[dict]) -> None:
    """Step 3: idempotent, so recovery can redo it after a crash part-way through."""
    for swap in swaps:
        base = swap["base"]
        cleaned_log = os.path.join(directory, segment_name(base, ".log.cleaned"))
        cleaned_index = os.path.join(directory, segment_name(base, ".index.cleaned"))
        if os.path.exists(cleaned_log):
            _unlink(os.path.join(directory, segment_name(base, ".index")))  # never pair an old index with the new log
            _unlink(os.path.join(directory, segment_name(base, ".timeindex")))  # rebuilt from the new log
            os.replace(cleaned_log, os.path.join(directory, segment_name(base, ".log")))
        if os.path.exists(cleaned_index):
            os.replace(cleaned_index, os.path.join(directory, segment_name(base, ".index")))
        cleaned_txn = os.path.join(directory, segment_name(base, ".txnindex.cleaned"))
        if os.path.exists(cleaned_txn):
            os.replace(cleaned_txn, os.path.join(directory, segment_name(base, ".txnindex")))
        for old in swap["old"]:
            if old != base:
                _unlink(os.path.join(directory, segment_name(old, ".log")))
                _unlink(os.path.join(directory, segment_name(old, ".index")))
                _unlink(os.path.join(directory, segment_name(old, ".timeindex")))
                _unlink(os.path.join(directory, segment_name(old, ".txnindex")))
    fileio.fsync_dir(directory)
    _unlink(os.path.join(directory, MANIFEST))
    fileio.fsync_dir(directory)


def recover_swap(directory: str) -> None:
    """Finish a committed swap, or discard an uncommitted one (see the module docstring)."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            swaps = json.load(f)["swaps"]
    except FileNotFoundError:
        swaps = None
    except (ValueError, KeyError):
        swaps = None  # a torn manifest was never renamed into place; cannot happen, but be safe
        _unlink(path)
    if swaps is not None:
        _log.warning("%s: finishing an interrupted compaction swap", directory)
        _apply(directory, swaps)
    for name in os.listdir(directory):
        if name.endswith((".cleaned", ".tmp")):
            _unlink(os.path.join(directory, name))


def compact(log: CompactedLog, tombstone_horizon_ms: int, upto: int | None = None,
            guard: OrderGuard | None = None) -> CompactionPlan | None:
    """Build and swap in one call (for a single thread)."""
    segments = log.closed_segments(upto)
    if not segments:
        return None
    plan = build(log, segments, tombstone_horizon_ms, guard)
    if not log.swap_segments(plan.old, plan.new):
        raise RuntimeError("the log changed during compaction")
    return plan

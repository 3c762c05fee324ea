"""Fast reading of the (key, value) records of uncompressed v2 batches.

Replaying the coordinator log on start and building a compaction's key map read every record,
so this is the hot loop of a restart. It does what ``protocol.records.decode_batch`` does for
the common case (single-byte varints inlined, no Record objects) and hands anything unusual
back to it.
"""

from __future__ import annotations

from cohort.protocol.records import HEADER, HEADER_SIZE, decode_batch
from cohort.protocol.records import read_varint as _varint


def batch_records(batch: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in one validated, uncompressed batch; a malformed
    one raises ``InvalidBatch`` (from the general decoder)."""
    try:
        return _fast(batch)
    except IndexError:
        return [(r.offset, r.key, r.value) for r in decode_batch(batch)]


def _fast(batch: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    h = HEADER.unpack_from(batch, 0)
    base = h[0]
    count = h[12]
    out = []
    p = HEADER_SIZE
    for _ in range(count):
        b = batch[p]
        if b < 0x80:  # record length
            length = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            length, p = _varint(batch, p)
        end = p + length
        p += 1  # attributes
        b = batch[p]  # timestamp delta
        if b < 0x80:
            p += 1
        else:
            _, p = _varint(batch, p)
        b = batch[p]  # offset delta
        if b < 0x80:
            delta = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            delta, p = _varint(batch, p)
        b = batch[p]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            n, p = _varint(batch, p)
        if n < 0:
            key = None
        else:
            key = batch[p : p + n]
            p += n
        b = batch[p]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            n, p = _varint(batch, p)
        if n < 0:
            value = None
        else:
            value = batch[p : p + n]
            p += n
        if batch[p] != 0 or p + 1 != end:  # headers, or a length that lies: the general decoder decides
            return [(r.offset, r.key, r.value) for r in decode_batch(batch)]
        p += 1
        out.append((base + delta, key, value))
    if p != len(batch):
        return [(r.offset, r.key, r.value) for r in decode_batch(batch)]  # raises InvalidBatch if it is malformed
    return out

"""Fast reading of the (key, value) records of uncompressed v2 batches.

Replaying the coordinator log on start and building a compaction's key map read every record,
so this is the hot loop of a restart. It does what ``protocol.records.decode_batch`` does for
the common case (single-byte varints inlined, no Record objects) and hands anything unusual
back to it.
"""

from __future__ import annotations

from cohort.protocol.records import HEADER, HEADER_SIZE, UnusualRecord, decode_batch, plain_records


def batch_records(batch: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in one validated, uncompressed batch; a malformed
    one raises ``InvalidBatch`` (from the general decoder)."""
    h = HEADER.unpack_from(batch, 0)
    base = h[0]
    try:
        records, end = plain_records(batch, HEADER_SIZE, len(batch), h[12])
    except (UnusualRecord, IndexError):
        end = -1
    if end != len(batch):  # the general decoder decides (and raises if the batch is malformed)
        return [(r.offset, r.key, r.value) for r in decode_batch(batch)]
    return [(base + delta, key, value) for delta, _, key, value in records]

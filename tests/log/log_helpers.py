"""Shared helpers for the log tests: append keyed records, read them back."""

from cohort.protocol.records import build_batch, check_batch, check_produce_records, decode_batch, iter_batches


def append(log, records, ts=1000):
    """Append one batch of (key, value) records (a bare value means key None)."""
    pairs = [r if isinstance(r, tuple) else (None, r) for r in records]
    data = bytearray(build_batch(pairs, timestamp=ts))
    return log.append(data, check_produce_records(data))


def read_records(log, offset=None):
    """Every (offset, key, value) from ``offset`` (default: the log start) to the end, checking
    each batch's CRC on the way."""
    out = []
    offset = log.start_offset if offset is None else offset
    while offset < log.end_offset:
        chunk = log.read(offset, 1 << 20)
        if not chunk:
            break
        for pos, h in iter_batches(chunk):
            check_batch(chunk, pos)
            for rec in decode_batch(chunk, pos):
                if rec.offset >= offset:
                    out.append((rec.offset, rec.key, rec.value))
            offset = h.last_offset + 1
    return out

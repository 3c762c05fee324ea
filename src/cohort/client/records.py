"""Records out of a Fetch response's record batches, for the consumer: the hot loop of consuming.

A fetched partition's bytes hold v2 batches, the last one possibly cut short by the fetch size.
Control batches are skipped, and under read_committed so are the batches of aborted
transactions (Kafka's consumer algorithm: the response lists each aborted transaction's producer
and first offset; its batches are skipped until that producer's abort marker). Records below the
fetch position (a batch starts before it) are dropped.

Like `cohort.log.batches`, the loop here reads the common record (single-byte varints inline, no
headers) and hands any other batch to `protocol.records.decode_batch`, which decides.
"""

from __future__ import annotations

from typing import NamedTuple

from cohort.protocol.compression import CompressionError, decompress
from cohort.protocol.records import (
    ABORT_MARKER,
    CONTROL_FLAG,
    HEADER_SIZE,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    InvalidBatch,
    check_batch,
    control_type,
    decode_batch,
    iter_batches,
    read_varint,
)


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class _Unusual(Exception):
    """A record the inline loop does not read (headers, a length that does not add up)."""


def decode_records(topic: str, partition: int, data: bytes, position: int,
                   aborted: list[tuple[int, int]] | None = None, check_crcs: bool = True) -> tuple[list, int]:
    """(records at or after `position`, the offset to fetch next) from a partition's bytes.

    `aborted` ((producer id, first offset) pairs) turns on read_committed filtering. The next
    offset moves past skipped batches too, so a partition whose data is all aborted or control
    records still advances."""
    out: list[ConsumerRecord] = []
    next_offset = position
    aborted = sorted(aborted, key=lambda a: a[1]) if aborted else None
    aborted_producers: set[int] = set()
    for pos, h in iter_batches(data):
        if check_crcs:
            check_batch(data, pos)
        elif h.magic != 2:
            raise InvalidBatch(f"record batch magic {h.magic} is not supported (only v2)")
        last_offset = h.last_offset
        if aborted is not None:
            while aborted and aborted[0][1] <= last_offset:
                aborted_producers.add(aborted.pop(0)[0])
        if h.attributes & CONTROL_FLAG:
            if aborted is not None and h.producer_id in aborted_producers and control_type(data, pos) == ABORT_MARKER:
                aborted_producers.discard(h.producer_id)
        elif last_offset >= position and not (
                aborted is not None and h.attributes & TRANSACTIONAL_FLAG and h.producer_id in aborted_producers):
            _batch(out, topic, partition, data, pos, h, position)
        next_offset = max(next_offset, last_offset + 1)
    return out, next_offset


def _batch(out: list, topic: str, partition: int, data: bytes, pos: int, h, position: int) -> None:
    mark = len(out)
    append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_FLAG else None
    try:
        if h.compression:
            try:
                body = decompress(h.compression, memoryview(data)[pos + HEADER_SIZE: pos + h.size])
            except CompressionError as exc:
                raise InvalidBatch(str(exc)) from None
            _decode_body(out, topic, partition, body, 0, len(body), h.record_count, h.base_offset,
                         h.base_timestamp, append_time, position)
        else:
            _decode_body(out, topic, partition, data, pos + HEADER_SIZE, pos + h.size, h.record_count,
                         h.base_offset, h.base_timestamp, append_time, position)
    except (_Unusual, IndexError):
        del out[mark:]
        out.extend(ConsumerRecord(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers)
                   for r in decode_batch(data, pos) if r.offset >= position)


def _decode_body(out: list, topic: str, partition: int, buf: bytes, p: int, end: int, count: int,
                 base_offset: int, base_ts: int, append_time: int | None, position: int) -> None:
    """The records of one batch body; the two bytes fields are inlined, as in cohort.log.batches,
    because a call per field is a tenth of the loop."""
    append = out.append
    record = ConsumerRecord
    for _ in range(count):
        b = buf[p]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            length, p = read_varint(buf, p)
        rec_end = p + length
        if length < 0 or rec_end > end:
            raise _Unusual
        p += 1  # attributes
        b = buf[p]
        if b < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            ts_delta, p = read_varint(buf, p)
        b = buf[p]
        if b < 0x80:
            off_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            off_delta, p = read_varint(buf, p)
        b = buf[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            n, p = read_varint(buf, p)
        if n < 0:
            key = None
        else:
            key = buf[p:p + n]
            p += n
        b = buf[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            n, p = read_varint(buf, p)
        if n < 0:
            value = None
        else:
            value = buf[p:p + n]
            p += n
        if buf[p] != 0 or p + 1 != rec_end:  # headers, or a length that lies: decode_batch decides
            raise _Unusual
        p = rec_end
        offset = base_offset + off_delta
        if offset >= position:
            append(record(topic, partition, offset, append_time if append_time is not None else base_ts + ts_delta,
                          key, value))

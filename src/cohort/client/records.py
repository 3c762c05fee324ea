"""Records out of a Fetch response's record batches, for the consumer: the hot loop of consuming.

A fetched partition's bytes hold v2 batches, the last one possibly cut short by the fetch size.
Control batches are skipped, and under read_committed so are the batches of aborted
transactions (Kafka's consumer algorithm: the response lists each aborted transaction's producer
and first offset; its batches are skipped until that producer's abort marker). Records below the
fetch position (a batch starts before it) are dropped.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from cohort.protocol.compression import CompressionError, decompress
from cohort.protocol.records import (
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    InvalidBatch,
)

_CONTROL_KEY = struct.Struct(">hh")
ABORT_MARKER = 0


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def decode_records(topic: str, partition: int, data: bytes, position: int,
                   aborted: list[tuple[int, int]] | None = None, check_crcs: bool = True) -> tuple[list, int]:
    """(records at or after `position`, the offset to fetch next) from a partition's bytes.

    `aborted` ((producer id, first offset) pairs) turns on read_committed filtering. The next
    offset moves past skipped batches too, so a partition whose data is all aborted or control
    records still advances."""
    out: list[ConsumerRecord] = []
    pos, end, next_offset = 0, len(data), position
    aborted = sorted(aborted, key=lambda a: a[1]) if aborted else None
    aborted_producers: set[int] = set()
    while end - pos >= HEADER_SIZE:
        (base_offset, length, _epoch, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id,
         _pepoch, _seq, count) = HEADER.unpack_from(data, pos)
        size = LOG_OVERHEAD + length
        if pos + size > end:
            break  # the fetch cut the last batch short
        if magic != 2:
            raise InvalidBatch(f"record batch magic {magic} at offset {base_offset} (only v2 is read)")
        if check_crcs and crc32c(memoryview(data)[pos + 21: pos + size]) != crc:
            raise InvalidBatch(f"record batch at offset {base_offset} of {topic}-{partition} fails its CRC")
        last_offset = base_offset + last_delta
        if aborted is not None:
            while aborted and aborted[0][1] <= last_offset:
                aborted_producers.add(aborted.pop(0)[0])
        if attributes & CONTROL_FLAG:
            if (aborted is not None and count and producer_id in aborted_producers
                    and _control_type(data, pos + HEADER_SIZE) == ABORT_MARKER):
                aborted_producers.discard(producer_id)
        elif last_offset >= position and not (
                aborted is not None and attributes & TRANSACTIONAL_FLAG and producer_id in aborted_producers):
            codec = attributes & COMPRESSION_MASK
            if codec:
                try:
                    body = decompress(codec, memoryview(data)[pos + HEADER_SIZE: pos + size])
                except CompressionError as exc:
                    raise InvalidBatch(str(exc)) from None
                _decode_body(out, topic, partition, body, 0, len(body), count, base_offset, base_ts,
                             max_ts if attributes & TIMESTAMP_TYPE_FLAG else None, position)
            else:
                _decode_body(out, topic, partition, data, pos + HEADER_SIZE, pos + size, count, base_offset,
                             base_ts, max_ts if attributes & TIMESTAMP_TYPE_FLAG else None, position)
        next_offset = max(next_offset, last_offset + 1)
        pos += size
    return out, next_offset


def _control_type(buf: bytes, p: int) -> int:
    """The type of a control batch's first record (0 abort, 1 commit) from its key."""
    _, p = _varint(buf, p)  # record length
    p += 1  # attributes
    _, p = _varint(buf, p)  # timestamp delta
    _, p = _varint(buf, p)  # offset delta
    klen, p = _varint(buf, p)
    return _CONTROL_KEY.unpack_from(buf, p)[1] if klen >= 4 else -1


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("record varint too long")


def _decode_body(out: list, topic: str, partition: int, buf: bytes, p: int, end: int, count: int,
                 base_offset: int, base_ts: int, append_time: int | None, position: int) -> None:
    """The records of one batch body, one-byte varints read inline (most lengths and deltas)."""
    append = out.append
    record = ConsumerRecord
    try:
        for _ in range(count):
            b = buf[p]
            if b < 0x80:
                length, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                length, p = _varint(buf, p)
            rec_end = p + length
            if length < 0 or rec_end > end:
                raise InvalidBatch("record runs past the end of its batch")
            p += 1  # attributes
            b = buf[p]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                ts_delta, p = _varint(buf, p)
            b = buf[p]
            if b < 0x80:
                off_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                off_delta, p = _varint(buf, p)
            b = buf[p]
            if b < 0x80:
                n, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                n, p = _varint(buf, p)
            if n < 0:
                key = None
            else:
                key = buf[p:p + n]
                p += n
            b = buf[p]
            if b < 0x80:
                n, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                n, p = _varint(buf, p)
            if n < 0:
                value = None
            else:
                value = buf[p:p + n]
                p += n
            b = buf[p]
            if b == 0:  # no headers: the common case
                p += 1
                headers = ()
            else:
                headers, p = _headers(buf, p)
            if p != rec_end:
                raise InvalidBatch("a record's length does not match its contents")
            offset = base_offset + off_delta
            if offset >= position:
                append(record(topic, partition, offset, append_time if append_time is not None else base_ts + ts_delta,
                              key, value, headers))
    except IndexError:
        raise InvalidBatch("record runs past the end of its batch") from None


def _headers(buf: bytes, p: int) -> tuple[tuple, int]:
    count, p = _varint(buf, p)
    headers = []
    for _ in range(count):
        n, p = _varint(buf, p)
        name = bytes(buf[p:p + n]).decode(errors="replace")
        p += n
        n, p = _varint(buf, p)
        headers.append((name, None if n < 0 else bytes(buf[p:p + n])))
        p += max(n, 0)
    return tuple(headers), p

"""Records out of a Fetch response's record batches, for the consumer: the hot loop of consuming.

A fetched partition's bytes hold v2 batches, the last one possibly cut short by the fetch size.
Control batches are skipped, and under read_committed so are the batches of aborted
transactions (Kafka's consumer algorithm: the response lists each aborted transaction's producer
and first offset; its batches are skipped until that producer's abort marker). Records below the
fetch position (a batch starts before it) are dropped.

Like `cohort.log.batches`, it reads the common record with `protocol.records.plain_records` and
hands any other batch to `protocol.records.decode_batch`, which decides.
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
    UnusualRecord,
    check_batch,
    control_type,
    decode_batch,
    iter_batches,
    plain_records,
)


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
    append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_FLAG else None
    try:
        if h.compression:
            try:
                body = decompress(h.compression, memoryview(data)[pos + HEADER_SIZE: pos + h.size])
            except CompressionError as exc:
                raise InvalidBatch(str(exc)) from None
            records, _ = plain_records(body, 0, len(body), h.record_count)
        else:
            records, _ = plain_records(data, pos + HEADER_SIZE, pos + h.size, h.record_count)
    except (UnusualRecord, IndexError):
        out.extend(ConsumerRecord(topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers)
                   for r in decode_batch(data, pos) if r.offset >= position)
        return
    base_offset, base_ts, record = h.base_offset, h.base_timestamp, ConsumerRecord
    for off_delta, ts_delta, key, value in records:
        offset = base_offset + off_delta
        if offset >= position:
            out.append(record(topic, partition, offset, append_time if append_time is not None else base_ts + ts_delta,
                              key, value))

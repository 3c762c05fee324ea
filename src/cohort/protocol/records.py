"""Record batch v2 helpers: what a broker needs without decoding records.

A batch is a 61-byte header followed by records. The broker validates the length and the
CRC32C (which covers bytes 21..end), assigns offsets by rewriting baseOffset (bytes 0-7, outside
the CRC) and stores the bytes as sent, so compressed batches pass through untouched.
Encoding and decoding of uncompressed records is here too, for cohort's own log
(``__consumer_offsets``) and for tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Sequence

from crc32c import crc32c

from cohort.protocol.compression import CompressionError, compress, decompress

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes before what batchLength counts
CRC_START = 21
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08  # LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
NO_TIMESTAMP = -1


class InvalidBatch(ValueError):
    """The bytes are not a well-formed v2 record batch (Kafka's CORRUPT_MESSAGE)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Unpack the header at ``pos`` (no validation beyond having 61 bytes)."""
    if len(buf) - pos < HEADER_SIZE:
        raise InvalidBatch(f"record batch header needs {HEADER_SIZE} bytes, got {len(buf) - pos}")
    return BatchHeader(*HEADER.unpack_from(buf, pos))


def check_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Validate the batch at ``pos``: complete, magic 2, CRC32C, sane counts."""
    h = read_header(buf, pos)
    if h.magic != 2:
        raise InvalidBatch(f"record batch magic {h.magic} is not supported (only v2)")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatch(f"record batch length {h.batch_length} is shorter than its header")
    end = pos + h.size
    if end > len(buf):
        raise InvalidBatch(f"record batch of {h.size} bytes is truncated at {len(buf) - pos}")
    actual = crc32c(memoryview(buf)[pos + CRC_START : end])
    if actual != h.crc:
        raise InvalidBatch(f"record batch CRC32C mismatch: stored {h.crc:#010x}, computed {actual:#010x}")
    if h.record_count < 0 or h.last_offset_delta < 0:
        raise InvalidBatch("record batch has a negative record count or offset delta")
    return h


def check_produce_records(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Validate a Produce request's record set: one or more whole, valid batches, each holding
    at least one record with offsets 0..n-1 as producers write them."""
    headers = []
    pos = 0
    if not buf:
        raise InvalidBatch("empty record set")
    while pos < len(buf):
        h = check_batch(buf, pos)
        if h.record_count == 0 or h.last_offset_delta != h.record_count - 1:
            raise InvalidBatch(
                f"record batch declares {h.record_count} records but last offset delta {h.last_offset_delta}"
            )
        headers.append(h)
        pos += h.size
    return headers


def assign_offsets(buf: bytearray, headers: Sequence[BatchHeader], next_offset: int, leader_epoch: int = 0) -> int:
    """Rewrite each batch's baseOffset (and leader epoch) in place, starting at ``next_offset``.

    Both fields sit outside the CRC. Returns the offset after the last record.
    """
    pos = 0
    for h in headers:
        _OFFSET.pack_into(buf, pos, next_offset)
        _EPOCH.pack_into(buf, pos + 12, leader_epoch)
        next_offset += h.last_offset_delta + 1
        pos += h.size
    return next_offset


def iter_batches(buf: bytes | bytearray | memoryview, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in ``buf`` (stops at a partial tail)."""
    while len(buf) - pos >= HEADER_SIZE:
        h = read_header(buf, pos)
        if pos + h.size > len(buf) or h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            return
        yield pos, h
        pos += h.size


# --- uncompressed records -------------------------------------------------------------------


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _varint(value: int, out: bytearray) -> None:
    v = _zigzag(value)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A record's zigzag varint at ``pos``: (value, next position). The end of ``buf`` is found by
    the IndexError of reading past it (free until it happens), so record loops can share this."""
    value = 0
    shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise InvalidBatch("record varint runs past the end of the batch") from None
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("record varint too long")


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    timestamp: int = 0,
    timestamps: Sequence[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    attributes: int = 0,
) -> bytes:
    """Encode a v2 batch of (key, value) records, all stamped ``timestamp`` unless
    ``timestamps`` gives one per record; ``compression`` is a codec id (see
    :mod:`cohort.protocol.compression`), ``attributes`` extra attribute bits."""
    times = list(timestamps) if timestamps is not None else [timestamp] * len(records)
    base_ts = times[0] if times else timestamp
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        rec = bytearray(b"\0")  # attributes
        _varint(times[delta] - base_ts, rec)
        _varint(delta, rec)
        for part in (key, value):
            if part is None:
                _varint(-1, rec)
            else:
                _varint(len(part), rec)
                rec += part
        _varint(0, rec)  # no headers
        _varint(len(rec), body)
        body += rec
    if compression:
        body = bytearray(compress(compression, bytes(body)))
    n = len(records)
    head = bytearray(
        HEADER.pack(
            base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), 0, 2, 0, compression | attributes,
            max(n - 1, 0), base_ts, max(times, default=timestamp), producer_id, producer_epoch, base_sequence, n,
        )
    )
    out = head + body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


class UnusualRecord(Exception):
    """A record `plain_records` does not read: it has headers, or its lengths do not add up."""


def plain_records(buf: bytes, p: int, end: int, count: int) -> tuple[list[tuple[int, int, bytes | None, bytes | None]], int]:
    """((offset delta, timestamp delta, key, value) of ``count`` records from ``p``, the position
    after them): the hot loop of reading records, shared by the coordinator log's replay and the
    consumer's fetch. Single-byte varints are read inline, as a call per field costs a tenth of
    the loop. A record with headers or lengths that do not add up raises `UnusualRecord`, reading
    past ``buf`` raises IndexError: `decode_batch`, which checks everything, then decides."""
    out = []
    append = out.append
    for _ in range(count):
        b = buf[p]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            length, p = read_varint(buf, p)
        record_end = p + length
        if length < 0 or record_end > end:
            raise UnusualRecord
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
        if buf[p] != 0 or p + 1 != record_end:
            raise UnusualRecord
        p = record_end
        append((off_delta, ts_delta, key, value))
    return out, p


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> list[Record]:
    """Decode the records of the (validated) batch at ``pos``, decompressing if needed. In a
    LogAppendTime batch every record carries the batch's max timestamp, as in Kafka."""
    h = read_header(buf, pos)
    if h.compression:
        try:
            mv = memoryview(decompress(h.compression, memoryview(buf)[pos + HEADER_SIZE : pos + h.size]))
        except CompressionError as exc:
            raise InvalidBatch(str(exc)) from None
        p = 0
    else:
        mv = memoryview(buf)[pos : pos + h.size]
        p = HEADER_SIZE
    append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_FLAG else None
    out = []
    for _ in range(h.record_count):
        length, p = read_varint(mv, p)
        end = p + length
        if length < 0 or end > len(mv):
            raise InvalidBatch("record runs past the end of the batch")
        p += 1  # attributes
        ts_delta, p = read_varint(mv, p)
        off_delta, p = read_varint(mv, p)
        parts = []
        for _k in range(2):
            n, p = read_varint(mv, p)
            if n < 0:
                parts.append(None)
            else:
                if p + n > end:
                    raise InvalidBatch("record key or value runs past the record")
                parts.append(bytes(mv[p : p + n]))
                p += n
        n_headers, p = read_varint(mv, p)
        headers = []
        for _h in range(n_headers):
            n, p = read_varint(mv, p)
            hkey = bytes(mv[p : p + n]).decode(errors="replace")
            p += n
            n, p = read_varint(mv, p)
            hval = None if n < 0 else bytes(mv[p : p + n])
            p += max(n, 0)
            headers.append((hkey, hval))
        if p != end:
            raise InvalidBatch("record length does not match its contents")
        ts = h.base_timestamp + ts_delta if append_time is None else append_time
        out.append(Record(h.base_offset + off_delta, ts, parts[0], parts[1], tuple(headers)))
    return out


def record_times(buf: bytes | bytearray | memoryview, pos: int = 0) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of the batch at ``pos``, decompressing if needed, without
    decoding keys, values or headers (ListOffsets by timestamp reads one batch this way)."""
    h = read_header(buf, pos)
    if h.attributes & TIMESTAMP_TYPE_FLAG:
        for i in range(h.record_count):  # every record has the batch's timestamp
            yield h.base_offset + i, h.max_timestamp
        return
    if h.compression:
        try:
            mv = decompress(h.compression, memoryview(buf)[pos + HEADER_SIZE : pos + h.size])
        except CompressionError as exc:
            raise InvalidBatch(str(exc)) from None
        p = 0
    else:
        mv = bytes(memoryview(buf)[pos : pos + h.size])
        p = HEADER_SIZE
    base_ts, base = h.base_timestamp, h.base_offset
    for _ in range(h.record_count):
        length, p = read_varint(mv, p)
        end = p + length
        ts_delta, q = read_varint(mv, p + 1)  # after the attributes byte
        off_delta, _ = read_varint(mv, q)
        yield base + off_delta, base_ts + ts_delta
        p = end


# --- transaction markers (control batches) ---------------------------------------------------

ABORT_MARKER, COMMIT_MARKER = 0, 1  # Kafka's ControlRecordType ids for transaction markers
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def build_marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       timestamp: int) -> bytes:
    """A transaction marker as Kafka writes it: a transactional control batch of one record whose
    key is (version 0, COMMIT or ABORT) and whose value is (version 0, coordinator epoch)."""
    return build_batch([(_CONTROL_KEY.pack(0, COMMIT_MARKER if commit else ABORT_MARKER),
                         _CONTROL_VALUE.pack(0, coordinator_epoch))],
                       timestamp=timestamp, producer_id=producer_id, producer_epoch=producer_epoch,
                       attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG)


def control_type(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The control record type of the (validated, uncompressed) control batch at ``pos``: COMMIT,
    ABORT, or another type (KRaft's, or -1 when unreadable), which callers ignore."""
    try:
        records = decode_batch(buf, pos)
    except InvalidBatch:
        return -1
    if len(records) != 1 or records[0].key is None or len(records[0].key) < 4:
        return -1
    version, kind = _CONTROL_KEY.unpack_from(records[0].key)
    return kind if version >= 0 else -1


class TxnBatch(NamedTuple):
    """What makes a batch transactional: its producer, and for a marker its control type
    (``marker`` -1 for a transactional data batch)."""

    producer_id: int
    producer_epoch: int
    marker: int = -1

"""Kafka's checks on a client's record batch before it is appended (``ProduceRequest``'s and
``LogValidator``'s rules), as a pure function of the batch, the topic's policy and the clock.

A Produce v3+ partition entry holds exactly one v2 batch. Compacted topics refuse records
without a key, and CreateTime topics refuse timestamps outside
``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``; both
answer with one error per offending record (RecordErrors). LogAppendTime topics get the
batch's max timestamp and timestamp type rewritten (and its CRC recomputed); the records, and a
compressed payload, stay as the producer sent them.

Speed: Kafka reads every record of every batch. cohort reads them only where the answer
depends on them: for compacted topics (keys), when a lower timestamp bound is configured, and
when the batch header says a timestamp is out of range or typed LogAppendTime. Otherwise the
upper bound is checked against the header's max timestamp, which the producer computed over
its records; a producer that lies there only misdates its own records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from cohort.protocol.records import (
    CONTROL_FLAG,
    CRC_START,
    TIMESTAMP_TYPE_FLAG,
    BatchHeader,
    InvalidBatch,
    check_produce_records,
    decode_batch,
    read_header,
)

CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
NO_LIMIT = 2**63 - 1
ZSTD = 4
_MAX_TS = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_MIN_RECORD_OVERHEAD = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """The topic configs the checks read."""

    compacted: bool = False
    log_append_time: bool = False
    before_max_ms: int = NO_LIMIT
    after_max_ms: int = 3_600_000
    max_message_bytes: int = 1_048_588


class RecordValidationError(Exception):
    """The batch is refused: the partition's error code and message, and per-record errors
    as (index in the batch, message)."""

    def __init__(self, code: int, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.record_errors = record_errors or []


def validate(data: bytearray, version: int, policy: TopicPolicy, now: int, where: str) -> tuple[BatchHeader, int]:
    """Check a Produce partition's records (``where`` names the partition in messages) and
    apply LogAppendTime in place. Returns the batch header and the log append time (-1 for
    CreateTime topics); raises :class:`RecordValidationError`."""
    # The order of Kafka's checks: ProduceRequest.validateRecords finds the batches (a length
    # running past the data means there is none), then the magic and the count; the log then
    # checks the size and the CRC.
    if len(data) >= 12 and _LENGTH.unpack_from(data, 8)[0] < _MIN_RECORD_OVERHEAD:
        raise RecordValidationError(CORRUPT_MESSAGE, f"Record size {_LENGTH.unpack_from(data, 8)[0]} is less than the minimum record overhead ({_MIN_RECORD_OVERHEAD})")
    if len(data) < 17 or 12 + _LENGTH.unpack_from(data, 8)[0] > len(data):
        raise RecordValidationError(INVALID_RECORD, f"Produce requests with version {version} must have at least one record batch per partition")
    if data[16] != 2:
        raise RecordValidationError(INVALID_RECORD, f"Produce requests with version {version} are only allowed to contain record batches with magic version 2")
    if 12 + _LENGTH.unpack_from(data, 8)[0] != len(data):
        raise RecordValidationError(INVALID_RECORD, f"Produce requests with version {version} are only allowed to contain exactly one record batch per partition")
    try:
        headers = check_produce_records(data)
    except InvalidBatch as exc:
        raise RecordValidationError(CORRUPT_MESSAGE, str(exc)) from None
    h = headers[0]
    if h.compression > ZSTD:
        raise RecordValidationError(CORRUPT_MESSAGE, f"unknown compression codec {h.compression} in {where}")
    if h.compression == ZSTD and version < 7:
        raise RecordValidationError(UNSUPPORTED_COMPRESSION_TYPE, f"Produce requests with version {version} are not allowed to use ZStandard compression")
    if h.size > policy.max_message_bytes:
        raise RecordValidationError(MESSAGE_TOO_LARGE, f"The record batch of {h.size} bytes to {where} is larger than the maximum allowed ({policy.max_message_bytes})")
    if h.attributes & CONTROL_FLAG:
        raise RecordValidationError(INVALID_RECORD, f"Clients are not allowed to write control records in topic partition {where}")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise RecordValidationError(INVALID_RECORD, f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id} in topic partition {where}")
    if _records_needed(h, policy, now):
        _check_records(data, h, policy, now, where)
    if not policy.log_append_time:
        return h, -1
    data[22] |= TIMESTAMP_TYPE_FLAG  # the low byte of the int16 attributes at 21
    return _stamp(data, now), now


def _records_needed(h: BatchHeader, policy: TopicPolicy, now: int) -> bool:
    if policy.compacted or h.attributes & TIMESTAMP_TYPE_FLAG:
        return True
    if policy.log_append_time:
        return False
    if policy.before_max_ms < NO_LIMIT:
        return True
    return h.max_timestamp > now + policy.after_max_ms


def _check_records(data: bytearray, h: BatchHeader, policy: TopicPolicy, now: int, where: str) -> None:
    try:
        records = decode_batch(data)
    except InvalidBatch as exc:
        raise RecordValidationError(CORRUPT_MESSAGE, f"{exc} in topic partition {where}") from None
    errors: list[tuple[int, str]] = []
    timestamp_error = False
    low = now - policy.before_max_ms if policy.before_max_ms < NO_LIMIT else None
    high = now + policy.after_max_ms
    for i, r in enumerate(records):
        if policy.compacted and r.key is None:
            errors.append((i, f"Compacted topic cannot accept message without key in topic partition {where}."))
        elif not policy.log_append_time and r.timestamp != -1 and (r.timestamp > high or (low is not None and r.timestamp < low)):
            timestamp_error = True
            errors.append((i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. "
                              f"The timestamp should be within [{now - policy.before_max_ms}, {high}]"))
        elif policy.log_append_time and h.attributes & TIMESTAMP_TYPE_FLAG:
            timestamp_error = True
            errors.append((i, "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime."))
    if not errors:
        return
    if timestamp_error:
        raise RecordValidationError(INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise RecordValidationError(INVALID_RECORD, f"One or more records have been rejected due to {len(errors)} record errors "
                                                f"in total, and only showing the first three errors at most: [{shown}]", errors)


def _stamp(data: bytearray, now: int) -> BatchHeader:
    """Set the max timestamp to ``now`` and recompute the CRC (LogAppendTime)."""
    _MAX_TS.pack_into(data, 35, now)
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[CRC_START:]))
    return read_header(data)  # validated above; only the timestamp, type and CRC changed

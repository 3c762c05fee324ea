"""Record batch v2 helpers, cross-checked against kafka-python's independent implementation."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from cohort.protocol.records import (
    InvalidBatch,
    assign_offsets,
    build_batch,
    check_batch,
    check_produce_records,
    decode_batch,
    iter_batches,
    read_header,
)


def kp_batch(values, compression=0, base_ts=1_700_000_000_123):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=7, producer_epoch=1, base_sequence=0, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=base_ts + i, key=b"k%d" % i, value=v, headers=[])
    return bytes(b.build())


def test_kafka_python_batch_validates_and_decodes():
    data = kp_batch([b"a", b"bb", None])
    h = check_batch(data)
    assert (h.record_count, h.last_offset_delta, h.producer_id, h.base_timestamp) == (3, 2, 7, 1_700_000_000_123)
    recs = decode_batch(data)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (0, b"k0", b"a", 1_700_000_000_123), (1, b"k1", b"bb", 1_700_000_000_124), (2, b"k2", None, 1_700_000_000_125)]


def test_our_batch_is_read_by_kafka_python():
    data = build_batch([(b"key", b"value"), (b"gone", None)], base_offset=40, timestamp=1234)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in batch] == [(40, b"key", b"value", 1234), (41, b"gone", None, 1234)]


def test_assign_offsets_keeps_crc_valid():
    data = bytearray(kp_batch([b"x"] * 3) + kp_batch([b"y"] * 2))
    headers = check_produce_records(data)
    assert assign_offsets(data, headers, 100) == 105
    got = [(pos, h.base_offset, h.last_offset) for pos, h in iter_batches(data)]
    assert [g[1:] for g in got] == [(100, 102), (103, 104)]
    for pos, _, _ in got:
        check_batch(data, pos)  # CRC still valid after the rewrite
    assert DefaultRecordBatch(bytearray(data[: got[1][0]])).validate_crc()


def test_gzip_batch_passes_validation_unchanged():
    data = kp_batch([b"z" * 500] * 10, compression=1)
    h = check_produce_records(data)[0]
    assert h.compression == 1 and h.record_count == 10
    before = bytes(data)
    assert [r.value for r in decode_batch(data)] == [b"z" * 500] * 10  # kafka-python's gzip, read back
    assert bytes(data) == before  # decoding leaves the stored bytes as sent


def test_crc_mismatch_is_rejected():
    data = bytearray(kp_batch([b"hello"]))
    data[-1] ^= 0xFF
    with pytest.raises(InvalidBatch, match="CRC"):
        check_batch(data)


def test_truncated_and_bad_headers_are_rejected():
    data = kp_batch([b"hello"])
    with pytest.raises(InvalidBatch):
        check_batch(data[:30])
    with pytest.raises(InvalidBatch, match="truncated"):
        check_batch(data[:-1])
    bad_magic = bytearray(data)
    bad_magic[16] = 1
    with pytest.raises(InvalidBatch, match="magic"):
        check_batch(bad_magic)
    with pytest.raises(InvalidBatch):
        check_produce_records(b"")
    with pytest.raises(InvalidBatch):  # trailing garbage after a valid batch
        check_produce_records(data + b"\x00" * 10)


def test_record_count_must_match_offset_delta():
    data = bytearray(build_batch([(b"a", b"b"), (b"c", b"d")]))
    struct.pack_into(">i", data, 57, 5)  # claim 5 records (inside the CRC: recompute it)
    from crc32c import crc32c

    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(InvalidBatch, match="declares"):
        check_produce_records(data)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=200))), min_size=1, max_size=20),
       st.integers(0, 2**40))
def test_build_decode_roundtrip(records, base):
    data = build_batch(records, base_offset=base, timestamp=99)
    assert read_header(data).last_offset == base + len(records) - 1
    check_batch(data)
    assert [(r.key, r.value) for r in decode_batch(data)] == records
    assert [r.offset for r in decode_batch(data)] == list(range(base, base + len(records)))

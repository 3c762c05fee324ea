"""The consumer's record loop (cohort.client.records): offsets from the fetch position, partial
last batches, compressed batches, control batches, aborted transactions under read_committed,
and corrupt batches refused."""

from __future__ import annotations

import pytest

from cohort.client.records import decode_records
from cohort.protocol.compression import GZIP, ZSTD
from cohort.protocol.records import TRANSACTIONAL_FLAG, InvalidBatch, build_batch, build_marker_batch


def values(records):
    return [r.value for r in records]


def test_records_start_at_the_position_and_a_cut_batch_waits_for_the_next_fetch():
    data = build_batch([(b"k0", b"v0"), (None, b"v1"), (b"k2", None)], base_offset=10) + \
        build_batch([(None, b"v3")], base_offset=13)
    records, next_offset = decode_records("t", 0, data, 11)
    assert [(r.offset, r.key, r.value) for r in records] == [(11, None, b"v1"), (12, b"k2", None), (13, None, b"v3")]
    assert next_offset == 14
    records, next_offset = decode_records("t", 0, data[:-3], 10)
    assert values(records) == [b"v0", b"v1", None] and next_offset == 13


@pytest.mark.parametrize("codec", [GZIP, ZSTD])
def test_compressed_batches(codec):
    data = build_batch([(None, b"x" * 2000), (None, b"y")], base_offset=0, compression=codec)
    records, next_offset = decode_records("t", 0, data, 0)
    assert values(records) == [b"x" * 2000, b"y"] and next_offset == 2


def test_read_committed_skips_aborted_transactions_and_every_control_batch():
    aborted = build_batch([(None, b"a0"), (None, b"a1")], base_offset=0, producer_id=7, producer_epoch=0,
                          attributes=TRANSACTIONAL_FLAG)
    abort = build_marker_batch(7, 0, commit=False, coordinator_epoch=0, timestamp=0)
    committed = build_batch([(None, b"c3")], base_offset=3, producer_id=7, producer_epoch=0,
                            attributes=TRANSACTIONAL_FLAG)
    commit = build_marker_batch(7, 0, commit=True, coordinator_epoch=0, timestamp=0)
    data = aborted + _at(abort, 2) + committed + _at(commit, 4)
    records, next_offset = decode_records("t", 0, data, 0, aborted=[(7, 0)])
    assert values(records) == [b"c3"] and next_offset == 5
    records, _ = decode_records("t", 0, data, 0)  # read_uncommitted: the aborted records too, no markers
    assert values(records) == [b"a0", b"a1", b"c3"]


def _at(batch: bytes, offset: int) -> bytes:
    return offset.to_bytes(8, "big") + batch[8:]  # the base offset sits outside the CRC


def test_a_corrupt_batch_is_refused_unless_crcs_are_not_checked():
    data = bytearray(build_batch([(None, b"value")], base_offset=0))
    data[-2] ^= 0xFF  # inside the value
    with pytest.raises(InvalidBatch, match="CRC32C"):
        decode_records("t", 0, bytes(data), 0)
    records, _ = decode_records("t", 0, bytes(data), 0, check_crcs=False)
    assert len(records) == 1

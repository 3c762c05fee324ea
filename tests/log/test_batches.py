"""The fast record reader agrees with the general decoder on any uncompressed batch."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.log.batches import batch_records
from cohort.protocol.records import InvalidBatch, build_batch, decode_batch

blobs = st.one_of(st.none(), st.binary(max_size=300))


@settings(max_examples=150, deadline=None)
@given(records=st.lists(st.tuples(blobs, blobs), min_size=1, max_size=40), base=st.integers(0, 2**40))
def test_fast_reader_matches_decode_batch(records, base):
    batch = build_batch(records, base_offset=base, timestamp=7)
    assert batch_records(batch) == [(r.offset, r.key, r.value) for r in decode_batch(batch)]
    assert [kv[1:] for kv in batch_records(batch)] == records


def test_a_record_whose_length_lies_is_rejected():
    import struct

    from crc32c import crc32c

    batch = bytearray(build_batch([(b"k", b"v"), (b"k2", b"v2")]))
    batch[61] += 2  # the first record's length varint now claims one byte more (CRC fixed up)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    with pytest.raises(InvalidBatch):
        batch_records(bytes(batch))

"""The segmented partition log: offsets, reads, segment rolling and crash recovery."""

import os

import pytest

from cohort.log import OffsetOutOfRange, PartitionLog
from cohort.protocol.records import build_batch, check_batch, check_produce_records, decode_batch, iter_batches


def append(log, values, ts=1000):
    data = bytearray(build_batch([(None, v) for v in values], timestamp=ts))
    return log.append(data, check_produce_records(data))


def read_values(log, offset=0, max_bytes=1 << 20):
    out = []
    while offset < log.end_offset:
        chunk = log.read(offset, max_bytes)
        assert chunk, "read returned nothing before the log end"
        for pos, h in iter_batches(chunk):
            check_batch(chunk, pos)
            for rec in decode_batch(chunk, pos):
                if rec.offset >= offset:
                    out.append((rec.offset, rec.value))
            offset = h.last_offset + 1
    return out


def test_append_assigns_consecutive_offsets(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    assert (log.start_offset, log.end_offset) == (0, 0)
    r1 = append(log, [b"a", b"b", b"c"])
    r2 = append(log, [b"d"])
    assert (r1.base_offset, r1.last_offset, r2.base_offset, r2.last_offset) == (0, 2, 3, 3)
    assert log.end_offset == 4
    assert read_values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert read_values(log, 2) == [(2, b"c"), (3, b"d")]  # the whole batch comes back; the reader skips
    assert log.read(4, 100) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 100)
    log.close()


def test_read_returns_whole_batches_and_at_least_one(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    for i in range(10):
        append(log, [bytes([i]) * 300])
    one = log.read(0, 10)  # limit below one batch: still the first batch, whole
    assert [h.last_offset for _, h in iter_batches(one)] == [0] and len(one) == check_batch(one).size
    some = log.read(0, 1000)
    assert len(some) <= 1000 and [h.base_offset for _, h in iter_batches(some)] == [0, 1]
    log.close()


def test_segments_roll_and_reopen_with_index(tmp_path):
    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=2048, index_interval=256)
    for i in range(60):
        append(log, [b"%03d" % i * 40])
    assert len(log.segments) > 3
    expected = read_values(log)
    assert [o for o, _ in expected] == list(range(60))
    log.close()
    files = sorted(os.listdir(d))
    assert files[0] == "00000000000000000000.index" and files[1] == "00000000000000000000.log"
    reopened = PartitionLog(d, segment_bytes=2048, index_interval=256)
    assert reopened.end_offset == 60 and reopened.recovered_bytes == 0
    assert read_values(reopened) == expected
    assert read_values(reopened, 37)[0] == (37, b"037" * 40)
    r = append(reopened, [b"after"])
    assert r.base_offset == 60
    reopened.close()


def test_index_entries_written_in_runs_survive_a_crash_and_sealed_segments_have_them_all(tmp_path):
    """Index entries reach their files in runs (one write per 32), so after a crash the active
    segment's index may lack its tail: the reopened log still finds every offset, and a segment
    sealed by a roll has every entry on disk without the log being closed."""
    import shutil

    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=200 * 140, index_interval=64)
    for i in range(240):  # every batch is indexed; the first segment rolls at about 190
        append(log, [b"%04d" % i * 20])
    sealed, active = log.segments[0], log.segments[-1]
    assert len(log.segments) == 2
    assert os.path.getsize(sealed.index_path) == 8 * (sealed.next_offset - sealed.base_offset)
    entries = active.next_offset - active.base_offset
    assert entries % 32 and os.path.getsize(active.index_path) == 8 * 32 * (entries // 32)  # a tail is pending
    crashed = str(tmp_path / "crashed")
    shutil.copytree(d, crashed)  # what a kill -9 would leave: the files as written so far
    expected = read_values(log)
    log.close()
    assert os.path.getsize(active.index_path) == 8 * (active.next_offset - active.base_offset)
    reopened = PartitionLog(crashed, segment_bytes=200 * 140, index_interval=64)
    assert reopened.end_offset == 240
    assert read_values(reopened) == expected
    for offset in (0, 37, sealed.next_offset, 239):
        assert read_values(reopened, offset)[0] == (offset, b"%04d" % offset * 20)
    reopened.close()


def test_lost_index_is_rebuilt(tmp_path):
    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=2048, index_interval=128)
    for i in range(40):
        append(log, [b"x" * 100])
    log.close()
    for name in os.listdir(d):
        if name.endswith(".index"):
            os.unlink(os.path.join(d, name))
    reopened = PartitionLog(d, segment_bytes=2048, index_interval=128)
    assert reopened.end_offset == 40
    assert len(read_values(reopened, 25)) == 15
    reopened.close()


@pytest.mark.parametrize("cut", [1, 20, 61, 70])
def test_torn_tail_is_truncated(tmp_path, cut):
    d = str(tmp_path / "p")
    log = PartitionLog(d)
    append(log, [b"first"])
    append(log, [b"second", b"third"])
    size_before_last = log.segments[-1].size
    append(log, [b"fourth" * 10])
    path = log.segments[-1].log_path
    log.close()
    with open(path, "r+b") as f:  # a crash part-way through the last write
        f.truncate(size_before_last + cut)
    reopened = PartitionLog(d)
    assert reopened.recovered_bytes == cut
    assert reopened.end_offset == 3
    assert read_values(reopened) == [(0, b"first"), (1, b"second"), (2, b"third")]
    assert append(reopened, [b"new"]).base_offset == 3
    assert read_values(reopened)[-1] == (3, b"new")
    reopened.close()


def test_corrupt_batch_truncates_from_there(tmp_path):
    d = str(tmp_path / "p")
    log = PartitionLog(d)
    append(log, [b"keep"])
    pos = log.segments[-1].size
    append(log, [b"rotten"])
    append(log, [b"after"])
    path = log.segments[-1].log_path
    log.close()
    with open(path, "r+b") as f:
        f.seek(pos + 70)
        f.write(b"\xff")
    reopened = PartitionLog(d)
    assert reopened.end_offset == 1
    assert read_values(reopened) == [(0, b"keep")]
    reopened.close()


def test_timestamps(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    append(log, [b"a", b"b"], ts=100)
    append(log, [b"c"], ts=300)
    append(log, [b"d"], ts=200)
    assert log.offset_for_timestamp(50) == (0, 100)
    assert log.offset_for_timestamp(101) == (2, 300)
    assert log.offset_for_timestamp(250) == (2, 300)
    assert log.offset_for_timestamp(301) is None
    assert log.max_timestamp() == (2, 300)
    log.close()


def test_flush_policy(tmp_path, monkeypatch):
    log = PartitionLog(str(tmp_path / "p"), flush_messages=3)
    calls = []
    monkeypatch.setattr(log.segments[-1], "flush", lambda: calls.append(log.end_offset))
    append(log, [b"1", b"2"])
    assert calls == []
    append(log, [b"3"])
    assert calls == [3]
    log.close()


def test_stale_index_entry_is_detected_and_rebuilt(tmp_path, monkeypatch):
    import struct

    from cohort.log.segment import Segment

    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=4096, index_interval=500)
    for i in range(30):
        append(log, [b"%02d" % i * 60])
    expected = read_values(log)
    first = log.segments[0]
    assert len(log.segments) >= 2 and len(first._idx_offsets) >= 3
    log.close()
    with open(first.index_path, "r+b") as f:  # entry 1 now claims a wrong (but ordered) offset
        f.seek(8)
        rel, pos = struct.unpack(">II", f.read(8))
        f.seek(8)
        f.write(struct.pack(">II", rel + 1, pos))
    rebuilds = []
    real = Segment._rebuild_index
    monkeypatch.setattr(Segment, "_rebuild_index", lambda self: (rebuilds.append(self.base_offset), real(self)))
    reopened = PartitionLog(d, segment_bytes=4096, index_interval=500)
    for offset in range(30):
        assert read_values(reopened, offset)[0][0] == offset
    assert read_values(reopened) == expected
    assert rebuilds == [0]
    reopened.close()


def test_truncate_to_drops_batches_across_segments(tmp_path):
    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=1024, index_interval=100)
    for i in range(20):
        append(log, [b"%02d" % i * 50])
    assert len(log.segments) > 2
    log.truncate_to(7)
    assert log.end_offset == 7 and [o for o, _ in read_values(log)] == list(range(7))
    assert append(log, [b"new"]).base_offset == 7
    multi = PartitionLog(str(tmp_path / "q"))
    append(multi, [b"a", b"b"])
    with pytest.raises(ValueError):
        multi.truncate_to(1)  # inside a batch
    multi.close()
    log.close()
    reopened = PartitionLog(d, segment_bytes=1024, index_interval=100)
    assert reopened.end_offset == 8 and read_values(reopened)[-1] == (7, b"new")
    reopened.close()

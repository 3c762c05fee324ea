"""Recovery on open (torn and bit-flipped tails, in any segment), segment rolling by size and
age, retention by time and size, and the flush policy."""

import logging
import os

import pytest

from cohort.log import PartitionLog
from cohort.log.partition import RECOVERY_POINT_FILE
from log_helpers import append, read_records


def fill(log, n, size=100, ts=1000):
    for i in range(n):
        append(log, [b"%04d" % i + b"x" * size], ts=ts + i)


def drop_recovery_point(d):
    """Simulate a crash before the last checkpoint: every segment gets checked."""
    os.unlink(os.path.join(d, RECOVERY_POINT_FILE))


@pytest.mark.parametrize("damage", ["truncate", "bitflip"])
def test_damaged_sealed_segment_is_repaired_and_later_segments_kept(tmp_path, damage, caplog):
    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=1024, index_interval=128)
    fill(log, 40)
    assert len(log.segments) >= 4
    victim = log.segments[1]
    positions = [pos for pos, _ in victim.headers()]
    cut_pos = positions[2]  # damage the third batch of the second segment
    first_lost = victim.base_offset + 2
    next_base = log.segments[2].base_offset
    before = read_records(log)
    log.close()
    drop_recovery_point(d)
    with open(victim.log_path, "r+b") as f:
        if damage == "truncate":
            f.truncate(cut_pos + 30)
        else:
            f.seek(cut_pos + 70)
            byte = f.read(1)
            f.seek(cut_pos + 70)
            f.write(bytes([byte[0] ^ 0x10]))
    with caplog.at_level(logging.ERROR, logger="cohort.log"):
        reopened = PartitionLog(d, segment_bytes=1024, index_interval=128)
    assert "torn or corrupt" in caplog.text
    after = read_records(reopened)
    # everything before the damage and every later segment survive; only the damaged tail is gone
    assert after == [r for r in before if r[0] < first_lost or r[0] >= next_base]
    assert reopened.end_offset == 40
    assert append(reopened, [b"new"]).base_offset == 40
    reopened.close()


def test_trusted_segments_below_the_recovery_point_are_not_rescanned(tmp_path, monkeypatch):
    from cohort.log.segment import Segment

    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=1024, index_interval=128)
    fill(log, 40)
    n = len(log.segments)
    log.close()
    recovered = []
    real = Segment.recover
    monkeypatch.setattr(Segment, "recover", lambda self: (recovered.append(self.base_offset), real(self))[1])
    reopened = PartitionLog(d, segment_bytes=1024, index_interval=128)
    assert recovered == [reopened.segments[-1].base_offset] and len(reopened.segments) == n
    reopened.close()
    recovered.clear()
    drop_recovery_point(d)
    PartitionLog(d, segment_bytes=1024, index_interval=128).close()
    assert len(recovered) == n  # no checkpoint: every segment is validated


def test_roll_by_time(tmp_path, monkeypatch):
    import cohort.log.partition as partition
    import cohort.log.segment as segment

    clock = [1_000_000]
    monkeypatch.setattr(partition, "now_ms", lambda: clock[0])
    monkeypatch.setattr(segment, "now_ms", lambda: clock[0])
    log = PartitionLog(str(tmp_path / "p"), roll_ms=1000)
    append(log, [b"a"])
    clock[0] += 999
    append(log, [b"b"])
    assert len(log.segments) == 1
    clock[0] += 1
    append(log, [b"c"])
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock[0] += 5000
    assert log.roll_if_old(clock[0]) and [s.base_offset for s in log.segments] == [0, 2, 3]
    assert not log.roll_if_old(clock[0] + 10_000)  # an empty active segment never rolls
    assert [r[2] for r in read_records(log)] == [b"a", b"b", b"c"]
    log.close()


def test_retention_by_time_deletes_whole_old_segments(tmp_path):
    log = PartitionLog(str(tmp_path / "p"), segment_bytes=1024, retention_ms=10_000)
    fill(log, 20, ts=1_000)  # old
    old_end = log.end_offset
    log.roll()
    fill(log, 20, ts=50_000)  # recent
    segments_before = len(log.segments)
    deleted = log.apply_retention(55_000)
    assert deleted > 0 and len(log.segments) == segments_before - deleted
    assert log.start_offset == old_end  # exactly the old records went
    assert [r[0] for r in read_records(log)] == list(range(old_end, old_end + 20))
    assert log.apply_retention(55_000) == 0
    # everything expired: the active segment is rolled and deleted too, the end offset stays
    assert log.apply_retention(10**9) > 0
    assert log.start_offset == log.end_offset == old_end + 20 and read_records(log) == []
    assert append(log, [b"next"]).base_offset == old_end + 20
    log.close()
    with open(os.path.join(str(tmp_path / "p"), "00000000000000000000.index"), "wb") as f:
        f.write(b"\0" * 8)  # as if a crash hit between deleting a segment's log and its index
    reopened = PartitionLog(str(tmp_path / "p"))
    assert (reopened.start_offset, reopened.end_offset) == (old_end + 20, old_end + 21)
    assert "00000000000000000000.index" not in os.listdir(str(tmp_path / "p"))
    reopened.close()


def test_retention_by_size_keeps_the_newest_bytes(tmp_path):
    log = PartitionLog(str(tmp_path / "p"), segment_bytes=1024, retention_bytes=3000)
    fill(log, 60)
    sizes = [s.size for s in log.segments]
    deleted = log.apply_retention(0)
    kept = log.size_bytes
    assert kept <= 3000 + sizes[-1] and deleted == len(sizes) - len(log.segments)
    # one more deleted segment would have been too many
    assert kept - log.segments[0].size < 3000
    assert [r[0] for r in read_records(log)] == list(range(log.start_offset, 60))
    log.close()


def test_flush_by_messages_and_by_time(tmp_path, monkeypatch):
    log = PartitionLog(str(tmp_path / "p"), flush_messages=3, flush_ms=500)
    calls = []
    monkeypatch.setattr(log.segments[-1], "flush", lambda: calls.append(log.end_offset))
    append(log, [b"1", b"2"])
    assert calls == []
    append(log, [b"3"])
    assert calls == [3]
    append(log, [b"4"])
    start = log.last_flush_ms
    assert not log.flush_due(start + 499) and log.flush_due(start + 500)
    log.flush()
    assert calls == [3, 4] and not log.flush_due(start + 10_000)  # nothing new since
    log.close()


def test_delete_records_moves_the_start_durably_and_drops_whole_segments(tmp_path):
    from cohort.log import OffsetOutOfRange, PartitionLog
    from log_helpers import append as put

    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=200)
    for i in range(10):
        put(log, [b"v%d" % i])
    segments = len(log.segments)
    assert log.delete_records(6) == 6
    assert log.start_offset == 6 and len(log.segments) < segments
    assert log.delete_records(3) == 6  # never moves back
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 1000)
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(11)
    # a crash right after: the start offset is on disk
    again = PartitionLog(d, segment_bytes=200)
    assert again.start_offset == 6 and again.end_offset == 10
    assert again.offset_for_timestamp(0)[0] == 6  # lookups start at the log start
    again.close()
    log.close()

"""A full disk or an I/O error on append leaves the log exactly as it was (on disk and in
memory), and the log works again once space returns."""

import errno
import os

import pytest

from cohort.log import PartitionLog, fileio
from log_helpers import append, read_records


@pytest.fixture
def disk(monkeypatch):
    faulty = fileio.FaultyIO()
    monkeypatch.setattr(fileio, "IO", faulty)
    return faulty


def test_full_disk_on_append_changes_nothing_and_space_returning_heals(tmp_path, disk):
    d = str(tmp_path / "p")
    log = PartitionLog(d, index_interval=64)
    append(log, [b"a" * 50, b"b" * 50])
    size = log.segments[-1].size
    disk.space = 30  # less than the next batch: a short write, then ENOSPC
    with pytest.raises(OSError) as exc:
        append(log, [b"c" * 100])
    assert exc.value.errno == errno.ENOSPC
    assert log.end_offset == 2 and log.segments[-1].size == size
    assert os.path.getsize(log.segments[-1].log_path) == size  # the half batch was cut off
    assert read_records(log) == [(0, None, b"a" * 50), (1, None, b"b" * 50)]
    disk.space = None  # space returns
    assert append(log, [b"c" * 100]).base_offset == 2
    assert [r[2] for r in read_records(log)] == [b"a" * 50, b"b" * 50, b"c" * 100]
    log.close()
    reopened = PartitionLog(d)
    assert reopened.recovered_bytes == 0 and reopened.end_offset == 3
    reopened.close()


def test_half_batch_left_by_a_failed_cut_is_never_replayed(tmp_path, disk, monkeypatch):
    d = str(tmp_path / "p")
    log = PartitionLog(d)
    append(log, [b"kept"])
    disk.space = 40
    monkeypatch.setattr(disk, "ftruncate", lambda fd, n: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(OSError):
        append(log, [b"torn" * 30])
    assert log.end_offset == 1 and read_records(log) == [(0, None, b"kept")]
    for seg in log.segments:  # crash now: the 40 bytes of a half batch are on disk
        seg.close()
    monkeypatch.undo()
    reopened = PartitionLog(d)
    assert reopened.recovered_bytes == 40 and read_records(reopened) == [(0, None, b"kept")]
    reopened.close()


def test_eio_on_roll_keeps_the_old_segment_active(tmp_path, disk):
    log = PartitionLog(str(tmp_path / "p"), segment_bytes=1024)
    for i in range(8):
        append(log, [b"%d" % i * 100])
    n = len(log.segments)
    disk.fail_fsync = True  # sealing the full segment fails
    while log.segments[-1].size + 140 <= 1024:
        append(log, [b"fill" * 25])
    end = log.end_offset
    with pytest.raises(OSError):
        append(log, [b"x" * 100])
    assert len(log.segments) == n and log.end_offset == end
    assert sorted(f for f in os.listdir(log.directory) if f.endswith(".log")) == [
        os.path.basename(s.log_path) for s in log.segments]  # the new segment file was removed
    disk.fail_fsync = False
    assert append(log, [b"x" * 100]).base_offset == end and len(log.segments) == n + 1
    log.close()


def test_index_write_failure_does_not_fail_appends(tmp_path, disk, monkeypatch):
    d = str(tmp_path / "p")
    log = PartitionLog(d, index_interval=1)
    append(log, [b"one"])
    real = disk.pwrite

    def no_index(fd, data, pos):
        if len(data) == 8:  # an index entry
            raise OSError(errno.ENOSPC, "no space")
        return real(fd, data, pos)

    monkeypatch.setattr(disk, "pwrite", no_index)
    for i in range(5):
        append(log, [b"v%d" % i])
    monkeypatch.undo()
    assert [r[0] for r in read_records(log, 3)] == [3, 4, 5]
    log.close()
    reopened = PartitionLog(d, index_interval=1)
    assert [r[0] for r in read_records(reopened, 4)] == [4, 5]
    reopened.close()


def test_closing_an_untouched_log_syncs_nothing_and_a_failed_sync_is_not_checkpointed(tmp_path, disk, monkeypatch):
    d = str(tmp_path / "p")
    synced = []
    real_fsync = disk.fsync
    monkeypatch.setattr(disk, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    log = PartitionLog(d)  # (its directory entries are synced when it is made)
    synced.clear()
    log.close()  # new and empty: nothing to sync, nothing to checkpoint
    assert synced == [] and not os.path.exists(os.path.join(d, "recovery-point"))
    log = PartitionLog(d)
    append(log, [b"a", b"b"])
    disk.fail_fsync = True
    log.close()  # the sync fails: the recovery point must not claim the records are on disk
    assert not os.path.exists(os.path.join(d, "recovery-point"))
    disk.fail_fsync = False
    log = PartitionLog(d)  # a tail past the recovery point counts as unsynced: this close syncs it
    synced.clear()
    log.close()
    assert synced and open(os.path.join(d, "recovery-point")).read() == "2"
    reopened = PartitionLog(d)
    assert reopened.end_offset == 2
    synced.clear()
    reopened.close()
    assert synced == []  # nothing changed since the checkpoint: no disk round trip

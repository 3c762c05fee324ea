"""Compaction keeps exactly the newest record per key (minus old tombstones), survives a crash
at any point of its swap, and retention removes exactly the oldest whole segments."""

import os
import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cohort.log import PartitionLog, compaction
from log_helpers import append, read_records

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# A stream of batches; each batch is a list of (key index, value or None = tombstone); batch i
# carries timestamp 1000 + i.
streams = st.lists(
    st.lists(st.tuples(st.integers(0, 12), st.one_of(st.none(), st.binary(min_size=0, max_size=40))), min_size=1, max_size=6),
    min_size=1, max_size=60,
)


def write_stream(log, stream):
    written = []  # (offset, key, value, ts)
    for i, batch in enumerate(stream):
        recs = [(b"key-%d" % k, v) for k, v in batch]
        r = append(log, recs, ts=1000 + i)
        written += [(r.base_offset + j, key, value, 1000 + i) for j, (key, value) in enumerate(recs)]
    return written


def expected_after_compaction(written, upto, horizon):
    """Model: below ``upto`` keep the newest record per key (judged over that range) unless it
    is a tombstone older than ``horizon``; at and above ``upto`` keep everything."""
    newest = {}
    for off, key, _value, _ts in written:
        if off < upto:
            newest[key] = off
    out = []
    for off, key, value, ts in written:
        if off >= upto:
            out.append((off, key, value))
        elif newest[key] == off and (value is not None or ts >= horizon):
            out.append((off, key, value))
    return out


@SETTINGS
@given(stream=streams, horizon_step=st.integers(0, 70))
def test_compaction_keeps_exactly_the_newest_record_per_key(tmp_path_factory, stream, horizon_step):
    d = str(tmp_path_factory.mktemp("c") / "p")
    log = PartitionLog(d, segment_bytes=1024, index_interval=150)
    written = write_stream(log, stream)
    log.roll()
    append(log, [(b"key-0", b"in the active segment")], ts=5000)  # never compacted
    written.append((log.end_offset - 1, b"key-0", b"in the active segment", 5000))
    upto = log.segments[-1].base_offset
    end = log.end_offset
    horizon = 1000 + horizon_step
    compaction.compact(log, horizon)
    want = expected_after_compaction(written, upto, horizon)
    assert read_records(log) == want
    assert log.end_offset == end
    # compacting again changes nothing; reopening reads the same
    compaction.compact(log, horizon)
    assert read_records(log) == want
    log.close()
    reopened = PartitionLog(d, segment_bytes=1024, index_interval=150)
    assert read_records(reopened) == want and reopened.end_offset == end
    # every surviving offset is still readable at exactly that offset
    for off, key, value in want[:10]:
        assert read_records(reopened, off)[0] == (off, key, value)
    reopened.close()


@SETTINGS
@given(sizes=st.lists(st.integers(1, 300), min_size=1, max_size=80), limit=st.integers(0, 6000))
def test_retention_by_size_deletes_only_the_oldest_whole_segments(tmp_path_factory, sizes, limit):
    d = str(tmp_path_factory.mktemp("r") / "p")
    log = PartitionLog(d, segment_bytes=1024, retention_bytes=limit)
    for i, n in enumerate(sizes):
        append(log, [b"%d" % i + b"." * n])
    segs = [(s.base_offset, s.size) for s in log.segments]
    total = log.size_bytes
    log.apply_retention(0)
    kept = [(s.base_offset, s.size) for s in log.segments]
    assert kept == segs[len(segs) - len(kept):]  # a suffix of whole segments, active always kept
    dropped = segs[: len(segs) - len(kept)]
    assert total - sum(s for _, s in dropped) >= limit or len(kept) == 1 or not dropped
    if len(kept) > 1:  # deleting the next one would go below the limit
        assert total - sum(s for _, s in dropped) - kept[0][1] < limit
    assert [r[0] for r in read_records(log)] == list(range(log.start_offset, len(sizes)))
    log.close()


def make_compactable(d):
    log = PartitionLog(d, segment_bytes=1024, index_interval=100)
    written = []
    for i in range(120):
        key = b"k%d" % (i % 7)
        value = None if i % 11 == 0 else b"v%d" % i + b"-" * 40
        r = append(log, [(key, value)], ts=1000 + i)
        written.append((r.base_offset, key, value, 1000 + i))
    log.roll()
    upto = log.segments[-1].base_offset
    log.close()
    return written, upto


class Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", ["before_manifest", "after_manifest", "mid_apply"])
def test_a_crash_during_the_swap_leaves_the_old_or_the_new_log(tmp_path, monkeypatch, crash_at):
    d = str(tmp_path / "p")
    written, upto = make_compactable(d)
    old = [(o, k, v) for o, k, v, _ in written]
    new = expected_after_compaction(written, upto, horizon=0)
    assert new != old
    log = PartitionLog(d, segment_bytes=1024, index_interval=100)
    if crash_at == "before_manifest":
        monkeypatch.setattr(compaction, "_write_manifest", lambda *a: (_ for _ in ()).throw(Crash()))
    elif crash_at == "after_manifest":
        monkeypatch.setattr(compaction, "_apply", lambda *a: (_ for _ in ()).throw(Crash()))
    else:
        calls = []
        real_unlink = compaction._unlink

        def flaky(path):
            calls.append(path)
            if len(calls) == 4:
                raise Crash()
            real_unlink(path)

        monkeypatch.setattr(compaction, "_unlink", flaky)
    with pytest.raises(Crash):
        compaction.compact(log, 0)
    monkeypatch.undo()
    for seg in log.segments:  # the process dies: no clean close, no checkpoint
        seg.close()
    reopened = PartitionLog(d, segment_bytes=1024, index_interval=100)
    got = read_records(reopened)
    assert got == (old if crash_at == "before_manifest" else new)
    assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap"))]
    reopened.close()


def test_compacted_log_keeps_appending_and_replays_after_copy(tmp_path):
    d = str(tmp_path / "p")
    written, upto = make_compactable(d)
    log = PartitionLog(d, segment_bytes=1024, index_interval=100)
    end = log.end_offset
    plan = compaction.compact(log, 0)
    assert plan.records_out < plan.records_in and plan.bytes_out < plan.bytes_in
    assert append(log, [(b"k1", b"after")]).base_offset == end
    log.close()
    copy = str(tmp_path / "copy")
    shutil.copytree(d, copy)
    again = PartitionLog(copy, segment_bytes=1024, index_interval=100)
    assert read_records(again)[-1] == (end, b"k1", b"after")
    assert {k for _, k, _ in read_records(again)} == {b"k%d" % i for i in range(7)}
    again.close()


_COMPACT_FOREVER = """
import sys
from cohort.log import PartitionLog, compaction
log = PartitionLog(sys.argv[1], segment_bytes=4096, index_interval=500)
print("ready", flush=True)
while True:
    compaction.compact(log, 0)
"""


def test_kill_9_during_compaction_never_loses_the_newest_record(tmp_path):
    """A process compacting in a loop is killed at random moments; every reopen finds each
    key's newest record and the active segment intact, and nothing that was never written."""
    import random
    import signal
    import subprocess
    import sys

    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=4096, index_interval=500)
    written = []
    for i in range(1500):
        key = b"key-%d" % (i % 97)
        r = append(log, [(key, b"value-%d" % i + b"." * 30)], ts=1000 + i)
        written.append((r.base_offset, key, b"value-%d" % i + b"." * 30))
    log.roll()
    for i in range(5):
        r = append(log, [(b"key-0", b"active-%d" % i)], ts=9000)
        written.append((r.base_offset, b"key-0", b"active-%d" % i))
    active_base = log.segments[-1].base_offset
    log.close()
    newest = {}
    for off, key, _ in written:
        if off < active_base:
            newest[key] = off
    must_keep = {w for w in written if w[0] >= active_base or newest[w[1]] == w[0]}
    rng = random.Random(5)
    interrupted = 0
    for _ in range(40):  # until three kills have landed mid-compaction (a slow machine needs more tries)
        if interrupted >= 3:
            break
        child = subprocess.Popen([sys.executable, "-c", _COMPACT_FOREVER, d], stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        interrupted += any(n.endswith((".cleaned", ".swap")) for n in os.listdir(d))
        reopened = PartitionLog(d, segment_bytes=4096, index_interval=500)
        got = set(read_records(reopened))
        assert must_keep <= got <= set(written)
        assert reopened.end_offset == written[-1][0] + 1
        reopened.close()
        assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap", ".tmp"))]
    assert interrupted >= 3, "the kills should land in the middle of compactions"

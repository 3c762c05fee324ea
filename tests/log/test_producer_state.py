"""Idempotent producer state: Kafka's duplicate, epoch and sequence rules, snapshots, and its
rebuild after a crash from the newest snapshot plus the log tail."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.log import PartitionLog
from cohort.log.producer_state import (
    INVALID_PRODUCER_EPOCH,
    INT32_MAX,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProducerState,
    ProducerStateError,
)
from cohort.protocol.records import build_batch, check_produce_records, read_header

PID = 4000


def header(seq, n=1, epoch=0, pid=PID, ts=1000):
    return read_header(build_batch([(None, b"v")] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp=ts))


def produce(log, seq, n=1, epoch=0, pid=PID, ts=1000):
    """What the broker does: check, then append unless it is a duplicate; returns the first
    offset (original offset for a duplicate) or raises ProducerStateError."""
    data = bytearray(build_batch([(None, b"v%d" % (seq + i)) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, timestamp=ts))
    headers = check_produce_records(data)
    dup = log.producers.check(headers[0])
    if dup is not None:
        return dup.first_offset
    return log.append(data, headers).base_offset


def test_duplicates_answer_original_offsets_and_gaps_are_refused(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    assert produce(log, 0) == 0
    assert produce(log, 1) == 1
    assert produce(log, 1) == 1 and log.end_offset == 2  # the retry is not stored again
    with pytest.raises(ProducerStateError) as gap:
        produce(log, 5)
    assert gap.value.code == OUT_OF_ORDER_SEQUENCE_NUMBER and log.end_offset == 2
    assert produce(log, 2, n=3) == 2
    assert produce(log, 2, n=3) == 2  # a whole batch's retry
    with pytest.raises(ProducerStateError):
        produce(log, 3, n=2)  # overlaps a batch without repeating it: out of order
    log.close()


def test_only_the_last_five_batches_are_remembered(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    for seq in range(7):
        assert produce(log, seq) == seq
    assert produce(log, 2) == 2  # within the last five
    with pytest.raises(ProducerStateError) as old:
        produce(log, 1)
    assert old.value.code == OUT_OF_ORDER_SEQUENCE_NUMBER
    log.close()


def test_epochs(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    produce(log, 0, epoch=3)
    produce(log, 1, epoch=3)
    with pytest.raises(ProducerStateError) as stale:
        produce(log, 2, epoch=2)
    assert stale.value.code == INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as bad_start:
        produce(log, 7, epoch=4)  # a new epoch must start at sequence 0
    assert bad_start.value.code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(log, 0, epoch=4) == 2
    with pytest.raises(ProducerStateError) as fenced:
        produce(log, 1, epoch=3)  # the old epoch, even continuing its own sequence
    assert fenced.value.code == INVALID_PRODUCER_EPOCH
    log.close()


def test_unknown_producer_may_start_anywhere_and_sequences_wrap(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    assert produce(log, 7, pid=1) == 0  # as Kafka 4: its state may have expired
    assert produce(log, INT32_MAX - 1, n=2, pid=2) == 1
    assert produce(log, 0, pid=2) == 3  # after 2^31-1 comes 0
    assert log.producers.producers[2].last_seq == 0
    log.close()


def test_snapshot_at_roll_and_close_and_tail_replay_after_a_crash(tmp_path):
    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=300)
    for seq in range(12):
        produce(log, seq)
    assert len(log.segments) > 2
    snapshots = sorted(n for n in os.listdir(d) if n.endswith(".snapshot"))
    assert snapshots and len(snapshots) <= 2  # taken at rolls, only the newest kept
    # kill -9: nothing closed, the state after the last snapshot lives only in the log
    crashed = PartitionLog(d, segment_bytes=300)
    for seq in range(7, 12):
        assert produce(crashed, seq) == seq  # every one of the last five is still a duplicate
    assert produce(crashed, 12) == 12
    crashed.close()
    reopened = PartitionLog(d, segment_bytes=300)
    assert reopened.producers.end_offset == reopened.end_offset == 13
    assert produce(reopened, 9) == 9  # the close snapshot kept all five batches
    with pytest.raises(ProducerStateError):
        produce(reopened, 20)
    reopened.close()


def test_a_corrupt_snapshot_is_skipped_and_the_log_replayed(tmp_path):
    d = str(tmp_path / "p")
    log = PartitionLog(d)
    for seq in range(4):
        produce(log, seq)
    log.close()
    [snap] = [n for n in os.listdir(d) if n.endswith(".snapshot")]
    with open(os.path.join(d, snap), "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")
    log = PartitionLog(d)
    assert produce(log, 3) == 3 and produce(log, 4) == 4
    log.close()


def test_truncation_rebuilds_state(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    for seq in range(3):
        produce(log, seq)
    log.truncate_to(2)
    assert produce(log, 2) == 2  # not a duplicate any more: the batch was cut
    log.close()


def test_expiry_uses_batch_timestamps(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    produce(log, 0, pid=1, ts=1000)
    produce(log, 0, pid=2, ts=5000)
    assert log.producers.remove_expired(now=6000, expiration_ms=4000) == 1
    assert set(log.producers.producers) == {2}
    assert produce(log, 9, pid=1) == 2  # forgotten: any sequence again
    log.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 8), st.integers(1, 3)), min_size=1, max_size=40))
def test_state_from_snapshot_plus_replay_equals_live_state(tmp_path_factory, ops):
    """However the log is cut into segments, reopening without a close rebuilds exactly the
    state the live log had."""
    d = str(tmp_path_factory.mktemp("p"))
    log = PartitionLog(d, segment_bytes=400)
    for pid, seq, n in ops:
        try:
            produce(log, seq, n=n, pid=pid)
        except ProducerStateError:
            pass
    live = {pid: (e.epoch, list(e.batches)) for pid, e in log.producers.producers.items()}
    again = PartitionLog(d, segment_bytes=400)
    rebuilt = {pid: (e.epoch, list(e.batches)) for pid, e in again.producers.producers.items()}
    assert rebuilt == live
    again.close()
    log.close()


def test_state_unit_rules():
    state = ProducerState("/nonexistent")
    state.apply(header(0, n=2), 10)
    assert state.check(header(0, n=2)).first_offset == 10
    assert state.check(header(2)) is None
    with pytest.raises(ProducerStateError):
        state.check(header(3))

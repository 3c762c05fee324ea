"""Transactions in the partition log: the LSO, the aborted-transaction index (in memory and in
`.txnindex` files, rebuilt by recovery), marker validation, and compaction that removes aborted
records, keeps committed ones, keeps undecided transactions whole and drops a marker only once
its transaction left nothing behind."""

from __future__ import annotations

import os

import pytest

from cohort.log import PartitionLog, compaction
from cohort.log.producer_state import INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ProducerStateError
from cohort.protocol.records import TRANSACTIONAL_FLAG, build_batch, check_produce_records

from log_helpers import append, read_records


def txn_append(log, pid, values, *, epoch=0, seq=0, keys=None, ts=1000):
    keys = keys or [None] * len(values)
    data = bytearray(build_batch(list(zip(keys, values)), timestamp=ts, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, attributes=TRANSACTIONAL_FLAG))
    headers = check_produce_records(data)
    log.producers.check(headers[0])
    return log.append(data, headers)


def test_lso_and_aborted_transactions(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    append(log, [b"plain"])  # 0
    txn_append(log, 1, [b"a1", b"a2"])  # 1-2, producer 1 opens at 1
    txn_append(log, 2, [b"b1"])  # 3, producer 2 opens at 3
    assert log.last_stable_offset(log.end_offset) == 1
    log.append_marker(1, 0, False, 0)  # 4: abort producer 1
    assert log.last_stable_offset(log.end_offset) == 3
    [aborted] = log.aborted_transactions(0, log.end_offset)
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset, aborted.last_stable_offset) == (1, 1, 4, 3)
    log.append_marker(2, 0, True, 0)  # 5: commit producer 2
    assert log.last_stable_offset(log.end_offset) == log.end_offset == 6
    assert log.aborted_transactions(5, 6) == []  # the abort ended before the fetch offset
    assert [a.producer_id for a in log.aborted_transactions(2, 3)] == [1]
    log.close()


def test_markers_are_fenced_by_older_epochs_and_mixed_writes_refused(tmp_path):
    log = PartitionLog(str(tmp_path / "p"))
    txn_append(log, 1, [b"x"], epoch=3)
    with pytest.raises(ProducerStateError) as refused:
        log.append_marker(1, 2, True, 0)
    assert refused.value.code == INVALID_PRODUCER_EPOCH
    data = bytearray(build_batch([(None, b"plain")], producer_id=1, producer_epoch=3, base_sequence=1))
    with pytest.raises(ProducerStateError) as mixed:
        log.producers.check(check_produce_records(data)[0])
    assert mixed.value.code == INVALID_TXN_STATE
    log.append_marker(1, 4, False, 0)  # a fencing abort with a newer epoch is accepted
    assert log.producers.producers[1].epoch == 4 and log.last_stable_offset(log.end_offset) == log.end_offset
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_recovery_rebuilds_open_transactions_and_the_aborted_index(tmp_path, clean):
    path = str(tmp_path / "p")
    log = PartitionLog(path, segment_bytes=200)
    for i in range(3):
        txn_append(log, 10 + i, [b"v" * 50])
        log.append_marker(10 + i, 0, i != 1, 0)  # producer 11 aborts
    txn_append(log, 20, [b"open"])
    expected = [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, log.end_offset)]
    lso = log.last_stable_offset(log.end_offset)
    assert expected and lso < log.end_offset
    assert any(name.endswith(".txnindex") for name in os.listdir(path))
    if clean:
        log.close()
    else:  # a crash: no snapshot on close, the tail is replayed
        for seg in log.segments:
            seg.close()
    again = PartitionLog(path, segment_bytes=200)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in again.aborted_transactions(0, again.end_offset)] == expected
    assert again.last_stable_offset(again.end_offset) == lso
    again.close()


def test_retention_of_segments_drops_their_index_files(tmp_path):
    path = str(tmp_path / "p")
    log = PartitionLog(path, segment_bytes=150)
    txn_append(log, 1, [b"v" * 60])
    log.append_marker(1, 0, False, 0)
    for _ in range(4):
        append(log, [b"w" * 60])
    first = log.segments[0].base_offset
    log.delete_records(log.segments[-1].base_offset)
    assert not os.path.exists(os.path.join(path, f"{first:020d}.txnindex"))
    assert log.aborted_transactions(0, log.end_offset) == []
    log.close()


def test_compaction_removes_aborted_records_and_keeps_the_rest_correct(tmp_path):
    path = str(tmp_path / "p")
    log = PartitionLog(path, segment_bytes=10_000)
    append(log, [(b"k", b"plain-1")])  # 0
    txn_append(log, 1, [b"aborted"], keys=[b"k"])  # 1: would shadow offset 0 if it counted
    log.append_marker(1, 0, False, 0)  # 2
    txn_append(log, 2, [b"committed-old"], keys=[b"j"])  # 3
    log.append_marker(2, 0, True, 0)  # 4
    txn_append(log, 3, [b"committed-new"], keys=[b"j"], seq=0)  # 5: shadows offset 3
    log.append_marker(3, 0, True, 0)  # 6
    txn_append(log, 4, [b"undecided"], keys=[b"k"])  # 7: no marker yet
    log.roll()
    plan = compaction.compact(log, tombstone_horizon_ms=2**62)  # every marker is past the horizon
    assert plan is not None
    kept = [(o, k, v) for o, k, v in read_records(log)]
    values = [v for _, _, v in kept]
    assert b"plain-1" in values and b"undecided" in values and b"committed-new" in values
    assert b"aborted" not in values and b"committed-old" not in values
    # the abort marker of a transaction that left nothing is gone (past the horizon); the
    # commit marker of a surviving transaction stays, so replays still settle it
    offsets = [o for o, _, _ in kept]
    assert 2 not in offsets and 4 not in offsets and 6 in offsets
    log.close()

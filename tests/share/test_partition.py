"""The share-partition's rules one case at a time (the state machine test covers their mixes)."""

import pytest

from cohort.share.partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ARCHIVED,
    AVAILABLE,
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    REJECT,
    RELEASE,
    AckError,
    SharePartition,
    StateBatch,
)


def acquired(ranges):
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in ranges]


def test_an_acknowledged_range_is_persisted_with_each_records_delivery_count():
    sp = SharePartition(0)
    assert acquired(sp.acquire("a", [(0, 3)], 0, 100, 10)) == [(0, 3, 1)]
    sp.complete(sp.acknowledge("a", [(1, 1, (RELEASE,))]))
    assert acquired(sp.acquire("a", [(0, 3)], 0, 100, 10)) == [(1, 1, 2)]
    t = sp.acknowledge("a", [(0, 3, (ACCEPT,))])
    assert t.batches == [StateBatch(0, 0, ACKNOWLEDGED, 1), StateBatch(1, 1, ACKNOWLEDGED, 2),
                         StateBatch(2, 3, ACKNOWLEDGED, 1)]
    assert t.start_offset == 4
    sp.complete(t)
    assert (sp.start, sp.end) == (4, 4)


def test_batch_optimized_takes_whole_batches_record_limit_exactly():
    sp = SharePartition(0)
    assert acquired(sp.acquire("a", [(0, 9), (10, 19)], 0, 100, 5)) == [(0, 9, 1)]
    sp2 = SharePartition(0)
    assert acquired(sp2.acquire("a", [(0, 9), (10, 19)], 0, 100, 5, strict=True)) == [(0, 4, 1)]
    assert sp2.next_fetch_offset() == 5


def test_the_window_caps_new_records_and_a_full_window_acquires_nothing_new():
    sp = SharePartition(0, max_in_flight=100)
    assert acquired(sp.acquire("a", [(0, 149)], 0, 100, 500)) == [(0, 99, 1)]
    assert not sp.can_acquire()
    assert sp.acquire("b", [(100, 149)], 0, 100, 500) == []
    sp.complete(sp.acknowledge("a", [(0, 49, (ACCEPT,))]))
    assert sp.can_acquire() and acquired(sp.acquire("b", [(100, 149)], 0, 100, 500)) == [(100, 149, 1)]


@pytest.mark.parametrize("batches, code", [
    ([(5, 5, (ACCEPT,))], INVALID_RECORD_STATE),  # past the end: not in flight
    ([(2, 5, (ACCEPT,))], INVALID_REQUEST),  # runs past the end
    ([(0, 1, (ACCEPT,)), (1, 2, (ACCEPT,))], INVALID_RECORD_STATE),  # twice
])
def test_bad_acknowledgements_change_nothing(batches, code):
    sp = SharePartition(0)
    sp.acquire("a", [(0, 3)], 0, 100, 10)
    before = bytes(sp.state), bytes(sp.pending)
    with pytest.raises(AckError) as exc:
        sp.acknowledge("a", batches)
    assert exc.value.code == code
    assert (bytes(sp.state), bytes(sp.pending)) == before


def test_only_the_owner_acknowledges_and_not_twice_while_in_transition():
    sp = SharePartition(0)
    sp.acquire("a", [(0, 3)], 0, 100, 10)
    with pytest.raises(AckError):
        sp.acknowledge("b", [(0, 0, (ACCEPT,))])
    t = sp.acknowledge("a", [(0, 0, (ACCEPT,))])
    with pytest.raises(AckError):
        sp.acknowledge("a", [(0, 0, (REJECT,))])
    assert sp.expire_locks(1000) == [StateBatch(1, 3, AVAILABLE, 1)]  # in transition: its lock is ignored
    sp.abort(t)
    assert sp.state[0] == 1  # still acquired by "a", acknowledgeable again
    sp.complete(sp.acknowledge("a", [(0, 0, (REJECT,))]))
    assert sp.start == 1


def test_read_committed_archives_aborted_records_and_log_start_moves():
    sp = SharePartition(0)
    got = sp.acquire("a", [(0, 9)], 0, 100, 100, aborted=[(2, 4)])
    assert acquired(got) == [(0, 1, 1), (5, 9, 1)]
    assert sp.state[2:5] == bytes((ARCHIVED,)) * 3
    sp.complete(sp.acknowledge("a", [(0, 1, (ACCEPT,))]))
    assert sp.start == 5  # the aborted records are finished too
    assert not sp.move_start(20) and sp.start == 5  # acquired records hold it...
    sp.release("a")
    assert sp.move_start(20) and sp.start == 20  # ...until released


def test_a_loaded_state_keeps_finished_records_and_redelivers_holes():
    sp = SharePartition(10, batches=[StateBatch(12, 12, ACKNOWLEDGED, 1), StateBatch(14, 15, AVAILABLE, 3),
                                     StateBatch(5, 8, ARCHIVED, 1)])
    assert (sp.start, sp.end) == (10, 16)
    got = sp.acquire("a", [(10, 19)], 0, 100, 100)
    # 14-15 were delivered 3 times (limit 5): throttled, half of them go, and nothing after
    assert acquired(got) == [(10, 11, 1), (13, 13, 1), (14, 14, 4)]


def test_redelivery_is_throttled_as_records_near_their_limit():
    """Kafka 4.2: from the 4th delivery (limit 5) a batch goes out halved, the 5th alone, and
    nothing more is acquired in that fetch."""
    sp = SharePartition(0, delivery_limit=5)
    log = [(0, 7)]
    for delivery in (1, 2, 3):
        got = sp.acquire("a", log, 0, 100, 100)
        assert got[0] == (0, 7, delivery)
        sp.complete(sp.acknowledge("a", [(0, 7, (RELEASE,))]))
    got = acquired(sp.acquire("a", log + [(8, 15)], 0, 100, 100))
    assert got == [(0, 3, 4)]  # 8 available, delivered 3 times: half of them, and nothing after
    sp.complete(sp.acknowledge("a", [(0, 3, (RELEASE,))]))
    assert acquired(sp.acquire("b", log, 0, 100, 100)) == [(0, 0, 5)]  # its last attempt: alone
    assert acquired(sp.acquire("b", log, 0, 100, 100)) == [(1, 1, 5)]
    sp.complete(sp.acknowledge("b", [(0, 0, (RELEASE,)), (1, 1, (REJECT,))]))
    assert sp.start == 2  # 0 out of deliveries, 1 rejected: both archived, and the start moved past them

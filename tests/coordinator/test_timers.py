"""Keyed timers: replace, cancel, expiry order, no clock."""

from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator.timers import Timers


def test_schedule_replaces_and_cancel_forgets():
    timers = Timers()
    timers.schedule("a", 100, "first")
    timers.schedule("b", 50, "b")
    timers.schedule("a", 200, "second")  # replaces the 100 ms timer
    assert timers.next_deadline() == 50
    assert timers.pop_expired(150) == [("b", "b")]
    assert timers.pop_expired(199) == []
    timers.cancel("a")
    assert timers.pop_expired(10_000) == [] and timers.next_deadline() is None and len(timers) == 0


def test_expiry_in_deadline_order_and_each_fires_once():
    timers = Timers()
    for i, deadline in enumerate([30, 10, 20, 10]):
        timers.schedule(f"k{i}", deadline, i)
    assert timers.pop_expired(25) == [("k1", 1), ("k3", 3), ("k2", 2)]
    assert timers.pop_expired(30) == [("k0", 0)]
    assert timers.pop_expired(30) == []


def test_heap_stays_bounded_under_rescheduling():
    timers = Timers()
    for i in range(10_000):
        timers.schedule(f"k{i % 10}", i, i)
    assert len(timers) == 10 and len(timers._heap) <= 4 * 10 + 64
    assert timers.next_deadline() == 9_990


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["schedule", "cancel", "pop"]), st.sampled_from(["lag-a", "lag-b", "s-a", "s-b", "s-c"]),
                          st.integers(0, 100)), max_size=60), st.integers(0, 100))
def test_any_due_is_whether_some_pending_timer_with_the_prefix_is_due(ops, now):
    timers, pending = Timers(), {}
    for op, key, t in ops:
        if op == "schedule":
            timers.schedule(key, t, None)
            pending[key] = t
        elif op == "cancel":
            timers.cancel(key)
            pending.pop(key, None)
        else:
            for fired, _ in timers.pop_expired(t):
                del pending[fired]
    for prefix in ("lag-", "s-", "x"):
        assert timers.any_due(now, prefix) == any(k.startswith(prefix) and d <= now for k, d in pending.items())

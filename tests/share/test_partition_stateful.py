"""A hypothesis state machine of the share-partition against a plain model: produce, acquire,
acknowledge (each type; durable or a failed write), release, lock timeout, restart from the
durable state. What it proves: a record is acquired by one member at a time, at most
`delivery_limit` times; an acknowledged or rejected record whose write was durable is never
delivered again, across restarts; every record is eventually deliverable until it is."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cohort.share.partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    RELEASE,
    REJECT,
    AckError,
    SharePartition,
)
from cohort.share.state import merge

LIMIT, MAX_IN_FLIGHT, LOCK = 2, 12, 100
MEMBERS = ("a", "b", "c")
TERMINAL = (ACKNOWLEDGED, ARCHIVED)


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sp = SharePartition(0, delivery_limit=LIMIT, max_in_flight=MAX_IN_FLIGHT)
        self.batches: list[tuple[int, int]] = []  # the log's batches
        self.log_end = 0
        self.now = 0
        # the model: offset -> [state, count, owner, deadline] for offsets below log_end not finished
        self.model: dict[int, list] = {}
        self.start = 0
        self.persisted_start = 0
        self.persisted: tuple = ()  # the durable state batches
        self.finished: set[int] = set()  # acknowledged / archived durably: never delivered again

    # --- the model's view ----------------------------------------------------------------------

    def _window_end(self) -> int:
        return max([self.start - 1, *self.model]) + 1

    def _advance(self) -> None:
        while self.start in self.model and self.model[self.start][0] in TERMINAL:
            del self.model[self.start]
            self.start += 1

    @staticmethod
    def _expand(batches) -> dict:
        return {o: (b.delivery_state, b.delivery_count) for b in batches for o in range(b.first_offset, b.last_offset + 1)}

    def _check_written(self, batches, expected: dict) -> None:
        """What the partition asks to persist is exactly the records' new states and counts."""
        assert self._expand(batches) == expected

    def _persist(self, batches, start) -> None:
        self.persisted = merge(self.persisted, batches, max(self.persisted_start, start))
        self.persisted_start = max(self.persisted_start, start)

    # --- rules -------------------------------------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def produce(self, n):
        self.batches.append((self.log_end, self.log_end + n - 1))
        self.log_end += n

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 8), strict=st.booleans())
    def acquire(self, member, max_records, strict):
        fetch_from = self.sp.next_fetch_offset()
        batches = [(b, last) for b, last in self.batches if last >= fetch_from]
        got = self.sp.acquire(member, batches, self.now, LOCK, max_records, strict=strict)
        # model: the same rules, written plainly
        expected = []
        total = 0
        full = False
        for b, last in batches:
            if total >= max_records or full:
                break
            for offset in range(max(b, self.start), last + 1):
                if strict and total >= max_records:  # record_limit: exactly, not whole batches
                    break
                entry = self.model.get(offset)
                if entry is None and offset >= self._window_end():
                    if offset - self.start >= MAX_IN_FLIGHT:
                        full = True
                        break
                    entry = self.model[offset] = [AVAILABLE, 0, None, 0]
                if entry is not None and entry[0] == AVAILABLE:
                    entry[:] = [ACQUIRED, entry[1] + 1, member, self.now + LOCK]
                    expected.append((offset, entry[1]))
                    total += 1
        flat = [(o, r.delivery_count) for r in got for o in range(r.first_offset, r.last_offset + 1)]
        assert flat == expected
        assert not strict or len(flat) <= max_records
        assert not {o for o, _ in flat} & self.finished

    @rule(member=st.sampled_from(MEMBERS), ack=st.sampled_from([ACCEPT, RELEASE, REJECT, GAP]),
          durable=st.booleans(), data=st.data())
    def acknowledge(self, member, ack, durable, data):
        mine = sorted(o for o, e in self.model.items() if e[0] == ACQUIRED and e[2] == member)
        if not mine:
            return
        chosen = sorted(data.draw(st.sets(st.sampled_from(mine), min_size=1)))
        ranges = []  # consecutive offsets in one batch of one type, as librdkafka sends them
        for o in chosen:
            if ranges and ranges[-1][1] + 1 == o:
                ranges[-1][1] = o
            else:
                ranges.append([o, o])
        transition = self.sp.acknowledge(member, [(a, b, (ack,)) for a, b in ranges])
        # while in transition the records cannot be acknowledged again
        try:
            self.sp.acknowledge(member, [(chosen[0], chosen[0], (ACCEPT,))])
            raise AssertionError("a record in transition was acknowledged twice")
        except AckError:
            pass
        new_state = {o: (ACKNOWLEDGED if ack == ACCEPT else AVAILABLE if ack == RELEASE and self.model[o][1] < LIMIT
                         else ARCHIVED) for o in chosen}
        self._check_written(transition.batches, {o: (st_, self.model[o][1]) for o, st_ in new_state.items()})
        if not durable:
            self.sp.abort(transition)
            return
        self._persist(transition.batches, transition.start_offset)
        self.sp.complete(transition)
        for o in chosen:
            entry = self.model[o]
            entry[0] = new_state[o]
            entry[2] = None
            if entry[0] in TERMINAL:
                self.finished.add(o)
        self._advance()

    @rule(member=st.sampled_from(MEMBERS), data=st.data())
    def acknowledge_a_range_of_mixed_types(self, member, data):
        """One batch over consecutive offsets with a type per offset (the Java client's form)."""
        mine = sorted(o for o, e in self.model.items() if e[0] == ACQUIRED and e[2] == member)
        if not mine:
            return
        first = data.draw(st.sampled_from(mine))
        last = first
        while last + 1 in mine:
            last += 1
        last = data.draw(st.integers(first, last))
        types = tuple(data.draw(st.lists(st.sampled_from([ACCEPT, RELEASE, REJECT, GAP]),
                                         min_size=last - first + 1, max_size=last - first + 1)))
        transition = self.sp.acknowledge(member, [(first, last, types)])
        new_state = {o: (ACKNOWLEDGED if ack == ACCEPT else AVAILABLE if ack == RELEASE and self.model[o][1] < LIMIT
                         else ARCHIVED) for o, ack in zip(range(first, last + 1), types)}
        self._check_written(transition.batches, {o: (st_, self.model[o][1]) for o, st_ in new_state.items()})
        self._persist(transition.batches, transition.start_offset)
        self.sp.complete(transition)
        for offset in range(first, last + 1):
            entry = self.model[offset]
            entry[0] = new_state[offset]
            entry[2] = None
            if entry[0] in TERMINAL:
                self.finished.add(offset)
        self._advance()

    @rule(member=st.sampled_from(MEMBERS), offset=st.integers(0, 30))
    def acknowledge_what_is_not_yours(self, member, offset):
        entry = self.model.get(offset)
        if entry is not None and entry[0] == ACQUIRED and entry[2] == member:
            return
        before = (self.sp.start, bytes(self.sp.state))
        try:
            self.sp.acknowledge(member, [(offset, offset, (ACCEPT,))])
        except AckError:
            assert (self.sp.start, bytes(self.sp.state)) == before
            return
        assert offset < self.start  # below the start: skipped, as Kafka does

    @rule(member=st.sampled_from(MEMBERS), lost=st.booleans())
    def release(self, member, lost):
        batches = self.sp.release(member)
        expected = {}
        for o, entry in self.model.items():
            if entry[0] == ACQUIRED and entry[2] == member:
                entry[0] = AVAILABLE if entry[1] < LIMIT else ARCHIVED
                entry[2] = None
                expected[o] = (entry[0], entry[1])
        self._check_written(batches, expected)
        if not lost:
            self._persist(batches, self.sp.start)
        self._advance()

    @rule(ms=st.integers(1, 150))
    def time_passes(self, ms):
        self.now += ms
        batches = self.sp.expire_locks(self.now)
        expected = {}
        for o, entry in self.model.items():
            if entry[0] == ACQUIRED and entry[3] <= self.now:
                entry[0] = AVAILABLE if entry[1] < LIMIT else ARCHIVED
                entry[2] = None
                expected[o] = (entry[0], entry[1])
        self._check_written(batches, expected)
        self._persist(batches, self.sp.start)
        self._advance()

    @precondition(lambda self: True)
    @rule()
    def restart(self):
        """The broker restarts: the share-partition is rebuilt from what was durable."""
        self.sp = SharePartition(self.persisted_start, delivery_limit=LIMIT, max_in_flight=MAX_IN_FLIGHT,
                                 batches=self.persisted)
        model: dict[int, list] = {}
        for b in self.persisted:
            for o in range(b.first_offset, b.last_offset + 1):
                model[o] = [b.delivery_state, b.delivery_count, None, 0]
        for o in range(self.persisted_start, max(model, default=self.persisted_start - 1) + 1):
            model.setdefault(o, [AVAILABLE, 0, None, 0])
        self.model = {o: e for o, e in model.items() if o >= self.persisted_start}
        self.start = self.persisted_start
        self._advance()

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def matches_the_model(self):
        assert self.sp.start == self.start
        for offset in range(self.sp.start, self.sp.end):
            i = offset - self.sp.start
            entry = self.model.get(offset, [AVAILABLE, 0, None, 0])
            assert (self.sp.state[i], self.sp.count[i]) == (entry[0], entry[1]), offset
            if entry[0] == ACQUIRED:
                assert self.sp.owner[i] == entry[2]
        assert all(e[1] <= LIMIT for e in self.model.values())
        assert not any(e[0] == AVAILABLE and e[1] >= LIMIT for e in self.model.values())
        assert all(o < self.start or self.model.get(o, [ARCHIVED])[0] in TERMINAL for o in self.finished)


TestSharePartition = SharePartitionMachine.TestCase
TestSharePartition.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)

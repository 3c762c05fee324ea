"""One share-partition on the partition leader (Kafka's `SharePartition`): the in-flight records
of a (group, topic, partition) between its start offset (SPSO) and its end.

Every offset of the window `[start, end)` has a state (AVAILABLE, ACQUIRED, ACKNOWLEDGED,
ARCHIVED), a delivery count, and while ACQUIRED its owner (a member id) and lock deadline. The
window is kept as parallel arrays indexed by `offset - start`, so a range of records is checked
or changed with one slice operation. Everything below `start` has finished delivery; the start
moves past every terminal (ACKNOWLEDGED / ARCHIVED) record at the head of the window.

An acknowledgement is two steps, because Kafka answers it only once its state is durable:
`acknowledge` validates it and marks its records as in transition (another acknowledgement of
them, or their lock timeout, cannot touch them meanwhile) and returns a `Transition` carrying
the state batches to persist; `complete` applies it once durable, `abort` forgets it if the
write failed. Releases (session close) and lock timeouts apply at once and return the batches
to persist: losing them in a crash only makes records available again, which at-least-once
delivery allows.

Sans-IO: time comes in as `now` (ms), the log's batches as (base offset, last offset) pairs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
INVALID_REQUEST, INVALID_RECORD_STATE = 42, 121

_TERMINAL = (ACKNOWLEDGED, ARCHIVED)
_TERMINAL_BYTES = bytes(_TERMINAL)
_IDLE, _TO_AVAILABLE, _TO_TERMINAL = 0, 1, 2  # the `pending` marks of records in transition
_TO_TERMINAL_BYTES = bytes((_TO_TERMINAL,))


class AckError(Exception):
    """An acknowledgement the partition refuses (the whole partition's batch list fails)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StateBatch(NamedTuple):
    """A range of offsets in one persisted state (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class AcquiredRange(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(slots=True)
class Transition:
    """An acknowledgement whose state is being made durable."""

    member_id: str
    changes: list[tuple[int, int, int]]  # (first, last, new state) ranges, ascending
    batches: list[StateBatch]  # what the records become, for the durable write
    start_offset: int  # the start once this (and the transitions before it) are applied


class SharePartition:
    """See the module docstring."""

    __slots__ = ("start", "state", "count", "owner", "deadline", "pending", "delivery_limit", "max_in_flight",
                 "_locks")

    def __init__(self, start_offset: int, *, delivery_limit: int = 5, max_in_flight: int = 2000,
                 batches: Iterable[StateBatch] = ()) -> None:
        self.start = start_offset
        self.state = bytearray()
        self.count = bytearray()  # delivery counts (the limit is at most 10)
        self.owner: list[str | None] = []
        self.deadline: list[int] = []
        self.pending = bytearray()
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self._locks: list[tuple[int, int, int, str]] = []  # heap of (deadline, first, last, member)
        for b in sorted(batches):
            if b.last_offset < self.start:
                continue
            first = max(b.first_offset, self.start)
            if first > self.end:  # a hole: never acknowledged (a crash after acquiring): delivered anew
                self._append(first - self.end, AVAILABLE, 0, None, 0)
            if first < self.end:  # overlapping batches: the later one wins
                del self.state[first - self.start:], self.count[first - self.start:]
                del self.owner[first - self.start:], self.deadline[first - self.start:]
                del self.pending[first - self.start:]
            state = b.delivery_state if b.delivery_state in (AVAILABLE, ACKNOWLEDGED, ARCHIVED) else AVAILABLE
            self._append(b.last_offset - first + 1, state, min(b.delivery_count, 255), None, 0)
        self._advance()

    # ------------------------------------------------------------------ views

    @property
    def end(self) -> int:
        """One past the last offset in flight (SPEO + 1)."""
        return self.start + len(self.state)

    def next_fetch_offset(self) -> int:
        """The first AVAILABLE offset of the window, else its end."""
        i = self.state.find(AVAILABLE)
        return self.end if i < 0 else self.start + i

    def can_acquire(self) -> bool:
        """Records could be acquired: some in the window are available, or the window has room."""
        return AVAILABLE in self.state or len(self.state) < self.max_in_flight

    def delivery_complete_count(self) -> int:
        """Terminal records at or above the start (Kafka's DeliveryCompleteCount, for lag)."""
        return self.state.count(ACKNOWLEDGED) + self.state.count(ARCHIVED)

    def acquired_count(self) -> int:
        return self.state.count(ACQUIRED)

    def archived_count(self) -> int:
        return self.state.count(ARCHIVED)

    def next_lock_deadline(self) -> int | None:
        return self._locks[0][0] if self._locks else None

    def state_batches(self) -> list[StateBatch]:
        """The whole window as state batches (acquired records persist as AVAILABLE)."""
        return self._batches(self.start, self.end)

    # ------------------------------------------------------------------ acquisition

    def acquire(self, member_id: str, log_batches: Iterable[tuple[int, int]], now: int, lock_ms: int,
                max_records: int, aborted: Sequence[tuple[int, int]] = (), strict: bool = False) -> list[AcquiredRange]:
        """Acquire for `member_id` the AVAILABLE records of the log batches read from
        `next_fetch_offset()`, and new records past the end while the window has room. With
        `strict` (ShareFetch v2's record_limit mode) exactly `max_records` at most; else whole
        batches (`max_records` is soft: the batch that reaches it is taken whole, Kafka's
        batch_optimized mode). Records of `aborted` transactions (read_committed) are archived
        instead. Returns the acquired ranges, consecutive offsets of one count merged."""
        acquired: list[AcquiredRange] = []
        deadline = now + lock_ms
        total = 0
        for base, last in log_batches:
            if total >= max_records:
                break
            if last < self.start:
                continue
            lo = max(base, self.start)
            end = self.end
            if lo < end:  # records already in the window: the available ones again
                hi = min(last, end - 1)
                got, throttled = self._reacquire(member_id, lo, hi, deadline, aborted, acquired,
                                                 max_records - total if strict else None)
                total += got
                lo = hi + 1
                if throttled or (strict and total >= max_records):
                    break
            if lo > last:
                continue
            if lo > self.end:  # offsets the log no longer has (compaction): never deliverable
                self._append(lo - self.end, ARCHIVED, 0, None, 0)
            room = self.max_in_flight - len(self.state)
            if strict:
                room = min(room, max_records - total)
            hi = min(last, lo + room - 1)
            if hi < lo:
                break
            for first, stop, archived in _split(lo, hi, aborted):
                if archived:
                    self._append(stop - first + 1, ARCHIVED, 0, None, 0)
                    continue
                self._append(stop - first + 1, ACQUIRED, 1, member_id, deadline)
                _add(acquired, first, stop, 1)
                total += stop - first + 1
            if hi < last:
                break  # the window is full
        for r in acquired:
            heapq.heappush(self._locks, (deadline, r.first_offset, r.last_offset, member_id))
        if aborted:
            self._advance()
        return acquired

    def _reacquire(self, member_id: str, lo: int, hi: int, deadline: int, aborted: Sequence[tuple[int, int]],
                   acquired: list[AcquiredRange], limit: int | None) -> tuple[int, bool]:
        """Acquire again the AVAILABLE records of [lo, hi]; (records acquired, whether throttling
        ended this acquisition). Kafka 4.2's throttled redelivery: a record that has already been
        delivered `max(2, ceil(limit / 2))` times goes out with fewer others each further time
        (half as many per extra attempt, alone on its last attempt), and nothing is acquired after
        it in the same fetch: a record that keeps failing ends up by itself, so that rejecting it
        costs no other record a delivery."""
        state, count, start = self.state, self.count, self.start
        threshold = max(2, -(-self.delivery_limit // 2))
        n = 0
        throttled: int | None = None  # records still allowed once throttling began
        i = state.find(AVAILABLE, lo - start, hi - start + 1)
        while i >= 0 and (limit is None or n < limit) and throttled != 0:
            offset = start + i
            if aborted and any(a <= offset <= b for a, b in aborted):
                state[i] = ARCHIVED
            else:
                if throttled is None and count[i] >= threshold:
                    throttled = self._throttled_share(count[i], state.count(AVAILABLE, i, hi - start + 1), threshold)
                state[i] = ACQUIRED
                count[i] = min(count[i] + 1, 255)
                self.owner[i] = member_id
                self.deadline[i] = deadline
                _add(acquired, offset, offset, count[i])
                n += 1
                if throttled is not None:
                    throttled -= 1
            i = state.find(AVAILABLE, i + 1, hi - start + 1)
        return n, throttled is not None

    def _throttled_share(self, delivered: int, available: int, threshold: int) -> int:
        """How many records go out with one delivered `delivered` times already (>= threshold)."""
        if self.delivery_limit > 2 and delivered >= self.delivery_limit - 1:
            return 1  # its last attempt: alone
        return max(1, available >> (delivered - threshold + 1))

    # ------------------------------------------------------------------ acknowledgement

    def acknowledge(self, member_id: str, batches: Iterable[tuple[int, int, Sequence[int]]], now: int = 0,
                    lock_ms: int = 0) -> Transition:
        """Validate acknowledgement batches (first, last, ack types: one for the range or one per
        offset) of `member_id` and mark their records in transition. Raises AckError (nothing
        changed) when any record is not ACQUIRED by this member or is already in transition.
        RENEW (4) restarts the record's lock at once and persists nothing. Works on ranges: a
        range of one type costs a few slice operations, whatever its length."""
        state, start, end = self.state, self.start, self.end
        runs: list[tuple[int, int, int]] = []  # (first, last, ack type), offsets ascending
        for first, last, types in batches:
            if last < start:
                continue  # below the start: already finished, skipped as Kafka does
            if first >= end:
                raise AckError(INVALID_RECORD_STATE, f"Batch record not found. The request batch offsets "
                               f"{first}-{last} are not in the share-partition's records in flight.")
            if last >= end:
                raise AckError(INVALID_REQUEST, f"The acknowledged offsets {first}-{last} extend past the "
                               f"records in flight (up to {end - 1}).")
            lo = max(first, start)
            i, j = lo - start, last - start + 1
            n = j - i
            if state[i:j].count(ACQUIRED) != n or self.owner[i:j].count(member_id) != n or self.pending[i:j].count(0) != n:
                raise AckError(INVALID_RECORD_STATE, f"The records {lo}-{last} are not acquired by member "
                               f"{member_id} (or an acknowledgement of them is in progress).")
            if runs and lo <= runs[-1][1]:
                raise AckError(INVALID_RECORD_STATE, f"Offsets {lo}-{min(last, runs[-1][1])} are acknowledged twice.")
            if len(types) == 1:
                runs.append((lo, last, types[0]))
            else:
                for offset in range(lo, last + 1):
                    t = types[offset - first]
                    if runs and runs[-1][2] == t and runs[-1][1] + 1 == offset:
                        runs[-1] = (runs[-1][0], offset, t)
                    else:
                        runs.append((offset, offset, t))
        changes: list[tuple[int, int, int]] = []
        renew = now + lock_ms
        count, limit = self.count, self.delivery_limit
        for first, last, ack in runs:
            i, j = first - start, last - start + 1
            if ack == RENEW:
                self.deadline[i:j] = [renew] * (j - i)
                heapq.heappush(self._locks, (renew, first, last, member_id))
                continue
            if ack == ACCEPT:
                changes.append((first, last, ACKNOWLEDGED))
            elif ack != RELEASE or min(count[i:j]) >= limit:  # REJECT, GAP, or out of deliveries
                changes.append((first, last, ARCHIVED))
            elif max(count[i:j]) < limit:
                changes.append((first, last, AVAILABLE))
            else:  # a release of records some of which are out of deliveries
                for offset in range(first, last + 1):
                    new = AVAILABLE if count[offset - start] < limit else ARCHIVED
                    if changes and changes[-1][2] == new and changes[-1][1] + 1 == offset:
                        changes[-1] = (changes[-1][0], offset, new)
                    else:
                        changes.append((offset, offset, new))
        for first, last, new in changes:
            n = last - first + 1
            self.pending[first - start:last - start + 1] = bytes((_TO_AVAILABLE if new == AVAILABLE else _TO_TERMINAL,)) * n
        return Transition(member_id, changes, self._state_of(changes), self._projected_start())

    def _state_of(self, changes: list[tuple[int, int, int]]) -> list[StateBatch]:
        """The persisted form of ranges' new states: split where the delivery count changes."""
        out: list[StateBatch] = []
        count, start = self.count, self.start
        for first, last, new in changes:
            i, j = first - start, last - start + 1
            counts = count[i:j]
            if counts.count(counts[0]) == len(counts):
                out.append(StateBatch(first, last, new, counts[0]))
                continue
            for offset in range(first, last + 1):
                _add_state(out, offset, new, count[offset - start])
        return out

    def complete(self, transition: Transition) -> None:
        """The transition's state is durable: apply it and move the start."""
        start, size = self.start, len(self.state)
        for first, last, new in transition.changes:
            i, j = max(first - start, 0), min(last - start + 1, size)
            if i >= j:
                continue
            n = j - i
            if self.state[i:j].count(ACQUIRED) == n:
                self.state[i:j] = bytes((new,)) * n
                self.owner[i:j] = [None] * n
                self.pending[i:j] = bytes(n)
                continue
            for k in range(i, j):  # (not expected: in transition, nothing else moves them)
                if self.state[k] == ACQUIRED:
                    self.state[k] = new
                    self.owner[k] = None
                    self.pending[k] = _IDLE
        self._advance()

    def abort(self, transition: Transition) -> None:
        """The transition's durable write failed: its records stay ACQUIRED by their member."""
        start, size = self.start, len(self.pending)
        for first, last, _ in transition.changes:
            i, j = max(first - start, 0), min(last - start + 1, size)
            if i < j:
                self.pending[i:j] = bytes(j - i)

    # ------------------------------------------------------------------ release, lock timeout

    def release(self, member_id: str) -> list[StateBatch]:
        """A member's share session ended: its acquired records (not in transition) become
        AVAILABLE again, or ARCHIVED once out of deliveries; delivery counts do not change
        (Kafka 4.2, KAFKA-19972). Returns the batches to persist."""
        changed: list[StateBatch] = []
        owner = self.owner
        i = _index(owner, member_id, 0)
        while i >= 0:
            if self.state[i] == ACQUIRED and not self.pending[i]:
                self._return(i, changed)
            i = _index(owner, member_id, i + 1)
        self._advance()
        return changed

    def expire_locks(self, now: int) -> list[StateBatch]:
        """Records whose lock ran out become AVAILABLE (or ARCHIVED at the delivery limit)."""
        changed: list[StateBatch] = []
        locks = self._locks
        while locks and locks[0][0] <= now:
            deadline, first, last, member = heapq.heappop(locks)
            lo, hi = max(first, self.start), min(last, self.end - 1)
            for offset in range(lo, hi + 1):
                i = offset - self.start
                if (self.state[i] == ACQUIRED and self.owner[i] == member and self.deadline[i] == deadline
                        and not self.pending[i]):
                    self._return(i, changed)
        if changed:
            self._advance()
        return changed

    def move_start(self, log_start: int) -> bool:
        """The log's start moved past the share-partition's (DeleteRecords, retention): the
        records below it that are not acquired are archived and the start follows. True if it moved."""
        if log_start <= self.start:
            return False
        before = self.start
        n = min(len(self.state), log_start - self.start)
        for i in range(n):
            if self.state[i] == AVAILABLE:
                self.state[i] = ARCHIVED
        self._advance()
        if not self.state and self.start < log_start:
            self.start = log_start
        return self.start != before

    # ------------------------------------------------------------------ internals

    def _return(self, i: int, changed: list[StateBatch]) -> None:
        new = AVAILABLE if self.count[i] < self.delivery_limit else ARCHIVED
        self.state[i] = new
        self.owner[i] = None
        _add_state(changed, self.start + i, new, self.count[i])

    def _append(self, n: int, state: int, count: int, owner: str | None, deadline: int) -> None:
        self.state.extend(bytes((state,)) * n)
        self.count.extend(bytes((count,)) * n)
        self.owner.extend([owner] * n)
        self.deadline.extend([deadline] * n)
        self.pending.extend(bytes(n))

    def _advance(self) -> None:
        """Move the start past the terminal records at the head of the window."""
        state = self.state
        n = len(state)
        i = n - len(state.lstrip(_TERMINAL_BYTES)) if n and state[0] in _TERMINAL else 0
        if i:
            del state[:i], self.count[:i], self.owner[:i], self.deadline[:i], self.pending[:i]
            self.start += i

    def _projected_start(self) -> int:
        """The start once every transition in flight is applied: past the head's terminal records
        and records in transition to a terminal state (runs skipped a slice at a time)."""
        state, pending = self.state, self.pending
        n = len(state)
        i = 0
        while i < n:
            k = n - len(state[i:].lstrip(_TERMINAL_BYTES))
            k = n - len(pending[k:].lstrip(_TO_TERMINAL_BYTES)) if k < n else k
            if k == i:
                break
            i = k
        return self.start + i

    def _batches(self, lo: int, hi: int) -> list[StateBatch]:
        out: list[StateBatch] = []
        for offset in range(lo, hi):
            i = offset - self.start
            s = self.state[i]
            _add_state(out, offset, AVAILABLE if s == ACQUIRED else s, self.count[i])
        return out


def _index(items: list, value: object, start: int) -> int:
    try:
        return items.index(value, start)
    except ValueError:
        return -1


def _add(ranges: list[AcquiredRange], first: int, last: int, count: int) -> None:
    if ranges and ranges[-1].last_offset + 1 == first and ranges[-1].delivery_count == count:
        ranges[-1] = ranges[-1]._replace(last_offset=last)
    else:
        ranges.append(AcquiredRange(first, last, count))


def _add_state(batches: list[StateBatch], offset: int, state: int, count: int) -> None:
    if batches:
        b = batches[-1]
        if b.last_offset + 1 == offset and b.delivery_state == state and b.delivery_count == count:
            batches[-1] = b._replace(last_offset=offset)
            return
    batches.append(StateBatch(offset, offset, state, count))


def _split(lo: int, hi: int, aborted: Sequence[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """[lo, hi] cut into (first, last, inside an aborted range) pieces, in order."""
    if not aborted:
        return [(lo, hi, False)]
    out: list[tuple[int, int, bool]] = []
    at = lo
    for a, b in sorted(aborted):
        if b < at or a > hi:
            continue
        if a > at:
            out.append((at, a - 1, False))
        out.append((max(a, at), min(b, hi), True))
        at = min(b, hi) + 1
        if at > hi:
            break
    if at <= hi:
        out.append((at, hi, False))
    return out

"""The transaction coordinator shard: a sans-IO state machine owning the transactional ids of
one ``__transaction_state`` partition (Kafka's TransactionCoordinator + TransactionStateManager).

Same contract as the group coordinator's shard (see `cohort.coordinator_common.runtime`): ``handle(request,
now)`` applies a write at once and returns its records; ``commit(offset)`` once they are durable,
``revert(offset)`` when they are lost; ``replay(record)`` and ``on_loaded(now)`` on load;
``expire(now)`` for the keyed timers; no clock, no I/O.

Kafka's transaction protocol version 0/1 (cohort does not advertise transaction.version 2):

* InitProducerId bumps the epoch of a transactional id (fencing older producers), or rotates its
  producer id once the epoch is exhausted; on an Ongoing transaction it fences (epoch + 1),
  aborts, and answers CONCURRENT_TRANSACTIONS so the producer retries.
* AddPartitionsToTxn / AddOffsetsToTxn make the transaction Ongoing with those partitions.
* EndTxn writes PrepareCommit / PrepareAbort and is answered once that is durable. Markers
  are then due (`markers_due`): the host writes them to every partition of the transaction and
  sends `CompleteTxn`, which writes CompleteCommit / CompleteAbort. A coordinator that restarts
  finds the Prepare states in its log and writes their markers again.
* The producer's next AddPartitionsToTxn usually arrives while those markers are written. Kafka
  answers CONCURRENT_TRANSACTIONS and the client backs off (20-100 ms); here the request waits
  (`Parked`) until the transaction completes and is then handled, as Kafka 4 does on the server
  side for transaction.version 2 (``add.partitions.to.txn.retry.backoff.*``). A request still
  waiting after ``WAIT_FOR_COMPLETION_MS`` gets CONCURRENT_TRANSACTIONS after all.
* Timers: ``txn-timeout-{id}`` aborts (and fences) a transaction open longer than its timeout;
  ``txn-expiration`` tombstones ids idle in Empty / Complete states for
  ``transactional.id.expiration.ms``.

`TRANSITIONS` lists which states each state may be entered from, as Kafka checks them.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cohort.coordinator.requests import Parked, Result
from cohort.coordinator.timers import Timers
from cohort.transactions.records import TxnKey, TxnState, TxnValue
from cohort.transactions.requests import (
    AddPartitions,
    AddPartitionsResult,
    CompleteTxn,
    DescribedTxn,
    EndTxn,
    EndTxnResult,
    InitProducerId,
    InitProducerIdResult,
    MarkerJob,
    TopicPartition,
)

# Kafka error codes the transaction coordinator answers with.
NONE = 0
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
TRANSACTION_ABORTABLE = 120

NOT_COORDINATOR = 16
EXHAUSTED_EPOCH = 32766  # Short.MAX_VALUE - 1: the coordinator never hands out 32767
EXPIRATION_KEY = "txn-expiration"
WAIT_FOR_COMPLETION_MS = 1_000

S = TxnState
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
}
"""Target state -> the states it may be entered from (Kafka's TransactionState)."""

EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


class IllegalTransition(RuntimeError):
    """A bug: a transition Kafka's state machine does not allow."""


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    expiration_check_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms


def exhausted(epoch: int) -> bool:
    return epoch >= EXHAUSTED_EPOCH


class TransactionCoordinatorShard:
    def __init__(self, config: TxnConfig | None = None, *, producer_ids: Callable[[], int],
                 offsets_partition: Callable[[str], TopicPartition], coordinator_epoch: int = 0,
                 markers_ready: Callable[[], None] = lambda: None) -> None:
        """``producer_ids`` hands out new producer ids; ``offsets_partition`` names a group's
        ``__consumer_offsets`` partition; ``markers_ready`` is told when `markers_due` has work."""
        self.config = config or TxnConfig()
        self.transactions: dict[str, TxnValue] = {}
        self.timers = Timers()
        self.coordinator_epoch = coordinator_epoch
        self._producer_ids = producer_ids
        self._offsets_partition = offsets_partition
        self._markers_ready = markers_ready
        self.last_written_offset = 0
        self.last_committed_offset = 0
        self._prepared: dict[str, int] = {}  # id in PrepareCommit / PrepareAbort -> offset of that record
        self._undo: collections.deque[tuple[int, str, TxnValue | None, int | None]] = collections.deque()
        self._records: list | None = None
        self._completions: list = []
        self._waiting: dict[str, list[tuple[int, AddPartitions, int]]] = {}  # id -> (request id, request, parked at)
        self._request_ids = itertools.count(1)
        self._request_id = 0

    # ================================================================== write path

    def handle(self, request: object, now: int, request_id: int | None = None) -> Result:
        """Run one write. An AddPartitions that must wait for its transaction to complete answers
        `Parked(request_id)`; its response comes in a later result's ``completions``."""
        handler = _HANDLERS.get(type(request))
        if handler is None:
            raise TypeError(f"not a transaction coordinator request: {type(request).__name__}")
        self._request_id = next(self._request_ids) if request_id is None else request_id
        return self._run(lambda: handler(self, request, now))

    def expire(self, now: int) -> Result:
        fired = []
        records: list = []
        completions: list = []
        for key, payload in self.timers.pop_expired(now):
            fired.append(key)
            result = self._run(lambda p=payload: self._on_timer(p, now))
            records.extend(result.records)
            completions.extend(result.completions)
        return Result(records, fired, self.last_written_offset, completions)

    def _run(self, op: Callable[[], object]) -> Result:
        self._records = []
        self._completions = []
        try:
            response = op()
        except BaseException:
            self._undo_to(self.last_written_offset - len(self._records))
            self._records = None
            raise
        records, self._records = self._records, None
        completions, self._completions = self._completions, []
        return Result(records, response, self.last_written_offset, completions)

    def _write(self, tid: str, value: TxnValue | None, now: int) -> None:
        """Apply and log a transition of ``tid`` (None: a tombstone)."""
        old = self.transactions.get(tid)
        if value is not None:
            allowed = TRANSITIONS.get(value.state, frozenset())
            if old is not None and old.state not in allowed and old.state != value.state:
                raise IllegalTransition(f"{tid}: {old.state.kafka_name} -> {value.state.kafka_name}")
        self._undo.append((self.last_written_offset, tid, old, self._prepared.get(tid)))
        self._apply(tid, value, self.last_written_offset)
        self.last_written_offset += 1
        self._records.append((TxnKey(tid), value))  # type: ignore[union-attr]
        if value is not None and value.state == S.ONGOING:
            self.timers.schedule(_timeout_key(tid), value.start_ms + value.timeout_ms, ("timeout", tid))
        else:
            self.timers.cancel(_timeout_key(tid))

    def _apply(self, tid: str, value: TxnValue | None, offset: int) -> None:
        if value is None:
            self.transactions.pop(tid, None)
        else:
            self.transactions[tid] = value
        if value is not None and value.state in PREPARED:
            self._prepared[tid] = offset
        else:
            self._prepared.pop(tid, None)

    # ================================================================== durability

    def commit(self, offset: int) -> None:
        undo = self._undo
        while undo and undo[0][0] < offset:
            undo.popleft()
        before = self.last_committed_offset
        self.last_committed_offset = max(before, offset)
        if any(before <= at < offset for at in self._prepared.values()):
            self._markers_ready()

    def revert(self, to_offset: int) -> list:
        self._undo_to(to_offset)
        return []

    def _undo_to(self, offset: int) -> None:
        while self._undo and self._undo[-1][0] >= offset:
            _, tid, old, prepared = self._undo.pop()
            if old is None:
                self.transactions.pop(tid, None)
            else:
                self.transactions[tid] = old
            if prepared is None:
                self._prepared.pop(tid, None)
            else:
                self._prepared[tid] = prepared
        self.last_written_offset = min(self.last_written_offset, max(offset, self.last_committed_offset))

    # ================================================================== loading

    def replay(self, record: tuple[TxnKey, TxnValue | None]) -> None:
        key, value = record
        self._apply(key.transactional_id, value, self.last_written_offset)
        self.last_written_offset += 1
        self.last_committed_offset = self.last_written_offset

    def on_loaded(self, now: int) -> None:
        """Re-arm the timers (after a load, and after a revert)."""
        self.timers.clear()
        for tid, txn in self.transactions.items():
            if txn.state == S.ONGOING:
                self.timers.schedule(_timeout_key(tid), txn.start_ms + txn.timeout_ms, ("timeout", tid))
        self.timers.schedule(EXPIRATION_KEY, now + self.config.expiration_check_interval_ms, ("expiration",))
        if self._waiting:
            self.timers.schedule(WAIT_KEY, now + WAIT_FOR_COMPLETION_MS, ("wait",))
        if self._prepared:
            self._markers_ready()

    def unload(self) -> list:
        """Parked requests are answered NOT_COORDINATOR (the client finds the coordinator again)."""
        self.timers.clear()
        waiting, self._waiting = self._waiting, {}
        return [(rid, AddPartitionsResult({tp: NOT_COORDINATOR for tp in req.partitions}))
                for parked in waiting.values() for rid, req, _ in parked]

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    # ================================================================== markers

    def markers_due(self) -> list[MarkerJob]:
        """Transactions whose PrepareCommit / PrepareAbort is durable: their markers must be
        written, then `CompleteTxn` sent."""
        jobs = []
        for tid, offset in self._prepared.items():
            if offset < self.last_committed_offset:
                t = self.transactions[tid]
                jobs.append(MarkerJob(tid, t.producer_id, t.producer_epoch, t.state == S.PREPARE_COMMIT,
                                      tuple(sorted(t.partitions)), self.coordinator_epoch))
        return jobs

    # ================================================================== reads

    def verify(self, tid: str, producer_id: int, producer_epoch: int, partition: TopicPartition) -> int:
        """KIP-890 verification before a transactional append or offset commit: the partition must
        be in this producer's ongoing transaction."""
        t = self.transactions.get(tid)
        if t is None or t.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if t.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        if t.state in PREPARED:
            return CONCURRENT_TRANSACTIONS
        if t.state != S.ONGOING or partition not in t.partitions:
            return TRANSACTION_ABORTABLE
        return NONE

    def describe(self, tids: Iterable[str]) -> list[DescribedTxn]:
        out = []
        for tid in tids:
            t = self.transactions.get(tid)
            if t is None:
                out.append(DescribedTxn(tid, TRANSACTIONAL_ID_NOT_FOUND))
                continue
            out.append(DescribedTxn(tid, NONE, t.state, t.producer_id, t.producer_epoch, t.timeout_ms, t.start_ms,
                                    tuple(sorted(t.partitions))))
        return out

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1,
             now: int = 0) -> list[DescribedTxn]:
        """ListTransactions' filters: state names, producer ids, and (v1) open longer than duration."""
        wanted_states = {s.lower() for s in states}
        wanted_ids = set(producer_ids)
        out = []
        for tid in sorted(self.transactions):
            t = self.transactions[tid]
            if wanted_states and t.state.kafka_name.lower() not in wanted_states:
                continue
            if wanted_ids and t.producer_id not in wanted_ids:
                continue
            if duration_ms >= 0 and (t.start_ms < 0 or now - t.start_ms < duration_ms):
                continue
            out.append(DescribedTxn(tid, NONE, t.state, t.producer_id, t.producer_epoch, t.timeout_ms, t.start_ms))
        return out

    # ================================================================== requests

    def _init_producer_id(self, req: InitProducerId, now: int) -> InitProducerIdResult:
        tid = req.transactional_id
        if not tid:
            return InitProducerIdResult(INVALID_REQUEST)
        if not 0 < req.timeout_ms <= self.config.max_timeout_ms:
            return InitProducerIdResult(INVALID_TRANSACTION_TIMEOUT)
        t = self.transactions.get(tid)
        if t is None:  # a new id: a fresh producer id whose first bump gives epoch 0
            t = TxnValue(self._producer_ids(), -1, req.timeout_ms, S.EMPTY, last_update_ms=now)
        elif req.producer_id != -1 and not (
                t.producer_epoch == -1 or req.producer_id == t.producer_id
                or (req.producer_id == t.previous_producer_id and exhausted(req.producer_epoch))):
            return InitProducerIdResult(PRODUCER_FENCED)
        if t.state == S.ONGOING:  # a zombie's transaction: fence its epoch, abort, let the caller retry
            self._abort_fencing(tid, t, now)
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS)
        if t.state not in EXPIRABLE:
            return InitProducerIdResult(CONCURRENT_TRANSACTIONS)
        if exhausted(t.producer_epoch) and req.producer_epoch in (-1, t.producer_epoch):
            pid, epoch = self._producer_ids(), 0
            previous, last = t.producer_id, (t.producer_epoch if req.producer_epoch != -1 else -1)
        else:
            pid, previous = t.producer_id, t.previous_producer_id
            if req.producer_epoch == -1:
                epoch, last = t.producer_epoch + 1, -1
            elif t.producer_epoch == -1 or req.producer_epoch == t.producer_epoch:
                epoch, last = t.producer_epoch + 1, t.producer_epoch
            elif req.producer_epoch == t.last_producer_epoch:  # a retry of a bump that succeeded
                return InitProducerIdResult(NONE, t.producer_id, t.producer_epoch)
            else:
                return InitProducerIdResult(PRODUCER_FENCED)
        self._write(tid, TxnValue(pid, epoch, req.timeout_ms, S.EMPTY, frozenset(), now, -1, previous, last), now)
        return InitProducerIdResult(NONE, pid, epoch)

    def _abort_fencing(self, tid: str, t: TxnValue, now: int) -> None:
        """Abort an ongoing transaction with a bumped epoch (a fenced zombie, a timeout): the
        markers carry the new epoch, so the old producer's writes are refused from then on."""
        self._write(tid, dataclasses.replace(t, producer_epoch=t.producer_epoch + 1, state=S.PREPARE_ABORT,
                                             last_update_ms=now, last_producer_epoch=-1), now)

    def _add_partitions(self, req: AddPartitions, now: int) -> AddPartitionsResult:
        error = self._check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
        if error is None and req.verify_only:
            return AddPartitionsResult({tp: self.verify(req.transactional_id, req.producer_id, req.producer_epoch, tp)
                                        for tp in req.partitions})
        if error is not None:
            return AddPartitionsResult({tp: error for tp in req.partitions})
        t = self.transactions[req.transactional_id]
        if t.state in PREPARED and self._request_id:
            return self._park(req, now)
        if t.state not in EXPIRABLE and t.state != S.ONGOING:
            return AddPartitionsResult({tp: CONCURRENT_TRANSACTIONS for tp in req.partitions})
        wanted = frozenset(req.partitions)
        if t.state == S.ONGOING and wanted <= t.partitions:
            return AddPartitionsResult({tp: NONE for tp in req.partitions})
        start = now if t.state != S.ONGOING else t.start_ms
        self._write(req.transactional_id, dataclasses.replace(
            t, state=S.ONGOING, partitions=t.partitions | wanted, start_ms=start, last_update_ms=now), now)
        return AddPartitionsResult({tp: NONE for tp in req.partitions})

    def _park(self, req: AddPartitions, now: int) -> Parked:
        """Wait for the transaction being completed (see the module docstring). One timer checks
        every waiting request, so parking does not wake the timer task per request."""
        rid = self._request_id
        self._waiting.setdefault(req.transactional_id, []).append((rid, req, now))
        if WAIT_KEY not in self.timers:
            self.timers.schedule(WAIT_KEY, now + WAIT_FOR_COMPLETION_MS, ("wait",))
        return Parked(rid)

    def _release_waiting(self, tid: str, now: int) -> None:
        """Handle the requests parked on ``tid`` now that it completed."""
        for rid, req, _ in self._waiting.pop(tid, ()):
            self._request_id = 0  # handled now, never parked again
            self._completions.append((rid, self._add_partitions(req, now)))

    def _waited_too_long(self, now: int) -> None:
        """Requests parked for WAIT_FOR_COMPLETION_MS get CONCURRENT_TRANSACTIONS, as Kafka answers at once."""
        self._request_id = 0
        for tid in list(self._waiting):
            parked = self._waiting[tid]
            late = [p for p in parked if now - p[2] >= WAIT_FOR_COMPLETION_MS]
            if late:
                self._waiting[tid] = [p for p in parked if now - p[2] < WAIT_FOR_COMPLETION_MS]
                if not self._waiting[tid]:
                    del self._waiting[tid]
                for rid, req, _ in late:
                    self._completions.append((rid, self._add_partitions(req, now)))
        if self._waiting:
            oldest = min(p[2] for parked in self._waiting.values() for p in parked)
            self.timers.schedule(WAIT_KEY, oldest + WAIT_FOR_COMPLETION_MS, ("wait",))

    def _check_producer(self, tid: str, producer_id: int, producer_epoch: int) -> int | None:
        if not tid:
            return INVALID_REQUEST
        t = self.transactions.get(tid)
        if t is None or t.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING
        if t.producer_epoch != producer_epoch:
            return PRODUCER_FENCED
        return None

    def add_offsets_partition(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition AddOffsetsToTxn adds for a group."""
        return self._offsets_partition(group_id)

    def _end_txn(self, req: EndTxn, now: int) -> EndTxnResult:
        error = self._check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
        if error is not None:
            return EndTxnResult(error)
        t = self.transactions[req.transactional_id]
        if t.state == S.ONGOING:
            target = S.PREPARE_COMMIT if req.commit else S.PREPARE_ABORT
            self._write(req.transactional_id, dataclasses.replace(t, state=target, last_update_ms=now), now)
            return EndTxnResult(NONE)
        if t.state == (S.COMPLETE_COMMIT if req.commit else S.COMPLETE_ABORT):
            return EndTxnResult(NONE)  # a retry of an EndTxn that completed
        if t.state == (S.PREPARE_COMMIT if req.commit else S.PREPARE_ABORT):
            return EndTxnResult(CONCURRENT_TRANSACTIONS)
        return EndTxnResult(INVALID_TXN_STATE)

    def _complete_txn(self, req: CompleteTxn, now: int) -> None:
        t = self.transactions.get(req.transactional_id)
        if t is None or t.state not in PREPARED or (t.producer_id, t.producer_epoch) != (req.producer_id, req.producer_epoch):
            return None  # already completed (a marker job that ran twice)
        done = S.COMPLETE_COMMIT if t.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self._write(req.transactional_id, dataclasses.replace(t, state=done, partitions=frozenset(),
                                                              last_update_ms=now), now)
        self._release_waiting(req.transactional_id, now)
        return None

    # ================================================================== timers

    def _on_timer(self, payload: tuple, now: int) -> None:
        if payload[0] == "wait":
            self._waited_too_long(now)
            return
        if payload[0] == "timeout":
            t = self.transactions.get(payload[1])
            if t is not None and t.state == S.ONGOING and t.start_ms + t.timeout_ms <= now:
                self._abort_fencing(payload[1], t, now)
            return
        expiration = self.config.id_expiration_ms
        for tid in sorted(self.transactions):
            t = self.transactions[tid]
            if t.state in EXPIRABLE and now - t.last_update_ms >= expiration:
                self._write(tid, None, now)
        self.timers.schedule(EXPIRATION_KEY, now + self.config.expiration_check_interval_ms, ("expiration",))


def _timeout_key(tid: str) -> str:
    return f"txn-timeout-{tid}"


WAIT_KEY = "txn-waits"


_HANDLERS: dict[type, Callable] = {
    InitProducerId: TransactionCoordinatorShard._init_producer_id,
    AddPartitions: TransactionCoordinatorShard._add_partitions,
    EndTxn: TransactionCoordinatorShard._end_txn,
    CompleteTxn: TransactionCoordinatorShard._complete_txn,
}

"""Hypothesis state machine of the transaction coordinator shard, as the group coordinator's are
tested: producers (some of them zombies sharing a transactional id) init, add partitions, commit
or abort; time passes and timers fire; the host writes markers and completes transactions; the
shard restarts from its log. After every step:
* replaying the records written so far into a fresh shard gives the same transactions;
* every record survives an encode / decode round trip;
* a producer holding an epoch older than its id's current one is refused (fenced);
* no transaction stays Ongoing past its timeout once its timer has fired;
* epochs never go down for a producer id and never reach 32767 through a bump.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cohort.coordinator.requests import Parked
from cohort.transactions import coordinator as tc
from cohort.transactions.coordinator import TransactionCoordinatorShard, TxnConfig
from cohort.transactions.records import TxnState, decode, encode
from cohort.transactions.requests import AddPartitions, CompleteTxn, EndTxn, InitProducerId

IDS = ["tx-a", "tx-b"]
HANDLES = [0, 1, 2]  # producer instances; several may use one transactional id (zombies)
PARTITIONS = [("t", 0), ("t", 1), ("u", 0)]
TIMEOUT = 5_000


def persisted(shard: TransactionCoordinatorShard) -> dict:
    """What the log keeps of each transactional id (v0 values)."""
    return {tid: (t.producer_id, t.producer_epoch, t.timeout_ms, t.state, t.partitions, t.last_update_ms, t.start_ms)
            for tid, t in shard.transactions.items()}


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.next_pid = 1000
        self.shard = self._fresh()
        self.shard.on_loaded(0)
        self.log: list = []
        self.now = 0
        self.handles: dict[int, tuple[str, int, int]] = {}  # handle -> (transactional id, producer id, epoch)
        self.parked: dict[int, tuple] = {}  # request id -> the parked AddPartitions
        self.highest: dict[int, int] = {}  # producer id -> highest epoch handed out

    def _fresh(self) -> TransactionCoordinatorShard:
        def pid() -> int:
            self.next_pid += 1
            return self.next_pid

        return TransactionCoordinatorShard(TxnConfig(max_timeout_ms=60_000, id_expiration_ms=50_000,
                                                     expiration_check_interval_ms=10_000),
                                           producer_ids=pid, offsets_partition=lambda g: ("__consumer_offsets", 0))

    def _send(self, request):
        result = self.shard.handle(request, self.now)
        self._keep(result)
        return result.response

    def _keep(self, result) -> None:
        self.log.extend(result.records)
        self.shard.commit(result.end_offset)
        for rid, response in result.completions:  # parked AddPartitions, handled once their transaction completed
            tid, pid, epoch, parts = self.parked.pop(rid)
            code = set(response.errors.values()).pop()
            t = self.shard.transactions.get(tid)
            if code == tc.NONE:
                assert t.state == TxnState.ONGOING and parts <= t.partitions and (t.producer_id, t.producer_epoch) == (pid, epoch)
            else:
                assert code in (tc.CONCURRENT_TRANSACTIONS, tc.PRODUCER_FENCED, tc.INVALID_PRODUCER_ID_MAPPING), code

    @rule(handle=st.sampled_from(HANDLES), tid=st.sampled_from(IDS), recover=st.booleans())
    def init(self, handle, tid, recover):
        held = self.handles.get(handle)
        before = self.shard.transactions.get(tid)
        recover = recover and held is not None and held[0] == tid
        if recover:  # KIP-360: the producer names its id and epoch
            response = self._send(InitProducerId(tid, TIMEOUT, held[1], held[2]))
        else:
            response = self._send(InitProducerId(tid, TIMEOUT))
        if response.error == tc.NONE:
            assert 0 <= response.producer_epoch < 32767
            if before is not None and response.producer_id == before.producer_id:
                retry = recover and held[2] == before.last_producer_epoch != before.producer_epoch
                # a bump hands out the next epoch; only a retried bump gets the current one again
                assert response.producer_epoch == before.producer_epoch + (0 if retry else 1)
            assert response.producer_epoch >= self.highest.get(response.producer_id, -1)
            self.highest[response.producer_id] = response.producer_epoch
            self.handles[handle] = (tid, response.producer_id, response.producer_epoch)
            for other, (otid, opid, oepoch) in self.handles.items():
                if other != handle and otid == tid:
                    assert (opid, oepoch) != (response.producer_id, response.producer_epoch) or recover
        else:
            assert response.error in (tc.CONCURRENT_TRANSACTIONS, tc.PRODUCER_FENCED), response

    @rule(handle=st.sampled_from(HANDLES), parts=st.sets(st.sampled_from(PARTITIONS), min_size=1))
    def add(self, handle, parts):
        if handle not in self.handles:
            return
        tid, pid, epoch = self.handles[handle]
        current = self.shard.transactions.get(tid)
        response = self._send(AddPartitions(tid, pid, epoch, tuple(sorted(parts))))
        if isinstance(response, Parked):  # waits for the transaction being completed
            assert current.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
            self.parked[response.request_id] = (tid, pid, epoch, set(parts))
            return
        codes = set(response.errors.values())
        assert len(codes) == 1
        code = codes.pop()
        if current is None or (current.producer_id, current.producer_epoch) != (pid, epoch):
            assert code in (tc.PRODUCER_FENCED, tc.INVALID_PRODUCER_ID_MAPPING), "a fenced producer added partitions"
        elif code == tc.NONE:
            after = self.shard.transactions[tid]
            assert after.state == TxnState.ONGOING and set(parts) <= after.partitions

    @rule(handle=st.sampled_from(HANDLES), commit=st.booleans())
    def end(self, handle, commit):
        if handle not in self.handles:
            return
        tid, pid, epoch = self.handles[handle]
        current = self.shard.transactions.get(tid)
        response = self._send(EndTxn(tid, pid, epoch, commit))
        if current is None or (current.producer_id, current.producer_epoch) != (pid, epoch):
            assert response.error in (tc.PRODUCER_FENCED, tc.INVALID_PRODUCER_ID_MAPPING)
        elif current.state == TxnState.ONGOING:
            assert response.error == tc.NONE
            assert self.shard.transactions[tid].state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
        elif current.state == TxnState.EMPTY:
            assert response.error == tc.INVALID_TXN_STATE

    @rule()
    def write_markers(self):
        """The host: every decided transaction gets its markers, then CompleteTxn."""
        for job in self.shard.markers_due():
            before = self.shard.transactions[job.transactional_id].state
            written = len(self.log)
            self._send(CompleteTxn(job.transactional_id, job.producer_id, job.producer_epoch))
            states = [value.state for key, value in self.log[written:] if key.transactional_id == job.transactional_id]
            complete = TxnState.COMPLETE_COMMIT if before == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
            assert before in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
            # The completion, then (when an AddPartitions was parked on it) the next transaction.
            assert states in ([complete], [complete, TxnState.ONGOING]), states

    @rule(ms=st.integers(min_value=1, max_value=20_000))
    def tick(self, ms):
        self.now += ms
        self._keep(self.shard.expire(self.now))

    @rule()
    def restart(self):
        for rid, response in self.shard.unload():  # parked requests are answered NOT_COORDINATOR
            self.parked.pop(rid)
            assert set(response.errors.values()) == {tc.NOT_COORDINATOR}
        assert not self.parked
        fresh = self._fresh()
        for record in self.log:
            fresh.replay(decode(*encode(record)))
        fresh.on_loaded(self.now)
        assert persisted(fresh) == persisted(self.shard)
        self.shard = fresh

    @invariant()
    def replay_equals_live_state(self):
        fresh = self._fresh()
        for record in self.log:
            fresh.replay(decode(*encode(record)))
        assert persisted(fresh) == persisted(self.shard)

    @invariant()
    def no_transaction_outlives_its_fired_timeout(self):
        due = self.shard.next_deadline()
        for t in self.shard.transactions.values():
            if t.state == TxnState.ONGOING and t.start_ms + t.timeout_ms <= self.now:
                assert due is not None and due <= self.now  # its timer is still to fire, not lost

    @invariant()
    def epochs_are_sane(self):
        for t in self.shard.transactions.values():
            assert -1 <= t.producer_epoch <= 32767


TxnMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
TestTransactionCoordinator = TxnMachine.TestCase


def test_an_exhausted_epoch_rotates_the_producer_id():
    ids = iter(range(100, 200))
    shard = TransactionCoordinatorShard(producer_ids=lambda: next(ids), offsets_partition=lambda g: ("o", 0))
    shard.on_loaded(0)
    first = shard.handle(InitProducerId("x", 1000), 0).response
    shard.transactions["x"] = shard.transactions["x"].__class__(
        first.producer_id, tc.EXHAUSTED_EPOCH, 1000, TxnState.EMPTY, frozenset(), 0, -1)
    rotated = shard.handle(InitProducerId("x", 1000, first.producer_id, tc.EXHAUSTED_EPOCH), 1).response
    assert (rotated.error, rotated.producer_epoch) == (tc.NONE, 0) and rotated.producer_id != first.producer_id
    # the old id at its exhausted epoch is still recognised as this producer's (a retry after rotation)
    retry = shard.handle(InitProducerId("x", 1000, first.producer_id, tc.EXHAUSTED_EPOCH), 2).response
    assert retry.error == tc.NONE


def test_init_on_an_ongoing_transaction_fences_aborts_and_asks_to_retry():
    ids = iter(range(100, 200))
    shard = TransactionCoordinatorShard(producer_ids=lambda: next(ids), offsets_partition=lambda g: ("o", 0))
    shard.on_loaded(0)
    r = shard.handle(InitProducerId("x", 1000), 0).response
    shard.handle(AddPartitions("x", r.producer_id, r.producer_epoch, (("t", 0),)), 1)
    result = shard.handle(InitProducerId("x", 1000), 2)
    shard.commit(result.end_offset)
    assert result.response.error == tc.CONCURRENT_TRANSACTIONS
    t = shard.transactions["x"]
    assert (t.state, t.producer_epoch) == (TxnState.PREPARE_ABORT, r.producer_epoch + 1)
    [job] = shard.markers_due()
    assert (job.commit, job.producer_epoch, job.partitions) == (False, r.producer_epoch + 1, (("t", 0),))
    # the zombie is fenced from here on
    assert shard.handle(EndTxn("x", r.producer_id, r.producer_epoch, True), 3).response.error == tc.PRODUCER_FENCED
    shard.handle(CompleteTxn("x", job.producer_id, job.producer_epoch), 4)
    again = shard.handle(InitProducerId("x", 1000), 5).response
    assert (again.error, again.producer_epoch) == (tc.NONE, r.producer_epoch + 2)


def test_a_bad_timeout_or_an_empty_id_is_refused():
    shard = TransactionCoordinatorShard(producer_ids=lambda: 1, offsets_partition=lambda g: ("o", 0))
    assert shard.handle(InitProducerId("x", 0), 0).response.error == tc.INVALID_TRANSACTION_TIMEOUT
    assert shard.handle(InitProducerId("x", 10**9), 0).response.error == tc.INVALID_TRANSACTION_TIMEOUT
    assert shard.handle(InitProducerId("", 1000), 0).response.error == tc.INVALID_REQUEST
    assert shard.handle(EndTxn("x", 1, 0, True), 0).response.error == tc.INVALID_PRODUCER_ID_MAPPING

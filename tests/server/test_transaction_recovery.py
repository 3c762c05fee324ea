"""A broker that stopped after a transaction was decided but before its markers were written
finishes it when it starts again: the markers land on every partition of the transaction (a data
partition and the group's `__consumer_offsets` partition), the transaction completes, and a
read_committed reader then sees its records and the group its offsets."""

from __future__ import annotations

import asyncio
import time

from cohort.broker import Broker
from cohort.config import Config
from cohort.coordinator.records import OffsetCommitValue, Record, TxnOffsetCommitKey, encode as encode_group
from cohort.protocol.records import TRANSACTIONAL_FLAG, TxnBatch, build_batch, check_produce_records
from cohort_testing import ServerThread
from cohort.transactions.records import TxnKey, TxnState, TxnValue, encode

PID, EPOCH = 4242, 3


def _decided_but_unmarked(data_dir: str, commit: bool) -> None:
    """What a kill -9 right after PrepareCommit / PrepareAbort was durable leaves behind."""
    broker = Broker(Config({"log.dir": data_dir}))
    try:
        broker.create_topic("out", 1)
        data = bytearray(build_batch([(None, b"decided")], producer_id=PID, producer_epoch=EPOCH, base_sequence=0,
                                     attributes=TRANSACTIONAL_FLAG))
        broker.log("out", 0).append(data, check_produce_records(data))

        async def write() -> None:
            await broker.coordinator_log.append_records([_pending_offset()], TxnBatch(PID, EPOCH))
            state = TxnValue(PID, EPOCH, 60_000, TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                             frozenset({("out", 0), ("__consumer_offsets", 0)}), 1, 1)
            await broker.transaction_logs[0].append_records([encode((TxnKey("decided"), state))])

        asyncio.run(write())
    finally:
        broker.close()


def _pending_offset() -> tuple[bytes, bytes | None]:
    """Group g's offset 1 for out-0, written by the transaction (a transactional batch)."""
    return encode_group(Record(TxnOffsetCommitKey("g", "out", 0, PID, EPOCH), OffsetCommitValue(1, -1, "", 1)))


def _wait(condition, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_decided_commit_is_finished_after_a_restart(tmp_path):
    _decided_but_unmarked(str(tmp_path / "data"), commit=True)
    with ServerThread(tmp_path / "data") as srv:
        shard = srv.server.transaction_coordinator.runtimes[0].shard
        _wait(lambda: srv.call(lambda: shard.transactions["decided"].state) == TxnState.COMPLETE_COMMIT)
        log = srv.server.broker.log("out", 0)
        assert srv.call(lambda: log.last_stable_offset(log.end_offset)) == log.end_offset == 2  # record + marker
        code, data, aborted = srv.call(lambda: srv.server.broker.read_committed("out", 0, 0, 1 << 20))
        assert (code, aborted) == (0, []) and data
        groups = srv.server.group_coordinator.runtimes[0].shard
        assert srv.call(lambda: groups.state.offsets["g"][("out", 0)].offset) == 1


def test_a_decided_abort_is_finished_after_a_restart(tmp_path):
    _decided_but_unmarked(str(tmp_path / "data"), commit=False)
    with ServerThread(tmp_path / "data") as srv:
        shard = srv.server.transaction_coordinator.runtimes[0].shard
        _wait(lambda: srv.call(lambda: shard.transactions["decided"].state) == TxnState.COMPLETE_ABORT)
        code, _, aborted = srv.call(lambda: srv.server.broker.read_committed("out", 0, 0, 1 << 20))
        assert code == 0 and [(a.producer_id, a.first_offset) for a in aborted] == [(PID, 0)]
        groups = srv.server.group_coordinator.runtimes[0].shard
        assert srv.call(lambda: "g" not in groups.state.offsets and not groups.state.txn_offsets)

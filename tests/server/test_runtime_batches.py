"""The runtime follows each log write generation with one callback: writes appended before the
same fsync are answered together, an earlier batch is answered at its own fsync (not held for a
later one), and a failed fsync fails every write of its batch and reverts the shard."""

from __future__ import annotations

import asyncio
import threading

import pytest

from cohort.broker.coordinator_log import CoordinatorLog
from cohort.coordinator import GroupCoordinatorShard, decode, encode
from cohort.coordinator import requests as rq
from cohort.log import PartitionLog
from cohort.coordinator_common.runtime import ConnectionOrder, CoordinatorRuntime


class HeldFsync:
    """Wraps a log's flush: each fsync waits until released (or fails if told to)."""

    def __init__(self, log: PartitionLog) -> None:
        self.flush, self.started, self.release, self.fail = log.flush, threading.Event(), threading.Event(), False
        log.flush = self

    def __call__(self) -> None:
        self.started.set()
        assert self.release.wait(10)
        self.release.clear()
        if self.fail:
            raise OSError("disk full")
        self.flush()


async def until(predicate, what: str) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(what)


def commit(group: str, offset: int) -> rq.OffsetCommitRequest:
    return rq.OffsetCommitRequest(group, (rq.OffsetCommitTopic("t", (rq.OffsetCommitPartition(0, offset),)),))


def start(tmp_path) -> tuple[CoordinatorRuntime, CoordinatorLog, HeldFsync]:
    partition_log = PartitionLog(str(tmp_path / "log"))
    held = HeldFsync(partition_log)
    log = CoordinatorLog(partition_log)

    async def offload(fn, *args):
        return fn(*args)

    runtime = CoordinatorRuntime("test-0", GroupCoordinatorShard(), log, encode=encode, decode=decode,
                                 offload=offload, order=ConnectionOrder())
    return runtime, log, held


CONNECTIONS: list = []  # kept alive: the runtime keys each connection's order by id()


def write(runtime: CoordinatorRuntime, request) -> asyncio.Future:
    """An admin commit on a connection of its own: its answer, once durable."""
    CONNECTIONS.append(connection := object())
    out = runtime.write(connection, request, lambda r: ("ok", r), lambda code, message: ("failed", code))
    assert isinstance(out, asyncio.Future)
    return out


def test_writes_of_one_batch_are_answered_together_and_an_earlier_batch_at_its_own_fsync(tmp_path):
    async def scenario():
        runtime, log, held = start(tmp_path)
        await runtime.load()
        first = [write(runtime, commit(f"g{i}", i)) for i in range(3)]  # one generation
        await until(held.started.is_set, "the first fsync never started")
        held.started.clear()
        later = [write(runtime, commit(f"h{i}", i)) for i in range(2)]  # written after that fsync began
        held.release.set()
        await until(lambda: all(f.done() for f in first), "the first batch was not answered at its fsync")
        assert [f.result()[0] for f in first] == ["ok"] * 3
        assert not any(f.done() for f in later), "the later batch was answered before its own fsync"
        assert runtime.shard.last_committed_offset == 3
        await until(held.started.is_set, "the second fsync never started")
        held.release.set()
        await until(lambda: all(f.done() for f in later), "the later batch was never answered")
        assert [f.result()[0] for f in later] == ["ok"] * 2
        assert runtime.shard.last_committed_offset == 5
        assert log.high_watermark == 5

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_failed_fsync_fails_every_write_of_its_batch_and_reverts_the_shard(tmp_path):
    async def scenario():
        runtime, log, held = start(tmp_path)
        await runtime.load()
        kept = write(runtime, commit("kept", 1))
        await until(held.started.is_set, "the first fsync never started")
        held.started.clear()
        held.release.set()
        await until(kept.done, "the first write was not answered")
        batch = [write(runtime, commit(f"lost{i}", i)) for i in range(4)]
        await until(held.started.is_set, "the second fsync never started")
        held.fail = True
        held.release.set()
        await until(lambda: all(f.done() for f in batch), "the failed batch was not answered")
        assert [f.result()[0] for f in batch] == ["failed"] * 4
        assert runtime.shard.last_committed_offset == 1
        assert set(runtime.shard.state.offsets) == {"kept"}, "the lost commits are still in the shard"

    asyncio.run(asyncio.wait_for(scenario(), 30))


@pytest.mark.parametrize("batches", [1, 3])
def test_every_write_is_answered_once_whatever_the_batching(tmp_path, batches):
    async def scenario():
        runtime, log, held = start(tmp_path)
        held.release.set()  # fsyncs pass as soon as they come; the gates reopen below
        await runtime.load()
        answers = []
        for b in range(batches):
            answers += [write(runtime, commit(f"g{b}-{i}", i)) for i in range(50)]
            await asyncio.sleep(0)
        while not all(f.done() for f in answers):
            held.release.set()
            await asyncio.sleep(0.005)
        assert [f.result()[0] for f in answers] == ["ok"] * len(answers)
        assert runtime.shard.last_committed_offset == len(answers) == log.high_watermark

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_connection_order_forgets_finished_requests_without_growing():
    async def scenario():
        order = ConnectionOrder()
        loop = asyncio.get_running_loop()
        waiting_on, waiting = object(), loop.create_future()
        order.track(waiting_on, waiting)
        contexts = [object() for _ in range(5000)]
        for ctx in contexts:
            fut = loop.create_future()
            order.track(ctx, fut)
            fut.set_result(None)
        assert len(order._last) <= 2048, "finished requests piled up"
        assert not order.idle(waiting_on), "a pending request was forgotten"
        assert all(order.idle(ctx) for ctx in contexts)
        waiting.set_result(None)
        assert order.idle(waiting_on)

    asyncio.run(scenario())

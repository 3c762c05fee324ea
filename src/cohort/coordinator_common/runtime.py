"""The coordinator runtime: what a sans-IO coordinator shard needs from its host.

A shard (the group coordinator's today; a transaction coordinator's the same way) is a state
machine with Kafka's runtime contract (see `cohort.coordinator.shard`): `handle(request, now)`
applies a write and returns its records, `commit(offset)` once they are durable, `revert(offset)`
when they are lost, `replay(record)` and `on_loaded(now)` on load, `expire(now)` for timers,
`unload()` on shutdown. `CoordinatorRuntime` hosts one such shard on the event loop:

* **Writes** run `shard.handle`, whose records are appended to the shard's `RecordLog` in the
  same step (log order is shard order); the answer leaves once the log says they are durable,
  then `shard.commit`. A refused append, a failed fsync, or a log found cut back below what was
  appended reverts the shard from the first lost record on; the lost writes are answered
  NOT_COORDINATOR, as Kafka answers when its log write fails.
* **Exclusive access**: the shard is single-threaded. Work runs on the event loop, except what
  the owner marks heavy (`needs_offload`, `heavy_expiry`), which runs on the server's worker
  thread while an asyncio lock keeps every other access to this shard waiting. Shards are
  independent: one busy or loading shard does not hold up another.
* **Request order per connection** (`ConnectionOrder`, shared by every runtime of a server):
  while one request of a connection waits, its later ones wait behind it, whichever shard they
  go to, as Kafka handles one request per connection at a time.
* **Parked requests** (`Parked(request_id)`) are answered by the completion that releases them,
  once that completion's records are durable.
* **Loading**: the log is replayed into the shard (`RecordLog.records`); until then `loaded` is
  False and the owner answers COORDINATOR_LOAD_IN_PROGRESS.
* **Timers**: a task sleeps until the shard's next deadline (or an earlier one appears) and runs
  `expire(now)` as any other write.

The log is an interface (`RecordLog`): the local segment log (`cohort.broker.CoordinatorLog`)
is its first implementation; a partition of a topic on another cluster is another.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cohort.coordinator import requests as rq
from cohort.coordinator.errors import Errors

log = logging.getLogger("cohort.runtime")


class RecordLog(Protocol):
    """Where a shard's records live. Offsets count records from the start of the log."""

    supports_transactions: bool  # can hold a client's transactional batches (TxnOffsetCommit)

    def append_records(self, records: Sequence[tuple[bytes, bytes | None]], transaction: Any = None) -> asyncio.Future:
        """Append (key, value) records (value None: a tombstone) in call order, as one batch
        (``transaction``: a `TxnBatch` making it a producer's transactional batch or marker).
        Returns a future resolved once they are durable, failed (OSError) if they never will
        be; raises OSError at once when nothing was appended. Called on the event loop."""

    # Optional: ``write_generation``, an int that changes whenever the plain records appended so
    # far are written. Appends made under one generation become durable (or fail) together, so
    # the runtime follows only the newest of them (`_BatchFollower`).

    @property
    def end_offset(self) -> int:
        """One past the last record appended. Found below what the runtime appended: the log lost
        records that were not yet durable (the runtime reverts to there)."""

    def records(self) -> AsyncIterator[tuple[int, bytes | None, bytes | None, Any]]:
        """(offset, key, value, transaction) of every record, oldest first, for the replay on
        load (``transaction``: the batch's `TxnBatch`, None for a plain batch)."""

    async def open(self) -> None:
        """Before the replay: take ownership of the log (an upstream log fences its previous
        owner here). Raises OSError if it cannot."""

    def on_lost(self, callback: Callable[[str, bool], None]) -> None:
        """``callback(reason, fenced)`` runs if the log can no longer be appended to: another
        owner took it over (fenced), or it failed in a way only a fresh load repairs."""

    async def close(self) -> None:
        """The shard is handed over: let appends in flight finish and release what the log
        holds; `open` takes it again later."""


def now_ms() -> int:
    return int(time.time() * 1000)


class AppendFailed(Exception):
    """The records of a write could not be made durable; the shard was reverted."""


@dataclass(frozen=True)
class Failed:
    """The answer to a request whose write was lost or refused before it was handled."""

    code: int
    message: str


def lost(completions: Any) -> list[tuple[int, Failed]]:
    """Completions whose records were lost: their requests get NOT_COORDINATOR (clients retry)."""
    return [(rid, Failed(Errors.NOT_COORDINATOR, "the coordinator log write failed")) for rid, _ in completions]


@dataclass(eq=False)
class _Append:
    """One write's records in flight: shard offsets [start, end) and when they are durable."""

    start: int
    end: int
    durable: asyncio.Future = field(repr=False)  # True once committed, False if reverted
    # Called with that outcome as it is set, in the same step (answers to send; see `_when_durable`).
    settles: list = field(default_factory=list, repr=False)

    def settle(self, ok: bool) -> None:
        self.durable.set_result(ok)
        for settle in self.settles:
            settle(ok)


class _BatchFollower:
    """The one done-callback on the appends of one log write generation: they become durable (or
    fail) together, so when the first of them is done, the newest write of the batch is (a callback
    per append would commit the shard up to each in turn, a hundred times per fsync under load)."""

    __slots__ = ("runtime", "generation", "future", "entry")

    def __init__(self, runtime: "CoordinatorRuntime", generation: int, future: asyncio.Future, entry: "_Append"):
        self.runtime, self.generation, self.future, self.entry = runtime, generation, future, entry
        future.add_done_callback(self.done)

    def done(self, future: asyncio.Future) -> None:
        self.runtime._appended(self.entry, future)


class _Caller:
    """The ordering key of one write that arrives on no connection."""

    __slots__ = ("__weakref__",)


class ConnectionOrder:
    """Each connection's last request still waiting, so that later ones wait behind it."""

    def __init__(self) -> None:
        self._last: dict[int, asyncio.Future] = {}  # id(connection context) -> its last request
        self._sweep_at = 1024

    def idle(self, ctx: Any) -> bool:
        last = self._last.get(id(ctx))
        return last is None or last.done()

    def later(self, ctx: Any, coro: Awaitable, *, in_order: bool = True) -> asyncio.Future:
        """Run ``coro`` as a task. With ``in_order`` it starts once the connection's previous
        request is answered; later requests of the connection wait behind it either way."""
        previous = self._last.get(id(ctx)) if in_order else None

        async def run() -> Any:
            if previous is not None and not previous.done():
                await asyncio.wait((previous,))
            return await coro

        return self.track(ctx, asyncio.ensure_future(run()))

    def track(self, ctx: Any, fut: asyncio.Future) -> asyncio.Future:
        """Make ``fut`` the connection's last pending request.

        A finished request is only swept out of the table now and then (when it has doubled),
        not by a callback of its own: a done future counts as idle anyway, also under the id of a
        later connection, and this is the path of every offset commit."""
        last = self._last
        last[id(ctx)] = fut
        if len(last) > self._sweep_at:
            self._last = last = {key: f for key, f in last.items() if not f.done()}
            self._sweep_at = max(1024, 2 * len(last))
        return fut


class CoordinatorRuntime:
    """One shard, its log, its lock, its timers and its requests in flight (see the module docstring)."""

    def __init__(
        self,
        name: str,
        shard: Any,
        log: RecordLog,
        *,
        encode: Callable[[Any], tuple[bytes, bytes | None]],
        decode: Callable[[bytes | None, bytes | None, Any], Any],
        offload: Callable[..., Awaitable[Any]],
        order: ConnectionOrder,
        loading_message: str = "the coordinator is loading",
        prepare: Callable[[], None] = lambda: None,
        on_records: Callable[[list], None] = lambda records: None,
        on_revert: Callable[[], None] = lambda: None,
        needs_offload: Callable[[Any], bool] = lambda req: False,
        heavy_expiry: Callable[[int], bool] = lambda now: False,
        before_expiry: Callable[[int], Awaitable[None]] | None = None,
        timer_period: Callable[[], float | None] = lambda: None,
        on_lost: Callable[[str, bool], None] = lambda reason, fenced: None,
    ) -> None:
        self.name = name
        self.shard = shard
        self.log = log
        self._encode, self._decode, self._offload, self.order = encode, decode, offload, order
        self._loading_message = loading_message
        self._prepare_hook, self._on_records, self._on_revert = prepare, on_records, on_revert
        self._needs_offload, self._heavy_expiry = needs_offload, heavy_expiry
        self._before_expiry, self._timer_period = before_expiry, timer_period
        self._on_lost = on_lost
        self.loaded = False
        self.lock = asyncio.Lock()  # held while the shard is used across an await
        self._inflight: collections.deque[_Append] = collections.deque()
        self._tail: _Append | None = None  # the latest write in flight
        self._follower: _BatchFollower | None = None  # the latest plain append's batch
        self._log_end = log.end_offset
        self._parked: dict[int, asyncio.Future] = {}  # request id -> resolved with its completion
        self._wake = asyncio.Event()
        self._sleep_until: int | None = None
        self.lost = False  # the log can no longer be appended to: the shard is not served from here
        self.fenced = False  # lost to another owner (not to a failure a fresh load repairs)
        self.owned = True  # False: another instance of the cohort cluster owns the shard
        self._generation = 0  # loads so far: a timer task ends when its load is over
        log.on_lost(self._lost)

    # --- lifecycle ---------------------------------------------------------------------------

    async def load(self) -> tuple[int, int]:
        """Replay the log into the shard, re-arm its timers, then serve. Returns (records, skipped)."""
        count = skipped = 0
        async with self.lock:
            if self.lost:
                raise OSError(f"{self.name} was taken over by another owner")
            await self.log.open()
            async for offset, key, value, transaction in self.log.records():
                try:
                    self.shard.replay(self._decode(key, value, transaction))
                except Exception as exc:  # noqa: BLE001 - one bad record must not lose the rest
                    skipped += 1
                    log.error("%s: coordinator log offset %d cannot be replayed, skipped: %s", self.name, offset, exc)
                count += 1
            self._prepare_hook()
            self.shard.on_loaded(now_ms())
            self._log_end = self.log.end_offset
            self._generation += 1
            self.loaded = True
        return count, skipped

    @property
    def unserved(self) -> tuple[int, str]:
        """The error (code, message) a request gets while the shard is not served from here:
        NOT_COORDINATOR once it belongs elsewhere (taken over, or another instance's), else
        COORDINATOR_LOAD_IN_PROGRESS."""
        if not self.owned or self.fenced:
            return Errors.NOT_COORDINATOR, "This is not the correct coordinator."
        return Errors.COORDINATOR_LOAD_IN_PROGRESS, self._loading_message

    def _lost(self, reason: str, fenced: bool = True) -> None:
        log.error("%s: no longer served from here: %s", self.name, reason)
        self.lost, self.fenced = True, fenced
        self.unload()
        self._wake.set()  # the timer task ends
        self._on_lost(reason, fenced)

    def reset(self, shard: Any) -> None:
        """A fresh shard for a runtime that lost its own (its log failed): `load` it next."""
        if self.loaded:
            raise RuntimeError(f"{self.name} is loaded")
        self.shard = shard
        self.lost = self.fenced = False
        for entry in self._inflight:  # writes whose fate the old shard's log never told
            if not entry.durable.done():
                entry.settle(False)
        self._inflight.clear()
        self._tail = None
        self._follower = None
        self._parked.clear()
        self._sleep_until = None

    def unload(self) -> None:
        """Shutdown: parked requests are answered NOT_COORDINATOR (Kafka's onUnloaded)."""
        if self.loaded:
            self.loaded = False
            self._release(self.shard.unload())
            self._wake.set()  # the timer task ends

    async def stop_serving(self) -> None:
        """Another instance takes the shard: once the work holding it is done, unload (parked
        requests get NOT_COORDINATOR, later ones too)."""
        async with self.lock:
            self.owned = False
            self.unload()

    async def hand_over(self, shard: Any) -> None:
        """After `stop_serving`: let the appends in flight finish and the log go, and keep
        ``shard`` (fresh) for a later `load`."""
        await self.log.close()
        self.reset(shard)

    # --- exclusive access, durability --------------------------------------------------------

    def free(self, ctx: Any) -> bool:
        """True if the shard may be used right now for this connection's request."""
        return self.loaded and not self.lock.locked() and self.order.idle(ctx)

    def _when_durable(self, ctx: Any, entry: _Append, response: Any, answer, fail) -> asyncio.Future:
        """The answer to a write, set as soon as its records are durable (a plain future rather than
        a task, set in the step that learns of the fsync rather than one later: this is the path of
        every offset commit)."""
        out = asyncio.get_running_loop().create_future()

        def settle(ok: bool) -> None:
            if out.done():
                return
            try:
                out.set_result(answer(response) if ok else
                               fail(Errors.NOT_COORDINATOR, "the coordinator log write failed"))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting handler
                out.set_exception(exc)

        entry.settles.append(settle)
        return self.order.track(ctx, out)

    def prepare(self) -> None:
        """Before touching the shard: notice a log cut back by a failed fsync, run the owner's hook."""
        if self._inflight and self.log.end_offset < self._log_end:
            self._revert_inflight()
        self._prepare_hook()

    def _persist(self, result: rq.Result) -> _Append | None:
        """Append the records of a write; returns what to wait for before answering (None: nothing)."""
        records = result.records
        if not records:
            self._maybe_wake_timers()  # a parked join may have armed a timer without writing
            tail = self._tail
            entry = None if tail is None or self.shard.last_committed_offset >= result.end_offset else tail
            self._deliver(result.completions, entry)
            return entry
        start = result.end_offset - len(records)
        try:
            encoded = [self._encode(r) for r in records]
            fut = (self.log.append_records(encoded) if result.transaction is None
                   else self.log.append_records(encoded, result.transaction))
        except OSError as exc:
            log.error("%s: coordinator log append failed: %s", self.name, exc)
            released = self.shard.revert(start)
            self.shard.on_loaded(now_ms())  # re-arm the timers the reverted operation cancelled or fired
            self._on_revert()
            self._release(lost(result.completions))
            self._release(released)
            raise AppendFailed(str(exc)) from None
        self._on_records(records)
        entry = _Append(start, result.end_offset, asyncio.get_running_loop().create_future())
        self._inflight.append(entry)
        self._tail = entry
        self._log_end = self.log.end_offset
        follower = self._follower
        generation = getattr(self.log, "write_generation", None) if result.transaction is None else None
        if (generation is not None and follower is not None and follower.generation == generation
                and not follower.future.done()):
            follower.entry = entry  # written and made durable with the earlier appends of its batch
        elif generation is not None:
            self._follower = _BatchFollower(self, generation, fut, entry)
        else:
            fut.add_done_callback(lambda f: self._appended(entry, f))
        self._maybe_wake_timers()
        self._deliver(result.completions, entry)
        return entry

    def _deliver(self, completions: Any, entry: _Append | None) -> None:
        """Answer parked requests released by a result once its records are durable."""
        if not completions:
            return
        if entry is None:
            self._release(completions)
        else:
            entry.durable.add_done_callback(
                lambda f: self._release(completions if f.result() else lost(completions)))

    def _release(self, completions: Any) -> None:
        for request_id, response in completions:
            fut = self._parked.pop(request_id, None)
            if fut is not None and not fut.done():
                fut.set_result(response)

    def park(self, parked: rq.Parked) -> asyncio.Future:
        """The future of a parked request; register it before the loop runs anything else."""
        fut = asyncio.get_running_loop().create_future()
        self._parked[parked.request_id] = fut
        return fut

    def _appended(self, entry: _Append, fut: asyncio.Future) -> None:
        failed = fut.cancelled() or fut.exception() is not None  # retrieved even when it is no news
        if entry.durable.done():
            return  # already reverted
        if failed:
            log.error("%s: coordinator log write failed: %s", self.name, None if fut.cancelled() else fut.exception())
            self._revert_inflight()
            return
        durable = []
        while self._inflight and self._inflight[0].end <= entry.end:
            durable.append(self._inflight.popleft())
        self.shard.commit(entry.end)  # before any answer is made: answers may read committed state
        if self._tail is entry:
            self._tail = None
        for done in durable:
            if not done.durable.done():
                done.settle(True)

    def _revert_inflight(self) -> None:
        """Every write still in flight is lost (the log was cut back to its durable end)."""
        if not self._inflight:
            return
        released = self.shard.revert(self._inflight[0].start)
        self.shard.on_loaded(now_ms())  # re-arm the timers the reverted operations cancelled or fired
        self._on_revert()
        for entry in self._inflight:
            entry.settle(False)
        self._inflight.clear()
        self._tail = None
        self._log_end = self.log.end_offset
        self._release(released)

    def write(self, ctx: Any, req: Any, answer: Callable[[Any], Any], fail: Callable[[int, str], Any]) -> Any:
        """Run a write: its answer now if nothing needs waiting for, else a future resolving to it."""
        if self.free(ctx) and not self._needs_offload(req):
            self.prepare()
            result = self.shard.handle(req, now_ms())
            try:
                entry = self._persist(result)
            except AppendFailed as exc:
                return fail(Errors.NOT_COORDINATOR, f"the coordinator log write failed: {exc}")
            if type(result.response) is rq.Parked:
                return self.order.later(ctx, self._answer_parked(self.park(result.response), answer, fail),
                                        in_order=False)
            if entry is None:
                return answer(result.response)
            return self._when_durable(ctx, entry, result.response, answer, fail)
        return self.order.later(ctx, self._write_waiting(req, answer, fail))

    async def _write_waiting(self, req: Any, answer: Callable[[Any], Any], fail: Callable[[int, str], Any]) -> Any:
        async with self.lock:
            if not self.loaded:
                return fail(*self.unserved)
            self.prepare()
            if self._needs_offload(req):
                result = await self._offload(self.shard.handle, req, now_ms())
            else:
                result = self.shard.handle(req, now_ms())
            try:
                entry = self._persist(result)
            except AppendFailed as exc:
                return fail(Errors.NOT_COORDINATOR, f"the coordinator log write failed: {exc}")
            parked = self.park(result.response) if type(result.response) is rq.Parked else None
        if parked is not None:
            return await self._answer_parked(parked, answer, fail)
        if entry is None:
            return answer(result.response)
        if await asyncio.shield(entry.durable):
            return answer(result.response)
        return fail(Errors.NOT_COORDINATOR, "the coordinator log write failed")

    async def _answer_parked(self, parked: asyncio.Future, answer, fail) -> Any:
        response = await parked
        if isinstance(response, Failed):
            return fail(response.code, response.message)
        return answer(response)

    def writes_in_flight(self) -> asyncio.Future | None:
        """The durability of every write appended so far (True once durable, False if lost);
        None if there is none in flight. A read of the latest state answers after it."""
        tail = self._tail
        return None if tail is None or tail.durable.done() else tail.durable

    def read(self, ctx: Any, fn: Callable[[], Any]) -> Any:
        """Run a read of committed state now, or once the shard is free."""
        if self.free(ctx):
            return fn()

        async def waiting() -> Any:
            async with self.lock:
                return fn()

        return self.order.later(ctx, waiting())

    async def write_async(self, req: Any) -> Any:
        """A write from a caller that is not a request handler; a `Failed` when it could not run.
        Such writes are not ordered behind one another (each is a connection of its own)."""
        fut = self.write(_Caller(), req, lambda r: r, Failed)
        return await fut if isinstance(fut, asyncio.Future) else fut

    # --- timers ------------------------------------------------------------------------------

    def _maybe_wake_timers(self) -> None:
        deadline = self.shard.next_deadline()
        if deadline is not None and (self._sleep_until is None or deadline < self._sleep_until):
            self._wake.set()

    async def timer_loop(self) -> None:
        """Sleep until the shard's next deadline (or an earlier one is scheduled), then expire;
        ends when the shard is unloaded."""
        generation = self._generation
        while not self.lost and self.loaded and self._generation == generation:
            async with self.lock:
                deadline = self.shard.next_deadline()
            self._sleep_until = deadline
            self._wake.clear()
            timeout = None if deadline is None else max(0.0, (deadline - now_ms()) / 1000)
            period = self._timer_period()
            if period is not None:
                timeout = period if timeout is None else min(timeout, period)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            if self._before_expiry is not None:
                await self._before_expiry(now_ms())
            async with self.lock:
                now = now_ms()
                deadline = self.shard.next_deadline()
                if self.lost or not self.loaded or deadline is None or deadline > now:
                    continue
                self.prepare()
                if self._heavy_expiry(now):
                    result = await self._offload(self.shard.expire, now)
                else:
                    result = self.shard.expire(now)
                try:
                    entry = self._persist(result)
                except AppendFailed:
                    continue  # reverted, and the timers re-armed
            if entry is not None and not await asyncio.shield(entry.durable):
                log.warning("%s: records of expired timers %s were lost; the timers were re-armed", self.name,
                            result.response)

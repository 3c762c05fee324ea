"""The group coordinator's APIs, served from one sans-IO :class:`GroupCoordinatorShard`.

cohort has one ``__consumer_offsets`` partition, so one shard owns every group. This adapter
gives the shard what it cannot have itself: a clock, a durable log, timers and topic metadata.

* **Writes** (heartbeat, offset commit/delete, group delete, group config changes, timer
  expiry) run ``shard.handle(request, now)``, which applies its records at once. The records
  are appended to the coordinator log in the same step, so log order is shard order; the
  response is released only after the fsync that covers them, then ``shard.commit``. A failed
  append reverts the shard from the first lost record on and answers NOT_COORDINATOR, as Kafka
  does when its log write fails.
* **Exclusive access**: the shard is single-threaded. Work runs on the event loop, except a
  heartbeat that may run an assignor on a large group, which runs ``handle`` on the server's
  worker thread while an asyncio lock keeps every other shard access waiting. Requests of one
  connection keep their order: while one of them waits, the next ones wait too.
* **Reads** (describe, list, offset fetch) see committed state only (the shard's contract).
* **Loading**: at startup the log is replayed into the shard; until then group APIs answer
  COORDINATOR_LOAD_IN_PROGRESS.
* **Parked requests** (classic JoinGroup / SyncGroup, served by _classic.py): the shard answers
  ``Parked(request_id)``; a future per id is resolved by the completion that releases it, once
  that completion's result is durable (or with NOT_COORDINATOR if its records are lost). Only
  the parked request's own connection waits (its later requests queue behind it, as Kafka mutes
  the channel); the shard and other connections go on. ``revert`` and ``unload`` (shutdown)
  answer parked requests too.
* **Lag** (docs/lag.md): with `group.lag.source=local` the shard reads log start / end offsets
  through a live view of the broker's partition logs (`BrokerLogOffsets`, read only when the lag
  assignor asks); with a directory, from the newest lag snapshot, refreshed on the worker thread
  before timers fire. Timer expiry that includes a lag evaluation runs on the worker thread.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from kio.schema.errors import ErrorCode

from cohort.assignors import registry
from cohort.broker import BrokerError
from cohort.broker.lag_snapshot import SnapshotLagProvider
from cohort.config import REGISTRY, ConfigError, declare
from cohort.coordinator import CoordinatorConfig, GroupCoordinatorShard, MetadataImage, TopicImage, decode, encode
from cohort.coordinator import requests as rq
from cohort.coordinator.config import INT_MAX
from cohort.coordinator.errors import Errors
from cohort.coordinator.lag import TopicOffsets
from cohort.protocol import DecodedRequest
from cohort.protocol.operations import GROUP_OPS
from cohort.security import acls
from cohort.server import _classic, overview
from cohort.server import _group_codec as wire
from cohort.server.configs import APPEND, DEFAULT_CONFIG, DELETE, GROUP, GROUP_CONFIG, SET, SUBTRACT, ConfigEntry
from cohort.stats import Histogram

if TYPE_CHECKING:
    from cohort.server.server import RequestContext, Server

log = logging.getLogger("cohort.groups")

# --- settings (Kafka's names and defaults) ---------------------------------------------------

_G = "group coordinator"
declare("group.consumer.session.timeout.ms", int, 45_000, "Session timeout of consumer-protocol members: a member "
        "that sends no heartbeat for this long is removed from its group. Groups may override it "
        "(`consumer.session.timeout.ms`) within the min/max bounds.", minimum=1, group=_G)
declare("group.consumer.min.session.timeout.ms", int, 45_000, "Smallest session timeout a group may configure.",
        minimum=1, group=_G)
declare("group.consumer.max.session.timeout.ms", int, 60_000, "Largest session timeout a group may configure.",
        minimum=1, group=_G)
declare("group.consumer.heartbeat.interval.ms", int, 5_000, "Heartbeat interval given to consumer-protocol members "
        "(must be below the session timeout). Groups may override it (`consumer.heartbeat.interval.ms`).",
        minimum=1, group=_G)
declare("group.consumer.min.heartbeat.interval.ms", int, 5_000, "Smallest heartbeat interval a group may configure.",
        minimum=1, group=_G)
declare("group.consumer.max.heartbeat.interval.ms", int, 15_000, "Largest heartbeat interval a group may configure.",
        minimum=1, group=_G)
declare("group.consumer.max.size", int, INT_MAX, "Most members a consumer group may have (GROUP_MAX_SIZE_REACHED "
        "beyond).", minimum=1, group=_G)
declare("group.consumer.assignors", str, "uniform,range,lag", "Server-side assignors members may ask for "
        "(`group.remote.assignor`), comma-separated; the first is the default.", group=_G)
declare("offsets.retention.minutes", int, 10_080, "Committed offsets of topics a group no longer subscribes to "
        "are deleted after this long.", minimum=1, group=_G)
declare("offsets.retention.check.interval.ms", int, 600_000, "How often expired offsets are looked for.",
        minimum=1, group=_G)
declare("offset.metadata.max.bytes", int, 4096, "Longest metadata string an offset commit may carry "
        "(OFFSET_METADATA_TOO_LARGE beyond).", minimum=0, group=_G)
declare("group.consumer.migration.policy", str, "bidirectional", "Whether a group may convert between the classic "
        "and the consumer protocol (KIP-848 online migration).",
        choices=("bidirectional", "upgrade", "downgrade", "disabled"), group=_G)
declare("group.min.session.timeout.ms", int, 6_000, "Smallest session timeout a classic-protocol member may ask "
        "for (INVALID_SESSION_TIMEOUT below).", minimum=0, group=_G)
declare("group.max.session.timeout.ms", int, 1_800_000, "Largest session timeout a classic-protocol member may ask "
        "for (INVALID_SESSION_TIMEOUT above).", minimum=0, group=_G)
declare("group.initial.rebalance.delay.ms", int, 3_000, "How long the first rebalance of an empty classic group "
        "waits for more members (extended while they keep arriving, up to the rebalance timeout).", minimum=0, group=_G)
declare("group.max.size", int, INT_MAX, "Most members a classic group may have (GROUP_MAX_SIZE_REACHED "
        "beyond).", minimum=1, group=_G)
declare("group.lag.rebalance.interval.ms", int, 30_000, "How often the coordinator re-evaluates the lag balance of "
        "each group using the `lag` assignor (cohort only).", minimum=1, group=_G)
declare("group.lag.rebalance.min.interval.ms", int, 120_000, "Least time between two lag-driven rebalance decisions "
        "of one group (cohort only).", minimum=0, group=_G)
declare("group.lag.imbalance.ratio", float, 1.5, "A group using `lag` is rebalanced when its heaviest member's "
        "assigned lag exceeds the mean member lag by more than this factor on consecutive evaluations (cohort "
        "only; must be greater than 1).", group=_G)
declare("group.lag.imbalance.evaluations", int, 2, "Consecutive imbalanced evaluations needed before a lag-driven "
        "rebalance (cohort only).", minimum=1, group=_G)
declare("group.lag.source", str, "local", "Where the `lag` assignor's lag comes from: `local` (this broker's log "
        "end offsets and the group's committed offsets) or the directory of lag snapshot files written by the "
        "pipeline (docs/lag.md; cohort only).", group=_G)
declare("group.coordinator.offload.min.members", int, 2000, "A heartbeat that may compute a new target assignment "
        "for a group of at least this many members runs on the worker thread, so the event loop keeps "
        "serving other connections meanwhile (cohort only).", minimum=1, group=_G)

GROUP_CONFIG_DOCS = {
    "consumer.session.timeout.ms": "The group's session timeout (overrides group.consumer.session.timeout.ms).",
    "consumer.heartbeat.interval.ms": "The group's heartbeat interval (overrides group.consumer.heartbeat.interval.ms).",
    "consumer.assignor": "The group's default server assignor when members name none (cohort only).",
    "consumer.offset.reset": "Where a partition without a committed offset starts, for the `lag` assignor's lag: "
                             "`latest` (lag 0) or `earliest` (the whole log) (cohort only).",
}


def coordinator_config(config: Any) -> CoordinatorConfig:
    """The shard's configuration from the broker settings; a bad combination is a ConfigError."""
    names = [*CoordinatorConfig.PROPERTIES, "group.consumer.assignors", "group.consumer.migration.policy",
             "offsets.retention.minutes", "group.lag.imbalance.ratio", "group.lag.source"]
    props = {name: config[name] for name in names if name in REGISTRY}
    try:
        result = CoordinatorConfig.from_properties(props)
        for name in result.consumer_assignors:
            registry.get(name)
    except (ValueError, LookupError) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    return result


def now_ms() -> int:
    return int(time.time() * 1000)


class BrokerLogOffsets(Mapping):
    """The broker's log start / end offsets by topic id, read when the shard asks (a live view:
    nothing is copied until a group's lag is computed, and the values are always current)."""

    def __init__(self, broker: Any) -> None:
        self._broker = broker

    def get(self, topic_id: uuid.UUID, default: Any = None) -> Any:
        try:  # may run on the worker thread while the loop deletes the topic
            topic = self._broker.topic_by_id(topic_id)
        except KeyError:
            return default
        if topic is None or topic.internal:
            return default
        logs, name = self._broker.logs, topic.name
        starts, ends = [], []
        for p in range(topic.partitions):
            log = logs.get((name, p))
            starts.append(0 if log is None else log.start_offset)
            ends.append(0 if log is None else log.end_offset)
        return TopicOffsets(starts, ends)

    def __getitem__(self, topic_id: uuid.UUID) -> TopicOffsets:
        found = self.get(topic_id)
        if found is None:
            raise KeyError(topic_id)
        return found

    def __iter__(self) -> Iterator[uuid.UUID]:
        return iter([t.id for t in self._broker.topics.values() if not t.internal])

    def __len__(self) -> int:
        return sum(1 for t in self._broker.topics.values() if not t.internal)


class AppendFailed(Exception):
    """The records of a write could not be made durable; the shard was reverted."""


@dataclass(eq=False)
class _Append:
    """One write's records in flight: shard offsets [start, end) and when they are durable."""

    start: int
    end: int
    durable: asyncio.Future = field(repr=False)  # True once committed, False if reverted


def install(server: "Server") -> None:
    coordinator = GroupCoordinator(server)
    server.group_coordinator = coordinator  # type: ignore[attr-defined]
    reg = server.apis.register
    reg(68, coordinator.consumer_group_heartbeat, min_version=0, max_version=1)
    reg(69, coordinator.consumer_group_describe, min_version=0, max_version=1)
    reg(8, coordinator.offset_commit, min_version=2, max_version=10)
    reg(9, coordinator.offset_fetch, min_version=1, max_version=10)
    reg(16, coordinator.list_groups, min_version=0, max_version=5)
    reg(42, coordinator.delete_groups, min_version=0, max_version=2)
    reg(47, coordinator.offset_delete, min_version=0, max_version=0)
    server.config_resources[GROUP] = GroupConfigs(coordinator)
    server.startup_hooks.append(coordinator.load)

    server.broker.topic_listeners.append(coordinator.topics_changed)
    server.shutdown_hooks.append(coordinator.unload)
    _classic.install(server, coordinator)


class GroupCoordinator:
    def __init__(self, server: "Server") -> None:
        self.server = server
        self.broker = server.broker
        self.log = server.broker.coordinator_log
        self.config = coordinator_config(server.config)
        self.offload_min_members = server.config["group.coordinator.offload.min.members"]
        self.snapshots: SnapshotLagProvider | None = None
        self.timeline = overview.EpochTimeline()  # for the dashboard and the rebalance counters
        self.changes = overview.ChangeFeed()  # which groups /metrics must read again
        self.assignor_seconds: dict[str, Histogram] = {}
        assignors = {}
        for name in self.config.consumer_assignors:
            try:
                assignors[name] = overview.TimedAssignor(registry.get(name),
                                                         self.assignor_seconds.setdefault(name, Histogram()))
            except registry.UnknownAssignorError:
                pass  # the shard reports it when a group asks for it
        if self.config.lag_source == "local":
            self.shard = GroupCoordinatorShard(self.config, assignors=assignors)
            self.shard.update_log_offsets(BrokerLogOffsets(self.broker))
        else:
            self.snapshots = SnapshotLagProvider(self.config.lag_source, self._topic_name)
            self.shard = GroupCoordinatorShard(self.config, lag_provider=self.snapshots, assignors=assignors)
        self._snapshot_checked: int | None = None
        self.loaded = False
        self._lock = asyncio.Lock()  # held while the shard is used across an await
        self._inflight: collections.deque[_Append] = collections.deque()
        self._tail: _Append | None = None  # the latest write in flight
        self._log_end = self.log.log.end_offset
        self._metadata_stale = True
        self._conn_last: dict[int, asyncio.Task] = {}  # id(ctx) -> the connection's last request still waiting
        self._parked: dict[int, asyncio.Future] = {}  # request id -> resolved with its completion
        self._wake = asyncio.Event()
        self._sleep_until: int | None = None
        self._hb = {}  # version -> HeartbeatEncoder
        self.names = wire.TopicNames(self.broker.topic_by_id, self.broker.topics.get)

    # --- lifecycle ---------------------------------------------------------------------------

    async def load(self) -> None:
        """Replay the coordinator log, then serve (yielding to the loop while replaying)."""
        started = time.monotonic()
        async with self._lock:
            count = skipped = 0
            for offset, key, value in self.log.read_all():
                try:
                    self.shard.replay(decode(key, value))
                except Exception as exc:  # noqa: BLE001 - one bad record must not lose the rest
                    skipped += 1
                    log.error("coordinator log offset %d cannot be replayed, skipped: %s", offset, exc)
                count += 1
                if count % 2000 == 0:
                    await asyncio.sleep(0)
            self._refresh_metadata()
            self.shard.on_loaded(now_ms())
            self._log_end = self.log.log.end_offset
            await self._refresh_snapshot(now_ms())
            self.changes.everything()  # readers that subscribed before the replay read it all
            self.loaded = True
        log.info("group coordinator loaded %d records (%d skipped) in %.2f s; %d groups",
                 count, skipped, time.monotonic() - started, len(self.shard.state.groups))
        self.server.spawn(self._timer_loop())

    def groups(self, only: str | None = None) -> list[overview.GroupView]:
        """What the shard holds now, for /metrics and the dashboard (read on the event loop)."""
        self._refresh_metadata()
        return overview.group_views(self.shard, self._topic_name, only)

    def group_lags(self, only: Any = None) -> list[overview.GroupLag]:
        """The cheap per-group summary /metrics renders, of every group or of `only` (read on the event loop)."""
        self._refresh_metadata()
        return overview.group_lags(self.shard, self._topic_name, only)

    def group_ids(self) -> list[str]:
        return overview.group_ids(self.shard)

    def committed_offsets(self, group_ids: Any) -> list[Any]:
        return overview.committed_offsets(self.shard, group_ids)

    def live_classic(self) -> dict[str, tuple]:
        """What changes in memory of each classic group with members (see `overview.live_classic`)."""
        return overview.live_classic(self.shard)

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        try:
            topic = self.broker.topic_by_id(topic_id)
        except KeyError:
            return None
        return None if topic is None else topic.name

    async def _refresh_snapshot(self, now: int) -> None:
        """Read the newest lag snapshot (file I/O, on the worker thread), at most once per evaluation interval."""
        if self.snapshots is None or (self._snapshot_checked is not None
                                      and now - self._snapshot_checked < self.config.lag_rebalance_interval_ms):
            return
        self._snapshot_checked = now
        if await self.server.offload(self.snapshots.refresh):
            log.info("lag snapshot %d (%s) loaded from %s", self.snapshots.snapshot.sample_seq,
                     self.snapshots.snapshot.sample_time, self.config.lag_source)
        elif self.snapshots.error:
            log.warning("lag snapshot not used: %s", self.snapshots.error)

    def topics_changed(self) -> None:
        self._metadata_stale = True  # applied before the next shard access (heartbeats refresh lazily)
        self.changes.everything()  # topic names in /metrics labels

    def _refresh_metadata(self) -> None:
        if not self._metadata_stale:
            return
        self._metadata_stale = False
        snap = self.broker.metadata_snapshot()
        self.shard.update_metadata(MetadataImage.of(
            (TopicImage(t.name, t.topic_id, t.num_partitions) for t in snap.topics.values() if not t.internal),
            snap.version))

    # --- exclusive access, durability --------------------------------------------------------

    def _free(self, ctx: Any) -> bool:
        """True if the shard may be used right now for this connection's request."""
        if not self.loaded or self._lock.locked():
            return False
        last = self._conn_last.get(id(ctx))
        return last is None or last.done()

    def _later(self, ctx: Any, coro, *, in_order: bool = True) -> asyncio.Future:
        """Run ``coro`` as a task. With ``in_order`` it starts once the connection's previous
        request is answered (Kafka handles one request per connection at a time); later
        requests of the connection wait behind it either way."""
        key = id(ctx)
        previous = self._conn_last.get(key) if in_order else None

        async def run() -> Any:
            if previous is not None and not previous.done():
                await asyncio.wait((previous,))
            return await coro

        return self._track(ctx, asyncio.ensure_future(run()))

    def _track(self, ctx: Any, fut: asyncio.Future) -> asyncio.Future:
        """Make ``fut`` the connection's last pending request, so later ones wait behind it."""
        key = id(ctx)
        self._conn_last[key] = fut

        def done(_: asyncio.Future) -> None:
            if self._conn_last.get(key) is fut:
                del self._conn_last[key]

        fut.add_done_callback(done)
        return fut

    def _when_durable(self, ctx: Any, entry: _Append, response: Any, answer, fail) -> asyncio.Future:
        """The answer to a write, resolved by a callback once its records are durable (a plain
        future rather than a task: this is the path of every offset commit)."""
        out = asyncio.get_running_loop().create_future()

        def settle(durable: asyncio.Future) -> None:
            if out.done():
                return
            try:
                ok = durable.result()
                out.set_result(answer(response) if ok else
                               fail(Errors.NOT_COORDINATOR, "the coordinator log write failed"))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting handler
                out.set_exception(exc)

        entry.durable.add_done_callback(settle)
        return self._track(ctx, out)

    def _prepare(self) -> None:
        """Before touching the shard: notice a log cut back by a failed fsync, apply metadata."""
        if self._inflight and self.log.log.end_offset < self._log_end:
            self._revert_inflight()
        self._refresh_metadata()

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
            fut = self.log.append_records([encode(r) for r in records])
        except OSError as exc:
            log.error("coordinator log append failed: %s", exc)
            released = self.shard.revert(start)
            self.shard.on_loaded(now_ms())  # re-arm the timers the reverted operation cancelled or fired
            self.changes.everything()
            self._release(_lost(result.completions))
            self._release(released)
            raise AppendFailed(str(exc)) from None
        self.timeline.observe(records, now_ms())
        self.changes.observe(records)
        entry = _Append(start, result.end_offset, asyncio.get_running_loop().create_future())
        self._inflight.append(entry)
        self._tail = entry
        self._log_end = self.log.log.end_offset
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
                lambda f: self._release(completions if f.result() else _lost(completions)))

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

    async def unload(self) -> None:
        """Shutdown hook: parked requests are answered NOT_COORDINATOR (Kafka's onUnloaded)."""
        if self.loaded:
            self.loaded = False
            self._release(self.shard.unload())

    def _appended(self, entry: _Append, fut: asyncio.Future) -> None:
        if entry.durable.done():
            return  # already reverted
        if fut.cancelled() or fut.exception() is not None:
            log.error("coordinator log fsync failed: %s", None if fut.cancelled() else fut.exception())
            self._revert_inflight()
            return
        while self._inflight and self._inflight[0].end <= entry.end:
            done = self._inflight.popleft()
            if not done.durable.done():
                done.durable.set_result(True)
        self.shard.commit(entry.end)
        if self._tail is entry:
            self._tail = None

    def _revert_inflight(self) -> None:
        """Every write still in flight is lost (the log was cut back to its durable end)."""
        if not self._inflight:
            return
        released = self.shard.revert(self._inflight[0].start)
        self.shard.on_loaded(now_ms())  # re-arm the timers the reverted operations cancelled or fired
        self.changes.everything()
        for entry in self._inflight:
            entry.durable.set_result(False)
        self._inflight.clear()
        self._tail = None
        self._log_end = self.log.log.end_offset
        self._release(released)

    def _needs_offload(self, req: Any) -> bool:
        """A heartbeat that may compute a target assignment for a large group."""
        if type(req) is not rq.ConsumerGroupHeartbeatRequest:
            return False
        group = self.shard.state.groups.get(req.group_id)
        if group is None or len(group.members) < self.offload_min_members:
            return False
        return (req.member_epoch <= 0 or req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None
                or group.group_epoch > group.assignment_epoch or group.refresh_metadata or self._metadata_stale)

    def write(self, ctx: Any, req: Any, answer: Callable[[Any], Any], fail: Callable[[int, str], Any]) -> Any:
        """Run a write: its answer now if nothing needs waiting for, else a task resolving to it."""
        if self._free(ctx) and not self._needs_offload(req):
            self._prepare()
            result = self.shard.handle(req, now_ms())
            try:
                entry = self._persist(result)
            except AppendFailed as exc:
                return fail(Errors.NOT_COORDINATOR, f"the coordinator log write failed: {exc}")
            if type(result.response) is rq.Parked:
                return self._later(ctx, self._answer_parked(self.park(result.response), answer, fail), in_order=False)
            if entry is None:
                return answer(result.response)
            return self._when_durable(ctx, entry, result.response, answer, fail)
        return self._later(ctx, self._write_waiting(req, answer, fail))

    async def _write_waiting(self, req: Any, answer: Callable[[Any], Any], fail: Callable[[int, str], Any]) -> Any:
        async with self._lock:
            if not self.loaded:
                return fail(Errors.COORDINATOR_LOAD_IN_PROGRESS, wire.LOADING)
            self._prepare()
            if self._needs_offload(req):
                result = await self.server.offload(self.shard.handle, req, now_ms())
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
        return await self._answer_when_durable(entry, result, answer, fail)

    async def _answer_parked(self, parked: asyncio.Future, answer, fail) -> Any:
        response = await parked
        if isinstance(response, _Failed):
            return fail(response.code, response.message)
        return answer(response)

    async def _answer_when_durable(self, entry: _Append, result: rq.Result, answer, fail) -> Any:
        if await asyncio.shield(entry.durable):
            return answer(result.response)
        return fail(Errors.NOT_COORDINATOR, "the coordinator log write failed")

    def read(self, ctx: Any, fn: Callable[[], Any]) -> Any:
        """Run a read of committed state now, or once the shard is free."""
        if self._free(ctx):
            return fn()

        async def waiting() -> Any:
            async with self._lock:
                return fn()

        return self._later(ctx, waiting())

    async def write_async(self, req: Any) -> Any:
        """A write from a caller that is not a request handler (group configs)."""
        fut = self.write(None, req, lambda r: r, lambda code, msg: _Failed(code, msg))
        return await fut if isinstance(fut, asyncio.Future) else fut

    # --- timers ------------------------------------------------------------------------------

    def _maybe_wake_timers(self) -> None:
        deadline = self.shard.next_deadline()
        if deadline is not None and (self._sleep_until is None or deadline < self._sleep_until):
            self._wake.set()

    async def _timer_loop(self) -> None:
        """Sleep until the shard's next deadline (or an earlier one is scheduled), then expire."""
        while True:
            async with self._lock:
                deadline = self.shard.next_deadline()
            self._sleep_until = deadline
            self._wake.clear()
            timeout = None if deadline is None else max(0.0, (deadline - now_ms()) / 1000)
            if self.snapshots is not None:  # look for a newer lag snapshot at least once per interval
                period = self.config.lag_rebalance_interval_ms / 1000
                timeout = period if timeout is None else min(timeout, period)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            await self._refresh_snapshot(now_ms())
            async with self._lock:
                now = now_ms()
                deadline = self.shard.next_deadline()
                if deadline is None or deadline > now:
                    continue
                self._prepare()
                if self.shard.lag_evaluation_due(now):
                    result = await self.server.offload(self.shard.expire, now)  # lag + maybe an assignor run
                else:
                    result = self.shard.expire(now)
                try:
                    entry = self._persist(result)
                except AppendFailed:
                    continue  # reverted, and the timers re-armed
            if entry is not None and not await asyncio.shield(entry.durable):
                log.warning("records of expired timers %s were lost; the timers were re-armed", result.response)

    # --- ConsumerGroupHeartbeat (68) ---------------------------------------------------------

    def consumer_group_heartbeat(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp_type = req.codec.response_type
        encoder = self._hb.get(req.version)
        if encoder is None:
            encoder = self._hb[req.version] = wire.HeartbeatEncoder(resp_type)
        if not self.loaded:
            return wire.heartbeat_error(resp_type, Errors.COORDINATOR_LOAD_IN_PROGRESS, wire.LOADING)
        if ctx.server.authorizer is not None:  # Kafka: READ on the group, DESCRIBE on every subscribed topic
            if not ctx.authorize(acls.READ, acls.GROUP, req.body.group_id):
                return wire.heartbeat_error(resp_type, Errors.GROUP_AUTHORIZATION_FAILED, None)
            if any(not ctx.authorize(acls.DESCRIBE, acls.TOPIC, t) for t in req.body.subscribed_topic_names or ()):
                return wire.heartbeat_error(resp_type, Errors.TOPIC_AUTHORIZATION_FAILED, None)
        topic_filter = None
        if ctx.server.authorizer is not None:  # any heartbeat may refresh the group's regexes
            topic_filter = lambda name: ctx.authorize(acls.DESCRIBE, acls.TOPIC, name)  # noqa: E731
        request = wire.heartbeat_request(req.body, req.version, req.client_id or "", wire.client_host(ctx.peer),
                                         topic_filter)
        return self.write(ctx, request, encoder, lambda code, msg: wire.heartbeat_error(resp_type, code, msg))

    # --- ConsumerGroupDescribe (69) ----------------------------------------------------------

    def consumer_group_describe(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        if not self.loaded:
            return wire.consumer_group_describe_error(resp, tuple(body.group_ids), Errors.COORDINATOR_LOAD_IN_PROGRESS,
                                                      wire.LOADING)
        ids = tuple(body.group_ids)
        allowed = tuple(g for g in ids if ctx.authorize(acls.DESCRIBE, acls.GROUP, g))
        request = rq.ConsumerGroupDescribeRequest(allowed, body.include_authorized_operations)

        def describe() -> Any:
            found = {g.group_id: g for g in self.shard.describe_groups(request).groups} if allowed else {}
            groups = tuple(found.get(g) or rq.DescribedGroup(g, Errors.GROUP_AUTHORIZATION_FAILED) for g in ids)
            with_ops: Any = body.include_authorized_operations
            if with_ops and ctx.server.authorizer is not None:
                with_ops = lambda group: ctx.authorized_operations(acls.GROUP, group, GROUP_OPS)  # noqa: E731
            return wire.consumer_group_describe_response(resp, rq.ConsumerGroupDescribeResponse(groups), with_ops)

        return self.read(ctx, describe)

    # --- ListGroups (16); DescribeGroups (15) is in _classic.py ---------------------------------

    def list_groups(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        if not self.loaded:
            return wire.list_groups_response(resp, rq.ListGroupsResponse((), Errors.COORDINATOR_LOAD_IN_PROGRESS))
        request = rq.ListGroupsRequest(tuple(getattr(body, "states_filter", ())), tuple(getattr(body, "types_filter", ())))
        everything = ctx.authorize(acls.DESCRIBE, acls.CLUSTER, acls.CLUSTER_NAME)

        def listed() -> Any:
            r = self.shard.list_groups(request)
            if not everything:  # Kafka: only the groups the principal may describe
                r = rq.ListGroupsResponse(tuple(g for g in r.groups if ctx.authorize(acls.DESCRIBE, acls.GROUP, g.group_id)),
                                          r.error_code)
            return wire.list_groups_response(resp, r)

        return self.read(ctx, listed)

    # --- DeleteGroups (42) -------------------------------------------------------------------

    def delete_groups(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        names, resp = tuple(req.body.groups_names), req.codec.response_type

        def fail(code: int, _: str) -> Any:
            return wire.delete_groups_response(resp, [(g, code) for g in names])

        if not self.loaded:
            return fail(Errors.COORDINATOR_LOAD_IN_PROGRESS, "")
        allowed = tuple(g for g in names if ctx.authorize(acls.DELETE, acls.GROUP, g))

        def answer(r: Any) -> Any:
            codes = {d.group_id: d.error_code for d in r.results} if r is not None else {}
            return wire.delete_groups_response(resp, [(g, codes.get(g, Errors.GROUP_AUTHORIZATION_FAILED)) for g in names])

        if not allowed:
            return answer(None)
        return self.write(ctx, rq.DeleteGroupsRequest(allowed), answer, fail)

    # --- OffsetCommit (8) --------------------------------------------------------------------

    def offset_commit(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, version, resp = req.body, req.version, req.codec.response_type
        request, rejected = wire.offset_commit_request(
            body, version, self.names, lambda name: ctx.authorize(acls.READ, acls.TOPIC, name))

        def answer(r: rq.OffsetCommitResponse) -> Any:
            return wire.offset_commit_response(resp, body, version, self.names, wire.commit_codes(r), rejected)

        def fail(code: int, _: str) -> Any:
            return wire.offset_commit_response(resp, body, version, self.names, {}, {
                (t.topic_id if version >= 10 else t.name, p.partition_index): code for t in body.topics for p in t.partitions})

        if not self.loaded:
            return fail(Errors.COORDINATOR_LOAD_IN_PROGRESS, "")
        if not ctx.authorize(acls.READ, acls.GROUP, body.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, "")
        if rejected and not request.topics:
            return answer(rq.OffsetCommitResponse(()))
        return self.write(ctx, request, answer, fail)

    # --- OffsetFetch (9) ---------------------------------------------------------------------

    def offset_fetch(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        version, resp = req.version, req.codec.response_type
        groups = wire.offset_fetch_groups(req.body, version, self.names)

        def names_to_ids(name: str) -> Any:
            topic = self.broker.topics.get(name)
            return None if topic is None else topic.id

        if not self.loaded:
            loading = [(ids, rq.OffsetFetchResponse(r.group_id, (), Errors.COORDINATOR_LOAD_IN_PROGRESS))
                       for r, ids in groups]
            if version < 2:  # no group-level error: every partition carries it
                r = groups[0][0]
                loading = [({}, rq.OffsetFetchResponse(r.group_id, tuple(
                    rq.FetchedTopic(t.name, tuple(rq.FetchedPartition(p, error_code=Errors.COORDINATOR_LOAD_IN_PROGRESS)
                                                  for p in t.partitions)) for t in r.topics or ())))]
            return wire.offset_fetch_response(resp, version, loading, names_to_ids)
        def fetched(r: rq.OffsetFetchRequest) -> rq.OffsetFetchResponse:
            """Kafka: DESCRIBE on the group, then on each topic (listed ones answered with
            TOPIC_AUTHORIZATION_FAILED, the rest of "all topics" left out)."""
            if not ctx.authorize(acls.DESCRIBE, acls.GROUP, r.group_id):
                if version < 2:  # no group-level error: every partition carries it
                    return rq.OffsetFetchResponse(r.group_id, tuple(
                        rq.FetchedTopic(t.name, tuple(rq.FetchedPartition(p, error_code=Errors.GROUP_AUTHORIZATION_FAILED)
                                                      for p in t.partitions)) for t in r.topics or ()))
                return rq.OffsetFetchResponse(r.group_id, (), Errors.GROUP_AUTHORIZATION_FAILED)
            out = self.shard.fetch_offsets(r)
            if ctx.server.authorizer is None:
                return out
            topics = []
            for t in out.topics:
                if ctx.authorize(acls.DESCRIBE, acls.TOPIC, t.name):
                    topics.append(t)
                elif r.topics is not None:
                    topics.append(rq.FetchedTopic(t.name, tuple(
                        rq.FetchedPartition(p.partition, error_code=Errors.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions)))
            return rq.OffsetFetchResponse(out.group_id, tuple(topics), out.error_code, out.error_message)

        return self.read(ctx, lambda: wire.offset_fetch_response(
            resp, version, [(ids, fetched(r)) for r, ids in groups], names_to_ids))

    # --- OffsetDelete (47) -------------------------------------------------------------------

    def offset_delete(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp = req.codec.response_type

        def fail(code: int, message: str) -> Any:
            return wire.offset_delete_response(resp, rq.OffsetDeleteResponse((), code, message))

        if not self.loaded:
            return fail(Errors.COORDINATOR_LOAD_IN_PROGRESS, "")
        if not ctx.authorize(acls.DELETE, acls.GROUP, req.body.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, "")
        denied = {t.name for t in req.body.topics if not ctx.authorize(acls.READ, acls.TOPIC, t.name)}
        request = wire.offset_delete_request(req.body)
        if denied:  # Kafka: READ on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions
            request = rq.OffsetDeleteRequest(request.group_id, tuple(t for t in request.topics if t.name not in denied))

        def answer(r: rq.OffsetDeleteResponse) -> Any:
            if denied:
                refused = tuple(rq.TopicResult(t.name, tuple(rq.PartitionResult(p.partition_index, Errors.TOPIC_AUTHORIZATION_FAILED)
                                                             for p in t.partitions))
                                for t in req.body.topics if t.name in denied)
                r = rq.OffsetDeleteResponse(r.topics + refused, r.error_code, r.error_message)
            return wire.offset_delete_response(resp, r)

        return self.write(ctx, request, answer, fail)


@dataclass(frozen=True)
class _Failed:
    code: int
    message: str


def _lost(completions: Any) -> list[tuple[int, _Failed]]:
    """Completions whose records were lost: their requests get NOT_COORDINATOR (clients retry)."""
    return [(rid, _Failed(Errors.NOT_COORDINATOR, "the coordinator log write failed")) for rid, _ in completions]


class GroupConfigs:
    """Dynamic group configs (DescribeConfigs / IncrementalAlterConfigs, resource type GROUP)."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    def _check(self, name: str) -> None:
        if not self.coordinator.loaded:
            raise BrokerError(Errors.COORDINATOR_LOAD_IN_PROGRESS, wire.LOADING)
        if not name or not name.strip():
            raise BrokerError(Errors.INVALID_GROUP_ID, "Group id can't be empty.")

    def describe(self, name: str) -> list[ConfigEntry]:
        self._check(name)
        c = self.coordinator
        if c._lock.locked():
            # the shard is in use on the worker thread; DescribeConfigs cannot wait, so retry
            raise BrokerError(Errors.COORDINATOR_NOT_AVAILABLE, "the group coordinator is busy; retry")
        found = c.shard.describe_group_config(rq.DescribeGroupConfigRequest(name))
        return [ConfigEntry(e.name, e.value, DEFAULT_CONFIG if e.is_default else GROUP_CONFIG,
                            documentation=GROUP_CONFIG_DOCS.get(e.name)) for e in found.configs]

    async def alter(self, name: str, ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
        self._check(name)
        configs: dict[str, str | None] = {}
        for key, op, value in ops:
            if op == SET:
                if value is None:
                    raise BrokerError(Errors.INVALID_CONFIG, f"SET of {key} needs a value")
                configs[key] = value
            elif op == DELETE:
                configs[key] = None
            elif op in (APPEND, SUBTRACT):
                raise BrokerError(Errors.INVALID_CONFIG, f"{key} is not a list config; APPEND/SUBTRACT do not apply")
            else:
                raise BrokerError(Errors.INVALID_REQUEST, f"unknown config operation {op}")
        result = await self.coordinator.write_async(rq.AlterGroupConfigRequest(name, configs, False, validate_only))
        if isinstance(result, _Failed):
            raise BrokerError(result.code, result.message)
        if result.error_code:
            raise BrokerError(result.error_code, result.error_message or ErrorCode(result.error_code).name)

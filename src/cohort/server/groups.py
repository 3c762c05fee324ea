"""The group coordinator's APIs, served from sans-IO `GroupCoordinatorShard` objects, one per
``__consumer_offsets`` partition (`offsets.topic.num.partitions`), each hosted by a
:class:`cohort.coordinator_common.runtime.CoordinatorRuntime` (durability, timers, parked requests, the
worker thread: see that module).

* **Routing**: a group's requests go to the shard Kafka's hash of its id picks
  (`partition_for`). Requests naming several groups (DeleteGroups, OffsetFetch v8+,
  DescribeGroups, ConsumerGroupDescribe) are split by shard and their answers joined, as Kafka's
  GroupCoordinatorService does; ListGroups asks every shard.
* **Loading**: each shard replays its own partition; until it has, its groups' requests are
  answered COORDINATOR_LOAD_IN_PROGRESS while the other shards serve. ListGroups answers the
  error while any shard loads.
* **Reads** (describe, list, offset fetch) see committed state only (the shard's contract).
* **Heavy work**: a heartbeat that may run an assignor on a large group runs on the server's
  worker thread while its shard's lock keeps every other access to that shard waiting.
* **Lag** (docs/lag.md): with `group.lag.source=local` the shards read log start / end offsets
  through a live view of the broker's partition logs (`BrokerLogOffsets`, read only when the lag
  assignor asks); with a directory, from the newest lag snapshot, refreshed on the worker thread
  before timers fire. Timer expiry that includes a lag evaluation runs on the worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Callable

from kio.schema.errors import ErrorCode

from cohort.assignors import registry
from cohort.broker import BrokerError
from cohort.broker.lag_snapshot import SnapshotLagProvider
from cohort import upstream
from cohort.config import REGISTRY, ConfigError, declare, upstream_client_settings
from cohort.broker.coordinator_log import OFFSETS_TOPIC
from cohort.coordinator import (
    CoordinatorConfig,
    GroupCoordinatorShard,
    MetadataImage,
    TopicImage,
    decode,
    encode,
    partition_for,
)
from cohort.coordinator import requests as rq
from cohort.coordinator import share_requests as srq
from cohort.coordinator.config import INT_MAX
from cohort.coordinator.errors import Errors
from cohort.coordinator.lag import TopicOffsets
from cohort.protocol import DecodedRequest
from cohort.protocol.extensions import INSTALL_ASSIGNMENT_KEY, PREPARE_ASSIGNMENT_KEY
from cohort.protocol.operations import GROUP_OPS
from cohort.security import acls
from cohort.server.api import Encoded
from cohort.server import _classic, overview
from cohort.coordinator_common.runtime import ConnectionOrder, CoordinatorRuntime, Failed, now_ms
from cohort.server import _group_codec as wire
from cohort.server.configs import APPEND, DEFAULT_CONFIG, DELETE, GROUP, GROUP_CONFIG, SET, SUBTRACT, ConfigEntry
from cohort.stats import Histogram

if TYPE_CHECKING:
    from cohort.server.context import RequestContext
    from cohort.server.server import Server

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

_S = "share groups"
declare("group.share.session.timeout.ms", int, 45_000, "Session timeout of share-group members: a member that sends "
        "no ShareGroupHeartbeat for this long is removed from its group. Groups may override it "
        "(`share.session.timeout.ms`) within the min/max bounds.", minimum=1, group=_S)
declare("group.share.min.session.timeout.ms", int, 45_000, "Smallest session timeout a share group may configure.",
        minimum=1, group=_S)
declare("group.share.max.session.timeout.ms", int, 60_000, "Largest session timeout a share group may configure.",
        minimum=1, group=_S)
declare("group.share.heartbeat.interval.ms", int, 5_000, "Heartbeat interval given to share-group members (below "
        "the session timeout). Groups may override it (`share.heartbeat.interval.ms`).", minimum=1, group=_S)
declare("group.share.min.heartbeat.interval.ms", int, 5_000, "Smallest heartbeat interval a share group may "
        "configure.", minimum=1, group=_S)
declare("group.share.max.heartbeat.interval.ms", int, 15_000, "Largest heartbeat interval a share group may "
        "configure.", minimum=1, group=_S)
declare("group.share.max.size", int, 200, "Most members a share group may have (GROUP_MAX_SIZE_REACHED beyond).",
        minimum=1, maximum=1000, group=_S)
declare("group.share.record.lock.duration.ms", int, 30_000, "How long a share consumer holds the records it "
        "acquired before they become available to others again. Groups may override it "
        "(`share.record.lock.duration.ms`).", minimum=1000, maximum=3_600_000, group=_S)
declare("group.share.min.record.lock.duration.ms", int, 15_000, "Smallest record lock duration a share group may "
        "configure.", minimum=1000, maximum=30_000, group=_S)
declare("group.share.max.record.lock.duration.ms", int, 60_000, "Largest record lock duration a share group may "
        "configure.", minimum=30_000, maximum=3_600_000, group=_S)
declare("group.share.delivery.count.limit", int, 5, "How many times a record may be delivered to a share group "
        "before it is archived.", minimum=2, maximum=10, group=_S)
declare("group.share.partition.max.record.locks", int, 2_000, "Most records in flight (between a share-partition's "
        "start and end offsets) per share-partition.", minimum=100, maximum=10_000, group=_S)
declare("group.share.max.share.sessions", int, 2_000, "Most share sessions this broker keeps "
        "(SHARE_SESSION_LIMIT_REACHED beyond); at least group.share.max.size.", minimum=1, group=_S)

GROUP_CONFIG_DOCS = {
    "consumer.session.timeout.ms": "The group's session timeout (overrides group.consumer.session.timeout.ms).",
    "consumer.heartbeat.interval.ms": "The group's heartbeat interval (overrides group.consumer.heartbeat.interval.ms).",
    "consumer.assignor": "The group's default server assignor when members name none (cohort only).",
    "consumer.offset.reset": "Where a partition without a committed offset starts, for the `lag` assignor's lag: "
                             "`latest` (lag 0) or `earliest` (the whole log) (cohort only).",
    "share.session.timeout.ms": "The share group's session timeout (overrides group.share.session.timeout.ms).",
    "share.heartbeat.interval.ms": "The share group's heartbeat interval (overrides "
                                   "group.share.heartbeat.interval.ms).",
    "share.record.lock.duration.ms": "How long a member of the share group holds acquired records (overrides "
                                     "group.share.record.lock.duration.ms).",
    "share.auto.offset.reset": "Where a share group starts on a partition it has no state for: `latest`, "
                               "`earliest` or `by_duration:<ISO-8601 duration>`.",
    "share.isolation.level": "`read_uncommitted` or `read_committed`: whether share consumers see records of "
                             "open and aborted transactions.",
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


class BrokerLogOffsets(Mapping):
    """The broker's log start / end offsets by topic id, read when the shard asks (a live view:
    nothing is copied until a group's lag is computed, and the values are always current). The
    end is the last stable offset: records of an open transaction are not yet consumable by a
    read_committed consumer, so they are not lag yet (without open transactions it is the end)."""

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
            ends.append(0 if log is None else log.last_stable_offset(log.end_offset))
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


def install(server: "Server") -> None:
    coordinator = GroupCoordinator(server)
    server.group_coordinator = coordinator  # type: ignore[attr-defined]
    reg = server.apis.register
    reg(68, coordinator.consumer_group_heartbeat, min_version=0, max_version=1)
    reg(69, coordinator.consumer_group_describe, min_version=0, max_version=1)
    reg(76, coordinator.share_group_heartbeat, min_version=1, max_version=1)
    reg(77, coordinator.share_group_describe, min_version=1, max_version=1)
    reg(PREPARE_ASSIGNMENT_KEY, coordinator.prepare_assignment, min_version=0, max_version=0)
    reg(INSTALL_ASSIGNMENT_KEY, coordinator.install_assignment, min_version=0, max_version=0)
    reg(8, coordinator.offset_commit, min_version=2, max_version=10)
    reg(9, coordinator.offset_fetch, min_version=1, max_version=10)
    reg(16, coordinator.list_groups, min_version=0, max_version=5)
    reg(42, coordinator.delete_groups, min_version=0, max_version=2)
    reg(47, coordinator.offset_delete, min_version=0, max_version=0)
    server.config_resources[GROUP] = GroupConfigs(coordinator)
    server.startup_hooks.append(coordinator.load)

    coordinator.topic_source.topic_listeners.append(coordinator.topics_changed)
    server.shutdown_hooks.append(coordinator.unload)
    _classic.install(server, coordinator)


UPSTREAM_RETRY_S = 2  # pause between attempts to reach an upstream that did not answer
# Shards of a cohort cluster unless offsets.topic.num.partitions is set (Kafka's default is 50).
# Each shard costs an instance a transactional producer on the upstream and a load when it moves;
# 12 splits evenly over 1, 2, 3, 4 and 6 instances and within one shard over 5, and a handful of
# instances is what one upstream's group coordinator tier needs.
UPSTREAM_SHARDS = 12
PLACEMENT_CACHE = 100_000  # group ids whose shard is remembered (cleared when full: ids are client input)


class GroupCoordinator:
    """The group coordinator's shards (one per `__consumer_offsets` partition), each hosted by a
    `CoordinatorRuntime`, and the routing of every group API to them: a group's requests go to
    the shard Kafka's hash of its id picks (`partition_for`); requests naming several groups are
    split by shard and their answers joined; ListGroups asks every shard. A shard that is loading
    answers COORDINATOR_LOAD_IN_PROGRESS while the others serve."""

    def __init__(self, server: "Server") -> None:
        self.server = server
        self.broker = server.broker
        self.log = server.broker.coordinator_log  # partition 0's; its histograms cover every shard
        # Where topics are known: this broker's, or the upstream's when cohort forwards to one.
        self.topic_source = server.topic_source
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
        if self.config.lag_source != "local":
            self.snapshots = SnapshotLagProvider(self.config.lag_source, self._topic_name)
        self._snapshot_checked: int | None = None
        self.loaded = False  # every shard loaded (readiness); each runtime says so for its own shard
        self.order = ConnectionOrder()
        self.runtimes: list[CoordinatorRuntime] = []
        logs: list = list(self.broker.coordinator_logs)
        self.upstream: dict | None = None  # the upstream client's settings when the records live there
        if server.config["upstream.bootstrap.servers"]:
            self.upstream = upstream_client_settings(server.config)
            # The shards' topic on the upstream decides their number once it exists (`load`).
            logs = self._upstream_logs(server.config["offsets.topic.num.partitions"]
                                       if server.config.is_set("offsets.topic.num.partitions") else UPSTREAM_SHARDS)
        # Shared: the instances of a cohort cluster split the shards through the upstream's group
        # membership (`cohort.upstream.membership`); a shard is served once assigned here.
        self.shared = bool(self.upstream) and server.config["upstream.forward"] and server.config["upstream.membership"]
        self.membership: Any = None  # the proxy's `Membership`, once this instance joined its cluster
        self.topic_ready = asyncio.Event()  # the shards' upstream topic exists
        self.closing = False  # the server is stopping
        self._taking: dict[int, asyncio.Task] = {}  # shard -> its load after being assigned here
        self._handing_over: dict[int, asyncio.Event] = {}  # shard -> set once its hand-over is over
        self._assignors = assignors
        self._build(logs)
        self.names = wire.TopicNames(self.topic_source.topic_by_id, self.topic_source.topics.get)
        # Called with the ids of groups DeleteGroups deleted, before it answers (share state).
        self.deleted_hooks: list[Callable[[list[str]], Any]] = []
        # In front of an upstream, told when a shard starts (`taken(p)`) and stops (`given_up(p)`)
        # being served here: what lives with a group (its share-partitions' state) follows it.
        self.shard_hooks: list[Any] = []

    def _upstream_logs(self, shards: int) -> list:
        config = self.server.config
        return upstream.group_logs(self.upstream, config["upstream.groups.topic"], config["upstream.cluster.name"],
                                   shards, config["upstream.request.timeout.ms"] / 1000)

    def _build(self, logs: list) -> None:
        """One runtime per shard log (again when the upstream topic has another count: nothing
        is served from the first ones, `load` decides before any shard is)."""
        server = self.server
        self.runtimes = []
        for p, clog in enumerate(logs):
            shard = self._new_shard()
            self.runtimes.append(CoordinatorRuntime(
                f"{OFFSETS_TOPIC}-{p}", shard, clog, encode=encode, decode=decode,
                offload=lambda fn, *args: server.offload(fn, *args),  # looked up per call (tests wrap it)
                order=self.order, loading_message=wire.LOADING,
                prepare=lambda p=p: self._refresh_metadata(p),
                on_records=self._observe, on_revert=self.changes.everything,
                needs_offload=lambda req, p=p: self._needs_offload(p, req),
                heavy_expiry=lambda now, p=p: self.runtimes[p].shard.lag_evaluation_due(now),
                before_expiry=self._refresh_snapshot, timer_period=self._snapshot_period,
                on_lost=lambda reason, fenced, p=p: self._lost(p, fenced)))
        self.shards = [r.shard for r in self.runtimes]
        for r in self.runtimes:
            r.owned = not self.shared
        self._index = {id(r): p for p, r in enumerate(self.runtimes)}  # runtime -> its partition
        self._placed: dict[str, CoordinatorRuntime] = {}  # group id -> its shard's runtime (a cache)
        self._stale = set(range(len(self.runtimes)))  # shards whose topic image is out of date
        self._image: tuple[int, MetadataImage] | None = None  # (broker topic version, image) last built
        self._hb = {}  # version -> HeartbeatEncoder

    def _new_shard(self) -> GroupCoordinatorShard:
        if self.snapshots is None:
            shard = GroupCoordinatorShard(self.config, assignors=self._assignors)
            shard.update_log_offsets(BrokerLogOffsets(self.topic_source))
            return shard
        return GroupCoordinatorShard(self.config, lag_provider=self.snapshots, assignors=self._assignors)

    def _lost(self, p: int, fenced: bool) -> None:
        """A shard stopped being served. Taken over (fenced): it stays with its new owner. Lost
        to a failure of its log (an upstream outage, a foreign write): loaded again, fresh, once
        the log can be read, as Kafka reloads a failed shard."""
        if not fenced:
            self.server.spawn(self._reload(p))
        else:
            self.server.spawn(self._shard_given_up(p))

    async def _shard_taken(self, p: int) -> None:
        for hook in self.shard_hooks:
            await hook.taken(p)

    async def _shard_given_up(self, p: int) -> None:
        for hook in self.shard_hooks:
            await hook.given_up(p)

    async def _reload(self, p: int) -> None:
        runtime = self.runtimes[p]
        await asyncio.sleep(UPSTREAM_RETRY_S)
        if not runtime.owned or runtime.loaded:  # handed over, or taken again, meanwhile
            return
        runtime.reset(self._new_shard())  # a failed load replays nothing, so one fresh shard does
        self.shards[p] = runtime.shard
        self._stale.add(p)
        await self._load_retrying(runtime)
        log.info("%s: loaded again after its log failed", runtime.name)
        self.changes.everything()
        self.server.spawn(runtime.timer_loop())
        await self._shard_taken(p)

    # --- placement ---------------------------------------------------------------------------

    @property
    def shard(self) -> GroupCoordinatorShard:
        """The one shard (tests and tools of a single-partition coordinator); see `runtime_for`."""
        if len(self.shards) != 1:
            raise AttributeError("the group coordinator has several shards: use runtime_for(group_id)")
        return self.shards[0]

    def runtime_for(self, group_id: str) -> CoordinatorRuntime:
        runtimes = self.runtimes
        if len(runtimes) == 1:
            return runtimes[0]
        placed = self._placed.get(group_id)
        if placed is None:  # Java's String.hashCode in Python costs microseconds: once per group id
            if len(self._placed) >= PLACEMENT_CACHE:
                self._placed.clear()
            placed = self._placed[group_id] = runtimes[partition_for(group_id, len(runtimes))]
        return placed

    def partition_of(self, runtime: CoordinatorRuntime) -> int:
        """The `__consumer_offsets` partition a runtime's shard owns."""
        return self._index[id(runtime)]

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        return self.runtime_for(group_id).shard

    def serving(self, group_id: str) -> bool:
        """The group's shard is served from here (else: `unserved`)."""
        return self.runtime_for(group_id).loaded

    def unserved(self, group_id: str) -> tuple[int, str]:
        """(error code, message) for a group whose shard is not served here: loading, or another instance's."""
        return self.runtime_for(group_id).unserved

    def by_runtime(self, group_ids: Any) -> dict[CoordinatorRuntime, list[str]]:
        """Group ids by the runtime of their shard, in shard order (ids keep their order)."""
        out: dict[CoordinatorRuntime, list[str]] = {}
        for gid in group_ids:
            out.setdefault(self.runtime_for(gid), []).append(gid)
        return dict(sorted(out.items(), key=lambda item: self._index[id(item[0])]))

    # --- lifecycle ---------------------------------------------------------------------------

    async def load(self) -> None:
        """Replay every shard's log (concurrently: one slow shard does not hold the others up)."""
        started = time.monotonic()

        async def one(runtime: CoordinatorRuntime) -> tuple[int, int]:
            counts = await self._load_retrying(runtime) if self.upstream else await runtime.load()
            self.server.spawn(runtime.timer_loop())
            if self.upstream:
                self.server.spawn(self._shard_taken(self.partition_of(runtime)))
            return counts

        if self.upstream is not None:
            if not await self._upstream_topic():
                return
            self.topic_ready.set()
            if self.shared:
                return  # each shard loads once the cohort cluster assigns it here (`acquire`)

        totals = await asyncio.gather(*(one(r) for r in self.runtimes))
        await self._refresh_snapshot(now_ms())
        self.changes.everything()  # readers that subscribed before the replay read it all
        self.loaded = True
        consumer = sum(len(s.state.groups) for s in self.shards)
        classic = sum(len(s.state.classic_groups) for s in self.shards)
        offsets_only = sum(len(set(s.state.offsets) - set(s.state.groups) - set(s.state.classic_groups))
                           for s in self.shards)
        log.info("group coordinator loaded %d records (%d skipped) in %.2f s over %d shard(s); %d groups: "
                 "%d consumer, %d classic, %d with committed offsets only",
                 sum(c for c, _ in totals), sum(s for _, s in totals), time.monotonic() - started,
                 len(self.runtimes), consumer + classic + offsets_only, consumer, classic, offsets_only)

    async def acquire(self, shards: list[int]) -> None:
        """Shared: the cohort cluster assigned these shards here. Each is loaded (its upstream
        log fences the previous owner first) and served; returns once all are."""
        tasks = []
        for p in shards:
            self.runtimes[p].owned = True
            task = self._taking.get(p)
            if task is None or task.done():
                task = self._taking[p] = self.server.spawn(self._take(p))
            tasks.append(task)
        await asyncio.gather(*tasks, return_exceptions=True)
        self.loaded = True  # ready: this instance serves what it was given
        self.changes.everything()

    async def _take(self, p: int) -> None:
        runtime = self.runtimes[p]
        handing_over = self._handing_over.get(p)
        if handing_over is not None:  # given back and assigned here again: the hand-over ends first
            await handing_over.wait()
        if runtime.loaded:
            return
        if runtime.lost:  # fenced while it was here before: start afresh
            runtime.reset(self._new_shard())
            self.shards[p] = runtime.shard
        self._stale.add(p)
        started = time.monotonic()
        count, _ = await self._load_retrying(runtime)
        log.info("%s: served from here (%d records loaded in %.2f s)", runtime.name, count, time.monotonic() - started)
        self.server.spawn(runtime.timer_loop())
        await self._shard_taken(p)

    async def release(self, shards: list[int]) -> None:
        """Shared: these shards go to another instance. Each stops being served here (requests
        get NOT_COORDINATOR) and its appends in flight finish before this returns."""
        loading = [t for t in (self._taking.pop(p, None) for p in shards) if t is not None and not t.done()]
        for task in loading:
            task.cancel()
        # First every shard stops being served, then their logs are let go: a log may take the
        # upstream's timeout to close (an upstream that went away), and no shard may be served
        # from here meanwhile.
        await asyncio.gather(*(self.runtimes[p].stop_serving() for p in shards))
        await asyncio.gather(*loading, return_exceptions=True)

        async def hand_over(p: int) -> None:
            runtime = self.runtimes[p]
            done = self._handing_over[p] = asyncio.Event()
            try:
                await self._shard_given_up(p)
                await runtime.hand_over(self._new_shard())
                self.shards[p] = runtime.shard
                self._stale.add(p)
                log.info("%s: handed over", runtime.name)
            finally:
                del self._handing_over[p]
                done.set()

        await asyncio.gather(*(hand_over(p) for p in shards))
        self.changes.everything()

    async def unload(self) -> None:
        """Shutdown hook: parked requests are answered NOT_COORDINATOR (Kafka's onUnloaded);
        upstream logs finish their appends in flight and let their clients go. A shared instance
        leaves its cohort cluster first, handing every shard over."""
        self.closing = True  # a membership not yet started never will be
        if self.membership is not None:
            await self.membership.stop()
        self.loaded = False
        for runtime in self.runtimes:
            runtime.unload()
        if self.upstream is not None:
            await asyncio.gather(*(r.log.close() for r in self.runtimes), return_exceptions=True)

    async def _upstream_topic(self) -> bool:
        """The upstream topic of the shards exists, compacted, with one partition per shard;
        retried until the upstream answers (the groups answer COORDINATOR_LOAD_IN_PROGRESS).
        An existing topic decides the shard count, unless this instance was given another one:
        then it refuses to serve (False), as its groups would live in other shards than the
        other instances say."""
        config = self.server.config
        topic = config["upstream.groups.topic"]
        while True:
            try:
                created, count = await asyncio.get_running_loop().run_in_executor(
                    None, upstream.ensure_topic, self.upstream, topic, len(self.runtimes),
                    config["upstream.groups.replication.factor"], config["upstream.request.timeout.ms"] / 1000)
                break
            except upstream.UpstreamLogError as exc:
                log.error("%s; retrying in %d s", exc, UPSTREAM_RETRY_S)
                await asyncio.sleep(UPSTREAM_RETRY_S)
        if count != len(self.runtimes):
            if config.is_set("offsets.topic.num.partitions"):
                self.server.fail(f"offsets.topic.num.partitions is {len(self.runtimes)} but the cohort cluster's "
                                 f"shards are the {count} partitions of {topic} on the upstream: set it to {count} "
                                 "on every instance, or leave it unset")
                return False
            self._build(self._upstream_logs(count))
        log.info("group coordinator records on upstream %s, topic %s (%s, %d shards)",
                 self.upstream["bootstrap.servers"], topic, "created" if created else "found", count)
        return True

    async def _load_retrying(self, runtime: CoordinatorRuntime) -> tuple[int, int]:
        """Load a shard from the upstream, again after a pause while the upstream cannot serve it."""
        while True:
            try:
                return await runtime.load()
            except OSError as exc:
                log.error("%s: cannot load from the upstream: %s; retrying in %d s", runtime.name, exc, UPSTREAM_RETRY_S)
                await asyncio.sleep(UPSTREAM_RETRY_S)

    def _observe(self, records: list) -> None:
        self.timeline.observe(records, now_ms())
        self.changes.observe(records)

    def _snapshot_period(self) -> float | None:
        """With lag snapshots, look for a newer one at least once per evaluation interval."""
        return None if self.snapshots is None else self.config.lag_rebalance_interval_ms / 1000

    # --- views for /metrics and the dashboard (read on the event loop) -----------------------

    def groups(self, only: str | None = None) -> list[overview.GroupView]:
        """What the shards hold now."""
        self._refresh_all()
        if only is not None:
            return overview.group_views(self.shard_for(only), self._topic_name, only)
        return self._merged([overview.group_views(s, self._topic_name) for s in self.shards])

    def group_lags(self, only: Any = None) -> list[overview.GroupLag]:
        """The cheap per-group summary /metrics renders, of every group or of `only`."""
        self._refresh_all()
        if len(self.shards) == 1:
            return overview.group_lags(self.shards[0], self._topic_name, only)
        if only is None:
            return self._merged([overview.group_lags(s, self._topic_name) for s in self.shards])
        found = {g.group_id: g for runtime, ids in self.by_runtime(only).items()
                 for g in overview.group_lags(runtime.shard, self._topic_name, ids)}
        return [found[gid] for gid in only if gid in found]

    def group_ids(self) -> list[str]:
        if len(self.shards) == 1:
            return overview.group_ids(self.shards[0])
        return sorted(gid for s in self.shards for gid in overview.group_ids(s))

    def committed_offsets(self, group_ids: Any) -> list[Any]:
        if len(self.shards) == 1:
            return overview.committed_offsets(self.shards[0], group_ids)
        shard_for = self.shard_for
        return [shard_for(gid).state.offsets.get(gid) for gid in group_ids]

    def live_classic(self) -> dict[str, tuple]:
        """What changes in memory of each classic group with members (see `overview.live_classic`)."""
        out: dict[str, tuple] = {}
        for s in self.shards:
            out.update(overview.live_classic(s))
        return out

    def lag_balance(self) -> dict[str, Any]:
        """Each lag-assigned group's evaluation state (soft state of its shard)."""
        out: dict[str, Any] = {}
        for s in self.shards:
            out.update(s.lag_balance)
        return out

    @staticmethod
    def _merged(parts: list[list]) -> list:
        return parts[0] if len(parts) == 1 else sorted((g for part in parts for g in part), key=lambda g: g.group_id)

    def _refresh_all(self) -> None:
        for index in sorted(self._stale):
            self._refresh_metadata(index)

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        try:
            topic = self.topic_source.topic_by_id(topic_id)
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
        self._stale.update(range(len(self.runtimes)))  # applied before each shard's next access
        self.changes.everything()  # topic names in /metrics labels

    def _refresh_metadata(self, index: int) -> None:
        if index not in self._stale:
            return
        self._stale.discard(index)
        snap = self.topic_source.metadata_snapshot()
        if self._image is None or self._image[0] != snap.version:  # one image shared by every shard
            self._image = (snap.version, MetadataImage.of(
                (TopicImage(t.name, t.topic_id, t.num_partitions) for t in snap.topics.values() if not t.internal),
                snap.version))
        self.shards[index].update_metadata(self._image[1])

    def _needs_offload(self, index: int, req: Any) -> bool:
        """A heartbeat that may compute a target assignment for a large group."""
        if type(req) is not rq.ConsumerGroupHeartbeatRequest:
            return False
        group = self.shards[index].state.groups.get(req.group_id)
        if group is None or len(group.members) < self.offload_min_members:
            return False
        return (req.member_epoch <= 0 or req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None
                or group.group_epoch > group.assignment_epoch or group.refresh_metadata or index in self._stale)

    # --- running requests on the shards --------------------------------------------------------

    def write(self, ctx: Any, req: Any, answer: Callable[[Any], Any], fail: Callable[[int, str], Any]) -> Any:
        """A write of one group, on its shard: the answer now, or a future resolving to it."""
        return self.runtime_for(req.group_id).write(ctx, req, answer, fail)

    async def write_async(self, req: Any) -> Any:
        """A write from a caller that is not a request handler (group configs)."""
        return await self.runtime_for(req.group_id).write_async(req)

    def read(self, ctx: Any, group_ids: Any, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (a read of committed state) once the shards of these groups (None: every
        shard) are free: now if they are, else in the connection's order, holding their locks
        (taken in shard order)."""
        return self.read_on(ctx, self.runtimes if group_ids is None else list(self.by_runtime(group_ids)), fn)

    def read_on(self, ctx: Any, runtimes: list[CoordinatorRuntime], fn: Callable[[], Any]) -> Any:
        """`read` on these shards."""
        if len(runtimes) == 1:
            return runtimes[0].read(ctx, fn)
        if not any(r.lock.locked() for r in runtimes) and self.order.idle(ctx):
            return fn()

        async def waiting() -> Any:
            async with contextlib.AsyncExitStack() as stack:
                for r in runtimes:
                    await stack.enter_async_context(r.lock)
                return fn()

        return self.order.later(ctx, waiting())

    # --- ConsumerGroupHeartbeat (68) ---------------------------------------------------------

    def consumer_group_heartbeat(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp_type = req.codec.response_type
        encoder = self._hb.get(req.version)
        if encoder is None:
            encoder = self._hb[req.version] = wire.HeartbeatEncoder(resp_type)
        runtime = self.runtime_for(req.body.group_id)
        if not runtime.loaded:
            return wire.heartbeat_error(resp_type, *runtime.unserved)
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
        return runtime.write(ctx, request, encoder, lambda code, msg: wire.heartbeat_error(resp_type, code, msg))

    # --- ShareGroupHeartbeat (76), ShareGroupDescribe (77): KIP-932 ------------------------------

    def share_group_heartbeat(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type

        def fail(code: int, message: str | None) -> Any:
            return wire.share_heartbeat_error(resp, code, message)

        # Kafka's order: READ on the group, the member id, DESCRIBE on every subscribed topic,
        # then the coordinator.
        if not ctx.authorize(acls.READ, acls.GROUP, body.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, None)
        if not body.member_id or len(body.member_id) > 36:
            return fail(Errors.INVALID_REQUEST, "Invalid member id in the request.")
        if any(not ctx.authorize(acls.DESCRIBE, acls.TOPIC, t) for t in body.subscribed_topic_names or ()):
            return fail(Errors.TOPIC_AUTHORIZATION_FAILED, None)
        runtime = self.runtime_for(body.group_id)
        if not runtime.loaded:
            return fail(*runtime.unserved)
        request = wire.share_heartbeat_request(body, req.client_id or "", wire.client_host(ctx.peer))
        return runtime.write(ctx, request, lambda r: wire.share_heartbeat_response(resp, r), fail)

    def share_group_describe(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        ids = tuple(body.group_ids)
        if not any(self.serving(g) for g in ids) and ids:
            return wire.share_group_describe_error(resp, ids, *self.unserved(ids[0]))
        allowed = tuple(g for g in ids if ctx.authorize(acls.DESCRIBE, acls.GROUP, g))

        def describe() -> Any:
            found: dict[str, Any] = {}
            for runtime, group_ids in self.by_runtime(allowed).items():
                if not runtime.loaded:
                    found.update((g, srq.DescribedShareGroup(g, *runtime.unserved)) for g in group_ids)
                    continue
                answer = runtime.shard.describe_share_groups(srq.ShareGroupDescribeRequest(tuple(group_ids)))
                found.update((g.group_id, g) for g in answer.groups)
            groups = []
            for g in ids:
                described = found.get(g) or srq.DescribedShareGroup(g, Errors.GROUP_AUTHORIZATION_FAILED)
                # Kafka: a group with a member subscribed to a topic the principal may not describe
                if described.error_code == 0 and ctx.server.authorizer is not None and any(
                        not ctx.authorize(acls.DESCRIBE, acls.TOPIC, t)
                        for m in described.members for t in m.subscribed_topic_names):
                    described = srq.DescribedShareGroup(g, Errors.TOPIC_AUTHORIZATION_FAILED,
                                                        "The group has described topic(s) that the client is not "
                                                        "authorized to describe.")
                groups.append(described)
            with_ops: Any = body.include_authorized_operations
            if with_ops and ctx.server.authorizer is not None:
                with_ops = lambda group: ctx.authorized_operations(acls.GROUP, group, GROUP_OPS)  # noqa: E731
            return wire.share_group_describe_response(resp, srq.ShareGroupDescribeResponse(tuple(groups)), with_ops)

        return self.read(ctx, allowed, describe)

    # --- ConsumerGroupPrepareAssignment / InstallAssignment (cohort's 1000 / 1001) -------------

    def prepare_assignment(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp = req.codec.response_type
        return self._client_assignment(ctx, req, wire.prepare_request(req.body),
                                       lambda r: wire.prepare_response(resp, r),
                                       lambda code, msg: wire.prepare_error(resp, code, msg))

    def install_assignment(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp = req.codec.response_type
        return self._client_assignment(ctx, req, wire.install_request(req.body),
                                       lambda r: wire.install_response(resp, r),
                                       lambda code, msg: wire.install_error(resp, code, msg))

    def _client_assignment(self, ctx: "RequestContext", req: DecodedRequest, request: Any,
                           answer: Callable[[Any], Any], fail: Callable[[int, str | None], Any]) -> Any:
        """READ on the group, as for the heartbeats of the member that sends these."""
        runtime = self.runtime_for(request.group_id)
        if not runtime.loaded:
            return fail(*runtime.unserved)
        if ctx.server.authorizer is not None and not ctx.authorize(acls.READ, acls.GROUP, request.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, None)
        return runtime.write(ctx, request, answer, fail)

    # --- ConsumerGroupDescribe (69) ----------------------------------------------------------

    def consumer_group_describe(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        ids = tuple(body.group_ids)
        if not any(self.serving(g) for g in ids) and ids:
            return wire.consumer_group_describe_error(resp, ids, *self.unserved(ids[0]))
        allowed = tuple(g for g in ids if ctx.authorize(acls.DESCRIBE, acls.GROUP, g))

        def describe() -> Any:
            found = {}
            for runtime, group_ids in self.by_runtime(allowed).items():
                if not runtime.loaded:
                    found.update((g, rq.DescribedGroup(g, *runtime.unserved)) for g in group_ids)
                    continue
                request = rq.ConsumerGroupDescribeRequest(tuple(group_ids), body.include_authorized_operations)
                found.update((g.group_id, g) for g in runtime.shard.describe_groups(request).groups)
            groups = tuple(found.get(g) or rq.DescribedGroup(g, Errors.GROUP_AUTHORIZATION_FAILED) for g in ids)
            with_ops: Any = body.include_authorized_operations
            if with_ops and ctx.server.authorizer is not None:
                with_ops = lambda group: ctx.authorized_operations(acls.GROUP, group, GROUP_OPS)  # noqa: E731
            return wire.consumer_group_describe_response(resp, rq.ConsumerGroupDescribeResponse(groups), with_ops)

        return self.read(ctx, allowed, describe)

    # --- ListGroups (16); DescribeGroups (15) is in _classic.py ---------------------------------

    def list_groups(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        # Kafka: the shards this coordinator owns; one still loading makes the answer's error
        owned = [r for r in self.runtimes if r.owned]
        if not all(r.loaded for r in owned):
            return wire.list_groups_response(resp, rq.ListGroupsResponse((), Errors.COORDINATOR_LOAD_IN_PROGRESS))
        request = rq.ListGroupsRequest(tuple(getattr(body, "states_filter", ())), tuple(getattr(body, "types_filter", ())))
        everything = ctx.authorize(acls.DESCRIBE, acls.CLUSTER, acls.CLUSTER_NAME)

        def listed() -> Any:
            parts = [r.shard.list_groups(request) for r in owned] or [rq.ListGroupsResponse(())]
            r = parts[0] if len(parts) == 1 else rq.ListGroupsResponse(
                tuple(sorted((g for part in parts for g in part.groups), key=lambda g: g.group_id)))
            if not everything:  # Kafka: only the groups the principal may describe
                r = rq.ListGroupsResponse(tuple(g for g in r.groups if ctx.authorize(acls.DESCRIBE, acls.GROUP, g.group_id)),
                                          r.error_code)
            return wire.list_groups_response(resp, r)

        return self.read_on(ctx, owned, listed)

    # --- DeleteGroups (42) -------------------------------------------------------------------

    def delete_groups(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        names, resp = tuple(req.body.groups_names), req.codec.response_type

        def fail(code: int, _: str) -> Any:
            return wire.delete_groups_response(resp, [(g, code) for g in names])

        if names and not any(self.serving(g) for g in names):
            return fail(*self.unserved(names[0]))
        allowed = tuple(g for g in names if ctx.authorize(acls.DELETE, acls.GROUP, g))

        def answer(r: Any) -> Any:
            codes = {d.group_id: d.error_code for d in r.results} if r is not None else {}
            return wire.delete_groups_response(resp, [(g, codes.get(g, Errors.GROUP_AUTHORIZATION_FAILED)) for g in names])

        if not allowed:
            return answer(None)
        parts = self.by_runtime(allowed)
        if len(parts) == 1 and not self.deleted_hooks:
            return next(iter(parts)).write(ctx, rq.DeleteGroupsRequest(allowed), answer, fail)

        async def each_shard() -> Any:  # Kafka: one write per shard, the results joined
            results = await asyncio.gather(*(runtime.write_async(rq.DeleteGroupsRequest(tuple(ids)))
                                             for runtime, ids in parts.items()))
            joined: list[rq.DeletedGroup] = []
            for (_, ids), r in zip(parts.items(), results):
                if isinstance(r, Failed):
                    joined.extend(rq.DeletedGroup(g, r.code, r.message) for g in ids)
                else:
                    joined.extend(r.results)
            deleted = [d.group_id for d in joined if d.error_code == 0]
            for hook in self.deleted_hooks:  # what other rooms keep of a group goes with it
                await hook(deleted)
            return answer(rq.DeleteGroupsResponse(tuple(joined)))

        return self.order.later(ctx, each_shard())

    # --- OffsetCommit (8) --------------------------------------------------------------------

    def offset_commit(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, version, resp = req.body, req.version, req.codec.response_type
        request, rejected = wire.offset_commit_request(
            body, version, self.names, lambda name: ctx.authorize(acls.READ, acls.TOPIC, name))

        def answer(r: rq.OffsetCommitResponse) -> Any:
            codes = wire.commit_codes(r)
            frame = wire.offset_commit_frame(req.correlation_id, body, version, codes, rejected)
            if frame is not None:
                return Encoded(frame)
            return wire.offset_commit_response(resp, body, version, self.names, codes, rejected)

        def fail(code: int, _: str) -> Any:
            return wire.offset_commit_response(resp, body, version, self.names, {}, {
                (t.topic_id if version >= 10 else t.name, p.partition_index): code for t in body.topics for p in t.partitions})

        runtime = self.runtime_for(body.group_id)
        if not runtime.loaded:
            return fail(*runtime.unserved)
        if not ctx.authorize(acls.READ, acls.GROUP, body.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, "")
        if rejected and not request.topics:
            return answer(rq.OffsetCommitResponse(()))
        return runtime.write(ctx, request, answer, fail)

    # --- OffsetFetch (9) ---------------------------------------------------------------------

    def offset_fetch(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        version, resp = req.version, req.codec.response_type
        groups = wire.offset_fetch_groups(req.body, version, self.names)

        def names_to_ids(name: str) -> Any:
            topic = self.topic_source.topics.get(name)
            return None if topic is None else topic.id

        if not any(self.serving(r.group_id) for r, _ in groups):
            loading = [(ids, rq.OffsetFetchResponse(r.group_id, (), self.unserved(r.group_id)[0]))
                       for r, ids in groups]
            if version < 2:  # no group-level error: every partition carries it
                r = groups[0][0]
                loading = [({}, rq.OffsetFetchResponse(r.group_id, tuple(
                    rq.FetchedTopic(t.name, tuple(rq.FetchedPartition(p, error_code=self.unserved(r.group_id)[0])
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
            runtime = self.runtime_for(r.group_id)
            if not runtime.loaded:  # another group's shard is serving; this one is not (yet)
                return rq.OffsetFetchResponse(r.group_id, (), runtime.unserved[0])
            out = runtime.shard.fetch_offsets(r)
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

        def answer(results: list) -> Any:
            return wire.offset_fetch_response(resp, version, results, names_to_ids)

        group_ids = [r.group_id for r, _ in groups]
        if not any(r.require_stable for r, _ in groups):
            return self.read(ctx, group_ids, lambda: answer([(ids, fetched(r)) for r, ids in groups]))
        # RequireStable: read the latest state and answer once the writes before the read are
        # durable (Kafka runs this fetch as a write operation), so that a COMMIT marker already
        # applied but not yet fsynced is neither missed nor shown before it is durable.
        in_flight: dict[str, asyncio.Future] = {}

        def read_latest() -> list:
            for gid in group_ids:
                fut = self.runtime_for(gid).writes_in_flight()
                if fut is not None:
                    in_flight[gid] = fut
            return [(ids, fetched(r)) for r, ids in groups]

        read = self.read(ctx, group_ids, read_latest)
        if not asyncio.isfuture(read) and not in_flight:
            return answer(read)

        async def when_durable() -> Any:
            results = await read if asyncio.isfuture(read) else read
            lost = {gid for gid, fut in in_flight.items() if not await asyncio.shield(fut)}
            return answer([(ids, rq.OffsetFetchResponse(out.group_id, (), Errors.NOT_COORDINATOR,
                                                        "the coordinator log write failed"))
                           if out.group_id in lost else (ids, out) for ids, out in results])

        return self.order.track(ctx, asyncio.ensure_future(when_durable()))

    # --- OffsetDelete (47) -------------------------------------------------------------------

    def offset_delete(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp = req.codec.response_type

        def fail(code: int, message: str) -> Any:
            return wire.offset_delete_response(resp, rq.OffsetDeleteResponse((), code, message))

        if not self.serving(req.body.group_id):
            return fail(*self.unserved(req.body.group_id))
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


class GroupConfigs:
    """Dynamic group configs (DescribeConfigs / IncrementalAlterConfigs, resource type GROUP)."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    def _check(self, name: str) -> None:
        if not self.coordinator.serving(name):
            raise BrokerError(*self.coordinator.unserved(name))
        if not name or not name.strip():
            raise BrokerError(Errors.INVALID_GROUP_ID, "Group id can't be empty.")

    def describe(self, name: str) -> list[ConfigEntry]:
        self._check(name)
        runtime = self.coordinator.runtime_for(name)
        if runtime.lock.locked():
            # the shard is in use on the worker thread; DescribeConfigs cannot wait, so retry
            raise BrokerError(Errors.COORDINATOR_NOT_AVAILABLE, "the group coordinator is busy; retry")
        found = runtime.shard.describe_group_config(rq.DescribeGroupConfigRequest(name))
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
        if isinstance(result, Failed):
            raise BrokerError(result.code, result.message)
        if result.error_code:
            raise BrokerError(result.error_code, result.error_message or ErrorCode(result.error_code).name)

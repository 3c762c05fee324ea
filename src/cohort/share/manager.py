"""Share groups' data side on the broker (Kafka's SharePartitionManager and share coordinator
service): ShareFetch (78) and ShareAcknowledge (79), the share sessions, the share-partitions in
memory, their lock timers, and the share coordinator's shards over `__share_group_state`.

* **Share-partitions** (`cohort.share.partition`) are created on first use from their durable
  state (the share coordinator's committed snapshot). A share-partition never fetched before
  gets its start offset from the group's `share.auto.offset.reset` (latest, earliest,
  by_duration), made durable before anything is delivered from it.
* **Acknowledgements** (in a ShareFetch or a ShareAcknowledge) are answered once the state they
  produce is durable: an ACCEPTed or REJECTed record is never delivered again, even after a
  kill -9. Writes of many requests share one fsync (the runtime's group commit).
* **Fetching** acquires records for the member from every partition of its share session, up
  to MaxRecords (soft: whole batches) and MaxBytes, waiting up to MaxWaitMs for MinBytes; it is
  woken by appends, by releases and by lock timeouts.
* **Releases**: closing a session (epoch -1) or its connection releases what the member holds;
  lock timeouts release records not acknowledged in time. Both are written behind: losing them
  makes records available again, which at-least-once delivery allows.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import heapq
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cohort.broker.coordinator_log import SHARE_STATE_TOPIC
from cohort.coordinator import partition_for
from cohort.coordinator.config import share_reset_ms
from cohort.coordinator.share_requests import AlterSharePartitions
from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, nested
from cohort.protocol.records import CONTROL_FLAG, iter_batches
from cohort.security import acls
from cohort.coordinator_common.runtime import CoordinatorRuntime, Failed, now_ms
from cohort.broker.waiters import AppendWaiters
from cohort.share import state as share_state
from cohort.share.partition import AckError, SharePartition, StateBatch, Transition
from cohort.share.records import EARLIEST, LATEST, LocalShareRecords
from cohort.share.sessions import SessionError, ShareSession, ShareSessions

if TYPE_CHECKING:
    from cohort.server.context import RequestContext
    from cohort.server.server import Server

log = logging.getLogger("cohort.share")
E = ErrorCode
ZERO = datetime.timedelta(0)
LOADING = "the share coordinator is loading"
MAX_MEMBER_ID = 36
READ_CHUNK = 1 << 20  # bytes a share fetch reads from a partition's log at a time
Key = share_state.ShareStateKey


def install(server: "Server") -> None:
    manager = SharePartitionManager(server)
    server.share_partitions = manager  # type: ignore[attr-defined]
    server.apis.register(78, manager.share_fetch, min_version=1, max_version=2)
    server.apis.register(79, manager.share_acknowledge, min_version=1, max_version=2)
    server.apis.register(90, manager.describe_share_group_offsets, min_version=0, max_version=1)
    server.apis.register(91, manager.alter_share_group_offsets, min_version=0, max_version=0)
    server.apis.register(92, manager.delete_share_group_offsets, min_version=0, max_version=0)
    server.group_coordinator.deleted_hooks.append(manager.groups_deleted)  # type: ignore[attr-defined]
    server.startup_hooks.append(manager.load)
    server.shutdown_hooks.append(manager.unload)
    server.connection_closed.append(manager.connection_closed)
    server.broker.append_listeners.append(manager.appended)
    proxy = getattr(server, "upstream_proxy", None)
    if proxy is None:
        server.broker.topic_listeners.append(manager.topics_changed)
    else:  # in front of an upstream: its records, its topics, and the state kept in its topics
        from cohort.share.upstream import UpstreamShareState
        from cohort.upstream.share_records import UpstreamShareRecords

        manager.records = UpstreamShareRecords(proxy.cluster, proxy.client, proxy.refresh_soon)
        manager.upstream = UpstreamShareState(manager, server.group_coordinator, proxy.client, server.config)
        manager.runtimes = []
        manager.node_of = proxy.node_of
        server.group_coordinator.shard_hooks.append(manager.upstream)  # type: ignore[attr-defined]
        proxy.cluster.topic_listeners.append(manager.topics_changed)


def state_key_string(key: Key) -> str:
    """Kafka's SharePartitionKey string (`group:topic id:partition`, the id in base64), whose
    hash places the share-partition on a `__share_group_state` partition."""
    import base64
    topic = base64.urlsafe_b64encode(key.topic_id.bytes).decode().rstrip("=")
    return f"{key.group_id}:{topic}:{key.partition}"


class _OffsetsApis:
    """DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92):
    admin APIs of the group coordinator that read or change the share coordinator's state."""

    server: Any
    broker: Any
    partitions: dict
    runtimes: list
    records: Any
    serving: Any

    def _progress(self, key: Key) -> tuple[int, int]:
        """(start offset, delivery-complete count) of a share-partition; (-1, -1) if it has no state."""
        sp = self.partitions.get(key)
        if sp is not None:
            return sp.start, sp.delivery_complete_count()
        snapshot = self.runtime_for(key).shard.read(key)  # type: ignore[attr-defined]
        if snapshot is None or snapshot.start_offset < 0:
            return -1, -1
        return snapshot.start_offset, max(snapshot.delivery_complete_count, 0)

    def _share_group(self, group_id: str) -> tuple[Any, int, str | None]:
        """(the committed share group or None, error, message) at its coordinator."""
        coordinator = self.server.group_coordinator
        if not coordinator.serving(group_id):
            code, message = coordinator.unserved(group_id)
            return None, code, message
        code, message = self.serving(group_id)
        if code:
            return None, code, message
        shard = coordinator.shard_for(group_id)
        group = shard.committed_state(group_id).share_groups.get(group_id)
        if group is None:
            other = group_id in shard.state.groups or group_id in shard.state.classic_groups \
                or group_id in shard.state.offsets
            return None, E.group_id_not_found, (f"Group {group_id} is not a share group." if other
                                                 else f"Group {group_id} not found.")
        return group, E.none, None

    async def _high_watermark(self, topic: str, partition: int) -> int:
        """The partition's end now (an upstream's is asked: the one last seen may be old)."""
        if self.records.remote:
            end = await self.records.offset_for(topic, partition, LATEST)
            if end >= 0:
                return end
        return self.records.high_watermark(topic, partition)

    async def describe_share_group_offsets(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp = req.codec.response_type
        group_cls = nested(resp, "groups")
        topic_cls = nested(group_cls, "topics")
        part_cls = nested(topic_cls, "partitions")
        out = []
        for g in req.body.groups:
            gid = g.group_id
            if not ctx.authorize(acls.DESCRIBE, acls.GROUP, gid):
                out.append(build(group_cls, group_id=gid, topics=(), error_code=E.group_authorization_failed))
                continue
            group, code, message = self._share_group(gid)
            if group is None:
                out.append(build(group_cls, group_id=gid, topics=(), error_code=E(code), error_message=message))
                continue
            if g.topics is None:  # every initialized share-partition
                wanted = [(info.topic_name, info.partitions) for _, info in sorted(group.initialized.items())]
            else:
                wanted = [(t.topic_name, tuple(t.partitions)) for t in g.topics]
            topics = []
            for name, partitions in wanted:
                if not ctx.authorize(acls.DESCRIBE, acls.TOPIC, name):
                    continue  # Kafka leaves out what the principal may not describe
                topic = self.records.topic(name)
                parts = []
                for p in partitions:
                    if topic is None or not 0 <= p < topic.partitions:
                        parts.append(build(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                                           error_code=E.unknown_topic_or_partition))
                        continue
                    start, complete = self._progress(Key(gid, topic.id, p))
                    lag = -1 if start < 0 else max(await self._high_watermark(name, p) - start - complete, 0)
                    parts.append(build(part_cls, partition_index=p, start_offset=start,
                                       leader_epoch=0 if start >= 0 else -1, lag=lag, error_code=E.none))
                topics.append(build(topic_cls, topic_name=name, topic_id=None if topic is None else topic.id,
                                    partitions=tuple(parts)))
            out.append(build(group_cls, group_id=gid, topics=tuple(topics), error_code=E.none))
        return build(resp, throttle_time=ZERO, groups=tuple(out))

    def _refused(self, ctx: "RequestContext", operation: int, group_id: str, top: Any) -> Any:
        """The answer when the principal may not do `operation` on the group or it is not served here."""
        if not ctx.authorize(operation, acls.GROUP, group_id):
            return top(E.group_authorization_failed)
        coordinator = self.server.group_coordinator
        if not coordinator.serving(group_id):
            return top(*coordinator.unserved(group_id))
        code, message = self.serving(group_id)
        return top(code, message) if code else None

    async def alter_share_group_offsets(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        topic_cls = nested(resp, "responses")
        part_cls = nested(topic_cls, "partitions")
        gid = body.group_id
        top = functools.partial(_top_error, resp)
        refused = self._refused(ctx, acls.READ, gid, top)
        if refused is not None:
            return refused
        coordinator = self.server.group_coordinator
        errors: dict[tuple[str, int], int] = {}
        initialize: dict[uuid.UUID, tuple[str, tuple[int, ...]]] = {}
        starts: dict[Key, int] = {}
        for t in body.topics:
            topic = self.records.topic(t.topic_name)
            for p in t.partitions:
                if not ctx.authorize(acls.READ, acls.TOPIC, t.topic_name):
                    errors[(t.topic_name, p.partition_index)] = E.topic_authorization_failed
                elif topic is None or not 0 <= p.partition_index < topic.partitions:
                    errors[(t.topic_name, p.partition_index)] = E.unknown_topic_or_partition
                elif p.start_offset < 0:
                    errors[(t.topic_name, p.partition_index)] = E.invalid_request
                else:
                    name, parts = initialize.get(topic.id, (t.topic_name, ()))
                    initialize[topic.id] = (name, parts + (p.partition_index,))
                    starts[Key(gid, topic.id, p.partition_index)] = p.start_offset
        if initialize:
            result = await coordinator.write_async(AlterSharePartitions(gid, initialize=initialize))
            if isinstance(result, Failed):
                return top(result.code, result.message)
            if result.error_code:
                return top(result.error_code, result.error_message)
            written = await asyncio.gather(*(self.runtime_for(key).write_async(  # type: ignore[attr-defined]
                share_state.InitializeShareState(key, start)) for key, start in starts.items()))
            for (key, _), r in zip(starts.items(), written):
                self.partitions.pop(key, None)  # reloaded from the new state on its next fetch
                if isinstance(r, Failed) or r.error_code:
                    topic = self.records.topic_by_id(key.topic_id)
                    errors[(topic.name if topic else "", key.partition)] = E.coordinator_not_available
        by_topic: dict[str, list] = {}
        for t in body.topics:
            for p in t.partitions:
                by_topic.setdefault(t.topic_name, []).append(build(
                    part_cls, partition_index=p.partition_index,
                    error_code=E(errors.get((t.topic_name, p.partition_index), E.none))))
        topics = tuple(build(topic_cls, topic_name=name, topic_id=getattr(self.records.topic(name), "id", None),
                             partitions=tuple(parts)) for name, parts in by_topic.items())
        return build(resp, throttle_time=ZERO, error_code=E.none, responses=topics)

    async def delete_share_group_offsets(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        topic_cls = nested(resp, "responses")
        gid = body.group_id
        top = functools.partial(_top_error, resp)
        refused = self._refused(ctx, acls.DELETE, gid, top)
        if refused is not None:
            return refused
        coordinator = self.server.group_coordinator
        errors: dict[str, int] = {}
        forget: list[uuid.UUID] = []
        for t in body.topics:
            topic = self.records.topic(t.topic_name)
            if not ctx.authorize(acls.READ, acls.TOPIC, t.topic_name):
                errors[t.topic_name] = E.topic_authorization_failed
            elif topic is None:
                errors[t.topic_name] = E.unknown_topic_or_partition
            else:
                forget.append(topic.id)
        if forget:
            result = await coordinator.write_async(AlterSharePartitions(gid, forget=tuple(forget)))
            if isinstance(result, Failed):
                return top(result.code, result.message)
            if result.error_code:
                return top(result.error_code, result.error_message)
            await self._delete_state(lambda key: key.group_id == gid and key.topic_id in forget)
        topics = tuple(build(topic_cls, topic_name=t.topic_name,
                             topic_id=getattr(self.records.topic(t.topic_name), "id", None),
                             error_code=E(errors.get(t.topic_name, E.none))) for t in body.topics)
        return build(resp, throttle_time=ZERO, error_code=E.none, responses=topics)

    async def groups_deleted(self, group_ids: list[str]) -> None:
        """DeleteGroups deleted these groups: their share-partitions' state goes too."""
        if group_ids:
            gone = set(group_ids)
            await self._delete_state(lambda key: key.group_id in gone)

    async def _delete_state(self, matches: Any) -> None:
        for key in [k for k in self.partitions if matches(k)]:
            del self.partitions[key]
        for runtime in self.state_runtimes():
            keys = tuple(k for k in runtime.shard.state if matches(k))
            if keys:
                await runtime.write_async(share_state.DeleteShareState(keys))


class SharePartitionManager(_OffsetsApis):
    """See the module docstring."""

    def __init__(self, server: "Server") -> None:
        self.server = server
        self.broker = server.broker
        config = server.config
        self.delivery_limit = config["group.share.delivery.count.limit"]
        self.max_in_flight = config["group.share.partition.max.record.locks"]
        self.sessions = ShareSessions(config["group.share.max.share.sessions"])
        self.partitions: dict[Key, SharePartition] = {}
        self._loading: dict[Key, asyncio.Future] = {}
        self._locks: list[tuple[int, Key]] = []  # heap: (earliest lock deadline, share-partition)
        self._lock_due: dict[Key, int] = {}  # share-partition -> the deadline its heap entry wakes at
        self._lock_wake = asyncio.Event()
        self._waiters = AppendWaiters()  # share fetches waiting on (topic, partition): appends, releases
        self.runtimes: list[CoordinatorRuntime] = []
        self.records: Any = LocalShareRecords(server.broker)
        # In front of an upstream: the state of a share group's share-partitions lives in the
        # shard of the group's own (`UpstreamShareState`), and moves with it.
        self.upstream: Any = None
        # the broker node a request was sent to (share sessions are per node): (ctx, client id) -> node
        self.node_of: Any = lambda ctx, client_id: None
        for p, slog in enumerate(self.broker.share_state_logs):
            self.runtimes.append(self.state_runtime(f"{SHARE_STATE_TOPIC}-{p}", slog))
        self.loaded = False
        # counters for /metrics
        self.acknowledgements = {"accept": 0, "release": 0, "reject": 0, "renew": 0, "gap": 0}
        self.lock_timeouts = 0

    def new_state_shard(self) -> share_state.ShareCoordinatorShard:
        return share_state.ShareCoordinatorShard()

    def state_runtime(self, name: str, slog: Any,
                      on_lost: Any = lambda reason, fenced: None) -> CoordinatorRuntime:
        """The runtime of one share coordinator shard over its record log."""
        server = self.server
        return CoordinatorRuntime(
            name, self.new_state_shard(), slog, encode=share_state.encode, decode=share_state.decode,
            offload=lambda fn, *args: server.offload(fn, *args), order=server.group_coordinator.order,  # type: ignore[attr-defined]
            loading_message=LOADING, on_lost=on_lost)

    # --- views (metrics, dashboard) ------------------------------------------------------------

    def group_states(self) -> dict[str, int]:
        """Share groups by state, over every shard served here."""
        out: dict[str, int] = {}
        for shard in self.server.group_coordinator.shards:  # type: ignore[attr-defined]
            for group in shard.state.share_groups.values():
                out[group.state] = out.get(group.state, 0) + 1
        return out

    def partition_views(self) -> list[tuple[str, str, int, int, int, int, int, int]]:
        """(group, topic, partition, start, end, acquired, terminal in flight, lag) of each
        share-partition in memory, sorted."""
        rows = []
        for key, sp in self.partitions.items():
            topic = self.records.topic_by_id(key.topic_id)
            if topic is None:
                continue
            complete = sp.delivery_complete_count()
            lag = max(self.records.high_watermark(topic.name, key.partition) - sp.start - complete, 0)
            rows.append((key.group_id, topic.name, key.partition, sp.start, sp.end, sp.acquired_count(), complete, lag))
        return sorted(rows)

    def group_views(self) -> list[dict]:
        """Each share group with its members and share-partitions, for the dashboard."""
        by_group: dict[str, list] = {}
        for group, topic, partition, start, end, acquired, complete, lag in self.partition_views():
            sp = self.partitions.get(Key(group, self.records.topic(topic).id, partition))
            by_group.setdefault(group, []).append({
                "topic": topic, "partition": partition, "start": start, "end": end, "in_flight": end - start,
                "acquired": acquired, "archived": 0 if sp is None else sp.archived_count(), "finished": complete,
                "lag": lag})
        out = []
        for shard in self.server.group_coordinator.shards:  # type: ignore[attr-defined]
            for gid, group in shard.state.share_groups.items():
                members = []
                for mid in sorted(group.members):
                    m = group.members[mid]
                    assigned = sorted((t.name, p) for tid, ps in m.assigned_partitions.items()
                                      if (t := self.records.topic_by_id(tid)) is not None for p in ps)
                    members.append({"member_id": mid, "client_id": m.client_id, "host": m.client_host,
                                    "epoch": m.member_epoch, "assigned": assigned})
                partitions = by_group.get(gid, [])
                out.append({"group_id": gid, "state": group.state, "epoch": group.group_epoch, "members": members,
                            "partitions": partitions, "lag": sum(p["lag"] for p in partitions)})
        return sorted(out, key=lambda g: g["group_id"])

    # --- lifecycle ---------------------------------------------------------------------------

    async def load(self) -> None:
        if self.upstream is None:  # in front of an upstream each shard loads with its group shard
            for runtime in self.runtimes:
                await runtime.load()
        self.loaded = True
        self.server.spawn(self._lock_loop())
        if self.upstream is None:
            self.topics_changed()  # topics deleted while the broker was down

    async def unload(self) -> None:
        self.loaded = False
        self._lock_wake.set()
        for runtime in self.runtimes:
            runtime.unload()
        if self.upstream is not None:
            await self.upstream.close()
        await self.records.close()

    def state_runtimes(self) -> list[CoordinatorRuntime]:
        """The share coordinator shards (in front of an upstream: those loaded here)."""
        if self.upstream is not None:
            return [r for r in self.upstream.runtimes if r.loaded]
        return self.runtimes

    def runtime_for(self, key: Key) -> CoordinatorRuntime:
        if self.upstream is not None:
            return self.upstream.runtime_for(key.group_id)
        if len(self.runtimes) == 1:
            return self.runtimes[0]
        return self.runtimes[partition_for(state_key_string(key), len(self.runtimes))]

    def serving(self, group_id: str) -> tuple[int, str | None]:
        """(E.none, None) when share fetches of the group are served here; else the error and message."""
        if not self.loaded:
            return E.coordinator_load_in_progress, LOADING
        if self.upstream is None:
            return E.none, None
        return self.upstream.serving(group_id)

    def forget_groups(self, matches: Any) -> None:
        """The share-partitions and share sessions of the groups ``matches`` accepts are no longer
        served here (their shard went to another instance): dropped from memory, unwritten. The
        records they held are acquired afresh from the state the new owner loads, as after a
        lock timeout."""
        for key in [k for k in self.partitions if matches(k.group_id)]:
            del self.partitions[key]
            self._wake(key)
        for session in [s for s in self.sessions.sessions.values() if matches(s.group_id)]:
            self.sessions.close(session)

    # --- share-partitions --------------------------------------------------------------------

    async def _share_partition(self, key: Key, topic_name: str) -> SharePartition:
        """The share-partition, loaded from its durable state (initialized on first use)."""
        found = self.partitions.get(key)
        if found is not None:
            return found
        loading = self._loading.get(key)
        if loading is None:
            loading = self._loading[key] = asyncio.ensure_future(self._load_partition(key, topic_name))
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load_partition(self, key: Key, topic_name: str) -> SharePartition:
        runtime = self.runtime_for(key)
        snapshot = runtime.shard.read(key)
        if snapshot is None or snapshot.start_offset < 0:
            start = await self._reset_offset(key.group_id, topic_name, key.partition)
            if start < 0:
                raise SessionError(E.leader_not_available, "the partition's offsets cannot be read now")
            snapshot = runtime.shard.read(key)  # another fetch may have initialized it meanwhile
        if snapshot is None or snapshot.start_offset < 0:
            result = await runtime.write_async(share_state.InitializeShareState(key, start))
            if isinstance(result, Failed) or result.error_code:
                raise SessionError(E.coordinator_not_available, "the share-partition's state could not be written")
            snapshot = runtime.shard.read(key)
        sp = SharePartition(snapshot.start_offset, delivery_limit=self.delivery_limit,
                            max_in_flight=self.max_in_flight, batches=snapshot.batches)
        self.partitions[key] = sp
        return sp

    def _group_config(self, group_id: str) -> Any:
        return self.server.group_coordinator.shard_for(group_id).state.group_config(group_id)  # type: ignore[attr-defined]

    def _lock_ms(self, group_id: str) -> int:
        coordinator = self.server.group_coordinator  # type: ignore[attr-defined]
        return self._group_config(group_id).share_record_lock_duration(coordinator.config)

    async def _reset_offset(self, group_id: str, topic: str, partition: int) -> int:
        """Where a share-partition without state starts: `share.auto.offset.reset` (-1: the
        partition's offsets cannot be read now)."""
        reset = self._group_config(group_id).share_auto_offset_reset
        if reset == "earliest":
            return await self.records.offset_for(topic, partition, EARLIEST)
        look_back = share_reset_ms(reset)
        if look_back is None:
            return await self.records.offset_for(topic, partition, LATEST)
        return await self.records.offset_for(topic, partition, int(time.time() * 1000) - look_back)

    # --- durability ----------------------------------------------------------------------------

    async def _write(self, key: Key, sp: SharePartition, batches: list[StateBatch], start: int) -> bool:
        result = await self.runtime_for(key).write_async(share_state.WriteShareState(
            key, start, tuple(batches), sp.delivery_complete_count()))
        return not isinstance(result, Failed) and not result.error_code

    def _write_behind(self, key: Key, sp: SharePartition, batches: list[StateBatch]) -> None:
        """Persist a release or lock timeout without waiting (see the module docstring)."""
        if batches:
            self.server.spawn(self._write(key, sp, batches, sp.start))

    # --- lock timeouts -----------------------------------------------------------------------

    def _watch_locks(self, key: Key, sp: SharePartition) -> None:
        """Make sure the lock loop wakes by the share-partition's earliest lock deadline (one timer
        entry per share-partition and deadline, not one per fetch)."""
        deadline = sp.next_lock_deadline()
        if deadline is None:
            return
        due = self._lock_due.get(key)
        if due is not None and due <= deadline:
            return  # an earlier wake-up is already set: it looks again then
        self._lock_due[key] = deadline
        heapq.heappush(self._locks, (deadline, key))
        if self._locks[0][1] == key:
            self._lock_wake.set()

    async def _lock_loop(self) -> None:
        while self.loaded:
            timeout = None if not self._locks else max(0.0, (self._locks[0][0] - now_ms()) / 1000)
            self._lock_wake.clear()
            try:
                await asyncio.wait_for(self._lock_wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            now = now_ms()
            while self._locks and self._locks[0][0] <= now:
                deadline, key = heapq.heappop(self._locks)
                if self._lock_due.get(key) != deadline:
                    continue  # replaced by an earlier wake-up, which has run
                del self._lock_due[key]
                sp = self.partitions.get(key)
                if sp is None:
                    continue
                released = sp.expire_locks(now)
                if released:
                    self.lock_timeouts += sum(b.last_offset - b.first_offset + 1 for b in released)
                    self._write_behind(key, sp, released)
                    self._wake(key)
                self._watch_locks(key, sp)

    # --- waking share fetches ----------------------------------------------------------------

    def appended(self, topic: str, partition: int) -> None:
        self._waiters.notify(topic, partition)

    def _wake(self, key: Key) -> None:
        topic = self.records.topic_by_id(key.topic_id)
        if topic is not None:
            self._waiters.notify(topic.name, key.partition)

    def topics_changed(self) -> None:
        """A deleted topic's share-partitions go, with their durable state (Kafka writes their
        tombstones); a topic created again under the name has a new id, so it starts afresh."""
        gone = {k.topic_id for k in self.partitions if self.records.topic_by_id(k.topic_id) is None}
        gone |= {k.topic_id for r in self.state_runtimes() for k in r.shard.state
                 if self.records.topic_by_id(k.topic_id) is None}
        if gone and self.loaded:
            self.server.spawn(self._delete_state(lambda key: key.topic_id in gone))

    # --- sessions ----------------------------------------------------------------------------

    def _release_session(self, session: ShareSession) -> None:
        self.sessions.close(session)
        for topic_id, partition in session.partitions:
            key = Key(session.group_id, topic_id, partition)
            sp = self.partitions.get(key)
            if sp is None:
                continue
            released = sp.release(session.member_id)
            if released:
                self._write_behind(key, sp, released)
                self._wake(key)

    def connection_closed(self, ctx: Any) -> None:
        """The connection of live sessions closed: their members' records are released."""
        for session in self.sessions.of_connection(ctx):
            self._release_session(session)

    # --- acknowledgements --------------------------------------------------------------------

    def _validate_batches(self, batches: Any, renew: bool, version: int) -> bool:
        """KafkaApis.validateAcknowledgementBatches."""
        previous = -1
        top = 4 if version >= 2 else 3
        for b in batches:
            types = b.acknowledge_types
            if b.first_offset > b.last_offset or b.first_offset < previous or not types:
                return False
            if len(types) > 1 and len(types) != b.last_offset - b.first_offset + 1:
                return False
            if any(not 0 <= t <= top or (t == 4 and not renew) for t in types):
                return False
            previous = b.last_offset
        return True

    async def _acknowledge(self, ctx: "RequestContext", group_id: str, member_id: str, topics: Any, version: int,
                           renew: bool, lock_ms: int) -> dict[tuple[uuid.UUID, int], int]:
        """Apply the acknowledgements of a request; {(topic id, partition): error code}, answered
        once their state is durable. `lock_ms`: the group's lock duration (for RENEW)."""
        results: dict[tuple[uuid.UUID, int], int] = {}
        pending: list[tuple[Key, SharePartition, Transition]] = []
        now = now_ms()
        by_partition: dict[tuple[uuid.UUID, int], list] = {}
        for t in topics:  # a topic may be named twice (librdkafka does): its batches together
            for p in t.partitions:
                if p.acknowledgement_batches:
                    by_partition.setdefault((t.topic_id, p.partition_index), []).extend(p.acknowledgement_batches)
        for (topic_id, partition), batches in by_partition.items():
            topic = self.records.topic_by_id(topic_id)
            if topic is None:
                results[(topic_id, partition)] = E.unknown_topic_id
                continue
            if not ctx.authorize(acls.READ, acls.TOPIC, topic.name):
                results[(topic_id, partition)] = E.topic_authorization_failed
                continue
            batches = sorted(batches, key=lambda b: b.first_offset)
            if not self._validate_batches(batches, renew, version):
                results[(topic_id, partition)] = E.invalid_request
                continue
            key = Key(group_id, topic_id, partition)
            sp = self.partitions.get(key)
            if sp is None:
                results[(topic_id, partition)] = E.unknown_topic_or_partition
                continue
            try:
                transition = sp.acknowledge(member_id, [(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                                                        for b in batches], now, lock_ms)
            except AckError as exc:
                results[(topic_id, partition)] = exc.code
                continue
            for b in batches:
                for t in b.acknowledge_types:
                    self.acknowledgements[("gap", "accept", "release", "reject", "renew")[t]] += (
                        b.last_offset - b.first_offset + 1 if len(b.acknowledge_types) == 1 else 1)
            results[(topic_id, partition)] = E.none
            if transition.changes:
                pending.append((key, sp, transition))
            self._watch_locks(key, sp)
        if pending:
            written = await asyncio.gather(*(self._write(key, sp, tr.batches, tr.start_offset)
                                             for key, sp, tr in pending))
            for (key, sp, tr), ok in zip(pending, written):
                if ok:
                    sp.complete(tr)
                    if any(new == 0 for _, _, new in tr.changes):
                        self._wake(key)  # released records can go to others
                else:
                    sp.abort(tr)
                    results[(key.topic_id, key.partition)] = E.coordinator_not_available
        return results

    # --- ShareFetch (78) -----------------------------------------------------------------------

    async def share_fetch(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp, version = req.body, req.codec.response_type, req.version
        group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch

        def top(code: int, message: str | None = None) -> Any:
            return build(resp, throttle_time=ZERO, error_code=E(code), error_message=message,
                         acquisition_lock_timeout=ZERO, responses=(), node_endpoints=())

        if not member_id or len(member_id) > MAX_MEMBER_ID or not group_id:
            return top(E.invalid_request, "Invalid member id in the request." if group_id else "Invalid group id.")
        if not ctx.authorize(acls.READ, acls.GROUP, group_id):
            return top(E.group_authorization_failed)
        code, message = self.serving(group_id)
        if code:
            return top(code, message)
        config = self._group_config(group_id)  # read once per request
        lock_ms = config.share_record_lock_duration(self.server.group_coordinator.config)  # type: ignore[attr-defined]
        renew = bool(getattr(body, "is_renew_ack", False))
        max_wait = body.max_wait.total_seconds()
        has_acks = any(p.acknowledgement_batches for t in body.topics for p in t.partitions)
        if renew and (body.max_bytes or body.min_bytes or body.max_records or max_wait):
            return top(E.invalid_request, "A renew acknowledgement fetches nothing: MaxBytes, MinBytes, "
                       "MaxRecords and MaxWaitMs must be 0.")
        named = [(t.topic_id, p.partition_index) for t in body.topics for p in t.partitions]
        try:
            if epoch == 0:
                if has_acks:
                    return top(E.invalid_request, "Acknowledgements cannot be sent with a share session epoch of 0.")
                try:
                    session, previous = self.sessions.open(group_id, member_id, ctx, named, self.node_of(ctx, req.client_id))
                except SessionError as exc:
                    await asyncio.sleep(max_wait)  # Kafka waits MaxWaitMs before saying so
                    raise exc
                if previous is not None and previous.connection is not ctx:
                    previous.connection = None  # replaced: its connection's close releases nothing (KAFKA-19950)
                fresh = True
            else:
                session = self.sessions.get(group_id, member_id, epoch, self.node_of(ctx, req.client_id))
                fresh = False
                if epoch > 0:
                    for tp in named:
                        session.partitions[tp] = None
                    for f in body.forgotten_topics_data:
                        for p in f.partitions:
                            session.partitions.pop((f.topic_id, p), None)
                    ShareSessions.advance(session)
        except SessionError as exc:
            return top(exc.code, exc.message)

        acks = await self._acknowledge(ctx, group_id, member_id, body.topics, version, renew,
                                       lock_ms) if has_acks else {}
        if epoch == -1:
            self._release_session(session)
            return self._fetch_response(resp, {}, acks, [], lock_ms)
        errors: dict[tuple[uuid.UUID, int], int] = {}
        fetched: dict[tuple[uuid.UUID, int], tuple[bytes, list]] = {}
        if not renew and body.max_records > 0 and body.max_bytes > 0:
            deadline = asyncio.get_running_loop().time() + max_wait
            while True:
                fetched, errors, nbytes, keys = await self._acquire(ctx, session, body, config, lock_ms)
                remaining = deadline - asyncio.get_running_loop().time()
                if nbytes >= max(body.min_bytes, 1) or errors or remaining <= 0 or not keys \
                        or not self.sessions.current(session):
                    break
                await self._wait(keys, remaining, config.share_isolation_level == "read_committed")
        answer_all = list(session.partitions) if fresh else []
        return self._fetch_response(resp, fetched, acks, answer_all, lock_ms, errors)

    async def _acquire(self, ctx: "RequestContext", session: ShareSession, body: Any, config: Any,
                       lock_ms: int) -> tuple[dict, dict, int, list]:
        """One pass over the session's partitions: (records and acquired ranges, errors, bytes, wait keys)."""
        fetched: dict[tuple[uuid.UUID, int], tuple[bytes, list]] = {}
        errors: dict[tuple[uuid.UUID, int], int] = {}
        keys: list[tuple[str, int]] = []
        budget = min(body.max_bytes, self.server.config["fetch.max.bytes"])
        max_records = body.max_records
        total = records = 0
        group_id, member_id = session.group_id, session.member_id
        read_committed = config.share_isolation_level == "read_committed"
        order = list(session.partitions)
        if order:
            shift = session.rotation % len(order)
            order = order[shift:] + order[:shift]
            session.rotation += 1
        for topic_id, partition in order:
            topic = self.records.topic_by_id(topic_id)
            if topic is None:
                errors[(topic_id, partition)] = E.unknown_topic_id
                continue
            if not ctx.authorize(acls.READ, acls.TOPIC, topic.name):
                errors[(topic_id, partition)] = E.topic_authorization_failed
                continue
            if not 0 <= partition < topic.partitions:
                errors[(topic_id, partition)] = E.unknown_topic_or_partition
                continue
            keys.append((topic.name, partition))
            if records >= max_records or total >= budget:
                continue
            key = Key(group_id, topic_id, partition)
            try:
                sp = await self._share_partition(key, topic.name)
            except SessionError as exc:
                errors[(topic_id, partition)] = exc.code
                continue
            log_start = self.records.log_start(topic.name, partition)
            if log_start < 0:
                continue
            if sp.move_start(log_start):
                self._write_behind(key, sp, [])
            if not sp.can_acquire():
                continue
            strict = getattr(body, "share_acquire_mode", 0) == 1
            chunks, acquired = await self._acquire_from(key, sp, topic.name, member_id, read_committed, lock_ms,
                                                        max_records - records, max(budget - total, 0), total == 0,
                                                        strict)
            self._watch_locks(key, sp)
            if not acquired:
                continue
            data = b"".join(chunks)
            fetched[(topic_id, partition)] = (data, acquired)
            total += len(data)
            records += sum(r.last_offset - r.first_offset + 1 for r in acquired)
        return fetched, errors, total, keys

    async def _acquire_from(self, key: Key, sp: SharePartition, topic: str, member_id: str, read_committed: bool,
                            lock_ms: int, max_records: int, limit: int, first: bool, strict: bool) -> tuple[list, list]:
        """Read the log from the share-partition's next fetch offset and acquire, a chunk at a time
        (a fetch wants MaxRecords, not MaxBytes of data: reading 50 MB to hand out 500 records would
        cost more than the rest of the fetch): (the whole batches that hold the acquired records,
        the acquired ranges)."""
        chunks: list[bytes] = []
        acquired: list = []
        got = 0
        while got < max_records and limit > 0 and sp.can_acquire():
            offset = sp.next_fetch_offset()
            size = min(limit, READ_CHUNK)
            read = await self.records.read(topic, key.partition, offset, size, read_committed,
                                           allow_oversize=first and not chunks)
            code, data, found = read.code, read.data, read.aborted
            if code == E.offset_out_of_range:
                start = read.log_start if read.log_start >= 0 else await self.records.offset_for(
                    topic, key.partition, EARLIEST)
                if 0 <= offset < start and sp.move_start(start):
                    self._write_behind(key, sp, [])
                    continue
                break
            if code != E.none or not data:
                break
            batches = [(h.base_offset, h.last_offset, pos, h) for pos, h in iter_batches(data)]
            aborted = _aborted_ranges(batches, found) if found else []
            ranges = sp.acquire(member_id, [(b, last) for b, last, _, _ in batches], now_ms(), lock_ms,
                                max_records - got, aborted, strict=strict)
            if ranges:
                lo, hi = ranges[0].first_offset, ranges[-1].last_offset
                kept = [(pos, h) for b, last, pos, h in batches if last >= lo and b <= hi]
                chunk = data[kept[0][0]:kept[-1][0] + kept[-1][1].size]
                chunks.append(chunk)
                limit -= len(chunk)
                got += sum(r.last_offset - r.first_offset + 1 for r in ranges)
                acquired.extend(ranges)
            if sp.next_fetch_offset() <= offset:  # nothing moved (e.g. every record there is held by others)
                break
        return chunks, acquired

    async def _wait(self, keys: list[tuple[str, int]], timeout: float, read_committed: bool) -> None:
        """Until records may be there for a waiting share fetch: a local append, a release or a
        lock timeout wakes the waiters; records appended to an upstream are waited for with a
        long-polling fetch there as well."""
        if not self.records.remote:
            await self._waiters.wait(keys, timeout)
            return
        waits = [asyncio.ensure_future(self._waiters.wait(keys, timeout)),
                 asyncio.ensure_future(self.records.wait_for_records(keys, timeout, read_committed))]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    def _fetch_response(self, resp: type, fetched: dict, acks: dict, answer_all: list, lock_ms: int,
                        errors: dict | None = None) -> Any:
        errors = errors or {}
        topic_cls = nested(resp, "responses")
        part_cls = nested(topic_cls, "partitions")
        acquired_cls = nested(part_cls, "acquired_records")
        leader_cls = nested(part_cls, "current_leader")
        no_leader = build(leader_cls, leader_id=-1, leader_epoch=-1)
        entries: dict[uuid.UUID, dict[int, Any]] = {}
        for tp in [*answer_all, *fetched, *acks, *errors]:
            topic_id, partition = tp
            if partition in entries.get(topic_id, {}):
                continue
            data, acquired = fetched.get(tp, (b"", []))
            entries.setdefault(topic_id, {})[partition] = build(
                part_cls, partition_index=partition, error_code=E(errors.get(tp, E.none)), error_message=None,
                acknowledge_error_code=int(acks.get(tp, E.none)), acknowledge_error_message=None,
                current_leader=no_leader, records=data,
                acquired_records=tuple(build(acquired_cls, first_offset=r.first_offset, last_offset=r.last_offset,
                                             delivery_count=r.delivery_count) for r in acquired))
        topics = tuple(build(topic_cls, topic_id=t, partitions=tuple(parts[p] for p in sorted(parts)))
                       for t, parts in entries.items())
        return build(resp, throttle_time=ZERO, error_code=E.none, error_message=None,
                     acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms), responses=topics,
                     node_endpoints=())

    # --- ShareAcknowledge (79) ---------------------------------------------------------------

    async def share_acknowledge(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp, version = req.body, req.codec.response_type, req.version
        group_id, member_id, epoch = body.group_id, body.member_id, body.share_session_epoch
        lock_ms = 0

        def top(code: int, message: str | None = None) -> Any:
            return build(resp, throttle_time=ZERO, error_code=E(code), error_message=message,
                         acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms), responses=(),
                         node_endpoints=())

        if not member_id or len(member_id) > MAX_MEMBER_ID or not group_id:
            return top(E.invalid_request, "Invalid member id in the request." if group_id else "Invalid group id.")
        if not ctx.authorize(acls.READ, acls.GROUP, group_id):
            return top(E.group_authorization_failed)
        code, message = self.serving(group_id)
        if code:
            return top(code, message)
        lock_ms = self._lock_ms(group_id)
        if epoch == 0:
            return top(E.invalid_share_session_epoch, "A ShareAcknowledge cannot open a share session (epoch 0).")
        try:
            session = self.sessions.get(group_id, member_id, epoch, self.node_of(ctx, req.client_id))
        except SessionError as exc:
            return top(exc.code, exc.message)
        if epoch > 0:
            for t in body.topics:
                for p in t.partitions:
                    session.partitions[(t.topic_id, p.partition_index)] = None
            ShareSessions.advance(session)
        results = await self._acknowledge(ctx, group_id, member_id, body.topics, version,
                                          bool(getattr(body, "is_renew_ack", False)), lock_ms)
        if epoch == -1:
            self._release_session(session)
        topic_cls = nested(resp, "responses")
        part_cls = nested(topic_cls, "partitions")
        leader_cls = nested(part_cls, "current_leader")
        no_leader = build(leader_cls, leader_id=-1, leader_epoch=-1)
        by_topic: dict[uuid.UUID, list] = {}
        for t in body.topics:
            for p in t.partitions:
                code = results.get((t.topic_id, p.partition_index), E.none)
                parts = by_topic.setdefault(t.topic_id, [])
                if all(x.partition_index != p.partition_index for x in parts):
                    parts.append(build(part_cls, partition_index=p.partition_index, error_code=E(code),
                                       error_message=None, current_leader=no_leader))
        return build(resp, throttle_time=ZERO, error_code=E.none, error_message=None,
                     acquisition_lock_timeout=datetime.timedelta(milliseconds=lock_ms),
                     responses=tuple(build(topic_cls, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                     node_endpoints=())


def _top_error(resp: type, code: int, message: str | None = None) -> Any:
    return build(resp, throttle_time=ZERO, error_code=E(code), error_message=message, responses=())


def _aborted_ranges(batches: list, aborted: list) -> list[tuple[int, int]]:
    """The data batches of aborted transactions (a read_committed consumer's rule: from a
    producer's first aborted offset until its ABORT marker), as offset ranges."""
    starts: dict[int, list[int]] = {}
    for a in aborted:
        starts.setdefault(a.producer_id, []).append(a.first_offset)
    for firsts in starts.values():
        firsts.sort()
    out: list[tuple[int, int]] = []
    active: set[int] = set()
    for base, last, _, h in batches:
        pid = h.producer_id
        firsts = starts.get(pid)
        if firsts and firsts[0] <= base:
            firsts.pop(0)
            active.add(pid)
        if h.attributes & CONTROL_FLAG:
            active.discard(pid)  # the marker itself stays: the consumer acknowledges it as a GAP
            continue
        if pid in active:
            out.append((base, last))
    return out

"""The group coordinator shard: a sans-IO state machine owning a set of groups (the groups of
one `__consumer_offsets` partition, placed there by `partition_for`).

The shard routes each request to a group type (consumer.py, classic.py, migration.py,
offsets.py, lag_balance.py) and owns the `GroupContext` (context.py) they all write through; it
keeps what makes a write an operation: the undo log, the records and completions of the result,
the actions to run once it succeeds.

Contract with the caller (the server / runtime):

* Write operations: `result = shard.handle(request, now)` (and `shard.expire(now)` for timers).
  The shard applies the result's records to its state itself, as Kafka's runtime does; the caller
  must NOT replay them again. It appends `result.records` (serialised with `records.encode`) to
  the coordinator log, then calls `shard.commit(result.end_offset)` once they are durable and
  only then releases `result.response` and `result.completions`. If the append fails it calls
  `shard.revert(start)` with the offset of the first failed record: every record from there on is
  undone; it fails that result's response and completions (NOT_COORDINATOR) and sends what
  `revert` returns.
* Parked requests (classic JoinGroup / SyncGroup that must wait for other members):
  `handle(request, now, request_id=None)` answers `Parked(request_id)` — the caller's id, or one
  the shard allocates — and the real response arrives later as `(request_id, response)` in the
  `completions` of whichever result releases it: another member's request, a timer in
  `expire(now)`, or `revert`. Completions obey the same rule as responses (send them once
  `end_offset` is committed). A request is never completed in its own result: if its own
  operation releases it, `result.response` is the real response. The server keeps, per request
  id, the connection and correlation id to answer, and must keep answering each connection in
  request order (a parked request holds back later responses on its connection, as Kafka does).
* `shard.unload()` (broker stop, leadership moved) returns every parked request answered
  NOT_COORDINATOR and stops the timers; the shard is not used afterwards.
* Record offsets are counted by the shard: the first record it writes gets `last_written_offset`
  (0 for a fresh shard, the number of replayed records after a load) and each one adds 1.
* Reads (`describe_groups`, `describe_classic_groups`, `list_groups`, `fetch_offsets`,
  `describe_group_config`) see only committed state for consumer groups and offsets: a group with
  uncommitted records is shown as of the last committed offset. Classic groups are shown live, as
  Kafka does (their rebalance in progress is in-memory state).
* Loading: `replay(record)` for every record in log order (applied as committed), then
  `on_loaded(now)` re-arms session / rebalance / heartbeat timers and the offset-expiration
  timer. A fresh shard also needs `on_loaded(now)` once before serving.
* Timers: `next_deadline()` says when to call `expire(now)` next; expiry is just another write
  operation returning records (and completions). Keys follow Kafka:
  `session-timeout-{group}-{member}`, `rebalance-timeout-{group}-{member}`, `offsets-expiration`;
  classic groups `heartbeat-{group}-{member}`, `join-{group}`, `sync-{group}`; classic members of
  a consumer group `join-{group}-{member}`, `sync-{group}-{member}`.
* Topic metadata is an input: `update_metadata(image)`. Groups subscribed to a changed topic
  recompute their metadata hash on their next heartbeat and bump their epoch if it changed.
* Log offsets are an input too: `update_log_offsets(offsets)` ({topic id: TopicOffsets(start, end)},
  stored as is). With no `lag_provider` given, the shard computes each group's lag from them and
  its committed offsets (lag.py); a given `lag_provider(group_id, topic_id, num_partitions)`
  replaces that (e.g. lag snapshots). Groups whose assignor is `lag` are re-evaluated by the timer
  `lag-evaluation-{group}` (lag_balance.py), which may bump their epoch to move partitions.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import uuid
from collections.abc import Callable, Mapping

from cohort.assignors import registry
from cohort.assignors.api import Assignor
from cohort.coordinator import classic, client_assignment, consumer, lag_balance, migration, share
from cohort.coordinator import offsets as offset_ops
from cohort.coordinator.classic_group import ClassicGroupState
from cohort.coordinator.config import GROUP_CONFIG_KEYS, CoordinatorConfig, GroupConfig
from cohort.coordinator.consumer import blank
from cohort.coordinator.consumer_group import ConsumerGroup, GroupState, ShardState
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.lag import NO_LOG_OFFSETS, LogOffsets, partition_lags
from cohort.coordinator.metadata import EMPTY_IMAGE, MetadataImage
from cohort.coordinator.records import transaction_of as records_of_transaction
from cohort.coordinator.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    GroupConfigurationKey,
    GroupConfigurationValue,
    MemberState,
    Record,
)
from cohort.coordinator.requests import (
    AlterGroupConfigRequest,
    AlterGroupConfigResponse,
    ConfigEntry,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeletedGroup,
    DescribedGroup,
    DescribeGroupConfigRequest,
    DescribeGroupConfigResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Parked,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
    Result,
    SyncGroupRequest,
    TxnMarkerRequest,
    TxnMarkerResponse,
    TxnOffsetCommitRequest,
)
from cohort.coordinator import target
from cohort.coordinator.share_requests import (
    AlterSharePartitions,
    AlterSharePartitionsResponse,
    DescribedShareGroup,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from cohort.coordinator.target import LagProvider, assignor_name
from cohort.coordinator.timers import Timers

OFFSETS_EXPIRATION_KEY = "offsets-expiration"
# Groups at least this large get their assignor view built at load (target.warm_specs): their
# first rebalance would otherwise rebuild it for every member (about 7 ms for 10,000 members);
# smaller groups build it when they first need it, so idle ones cost no memory for it.
WARM_SPEC_MIN_MEMBERS = 1000


def partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition (= shard) owning a group, as Kafka computes it:
    `Utils.abs(groupId.hashCode()) % numPartitions` with Java's String.hashCode."""
    data = group_id.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 0x100000000
    return (0 if h == -(2**31) else abs(h)) % num_partitions


class GroupCoordinatorShard:
    """One shard of the group coordinator (Kafka: one `__consumer_offsets` partition)."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        assignors: Mapping[str, Assignor] | None = None,
        image: MetadataImage = EMPTY_IMAGE,
        lag_provider: LagProvider | None = None,
        member_id_factory: Callable[[], str] | None = None,
    ):
        self.config = config or CoordinatorConfig()
        self.state = ShardState(self.config)
        self.timers = Timers()
        self.image = image
        self._assignors = dict(assignors or {})
        self._lag_provider = lag_provider
        self.log_offsets: LogOffsets = NO_LOG_OFFSETS
        self.lag_balance: dict[str, lag_balance.LagBalanceState] = {}  # soft state of lag evaluations
        self._new_member_id = member_id_factory or (lambda: str(uuid.uuid4()))
        self.last_written_offset = 0
        self.last_committed_offset = 0
        self._undo: collections.deque[tuple[int, str, Record | None, bool]] = collections.deque()
        self._pending_groups: collections.Counter[str] = collections.Counter()
        self._batch: list[Record] | None = None
        self._deferred: list[Callable[[], None]] = []
        self._completions: list[tuple[int, object]] = []
        self._request_ids = itertools.count(1)
        self._request_id = 0
        self._transaction: object = None  # the TxnBatch of the operation in progress, if any
        self._now = 0  # the time of the operation in progress
        self.context = GroupContext(
            self.state, self.timers, self.config, lag_balance=self.lag_balance, append=self._emit,
            complete=self._complete, after=self._after, new_member_id=self._new_member_id,
            committed_state=self.committed_state, assignor=self.assignor,
            fence_member=lambda group, member: migration.fence_member(self.context, group, member),
            image=lambda: self.image, now=lambda: self._now, lag_provider=lambda: self.lag_provider)

    # ================================================================== write path

    def handle(self, request: object, now: int, request_id: int | None = None) -> Result:
        """Run one write operation; its records are already applied when this returns.

        A JoinGroup / SyncGroup that must wait answers `Parked(request_id)` (`request_id` as given,
        else allocated by the shard); its real response comes later in some result's
        `completions`."""
        if type(request) is ConsumerGroupHeartbeatRequest:
            response = consumer.steady_heartbeat(self.context, request, now)
            if response is not None:
                return Result([], response, self.last_written_offset)
        handler = self._WRITE_HANDLERS.get(type(request))
        if handler is None:
            raise TypeError(f"not a coordinator write request: {type(request).__name__}")
        self._request_id = next(self._request_ids) if request_id is None else request_id
        self._now = now
        return self._run(lambda: handler(self, request, now), lambda err: _error_response(request, err))

    def expire(self, now: int) -> Result:
        """Fire every timer due at `now`; returns the records and completions of all expiry operations."""
        records: list[Record] = []
        fired: list[str] = []
        completions: list[tuple[int, object]] = []
        self._now = now
        for key, payload in self.timers.pop_expired(now):
            fired.append(key)
            result = self._run(lambda p=payload: self._on_timer(p, now), lambda err: None)
            records.extend(result.records)
            completions.extend(result.completions)
        return Result(records, fired, self.last_written_offset, completions)

    def unload(self) -> list[tuple[int, object]]:
        """The shard is going away (broker stop, leadership moved): every parked request is answered
        NOT_COORDINATOR, as Kafka's onUnloaded does, and timers stop. Send these at once; the
        shard must not be used afterwards."""
        completions = classic.unload(self.context)
        self.timers.clear()
        return completions

    def _complete(self, request_id: int, response: object) -> None:
        """Release a parked request (classic.py): it rides on the current operation's result."""
        self._completions.append((request_id, response))

    def _after(self, action: Callable[[], object]) -> None:
        """Run `action` once the current operation has succeeded (timers of a write that is kept)."""
        self._deferred.append(action)

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def update_metadata(self, image: MetadataImage) -> None:
        """Install a new topic metadata image; affected groups refresh on their next heartbeat."""
        changed = image.changed_topics(self.image)
        self.image = image
        if not changed:
            return
        for group in self.state.groups.values():
            if group.regex_counts or not changed.isdisjoint(group.subscribed_topic_names()):
                group.refresh_metadata = True
        for share_group in self.state.share_groups.values():
            share_group.refresh_metadata = True  # also forgets the state of deleted topics

    def update_log_offsets(self, offsets: LogOffsets) -> None:
        """Install the partitions' log start / end offsets ({topic id: TopicOffsets}); kept as is."""
        self.log_offsets = offsets

    @property
    def lag_provider(self) -> LagProvider:
        """Where assignors get lag: the injected provider, else lag from log and committed offsets."""
        return self.local_lags if self._lag_provider is None else self._lag_provider

    def local_lags(self, group_id: str, topic_id: uuid.UUID, num_partitions: int) -> list[int] | None:
        """The group's lag on a topic from the log offsets fed to the shard (None: unknown topic)."""
        topic = self.image.by_id.get(topic_id)
        offsets = self.log_offsets.get(topic_id)
        if topic is None or offsets is None:
            return None
        return partition_lags(offsets, self.state.offsets.get(group_id), topic.name, num_partitions,
                              self.state.group_config(group_id).reset_to_earliest)

    def _run(self, op: Callable[[], object], on_error: Callable[[CoordinatorError], object]) -> Result:
        start = self.last_written_offset
        self._batch = []
        self._deferred = []
        self._completions = []
        self._transaction = None
        try:
            response = op()
        except CoordinatorError as err:
            self._undo_to(start)
            self._batch = []
            self._deferred = []
            response = on_error(err)
        except BaseException:
            self._undo_to(start)
            self._batch = None
            self._deferred = []
            raise
        records, self._batch = self._batch, None
        for action in self._deferred:
            action()
        self._deferred = []
        completions, self._completions = self._completions, []
        if type(response) is Parked:
            for i, (rid, released) in enumerate(completions):
                if rid == response.request_id:  # released by its own operation: answer directly
                    response = released
                    del completions[i]
                    break
        if self._transaction is not None:
            transaction, self._transaction = self._transaction, None
            return Result(records, response, self.last_written_offset, completions,
                          transaction if records else None)
        return Result(records, response, self.last_written_offset, completions)

    def _emit(self, key: object, value: object | None) -> None:
        record = Record(key, value)
        inverse, created = self.state.apply(record)
        gid = key.group_id  # type: ignore[attr-defined]
        self._undo.append((self.last_written_offset, gid, inverse, created))
        self._pending_groups[gid] += 1
        self.last_written_offset += 1
        self._batch.append(record)  # type: ignore[union-attr]

    # ================================================================== durability

    def commit(self, offset: int) -> None:
        """Records at offsets < `offset` are durable: they become visible to reads."""
        if offset > self.last_written_offset:
            raise ValueError(f"cannot commit offset {offset} beyond the last written offset {self.last_written_offset}")
        undo, pending = self._undo, self._pending_groups
        while undo and undo[0][0] < offset:
            gid = undo.popleft()[1]
            n = pending[gid] - 1
            if n:
                pending[gid] = n
            else:
                del pending[gid]
        self.last_committed_offset = max(self.last_committed_offset, offset)

    def revert(self, to_offset: int) -> list[tuple[int, object]]:
        """Undo every uncommitted record at offset >= `to_offset` (a failed append).

        A classic group whose record is undone goes back to its last durable generation; the
        requests parked on it are returned answered REBALANCE_IN_PROGRESS (send them: the members
        re-join). The caller fails the failed results' responses and completions itself."""
        if to_offset < self.last_committed_offset:
            raise ValueError(f"cannot revert to {to_offset}: offsets below {self.last_committed_offset} are committed")
        before = dict(self.state.classic_groups)
        self._undo_to(to_offset)
        released: list[tuple[int, object]] = []
        for gid, group in before.items():
            if self.state.classic_groups.get(gid) is not group:
                released.extend(classic.release_parked(group, Errors.REBALANCE_IN_PROGRESS))
        return released

    def _undo_to(self, offset: int) -> None:
        undo, pending, state = self._undo, self._pending_groups, self.state
        while undo and undo[-1][0] >= offset:
            _, gid, inverse, created = undo.pop()
            if inverse is not None:
                state.apply(inverse, track=False)
            if created:
                state.drop_group(gid)
            n = pending[gid] - 1
            if n:
                pending[gid] = n
            else:
                del pending[gid]
        self.last_written_offset = min(self.last_written_offset, max(offset, self.last_committed_offset))

    # ================================================================== loading

    def replay(self, record: Record) -> None:
        """Apply a record read back from the log (it is committed by definition; a marker
        settles its producer's pending transactional offsets)."""
        if self._undo:
            raise RuntimeError("replay() is for loading; records returned by handle() are already applied")
        self.state.apply(record, track=False)
        self.last_written_offset += 1
        self.last_committed_offset = self.last_written_offset

    def on_loaded(self, now: int) -> None:
        """Re-arm timers after loading (Kafka's onLoaded)."""
        for group in self.state.groups.values():
            group.refresh_metadata = True
            session = self.state.group_config(group.group_id).session_timeout(self.config)
            for member in group.members.values():
                classic_metadata = member.classic_member_metadata  # classic members keep their own timeout
                consumer.schedule_session(self.context, group.group_id, member.member_id, now,
                                       session if classic_metadata is None else classic_metadata.session_timeout_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    consumer.schedule_rebalance(self.context, group.group_id, member, now)
        for classic_group in self.state.classic_groups.values():
            for classic_member in classic_group.members.values():
                self.timers.schedule(classic.heartbeat_key(classic_group.group_id, classic_member.member_id),
                                     now + classic_member.session_timeout_ms,
                                     ("classic-heartbeat", classic_group.group_id, classic_member.member_id))
        share.on_loaded(self.context, now)
        self.timers.schedule(OFFSETS_EXPIRATION_KEY, now + self.config.offsets_retention_check_interval_ms,
                             ("offsets",))
        self.lag_balance.clear()
        for group in self.state.groups.values():
            if lag_balance.uses_lag(self.context, group):
                lag_balance.schedule(self.context, group.group_id, now)
            if len(group.members) >= WARM_SPEC_MIN_MEMBERS:
                target.warm_specs(group, self.image)

    # ================================================================== timers

    def _on_timer(self, payload: tuple, now: int) -> None:
        kind = payload[0]
        if kind == "classic-member-timeout":
            migration.on_member_timeout(self.context, payload, now)
            return
        if kind.startswith("classic-"):
            classic.on_timer(self.context, payload, now)
            return
        if kind == "lag":
            lag_balance.evaluate(self.context, payload[1], now)
            return
        if kind == client_assignment.TIMER_KIND:
            client_assignment.on_timeout(self.context, payload)
            return
        if kind == share.TIMER_KIND:
            share.on_session_timeout(self.context, payload)
            return
        if kind == "offsets":
            offset_ops.expire_offsets(self.context, now)
            self.timers.schedule(OFFSETS_EXPIRATION_KEY, now + self.config.offsets_retention_check_interval_ms,
                                 ("offsets",))
            return
        group = self.state.groups.get(payload[1])
        member = None if group is None else group.members.get(payload[2])
        if member is None:
            return
        if kind == "rebalance" and member.member_epoch != payload[3]:
            return
        self.context.fence_member(group, member)  # type: ignore[arg-type]

    # ================================================================== ConsumerGroupHeartbeat

    def _heartbeat(self, req: ConsumerGroupHeartbeatRequest, now: int) -> ConsumerGroupHeartbeatResponse:
        ctx = self.context
        consumer.validate_heartbeat(ctx, req)
        self._not_share(req.group_id, "consumer")
        if req.member_epoch == 0 and req.group_id not in self.state.groups:
            classic_group = self.state.classic_groups.get(req.group_id)
            if classic_group is not None:  # a consumer member where a classic group lives
                migration.consumer_member_joins(ctx, classic_group, now)
        ctx.topic_filter = req.topic_filter  # regexes resolved in this heartbeat see only these topics
        try:
            return consumer.heartbeat(ctx, req, now)
        finally:
            ctx.topic_filter = None

    def _not_share(self, group_id: str, kind: str) -> None:
        """A group id held by a share group is not found by the other types' APIs (Kafka)."""
        if group_id in self.state.share_groups:
            raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {kind} group.")

    def _share_heartbeat(self, req: ShareGroupHeartbeatRequest, now: int) -> ShareGroupHeartbeatResponse:
        return share.heartbeat(self.context, req, now)

    def _alter_share_partitions(self, req: AlterSharePartitions, now: int) -> AlterSharePartitionsResponse:
        return share.alter_partitions(self.context, req, now)

    def assignor_name(self, group: ConsumerGroup) -> str:
        """The members' most common choice, else the group's `consumer.assignor`, else the broker default."""
        return assignor_name(self.context, group)

    def lag_evaluation_due(self, now: int) -> bool:
        """Whether a lag evaluation is due at `now` (it may run the lag assignor: worth a worker thread)."""
        return self.timers.any_due(now, lag_balance.LAG_EVALUATION_PREFIX)

    def assignor(self, name: str) -> Assignor:
        """The assignor registered under `name`: injected ones first, then cohort's registry."""
        found = self._assignors.get(name)
        if found is None:
            found = self._assignors[name] = registry.get(name)
        return found

    # ================================================================== groups: delete / configs

    def _delete_groups(self, req: DeleteGroupsRequest, now: int) -> DeleteGroupsResponse:
        results = []
        for gid in req.group_ids:
            share_group = self.state.share_groups.get(gid)
            if share_group is not None:  # Kafka tries each id as a share group first
                if share_group.members:
                    results.append(DeletedGroup(gid, Errors.NON_EMPTY_GROUP, f"Group {gid} is not empty."))
                else:
                    share.delete_group(self.context, share_group)
                    results.append(DeletedGroup(gid))
                continue
            classic_group = self.state.classic_groups.get(gid)
            if classic_group is not None:
                if not classic_group.is_in(ClassicGroupState.EMPTY):
                    results.append(DeletedGroup(gid, Errors.NON_EMPTY_GROUP, f"Group {gid} is not empty."))
                    continue
                offset_ops.delete_all_offsets(self.context, gid)
                classic.delete_group(self.context, classic_group)
                results.append(DeletedGroup(gid))
                continue
            group = self.state.groups.get(gid)
            if group is None and gid not in self.state.offsets:
                results.append(DeletedGroup(gid, Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found."))
                continue
            if group is not None and group.members:
                results.append(DeletedGroup(gid, Errors.NON_EMPTY_GROUP, f"Group {gid} is not empty."))
                continue
            offset_ops.delete_all_offsets(self.context, gid)
            if group is not None:
                consumer.delete_group_records(self.context, group)
            results.append(DeletedGroup(gid))
        return DeleteGroupsResponse(tuple(results))

    def _alter_group_config(self, req: AlterGroupConfigRequest, now: int) -> AlterGroupConfigResponse:
        gid = req.group_id
        if blank(gid):
            return AlterGroupConfigResponse(gid, Errors.INVALID_REQUEST, "Group id can't be empty.")
        current = {} if req.replace else dict(self.state.group_config(gid).raw)
        for name, value in req.configs.items():
            if value is None:
                current.pop(name, None)
            else:
                current[name] = value
        GroupConfig.parse(current, self.config)
        if not req.validate_only:
            group = self.state.groups.get(gid)
            before = None if group is None or not group.members else self.assignor_name(group)
            value = GroupConfigurationValue(tuple(sorted(current.items()))) if current else None
            if value is not None or gid in self.state.configs:
                self._emit(GroupConfigurationKey(gid), value)
            if before is not None and self.assignor_name(group) != before:
                # the group's effective assignor changed: reassign with it (as KAFKA-20434 does for members)
                self._emit(ConsumerGroupMetadataKey(gid),
                           ConsumerGroupMetadataValue(group.group_epoch + 1, group.metadata_hash))
        return AlterGroupConfigResponse(gid)

    def _commit_offsets(self, req: OffsetCommitRequest, now: int):
        self._not_share(req.group_id, "consumer")
        return offset_ops.commit_offsets(self.context, req, now)

    def _txn_offset_commit(self, req: TxnOffsetCommitRequest, now: int):
        self._not_share(req.group_id, "consumer")
        response = offset_ops.commit_transactional_offsets(self.context, req, now)
        self._transaction = records_of_transaction(self._batch or [])
        return response

    def _txn_marker(self, req: TxnMarkerRequest, now: int) -> TxnMarkerResponse:
        """One marker record in a control batch; in memory it settles the producer's pending
        offsets in every group of this shard (one undo entry per group)."""
        marker = offset_ops.transaction_marker(req)
        offset = self.last_written_offset
        settled = self.state.apply_marker(marker.producer_id, marker.commit)
        for gid, inverse in settled:
            self._undo.append((offset, gid, inverse, False))
            self._pending_groups[gid] += 1
        self.last_written_offset += 1
        self._batch.append(Record(dataclasses.replace(marker, groups=tuple(g for g, _ in settled)), None))  # type: ignore[union-attr]
        self._transaction = records_of_transaction(self._batch)  # type: ignore[arg-type]
        return TxnMarkerResponse()

    def _delete_offsets(self, req: OffsetDeleteRequest, now: int):
        self._not_share(req.group_id, "consumer")
        return offset_ops.delete_offsets(self.context, req)

    def _join_group(self, req: JoinGroupRequest, now: int):
        if req.group_id in self.state.share_groups:  # Kafka: a share group's id is not for classic members
            raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                   f"Group {req.group_id} is a share group: a classic member cannot join it.")
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None and consumer.members and not blank(req.group_id):
            classic.validate_session_timeout(self.context, req)
            return migration.join(self.context, consumer, req, now)
        return classic.join_group(self.context, req, now, self._request_id)

    def _sync_group(self, req: SyncGroupRequest, now: int):
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None:
            return migration.sync(self.context, consumer, req, now)
        return classic.sync_group(self.context, req, now, self._request_id)

    def _classic_heartbeat(self, req: HeartbeatRequest, now: int):
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None:
            return migration.heartbeat(self.context, consumer, req, now)
        return classic.heartbeat(self.context, req, now)

    def _leave_group(self, req: LeaveGroupRequest, now: int):
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None:
            return migration.leave(self.context, consumer, req, now)
        return classic.leave_group(self.context, req, now)

    def _prepare_assignment(self, req: PrepareAssignmentRequest, now: int) -> PrepareAssignmentResponse:
        return client_assignment.prepare(self.context, req)

    def _install_assignment(self, req: InstallAssignmentRequest, now: int) -> InstallAssignmentResponse:
        return client_assignment.install(self.context, req)

    _WRITE_HANDLERS: dict[type, Callable] = {
        ConsumerGroupHeartbeatRequest: _heartbeat,
        ShareGroupHeartbeatRequest: _share_heartbeat,
        AlterSharePartitions: _alter_share_partitions,
        PrepareAssignmentRequest: _prepare_assignment,
        InstallAssignmentRequest: _install_assignment,
        JoinGroupRequest: _join_group,
        SyncGroupRequest: _sync_group,
        HeartbeatRequest: _classic_heartbeat,
        LeaveGroupRequest: _leave_group,
        OffsetCommitRequest: _commit_offsets,
        TxnOffsetCommitRequest: _txn_offset_commit,
        TxnMarkerRequest: _txn_marker,
        OffsetDeleteRequest: _delete_offsets,
        DeleteGroupsRequest: _delete_groups,
        AlterGroupConfigRequest: _alter_group_config,
    }

    # ================================================================== committed reads

    def committed_state(self, group_id: str) -> ShardState:
        """The shard state of one group as of the last committed offset."""
        if not self._pending_groups.get(group_id):
            return self.state
        view = ShardState(self.config)
        group = self.state.groups.get(group_id)
        if group is not None:
            view.groups[group_id] = group.copy()
        share_group = self.state.share_groups.get(group_id)
        if share_group is not None:
            view.share_groups[group_id] = share_group.copy()
        if group_id in self.state.offsets:
            view.offsets[group_id] = dict(self.state.offsets[group_id])
        if group_id in self.state.configs:
            view.configs[group_id] = self.state.configs[group_id]
        for _, gid, inverse, created in reversed(self._undo):
            if gid != group_id:
                continue
            if inverse is not None:
                view.apply(inverse, track=False)
            if created:
                view.drop_group(gid)
        return view

    def read(self, request: object) -> object:
        """Dispatch a read request (describe, list, offset fetch, describe configs)."""
        if isinstance(request, ConsumerGroupDescribeRequest):
            return self.describe_groups(request)
        if isinstance(request, ListGroupsRequest):
            return self.list_groups(request)
        if isinstance(request, OffsetFetchRequest):
            return self.fetch_offsets(request)
        if isinstance(request, DescribeGroupConfigRequest):
            return self.describe_group_config(request)
        if isinstance(request, DescribeGroupsRequest):
            return self.describe_classic_groups(request)
        if isinstance(request, ShareGroupDescribeRequest):
            return self.describe_share_groups(request)
        raise TypeError(f"not a coordinator read request: {type(request).__name__}")

    def fetch_offsets(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        if req.group_id in self.state.share_groups:
            return OffsetFetchResponse(req.group_id, (), Errors.GROUP_ID_NOT_FOUND,
                                       f"Group {req.group_id} is not a consumer group.")
        return offset_ops.fetch_offsets(self.context, req)

    def describe_share_groups(self, req: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
        described = []
        for gid in req.group_ids:
            if blank(gid):
                described.append(DescribedShareGroup(gid, Errors.INVALID_GROUP_ID, "Group id can't be empty."))
                continue
            group = self.committed_state(gid).share_groups.get(gid)
            if group is None:
                other = gid in self.state.groups or gid in self.state.classic_groups or gid in self.state.offsets
                described.append(DescribedShareGroup(
                    gid, Errors.GROUP_ID_NOT_FOUND,
                    f"Group {gid} is not a share group." if other else f"Group {gid} not found."))
                continue
            described.append(share.describe(self.context, group))
        return ShareGroupDescribeResponse(tuple(described))

    def describe_groups(self, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
        described = []
        for gid in req.group_ids:
            if blank(gid):
                described.append(DescribedGroup(gid, Errors.INVALID_GROUP_ID, "Group id can't be empty."))
                continue
            group = self.committed_state(gid).groups.get(gid)
            if group is None:
                message = (f"Group {gid} is not a consumer group." if (gid in self.state.offsets
                           and not self._pending_groups.get(gid)) or gid in self.state.classic_groups
                           or gid in self.state.share_groups else f"Group {gid} not found.")
                described.append(DescribedGroup(gid, Errors.GROUP_ID_NOT_FOUND, message))
                continue
            described.append(consumer.describe(self.context, group))
        return ConsumerGroupDescribeResponse(tuple(described))

    def describe_classic_groups(self, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
        """DescribeGroups (API 15): classic groups as Kafka describes them, consumer groups as Kafka
        4.0 does (see `_describe_as_classic`)."""
        return classic.describe_groups(self.context, req)

    def list_groups(self, req: ListGroupsRequest | None = None) -> ListGroupsResponse:
        req = req or ListGroupsRequest()
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        listed = []
        classic_groups = self.state.classic_groups
        for gid in sorted(self.state.groups.keys() | self.state.offsets.keys() | self._pending_groups.keys()
                          | classic_groups.keys() | self.state.share_groups.keys()):
            view = self.committed_state(gid)
            group = view.groups.get(gid)
            classic_group = classic_groups.get(gid)
            share_group = view.share_groups.get(gid)
            if share_group is not None:
                entry = ListedGroup(gid, "share", share_group.state, "share")
            elif classic_group is not None and (classic_group.members or classic_group.persisted is not None
                                              or group is None):
                entry = ListedGroup(gid, classic_group.protocol_type or "", classic_group.state.value, "classic")
            elif group is not None:
                entry = ListedGroup(gid, "consumer", group.state().value, "consumer")
            elif gid in view.offsets:
                entry = ListedGroup(gid, "", GroupState.EMPTY.value, "classic")  # a "simple" group
            else:
                continue
            if states and entry.group_state.lower() not in states:
                continue
            if types and entry.group_type not in types:
                continue
            listed.append(entry)
        return ListGroupsResponse(tuple(listed))

    def describe_group_config(self, req: DescribeGroupConfigRequest) -> DescribeGroupConfigResponse:
        cfg = self.committed_state(req.group_id).group_config(req.group_id)
        defaults = {
            "consumer.session.timeout.ms": str(self.config.consumer_session_timeout_ms),
            "consumer.heartbeat.interval.ms": str(self.config.consumer_heartbeat_interval_ms),
            "consumer.assignor": self.config.consumer_assignors[0],
            "consumer.offset.reset": "latest",
            "share.session.timeout.ms": str(self.config.share_session_timeout_ms),
            "share.heartbeat.interval.ms": str(self.config.share_heartbeat_interval_ms),
            "share.record.lock.duration.ms": str(self.config.share_record_lock_duration_ms),
            "share.auto.offset.reset": "latest",
            "share.isolation.level": "read_uncommitted",
        }
        lag_enabled = lag_balance.LAG_ASSIGNOR in self.config.consumer_assignors
        entries = []
        for name in GROUP_CONFIG_KEYS:
            if name == "consumer.offset.reset" and not lag_enabled and name not in cfg.raw:
                continue  # only the lag assignor reads it
            if name in cfg.raw:
                entries.append(ConfigEntry(name, cfg.raw[name], False))
            else:
                entries.append(ConfigEntry(name, defaults[name], True))
        return DescribeGroupConfigResponse(req.group_id, tuple(entries))

    # ================================================================== introspection

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The live (possibly uncommitted) consumer group, for tests and tooling."""
        return self.state.groups.get(group_id)


def _error_response(request: object, err: CoordinatorError) -> object:
    if isinstance(request, ConsumerGroupHeartbeatRequest):
        return ConsumerGroupHeartbeatResponse(error_code=err.code, error_message=err.message)
    if isinstance(request, ShareGroupHeartbeatRequest):
        return ShareGroupHeartbeatResponse(error_code=err.code, error_message=err.message)
    if isinstance(request, AlterSharePartitions):
        return AlterSharePartitionsResponse(err.code, err.message)
    if isinstance(request, PrepareAssignmentRequest):
        return PrepareAssignmentResponse(error_code=err.code, error_message=err.message)
    if isinstance(request, InstallAssignmentRequest):
        return InstallAssignmentResponse(error_code=err.code, error_message=err.message)
    if isinstance(request, (OffsetCommitRequest, TxnOffsetCommitRequest)):
        return offset_ops.commit_error_response(request, err.code)
    if isinstance(request, AlterGroupConfigRequest):
        return AlterGroupConfigResponse(request.group_id, err.code, err.message)
    if isinstance(request, OffsetDeleteRequest):
        return offset_ops.delete_error_response(err)
    if isinstance(request, DeleteGroupsRequest):
        return DeleteGroupsResponse(tuple(DeletedGroup(g, err.code, err.message) for g in request.group_ids))
    response = classic.error_response(request, err)
    if response is None:
        raise err
    return response

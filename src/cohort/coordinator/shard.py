"""The group coordinator shard: a sans-IO state machine owning a set of groups.

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
import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping

import re2

from cohort.assignors import registry
from cohort.assignors.api import Assignor
from cohort.coordinator import classic, lag_balance, migration
from cohort.coordinator import offsets as offset_ops
from cohort.coordinator.classic_group import ClassicGroupState
from cohort.coordinator.consumer_protocol import PROTOCOL_TYPE, Subscription, encode_assignment, encode_subscription
from cohort.coordinator.consumer_protocol import Assignment as ProtocolAssignment
from cohort.coordinator.config import GROUP_CONFIG_KEYS, CoordinatorConfig, GroupConfig
from cohort.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    GroupState,
    ShardState,
)
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.lag import NO_LOG_OFFSETS, LogOffsets, partition_lags
from cohort.coordinator.metadata import EMPTY_IMAGE, MetadataImage
from cohort.coordinator.reconcile import reconcile
from cohort.coordinator.static_members import check_instance_owner
from cohort.coordinator.records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupConfigurationKey,
    GroupConfigurationValue,
    GroupMetadataKey,
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
    DescribedMember,
    DescribedTopicPartitions,
    DescribedClassicGroup,
    DescribedClassicMember,
    DescribeGroupConfigRequest,
    DescribeGroupConfigResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
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
    Result,
    SyncGroupRequest,
)
from cohort.coordinator.target import LagProvider, compute_target
from cohort.coordinator.timers import Timers

OFFSETS_EXPIRATION_KEY = "offsets-expiration"


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


def session_timeout_key(group_id: str, member_id: str) -> str:
    return f"session-timeout-{group_id}-{member_id}"


def rebalance_timeout_key(group_id: str, member_id: str) -> str:
    return f"rebalance-timeout-{group_id}-{member_id}"


def _blank(s: str | None) -> bool:
    return s is None or not s.strip()


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
        self._topic_filter: Callable[[str], bool] | None = None  # see _heartbeat
        self._completions: list[tuple[int, object]] = []
        self._request_ids = itertools.count(1)
        self._request_id = 0
        self._now = 0  # the time of the operation in progress

    # ================================================================== write path

    def handle(self, request: object, now: int, request_id: int | None = None) -> Result:
        """Run one write operation; its records are already applied when this returns.

        A JoinGroup / SyncGroup that must wait answers `Parked(request_id)` (`request_id` as given,
        else allocated by the shard); its real response comes later in some result's
        `completions`."""
        if type(request) is ConsumerGroupHeartbeatRequest:
            response = self._steady_heartbeat(request, now)
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
        completions = classic.unload(self)
        self.timers.clear()
        return completions

    def _complete(self, request_id: int, response: object) -> None:
        """Release a parked request (classic.py): it rides on the current operation's result."""
        self._completions.append((request_id, response))

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
        """Apply a record read back from the log (it is committed by definition)."""
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
                self._schedule_session(group.group_id, member.member_id, now,
                                       session if classic_metadata is None else classic_metadata.session_timeout_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance(group.group_id, member, now)
        for classic_group in self.state.classic_groups.values():
            for classic_member in classic_group.members.values():
                self.timers.schedule(classic.heartbeat_key(classic_group.group_id, classic_member.member_id),
                                     now + classic_member.session_timeout_ms,
                                     ("classic-heartbeat", classic_group.group_id, classic_member.member_id))
        self.timers.schedule(OFFSETS_EXPIRATION_KEY, now + self.config.offsets_retention_check_interval_ms,
                             ("offsets",))
        self.lag_balance.clear()
        for group in self.state.groups.values():
            if lag_balance.uses_lag(self, group):
                lag_balance.schedule(self, group.group_id, now)

    # ================================================================== timers

    def _schedule_session(self, group_id: str, member_id: str, now: int, timeout: int) -> None:
        self.timers.schedule(session_timeout_key(group_id, member_id), now + timeout,
                             ("session", group_id, member_id))

    def _schedule_rebalance(self, group_id: str, member: ConsumerGroupMember, now: int) -> None:
        self.timers.schedule(rebalance_timeout_key(group_id, member.member_id), now + member.rebalance_timeout_ms,
                             ("rebalance", group_id, member.member_id, member.member_epoch))

    def _cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self.timers.cancel(session_timeout_key(group_id, member_id))
        self.timers.cancel(rebalance_timeout_key(group_id, member_id))
        self.timers.cancel(migration.member_join_key(group_id, member_id))
        self.timers.cancel(migration.member_sync_key(group_id, member_id))

    def _on_timer(self, payload: tuple, now: int) -> None:
        kind = payload[0]
        if kind == "classic-member-timeout":
            migration.on_member_timeout(self, payload, now)
            return
        if kind.startswith("classic-"):
            classic.on_timer(self, payload, now)
            return
        if kind == "lag":
            lag_balance.evaluate(self, payload[1], now)
            return
        if kind == "offsets":
            offset_ops.expire_offsets(self, now)
            self.timers.schedule(OFFSETS_EXPIRATION_KEY, now + self.config.offsets_retention_check_interval_ms,
                                 ("offsets",))
            return
        group = self.state.groups.get(payload[1])
        member = None if group is None else group.members.get(payload[2])
        if member is None:
            return
        if kind == "rebalance" and member.member_epoch != payload[3]:
            return
        self._remove_member(group, member)  # type: ignore[arg-type]

    # ================================================================== ConsumerGroupHeartbeat

    def _steady_heartbeat(self, req: ConsumerGroupHeartbeatRequest, now: int) -> ConsumerGroupHeartbeatResponse | None:
        """The common case answered without records or copies: a reconciled member, nothing changed.

        Returns None whenever anything might differ, and the full pipeline runs instead. Every
        condition here implies the validation the full path would do (ids of existing members and
        groups are never blank, epoch > 0), so the answer is the same.
        """
        epoch = req.member_epoch
        if epoch <= 0:
            return None
        group = self.state.groups.get(req.group_id)
        if group is None or group.refresh_metadata:
            return None
        member = group.members.get(req.member_id)
        if (member is None or member.member_epoch != epoch or member.state is not MemberState.STABLE
                or epoch != group.assignment_epoch or epoch != group.group_epoch
                or req.client_id != member.client_id or req.client_host != member.client_host
                or req.server_assignor is not None
                or (req.instance_id is not None and req.instance_id != member.instance_id)
                or (req.rack_id is not None and req.rack_id != member.rack_id)
                or (req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms != member.rebalance_timeout_ms)
                or (req.subscribed_topic_regex is not None
                    and req.subscribed_topic_regex != (member.subscribed_topic_regex or ""))):
            return None
        names = req.subscribed_topic_names
        if names is not None and frozenset(names) != member.subscribed_topic_names:
            return None
        group_id, member_id = req.group_id, req.member_id
        config = self.state.configs.get(group_id)
        if config is None:
            session, interval = self.config.consumer_session_timeout_ms, self.config.consumer_heartbeat_interval_ms
        else:
            session, interval = config.session_timeout(self.config), config.heartbeat_interval(self.config)
        self.timers.schedule(f"session-timeout-{group_id}-{member_id}", now + session,
                             ("session", group_id, member_id))
        full = req.rebalance_timeout_ms != -1 and req.topic_partitions is not None and (
            names is not None or req.subscribed_topic_regex is not None)
        return ConsumerGroupHeartbeatResponse(0, None, member_id, epoch, interval,
                                              member.assigned_partitions if full else None)

    def _heartbeat(self, req: ConsumerGroupHeartbeatRequest, now: int) -> ConsumerGroupHeartbeatResponse:
        self._topic_filter = req.topic_filter  # regexes resolved in this heartbeat see only these topics
        try:
            return self._heartbeat_checked(req, now)
        finally:
            self._topic_filter = None

    def _heartbeat_checked(self, req: ConsumerGroupHeartbeatRequest, now: int) -> ConsumerGroupHeartbeatResponse:
        self._validate_heartbeat(req)
        epoch = req.member_epoch
        if epoch < 0:
            return self._leave(req)
        gid = req.group_id
        group = self.state.groups.get(gid)
        if group is None:
            if epoch != 0:
                raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
            classic_group = self.state.classic_groups.get(gid)
            upgraded = None if classic_group is None else self._consumer_join_classic_group(classic_group, now)
            group = upgraded or ConsumerGroup(gid)  # materialised by the first record
        member_id = req.member_id
        if not member_id and req.api_version == 0:
            member_id = self._new_member_id()

        iid = req.instance_id
        members = group.members
        if (len(members) >= self.config.consumer_max_size and member_id not in members
                and not (iid is not None and iid in group.static_members)):
            raise CoordinatorError(
                Errors.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.config.consumer_max_size} members.",
            )

        # ---- resolve the member (dynamic, static, or static replacement)
        member = members.get(member_id)
        known = member is not None
        if iid is None:
            if member is None:
                if epoch != 0:
                    raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID,
                                           f"Member {member_id} is not a member of group {gid}.")
                member = ConsumerGroupMember(member_id)
            else:
                _check_member_epoch(member, epoch, req.topic_partitions)
        else:
            owner_id = group.static_members.get(iid)
            owner = None if owner_id is None else members[owner_id]
            if epoch == 0:
                parked = owner is not None and owner.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH
                if owner is None or (owner_id == member_id and not parked):
                    # new static member, or a rejoin of the owner itself (a lost join response)
                    if member is None:
                        member = ConsumerGroupMember(member_id)
                elif not parked:
                    raise CoordinatorError(
                        Errors.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {iid} cannot join the group because "
                        f"the instance id is owned by {owner_id} member.",
                    )
                else:
                    member = self._replace_static_member(group, owner, member_id)
                    known = True
                    group = self.state.groups[gid]
            else:
                check_instance_owner(group.static_members, member_id, iid)
                member = owner
                _check_member_epoch(member, epoch, req.topic_partitions)

        # ---- apply the request's changes ("null" means unchanged)
        names = member.subscribed_topic_names if req.subscribed_topic_names is None \
            else frozenset(req.subscribed_topic_names)
        regex = member.subscribed_topic_regex if req.subscribed_topic_regex is None else req.subscribed_topic_regex
        updated = member._replace(
            instance_id=member.instance_id if iid is None else iid,
            rack_id=member.rack_id if req.rack_id is None else req.rack_id,
            rebalance_timeout_ms=member.rebalance_timeout_ms if req.rebalance_timeout_ms == -1
            else req.rebalance_timeout_ms,
            server_assignor=member.server_assignor if req.server_assignor is None else req.server_assignor,
            subscribed_topic_names=names,
            subscribed_topic_regex=regex,
            client_id=req.client_id,
            client_host=req.client_host,
        )
        regex_changed = (regex or "") != (member.subscribed_topic_regex or "")
        if regex_changed and regex:
            try:
                re2.compile(regex)
            except re2.error as exc:
                raise CoordinatorError(
                    Errors.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
                ) from None
        subscription_changed = names != member.subscribed_topic_names or regex_changed

        group_config = self.state.group_config(gid)
        current = self._update_and_reconcile(group, member, updated, known, subscription_changed, regex_changed,
                                             req.topic_partitions, group_config.session_timeout(self.config), now)

        full = (req.rebalance_timeout_ms != -1 and req.topic_partitions is not None
                and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        send_assignment = epoch == 0 or full or current.assigned_partitions != member.assigned_partitions
        return ConsumerGroupHeartbeatResponse(
            member_id=member_id,
            member_epoch=current.member_epoch,
            heartbeat_interval_ms=group_config.heartbeat_interval(self.config),
            assignment=current.assigned_partitions if send_assignment else None,
        )

    def _update_and_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                              known: bool, subscription_changed: bool, regex_changed: bool,
                              owned: Mapping[uuid.UUID, Iterable[int]] | None, session: int,
                              now: int) -> ConsumerGroupMember:
        """Steps 4-7 of the heartbeat, shared with classic members of a consumer group (migration.py):
        the member's new metadata, the group-epoch bump, the target assignment, reconciliation and
        the session timer. Returns the member as reconciled."""
        gid, member_id = group.group_id, updated.member_id
        regex = updated.subscribed_topic_regex
        order = self.config.consumer_assignors
        assignor_before = group.preferred_assignor(order)
        if not known or not updated.same_metadata(member):
            self._emit(ConsumerGroupMemberMetadataKey(gid, member_id), updated.metadata_value())
            group = self.state.groups[gid]
        bump = subscription_changed or group.group_epoch == 0

        if regex_changed:
            if regex and regex not in group.resolved_regexes:
                self._emit_regex(group, regex, now)
            old_regex = member.subscribed_topic_regex
            if old_regex and old_regex not in group.regex_counts and old_regex in group.resolved_regexes:
                self._emit(ConsumerGroupRegularExpressionKey(gid, old_regex), None)
        refresh = group.refresh_metadata
        if refresh:
            for used in list(group.regex_counts):
                if self._emit_regex(group, used, now):
                    bump = True
        metadata_hash = group.metadata_hash
        if bump or refresh:
            metadata_hash = self.image.subscription_hash(group.subscribed_topic_names())
            if metadata_hash != group.metadata_hash:
                bump = True
        if known and group.preferred_assignor(order) != assignor_before:
            bump = True  # trunk KAFKA-20434
        if bump:
            self._emit(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash))

        # ---- target assignment, computed lazily when the group epoch is ahead
        if group.group_epoch > group.assignment_epoch:
            self._update_target(group)

        # ---- reconcile the member towards its target
        current = group.members[member_id]
        target_epoch = group.assignment_epoch
        if not current.is_reconciled_to(target_epoch) or subscription_changed:
            reconciled = reconcile(current, target_epoch, group.target_assignment.get(member_id, EMPTY_ASSIGNMENT),
                                   group.partition_epoch, owned)
            if reconciled is not current:
                self._emit(ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), reconciled.assignment_value())
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                    self._deferred.append(lambda m=reconciled: self._schedule_rebalance(gid, m, now))
                else:
                    self._deferred.append(lambda: self.timers.cancel(rebalance_timeout_key(gid, member_id)))
                current = reconciled

        self._deferred.append(lambda: self._schedule_session(gid, member_id, now, session))
        if refresh:
            self._deferred.append(lambda: setattr(self.state.groups.get(gid) or group, "refresh_metadata", False))
        return current

    def _validate_heartbeat(self, req: ConsumerGroupHeartbeatRequest) -> None:
        def invalid(message: str) -> CoordinatorError:
            return CoordinatorError(Errors.INVALID_REQUEST, message)

        epoch = req.member_epoch
        if _blank(req.member_id) and (req.api_version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH):
            raise invalid("MemberId can't be empty.")
        if _blank(req.group_id):
            raise invalid("GroupId can't be empty.")
        if req.instance_id is not None and _blank(req.instance_id):
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and _blank(req.rack_id):
            raise invalid("RackId can't be empty.")
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or any(req.topic_partitions.values()):
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.config.consumer_assignors:
            raise CoordinatorError(
                Errors.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.config.consumer_assignors)}.",
            )

    def _consumer_join_classic_group(self, group, now: int) -> ConsumerGroup | None:
        """A consumer-protocol member joins where a classic group lives: an empty one gives way, a
        non-empty one is upgraded in place (migration.py)."""
        if group.members:
            return migration.upgrade(self, group, now)
        if group.persisted is not None:
            self._emit(GroupMetadataKey(group.group_id), None)
        self.state.classic_groups.pop(group.group_id, None)
        return None

    def _leave(self, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        gid, member_id = req.group_id, req.member_id
        group = self.state.groups.get(gid)
        if group is None:
            raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        iid = req.instance_id
        if iid is None:
            member = group.members.get(member_id)
            if member is None:
                raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.")
        else:
            owner_id = check_instance_owner(group.static_members, member_id, iid)
            member = group.members[owner_id]
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                parked = member._replace(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                         partitions_pending_revocation=EMPTY_ASSIGNMENT)
                self._emit(ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), parked.assignment_value())
                return ConsumerGroupHeartbeatResponse(member_id=member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        self._remove_member(group, member)
        return ConsumerGroupHeartbeatResponse(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    def _remove_member(self, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
        """Fence a member: its three tombstones, unused regexes, then a group epoch bump (or, for
        the last consumer-protocol member of a mixed group, the downgrade to a classic group)."""
        gid, member_id = group.group_id, member.member_id
        if group.classic_members and migration.should_downgrade(self, group, member):
            migration.downgrade(self, group, member, self._now)
            return
        self._emit(ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), None)
        self._emit(ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None)
        self._emit(ConsumerGroupMemberMetadataKey(gid, member_id), None)
        regex = member.subscribed_topic_regex
        if regex and regex not in group.regex_counts and regex in group.resolved_regexes:
            self._emit(ConsumerGroupRegularExpressionKey(gid, regex), None)
        new_epoch = group.group_epoch + 1
        metadata_hash = self.image.subscription_hash(group.subscribed_topic_names())
        self._emit(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(new_epoch, metadata_hash))
        if not group.members:
            self._emit(ConsumerGroupTargetAssignmentMetadataKey(gid),
                       ConsumerGroupTargetAssignmentMetadataValue(new_epoch))  # trunk KAFKA-20442
        self._deferred.append(lambda: self._cancel_member_timers(gid, member_id))

    def _replace_static_member(self, group: ConsumerGroup, old: ConsumerGroupMember,
                               new_member_id: str) -> ConsumerGroupMember:
        gid = group.group_id
        old_target = group.target_assignment.get(old.member_id)
        self._emit(ConsumerGroupCurrentMemberAssignmentKey(gid, old.member_id), None)
        self._emit(ConsumerGroupTargetAssignmentMemberKey(gid, old.member_id), None)
        self._emit(ConsumerGroupMemberMetadataKey(gid, old.member_id), None)
        new = old._replace(member_id=new_member_id, member_epoch=0, previous_member_epoch=0)
        self._emit(ConsumerGroupMemberMetadataKey(gid, new_member_id), new.metadata_value())
        if old_target is not None:
            self._emit(ConsumerGroupTargetAssignmentMemberKey(gid, new_member_id),
                       ConsumerGroupTargetAssignmentMemberValue(old_target))
        self._emit(ConsumerGroupCurrentMemberAssignmentKey(gid, new_member_id), new.assignment_value())
        old_id = old.member_id
        self._deferred.append(lambda: self._cancel_member_timers(gid, old_id))
        return self.state.groups[gid].members[new_member_id]

    def _emit_regex(self, group: ConsumerGroup, regex: str, now: int) -> bool:
        """Resolve a regex against the image (RE2, full match), keeping only the topics the
        heartbeating member may describe when ACLs are on (Kafka resolves with the request
        context of the member whose heartbeat triggered the refresh); emit a record if the
        result changed."""
        try:
            pattern = re2.compile(regex)
        except re2.error:
            return False
        allowed = self._topic_filter
        topics = tuple(sorted(n for n in self.image.by_name if pattern.fullmatch(n) and (allowed is None or allowed(n))))
        old = group.resolved_regexes.get(regex)
        if old is not None and old.topics == frozenset(topics):
            return False
        self._emit(ConsumerGroupRegularExpressionKey(group.group_id, regex),
                   ConsumerGroupRegularExpressionValue(topics, self.image.version, now))
        return True

    def assignor_name(self, group: ConsumerGroup) -> str:
        """The members' most common choice, else the group's `consumer.assignor`, else the broker default."""
        return (group.preferred_assignor(self.config.consumer_assignors)
                or self.state.group_config(group.group_id).assignor
                or self.config.consumer_assignors[0])

    def lag_evaluation_due(self, now: int) -> bool:
        """Whether a lag evaluation is due at `now` (it may run the lag assignor: worth a worker thread)."""
        return self.timers.any_due(now, lag_balance.LAG_EVALUATION_PREFIX)

    def assignor(self, name: str) -> Assignor:
        """The assignor registered under `name`: injected ones first, then cohort's registry."""
        found = self._assignors.get(name)
        if found is None:
            found = self._assignors[name] = registry.get(name)
        return found

    def _update_target(self, group: ConsumerGroup) -> None:
        gid, epoch = group.group_id, group.group_epoch
        name = self.assignor_name(group)
        self._write_target(gid, epoch, compute_target(group, self.image, self.assignor(name), epoch, self.lag_provider))
        if name == lag_balance.LAG_ASSIGNOR:
            now = self._now
            self._deferred.append(lambda: lag_balance.arm(self, gid, now))

    def _write_target(self, gid: str, epoch: int, changed: Mapping[str, Assignment]) -> None:
        """The records of a new target assignment: the changed members' (by member id), then its epoch."""
        for member_id in sorted(changed):
            self._emit(ConsumerGroupTargetAssignmentMemberKey(gid, member_id),
                       ConsumerGroupTargetAssignmentMemberValue(changed[member_id]))
        self._emit(ConsumerGroupTargetAssignmentMetadataKey(gid), ConsumerGroupTargetAssignmentMetadataValue(epoch))

    # ================================================================== groups: delete / configs

    def _delete_groups(self, req: DeleteGroupsRequest, now: int) -> DeleteGroupsResponse:
        results = []
        for gid in req.group_ids:
            classic_group = self.state.classic_groups.get(gid)
            if classic_group is not None:
                if not classic_group.is_in(ClassicGroupState.EMPTY):
                    results.append(DeletedGroup(gid, Errors.NON_EMPTY_GROUP, f"Group {gid} is not empty."))
                    continue
                offset_ops.delete_all_offsets(self, gid)
                self._delete_classic_group(classic_group)
                results.append(DeletedGroup(gid))
                continue
            group = self.state.groups.get(gid)
            if group is None and gid not in self.state.offsets:
                results.append(DeletedGroup(gid, Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found."))
                continue
            if group is not None and group.members:
                results.append(DeletedGroup(gid, Errors.NON_EMPTY_GROUP, f"Group {gid} is not empty."))
                continue
            offset_ops.delete_all_offsets(self, gid)
            if group is not None:
                self._delete_group_records(group)
            results.append(DeletedGroup(gid))
        return DeleteGroupsResponse(tuple(results))

    def _delete_group_records(self, group: ConsumerGroup) -> None:
        """Tombstones for an empty group, in Kafka's order."""
        gid = group.group_id
        for member_id in list(group.target_assignment):
            self._emit(ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None)
        self._emit(ConsumerGroupTargetAssignmentMetadataKey(gid), None)
        for regex in sorted(group.resolved_regexes):
            self._emit(ConsumerGroupRegularExpressionKey(gid, regex), None)
        self._emit(ConsumerGroupMetadataKey(gid), None)

    def _delete_classic_group(self, group) -> None:
        """An empty classic group goes Dead: its tombstone if it was ever persisted, then it is gone."""
        group.transition_to(ClassicGroupState.DEAD, group.state_timestamp)
        if group.persisted is not None:
            self._emit(GroupMetadataKey(group.group_id), None)
        self.state.classic_groups.pop(group.group_id, None)

    def _alter_group_config(self, req: AlterGroupConfigRequest, now: int) -> AlterGroupConfigResponse:
        gid = req.group_id
        if _blank(gid):
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
        return offset_ops.commit_offsets(self, req, now)

    def _delete_offsets(self, req: OffsetDeleteRequest, now: int):
        return offset_ops.delete_offsets(self, req)

    def _join_group(self, req: JoinGroupRequest, now: int):
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None and consumer.members and not _blank(req.group_id):
            classic.validate_session_timeout(self, req)
            return migration.join(self, consumer, req, now)
        return classic.join_group(self, req, now, self._request_id)

    def _sync_group(self, req: SyncGroupRequest, now: int):
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None:
            return migration.sync(self, consumer, req, now)
        return classic.sync_group(self, req, now, self._request_id)

    def _classic_heartbeat(self, req: HeartbeatRequest, now: int):
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None:
            return migration.heartbeat(self, consumer, req, now)
        return classic.heartbeat(self, req, now)

    def _leave_group(self, req: LeaveGroupRequest, now: int):
        consumer = self.state.groups.get(req.group_id)
        if consumer is not None:
            return migration.leave(self, consumer, req, now)
        return classic.leave_group(self, req, now)

    _WRITE_HANDLERS: dict[type, Callable] = {
        ConsumerGroupHeartbeatRequest: _heartbeat,
        JoinGroupRequest: _join_group,
        SyncGroupRequest: _sync_group,
        HeartbeatRequest: _classic_heartbeat,
        LeaveGroupRequest: _leave_group,
        OffsetCommitRequest: _commit_offsets,
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
        raise TypeError(f"not a coordinator read request: {type(request).__name__}")

    def fetch_offsets(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        return offset_ops.fetch_offsets(self, req)

    def describe_groups(self, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
        described = []
        for gid in req.group_ids:
            if _blank(gid):
                described.append(DescribedGroup(gid, Errors.INVALID_GROUP_ID, "Group id can't be empty."))
                continue
            group = self.committed_state(gid).groups.get(gid)
            if group is None:
                message = (f"Group {gid} is not a consumer group." if (gid in self.state.offsets
                           and not self._pending_groups.get(gid)) or gid in self.state.classic_groups
                           else f"Group {gid} not found.")
                described.append(DescribedGroup(gid, Errors.GROUP_ID_NOT_FOUND, message))
                continue
            described.append(self._describe(group))
        return ConsumerGroupDescribeResponse(tuple(described))

    def _describe(self, group: ConsumerGroup) -> DescribedGroup:
        members = []
        for member_id in sorted(group.members):
            m = group.members[member_id]
            members.append(DescribedMember(
                member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
                subscribed_topic_regex=m.subscribed_topic_regex or None,
                assignment=self._describe_assignment(m.assigned_partitions),
                target_assignment=self._describe_assignment(group.target_assignment.get(member_id, EMPTY_ASSIGNMENT)),
                member_type=0 if m.is_classic else 1,
            ))
        return DescribedGroup(
            group_id=group.group_id, group_state=group.state().value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self.assignor_name(group),
            members=tuple(members),
        )

    def _describe_assignment(self, assignment: Assignment) -> tuple[DescribedTopicPartitions, ...]:
        by_id = self.image.by_id
        out = []
        for topic_id in sorted(assignment, key=lambda t: (by_id[t].name if t in by_id else "", t)):
            topic = by_id.get(topic_id)
            if topic is not None:
                out.append(DescribedTopicPartitions(topic_id, topic.name, tuple(assignment[topic_id])))
        return tuple(out)

    def describe_classic_groups(self, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
        """DescribeGroups (API 15): classic groups as Kafka describes them, consumer groups as Kafka
        4.0 does (see `_describe_as_classic`)."""
        return classic.describe_groups(self, req)

    def _describe_as_classic(self, group: ConsumerGroup) -> DescribedClassicGroup:
        """A consumer group in DescribeGroups (Kafka 4.0): its state name, protocol type `consumer`,
        the assignor as protocol data, each member's subscription and current assignment encoded
        in the ConsumerProtocol."""
        by_id = self.image.by_id
        members = []
        for member_id in sorted(group.members):
            m = group.members[member_id]
            owned = tuple((by_id[t].name, tuple(ps)) for t, ps in sorted(
                m.assigned_partitions.items(), key=lambda kv: by_id[kv[0]].name if kv[0] in by_id else "")
                if t in by_id)
            subscription = encode_subscription(Subscription(tuple(sorted(group.member_topic_names(m))), None, owned,
                                                            -1, m.rack_id))
            members.append(DescribedClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                                                  subscription, encode_assignment(ProtocolAssignment(owned))))
        assignor = self.assignor_name(group)
        return DescribedClassicGroup(group.group_id, group_state=group.state().value, protocol_type=PROTOCOL_TYPE,
                                     protocol_data=assignor, members=tuple(members))

    def list_groups(self, req: ListGroupsRequest | None = None) -> ListGroupsResponse:
        req = req or ListGroupsRequest()
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        listed = []
        classic_groups = self.state.classic_groups
        for gid in sorted(self.state.groups.keys() | self.state.offsets.keys() | self._pending_groups.keys()
                          | classic_groups.keys()):
            view = self.committed_state(gid)
            group = view.groups.get(gid)
            classic_group = classic_groups.get(gid)
            if classic_group is not None and (classic_group.members or classic_group.persisted is not None
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


def _check_member_epoch(member: ConsumerGroupMember, received: int,
                        owned: Mapping[uuid.UUID, Iterable[int]] | None) -> None:
    """Kafka's epoch fencing, with the trunk rule that a known member may rejoin with epoch 0."""
    stored = member.member_epoch
    if received == 0 or received == stored:
        return
    if received > stored:
        raise CoordinatorError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the "
            f"group coordinator ({stored}). The member must abandon all its partitions and rejoin.",
        )
    if received != member.previous_member_epoch or owned is None or not _is_subset(owned, member.assigned_partitions):
        raise CoordinatorError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
            f"group coordinator ({stored}). The member must abandon all its partitions and rejoin.",
        )


def _is_subset(owned: Mapping[uuid.UUID, Iterable[int]], assigned: Assignment) -> bool:
    for topic_id, parts in owned.items():
        parts = tuple(parts)
        if parts and not set(parts).issubset(assigned.get(topic_id, ())):
            return False
    return True


def _error_response(request: object, err: CoordinatorError) -> object:
    if isinstance(request, ConsumerGroupHeartbeatRequest):
        return ConsumerGroupHeartbeatResponse(error_code=err.code, error_message=err.message)
    if isinstance(request, OffsetCommitRequest):
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

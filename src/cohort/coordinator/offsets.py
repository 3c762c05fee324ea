"""Offset commit, fetch, delete and expiry (Kafka's OffsetMetadataManager) on top of a ctx.

Member-epoch validation follows KIP-848: consumer-protocol members must commit with their
current member epoch (STALE_MEMBER_EPOCH otherwise) and OffsetCommit >= v9; classic members in a
consumer group get ILLEGAL_GENERATION; admin commits (epoch < 0) are accepted only by empty
groups or groups that do not exist (a "simple" group holding nothing but offsets).

Classic groups follow the classic rules: a member commits with the group's generation
(ILLEGAL_GENERATION otherwise, UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID for unknown or fenced
members), nobody commits while the group is CompletingRebalance (REBALANCE_IN_PROGRESS), and a
manual commit (generation -1, empty member id, no instance id) is accepted only while the group is
Empty. A member's commit counts as a heartbeat.
"""

from __future__ import annotations

from cohort.coordinator import classic, consumer
from cohort.coordinator.classic_group import ClassicGroup, ClassicGroupState
from cohort.coordinator.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_subscription
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.records import OffsetCommitKey, OffsetCommitValue, TxnMarker, TxnOffsetCommitKey
from cohort.coordinator.requests import (
    FetchedPartition,
    FetchedTopic,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    TopicResult,
    TxnOffsetCommitRequest,
)



def _validate_commit(ctx: GroupContext, req: OffsetCommitRequest, now: int) -> None:
    gid = req.group_id
    if not gid or not gid.strip():
        raise CoordinatorError(Errors.INVALID_GROUP_ID, "Group id can't be empty.")
    epoch = req.generation_id_or_member_epoch
    classic_group = ctx.state.classic_groups.get(gid)
    if classic_group is not None:
        _validate_classic_commit(ctx, classic_group, req, now)
        return
    group = ctx.state.groups.get(gid)
    if group is None:
        if epoch < 0:
            return
        if gid in ctx.state.offsets:
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {gid}.")
        if req.api_version >= 9:
            raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        raise CoordinatorError(Errors.ILLEGAL_GENERATION, f"Group {gid} has no generation {epoch}.")
    if epoch < 0 and not group.members:
        return
    member = group.members.get(req.member_id)
    if member is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {gid}.")
    if member.is_classic:
        if epoch != member.member_epoch:
            raise CoordinatorError(Errors.ILLEGAL_GENERATION,
                                   f"The generation id {epoch} does not match the member epoch {member.member_epoch}.")
        return
    if req.api_version < 9:
        raise CoordinatorError(Errors.UNSUPPORTED_VERSION,
                               "OffsetCommit version 9 or above must be used by members using the consumer protocol.")
    if epoch != member.member_epoch:
        raise CoordinatorError(Errors.STALE_MEMBER_EPOCH,
                               f"The member epoch {epoch} is stale; the current member epoch is {member.member_epoch}.")


def _validate_classic_commit(ctx: GroupContext, group: ClassicGroup, req: OffsetCommitRequest,
                             now: int) -> None:
    epoch = req.generation_id_or_member_epoch
    if group.is_in(ClassicGroupState.DEAD):
        raise CoordinatorError(Errors.COORDINATOR_NOT_AVAILABLE, f"Group {group.group_id} is dead.")
    if epoch < 0 and group.is_in(ClassicGroupState.EMPTY):
        return
    member = None
    if epoch >= 0 or req.member_id or req.group_instance_id is not None:
        member = classic.validate_member(group, req.member_id, req.group_instance_id)
        if epoch != group.generation_id:
            raise CoordinatorError(Errors.ILLEGAL_GENERATION,
                                   f"The generation id {epoch} is not the group's {group.generation_id}.")
    elif not group.is_in(ClassicGroupState.EMPTY):
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID,
                               f"Group {group.group_id} has members: a commit without a member id is not accepted.")
    if group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
        raise CoordinatorError(Errors.REBALANCE_IN_PROGRESS, "The group is completing a rebalance.")
    if member is not None:
        gid, mid, timeout = group.group_id, member.member_id, member.session_timeout_ms
        ctx.after(lambda: ctx.timers.schedule(
            classic.heartbeat_key(gid, mid), now + timeout, ("classic-heartbeat", gid, mid)))


def commit_offsets(ctx: GroupContext, req: OffsetCommitRequest, now: int) -> OffsetCommitResponse:
    _validate_commit(ctx, req, now)
    expire = now + req.retention_time_ms if req.retention_time_ms >= 0 else -1
    gid = req.group_id
    return _write_offsets(ctx, req.topics, now, expire, lambda topic, partition: OffsetCommitKey(gid, topic, partition))


def _write_offsets(ctx: GroupContext, topics, now: int, expire: int, key_of) -> OffsetCommitResponse:
    """One record per partition (``key_of(topic, partition)``); metadata longer than
    ``offsets.metadata.max.bytes`` is OFFSET_METADATA_TOO_LARGE for that partition only."""
    max_bytes = ctx.config.offset_metadata_max_bytes
    answered = []
    for topic in topics:
        results = []
        for p in topic.partitions:
            metadata = p.metadata or ""
            if len(metadata.encode()) > max_bytes:
                results.append(PartitionResult(p.partition, Errors.OFFSET_METADATA_TOO_LARGE))
                continue
            ctx.append(key_of(topic.name, p.partition), OffsetCommitValue(p.offset, p.leader_epoch, metadata, now, expire))
            results.append(PartitionResult(p.partition))
        answered.append(TopicResult(topic.name, tuple(results)))
    return OffsetCommitResponse(tuple(answered))


def _validate_transactional_commit(ctx: GroupContext, req: TxnOffsetCommitRequest) -> None:
    """Kafka's validateTransactionalOffsetCommit (KIP-447): a zombie with an old generation or
    member epoch is fenced here even while its producer is still valid."""
    gid = req.group_id
    if not gid or not gid.strip():
        raise CoordinatorError(Errors.INVALID_GROUP_ID, "Group id can't be empty.")
    epoch = req.generation_id
    classic_group = ctx.state.classic_groups.get(gid)
    if classic_group is not None:
        if classic_group.is_in(ClassicGroupState.DEAD):
            raise CoordinatorError(Errors.COORDINATOR_NOT_AVAILABLE, f"Group {gid} is dead.")
        if epoch < 0 and classic_group.is_in(ClassicGroupState.EMPTY):
            return
        if epoch >= 0 or req.member_id or req.group_instance_id is not None:
            classic.validate_member(classic_group, req.member_id, req.group_instance_id)
            if epoch != classic_group.generation_id:
                raise CoordinatorError(Errors.ILLEGAL_GENERATION,
                                       f"The generation id {epoch} is not the group's {classic_group.generation_id}.")
        return  # without member data, a transactional commit is accepted (never REBALANCE_IN_PROGRESS)
    group = ctx.state.groups.get(gid)
    if group is None:
        if epoch < 0:
            return  # a "simple" group of offsets only
        raise CoordinatorError(Errors.ILLEGAL_GENERATION, f"Group {gid} has no generation {epoch}.")
    if epoch < 0 and not group.members:
        return
    if epoch == -1 and not req.member_id and req.group_instance_id is None:
        return  # an old-style transactional commit, without the consumer's group metadata
    member = group.members.get(req.member_id)
    if member is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {gid}.")
    if epoch != member.member_epoch:  # Kafka turns STALE_MEMBER_EPOCH into ILLEGAL_GENERATION here
        raise CoordinatorError(Errors.ILLEGAL_GENERATION,
                               f"The member epoch {epoch} is not the current member epoch {member.member_epoch}.")


def commit_transactional_offsets(ctx: GroupContext, req: TxnOffsetCommitRequest, now: int) -> OffsetCommitResponse:
    """TxnOffsetCommit: the offsets are written in the producer's transactional batch and stay
    pending (invisible to OffsetFetch) until its COMMIT marker; an ABORT drops them."""
    _validate_transactional_commit(ctx, req)
    gid, pid, epoch = req.group_id, req.producer_id, req.producer_epoch
    return _write_offsets(ctx, req.topics, now, -1,
                          lambda topic, partition: TxnOffsetCommitKey(gid, topic, partition, pid, epoch))


def transaction_marker(req) -> TxnMarker:
    """The marker record a TxnMarkerRequest writes."""
    return TxnMarker(req.producer_id, req.producer_epoch, req.commit, req.coordinator_epoch)


def commit_error_response(req: OffsetCommitRequest, code: Errors) -> OffsetCommitResponse:
    return OffsetCommitResponse(tuple(
        TopicResult(t.name, tuple(PartitionResult(p.partition, code) for p in t.partitions)) for t in req.topics
    ))


def fetch_offsets(ctx: GroupContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    """Committed offsets as of the last durable write; with RequireStable, as of the latest
    write (Kafka runs such a fetch as a write operation: it reads the newest state, pending
    transactional offsets included, and its answer waits for the writes before it)."""
    gid = req.group_id
    view = ctx.state if req.require_stable else ctx.committed_state(gid)
    group = view.groups.get(gid)
    if group is not None and (req.member_id is not None or req.member_epoch >= 0):
        member = group.members.get(req.member_id or "")
        if member is None:
            return OffsetFetchResponse(gid, (), Errors.UNKNOWN_MEMBER_ID,
                                       f"Member {req.member_id} is not a member of group {gid}.")
        if req.member_epoch != member.member_epoch:
            code = Errors.ILLEGAL_GENERATION if member.is_classic else Errors.STALE_MEMBER_EPOCH
            return OffsetFetchResponse(gid, (), code,
                                       f"The member epoch {req.member_epoch} is stale; "
                                       f"the current member epoch is {member.member_epoch}.")
    stored = view.offsets.get(gid, {})
    # RequireStable (v7+): a partition whose transactional offset awaits its marker is
    # UNSTABLE_OFFSET_COMMIT (the client retries).
    unstable = view.pending_partitions(gid) if req.require_stable else ()
    topics = []
    if req.topics is None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in stored:
            by_topic.setdefault(topic, []).append(partition)
        wanted = [(t, sorted(ps)) for t, ps in sorted(by_topic.items())]
    else:
        wanted = [(t.name, list(t.partitions)) for t in req.topics]
    for name, partitions in wanted:
        fetched = []
        for p in partitions:
            value = stored.get((name, p))
            if unstable and (name, p) in unstable:
                fetched.append(FetchedPartition(p, error_code=Errors.UNSTABLE_OFFSET_COMMIT))
            elif value is None:
                fetched.append(FetchedPartition(p))
            else:
                fetched.append(FetchedPartition(p, value.offset, value.leader_epoch, value.metadata))
        topics.append(FetchedTopic(name, tuple(fetched)))
    return OffsetFetchResponse(gid, tuple(topics))


def delete_offsets(ctx: GroupContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    gid = req.group_id
    group = ctx.state.groups.get(gid)
    stored = ctx.state.offsets.get(gid)
    classic_group = ctx.state.classic_groups.get(gid)
    if group is None and stored is None and classic_group is None:
        raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
    subscribed = group.subscribed_topic_names() if group is not None and group.members else set()
    if classic_group is not None and not classic_group.is_in(ClassicGroupState.EMPTY):
        if classic_group.protocol_type != PROTOCOL_TYPE:
            raise CoordinatorError(Errors.NON_EMPTY_GROUP, f"Group {gid} is not empty.")
        subscribed = classic_subscribed_topics(classic_group) or set()
    topics = []
    for topic in req.topics:
        results = []
        for p in topic.partitions:
            if topic.name in subscribed:
                results.append(PartitionResult(p, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            if stored is not None and (topic.name, p) in stored:
                ctx.append(OffsetCommitKey(gid, topic.name, p), None)
            results.append(PartitionResult(p))
        topics.append(TopicResult(topic.name, tuple(results)))
    return OffsetDeleteResponse(tuple(topics))


def delete_error_response(err: CoordinatorError) -> OffsetDeleteResponse:
    return OffsetDeleteResponse((), err.code, err.message)


def delete_all_offsets(ctx: GroupContext, group_id: str) -> None:
    for topic, partition in sorted(ctx.state.offsets.get(group_id, {})):
        ctx.append(OffsetCommitKey(group_id, topic, partition), None)


def _expired(value: OffsetCommitValue, now: int, retention_ms: int) -> bool:
    if value.expire_timestamp != -1:
        return now >= value.expire_timestamp
    return now - value.commit_timestamp >= retention_ms


def classic_subscribed_topics(group: ClassicGroup) -> set[str] | None:
    """The topics a classic `consumer` group's members subscribe to (None if undecodable)."""
    topics: set[str] = set()
    for member in group.members.values():
        try:
            topics.update(decode_subscription(member.metadata(group.protocol_name)).topics)
        except ConsumerProtocolError:
            return None
    return topics


def _classic_expired(group: ClassicGroup, stored: dict, now: int, retention: int) -> list:
    """Kafka's ClassicGroup.offsetExpirationCondition: Empty groups count from the time they became
    empty, Stable `consumer` groups expire offsets of topics nobody subscribes to, other states never."""
    if group.is_in(ClassicGroupState.EMPTY):
        def base(v):
            return group.state_timestamp if group.state_timestamp >= 0 else v.commit_timestamp
        subscribed: set[str] = set()
    elif group.is_in(ClassicGroupState.STABLE) and group.protocol_type == PROTOCOL_TYPE:
        def base(v):
            return v.commit_timestamp
        found = classic_subscribed_topics(group)
        if found is None:
            return []  # unknown subscriptions: keep everything
        subscribed = found
    else:
        return []
    return sorted(tp for tp, v in stored.items() if tp[0] not in subscribed and (
        now >= v.expire_timestamp if v.expire_timestamp != -1 else now - base(v) >= retention))


def expire_offsets(ctx: GroupContext, now: int) -> None:
    """Tombstone expired offsets of topics a group does not subscribe to; delete groups left empty."""
    state = ctx.state
    retention = ctx.config.offsets_retention_ms
    for gid in sorted(state.classic_groups.keys() & state.offsets.keys()):
        group = state.classic_groups[gid]
        stored = state.offsets[gid]
        pending = state.pending_partitions(gid)
        expired = [tp for tp in _classic_expired(group, stored, now, retention) if tp not in pending]
        all_expired = len(expired) == len(stored)
        for topic, partition in expired:
            ctx.append(OffsetCommitKey(gid, topic, partition), None)
        if all_expired and group.is_in(ClassicGroupState.EMPTY) and not group.pending_members:
            classic.delete_group(ctx, group)
    for gid in sorted(state.offsets.keys() | state.groups.keys()):
        if gid in state.classic_groups:
            continue
        group = state.groups.get(gid)
        stored = state.offsets.get(gid, {})
        subscribed = group.subscribed_topic_names() if group is not None else set()
        pending = state.pending_partitions(gid)
        expired = sorted(tp for tp, v in stored.items() if tp[0] not in subscribed and tp not in pending
                         and _expired(v, now, retention))
        all_expired = len(expired) == len(stored)
        for topic, partition in expired:
            ctx.append(OffsetCommitKey(gid, topic, partition), None)
        if all_expired and group is not None and not group.members:
            consumer.delete_group_records(ctx, group)

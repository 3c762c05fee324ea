"""Offset commit, fetch, delete and expiry (Kafka's OffsetMetadataManager) on top of a shard.

Member-epoch validation follows KIP-848: consumer-protocol members must commit with their
current member epoch (STALE_MEMBER_EPOCH otherwise) and OffsetCommit >= v9; classic members in a
consumer group get ILLEGAL_GENERATION; admin commits (epoch < 0) are accepted only by empty
groups or groups that do not exist (a "simple" group holding nothing but offsets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.records import OffsetCommitKey, OffsetCommitValue
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
)

if TYPE_CHECKING:
    from cohort.coordinator.shard import GroupCoordinatorShard


def _validate_commit(shard: "GroupCoordinatorShard", req: OffsetCommitRequest) -> None:
    gid = req.group_id
    if not gid or not gid.strip():
        raise CoordinatorError(Errors.INVALID_GROUP_ID, "Group id can't be empty.")
    epoch = req.generation_id_or_member_epoch
    group = shard.state.groups.get(gid)
    if group is None:
        if epoch < 0:
            return
        if gid in shard.state.offsets:
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


def commit_offsets(shard: "GroupCoordinatorShard", req: OffsetCommitRequest, now: int) -> OffsetCommitResponse:
    _validate_commit(shard, req)
    max_bytes = shard.config.offset_metadata_max_bytes
    expire = now + req.retention_time_ms if req.retention_time_ms >= 0 else -1
    topics = []
    for topic in req.topics:
        results = []
        for p in topic.partitions:
            metadata = p.metadata or ""
            if len(metadata.encode()) > max_bytes:
                results.append(PartitionResult(p.partition, Errors.OFFSET_METADATA_TOO_LARGE))
                continue
            shard._emit(OffsetCommitKey(req.group_id, topic.name, p.partition),
                        OffsetCommitValue(p.offset, p.leader_epoch, metadata, now, expire))
            results.append(PartitionResult(p.partition))
        topics.append(TopicResult(topic.name, tuple(results)))
    return OffsetCommitResponse(tuple(topics))


def commit_error_response(req: OffsetCommitRequest, code: Errors) -> OffsetCommitResponse:
    return OffsetCommitResponse(tuple(
        TopicResult(t.name, tuple(PartitionResult(p.partition, code) for p in t.partitions)) for t in req.topics
    ))


def fetch_offsets(shard: "GroupCoordinatorShard", req: OffsetFetchRequest) -> OffsetFetchResponse:
    gid = req.group_id
    view = shard.committed_state(gid)
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
            if value is None:
                fetched.append(FetchedPartition(p))
            else:
                fetched.append(FetchedPartition(p, value.offset, value.leader_epoch, value.metadata))
        topics.append(FetchedTopic(name, tuple(fetched)))
    return OffsetFetchResponse(gid, tuple(topics))


def delete_offsets(shard: "GroupCoordinatorShard", req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    gid = req.group_id
    group = shard.state.groups.get(gid)
    stored = shard.state.offsets.get(gid)
    if group is None and stored is None:
        raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
    subscribed = group.subscribed_topic_names() if group is not None and group.members else set()
    topics = []
    for topic in req.topics:
        results = []
        for p in topic.partitions:
            if topic.name in subscribed:
                results.append(PartitionResult(p, Errors.GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            if stored is not None and (topic.name, p) in stored:
                shard._emit(OffsetCommitKey(gid, topic.name, p), None)
            results.append(PartitionResult(p))
        topics.append(TopicResult(topic.name, tuple(results)))
    return OffsetDeleteResponse(tuple(topics))


def delete_error_response(err: CoordinatorError) -> OffsetDeleteResponse:
    return OffsetDeleteResponse((), err.code, err.message)


def delete_all_offsets(shard: "GroupCoordinatorShard", group_id: str) -> None:
    for topic, partition in sorted(shard.state.offsets.get(group_id, {})):
        shard._emit(OffsetCommitKey(group_id, topic, partition), None)


def _expired(value: OffsetCommitValue, now: int, retention_ms: int) -> bool:
    if value.expire_timestamp != -1:
        return now >= value.expire_timestamp
    return now - value.commit_timestamp >= retention_ms


def expire_offsets(shard: "GroupCoordinatorShard", now: int) -> None:
    """Tombstone expired offsets of topics a group does not subscribe to; delete groups left empty."""
    state = shard.state
    retention = shard.config.offsets_retention_ms
    for gid in sorted(state.offsets.keys() | state.groups.keys()):
        group = state.groups.get(gid)
        stored = state.offsets.get(gid, {})
        subscribed = group.subscribed_topic_names() if group is not None else set()
        expired = sorted(tp for tp, v in stored.items() if tp[0] not in subscribed and _expired(v, now, retention))
        all_expired = len(expired) == len(stored)
        for topic, partition in expired:
            shard._emit(OffsetCommitKey(gid, topic, partition), None)
        if all_expired and group is not None and not group.members:
            shard._delete_group_records(group)

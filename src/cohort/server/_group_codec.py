"""kio wire entities <-> the coordinator's version-neutral requests and responses.

One function per direction and API serves every version: ``build`` drops the fields a version
lacks. Offset APIs name topics before v10 and use topic ids from v10; the coordinator always
works with names, so ids are resolved through the broker's topics here, and an unknown id is
answered per partition with UNKNOWN_TOPIC_ID without reaching the coordinator.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from cohort.coordinator import requests as rq
from cohort.coordinator import share_requests as srq
from cohort.coordinator.records import ClientAssignorMetadata
from cohort.protocol.entities import build, nested
from cohort.protocol.entities import error_code as err
from cohort.protocol.operations import GROUP_OPS, NOT_REQUESTED
from cohort.protocol.writers import uvarint

LOADING = "the group coordinator is loading"
ZERO = datetime.timedelta(0)
ONE_MS = datetime.timedelta(milliseconds=1)
NULL_UUID = uuid.UUID(int=0)
UNKNOWN_OPS = NOT_REQUESTED


def group_ops(with_ops: Any, group_id: str) -> int:
    """A group's authorized-operations bitfield: ``with_ops`` is True (every operation: no
    authorizer) or a function giving the principal's bitfield for a group."""
    return with_ops(group_id) if callable(with_ops) else GROUP_OPS

def client_host(peer: Any) -> str:
    """A member's client host as Kafka reports it ("/" + address), empty when the peer has no address."""
    return "/" + peer[0] if isinstance(peer, tuple) else ""


def millis(td: datetime.timedelta) -> int:
    return td // ONE_MS


# --- ConsumerGroupHeartbeat ---------------------------------------------------------------------


def heartbeat_request(body: Any, version: int, client_id: str, client_host: str,
                      topic_filter: Callable[[str], bool] | None = None) -> rq.ConsumerGroupHeartbeatRequest:
    owned = body.topic_partitions
    return rq.ConsumerGroupHeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=body.rebalance_timeout // ONE_MS,
        subscribed_topic_names=body.subscribed_topic_names,
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        topic_partitions=None if owned is None else {tp.topic_id: tp.partitions for tp in owned},
        api_version=version,
        client_id=client_id,
        client_host=client_host,
        topic_filter=topic_filter,
        client_assignors=None if (entries := getattr(body, "client_assignors", None)) is None
        else _client_assignors(entries),
    )


def _client_assignors(entries: Any) -> tuple[ClientAssignorMetadata, ...]:
    return tuple(ClientAssignorMetadata(a.name, a.minimum_version, a.maximum_version, a.reason, a.metadata_version,
                                        a.metadata_bytes) for a in entries)


class HeartbeatEncoder:
    """Builds ConsumerGroupHeartbeat responses of one version (the classes are looked up once)."""

    __slots__ = ("resp", "assignment", "topic", "extended")

    def __init__(self, resp: type) -> None:
        self.resp = resp
        self.assignment = nested(resp, "assignment")
        self.topic = nested(self.assignment, "topic_partitions")
        self.extended = "should_compute_assignment" in resp.__dataclass_fields__  # cohort.protocol.extensions

    def __call__(self, r: rq.ConsumerGroupHeartbeatResponse) -> Any:
        assignment = None
        if r.assignment is not None:
            topic = self.topic
            parts = tuple(topic(topic_id=t, partitions=tuple(r.assignment[t])) for t in sorted(r.assignment))
            if self.extended and r.assignment_result is not None:
                error, version, metadata = r.assignment_result
                assignment = self.assignment(topic_partitions=parts, error=error, metadata_version=version,
                                             metadata_bytes=metadata)
            else:
                assignment = self.assignment(topic_partitions=parts)
        if self.extended and r.should_compute_assignment:
            return self.resp(
                throttle_time=ZERO, error_code=err(r.error_code), error_message=r.error_message,
                member_id=r.member_id, member_epoch=r.member_epoch,
                heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms), assignment=assignment,
                should_compute_assignment=True,
            )
        return self.resp(
            throttle_time=ZERO, error_code=err(r.error_code), error_message=r.error_message,
            member_id=r.member_id, member_epoch=r.member_epoch,
            heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms), assignment=assignment,
        )


def heartbeat_error(resp: type, code: int, message: str | None) -> Any:
    return build(resp, throttle_time=ZERO, error_code=err(code), error_message=message, member_id=None,
                 member_epoch=0, heartbeat_interval=ZERO, assignment=None)


# --- ConsumerGroupPrepareAssignment / InstallAssignment (cohort's, client-side assignors) ----------


def prepare_request(body: Any) -> rq.PrepareAssignmentRequest:
    return rq.PrepareAssignmentRequest(body.group_id, body.member_id, body.member_epoch)


def prepare_response(resp: type, r: rq.PrepareAssignmentResponse) -> Any:
    member_cls = nested(resp, "members")
    part_cls = nested(member_cls, "topic_partitions")
    topic_cls = nested(resp, "topics")
    members = tuple(member_cls(
        member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
        subscribed_topic_ids=m.subscribed_topic_ids, assignor_version=m.assignor_version,
        assignor_reason=m.assignor_reason, assignor_metadata=m.assignor_metadata,
        topic_partitions=tuple(part_cls(topic_id=t, partitions=tuple(m.target[t])) for t in sorted(m.target, key=str)),
    ) for m in r.members)
    topics = tuple(topic_cls(topic_id=t.topic_id, topic_name=t.topic_name, num_partitions=t.num_partitions)
                   for t in r.topics)
    return resp(throttle_time=ZERO, error_code=err(r.error_code), error_message=r.error_message,
                group_epoch=r.group_epoch, assignor_name=r.assignor_name, members=members, topics=topics)


def prepare_error(resp: type, code: int, message: str | None) -> Any:
    return prepare_response(resp, rq.PrepareAssignmentResponse(error_code=code, error_message=message))


def install_request(body: Any) -> rq.InstallAssignmentRequest:
    members = []
    for m in body.members:
        partitions: dict[uuid.UUID, tuple[int, ...]] = {}
        for tp in m.topic_partitions:  # a topic listed twice: its lists together (overlaps are then refused)
            partitions[tp.topic_id] = partitions.get(tp.topic_id, ()) + tuple(tp.partitions)
        members.append(rq.InstalledMember(m.member_id, partitions, m.metadata_version, m.metadata_bytes))
    return rq.InstallAssignmentRequest(body.group_id, body.member_id, body.member_epoch, body.group_epoch,
                                       body.error, tuple(members))


def install_response(resp: type, r: rq.InstallAssignmentResponse) -> Any:
    return resp(throttle_time=ZERO, error_code=err(r.error_code), error_message=r.error_message)


def install_error(resp: type, code: int, message: str | None) -> Any:
    return install_response(resp, rq.InstallAssignmentResponse(code, message))


# --- ConsumerGroupDescribe ----------------------------------------------------------------------


def consumer_group_describe_response(resp: type, r: rq.ConsumerGroupDescribeResponse, with_ops: bool) -> Any:
    group_cls = nested(resp, "groups")
    member_cls = nested(group_cls, "members")
    assignment_cls = nested(member_cls, "assignment")
    tp_cls = nested(assignment_cls, "topic_partitions")

    def assignment(parts: tuple[rq.DescribedTopicPartitions, ...]) -> Any:
        return assignment_cls(topic_partitions=tuple(
            tp_cls(topic_id=p.topic_id, topic_name=p.topic_name, partitions=tuple(p.partitions)) for p in parts))

    groups = []
    for g in r.groups:
        members = tuple(
            build(member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                  member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                  subscribed_topic_names=tuple(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
                  assignment=assignment(m.assignment), target_assignment=assignment(m.target_assignment),
                  member_type=m.member_type)
            for m in g.members)
        ops = group_ops(with_ops, g.group_id) if with_ops and g.error_code == 0 else UNKNOWN_OPS
        groups.append(build(group_cls, error_code=err(g.error_code), error_message=g.error_message, group_id=g.group_id,
                            group_state=g.group_state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                            assignor_name=g.assignor_name, members=members, authorized_operations=ops))
    return build(resp, throttle_time=ZERO, groups=tuple(groups))


def consumer_group_describe_error(resp: type, group_ids: tuple[str, ...], code: int, message: str) -> Any:
    r = rq.ConsumerGroupDescribeResponse(tuple(rq.DescribedGroup(g, code, message) for g in group_ids))
    return consumer_group_describe_response(resp, r, False)


# --- ListGroups / DeleteGroups -----------------------------------------------------------------


def list_groups_response(resp: type, r: rq.ListGroupsResponse) -> Any:
    cls = nested(resp, "groups")
    groups = tuple(build(cls, group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.group_state,
                         group_type=g.group_type) for g in r.groups)
    return build(resp, throttle_time=ZERO, error_code=err(r.error_code), groups=groups)


def delete_groups_response(resp: type, results: list[tuple[str, int]]) -> Any:
    cls = nested(resp, "results")
    return build(resp, throttle_time=ZERO, results=tuple(build(cls, group_id=g, error_code=err(c)) for g, c in results))


# --- OffsetCommit ------------------------------------------------------------------------------


class TopicNames:
    """Resolves topic ids (offset APIs v10) and checks names against the broker's topics."""

    def __init__(self, by_id: Callable[[uuid.UUID], Any], by_name: Callable[[str], Any]) -> None:
        self.by_id = by_id
        self.by_name = by_name

    def name(self, topic_id: uuid.UUID | None) -> str | None:
        topic = None if topic_id in (None, NULL_UUID) else self.by_id(topic_id)
        return None if topic is None else topic.name


def offset_commit_request(body: Any, version: int, names: TopicNames,
                          authorized: Callable[[str], bool] = lambda _: True) -> tuple[rq.OffsetCommitRequest, dict]:
    """The coordinator request for the partitions that can be committed, and the per-partition
    errors of those that cannot ({(topic key, partition): code}; the key is the name or id):
    topics the principal may not read, then unknown ones."""
    by_id = version >= 10
    topics = []
    rejected: dict = {}
    for t in body.topics:
        key = t.topic_id if by_id else t.name
        name = names.name(t.topic_id) if by_id else t.name
        topic = None if name is None else names.by_name(name)
        denied = name is not None and t.partitions and not authorized(name)  # once per topic, as Kafka
        parts = []
        for p in t.partitions:
            if denied:
                rejected[(key, p.partition_index)] = ErrorCode.topic_authorization_failed
                continue
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                rejected[(key, p.partition_index)] = (ErrorCode.unknown_topic_id if by_id and topic is None
                                                      else ErrorCode.unknown_topic_or_partition)
                continue
            parts.append(rq.OffsetCommitPartition(p.partition_index, p.committed_offset,
                                                  getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
        if parts:
            topics.append(rq.OffsetCommitTopic(name, tuple(parts)))
    retention = getattr(body, "retention_time", None)
    return rq.OffsetCommitRequest(
        group_id=body.group_id, topics=tuple(topics), member_id=getattr(body, "member_id", ""),
        generation_id_or_member_epoch=getattr(body, "generation_id_or_member_epoch", -1),
        group_instance_id=getattr(body, "group_instance_id", None),
        retention_time_ms=-1 if retention is None else retention // ONE_MS, api_version=version,
    ), rejected


def offset_commit_response(resp: type, body: Any, version: int, names: TopicNames, result: dict, rejected: dict) -> Any:
    """result: {(name, partition): code} from the coordinator; answered in request order."""
    topic_cls = nested(resp, "topics")
    part_cls = nested(topic_cls, "partitions")
    by_id = version >= 10
    topics = []
    for t in body.topics:
        key = t.topic_id if by_id else t.name
        name = names.name(t.topic_id) if by_id else t.name
        parts = []
        for p in t.partitions:
            code = rejected.get((key, p.partition_index))
            if code is None:
                code = result.get((name, p.partition_index), 0)
            parts.append(part_cls(partition_index=p.partition_index, error_code=err(code)))
        topics.append(build(topic_cls, name=t.name if not by_id else None, topic_id=t.topic_id if by_id else None,
                            partitions=tuple(parts)))
    return build(resp, throttle_time=ZERO, topics=tuple(topics))


_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_PARTITION_RESULT = struct.Struct(">ih")
_FLEXIBLE_PARTITION_RESULT = struct.Struct(">ihB")  # ... and an empty tag section


def offset_commit_frame(correlation_id: int, body: Any, version: int, result: dict, rejected: dict) -> bytes | None:
    """The whole OffsetCommit response frame (size prefix and header included) for v2-v9, written
    directly rather than through response entities: this is the answer to every offset commit,
    the coordinator's most frequent write. The same bytes as `offset_commit_response` encoded
    (tested); None for versions it does not write."""
    if not 2 <= version <= 9:
        return None
    flexible = version >= 8
    out = bytearray(9 if flexible else 8)  # size, correlation id[, tags]
    _INT32.pack_into(out, 4, correlation_id)
    if version >= 3:
        out += bytes(4)  # throttle_time_ms
    topics = body.topics
    _length(out, len(topics), flexible, _INT32)
    for t in topics:
        name = t.name.encode()
        _length(out, len(name), flexible, _INT16)
        out += name
        parts = t.partitions
        _length(out, len(parts), flexible, _INT32)
        for p in parts:
            index = p.partition_index
            code = rejected.get((t.name, index)) if rejected else None
            if code is None:
                code = result.get((t.name, index), 0)
            out += (_FLEXIBLE_PARTITION_RESULT.pack(index, code, 0) if flexible
                    else _PARTITION_RESULT.pack(index, code))
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    _INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _length(out: bytearray, n: int, flexible: bool, fixed: struct.Struct) -> None:
    """A string's or array's length: compact (unsigned varint of n + 1) or fixed-width."""
    out += uvarint(n + 1) if flexible else fixed.pack(n)


def commit_codes(r: rq.OffsetCommitResponse) -> dict:
    return {(t.name, p.partition): p.error_code for t in r.topics for p in t.partitions}


# --- OffsetFetch --------------------------------------------------------------------------------


def offset_fetch_groups(body: Any, version: int, names: TopicNames) -> list[tuple[rq.OffsetFetchRequest, dict]]:
    """One coordinator request per group, with the ids (v10) each requested name came from."""
    if version >= 8:
        wanted = [(g.group_id, g.topics, getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
                  for g in body.groups]
    else:
        wanted = [(body.group_id, body.topics, None, -1)]
    out = []
    for gid, topics, member_id, member_epoch in wanted:
        ids: dict = {}
        if topics is None:
            fetch_topics = None
        else:
            fetch_topics = []
            for t in topics:
                if version >= 10:
                    name = names.name(t.topic_id)
                    ids[t.topic_id] = (name, tuple(t.partition_indexes))
                    if name is None:
                        continue
                else:
                    name = t.name
                fetch_topics.append(rq.OffsetFetchTopic(name, tuple(t.partition_indexes)))
        out.append((rq.OffsetFetchRequest(gid, None if fetch_topics is None else tuple(fetch_topics), member_id,
                                          member_epoch, getattr(body, "require_stable", False), version), ids))
    return out


def _fetched_topics(topic_cls: type, version: int, r: rq.OffsetFetchResponse, ids: dict,
                    names_to_ids: Callable[[str], uuid.UUID | None]) -> tuple:
    """The topics of one group's answer; with a group-level error Kafka sends none."""
    if r.error_code:
        return ()
    part_cls = nested(topic_cls, "partitions")

    def part(p: rq.FetchedPartition, code: int | None = None) -> Any:
        return build(part_cls, partition_index=p.partition, committed_offset=p.committed_offset,
                     committed_leader_epoch=p.committed_leader_epoch, metadata=p.metadata,
                     error_code=err(p.error_code if code is None else code))

    if version < 10:
        return tuple(build(topic_cls, name=t.name, partitions=tuple(part(p) for p in t.partitions)) for t in r.topics)
    out = []
    by_name = {t.name: t for t in r.topics}
    for topic_id, (name, partitions) in ids.items():  # the topics asked for, by id
        topic = by_name.get(name) if name is not None else None
        if topic is None:
            parts = tuple(part(rq.FetchedPartition(p), ErrorCode.unknown_topic_id) for p in partitions)
        else:
            parts = tuple(part(p) for p in topic.partitions)
        out.append(build(topic_cls, topic_id=topic_id, partitions=parts))
    if not ids:  # all committed offsets; those of deleted topics cannot be named by id
        for t in r.topics:
            topic_id = names_to_ids(t.name)
            if topic_id is not None:
                out.append(build(topic_cls, topic_id=topic_id, partitions=tuple(part(p) for p in t.partitions)))
    return tuple(out)


def offset_fetch_response(resp: type, version: int, results: list, names_to_ids: Callable[[str], uuid.UUID | None]) -> Any:
    """results: [(ids, coordinator response)] in request order."""
    if version >= 8:
        group_cls = nested(resp, "groups")
        topic_cls = nested(group_cls, "topics")
        groups = tuple(build(group_cls, group_id=r.group_id, error_code=err(r.error_code),
                             topics=_fetched_topics(topic_cls, version, r, ids, names_to_ids))
                       for ids, r in results)
        return build(resp, throttle_time=ZERO, groups=groups)
    _, r = results[0]
    topics = _fetched_topics(nested(resp, "topics"), version, r, {}, names_to_ids)
    return build(resp, throttle_time=ZERO, topics=topics, error_code=err(r.error_code))


# --- OffsetDelete -------------------------------------------------------------------------------


def offset_delete_request(body: Any) -> rq.OffsetDeleteRequest:
    return rq.OffsetDeleteRequest(body.group_id, tuple(
        rq.OffsetFetchTopic(t.name, tuple(p.partition_index for p in t.partitions)) for t in body.topics))


def offset_delete_response(resp: type, r: rq.OffsetDeleteResponse) -> Any:
    topic_cls = nested(resp, "topics")
    part_cls = nested(topic_cls, "partitions")
    topics = tuple(topic_cls(name=t.name, partitions=tuple(part_cls(partition_index=p.partition, error_code=err(p.error_code))
                                                          for p in t.partitions)) for t in r.topics)
    return build(resp, error_code=err(r.error_code), throttle_time=ZERO, topics=topics)


# --- ShareGroupHeartbeat / ShareGroupDescribe (KIP-932) --------------------------------------


def share_heartbeat_request(body: Any, client_id: str, client_host: str) -> srq.ShareGroupHeartbeatRequest:
    names = body.subscribed_topic_names
    return srq.ShareGroupHeartbeatRequest(body.group_id, body.member_id, body.member_epoch, body.rack_id,
                                          None if names is None else tuple(names), client_id, client_host)


def share_heartbeat_response(resp: type, r: srq.ShareGroupHeartbeatResponse) -> Any:
    assignment = None
    if r.assignment is not None:
        assignment_cls = nested(resp, "assignment")
        topic_cls = nested(assignment_cls, "topic_partitions")
        assignment = assignment_cls(topic_partitions=tuple(
            topic_cls(topic_id=t, partitions=tuple(r.assignment[t])) for t in sorted(r.assignment)))
    return resp(throttle_time=ZERO, error_code=err(r.error_code), error_message=r.error_message,
                member_id=r.member_id, member_epoch=r.member_epoch,
                heartbeat_interval=datetime.timedelta(milliseconds=r.heartbeat_interval_ms), assignment=assignment)


def share_heartbeat_error(resp: type, code: int, message: str | None) -> Any:
    return share_heartbeat_response(resp, srq.ShareGroupHeartbeatResponse(code, message))


def share_group_describe_response(resp: type, r: srq.ShareGroupDescribeResponse, with_ops: Any) -> Any:
    group_cls = nested(resp, "groups")
    member_cls = nested(group_cls, "members")
    assignment_cls = nested(member_cls, "assignment")
    tp_cls = nested(assignment_cls, "topic_partitions")
    groups = []
    for g in r.groups:
        members = tuple(member_cls(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
            assignment=assignment_cls(topic_partitions=tuple(
                tp_cls(topic_id=p.topic_id, topic_name=p.topic_name, partitions=tuple(p.partitions))
                for p in m.assignment)))
            for m in g.members)
        ops = group_ops(with_ops, g.group_id) if with_ops and g.error_code == 0 else UNKNOWN_OPS
        groups.append(group_cls(error_code=err(g.error_code), error_message=g.error_message, group_id=g.group_id,
                                group_state=g.group_state, group_epoch=g.group_epoch,
                                assignment_epoch=g.assignment_epoch, assignor_name=g.assignor_name,
                                members=members, authorized_operations=ops))
    return resp(throttle_time=ZERO, groups=tuple(groups))


def share_group_describe_error(resp: type, group_ids: tuple[str, ...], code: int, message: str) -> Any:
    r = srq.ShareGroupDescribeResponse(tuple(srq.DescribedShareGroup(g, code, message) for g in group_ids))
    return share_group_describe_response(resp, r, False)

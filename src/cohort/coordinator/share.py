"""The share group type (KIP-932): ShareGroupHeartbeat, membership, the `simple` target
assignment, and ShareGroupDescribe's view of a group.

Functions of a `GroupContext` (context.py), like the other group types; the shard routes
requests here. What differs from consumer groups (Kafka 4.2's rules):

* no revocation: a member behind the target epoch jumps straight to it, its partitions being
  its target filtered to the topics it subscribes to now;
* partitions are shared (`cohort.assignors.simple`), and only share-partitions whose state is
  initialized are assignable. Kafka initializes them through the share coordinator off the
  heartbeat path, so a first member gets its partitions a heartbeat interval after joining;
  here initialization is the group's own record (type 15) written in the same operation as the
  join, so the first response already carries the assignment. The share-partition's start
  offset is still resolved at the first ShareFetch, as in Kafka;
* a member's session timeout fences it exactly like a leave; records it had acquired are not
  released here (share sessions and lock timeouts do that, on the partition leader).

Timer keys follow Kafka: `session-timeout-{group}-{member}` (group ids are one namespace
across the group types, so the key cannot collide with a consumer group's).
"""

from __future__ import annotations

import uuid

from cohort.assignors import simple
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.records import (
    EMPTY_ASSIGNMENT,
    MemberState,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    SharePartitionsInfo,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)
from cohort.coordinator.requests import DescribedTopicPartitions
from cohort.coordinator.consumer_group import assignment_from
from cohort.coordinator.share_group import ShareGroup, ShareGroupMember
from cohort.coordinator.share_requests import (
    AlterSharePartitions,
    AlterSharePartitionsResponse,
    DescribedShareGroup,
    DescribedShareMember,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

LEAVE_GROUP_MEMBER_EPOCH = -1
MAX_MEMBER_ID_LENGTH = 36
TIMER_KIND = "share-session"
ASSIGNOR_NAME = simple.NAME


def session_timeout_key(group_id: str, member_id: str) -> str:
    return f"session-timeout-{group_id}-{member_id}"


def schedule_session(ctx: GroupContext, group_id: str, member_id: str, now: int) -> None:
    timeout = ctx.state.group_config(group_id).share_session_timeout(ctx.config)
    ctx.timers.schedule(session_timeout_key(group_id, member_id), now + timeout, (TIMER_KIND, group_id, member_id))


def not_a_share_group(ctx: GroupContext, group_id: str) -> bool:
    """The id belongs to a group of another type (consumer, classic, or offsets only)."""
    state = ctx.state
    return group_id in state.groups or group_id in state.classic_groups or group_id in state.offsets


# ================================================================== ShareGroupHeartbeat

def validate_heartbeat(req: ShareGroupHeartbeatRequest) -> None:
    """Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`, in its order."""
    def invalid(message: str) -> CoordinatorError:
        return CoordinatorError(Errors.INVALID_REQUEST, message)

    if not req.member_id or not req.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if len(req.member_id) > MAX_MEMBER_ID_LENGTH:
        raise invalid("Invalid member id in the request.")
    if not req.group_id or not req.group_id.strip():
        raise invalid("GroupId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -1.")


def heartbeat(ctx: GroupContext, req: ShareGroupHeartbeatRequest, now: int) -> ShareGroupHeartbeatResponse:
    validate_heartbeat(req)
    gid, member_id, epoch = req.group_id, req.member_id, req.member_epoch
    if not_a_share_group(ctx, gid):
        raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
    if epoch == LEAVE_GROUP_MEMBER_EPOCH:
        return leave(ctx, gid, member_id)
    group = ctx.state.share_groups.get(gid)
    if group is None:
        if epoch != 0:
            raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        group = ShareGroup(gid)  # materialised by its first record
    member = group.members.get(member_id)
    known = member is not None
    if member is None:
        if epoch != 0:
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.")
        if len(group.members) >= ctx.config.share_max_size:
            raise CoordinatorError(Errors.GROUP_MAX_SIZE_REACHED,
                                   f"The share group has reached its maximum capacity of "
                                   f"{ctx.config.share_max_size} members.")
        member = ShareGroupMember(member_id)
    else:
        check_member_epoch(member, epoch)

    names = member.subscribed_topic_names if req.subscribed_topic_names is None \
        else frozenset(req.subscribed_topic_names)
    updated = member._replace(rack_id=member.rack_id if req.rack_id is None else req.rack_id,
                              client_id=req.client_id, client_host=req.client_host, subscribed_topic_names=names)
    subscription_changed = names != member.subscribed_topic_names
    if not known or not updated.same_metadata(member):
        ctx.append(ShareGroupMemberMetadataKey(gid, member_id), updated.metadata_value())
    group = ctx.state.share_groups[gid]

    bump = subscription_changed or group.group_epoch == 0
    refresh = group.refresh_metadata
    metadata_hash = group.metadata_hash
    if bump or refresh:
        metadata_hash = ctx.image.subscription_hash(group.subscribed_topic_names())
        if metadata_hash != group.metadata_hash:
            bump = True
        if initialize_partitions(ctx, group, now):
            bump = True  # newly initialized share-partitions are assignable now
    if bump:
        ctx.append(ShareGroupMetadataKey(gid), ShareGroupMetadataValue(group.group_epoch + 1, metadata_hash))
    if group.group_epoch > group.assignment_epoch:
        update_target(ctx, group)

    current = group.members[member_id]
    if not known or subscription_changed or current.member_epoch != group.assignment_epoch:
        current = reconcile(ctx, group, current)
    ctx.after(lambda: schedule_session(ctx, gid, member_id, now))
    if refresh:
        ctx.after(lambda: setattr(ctx.state.share_groups.get(gid) or group, "refresh_metadata", False))
    send = epoch == 0 or req.subscribed_topic_names is not None or current.assigned_partitions != member.assigned_partitions
    return ShareGroupHeartbeatResponse(
        member_id=member_id, member_epoch=current.member_epoch,
        heartbeat_interval_ms=ctx.state.group_config(gid).share_heartbeat_interval(ctx.config),
        assignment=current.assigned_partitions if send else None)


def check_member_epoch(member: ShareGroupMember, received: int) -> None:
    """Kafka's fencing: a larger epoch, or a smaller one other than the previous epoch (its
    response may have been lost), is FENCED_MEMBER_EPOCH; 0 rejoins the same member."""
    stored = member.member_epoch
    if received == 0 or received == stored:
        return
    if received > stored:
        raise CoordinatorError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The share group member has a greater member epoch ({received}) than the one known by the "
            f"group coordinator ({stored}). The member must abandon all its partitions and rejoin.")
    if received != member.previous_member_epoch:
        raise CoordinatorError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The share group member has a smaller member epoch ({received}) than the one known by the "
            f"group coordinator ({stored}). The member must abandon all its partitions and rejoin.")


def initialize_partitions(ctx: GroupContext, group: ShareGroup, now: int) -> bool:
    """Bring the group's share-partition state metadata in line with the topic image: every
    partition of a subscribed topic is initialized (assignable), and topics that no longer exist
    are forgotten. Writes the record only when something changed; True when partitions of a
    subscribed topic became assignable."""
    image = ctx.image
    initialized = dict(group.initialized)
    added = False
    for name in sorted(group.subscribed_topic_names()):
        topic = image.by_name.get(name)
        if topic is None:
            continue
        info = initialized.get(topic.topic_id)
        have = set(() if info is None else info.partitions)
        want = set(range(topic.num_partitions))
        if not want <= have:
            initialized[topic.topic_id] = SharePartitionsInfo(
                topic.topic_id, name, tuple(sorted(have | want)), now if info is None else info.create_timestamp)
            added = True
    gone = [t for t in initialized if t not in image.by_id]
    for topic_id in gone:
        del initialized[topic_id]
    if not added and not gone:
        return False
    before = group.state_metadata_value()
    group_copy = ShareGroup(group.group_id)
    group_copy.initialized, group_copy.initializing = initialized, {
        t: i for t, i in group.initializing.items() if t in image.by_id}
    group_copy.deleting = dict(group.deleting)
    value = group_copy.state_metadata_value()
    if value != before:
        ctx.append(ShareGroupStatePartitionMetadataKey(group.group_id), value)
    return added


def update_target(ctx: GroupContext, group: ShareGroup) -> None:
    """A new target assignment at the group epoch, by the `simple` assignor over the initialized
    share-partitions of the topics the members subscribe to."""
    gid, epoch = group.group_id, group.group_epoch
    image = ctx.image
    subscriptions: dict[str, frozenset[uuid.UUID]] = {}
    partitions: dict[uuid.UUID, tuple[int, ...]] = {}
    for member_id, member in group.members.items():
        ids = []
        for name in member.subscribed_topic_names:
            topic = image.by_name.get(name)
            if topic is None:
                continue  # kept and ignored until the topic appears
            ids.append(topic.topic_id)
            if topic.topic_id not in partitions:
                partitions[topic.topic_id] = tuple(p for p in group.initialized_partitions(topic.topic_id)
                                                   if p < topic.num_partitions)
        subscriptions[member_id] = frozenset(ids)
    target = simple.assign(subscriptions, partitions, group.target_assignment)
    for member_id in sorted(target):
        new = assignment_from(target[member_id])
        if group.target_assignment.get(member_id, EMPTY_ASSIGNMENT) != new or member_id not in group.target_assignment:
            ctx.append(ShareGroupTargetAssignmentMemberKey(gid, member_id), ShareGroupTargetAssignmentMemberValue(new))
    ctx.append(ShareGroupTargetAssignmentMetadataKey(gid), ShareGroupTargetAssignmentMetadataValue(epoch))


def reconcile(ctx: GroupContext, group: ShareGroup, member: ShareGroupMember) -> ShareGroupMember:
    """No revocation phase: the member takes its target (filtered to what it subscribes to now)
    at the target epoch at once."""
    image = ctx.image
    subscribed = {image.by_name[n].topic_id for n in member.subscribed_topic_names if n in image.by_name}
    target = group.target_assignment.get(member.member_id, EMPTY_ASSIGNMENT)
    assigned = assignment_from({t: ps for t, ps in target.items() if t in subscribed})
    updated = member._replace(member_epoch=group.assignment_epoch, previous_member_epoch=member.member_epoch,
                              state=MemberState.STABLE, assigned_partitions=assigned)
    if updated != member:
        ctx.append(ShareGroupCurrentMemberAssignmentKey(group.group_id, member.member_id), updated.assignment_value())
    return ctx.state.share_groups[group.group_id].members[member.member_id]


def leave(ctx: GroupContext, group_id: str, member_id: str) -> ShareGroupHeartbeatResponse:
    group = ctx.state.share_groups.get(group_id)
    if group is None:
        raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    member = group.members.get(member_id)
    if member is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
    remove_member(ctx, group, member)
    return ShareGroupHeartbeatResponse(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)


def remove_member(ctx: GroupContext, group: ShareGroup, member: ShareGroupMember) -> None:
    """Leave or session timeout: the member's three tombstones, then a group epoch bump."""
    gid, member_id = group.group_id, member.member_id
    ctx.append(ShareGroupCurrentMemberAssignmentKey(gid, member_id), None)
    ctx.append(ShareGroupTargetAssignmentMemberKey(gid, member_id), None)
    ctx.append(ShareGroupMemberMetadataKey(gid, member_id), None)
    metadata_hash = ctx.image.subscription_hash(group.subscribed_topic_names())
    ctx.append(ShareGroupMetadataKey(gid), ShareGroupMetadataValue(group.group_epoch + 1, metadata_hash))
    ctx.after(lambda: ctx.timers.cancel(session_timeout_key(gid, member_id)))


def on_session_timeout(ctx: GroupContext, payload: tuple) -> None:
    """The member sent no heartbeat for the session timeout: fenced, like a leave."""
    _, group_id, member_id = payload
    group = ctx.state.share_groups.get(group_id)
    member = None if group is None else group.members.get(member_id)
    if member is not None:
        remove_member(ctx, group, member)  # type: ignore[arg-type]


def on_loaded(ctx: GroupContext, now: int) -> None:
    """After a load: every member's session runs again, and groups look at the image again."""
    for group in ctx.state.share_groups.values():
        group.refresh_metadata = True
        for member_id in group.members:
            schedule_session(ctx, group.group_id, member_id, now)


# ================================================================== offsets: alter, delete

def alter_partitions(ctx: GroupContext, req: AlterSharePartitions, now: int) -> AlterSharePartitionsResponse:
    """The group coordinator's half of AlterShareGroupOffsets / DeleteShareGroupOffsets: the group
    must have no members; an alter creates a missing group (Kafka: KAFKA-19662) and marks the
    partitions initialized, a delete forgets the topics."""
    gid = req.group_id
    if not gid or not gid.strip():
        raise CoordinatorError(Errors.INVALID_GROUP_ID, "Group id can't be empty.")
    if not_a_share_group(ctx, gid):
        raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
    group = ctx.state.share_groups.get(gid)
    if group is None and not req.initialize:
        raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
    if group is not None and group.members:
        raise CoordinatorError(Errors.NON_EMPTY_GROUP, f"The group {gid} has active members; its offsets can "
                               "only be changed while it is empty.")
    if group is None:
        ctx.append(ShareGroupMetadataKey(gid), ShareGroupMetadataValue(0, 0))
        group = ctx.state.share_groups[gid]
    initialized = dict(group.initialized)
    for topic_id, (name, partitions) in (req.initialize or {}).items():
        info = initialized.get(topic_id)
        have = set(() if info is None else info.partitions)
        initialized[topic_id] = SharePartitionsInfo(topic_id, name, tuple(sorted(have | set(partitions))),
                                                    now if info is None else info.create_timestamp)
    for topic_id in req.forget:
        initialized.pop(topic_id, None)
    if initialized != group.initialized:
        copy = group.copy()
        copy.initialized = initialized
        copy.initializing = {t: i for t, i in group.initializing.items() if t not in req.forget}
        ctx.append(ShareGroupStatePartitionMetadataKey(gid), copy.state_metadata_value())
    return AlterSharePartitionsResponse()


# ================================================================== groups: describe, list, delete

def describe(ctx: GroupContext, group: ShareGroup) -> DescribedShareGroup:
    by_id = ctx.image.by_id
    members = []
    for member_id in sorted(group.members):
        m = group.members[member_id]
        parts = tuple(DescribedTopicPartitions(t, by_id[t].name, tuple(m.assigned_partitions[t]))
                      for t in sorted(m.assigned_partitions, key=lambda t: (by_id[t].name if t in by_id else "", t))
                      if t in by_id)
        members.append(DescribedShareMember(m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                                            tuple(sorted(m.subscribed_topic_names)), parts))
    return DescribedShareGroup(group.group_id, group_state=group.state, group_epoch=group.group_epoch,
                               assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR_NAME,
                               members=tuple(members))


def delete_group(ctx: GroupContext, group: ShareGroup) -> None:
    """Tombstones of an empty share group, in Kafka's order (its share-partitions' state goes with it)."""
    gid = group.group_id
    for member_id in sorted(group.target_assignment):
        ctx.append(ShareGroupTargetAssignmentMemberKey(gid, member_id), None)
    ctx.append(ShareGroupTargetAssignmentMetadataKey(gid), None)
    ctx.append(ShareGroupStatePartitionMetadataKey(gid), None)
    ctx.append(ShareGroupMetadataKey(gid), None)

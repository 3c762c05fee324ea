"""Online migration between the classic and the consumer protocol (KIP-848's upgrade path).

* **Upgrade**: a consumer-protocol member (ConsumerGroupHeartbeat, epoch 0) joining a non-empty
  classic group converts it into a consumer group when `group.consumer.migration.policy` allows
  upgrades, the group uses the `consumer` embedded protocol and fits `group.consumer.max.size`
  (else GROUP_ID_NOT_FOUND). Records: the GroupMetadata tombstone, then each classic member as a
  consumer-group member carrying its `ClassicMemberMetadata`, the group epoch = the classic
  generation, and each member's classic assignment as both its target and its current assignment
  at that epoch. Parked joins and syncs are answered REBALANCE_IN_PROGRESS.
* **Mixed group**: classic members keep speaking JoinGroup / SyncGroup / Heartbeat / LeaveGroup.
  A JoinGroup runs the consumer-group pipeline (subscription and owned partitions decoded from the
  embedded ConsumerProtocol subscription) and answers at once with generation = member epoch;
  SyncGroup returns the member's current assignment encoded in the ConsumerProtocol; Heartbeat
  answers REBALANCE_IN_PROGRESS whenever the member has something to reconcile, which makes it
  re-join. Timers: `join-{group}-{member}` (re-join after REBALANCE_IN_PROGRESS) and
  `sync-{group}-{member}` (sync after a join), both the member's rebalance timeout; the session
  timer is the consumer one with the member's classic session timeout.
* **Downgrade**: when the last consumer-protocol member leaves or is fenced, the remaining classic
  members fit `group.max.size` and the policy allows downgrades, the group is written back as a
  classic group (the consumer group's tombstones, then GroupMetadata with each member's current
  assignment) and a rebalance is prepared.
"""

from __future__ import annotations

from cohort.coordinator import classic, consumer
from cohort.coordinator.classic_group import ClassicGroup
from cohort.coordinator.consumer_group import ConsumerGroup, ConsumerGroupMember, assignment_from
from cohort.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment as ProtocolAssignment,
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from cohort.coordinator.consumer import member_join_key, member_sync_key
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.static_members import check_instance_owner
from cohort.coordinator.records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataMember,
    GroupMetadataValue,
    MemberState,
)
from cohort.coordinator.requests import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    SyncGroupRequest,
    SyncGroupResponse,
)



def _names_to_ids(ctx: GroupContext, partitions) -> Assignment:
    """ConsumerProtocol (topic name, partitions) pairs as an assignment by topic id; topics the
    metadata image does not know are dropped."""
    by_name = ctx.image.by_name
    out: dict = {}
    for name, parts in partitions:
        topic = by_name.get(name)
        if topic is not None and parts:
            out.setdefault(topic.topic_id, set()).update(p for p in parts if 0 <= p < topic.num_partitions)
    return assignment_from(out)


def _ids_to_names(ctx: GroupContext, assignment: Assignment) -> tuple:
    by_id = ctx.image.by_id
    return tuple(sorted((by_id[t].name, tuple(ps)) for t, ps in assignment.items() if t in by_id))


def encoded_assignment(ctx: GroupContext, assignment: Assignment) -> bytes:
    return encode_assignment(ProtocolAssignment(_ids_to_names(ctx, assignment)))


# ====================================================================== upgrade


def consumer_member_joins(ctx: GroupContext, group: ClassicGroup, now: int) -> None:
    """A consumer-protocol member joins where a classic group lives: an empty one gives way, a
    non-empty one is upgraded in place."""
    if group.members:
        upgrade(ctx, group, now)
        return
    if group.persisted is not None:
        ctx.append(GroupMetadataKey(group.group_id), None)
    ctx.state.classic_groups.pop(group.group_id, None)


def upgrade(ctx: GroupContext, group: ClassicGroup, now: int) -> ConsumerGroup:
    """Convert a non-empty classic group into a consumer group (see the module docstring)."""
    gid, cfg = group.group_id, ctx.config

    def refuse(reason: str) -> CoordinatorError:
        return CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to a consumer group: "
                                                           f"{reason}.")

    if not cfg.upgrade_allowed:
        raise refuse(f"group.consumer.migration.policy is {cfg.consumer_migration_policy}")
    if group.protocol_type != PROTOCOL_TYPE:
        raise refuse(f"it uses the protocol type {group.protocol_type!r}, not {PROTOCOL_TYPE!r}")
    if len(group.members) >= cfg.consumer_max_size:
        raise refuse(f"it would exceed group.consumer.max.size {cfg.consumer_max_size}")
    converted = []
    owners: dict = {}
    for m in group.members.values():
        protocol = group.protocol_name if group.protocol_name in m.protocol_names() else m.protocol_names()[0]
        try:
            subscription = decode_subscription(m.metadata(protocol))
            owned = decode_assignment(m.assignment).partitions if m.assignment else ()
        except ConsumerProtocolError as exc:
            raise refuse(f"member {m.member_id} has an undecodable subscription or assignment ({exc})") from None
        assignment = _names_to_ids(ctx, owned)
        for topic_id, parts in assignment.items():
            for p in parts:
                if owners.setdefault((topic_id, p), m.member_id) != m.member_id:
                    raise refuse(f"partition {p} of {topic_id} is assigned to two members")
        converted.append((m, subscription, assignment))

    ctx.complete_all(classic.release_parked(group, Errors.REBALANCE_IN_PROGRESS))
    stale = [classic.join_key(gid), classic.sync_key(gid)] + [classic.heartbeat_key(gid, m) for m in group.members]
    ctx.after(lambda: [ctx.timers.cancel(key) for key in stale])
    epoch = group.generation_id
    ctx.append(GroupMetadataKey(gid), None)
    for m, subscription, _ in converted:
        ctx.append(ConsumerGroupMemberMetadataKey(gid, m.member_id), ConsumerGroupMemberMetadataValue(
            m.instance_id, subscription.rack_id, m.client_id, m.client_host, tuple(sorted(set(subscription.topics))),
            None, m.rebalance_timeout_ms, None, ClassicMemberMetadata(m.session_timeout_ms, m.protocols)))
    upgraded = ctx.state.groups[gid]
    ctx.append(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(
        epoch, ctx.image.subscription_hash(upgraded.subscribed_topic_names())))
    for m, _, assignment in converted:
        ctx.append(ConsumerGroupTargetAssignmentMemberKey(gid, m.member_id),
                    ConsumerGroupTargetAssignmentMemberValue(assignment))
    ctx.append(ConsumerGroupTargetAssignmentMetadataKey(gid), ConsumerGroupTargetAssignmentMetadataValue(epoch))
    for m, _, assignment in converted:
        ctx.append(ConsumerGroupCurrentMemberAssignmentKey(gid, m.member_id), ConsumerGroupCurrentMemberAssignmentValue(
            epoch, epoch, MemberState.STABLE, assignment, EMPTY_ASSIGNMENT))
        mid, session = m.member_id, m.session_timeout_ms
        ctx.after(lambda mid=mid, session=session: consumer.schedule_session(ctx, gid, mid, now, session))
    upgraded = ctx.state.groups[gid]
    upgraded.refresh_metadata = False
    return upgraded


# ====================================================================== downgrade


def fence_member(ctx: GroupContext, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    """Remove a member of a consumer group (left, timed out, fenced); when it is the last
    consumer-protocol member of a mixed group, the group turns back into a classic group instead.
    The shard wires this in as `GroupContext.fence_member`."""
    if group.classic_members and should_downgrade(ctx, group, member):
        downgrade(ctx, group, member, ctx.now)
        return
    consumer.remove_member(ctx, group, member)


def should_downgrade(ctx: GroupContext, group: ConsumerGroup, leaving: ConsumerGroupMember) -> bool:
    """The last consumer-protocol member is leaving a group whose other members all use the classic protocol."""
    if leaving.is_classic or not ctx.config.downgrade_allowed:
        return False
    others = len(group.members) - 1
    return 0 < others == group.classic_members and others <= ctx.config.classic_max_size


def downgrade(ctx: GroupContext, group: ConsumerGroup, leaving: ConsumerGroupMember, now: int) -> None:
    """Write the group back as a classic group without `leaving`, then prepare a rebalance."""
    gid = group.group_id
    members = [m for mid, m in sorted(group.members.items()) if mid != leaving.member_id]
    common = None
    for m in members:
        names = {name for name, _ in m.classic_member_metadata.supported_protocols}  # type: ignore[union-attr]
        common = names if common is None else common & names
    first = members[0].classic_member_metadata.supported_protocols  # type: ignore[union-attr]
    protocol = next((name for name, _ in first if name in (common or ())), first[0][0] if first else None)
    persisted = []
    for m in members:
        meta = dict(m.classic_member_metadata.supported_protocols).get(protocol, b"")  # type: ignore[union-attr]
        persisted.append(GroupMetadataMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                                             m.rebalance_timeout_ms, m.classic_member_metadata.session_timeout_ms,  # type: ignore[union-attr]
                                             meta, encoded_assignment(ctx, m.assigned_partitions)))
    epoch = group.group_epoch
    all_ids = sorted(group.members)
    for mid in all_ids:
        ctx.append(ConsumerGroupCurrentMemberAssignmentKey(gid, mid), None)
    for mid in sorted(group.target_assignment):
        ctx.append(ConsumerGroupTargetAssignmentMemberKey(gid, mid), None)
    ctx.append(ConsumerGroupTargetAssignmentMetadataKey(gid), None)
    for mid in all_ids:
        ctx.append(ConsumerGroupMemberMetadataKey(gid, mid), None)
    for regex in sorted(group.resolved_regexes):
        ctx.append(ConsumerGroupRegularExpressionKey(gid, regex), None)
    ctx.append(ConsumerGroupMetadataKey(gid), None)
    ctx.append(GroupMetadataKey(gid), GroupMetadataValue(PROTOCOL_TYPE, epoch, protocol, members[0].member_id, now,
                                                          tuple(persisted)))
    for mid in all_ids:
        ctx.after(lambda mid=mid: consumer.cancel_member_timers(ctx, gid, mid))
    classic_group = ctx.state.classic_groups[gid]
    for m in members:  # keep every classic protocol the member announced, not just the selected one
        classic_group.members[m.member_id].protocols = tuple(m.classic_member_metadata.supported_protocols)  # type: ignore[union-attr]
        classic.schedule_heartbeat(ctx, gid, m.member_id, now, m.classic_member_metadata.session_timeout_ms)  # type: ignore[union-attr]
    classic.prepare_rebalance(ctx, classic_group, now)


# ====================================================================== classic members in a consumer group


def _decode_join(req: JoinGroupRequest):
    protocols = tuple((name, bytes(meta)) for name, meta in req.protocols)
    if req.protocol_type != PROTOCOL_TYPE or not protocols:
        raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                               f"A classic member of a consumer group must use the {PROTOCOL_TYPE!r} protocol type.")
    try:
        return protocols, decode_subscription(protocols[0][1])
    except ConsumerProtocolError as exc:
        raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL, f"Undecodable subscription: {exc}.") from None


def _common_protocols(group: ConsumerGroup) -> set[str] | None:
    common = None
    for m in group.members.values():
        if m.classic_member_metadata is not None:
            names = {name for name, _ in m.classic_member_metadata.supported_protocols}
            common = names if common is None else common & names
    return common


def join(ctx: GroupContext, group: ConsumerGroup, req: JoinGroupRequest, now: int) -> JoinGroupResponse:
    gid, cfg = group.group_id, ctx.config
    if cfg.consumer_migration_policy == "disabled":
        raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                               f"Group {gid} is a consumer group and group.consumer.migration.policy is disabled.")
    protocols, subscription = _decode_join(req)
    common = _common_protocols(group)
    if common is not None and not common & {name for name, _ in protocols}:
        raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                               "The member's protocols have nothing in common with the group's classic members.")
    member_id, iid = req.member_id, req.group_instance_id
    if not member_id and iid is None and req.api_version >= 4:
        return JoinGroupResponse(error_code=Errors.MEMBER_ID_REQUIRED, member_id=ctx.new_member_id())
    if not member_id:
        member_id = ctx.new_member_id()
    members = group.members
    owner_id = None if iid is None else group.static_members.get(iid)
    if member_id not in members and owner_id is None and len(members) >= cfg.consumer_max_size:
        raise CoordinatorError(Errors.GROUP_MAX_SIZE_REACHED,
                               f"The consumer group has reached its maximum capacity of {cfg.consumer_max_size} members.")
    member = members.get(member_id)
    known = member is not None
    if owner_id is not None and owner_id != member_id:
        if req.member_id:
            raise CoordinatorError(Errors.FENCED_INSTANCE_ID,
                                   f"Static member {req.member_id} with instance id {iid} was fenced by member {owner_id}.")
        member = consumer.replace_static_member(ctx, group, members[owner_id], member_id)
        known = True
        group = ctx.state.groups[gid]
    elif member is not None and member.classic_member_metadata is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} uses the consumer protocol.")
    if member is None:
        member = ConsumerGroupMember(member_id)
    names = frozenset(subscription.topics)
    session = req.session_timeout_ms
    updated = member._replace(
        instance_id=iid, rack_id=subscription.rack_id, rebalance_timeout_ms=classic.rebalance_timeout(req),
        client_id=req.client_id, client_host=req.client_host, subscribed_topic_names=names,
        subscribed_topic_regex=None, server_assignor=None,
        classic_member_metadata=ClassicMemberMetadata(session, protocols))
    owned = _names_to_ids(ctx, subscription.owned_partitions)
    current = consumer.update_and_reconcile(ctx, group, member, updated, known, names != member.subscribed_topic_names
                                          or not known, False, owned, session, now)
    ctx.after(lambda: ctx.timers.cancel(member_join_key(gid, member_id)))
    rebalance = updated.rebalance_timeout_ms
    ctx.after(lambda: ctx.timers.schedule(member_sync_key(gid, member_id), now + rebalance,
                                                         ("classic-member-timeout", gid, member_id)))
    return JoinGroupResponse(generation_id=current.member_epoch, protocol_type=PROTOCOL_TYPE,
                             protocol_name=protocols[0][0], leader="", member_id=member_id)


def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int
                    ) -> ConsumerGroupMember:
    if instance_id is not None:
        check_instance_owner(group.static_members, member_id, instance_id)
    member = group.members.get(member_id)
    if member is None or member.classic_member_metadata is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a classic member of group "
                                                         f"{group.group_id}.")
    if generation != member.member_epoch:
        raise CoordinatorError(Errors.ILLEGAL_GENERATION,
                               f"The generation id {generation} is not the member epoch {member.member_epoch}.")
    return member


def must_rejoin(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """A classic member has something to reconcile, which only a JoinGroup can do."""
    if member.state is MemberState.UNREVOKED_PARTITIONS or group.group_epoch > member.member_epoch:
        return True
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        target = group.target_assignment.get(member.member_id, EMPTY_ASSIGNMENT)
        for topic_id, parts in target.items():
            held = member.assigned_partitions.get(topic_id, ())
            if any(p not in held and group.partition_epoch(topic_id, p) == -1 for p in parts):
                return True
    return False


def _arm_rejoin(ctx: GroupContext, group: ConsumerGroup, member: ConsumerGroupMember, now: int) -> None:
    gid, mid = group.group_id, member.member_id
    key = member_join_key(gid, mid)
    if key not in ctx.timers:
        ctx.timers.schedule(key, now + member.rebalance_timeout_ms, ("classic-member-timeout", gid, mid))


def sync(ctx: GroupContext, group: ConsumerGroup, req: SyncGroupRequest, now: int) -> SyncGroupResponse:
    member = _classic_member(group, req.member_id, req.group_instance_id, req.generation_id)
    name = member.classic_member_metadata.supported_protocols[0][0]  # type: ignore[union-attr]
    if ((req.protocol_type is not None and req.protocol_type != PROTOCOL_TYPE)
            or (req.protocol_name is not None and req.protocol_name != name)):
        raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                               f"The protocol {req.protocol_type}/{req.protocol_name} is not {PROTOCOL_TYPE}/{name}.")
    ctx.timers.cancel(member_sync_key(group.group_id, member.member_id))
    if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
        _arm_rejoin(ctx, group, member, now)
        raise CoordinatorError(Errors.REBALANCE_IN_PROGRESS, "The group is rebalancing, so a rejoin is needed.")
    return SyncGroupResponse(protocol_type=PROTOCOL_TYPE, protocol_name=name,
                             assignment=encoded_assignment(ctx, member.assigned_partitions))


def heartbeat(ctx: GroupContext, group: ConsumerGroup, req: HeartbeatRequest, now: int) -> HeartbeatResponse:
    member = _classic_member(group, req.member_id, req.group_instance_id, req.generation_id)
    consumer.schedule_session(ctx, group.group_id, member.member_id, now,
                            member.classic_member_metadata.session_timeout_ms)  # type: ignore[union-attr]
    if must_rejoin(group, member):
        _arm_rejoin(ctx, group, member, now)
        return HeartbeatResponse(Errors.REBALANCE_IN_PROGRESS, "The group is rebalancing, so a rejoin is needed.")
    return HeartbeatResponse()


def leave(ctx: GroupContext, group: ConsumerGroup, req: LeaveGroupRequest, now: int) -> LeaveGroupResponse:
    leaving = tuple(req.members) if req.api_version >= 3 else (LeaveGroupMember(req.member_id),)
    results = []
    for item in leaving:
        gid = group.group_id
        current = ctx.state.groups.get(gid)
        code = Errors.NONE
        member_id = item.member_id
        if current is None:
            code = Errors.UNKNOWN_MEMBER_ID
        elif item.group_instance_id is not None:
            owner = current.static_members.get(item.group_instance_id)
            if owner is None:
                code = Errors.UNKNOWN_MEMBER_ID
            elif member_id and member_id != owner:
                code = Errors.FENCED_INSTANCE_ID
            else:
                member_id = owner
        member = None if current is None or code else current.members.get(member_id)
        if not code and (member is None or member.classic_member_metadata is None):
            code = Errors.UNKNOWN_MEMBER_ID
        if not code:
            fence_member(ctx, current, member)
        results.append(LeftMember(item.member_id, item.group_instance_id, code))
    if req.api_version >= 3:
        return LeaveGroupResponse(members=tuple(results))
    return LeaveGroupResponse(results[0].error_code)


def on_member_timeout(ctx: GroupContext, payload: tuple, now: int) -> None:
    """A classic member of a consumer group did not re-join or sync within its rebalance timeout."""
    group = ctx.state.groups.get(payload[1])
    member = None if group is None else group.members.get(payload[2])
    if member is not None and member.classic_member_metadata is not None:
        fence_member(ctx, group, member)


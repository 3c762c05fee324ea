"""The classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup), written through a
`GroupContext` (context.py).

This is Kafka's classic `GroupMetadataManager` path, readable top to bottom:

    Empty --join--> PreparingRebalance --all joined / join timer--> CompletingRebalance
          --leader's SyncGroup--> Stable --member joins, leaves, changes, or expires--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;   any --DeleteGroups--> Dead

* A join phase from Empty waits `group.initial.rebalance.delay.ms`, extended while new members
  keep arriving, up to the group's rebalance timeout; any other join phase ends as soon as every
  member re-joined, or at the rebalance timeout (`join-{group}`), when dynamic members that did
  not re-join are removed.
* Joins and syncs that must wait are parked: the handler returns `Parked(request_id)` and the
  member remembers the id; whichever later operation releases it appends `(request_id,
  response)` to the operation's completions (`ctx.complete`).
* Timers: `heartbeat-{group}-{member}` (session timeout; a new member's first join gets
  `CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS`), `join-{group}` (initial delay or rebalance timeout),
  `sync-{group}` (members that got a JoinGroup answer but never synced are removed).
* Handlers validate first and raise `CoordinatorError` only before changing anything; soft state
  (the rebalance in progress) is changed in place, settled generations are written as
  `GroupMetadata` records.
"""

from __future__ import annotations

from cohort.coordinator import consumer
from cohort.coordinator.classic_group import ClassicGroup, ClassicGroupState, ClassicMember
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.static_members import check_instance_owner
from cohort.coordinator.records import GroupMetadataKey
from cohort.coordinator.requests import (
    DescribedClassicGroup,
    DescribedClassicMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeftMember,
    Parked,
    SyncGroupRequest,
    SyncGroupResponse,
)


EMPTY = ClassicGroupState.EMPTY
PREPARING = ClassicGroupState.PREPARING_REBALANCE
COMPLETING = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


# ====================================================================== JoinGroup


def validate_session_timeout(ctx: GroupContext, req: JoinGroupRequest) -> None:
    cfg = ctx.config
    if not cfg.classic_min_session_timeout_ms <= req.session_timeout_ms <= cfg.classic_max_session_timeout_ms:
        raise CoordinatorError(
            Errors.INVALID_SESSION_TIMEOUT,
            f"The session timeout {req.session_timeout_ms} ms is outside [{cfg.classic_min_session_timeout_ms}, "
            f"{cfg.classic_max_session_timeout_ms}] ms.")


def join_group(ctx: GroupContext, req: JoinGroupRequest, now: int, rid: int):
    """JoinGroup on a classic group (the shard sends joins into a non-empty consumer group to
    migration.py)."""
    gid, cfg = req.group_id, ctx.config
    if consumer.blank(gid):
        raise CoordinatorError(Errors.INVALID_GROUP_ID, "Group id can't be empty.")
    validate_session_timeout(ctx, req)
    consumer_group = ctx.state.groups.get(gid)
    if consumer_group is not None:
        consumer.delete_group_records(ctx, consumer_group)  # an empty consumer group gives way to a classic one
    group = ctx.state.classic_groups.get(gid)
    created = group is None
    if created:
        if req.member_id:
            raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {gid}.")
        group = ctx.state.classic_groups[gid] = ClassicGroup(gid, now)
    try:
        if not _accept_joining_member(group, req, cfg.classic_max_size):
            raise CoordinatorError(Errors.GROUP_MAX_SIZE_REACHED,
                                   f"The classic group has reached its maximum capacity of {cfg.classic_max_size} members.")
        protocols = tuple((name, bytes(meta)) for name, meta in req.protocols)
        if group.is_in(DEAD):
            raise CoordinatorError(Errors.COORDINATOR_NOT_AVAILABLE, f"Group {gid} is dead.")
        if not group.supports_protocols(req.protocol_type, protocols):
            raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                   "The group member's supported protocols are incompatible with those of existing members "
                                   "or first group member tried to join with empty protocol type or empty protocol list.")
        if not req.member_id:
            return _join_new_member(ctx, group, req, protocols, now, rid)
        return _join_existing_member(ctx, group, req, protocols, now, rid)
    except CoordinatorError:
        if created:
            del ctx.state.classic_groups[gid]
        raise


def _accept_joining_member(group: ClassicGroup, req: JoinGroupRequest, max_size: int) -> bool:
    """Kafka's acceptJoiningMember: known members (and static members by instance id) may always
    re-join; a new one only while the group is below `group.max.size`."""
    member = group.members.get(req.member_id)
    if member is None and req.group_instance_id is not None:
        member = group.members.get(group.static_members.get(req.group_instance_id, ""))
    if group.is_in(EMPTY, DEAD):
        return True
    if group.is_in(PREPARING):
        return (member is not None and member.awaiting_join is not None) or group.awaiting_join_count() < max_size
    return member is not None or len(group.members) < max_size


def _join_new_member(ctx: GroupContext, group: ClassicGroup, req: JoinGroupRequest, protocols, now: int, rid: int):
    iid = req.group_instance_id
    member_id = f"{iid if iid is not None else req.client_id}-{ctx.new_member_id()}"
    if iid is not None and iid in group.static_members:
        return _replace_static_member(ctx, group, req, protocols, member_id, now, rid)
    if iid is None and req.api_version >= 4:
        group.pending_members.add(member_id)
        schedule_heartbeat(ctx, group.group_id, member_id, now, req.session_timeout_ms)
        return JoinGroupResponse(error_code=Errors.MEMBER_ID_REQUIRED, member_id=member_id,
                                 error_message="The group member needs to have a valid member id before actually "
                                               "entering a consumer group.")
    return _add_member_and_rebalance(ctx, group, req, protocols, member_id, now, rid)


def _join_existing_member(ctx: GroupContext, group: ClassicGroup, req: JoinGroupRequest, protocols, now: int, rid: int):
    member_id = req.member_id
    if member_id in group.pending_members:
        return _add_member_and_rebalance(ctx, group, req, protocols, member_id, now, rid)
    member = validate_member(group, member_id, req.group_instance_id)
    if group.is_in(EMPTY):
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
    if group.is_in(PREPARING):
        _update_member_and_park(ctx, group, member, req, protocols, rid)
        _maybe_complete_join(ctx, group, now)
        return Parked(rid)
    if group.is_in(COMPLETING) and member.matches(protocols):
        return _join_response(group, member)  # a lost JoinGroup response: answer again
    if group.is_in(STABLE) and member_id != group.leader_id and member.matches(protocols):
        return _join_response(group, member)  # a follower re-joining without changes
    _update_member_and_park(ctx, group, member, req, protocols, rid)
    prepare_rebalance(ctx, group, now)
    return Parked(rid)


def validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> ClassicMember:
    """Kafka's validateMember: a static member must be the current owner of its instance id."""
    if instance_id is not None:
        check_instance_owner(group.static_members, member_id, instance_id)
    member = group.members.get(member_id)
    if member is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
    return member


def rebalance_timeout(req: JoinGroupRequest) -> int:
    return req.session_timeout_ms if req.rebalance_timeout_ms < 0 else req.rebalance_timeout_ms


def _add_member_and_rebalance(ctx: GroupContext, group: ClassicGroup, req: JoinGroupRequest, protocols, member_id: str,
                              now: int, rid: int):
    member = ClassicMember(member_id, req.group_instance_id, req.client_id, req.client_host, rebalance_timeout(req),
                           req.session_timeout_ms, req.protocol_type, protocols)
    member.is_new = True
    group.pending_members.discard(member_id)
    group.add(member)
    _park_join(ctx, member, rid)
    if group.is_in(PREPARING) and group.previous_state is EMPTY:
        group.new_member_added = True  # extends the initial rebalance delay
    schedule_heartbeat(ctx, group.group_id, member_id, now, ctx.config.classic_new_member_join_timeout_ms)
    _maybe_prepare_rebalance_or_complete_join(ctx, group, now)
    return Parked(rid)


def _update_member_and_park(ctx: GroupContext, group: ClassicGroup, member: ClassicMember, req: JoinGroupRequest, protocols,
                            rid: int) -> None:
    member.protocols = protocols
    member.rebalance_timeout_ms = rebalance_timeout(req)
    member.session_timeout_ms = req.session_timeout_ms
    member.client_id, member.client_host = req.client_id, req.client_host
    _park_join(ctx, member, rid)


def _park_join(ctx: GroupContext, member: ClassicMember, rid: int) -> None:
    if member.awaiting_join is not None:  # a duplicate join: the older request gives way
        ctx.complete(member.awaiting_join, JoinGroupResponse(
            error_code=Errors.REBALANCE_IN_PROGRESS, member_id=member.member_id,
            error_message="A newer JoinGroup of the same member replaced this one."))
    member.awaiting_join = rid


def _replace_static_member(ctx: GroupContext, group: ClassicGroup, req: JoinGroupRequest, protocols, new_id: str, now: int,
                           rid: int):
    """A static member re-joins under a new member id: the old id is fenced, the new one takes
    its place (and its assignment); a Stable group with unchanged protocols does not rebalance."""
    gid = group.group_id
    old_id = group.static_members[req.group_instance_id]  # type: ignore[index]
    old = group.members[old_id]
    fenced = f"Static member {old_id} with instance id {req.group_instance_id} was fenced by member {new_id}."
    if old.awaiting_join is not None:
        ctx.complete(old.awaiting_join, JoinGroupResponse(error_code=Errors.FENCED_INSTANCE_ID, member_id=old_id,
                                                             error_message=fenced))
    if old.awaiting_sync is not None:
        ctx.complete(old.awaiting_sync, SyncGroupResponse(error_code=Errors.FENCED_INSTANCE_ID, error_message=fenced))
    ctx.timers.cancel(heartbeat_key(gid, old_id))
    was_leader, pending_sync = group.leader_id == old_id, old_id in group.pending_sync
    unchanged = old.matches(protocols)
    group.remove(old_id)
    new = ClassicMember(new_id, req.group_instance_id, req.client_id, req.client_host, rebalance_timeout(req),
                        req.session_timeout_ms, req.protocol_type, protocols, old.assignment)
    group.add(new)
    if was_leader:
        group.leader_id = new_id
    if pending_sync:
        group.pending_sync.add(new_id)
    schedule_heartbeat(ctx, gid, new_id, now, req.session_timeout_ms)
    if group.is_in(STABLE) and unchanged:
        ctx.append(GroupMetadataKey(gid), group.record_value())
        return _join_response(group, new, skip_assignment=req.api_version >= 9 and was_leader)
    _park_join(ctx, new, rid)
    if group.is_in(PREPARING):
        _maybe_complete_join(ctx, group, now)
    else:
        prepare_rebalance(ctx, group, now)
    return Parked(rid)


def _join_response(group: ClassicGroup, member: ClassicMember, skip_assignment: bool = False) -> JoinGroupResponse:
    is_leader = member.member_id == group.leader_id
    members = ()
    if is_leader:
        members = tuple(JoinGroupMember(m.member_id, m.instance_id, m.metadata(group.protocol_name))
                        for m in group.members.values())
    return JoinGroupResponse(generation_id=group.generation_id, protocol_type=group.protocol_type,
                             protocol_name=group.protocol_name, leader=group.leader_id or "",
                             skip_assignment=skip_assignment, member_id=member.member_id, members=members)


# ====================================================================== the rebalance


def _maybe_prepare_rebalance_or_complete_join(ctx: GroupContext, group: ClassicGroup, now: int) -> None:
    if group.is_in(STABLE, COMPLETING, EMPTY):
        prepare_rebalance(ctx, group, now)
    elif group.is_in(PREPARING):
        _maybe_complete_join(ctx, group, now)


def prepare_rebalance(ctx: GroupContext, group: ClassicGroup, now: int) -> None:
    gid = group.group_id
    if group.is_in(COMPLETING):
        _fail_parked_syncs(ctx, group, Errors.REBALANCE_IN_PROGRESS)
    ctx.timers.cancel(sync_key(gid))
    group.pending_sync.clear()
    initial = group.is_in(EMPTY)
    if initial:
        delay = ctx.config.classic_initial_rebalance_delay_ms
        remaining = max(group.rebalance_timeout_ms() - delay, 0)
        group.new_member_added = False
        ctx.timers.schedule(join_key(gid), now + delay, ("classic-initial-join", gid, delay, remaining))
    else:
        ctx.timers.schedule(join_key(gid), now + group.rebalance_timeout_ms(), ("classic-join", gid))
    group.transition_to(PREPARING, now)
    if not initial:
        _maybe_complete_join(ctx, group, now)


def _maybe_complete_join(ctx: GroupContext, group: ClassicGroup, now: int) -> None:
    if group.is_in(PREPARING) and group.has_all_members_joined() and group.previous_state is not EMPTY:
        complete_join(ctx, group, now)


def complete_join(ctx: GroupContext, group: ClassicGroup, now: int) -> None:
    """End the join phase: drop dynamic members that did not re-join, start the next generation,
    answer every parked join (the leader gets the member list) and wait for the syncs."""
    if not group.is_in(PREPARING):
        return
    gid = group.group_id
    ctx.timers.cancel(join_key(gid))
    for member in list(group.members.values()):
        if member.awaiting_join is None and member.instance_id is None:
            _drop_member(ctx, group, member)
    joined = [m for m in group.members.values() if m.awaiting_join is not None]
    if group.leader_id is None or group.members[group.leader_id].awaiting_join is None:
        group.leader_id = joined[0].member_id if joined else next(iter(group.members), None)
    group.generation_id += 1
    if not group.members:
        group.protocol_name = None
        group.transition_to(EMPTY, now)
        ctx.append(GroupMetadataKey(gid), group.record_value())
        return
    group.protocol_name = group.select_protocol()
    group.transition_to(COMPLETING, now)
    for member in group.members.values():
        if member.awaiting_join is not None:
            rid, member.awaiting_join = member.awaiting_join, None
            response = _join_response(group, member)
            ctx.complete(rid, response)
        member.is_new = False
        schedule_heartbeat(ctx, gid, member.member_id, now, member.session_timeout_ms)
    group.pending_sync = set(group.members)
    ctx.timers.schedule(sync_key(gid), now + group.rebalance_timeout_ms(),
                          ("classic-sync", gid, group.generation_id))


def _fail_parked_syncs(ctx: GroupContext, group: ClassicGroup, code: Errors) -> None:
    for member in group.members.values():
        member.assignment = b""
        if member.awaiting_sync is not None:
            rid, member.awaiting_sync = member.awaiting_sync, None
            ctx.complete(rid, SyncGroupResponse(error_code=code))


def _drop_member(ctx: GroupContext, group: ClassicGroup, member: ClassicMember) -> None:
    """Remove a member without starting a rebalance; its parked requests get UNKNOWN_MEMBER_ID."""
    if member.awaiting_join is not None:
        ctx.complete(member.awaiting_join, JoinGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID,
                                                                member_id=member.member_id))
        member.awaiting_join = None
    if member.awaiting_sync is not None:
        ctx.complete(member.awaiting_sync, SyncGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID))
        member.awaiting_sync = None
    ctx.timers.cancel(heartbeat_key(group.group_id, member.member_id))
    group.remove(member.member_id)


def remove_member_and_rebalance(ctx: GroupContext, group: ClassicGroup, member: ClassicMember, now: int) -> None:
    _drop_member(ctx, group, member)
    if group.is_in(STABLE, COMPLETING):
        prepare_rebalance(ctx, group, now)
    elif group.is_in(PREPARING):
        _maybe_complete_join(ctx, group, now)


def schedule_heartbeat(ctx: GroupContext, group_id: str, member_id: str, now: int, timeout: int) -> None:
    ctx.timers.schedule(heartbeat_key(group_id, member_id), now + timeout, ("classic-heartbeat", group_id, member_id))


# ====================================================================== timers


def on_timer(ctx: GroupContext, payload: tuple, now: int) -> None:
    kind, gid = payload[0], payload[1]
    group = ctx.state.classic_groups.get(gid)
    if group is None:
        return
    if kind == "classic-heartbeat":
        member_id = payload[2]
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            _maybe_complete_join(ctx, group, now)
            _forget_if_unused(ctx, group)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if not member.is_new and (member.awaiting_join is not None or member.awaiting_sync is not None):
            return  # waiting for the rebalance counts as alive; the join/sync timers bound it
        remove_member_and_rebalance(ctx, group, member, now)
    elif kind == "classic-join":
        complete_join(ctx, group, now)
    elif kind == "classic-initial-join":
        delay, remaining = payload[2], payload[3]
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            next_delay = min(ctx.config.classic_initial_rebalance_delay_ms, remaining)
            ctx.timers.schedule(join_key(gid), now + next_delay,
                                  ("classic-initial-join", gid, next_delay, max(remaining - delay, 0)))
        else:
            complete_join(ctx, group, now)
    elif kind == "classic-sync":
        if payload[2] != group.generation_id or not group.is_in(COMPLETING, STABLE) or not group.pending_sync:
            return
        for member_id in sorted(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                _drop_member(ctx, group, member)
        group.pending_sync.clear()
        prepare_rebalance(ctx, group, now)


def _forget_if_unused(ctx: GroupContext, group: ClassicGroup) -> None:
    """A group that never got past MEMBER_ID_REQUIRED leaves no trace."""
    if (group.is_in(EMPTY) and not group.members and not group.pending_members and group.persisted is None
            and group.group_id not in ctx.state.offsets):
        del ctx.state.classic_groups[group.group_id]


def delete_group(ctx: GroupContext, group: ClassicGroup) -> None:
    """An empty classic group goes Dead: its tombstone if it was ever persisted, then it is gone."""
    group.transition_to(ClassicGroupState.DEAD, group.state_timestamp)
    if group.persisted is not None:
        ctx.append(GroupMetadataKey(group.group_id), None)
    ctx.state.classic_groups.pop(group.group_id, None)


# ====================================================================== SyncGroup / Heartbeat / LeaveGroup


def sync_group(ctx: GroupContext, req: SyncGroupRequest, now: int, rid: int):
    group = _classic_group(ctx, req.group_id)
    member = validate_member(group, req.member_id, req.group_instance_id)
    if req.generation_id != group.generation_id:
        raise CoordinatorError(Errors.ILLEGAL_GENERATION,
                               f"The generation id {req.generation_id} is not the group's {group.generation_id}.")
    if ((req.protocol_type is not None and req.protocol_type != group.protocol_type)
            or (req.protocol_name is not None and req.protocol_name != group.protocol_name)):
        raise CoordinatorError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                               f"The protocol {req.protocol_type}/{req.protocol_name} is not the group's "
                               f"{group.protocol_type}/{group.protocol_name}.")
    if group.is_in(EMPTY):
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
    if group.is_in(PREPARING):
        raise CoordinatorError(Errors.REBALANCE_IN_PROGRESS, "The group is rebalancing, so a rejoin is needed.")
    group.pending_sync.discard(member.member_id)
    if group.is_in(STABLE):
        return SyncGroupResponse(protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                                 assignment=member.assignment)
    if member.awaiting_sync is not None:
        ctx.complete(member.awaiting_sync, SyncGroupResponse(error_code=Errors.REBALANCE_IN_PROGRESS))
    member.awaiting_sync = rid
    if member.member_id == group.leader_id:
        assignments = {m: bytes(a) for m, a in req.assignments}
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        group.transition_to(STABLE, now)
        ctx.append(GroupMetadataKey(group.group_id), group.record_value())
        for m in group.members.values():
            if m.awaiting_sync is not None:
                sync_rid, m.awaiting_sync = m.awaiting_sync, None
                ctx.complete(sync_rid, SyncGroupResponse(protocol_type=group.protocol_type,
                                                            protocol_name=group.protocol_name, assignment=m.assignment))
    return Parked(rid)


def heartbeat(ctx: GroupContext, req: HeartbeatRequest, now: int) -> HeartbeatResponse:
    group = _classic_group(ctx, req.group_id)
    member = validate_member(group, req.member_id, req.group_instance_id)
    if req.generation_id != group.generation_id:
        raise CoordinatorError(Errors.ILLEGAL_GENERATION,
                               f"The generation id {req.generation_id} is not the group's {group.generation_id}.")
    if group.is_in(EMPTY):
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
    schedule_heartbeat(ctx, group.group_id, member.member_id, now, member.session_timeout_ms)
    if group.is_in(PREPARING):
        return HeartbeatResponse(Errors.REBALANCE_IN_PROGRESS, "The group is rebalancing, so a rejoin is needed.")
    return HeartbeatResponse()


def leave_group(ctx: GroupContext, req: LeaveGroupRequest, now: int) -> LeaveGroupResponse:
    group = ctx.state.classic_groups.get(req.group_id)
    if group is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Group {req.group_id} is not a classic group.")
    if group.is_in(DEAD):
        raise CoordinatorError(Errors.COORDINATOR_NOT_AVAILABLE, f"Group {req.group_id} is dead.")
    leaving = tuple(req.members) if req.api_version >= 3 else (LeaveGroupMember(req.member_id),)
    results = []
    for item in leaving:
        code = _leave_one(ctx, group, item, now)
        results.append(LeftMember(item.member_id, item.group_instance_id, code))
    if req.api_version >= 3:
        return LeaveGroupResponse(members=tuple(results))
    return LeaveGroupResponse(results[0].error_code)


def _leave_one(ctx: GroupContext, group: ClassicGroup, item: LeaveGroupMember, now: int) -> int:
    member_id, iid = item.member_id, item.group_instance_id
    if iid is not None:
        owner = group.static_members.get(iid)
        if owner is None:
            return Errors.UNKNOWN_MEMBER_ID
        if member_id and member_id != owner:
            return Errors.FENCED_INSTANCE_ID
        member_id = owner
    elif member_id in group.pending_members:
        group.pending_members.discard(member_id)
        ctx.timers.cancel(heartbeat_key(group.group_id, member_id))
        _maybe_complete_join(ctx, group, now)
        return Errors.NONE
    member = group.members.get(member_id)
    if member is None:
        return Errors.UNKNOWN_MEMBER_ID
    remove_member_and_rebalance(ctx, group, member, now)
    return Errors.NONE


def _classic_group(ctx: GroupContext, group_id: str) -> ClassicGroup:
    group = ctx.state.classic_groups.get(group_id)
    if group is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Group {group_id} is not a classic group.")
    if group.is_in(DEAD):
        raise CoordinatorError(Errors.COORDINATOR_NOT_AVAILABLE, f"Group {group_id} is dead.")
    return group


def error_response(request: object, err: CoordinatorError) -> object | None:
    if isinstance(request, JoinGroupRequest):
        return JoinGroupResponse(error_code=err.code, member_id=request.member_id, error_message=err.message)
    if isinstance(request, SyncGroupRequest):
        return SyncGroupResponse(error_code=err.code, error_message=err.message)
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResponse(err.code, err.message)
    if isinstance(request, LeaveGroupRequest):
        return LeaveGroupResponse(err.code, error_message=err.message)
    return None


# ====================================================================== unload / describe


def release_parked(group: ClassicGroup, code: Errors) -> list[tuple[int, object]]:
    """Answer every request parked on `group` with `code`."""
    out: list[tuple[int, object]] = []
    for member in group.members.values():
        if member.awaiting_join is not None:
            out.append((member.awaiting_join, JoinGroupResponse(error_code=code, member_id=member.member_id)))
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            out.append((member.awaiting_sync, SyncGroupResponse(error_code=code)))
            member.awaiting_sync = None
    return out


def unload(ctx: GroupContext) -> list[tuple[int, object]]:
    """Answer every parked request with NOT_COORDINATOR (the shard is going away)."""
    out: list[tuple[int, object]] = []
    for group in ctx.state.classic_groups.values():
        out.extend(release_parked(group, Errors.NOT_COORDINATOR))
    return out


def describe_classic(group: ClassicGroup) -> DescribedClassicGroup:
    """Kafka's DescribeGroups answer: members with metadata and assignment only when Stable."""
    stable = group.is_in(STABLE)
    members = tuple(
        DescribedClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host,
                               m.metadata(group.protocol_name) if stable else b"", m.assignment if stable else b"")
        for m in group.members.values()
    )
    return DescribedClassicGroup(group.group_id, group_state=group.state.value, protocol_type=group.protocol_type or "",
                                 protocol_data=(group.protocol_name or "") if stable else "", members=members)


def describe_groups(ctx: GroupContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    out = []
    for gid in req.group_ids:
        classic = ctx.state.classic_groups.get(gid)
        if classic is not None and not classic.is_in(DEAD) and (classic.members or classic.persisted is not None
                                                                 or gid not in ctx.state.groups):
            out.append(describe_classic(classic))
            continue
        consumer_group = ctx.committed_state(gid).groups.get(gid)
        if consumer_group is not None:
            out.append(consumer.describe_as_classic(ctx, consumer_group))
        elif req.api_version >= 6 and gid not in ctx.state.offsets:
            out.append(DescribedClassicGroup(gid, Errors.GROUP_ID_NOT_FOUND, group_state=DEAD.value,
                                             error_message=f"Group {gid} is not a classic group."
                                             if gid in ctx.state.share_groups else f"Group {gid} not found."))
        else:
            out.append(DescribedClassicGroup(gid, group_state=EMPTY.value if gid in ctx.state.offsets
                                             else DEAD.value))
    return DescribeGroupsResponse(tuple(out))

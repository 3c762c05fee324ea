"""The consumer group type (KIP-848): ConsumerGroupHeartbeat, membership, target assignment,
reconciliation, and ConsumerGroupDescribe's view of a group.

Functions of a `GroupContext` (context.py); the shard routes requests here. Everything that
crosses into classic groups (upgrading one on a consumer member's join, downgrading when the last
consumer member leaves) is in migration.py, which uses this module and not the reverse.

Timer keys follow Kafka: `session-timeout-{group}-{member}`, `rebalance-timeout-{group}-{member}`,
and for classic members of a consumer group `join-{group}-{member}`, `sync-{group}-{member}`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import re2

from cohort.coordinator import client_assignment, lag_balance
from cohort.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
)
from cohort.coordinator.consumer_protocol import PROTOCOL_TYPE, Subscription, encode_assignment, encode_subscription
from cohort.coordinator.consumer_protocol import Assignment as ProtocolAssignment
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.reconcile import reconcile
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
    MemberState,
)
from cohort.coordinator.requests import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedClassicGroup,
    DescribedClassicMember,
    DescribedGroup,
    DescribedMember,
    DescribedTopicPartitions,
)
from cohort.coordinator.static_members import check_instance_owner
from cohort.coordinator.target import assignor_name, compute_target, selection, write_target


# A member's client-side assignors live in its metadata record: a bound keeps a client from
# growing every record of its group (cohort's; Kafka has no client-side assignors).
MAX_CLIENT_ASSIGNORS = 32


def member_join_key(group_id: str, member_id: str) -> str:
    """A classic member of a consumer group must re-join by then (after REBALANCE_IN_PROGRESS)."""
    return f"join-{group_id}-{member_id}"


def member_sync_key(group_id: str, member_id: str) -> str:
    """A classic member of a consumer group must sync by then (after its join)."""
    return f"sync-{group_id}-{member_id}"


def session_timeout_key(group_id: str, member_id: str) -> str:
    return f"session-timeout-{group_id}-{member_id}"


def rebalance_timeout_key(group_id: str, member_id: str) -> str:
    return f"rebalance-timeout-{group_id}-{member_id}"


def schedule_session(ctx: GroupContext, group_id: str, member_id: str, now: int, timeout: int) -> None:
    ctx.timers.schedule(session_timeout_key(group_id, member_id), now + timeout,
                         ("session", group_id, member_id))


def schedule_rebalance(ctx: GroupContext, group_id: str, member: ConsumerGroupMember, now: int) -> None:
    ctx.timers.schedule(rebalance_timeout_key(group_id, member.member_id), now + member.rebalance_timeout_ms,
                         ("rebalance", group_id, member.member_id, member.member_epoch))


def cancel_member_timers(ctx: GroupContext, group_id: str, member_id: str) -> None:
    ctx.timers.cancel(session_timeout_key(group_id, member_id))
    ctx.timers.cancel(rebalance_timeout_key(group_id, member_id))
    ctx.timers.cancel(member_join_key(group_id, member_id))
    ctx.timers.cancel(member_sync_key(group_id, member_id))


def steady_heartbeat(ctx: GroupContext, req: ConsumerGroupHeartbeatRequest, now: int) -> ConsumerGroupHeartbeatResponse | None:
    """The common case answered without records or copies: a reconciled member, nothing changed.

    Returns None whenever anything might differ, and the full pipeline runs instead. Every
    condition here implies the validation the full path would do (ids of existing members and
    groups are never blank, epoch > 0), so the answer is the same.
    """
    epoch = req.member_epoch
    if epoch <= 0:
        return None
    group = ctx.state.groups.get(req.group_id)
    if group is None or group.refresh_metadata:
        return None
    member = group.members.get(req.member_id)
    if (member is None or member.member_epoch != epoch or member.state is not MemberState.STABLE
            or epoch != group.assignment_epoch or epoch != group.group_epoch
            or req.client_id != member.client_id or req.client_host != member.client_host
            or req.server_assignor is not None or req.client_assignors is not None
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
    config = ctx.state.configs.get(group_id)
    if config is None:
        session, interval = ctx.config.consumer_session_timeout_ms, ctx.config.consumer_heartbeat_interval_ms
    else:
        session, interval = config.session_timeout(ctx.config), config.heartbeat_interval(ctx.config)
    ctx.timers.schedule(f"session-timeout-{group_id}-{member_id}", now + session,
                         ("session", group_id, member_id))
    full = req.rebalance_timeout_ms != -1 and req.topic_partitions is not None and (
        names is not None or req.subscribed_topic_regex is not None)
    return ConsumerGroupHeartbeatResponse(0, None, member_id, epoch, interval,
                                          member.assigned_partitions if full else None)


def heartbeat(ctx: GroupContext, req: ConsumerGroupHeartbeatRequest, now: int) -> ConsumerGroupHeartbeatResponse:
    """The full heartbeat, for a request that passed `validate_heartbeat` and whose classic group
    of the same id (if any) the shard has already upgraded or cleared (migration.py). Regexes are
    resolved with `ctx.topic_filter`."""
    epoch = req.member_epoch
    if epoch < 0:
        return leave(ctx, req)
    gid = req.group_id
    group = ctx.state.groups.get(gid)
    if group is None:
        if epoch != 0:
            raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        group = ConsumerGroup(gid)  # materialised by the first record
    member_id = req.member_id
    if not member_id and req.api_version == 0:
        member_id = ctx.new_member_id()

    iid = req.instance_id
    members = group.members
    if (len(members) >= ctx.config.consumer_max_size and member_id not in members
            and not (iid is not None and iid in group.static_members)):
        raise CoordinatorError(
            Errors.GROUP_MAX_SIZE_REACHED,
            f"The consumer group has reached its maximum capacity of {ctx.config.consumer_max_size} members.",
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
            check_member_epoch(member, epoch, req.topic_partitions)
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
                member = replace_static_member(ctx, group, owner, member_id)
                known = True
                group = ctx.state.groups[gid]
        else:
            check_instance_owner(group.static_members, member_id, iid)
            member = owner
            check_member_epoch(member, epoch, req.topic_partitions)

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
        client_assignors=member.client_assignors if req.client_assignors is None else tuple(req.client_assignors),
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

    group_config = ctx.state.group_config(gid)
    current = update_and_reconcile(ctx, group, member, updated, known, subscription_changed, regex_changed,
                                         req.topic_partitions, group_config.session_timeout(ctx.config), now)

    full = (req.rebalance_timeout_ms != -1 and req.topic_partitions is not None
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
    group = ctx.state.groups[gid]
    result = group.target_results.get(member_id)
    send_assignment = (epoch == 0 or full or current.assigned_partitions != member.assigned_partitions
                       or (result is not None and current.member_epoch != member.member_epoch))
    computation = group.client_assignment
    return ConsumerGroupHeartbeatResponse(
        member_id=member_id,
        member_epoch=current.member_epoch,
        heartbeat_interval_ms=group_config.heartbeat_interval(ctx.config),
        assignment=current.assigned_partitions if send_assignment else None,
        should_compute_assignment=(computation is not None and computation.member_id == member_id
                                   and group.group_epoch > group.assignment_epoch),
        assignment_result=result if send_assignment else None,
    )


def update_and_reconcile(ctx: GroupContext, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                          known: bool, subscription_changed: bool, regex_changed: bool,
                          owned: Mapping[uuid.UUID, Iterable[int]] | None, session: int,
                          now: int) -> ConsumerGroupMember:
    """Steps 4-7 of the heartbeat, shared with classic members of a consumer group (migration.py):
    the member's new metadata, the group-epoch bump, the target assignment, reconciliation and
    the session timer. Returns the member as reconciled."""
    gid, member_id = group.group_id, updated.member_id
    regex = updated.subscribed_topic_regex
    order = ctx.config.consumer_assignors
    assignor_before = group.preferred_assignor(order)
    if not known or not updated.same_metadata(member):
        ctx.append(ConsumerGroupMemberMetadataKey(gid, member_id), updated.metadata_value())
        group = ctx.state.groups[gid]
    bump = subscription_changed or group.group_epoch == 0

    if regex_changed:
        if regex and regex not in group.resolved_regexes:
            resolve_regex(ctx, group, regex, now)
        old_regex = member.subscribed_topic_regex
        if old_regex and old_regex not in group.regex_counts and old_regex in group.resolved_regexes:
            ctx.append(ConsumerGroupRegularExpressionKey(gid, old_regex), None)
    refresh = group.refresh_metadata
    if refresh:
        for used in list(group.regex_counts):
            if resolve_regex(ctx, group, used, now):
                bump = True
    metadata_hash = group.metadata_hash
    if bump or refresh:
        metadata_hash = ctx.image.subscription_hash(group.subscribed_topic_names())
        if metadata_hash != group.metadata_hash:
            bump = True
    if known and group.preferred_assignor(order) != assignor_before:
        bump = True  # trunk KAFKA-20434
    if known and updated.client_assignors != member.client_assignors:
        bump = True  # the client-side assignors or their metadata changed: they may assign otherwise
    if bump:
        ctx.append(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(group.group_epoch + 1, metadata_hash))

    # ---- target assignment, computed lazily when the group epoch is ahead
    if group.group_epoch > group.assignment_epoch:
        update_target(ctx, group, member_id, now)

    # ---- reconcile the member towards its target
    current = group.members[member_id]
    target_epoch = group.assignment_epoch
    if not current.is_reconciled_to(target_epoch) or subscription_changed:
        reconciled = reconcile(current, target_epoch, group.target_assignment.get(member_id, EMPTY_ASSIGNMENT),
                               group.partition_epoch, owned)
        if reconciled is not current:
            ctx.append(ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), reconciled.assignment_value())
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                ctx.after(lambda m=reconciled: schedule_rebalance(ctx, gid, m, now))
            else:
                ctx.after(lambda: ctx.timers.cancel(rebalance_timeout_key(gid, member_id)))
            current = reconciled

    ctx.after(lambda: schedule_session(ctx, gid, member_id, now, session))
    if refresh:
        ctx.after(lambda: setattr(ctx.state.groups.get(gid) or group, "refresh_metadata", False))
    return current


def validate_heartbeat(ctx: GroupContext, req: ConsumerGroupHeartbeatRequest) -> None:
    def invalid(message: str) -> CoordinatorError:
        return CoordinatorError(Errors.INVALID_REQUEST, message)

    epoch = req.member_epoch
    if blank(req.member_id) and (req.api_version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH):
        raise invalid("MemberId can't be empty.")
    if blank(req.group_id):
        raise invalid("GroupId can't be empty.")
    if req.instance_id is not None and blank(req.instance_id):
        raise invalid("InstanceId can't be empty.")
    if req.rack_id is not None and blank(req.rack_id):
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
    if req.client_assignors is not None and len(req.client_assignors) > MAX_CLIENT_ASSIGNORS:
        raise invalid(f"ClientAssignors lists {len(req.client_assignors)} assignors; at most "
                      f"{MAX_CLIENT_ASSIGNORS} are accepted.")
    for a in req.client_assignors or ():
        if blank(a.name):
            raise invalid("ClientAssignors names can't be empty.")
        if not 0 <= a.minimum_version <= a.maximum_version:
            raise invalid(f"ClientAssignor {a.name} has an invalid version range "
                          f"[{a.minimum_version}, {a.maximum_version}].")
        if not a.minimum_version <= a.metadata_version <= a.maximum_version:
            raise invalid(f"ClientAssignor {a.name}'s MetadataVersion {a.metadata_version} is outside its range "
                          f"[{a.minimum_version}, {a.maximum_version}].")
    if req.server_assignor is not None and req.server_assignor not in ctx.config.consumer_assignors:
        raise CoordinatorError(
            Errors.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(ctx.config.consumer_assignors)}.",
        )


def leave(ctx: GroupContext, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    gid, member_id = req.group_id, req.member_id
    group = ctx.state.groups.get(gid)
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
            ctx.append(ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), parked.assignment_value())
            return ConsumerGroupHeartbeatResponse(member_id=member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
    ctx.fence_member(group, member)
    return ConsumerGroupHeartbeatResponse(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)


def remove_member(ctx: GroupContext, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    """Remove a member from a group that stays a consumer group: its three tombstones, unused
    regexes, then a group epoch bump. Fencing goes through `ctx.fence_member`, which decides first
    whether the group turns back into a classic one (migration.py)."""
    gid, member_id = group.group_id, member.member_id
    ctx.append(ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), None)
    ctx.append(ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None)
    ctx.append(ConsumerGroupMemberMetadataKey(gid, member_id), None)
    regex = member.subscribed_topic_regex
    if regex and regex not in group.regex_counts and regex in group.resolved_regexes:
        ctx.append(ConsumerGroupRegularExpressionKey(gid, regex), None)
    new_epoch = group.group_epoch + 1
    metadata_hash = ctx.image.subscription_hash(group.subscribed_topic_names())
    ctx.append(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(new_epoch, metadata_hash))
    if not group.members:
        ctx.append(ConsumerGroupTargetAssignmentMetadataKey(gid),
                   ConsumerGroupTargetAssignmentMetadataValue(new_epoch))  # trunk KAFKA-20442
    ctx.after(lambda: cancel_member_timers(ctx, gid, member_id))


def replace_static_member(ctx: GroupContext, group: ConsumerGroup, old: ConsumerGroupMember,
                           new_member_id: str) -> ConsumerGroupMember:
    gid = group.group_id
    old_target = group.target_assignment.get(old.member_id)
    ctx.append(ConsumerGroupCurrentMemberAssignmentKey(gid, old.member_id), None)
    ctx.append(ConsumerGroupTargetAssignmentMemberKey(gid, old.member_id), None)
    ctx.append(ConsumerGroupMemberMetadataKey(gid, old.member_id), None)
    new = old._replace(member_id=new_member_id, member_epoch=0, previous_member_epoch=0)
    ctx.append(ConsumerGroupMemberMetadataKey(gid, new_member_id), new.metadata_value())
    if old_target is not None:
        ctx.append(ConsumerGroupTargetAssignmentMemberKey(gid, new_member_id),
                   ConsumerGroupTargetAssignmentMemberValue(old_target))
    ctx.append(ConsumerGroupCurrentMemberAssignmentKey(gid, new_member_id), new.assignment_value())
    old_id = old.member_id
    ctx.after(lambda: cancel_member_timers(ctx, gid, old_id))
    return ctx.state.groups[gid].members[new_member_id]


def resolve_regex(ctx: GroupContext, group: ConsumerGroup, regex: str, now: int) -> bool:
    """Resolve a regex against the image (RE2, full match), keeping only the topics the
    heartbeating member may describe when ACLs are on (Kafka resolves with the request
    context of the member whose heartbeat triggered the refresh); emit a record if the
    result changed."""
    try:
        pattern = re2.compile(regex)
    except re2.error:
        return False
    allowed = ctx.topic_filter
    topics = tuple(sorted(n for n in ctx.image.by_name if pattern.fullmatch(n) and (allowed is None or allowed(n))))
    old = group.resolved_regexes.get(regex)
    if old is not None and old.topics == frozenset(topics):
        return False
    ctx.append(ConsumerGroupRegularExpressionKey(group.group_id, regex),
               ConsumerGroupRegularExpressionValue(topics, ctx.image.version, now))
    return True


def update_target(ctx: GroupContext, group: ConsumerGroup, member_id: str, now: int) -> None:
    """A new target for a group whose epoch moved, in the heartbeat of `member_id`: computed here
    by a server-side assignor, or asked of a member when the group's assignor is a client-side
    one (client_assignment.py)."""
    gid, epoch = group.group_id, group.group_epoch
    chosen = selection(ctx, group)
    if chosen.client_side:
        client_assignment.on_heartbeat(ctx, group, group.members[member_id], now)
        return
    if group.client_assignment is not None:
        group.client_assignment = None
        ctx.after(lambda: ctx.timers.cancel(client_assignment.timer_key(gid)))
    name = chosen.name
    write_target(ctx, gid, epoch, compute_target(group, ctx.image, ctx.assignor(name), epoch, ctx.lag_provider))
    if name == lag_balance.LAG_ASSIGNOR:
        now = ctx.now
        ctx.after(lambda: lag_balance.arm(ctx, gid, now))


def delete_group_records(ctx: GroupContext, group: ConsumerGroup) -> None:
    """Tombstones for an empty group, in Kafka's order."""
    gid = group.group_id
    for member_id in list(group.target_assignment):
        ctx.append(ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None)
    ctx.append(ConsumerGroupTargetAssignmentMetadataKey(gid), None)
    for regex in sorted(group.resolved_regexes):
        ctx.append(ConsumerGroupRegularExpressionKey(gid, regex), None)
    ctx.append(ConsumerGroupMetadataKey(gid), None)


def describe(ctx: GroupContext, group: ConsumerGroup) -> DescribedGroup:
    members = []
    for member_id in sorted(group.members):
        m = group.members[member_id]
        members.append(DescribedMember(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=tuple(sorted(m.subscribed_topic_names)),
            subscribed_topic_regex=m.subscribed_topic_regex or None,
            assignment=describe_assignment(ctx, m.assigned_partitions),
            target_assignment=describe_assignment(ctx, group.target_assignment.get(member_id, EMPTY_ASSIGNMENT)),
            member_type=0 if m.is_classic else 1,
        ))
    return DescribedGroup(
        group_id=group.group_id, group_state=group.state().value, group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=assignor_name(ctx, group),
        members=tuple(members),
    )


def describe_assignment(ctx: GroupContext, assignment: Assignment) -> tuple[DescribedTopicPartitions, ...]:
    by_id = ctx.image.by_id
    out = []
    for topic_id in sorted(assignment, key=lambda t: (by_id[t].name if t in by_id else "", t)):
        topic = by_id.get(topic_id)
        if topic is not None:
            out.append(DescribedTopicPartitions(topic_id, topic.name, tuple(assignment[topic_id])))
    return tuple(out)


def describe_as_classic(ctx: GroupContext, group: ConsumerGroup) -> DescribedClassicGroup:
    """A consumer group in DescribeGroups (Kafka 4.0): its state name, protocol type `consumer`,
    the assignor as protocol data, each member's subscription and current assignment encoded
    in the ConsumerProtocol."""
    by_id = ctx.image.by_id
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
    assignor = assignor_name(ctx, group)
    return DescribedClassicGroup(group.group_id, group_state=group.state().value, protocol_type=PROTOCOL_TYPE,
                                 protocol_data=assignor, members=tuple(members))


def check_member_epoch(member: ConsumerGroupMember, received: int,
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
    if received != member.previous_member_epoch or owned is None or not is_subset(owned, member.assigned_partitions):
        raise CoordinatorError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
            f"group coordinator ({stored}). The member must abandon all its partitions and rejoin.",
        )


def is_subset(owned: Mapping[uuid.UUID, Iterable[int]], assigned: Assignment) -> bool:
    for topic_id, parts in owned.items():
        parts = tuple(parts)
        if parts and not set(parts).issubset(assigned.get(topic_id, ())):
            return False
    return True


def blank(s: str | None) -> bool:
    return s is None or not s.strip()

"""Client-side assignors (the seeds' KIP-848 design): the member chosen to compute a group's next
target, ConsumerGroupPrepareAssignment and ConsumerGroupInstallAssignment.

While the group's selected assignor is a client-side one (selection.py) and its group epoch is
ahead of its assignment epoch, one member computes the next target: its heartbeat responses
carry ShouldComputeAssignment, it reads the group with Prepare and writes the result with
Install, which validates it and installs it as the target; reconciliation then proceeds as with
a server-side assignor. A chosen member that installs nothing within its rebalance timeout is
replaced by the next member to heartbeat. Until an assignment is installed the group keeps its
previous target, so nothing is revoked.

Who computes is soft state, like a timer: it is not in the records, and a group loaded elsewhere
chooses again on its next heartbeat.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from cohort.coordinator.consumer_group import ConsumerGroup, ConsumerGroupMember
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.records import EMPTY_ASSIGNMENT, Assignment
from cohort.coordinator.requests import (
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    PreparedMember,
    PreparedTopic,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
)
from cohort.coordinator.target import selection, write_target

TIMER_KIND = "client-assignment"


def timer_key(group_id: str) -> str:
    return f"{TIMER_KIND}-{group_id}"


class Computation(NamedTuple):
    """The member computing the group's next target (None: to be chosen), and the members that
    were chosen and let their rebalance timeout pass since the last installed assignment."""

    member_id: str | None
    timed_out: frozenset[str] = frozenset()


def awaiting(ctx: GroupContext, group: ConsumerGroup) -> bool:
    """Whether the group waits for a client-side assignor's next target."""
    return group.group_epoch > group.assignment_epoch and selection(ctx, group).client_side


def on_heartbeat(ctx: GroupContext, group: ConsumerGroup, member: ConsumerGroupMember, now: int) -> bool:
    """Called in a heartbeat of `member` while the group awaits a client-side target: chooses a
    computing member if none is (this one, unless it already timed out while others did not).
    Returns whether `member` is the one computing."""
    gid = group.group_id
    comp = group.client_assignment or Computation(None)
    if comp.member_id is not None and comp.member_id in group.members:
        return comp.member_id == member.member_id
    timed_out = comp.timed_out & group.members.keys()
    if member.member_id in timed_out:
        if len(timed_out) < len(group.members):
            group.client_assignment = Computation(None, frozenset(timed_out))
            return False
        timed_out = frozenset()  # every member had its turn: start over
    group.client_assignment = Computation(member.member_id, frozenset(timed_out))
    timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else ctx.config.consumer_session_timeout_ms
    ctx.after(lambda: ctx.timers.schedule(timer_key(gid), now + timeout, (TIMER_KIND, gid, member.member_id)))
    return True


def on_timeout(ctx: GroupContext, payload: tuple) -> None:
    """The chosen member's rebalance timeout passed without an installed assignment."""
    _, gid, member_id = payload
    group = ctx.state.groups.get(gid)
    if group is None:
        return
    comp = group.client_assignment
    if comp is not None and comp.member_id == member_id:
        group.client_assignment = Computation(None, comp.timed_out | {member_id})


def _check_computing(ctx: GroupContext, group_id: str, member_id: str, member_epoch: int) -> ConsumerGroup:
    group = ctx.state.groups.get(group_id)
    if group is None:
        raise CoordinatorError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    member = group.members.get(member_id)
    if member is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
    if member_epoch != member.member_epoch:
        raise CoordinatorError(Errors.FENCED_MEMBER_EPOCH,
                               f"The member epoch {member_epoch} is not the current one ({member.member_epoch}).")
    comp = group.client_assignment
    if not awaiting(ctx, group) or comp is None or comp.member_id != member_id:
        raise CoordinatorError(Errors.INVALID_REQUEST,
                               f"Member {member_id} was not chosen to compute the assignment of group {group_id}.")
    return group


def prepare(ctx: GroupContext, req: PrepareAssignmentRequest) -> PrepareAssignmentResponse:
    """What the chosen member needs to run the group's client-side assignor."""
    group = _check_computing(ctx, req.group_id, req.member_id, req.member_epoch)
    name = selection(ctx, group).name
    by_name = ctx.image.by_name
    members, topic_ids = [], set()
    for member_id in sorted(group.members):
        m = group.members[member_id]
        ids = tuple(sorted((by_name[n].topic_id for n in group.member_topic_names(m) if n in by_name), key=str))
        topic_ids.update(ids)
        own = next(a for a in m.client_assignors if a.name == name)
        members.append(PreparedMember(
            member_id, m.member_epoch, m.instance_id, m.rack_id, ids, own.metadata_version, own.reason,
            own.metadata_bytes, group.target_assignment.get(member_id, EMPTY_ASSIGNMENT)))
    by_id = ctx.image.by_id
    topics = tuple(PreparedTopic(t, by_id[t].name, by_id[t].num_partitions) for t in sorted(topic_ids, key=str))
    return PrepareAssignmentResponse(group_epoch=group.group_epoch, assignor_name=name, members=tuple(members),
                                     topics=topics)


def install(ctx: GroupContext, req: InstallAssignmentRequest) -> InstallAssignmentResponse:
    """Validate the chosen member's assignment and write it as the group's new target."""
    group = _check_computing(ctx, req.group_id, req.member_id, req.member_epoch)
    if req.group_epoch != group.group_epoch:
        raise CoordinatorError(Errors.FENCED_MEMBER_EPOCH,
                               f"The assignment was computed for group epoch {req.group_epoch}, but the group is "
                               f"at epoch {group.group_epoch}: prepare it again.")
    if not -128 <= req.error <= 127:
        raise CoordinatorError(Errors.INVALID_REQUEST, "Error must fit in an int8.")
    by_id = ctx.image.by_id
    new: dict[str, Assignment] = {}
    results: dict[str, tuple[int, int, bytes]] = {}
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for entry in req.members:
        member = group.members.get(entry.member_id)
        if member is None:
            raise CoordinatorError(Errors.INVALID_REQUEST,
                                   f"Member {entry.member_id} is not a member of group {group.group_id}.")
        if entry.member_id in new:
            raise CoordinatorError(Errors.INVALID_REQUEST, f"Member {entry.member_id} is assigned twice.")
        subscribed = group.member_topic_names(member)
        assignment: dict[uuid.UUID, tuple[int, ...]] = {}
        for topic_id, partitions in entry.partitions.items():
            topic = by_id.get(topic_id)
            if topic is None or topic.name not in subscribed:
                raise CoordinatorError(Errors.INVALID_REQUEST,
                                       f"Member {entry.member_id} is assigned topic {topic_id}, which it does not "
                                       f"subscribe to.")
            parts = tuple(sorted(partitions))
            if parts and not 0 <= parts[0] <= parts[-1] < topic.num_partitions:
                missing = parts[0] if parts[0] < 0 else parts[-1]
                raise CoordinatorError(Errors.INVALID_REQUEST, f"Partition {topic.name}-{missing} does not exist.")
            twice = len(set(parts)) != len(parts)
            for p in parts:
                if twice and parts.count(p) > 1 or owner.setdefault((topic_id, p), entry.member_id) != entry.member_id:
                    raise CoordinatorError(Errors.INVALID_REQUEST,
                                           f"Partition {topic.name}-{p} is assigned more than once.")
            if parts:
                assignment[topic_id] = parts
        new[entry.member_id] = assignment or EMPTY_ASSIGNMENT
        result = (req.error, entry.metadata_version, bytes(entry.metadata_bytes))
        if result != (0, 0, b""):
            results[entry.member_id] = result
    changed: dict[str, Assignment] = {}
    for member_id in group.members:
        target = new.get(member_id, EMPTY_ASSIGNMENT)
        result = results.get(member_id, (0, 0, b""))
        if (target != group.target_assignment.get(member_id, EMPTY_ASSIGNMENT)
                or result != group.target_results.get(member_id, (0, 0, b""))
                or member_id not in group.target_assignment):
            changed[member_id] = target
    gid = group.group_id
    write_target(ctx, gid, req.group_epoch, changed, results)
    group = ctx.state.groups[gid]
    group.client_assignment = None
    ctx.after(lambda: ctx.timers.cancel(timer_key(gid)))
    return InstallAssignmentResponse()

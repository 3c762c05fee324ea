"""Kafka's CurrentAssignmentBuilder as a pure function: move a member one step towards its target.

Rules (with the trunk fixes KAFKA-19449 and KAFKA-19974):
* partitions to revoke are handed back first: while the member still owns any of them it stays in
  UNREVOKED_PARTITIONS at its current epoch and gets nothing new;
* a partition still held by another member (its partition epoch is not -1) is withheld, and the
  member is UNRELEASED_PARTITIONS until it is free; partitions this member itself has pending
  revocation are not "held by another";
* otherwise the member moves to the target epoch, STABLE.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping

from cohort.coordinator.consumer_group import ConsumerGroupMember
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.records import EMPTY_ASSIGNMENT, Assignment, MemberState

PartitionEpoch = Callable[[uuid.UUID, int], int]
Owned = Mapping[uuid.UUID, Collection[int]] | None


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Owned,
) -> ConsumerGroupMember:
    """The member after one reconciliation step (the same object when nothing changes)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is not None and not any(owned.values()):
        return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)
    raise CoordinatorError(
        Errors.FENCED_MEMBER_EPOCH,
        f"The consumer group member {member.member_id} is in an unknown state. "
        "The member must abandon all its partitions and rejoin.",
    )


def _owns_any(owned: Owned, partitions: Assignment) -> bool:
    if owned is None:
        return True
    for topic_id, parts in partitions.items():
        mine = owned.get(topic_id)
        if mine and not set(parts).isdisjoint(mine):
            return True
    return False


def _next(
    member: ConsumerGroupMember,
    epoch_if_revoking: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Owned,
) -> ConsumerGroupMember:
    assigned = member.assigned_partitions
    pending_own = member.partitions_pending_revocation
    kept: dict[uuid.UUID, tuple[int, ...]] = {}
    to_revoke: dict[uuid.UUID, tuple[int, ...]] = {}
    to_assign: dict[uuid.UUID, tuple[int, ...]] = {}
    has_unreleased = False
    for topic_id in target.keys() | assigned.keys():
        target_parts = target.get(topic_id, ())
        current = assigned.get(topic_id, ())
        if target_parts == current:
            if current:
                kept[topic_id] = current
            continue
        target_set = set(target_parts)
        current_set = set(current)
        keep = current_set & target_set
        revoke = current_set - keep
        assign = target_set - keep
        if assign:
            own_pending = pending_own.get(topic_id, ())
            for p in list(assign):
                if partition_epoch(topic_id, p) != -1 and p not in own_pending:
                    assign.discard(p)
                    has_unreleased = True
        if keep:
            kept[topic_id] = tuple(sorted(keep))
        if revoke:
            to_revoke[topic_id] = tuple(sorted(revoke))
        if assign:
            to_assign[topic_id] = tuple(sorted(assign))

    if to_revoke and _owns_any(owned, to_revoke):
        return _updated(member, epoch_if_revoking, MemberState.UNREVOKED_PARTITIONS, kept, to_revoke)
    if to_assign:
        merged = dict(kept)
        for topic_id, parts in to_assign.items():
            merged[topic_id] = tuple(sorted(set(parts) | set(merged.get(topic_id, ()))))
        state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
        return _updated(member, target_epoch, state, merged, EMPTY_ASSIGNMENT)
    state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
    return _updated(member, target_epoch, state, kept, EMPTY_ASSIGNMENT)


def _updated(member: ConsumerGroupMember, epoch: int, state: MemberState, assigned: Assignment,
             pending: Assignment) -> ConsumerGroupMember:
    candidate = member._replace(
        member_epoch=epoch, previous_member_epoch=member.member_epoch, state=state,
        assigned_partitions=assigned or EMPTY_ASSIGNMENT, partitions_pending_revocation=pending or EMPTY_ASSIGNMENT,
    )
    return member if candidate == member else candidate

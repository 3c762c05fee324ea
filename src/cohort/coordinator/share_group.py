"""Share-group state (KIP-932) and the one place its records change it (`ShareGroups.apply`).

A share group is what Kafka 4.2 keeps in `__consumer_offsets` under record types 10-15: the
group epoch and metadata hash, the members (their subscription and current assignment), the
target assignment and which share-partitions have durable state (initialized ones are the only
assignable ones). As for consumer groups, state is exactly what the records say, and `apply`
returns the inverse record so a shard can undo an uncommitted write.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from cohort.coordinator.errors import IllegalStateError
from cohort.coordinator.records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    MemberState,
    Record,
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    SharePartitionsInfo,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

SHARE_PROTOCOL_TYPE = "share"


class ShareGroupMember(NamedTuple):
    """An immutable share-group member; `_replace()` makes the updated copy."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned_partitions: Assignment = EMPTY_ASSIGNMENT

    def metadata_value(self) -> ShareGroupMemberMetadataValue:
        return ShareGroupMemberMetadataValue(self.rack_id, self.client_id, self.client_host,
                                             tuple(sorted(self.subscribed_topic_names)))

    def assignment_value(self) -> ShareGroupCurrentMemberAssignmentValue:
        return ShareGroupCurrentMemberAssignmentValue(self.member_epoch, self.previous_member_epoch, self.state,
                                                      self.assigned_partitions)

    def same_metadata(self, other: "ShareGroupMember") -> bool:
        return (self.rack_id == other.rack_id and self.client_id == other.client_id
                and self.client_host == other.client_host
                and self.subscribed_topic_names == other.subscribed_topic_names)


class ShareGroup:
    """A share group: epochs, members, target assignment, and its share-partitions' state metadata."""

    __slots__ = ("group_id", "group_epoch", "metadata_hash", "assignment_epoch", "members", "target_assignment",
                 "initializing", "initialized", "deleting", "refresh_metadata")

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.target_assignment: dict[str, Assignment] = {}
        # topic id -> SharePartitionsInfo (record type 15)
        self.initializing: dict[uuid.UUID, SharePartitionsInfo] = {}
        self.initialized: dict[uuid.UUID, SharePartitionsInfo] = {}
        self.deleting: dict[uuid.UUID, str] = {}
        self.refresh_metadata = True  # soft state: look at the topic image again on the next heartbeat

    def copy(self) -> "ShareGroup":
        other = ShareGroup(self.group_id)
        other.group_epoch, other.metadata_hash, other.assignment_epoch = (
            self.group_epoch, self.metadata_hash, self.assignment_epoch)
        other.members = dict(self.members)
        other.target_assignment = dict(self.target_assignment)
        other.initializing = dict(self.initializing)
        other.initialized = dict(self.initialized)
        other.deleting = dict(self.deleting)
        other.refresh_metadata = self.refresh_metadata
        return other

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState: Empty without members, else Stable."""
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names |= m.subscribed_topic_names
        return names

    def state_metadata_value(self) -> ShareGroupStatePartitionMetadataValue:
        return ShareGroupStatePartitionMetadataValue(
            tuple(self.initializing[t] for t in sorted(self.initializing)),
            tuple(self.initialized[t] for t in sorted(self.initialized)),
            tuple((t, self.deleting[t]) for t in sorted(self.deleting)))

    def initialized_partitions(self, topic_id: uuid.UUID) -> tuple[int, ...]:
        info = self.initialized.get(topic_id)
        return () if info is None else info.partitions


class ShareGroups:
    """The share groups of one shard, changed only by their records."""

    __slots__ = ("groups",)

    def __init__(self) -> None:
        self.groups: dict[str, ShareGroup] = {}

    def apply(self, record: Record, track: bool) -> tuple[Record | None, bool]:
        """Apply one share-group record. With `track`, return (inverse record, group created)."""
        key, value = record
        gid = key.group_id  # type: ignore[attr-defined]
        group = self.groups.get(gid)
        created = False
        if group is None:
            if value is None:
                return (Record(key, None), False) if track else (None, False)
            group = self.groups[gid] = ShareGroup(gid)
            created = True
        cls = type(key)
        inverse: object | None = None
        if cls is ShareGroupMemberMetadataKey:
            mid = key.member_id  # type: ignore[attr-defined]
            old = group.members.get(mid)
            inverse = None if old is None else old.metadata_value()
            if value is None:
                group.members.pop(mid, None)
            else:
                base = old or ShareGroupMember(mid)
                group.members[mid] = base._replace(
                    rack_id=value.rack_id, client_id=value.client_id, client_host=value.client_host,  # type: ignore[attr-defined]
                    subscribed_topic_names=frozenset(value.subscribed_topic_names))  # type: ignore[attr-defined]
        elif cls is ShareGroupCurrentMemberAssignmentKey:
            mid = key.member_id  # type: ignore[attr-defined]
            old = group.members.get(mid)
            inverse = None if old is None else old.assignment_value()
            if value is not None:
                base = old or ShareGroupMember(mid)
                group.members[mid] = base._replace(
                    member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,  # type: ignore[attr-defined]
                    state=value.state, assigned_partitions=value.assigned_partitions or EMPTY_ASSIGNMENT)  # type: ignore[attr-defined]
            elif old is not None:
                group.members[mid] = old._replace(member_epoch=0, previous_member_epoch=0,
                                                  assigned_partitions=EMPTY_ASSIGNMENT)
        elif cls is ShareGroupTargetAssignmentMemberKey:
            mid = key.member_id  # type: ignore[attr-defined]
            old_target = group.target_assignment.get(mid)
            inverse = None if old_target is None else ShareGroupTargetAssignmentMemberValue(old_target)
            if value is None:
                group.target_assignment.pop(mid, None)
            else:
                group.target_assignment[mid] = value.partitions  # type: ignore[attr-defined]
        elif cls is ShareGroupMetadataKey:
            if not created:
                inverse = ShareGroupMetadataValue(group.group_epoch, group.metadata_hash)
            if value is None:
                if group.members:
                    raise IllegalStateError(f"share group {gid} deleted while it still has members")
                del self.groups[gid]
            else:
                group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash  # type: ignore[attr-defined]
        elif cls is ShareGroupTargetAssignmentMetadataKey:
            if not created:
                inverse = ShareGroupTargetAssignmentMetadataValue(group.assignment_epoch)
            group.assignment_epoch = 0 if value is None else value.assignment_epoch  # type: ignore[attr-defined]
        elif cls is ShareGroupStatePartitionMetadataKey:
            if not created:
                inverse = group.state_metadata_value()
            if value is None:
                group.initializing, group.initialized, group.deleting = {}, {}, {}
            else:
                group.initializing = {i.topic_id: i for i in value.initializing}  # type: ignore[attr-defined]
                group.initialized = {i.topic_id: i for i in value.initialized}  # type: ignore[attr-defined]
                group.deleting = dict(value.deleting)  # type: ignore[attr-defined]
        else:
            raise IllegalStateError(f"cannot replay share-group record key {key!r}")
        return (Record(key, inverse), created) if track else (None, created)

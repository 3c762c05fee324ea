"""Consumer-group state and the one place records change it (`ShardState.apply`).

State is exactly what the records say: handlers never mutate it, they emit records and the shard
applies them. `apply` returns the inverse record, so a shard can revert uncommitted writes and
rebuild the committed view of a group (see shard.py).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from cohort.coordinator.classic_group import ClassicGroup
from cohort.coordinator.config import NO_OVERRIDES, CoordinatorConfig, GroupConfig
from cohort.coordinator.errors import IllegalStateError
from cohort.coordinator.share_group import ShareGroup, ShareGroups
from cohort.coordinator.records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ClassicMemberMetadata,
    ClientAssignorMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupConfigurationKey,
    GroupConfigurationValue,
    GroupMetadataKey,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    PendingOffset,
    Record,
    SHARE_GROUP_KEYS,
    TxnMarker,
    TxnOffsetCommitKey,
    TxnOffsetsRestore,
)

_SHARE_KEYS = frozenset(SHARE_GROUP_KEYS)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class GroupType(enum.Enum):
    CONSUMER = "consumer"
    CLASSIC = "classic"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class ConsumerGroupMember(NamedTuple):
    """An immutable member; `_replace()` makes the updated copy, as Kafka's builder does."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned_partitions: Assignment = EMPTY_ASSIGNMENT
    partitions_pending_revocation: Assignment = EMPTY_ASSIGNMENT
    classic_member_metadata: ClassicMemberMetadata | None = None
    client_assignors: tuple[ClientAssignorMetadata, ...] = ()

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host,
            tuple(sorted(self.subscribed_topic_names)), self.subscribed_topic_regex,
            self.rebalance_timeout_ms, self.server_assignor, self.classic_member_metadata, self.client_assignors,
        )

    def assignment_value(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        return ConsumerGroupCurrentMemberAssignmentValue(
            self.member_epoch, self.previous_member_epoch, self.state,
            self.assigned_partitions, self.partitions_pending_revocation,
        )

    def same_metadata(self, other: "ConsumerGroupMember") -> bool:
        return (self.instance_id == other.instance_id and self.rack_id == other.rack_id
                and self.client_id == other.client_id and self.client_host == other.client_host
                and self.subscribed_topic_names == other.subscribed_topic_names
                and self.subscribed_topic_regex == other.subscribed_topic_regex
                and self.rebalance_timeout_ms == other.rebalance_timeout_ms
                and self.server_assignor == other.server_assignor
                and self.classic_member_metadata == other.classic_member_metadata
                and self.client_assignors == other.client_assignors)

    def same_assignment(self, other: "ConsumerGroupMember") -> bool:
        return (self.member_epoch == other.member_epoch
                and self.previous_member_epoch == other.previous_member_epoch
                and self.state is other.state
                and self.assigned_partitions == other.assigned_partitions
                and self.partitions_pending_revocation == other.partitions_pending_revocation)

    @property
    def is_classic(self) -> bool:
        return self.classic_member_metadata is not None


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp: int


_names_cache: dict[tuple[str, ...], frozenset[str]] = {}


def _names(names: tuple[str, ...]) -> frozenset[str]:
    """Members of a group mostly share one subscription: share one frozenset (bounded cache)."""
    found = _names_cache.get(names)
    if found is None:
        if len(_names_cache) > 10_000:
            _names_cache.clear()
        found = _names_cache[names] = frozenset(names)
    return found


def _inc(counts: dict, key, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


class ConsumerGroup:
    """A KIP-848 group: epochs, members, target assignment and the indexes derived from them."""

    __slots__ = (
        "group_id", "group_epoch", "metadata_hash", "assignment_epoch", "members", "static_members",
        "target_assignment", "partition_epochs", "subscribed_names", "regex_counts",
        "resolved_regexes", "assignor_counts", "classic_members", "refresh_metadata", "spec_cache",
        "spec_dirty", "spec_image", "spec_topic_ids", "spec_unsorted", "target_results", "client_assignment",
    )

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target_assignment: dict[str, Assignment] = {}
        self.partition_epochs: dict[uuid.UUID, dict[int, int]] = {}
        self.subscribed_names: dict[str, int] = {}
        self.regex_counts: dict[str, int] = {}
        self.resolved_regexes: dict[str, ResolvedRegex] = {}
        self.assignor_counts: dict[str, int] = {}
        self.classic_members = 0
        self.refresh_metadata = True  # soft state: recompute the metadata hash on the next heartbeat
        # soft state for target.py: the last assignor input and the members changed since
        self.spec_cache: dict = {}
        self.spec_dirty: set[str] = set()
        self.spec_image = None
        self.spec_topic_ids: dict = {}
        self.spec_unsorted = 0  # members appended out of member id order since the view was last sorted
        # member id -> (error, metadata version, metadata bytes) a client-side assignor gave it with
        # its target (members without any are absent)
        self.target_results: dict[str, tuple[int, int, bytes]] = {}
        # soft state for client_assignment.py: who computes the next target, like a timer
        self.client_assignment = None

    group_type = GroupType.CONSUMER

    def copy(self) -> "ConsumerGroup":
        other = ConsumerGroup(self.group_id)
        other.group_epoch = self.group_epoch
        other.metadata_hash = self.metadata_hash
        other.assignment_epoch = self.assignment_epoch
        other.members = dict(self.members)
        other.static_members = dict(self.static_members)
        other.target_assignment = dict(self.target_assignment)
        other.target_results = dict(self.target_results)
        other.partition_epochs = {t: dict(p) for t, p in self.partition_epochs.items()}
        other.subscribed_names = dict(self.subscribed_names)
        other.regex_counts = dict(self.regex_counts)
        other.resolved_regexes = dict(self.resolved_regexes)
        other.assignor_counts = dict(self.assignor_counts)
        other.classic_members = self.classic_members
        other.refresh_metadata = self.refresh_metadata
        return other

    # ----------------------------------------------------------------- derived views

    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        target = self.assignment_epoch
        for member in self.members.values():
            if not member.is_reconciled_to(target):
                return GroupState.RECONCILING
        return GroupState.STABLE

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        parts = self.partition_epochs.get(topic_id)
        if parts is None:
            return -1
        return parts.get(partition, -1)

    def subscribed_topic_names(self) -> set[str]:
        """Names subscribed by name plus the topics the group's regexes resolve to."""
        names = set(self.subscribed_names)
        for regex in self.regex_counts:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names |= resolved.topics
        return names

    def member_topic_names(self, member: ConsumerGroupMember) -> frozenset[str]:
        return self.member_topic_names_of(member.subscribed_topic_names, member.subscribed_topic_regex)

    def member_topic_names_of(self, names: frozenset[str], regex: str | None) -> frozenset[str]:
        """The topics a subscription to ``names`` and ``regex`` (as resolved now) covers."""
        if not regex:
            return names
        resolved = self.resolved_regexes.get(regex)
        if resolved is None:
            return names
        return names | resolved.topics

    def preferred_assignor(self, order: Iterable[str]) -> str | None:
        """The most common server assignor among members; ties go to the earlier configured one."""
        if not self.assignor_counts:
            return None
        rank = {name: i for i, name in enumerate(order)}
        return min(self.assignor_counts.items(), key=lambda kv: (-kv[1], rank.get(kv[0], len(rank)), kv[0]))[0]

    # ----------------------------------------------------------------- replay helpers

    def _index_member(self, member: ConsumerGroupMember, delta: int) -> None:
        for name in member.subscribed_topic_names:
            _inc(self.subscribed_names, name, delta)
        if member.subscribed_topic_regex:
            _inc(self.regex_counts, member.subscribed_topic_regex, delta)
        if member.server_assignor:
            _inc(self.assignor_counts, member.server_assignor, delta)
        if member.classic_member_metadata is not None:
            self.classic_members += delta
        if member.instance_id is not None:
            if delta > 0:
                self.static_members[member.instance_id] = member.member_id
            elif self.static_members.get(member.instance_id) == member.member_id:
                del self.static_members[member.instance_id]

    def _remove_partition_epochs(self, assignment: Assignment, epoch: int) -> None:
        epochs = self.partition_epochs
        for topic_id, parts in assignment.items():
            held = epochs.get(topic_id)
            if held is None:
                continue
            for p in parts:
                if held.get(p) == epoch:
                    del held[p]
            if not held:
                del epochs[topic_id]

    def _add_partition_epochs(self, assignment: Assignment, epoch: int) -> None:
        epochs = self.partition_epochs
        for topic_id, parts in assignment.items():
            held = epochs.get(topic_id)
            if held is None:
                held = epochs[topic_id] = {}
            for p in parts:
                current = held.get(p)
                if current is not None and current >= epoch:
                    raise IllegalStateError(
                        f"cannot set the epoch of {topic_id}-{p} to {epoch}: "
                        f"it is still owned at epoch {current} in group {self.group_id}"
                    )
                held[p] = epoch

    def set_member_metadata(self, member_id: str, value: ConsumerGroupMemberMetadataValue | None) -> None:
        self.spec_dirty.add(member_id)
        old = self.members.get(member_id)
        if value is None:
            if old is None:
                return
            if old.assigned_partitions or old.partitions_pending_revocation:
                raise IllegalStateError(f"member {member_id} removed while it still owns partitions")
            self._index_member(old, -1)
            del self.members[member_id]
            return
        names = value.subscribed_topic_names
        if old is None:
            new = ConsumerGroupMember(
                member_id, 0, -1, MemberState.STABLE, value.instance_id, value.rack_id, value.rebalance_timeout_ms,
                value.client_id, value.client_host, _names(names), value.subscribed_topic_regex,
                value.server_assignor, EMPTY_ASSIGNMENT, EMPTY_ASSIGNMENT, value.classic_member_metadata,
                value.client_assignors)
        else:
            new = ConsumerGroupMember(
                member_id, old.member_epoch, old.previous_member_epoch, old.state, value.instance_id, value.rack_id,
                value.rebalance_timeout_ms, value.client_id, value.client_host, _names(names),
                value.subscribed_topic_regex, value.server_assignor, old.assigned_partitions,
                old.partitions_pending_revocation, value.classic_member_metadata, value.client_assignors)
        if old is not None:
            self._index_member(old, -1)
        self._index_member(new, 1)
        self.members[member_id] = new

    def set_current_assignment(self, member_id: str, value: ConsumerGroupCurrentMemberAssignmentValue | None) -> None:
        old = self.members.get(member_id)
        if old is None:
            if value is None:
                return
            raise IllegalStateError(f"current assignment for unknown member {member_id} of group {self.group_id}")
        self._remove_partition_epochs(old.assigned_partitions, old.member_epoch)
        self._remove_partition_epochs(old.partitions_pending_revocation, old.member_epoch)
        if value is None:
            epoch, previous, state = LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, old.state
            assigned = pending = EMPTY_ASSIGNMENT
        else:
            epoch, previous, state = value.member_epoch, value.previous_member_epoch, value.state
            assigned = value.assigned_partitions or EMPTY_ASSIGNMENT
            pending = value.partitions_pending_revocation or EMPTY_ASSIGNMENT
        new = ConsumerGroupMember(
            member_id, epoch, previous, state, old.instance_id, old.rack_id, old.rebalance_timeout_ms,
            old.client_id, old.client_host, old.subscribed_topic_names, old.subscribed_topic_regex,
            old.server_assignor, assigned, pending, old.classic_member_metadata, old.client_assignors)
        self._add_partition_epochs(new.assigned_partitions, new.member_epoch)
        self._add_partition_epochs(new.partitions_pending_revocation, new.member_epoch)
        self.members[member_id] = new


class ShardState:
    """Everything a shard persists: consumer groups, classic groups, committed offsets and group
    configs. A group id names at most one consumer group or classic group."""

    __slots__ = ("groups", "classic_groups", "share", "share_groups", "offsets", "configs", "config", "txn_offsets",
                 "txn_groups")

    def __init__(self, config: CoordinatorConfig):
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self.classic_groups: dict[str, ClassicGroup] = {}
        self.share = ShareGroups()
        self.share_groups: dict[str, ShareGroup] = self.share.groups
        self.offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = {}
        self.configs: dict[str, GroupConfig] = {}
        # Transactional offsets awaiting their producer's marker: group -> producer id ->
        # partition -> PendingOffset, and producer id -> the groups it has pending offsets in.
        self.txn_offsets: dict[str, dict[int, dict[tuple[str, int], PendingOffset]]] = {}
        self.txn_groups: dict[int, set[str]] = {}

    # --- transactional offsets -----------------------------------------------------------------

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of the group with a transactional offset awaiting its marker."""
        pending = self.txn_offsets.get(group_id)
        return set() if not pending else {tp for tps in pending.values() for tp in tps}

    def _pending_copy(self, gid: str) -> dict:
        pending = self.txn_offsets.get(gid)
        return {} if pending is None else {pid: dict(tps) for pid, tps in pending.items()}

    def _set_pending(self, gid: str, pending: dict) -> None:
        for pid in self.txn_offsets.get(gid, ()):
            groups = self.txn_groups.get(pid)
            if groups is not None:
                groups.discard(gid)
                if not groups:
                    del self.txn_groups[pid]
        pending = {pid: tps for pid, tps in pending.items() if tps}
        if pending:
            self.txn_offsets[gid] = pending
            for pid in pending:
                self.txn_groups.setdefault(pid, set()).add(gid)
        else:
            self.txn_offsets.pop(gid, None)

    def _set_committed(self, gid: str, tp: tuple[str, int], value: OffsetCommitValue | None) -> None:
        offsets = self.offsets.get(gid)
        if value is None:
            if offsets is not None and tp in offsets:
                del offsets[tp]
                if not offsets:
                    del self.offsets[gid]
        else:
            if offsets is None:
                offsets = self.offsets[gid] = {}
            offsets[tp] = value

    def apply_marker(self, producer_id: int, commit: bool) -> list[tuple[str, Record]]:
        """A producer's transaction ended: on COMMIT its pending offsets become committed (unless
        a plain commit came after them), on ABORT they are dropped. Returns (group, undo record)."""
        undo = []
        for gid in sorted(self.txn_groups.get(producer_id, ())):
            before = self._pending_copy(gid)
            pending = self._pending_copy(gid)
            tps = pending.pop(producer_id, {})
            changed: dict = {}
            if commit:
                stored = self.offsets.get(gid, {})
                for tp, po in tps.items():
                    if not po.beaten:
                        changed[tp] = stored.get(tp)
                        self._set_committed(gid, tp, po.value)
            self._set_pending(gid, pending)
            undo.append((gid, Record(TxnOffsetsRestore(gid, before, changed), None)))
        return undo

    def _apply_pending(self, key: TxnOffsetCommitKey, value: object | None, track: bool) -> tuple[Record | None, bool]:
        gid = key.group_id
        before = self._pending_copy(gid) if track else None
        pending = self._pending_copy(gid)
        tps = pending.setdefault(key.producer_id, {})
        tp = (key.topic, key.partition)
        if value is None:
            tps.pop(tp, None)
        else:
            tps[tp] = value if type(value) is PendingOffset else PendingOffset(value)  # type: ignore[arg-type]
        self._set_pending(gid, pending)
        return (Record(TxnOffsetsRestore(gid, before, {}), None), False) if track else (None, False)

    def _plain_commit_over_pending(self, gid: str, tp: tuple[str, int], value: object | None,
                                   old: OffsetCommitValue | None, track: bool) -> tuple[Record | None, bool]:
        """A plain commit (or tombstone) of a partition with pending transactional offsets: a later
        COMMIT marker must not overwrite it, and a tombstone drops them (Kafka's rules)."""
        before = self._pending_copy(gid) if track else None
        pending = self._pending_copy(gid)
        for tps in pending.values():
            if tp in tps:
                if value is None:
                    del tps[tp]
                else:
                    tps[tp] = tps[tp]._replace(beaten=True)
        self._set_pending(gid, pending)
        self._set_committed(gid, tp, value)  # type: ignore[arg-type]
        return (Record(TxnOffsetsRestore(gid, before, {tp: old}), None), False) if track else (None, False)

    def group_config(self, group_id: str) -> GroupConfig:
        return self.configs.get(group_id, NO_OVERRIDES)

    def apply(self, record: Record, track: bool = True) -> tuple[Record | None, bool]:
        """Apply one record. With `track`, return (inverse record, group_created)."""
        key, value = record
        cls = type(key)
        if cls is TxnMarker:  # a replayed marker (live ones go through apply_marker)
            self.apply_marker(key.producer_id, key.commit)  # type: ignore[attr-defined]
            return None, False
        gid = key.group_id  # type: ignore[attr-defined]
        if cls is OffsetCommitKey:
            offsets = self.offsets.get(gid)
            tp = (key.topic, key.partition)  # type: ignore[attr-defined]
            old = None if offsets is None else offsets.get(tp)
            if gid in self.txn_offsets:
                return self._plain_commit_over_pending(gid, tp, value, old, track)
            if value is None:
                if offsets is not None and tp in offsets:
                    del offsets[tp]
                    if not offsets:
                        del self.offsets[gid]
            else:
                if offsets is None:
                    offsets = self.offsets[gid] = {}
                offsets[tp] = value  # type: ignore[assignment]
            return (Record(key, old), False) if track else (None, False)
        if cls is GroupConfigurationKey:
            old_cfg = self.configs.get(gid)
            if value is None:
                self.configs.pop(gid, None)
            else:
                self.configs[gid] = GroupConfig.lenient(dict(value.configs), self.config)  # type: ignore[attr-defined]
            if not track:
                return None, False
            old_value = None if old_cfg is None else GroupConfigurationValue(tuple(sorted(old_cfg.raw.items())))
            return Record(key, old_value), False
        if cls is GroupMetadataKey:
            return self._apply_classic(gid, record, track)
        if cls is TxnOffsetCommitKey:
            return self._apply_pending(key, value, track)  # type: ignore[arg-type]
        if cls in _SHARE_KEYS:
            return self.share.apply(record, track)
        if cls is TxnOffsetsRestore:
            self._set_pending(gid, key.pending)  # type: ignore[attr-defined]
            for tp, old_value in key.committed.items():  # type: ignore[attr-defined]
                self._set_committed(gid, tp, old_value)
            return None, False

        group = self.groups.get(gid)
        created = False
        if group is None:
            if value is None:
                return (Record(key, None), False) if track else (None, False)
            group = self.groups[gid] = ConsumerGroup(gid)
            created = True
        inverse: object | None = None

        if cls is ConsumerGroupCurrentMemberAssignmentKey:
            mid = key.member_id  # type: ignore[attr-defined]
            if track:
                old_member = group.members.get(mid)
                inverse = None if old_member is None else old_member.assignment_value()
            group.set_current_assignment(mid, value)  # type: ignore[arg-type]
        elif cls is ConsumerGroupTargetAssignmentMemberKey:
            mid = key.member_id  # type: ignore[attr-defined]
            old_target = group.target_assignment.get(mid)
            group.spec_dirty.add(mid)
            if track and old_target is not None:
                inverse = ConsumerGroupTargetAssignmentMemberValue(old_target, *group.target_results.get(mid, (0, 0, b"")))
            if value is None:
                group.target_assignment.pop(mid, None)
                group.target_results.pop(mid, None)
            else:
                group.target_assignment[mid] = value.partitions  # type: ignore[attr-defined]
                if value.error or value.metadata_version or value.metadata_bytes:  # type: ignore[attr-defined]
                    group.target_results[mid] = (value.error, value.metadata_version, value.metadata_bytes)  # type: ignore[attr-defined]
                else:
                    group.target_results.pop(mid, None)
        elif cls is ConsumerGroupMemberMetadataKey:
            mid = key.member_id  # type: ignore[attr-defined]
            if track:
                old_member = group.members.get(mid)
                inverse = None if old_member is None else old_member.metadata_value()
            group.set_member_metadata(mid, value)  # type: ignore[arg-type]
        elif cls is ConsumerGroupMetadataKey:
            if track and not created:
                inverse = ConsumerGroupMetadataValue(group.group_epoch, group.metadata_hash)
            if value is None:
                if group.members or group.target_assignment:
                    raise IllegalStateError(f"group {gid} deleted while it still has members")
                del self.groups[gid]
            else:
                group.group_epoch = value.epoch  # type: ignore[attr-defined]
                group.metadata_hash = value.metadata_hash  # type: ignore[attr-defined]
        elif cls is ConsumerGroupTargetAssignmentMetadataKey:
            if track and not created:
                inverse = ConsumerGroupTargetAssignmentMetadataValue(group.assignment_epoch)
            group.assignment_epoch = -1 if value is None else value.assignment_epoch  # type: ignore[attr-defined]
        elif cls is ConsumerGroupRegularExpressionKey:
            regex = key.regex  # type: ignore[attr-defined]
            old_regex = group.resolved_regexes.get(regex)
            group.spec_cache = {}
            group.spec_topic_ids = {}
            if track and old_regex is not None:
                inverse = ConsumerGroupRegularExpressionValue(tuple(sorted(old_regex.topics)), old_regex.version,
                                                              old_regex.timestamp)
            if value is None:
                group.resolved_regexes.pop(regex, None)
            else:
                group.resolved_regexes[regex] = ResolvedRegex(
                    frozenset(value.topics), value.version, value.timestamp)  # type: ignore[attr-defined]
        else:
            raise IllegalStateError(f"cannot replay record key {key!r}")
        return (Record(key, inverse), created) if track else (None, created)

    def _apply_classic(self, gid: str, record: Record, track: bool) -> tuple[Record | None, bool]:
        """A classic group's record. Live, the handler has already changed the group in place and
        the record only becomes its persisted generation; replayed (loading, or an undo) the group
        is rebuilt from it, as Kafka loads classic groups."""
        old = self.classic_groups.get(gid)
        previous = None if old is None else old.persisted
        value = record.value
        if value is None:
            self.classic_groups.pop(gid, None)
        elif track and old is not None:
            old.persisted = value  # type: ignore[assignment]
        else:
            self.classic_groups[gid] = ClassicGroup.from_record(gid, value)  # type: ignore[arg-type]
        if not track:
            return None, False
        return Record(record.key, previous), False

    def drop_group(self, group_id: str) -> None:
        """Undo the implicit creation of a group by a record."""
        self.groups.pop(group_id, None)
        self.share_groups.pop(group_id, None)


def assignment_from(partitions: Mapping[uuid.UUID, Iterable[int]] | None) -> Assignment:
    """Normalise to the canonical form: topic id -> ascending tuple, empty topics dropped."""
    if not partitions:
        return EMPTY_ASSIGNMENT
    return {t: tuple(sorted(set(ps))) for t, ps in partitions.items() if ps}

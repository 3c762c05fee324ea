"""Classic groups (JoinGroup / SyncGroup protocol): the group, its members and its states.

Unlike consumer groups, a classic group's rebalance in progress is soft state, as in Kafka: which
members re-joined, the parked join and sync requests and the pending-sync set live only in
memory. Records (`GroupMetadata`, type 2) persist a generation once it is settled — when the
leader's assignment arrives, when a join phase ends with no members, when a static member is
replaced — and loading rebuilds the group from its last record: Stable with those members, or
Empty. The state machine's transitions live in `classic.py`; this module holds the data and the
rules derived from it (valid state changes, protocol selection, the record value).
"""

from __future__ import annotations

import enum
from collections import Counter

from cohort.coordinator.errors import IllegalStateError
from cohort.coordinator.records import GroupMetadataMember, GroupMetadataValue


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = ClassicGroupState
VALID_PREVIOUS_STATES = {
    _S.EMPTY: {_S.PREPARING_REBALANCE},
    _S.PREPARING_REBALANCE: {_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY},
    _S.COMPLETING_REBALANCE: {_S.PREPARING_REBALANCE},
    _S.STABLE: {_S.COMPLETING_REBALANCE},
    _S.DEAD: set(_S),
}


class ClassicMember:
    """A member of a classic group. `awaiting_join` / `awaiting_sync` hold the request id of its
    parked JoinGroup / SyncGroup, if any."""

    __slots__ = ("member_id", "instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "awaiting_join",
                 "awaiting_sync", "is_new")

    def __init__(self, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: tuple[tuple[str, bytes], ...], assignment: bytes = b""):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.awaiting_join: int | None = None
        self.awaiting_sync: int | None = None
        self.is_new = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise IllegalStateError(f"member {self.member_id} supports none of {sorted(candidates)}")


class ClassicGroup:
    """One classic group: generation, protocol, leader, members and the join/sync bookkeeping."""

    group_type = "classic"

    def __init__(self, group_id: str, now: int = -1):
        self.group_id = group_id
        self.state = ClassicGroupState.EMPTY
        self.previous_state = ClassicGroupState.EMPTY
        self.state_timestamp = now
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.pending_members: set[str] = set()  # dynamic v4+ members told MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()  # members expected to sync in this generation
        self.new_member_added = False  # a member joined during the initial rebalance delay
        self.persisted: GroupMetadataValue | None = None  # the last GroupMetadata value applied

    # ----------------------------------------------------------------- state

    def transition_to(self, target: ClassicGroupState, now: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalStateError(f"group {self.group_id} cannot move from {self.state.value} to {target.value}")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now

    def is_in(self, *states: ClassicGroupState) -> bool:
        return self.state in states

    # ----------------------------------------------------------------- members

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if member is None:
            return None
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)  # re-elected at join completion
        return member

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        """The join phase lasts as long as the slowest member's rebalance timeout."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ----------------------------------------------------------------- protocols

    def candidate_protocols(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            mine = set(member.protocol_names())
            names = mine if names is None else names & mine
        return names or set()

    def supports_protocols(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Kafka's rule: an empty group takes any non-empty protocol list; otherwise the type must
        match and at least one protocol must be common to every member."""
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its first protocol every member supports; most votes wins (ties:
        the protocol that comes first in the leader's preference order)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader_id or "")
        order = {name: i for i, name in enumerate(leader.protocol_names())} if leader else {}
        return min(votes, key=lambda name: (-votes[name], order.get(name, len(order)), name))

    # ----------------------------------------------------------------- records

    def record_value(self) -> GroupMetadataValue:
        """The GroupMetadata value of the current generation, with every member's assignment."""
        members = tuple(
            GroupMetadataMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                m.session_timeout_ms, m.metadata(self.protocol_name), m.assignment)
            for m in self.members.values()
        )
        return GroupMetadataValue(self.protocol_type or "", self.generation_id, self.protocol_name, self.leader_id,
                                  self.state_timestamp, members)

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> "ClassicGroup":
        """A group as loaded: Stable with the persisted members, or Empty."""
        group = cls(group_id, value.current_state_timestamp)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type
        group.protocol_name = value.protocol
        for m in value.members:
            protocols = ((value.protocol, m.subscription),) if value.protocol else ()
            group.add(ClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                    m.session_timeout_ms, value.protocol_type, protocols, m.assignment))
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
        if group.members:
            group.state = group.previous_state = ClassicGroupState.STABLE
        group.persisted = value
        return group

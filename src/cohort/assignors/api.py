"""The server-side assignor interface.

It mirrors Kafka's `ConsumerGroupPartitionAssignor` (GroupSpec, MemberSubscription,
SubscribedTopicDescriber, GroupAssignment) so the coordinator can call an assignor directly,
and adds one thing Kafka lacks: an optional per-partition lag on the describer, which the
lag-aware assignor reads and the others ignore.

Conventions every assignor follows:

* Topic ids are opaque, hashable and orderable values (the coordinator passes `uuid.UUID`,
  `cohort assign` passes topic names). Assignors iterate topics in sorted order.
* A partition set is a tuple of ascending ints. Assignments are plain dicts:
  `{member_id: {topic_id: (p0, p1, ...)}}`; a topic with no partitions for a member is omitted.
* Members are iterated by member id, partitions ascending, so the output depends only on the
  input's content, never on dict order.
* Every member of the spec appears in the output, possibly with an empty dict.
* A describer may also offer `partition_racks(topic_id)`: every partition's racks at once (a
  sequence indexed by partition, empty when no rack is known). Rack-aware assignors use it when
  present instead of one `racks_for_partition` call per partition; it is an optional fast path,
  so it is not part of the `SubscribedTopicDescriber` protocol.
* A describer may also offer `partition_counts(topic_ids)`: `num_partitions` of a sequence of
  topics in one call (an optional fast path for groups subscribed to many topics), and
  `partition_counts_hashed(topic_ids, hashes)`: the same, given a list of the ids' hashes that
  the assignor keeps per subscription (`uuid.UUID` hashes in Python code on every lookup).
* An assignor may also offer `fresh_owners(groups: FreshGroups) -> (owners, done)`: for many
  groups at once, in columns, the owners `assign` would give the groups it takes (`done`), -1
  for the others. It is an optional fast path for the Spark pipeline, which assigns millions of
  small groups (the three built-ins offer it); the broker assigns one group at a time.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol, runtime_checkable

try:  # built from _uniform_native.c at install time where a C compiler is available (setup.py)
    from cohort.assignors._uniform_native import values_by_hash as _values_by_hash
except ImportError:  # pragma: no cover - the dict's own lookups do the same
    _values_by_hash = None

TopicId = Hashable
Partitions = tuple[int, ...]
MemberAssignment = dict[TopicId, Partitions]
GroupAssignment = dict[str, MemberAssignment]

EMPTY: Mapping = {}


class PartitionAssignorError(Exception):
    """The assignor cannot produce an assignment for this spec (Kafka's PartitionAssignorException)."""


class UnknownAssignorError(KeyError):
    """No assignor is registered under the requested name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown assignor"


class SubscriptionType(enum.Enum):
    """HOMOGENEOUS when every member subscribes to the same topics."""

    HOMOGENEOUS = "homogeneous"
    HETEROGENEOUS = "heterogeneous"


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What the assignor knows about one member: identity hints, subscription and current target."""

    subscribed_topic_ids: frozenset
    rack_id: str | None = None
    instance_id: str | None = None
    assignment: Mapping[TopicId, Partitions] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """The members of a group keyed by member id, and whether their subscriptions are identical."""

    members: Mapping[str, MemberSubscription]
    subscription_type: SubscriptionType

    @classmethod
    def of(cls, members: Mapping[str, MemberSubscription]) -> "GroupSpec":
        """Build a spec, deriving the subscription type from the members."""
        return cls(members, subscription_type_of(members))

    def member_ids(self) -> list[str]:
        """Member ids in the canonical (sorted) iteration order."""
        return sorted(self.members)


def subscription_type_of(members: Mapping[str, MemberSubscription]) -> SubscriptionType:
    subscriptions = list(map(_subscribed, members.values()))
    # list.count compares by identity first, and the coordinator gives members with the same
    # subscription one shared frozenset: one C-level pass over a large homogeneous group
    if not subscriptions or subscriptions.count(subscriptions[0]) == len(subscriptions):
        return SubscriptionType.HOMOGENEOUS
    return SubscriptionType.HETEROGENEOUS


_subscribed = attrgetter("subscribed_topic_ids")


@runtime_checkable
class SubscribedTopicDescriber(Protocol):
    """Read-only view of the topics a group subscribes to."""

    def num_partitions(self, topic_id: TopicId) -> int:
        """Partition count, or -1 when the topic is unknown."""

    def racks_for_partition(self, topic_id: TopicId, partition: int) -> frozenset[str]:
        """Racks hosting replicas of the partition (empty when unknown)."""

    def partition_lags(self, topic_id: TopicId) -> Sequence[int] | None:
        """Per-partition lag of the group on this topic, or None when no lag is known."""


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic as the describer sees it."""

    num_partitions: int
    racks: tuple[frozenset[str], ...] = ()
    lags: tuple[int, ...] | None = None


class TopicDescriber:
    """A describer over a plain mapping of topic id to TopicMetadata."""

    __slots__ = ("_topics",)

    def __init__(self, topics: Mapping[TopicId, TopicMetadata]):
        self._topics = topics

    def num_partitions(self, topic_id: TopicId) -> int:
        meta = self._topics.get(topic_id)
        return -1 if meta is None else meta.num_partitions

    def partition_counts(self, topic_ids: Sequence[TopicId]) -> list[int]:
        """`num_partitions` of every topic at once (-1: unknown)."""
        return [-1 if meta is None else meta.num_partitions for meta in map(self._topics.get, topic_ids)]

    def partition_counts_hashed(self, topic_ids: list, hashes: list[int]) -> list[int]:
        """`partition_counts`, each topic looked up with its given hash."""
        return [-1 if meta is None else meta.num_partitions for meta in lookup_hashed(self._topics, topic_ids, hashes)]

    def racks_for_partition(self, topic_id: TopicId, partition: int) -> frozenset[str]:
        meta = self._topics.get(topic_id)
        if meta is None or partition >= len(meta.racks):
            return frozenset()
        return meta.racks[partition]

    def partition_lags(self, topic_id: TopicId) -> Sequence[int] | None:
        meta = self._topics.get(topic_id)
        return None if meta is None else meta.lags

    def partition_racks(self, topic_id: TopicId) -> Sequence[frozenset[str]]:
        meta = self._topics.get(topic_id)
        return () if meta is None else meta.racks


def lookup_hashed(mapping: Mapping, keys: list, hashes: list[int]) -> list:
    """[mapping.get(key) for key in keys], where hashes[i] == hash(keys[i]): for a dict, looked up
    in C with those hashes (when the extension is built) instead of hashing every key again."""
    if _values_by_hash is not None and type(mapping) is dict and type(keys) is list and type(hashes) is list:
        return _values_by_hash(mapping, keys, hashes)
    return list(map(mapping.get, keys))


@dataclass(frozen=True, slots=True)
class FreshGroups:
    """Many groups in columns (numpy arrays) whose members hold no partitions, have no static ids
    and all subscribe to every one of the group's topics.

    `member_counts`: per group, its members, numbered 0.. in member-id order. `topic_group`: per
    topic, its group; ascending, a group's topics in sorted order, each with at least one
    partition. `partition_counts`: per topic. `lags`: per partition (>= 0), topics concatenated,
    partitions 0..n-1. Racks are numbered within each group, below 62: `member_racks` has each
    member's (-1: none), groups concatenated; `partition_racks`, per partition, the racks hosting a
    replica as a bitmask (bit r: rack r).
    """

    member_counts: Sequence[int]
    topic_group: Sequence[int]
    partition_counts: Sequence[int]
    lags: Sequence[int]
    member_racks: Sequence[int]
    partition_racks: Sequence[int]


@runtime_checkable
class Assignor(Protocol):
    """A server-side assignor: a named pure function from a group spec to an assignment."""

    name: str

    def assign(self, spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        """Assign every partition of every subscribed, known topic to exactly one subscriber."""

"""Client-side assignors: the interface a `Consumer` runs when the coordinator chooses it to compute
its group's assignment (the seeds' KIP-848 design, cohort's ConsumerGroupPrepareAssignment and
ConsumerGroupInstallAssignment), and an adapter that runs any of cohort's server-side assignors
on the client.

An assignor has a `name`, the range of metadata versions it reads (`minimum_version`,
`maximum_version`), `metadata()`: the (version, bytes) this member publishes for it (what the
others' assignors will read, e.g. which partitions' state this member holds locally), and
`assign(spec)`: every member's partitions, and optionally bytes for each.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class AssignorMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    topics: frozenset[str]  # the topics it subscribes to, by name
    metadata_version: int
    metadata: bytes  # what its `metadata()` returned for this assignor
    target: Mapping[str, tuple[int, ...]]  # its current target assignment, by topic name


@dataclass(frozen=True, slots=True)
class ClientGroupSpec:
    """What Prepare tells the chosen member: the group epoch, its members (by member id) and the
    partition count of every subscribed topic (by name)."""

    group_id: str
    group_epoch: int
    members: Mapping[str, AssignorMember]
    partitions: Mapping[str, int]
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    partitions: Mapping[str, tuple[int, ...]]  # topic name -> partitions
    metadata: bytes = b""
    metadata_version: int = 0


@runtime_checkable
class ClientAssignor(Protocol):
    name: str
    minimum_version: int
    maximum_version: int

    def metadata(self) -> tuple[int, bytes]:
        """(version, bytes) this member publishes to the group's assignor."""
        ...

    def assign(self, spec: ClientGroupSpec) -> Mapping[str, MemberAssignment | Mapping[str, tuple[int, ...]]]:
        """Every member's partitions (a MemberAssignment, or just {topic: partitions})."""
        ...


class ServerSideAssignor:
    """One of cohort's server-side assignors (`uniform`, `range`, ...) run on the client, under
    the same name unless `name` says otherwise. Lag-aware assignment needs the broker's lag and
    falls back to what the assignor does without it."""

    minimum_version = 0
    maximum_version = 0

    def __init__(self, assignor: str, name: str | None = None) -> None:
        from cohort.assignors import registry

        self._assignor = registry.get(assignor)
        self.name = name or assignor

    def metadata(self) -> tuple[int, bytes]:
        return 0, b""

    def assign(self, spec: ClientGroupSpec) -> dict[str, dict[str, tuple[int, ...]]]:
        from cohort.assignors.api import GroupSpec, MemberSubscription

        members = {m.member_id: MemberSubscription(frozenset(m.topics), m.rack_id, m.instance_id, dict(m.target))
                   for m in spec.members.values()}
        return self._assignor.assign(GroupSpec.of(members), _Describer(spec.partitions))


class _Describer:
    """The assignors' SubscribedTopicDescriber over topic names (no racks, no lag on a client)."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self._partitions = partitions

    def num_partitions(self, topic: str) -> int:
        return self._partitions.get(topic, -1)

    def racks_for_partition(self, topic: str, partition: int) -> frozenset[str]:
        return frozenset()

    def partition_lags(self, topic: str):
        return None

"""Version-neutral requests and responses of the share-group APIs (KIP-932).

The server translates kio's wire types of ShareGroupHeartbeat (76) and ShareGroupDescribe (77)
to and from these. `None` in a heartbeat field means "unchanged", as on the wire.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cohort.coordinator.requests import DescribedTopicPartitions

Assignment = Mapping[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: Sequence[str] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None = field absent on the wire


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[DescribedTopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeResponse:
    groups: tuple[DescribedShareGroup, ...]


@dataclass(frozen=True, slots=True)
class AlterSharePartitions:
    """AlterShareGroupOffsets / DeleteShareGroupOffsets at the group coordinator: the group (of
    no members; created by an alter if missing) gets these share-partitions initialized
    (`initialize`: topic id -> (name, partitions)) or forgets these topics (`forget`)."""

    group_id: str
    initialize: Mapping[uuid.UUID, tuple[str, tuple[int, ...]]] = None  # type: ignore[assignment]
    forget: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterSharePartitionsResponse:
    error_code: int = 0
    error_message: str | None = None

"""Version-neutral requests and responses of the coordinator.

The protocol layer translates kio's per-version wire types to and from these. Fields that
change meaning with the wire version carry `api_version` (heartbeat v0/v1, OffsetCommit <9 / >=9).
Topics are named in offset APIs (the protocol layer maps v10 topic ids to names) and identified
by `uuid.UUID` in heartbeat assignments. `None` in a heartbeat field means "unchanged".
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

Assignment = Mapping[uuid.UUID, tuple[int, ...]]


# ------------------------------------------------------------------ ConsumerGroupHeartbeat (68)

@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: Mapping[uuid.UUID, Sequence[int]] | None = None  # owned partitions
    api_version: int = 1
    client_id: str = ""
    client_host: str = ""
    # The topics the member's principal may describe (KIP-848: a regex resolved during this
    # heartbeat matches only those); None when there is no authorizer.
    topic_filter: Callable[[str], bool] | None = None
    # The member's client-side assignors by its precedence (records.ClientAssignorMetadata);
    # None: unchanged or not used.
    client_assignors: tuple | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None = field absent on the wire
    should_compute_assignment: bool = False  # chosen to run the group's client-side assignor
    # (error, metadata version, metadata bytes) a client-side assignor gave the member, sent with
    # its assignment
    assignment_result: tuple[int, int, bytes] | None = None


# ------------------------------------------------------------------ client-side assignors (cohort)

@dataclass(frozen=True, slots=True)
class PrepareAssignmentRequest:
    group_id: str
    member_id: str
    member_epoch: int


@dataclass(frozen=True, slots=True)
class PreparedMember:
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: tuple[uuid.UUID, ...]
    assignor_version: int
    assignor_reason: int
    assignor_metadata: bytes
    target: Assignment  # the member's current target assignment


@dataclass(frozen=True, slots=True)
class PreparedTopic:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PrepareAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None
    group_epoch: int = -1
    assignor_name: str = ""
    members: tuple[PreparedMember, ...] = ()
    topics: tuple[PreparedTopic, ...] = ()


@dataclass(frozen=True, slots=True)
class InstalledMember:
    member_id: str
    partitions: Mapping[uuid.UUID, Sequence[int]]
    metadata_version: int = 0
    metadata_bytes: bytes = b""


@dataclass(frozen=True, slots=True)
class InstallAssignmentRequest:
    group_id: str
    member_id: str
    member_epoch: int
    group_epoch: int
    error: int
    members: tuple[InstalledMember, ...]


@dataclass(frozen=True, slots=True)
class InstallAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None


# ------------------------------------------------------------------ ConsumerGroupDescribe (69)

@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest:
    group_ids: Sequence[str]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True)
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[DescribedTopicPartitions, ...]
    target_assignment: tuple[DescribedTopicPartitions, ...]
    member_type: int  # KIP-1099: -1 unknown, 0 classic, 1 consumer


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedMember, ...] = ()
    authorized_operations: int = -(2**31)


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResponse:
    groups: tuple[DescribedGroup, ...]


# ------------------------------------------------------------------ ListGroups (16)

@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: Sequence[str] = ()
    types_filter: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    groups: tuple[ListedGroup, ...]
    error_code: int = 0


# ------------------------------------------------------------------ OffsetCommit (8)

@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitTopic:
    name: str
    partitions: Sequence[OffsetCommitPartition]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    topics: Sequence[OffsetCommitTopic]
    member_id: str = ""
    generation_id_or_member_epoch: int = -1
    group_instance_id: str | None = None
    retention_time_ms: int = -1  # OffsetCommit v2-v4 only
    api_version: int = 9


@dataclass(frozen=True, slots=True)
class PartitionResult:
    partition: int
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    topics: tuple[TopicResult, ...]


# ------------------------------------------------------------------ TxnOffsetCommit (28), markers

@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """Offsets committed inside a producer's transaction (KIP-98), with the consumer's group
    metadata (KIP-447: generation or member epoch, member id, instance id) from v3."""

    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: Sequence[OffsetCommitTopic]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class TxnMarkerRequest:
    """Write a transaction's COMMIT or ABORT marker to this shard's partition (the transaction
    coordinator's WriteTxnMarkers step for ``__consumer_offsets``)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int = 0


@dataclass(frozen=True, slots=True)
class TxnMarkerResponse:
    error_code: int = 0


# ------------------------------------------------------------------ OffsetFetch (9), one group

@dataclass(frozen=True, slots=True)
class OffsetFetchTopic:
    name: str
    partitions: Sequence[int]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    group_id: str
    topics: Sequence[OffsetFetchTopic] | None = None  # None = all committed offsets
    member_id: str | None = None
    member_epoch: int = -1
    require_stable: bool = False
    api_version: int = 9


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    committed_offset: int = -1
    committed_leader_epoch: int = -1
    metadata: str | None = ""
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class FetchedTopic:
    name: str
    partitions: tuple[FetchedPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    group_id: str
    topics: tuple[FetchedTopic, ...]
    error_code: int = 0
    error_message: str | None = None


# ------------------------------------------------------------------ DeleteGroups (42)

@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_ids: Sequence[str]


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletedGroup, ...]


# ------------------------------------------------------------------ OffsetDelete (47)

@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    topics: Sequence[OffsetFetchTopic]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    topics: tuple[TopicResult, ...] = ()
    error_code: int = 0
    error_message: str | None = None


# ------------------------------------------------------------------ group configs (Describe/IncrementalAlterConfigs, GROUP resource)

@dataclass(frozen=True, slots=True)
class AlterGroupConfigRequest:
    group_id: str
    configs: Mapping[str, str | None]  # None deletes the override
    replace: bool = False  # True: AlterConfigs semantics (unlisted keys are removed)
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterGroupConfigResponse:
    group_id: str
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeGroupConfigRequest:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool


@dataclass(frozen=True, slots=True)
class DescribeGroupConfigResponse:
    group_id: str
    configs: tuple[ConfigEntry, ...] = ()
    error_code: int = 0
    error_message: str | None = None


# ------------------------------------------------------------------ classic protocol: JoinGroup (11)

@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str  # "" for a new member
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # v1+; -1 (v0) = the session timeout
    group_instance_id: str | None = None  # v5+
    reason: str | None = None  # v8+
    api_version: int = 5  # v4+: a new dynamic member gets MEMBER_ID_REQUIRED first
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: int = 0
    generation_id: int = -1
    protocol_type: str | None = None  # v7+ on the wire
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False  # v9+
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()  # only the leader gets the member list
    error_message: str | None = None  # not on the wire; for logs


# ------------------------------------------------------------------ SyncGroup (14)

@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # v3+
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    assignments: Sequence[tuple[str, bytes]] = ()  # (member id, assignment): the leader's only
    api_version: int = 3


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: int = 0
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    assignment: bytes = b""
    error_message: str | None = None  # not on the wire; for logs


# ------------------------------------------------------------------ Heartbeat (12)

@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # v3+
    api_version: int = 3


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None  # not on the wire; for logs


# ------------------------------------------------------------------ LeaveGroup (13)

@dataclass(frozen=True, slots=True)
class LeaveGroupMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    member_id: str = ""  # v0-v2: the single leaving member
    members: Sequence[LeaveGroupMember] = ()  # v3+: a batch
    api_version: int = 3


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None = None
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error_code: int = 0
    members: tuple[LeftMember, ...] = ()  # v3+
    error_message: str | None = None  # not on the wire; for logs


# ------------------------------------------------------------------ DescribeGroups (15)

@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_ids: Sequence[str]
    include_authorized_operations: bool = False
    api_version: int = 5  # v6+: an unknown group is GROUP_ID_NOT_FOUND instead of state "Dead"


@dataclass(frozen=True, slots=True)
class DescribedClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedClassicGroup:
    group_id: str
    error_code: int = 0
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedClassicMember, ...] = ()
    authorized_operations: int = -(2**31)
    error_message: str | None = None  # v6+


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedClassicGroup, ...]


# ------------------------------------------------------------------ parked requests

@dataclass(frozen=True, slots=True)
class Parked:
    """The response of a JoinGroup / SyncGroup that must wait for other members.

    Its real response arrives later as a completion `(request_id, response)` in the `completions`
    of some later `Result` (another member's request, a timer, `unload()`)."""

    request_id: int


# ------------------------------------------------------------------ results of write operations

@dataclass(slots=True)
class Result:
    """Records to append (already applied to the shard) and the response to release.

    The response may be sent once `commit()` has been called with an offset >= `end_offset`
    (for an empty record list this waits for earlier pending writes, as Kafka does), and so may
    `completions`: the responses of earlier parked requests (see `Parked`) this operation released.
    """

    records: list = field(default_factory=list)
    response: object = None
    end_offset: int = 0
    completions: Sequence[tuple[int, object]] = ()  # (request_id, response) pairs; () costs no allocation
    transaction: object = None  # the producer's TxnBatch when the records form a transactional or control batch

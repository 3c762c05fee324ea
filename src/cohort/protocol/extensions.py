"""cohort's wire extensions for client-side assignors (the seeds' KIP-848 design; never shipped by
Apache Kafka): entity classes in kio's form, so the codec, bounds checks and writers serve them
like kio's generated ones.

* ConsumerGroupHeartbeat v1 gains tagged fields: the request's ``ClientAssignors`` (tag 1000);
  the response's ``ShouldComputeAssignment`` (tag 1000) and, in its Assignment, the assignor's
  ``Error``, ``MetadataVersion`` and ``MetadataBytes`` (tags 1000-1002). Tagged fields are Kafka's
  own way to extend a flexible version: every receiver skips the tags it does not know. A request
  version above Kafka's was the alternative, but ApiVersions advertises a contiguous range, so
  cohort would then claim Kafka's next version of this API and misread what a future client
  sends under it. With tags, Kafka's clients see Kafka's v1, and a cohort client talking to a
  Kafka broker simply gets server-side assignment.
* ConsumerGroupPrepareAssignment and ConsumerGroupInstallAssignment live at API keys 1000 and
  1001, which no Kafka version uses; their presence in ApiVersions is how a client learns that
  the broker runs client-side assignors.
"""

# No `from __future__ import annotations`: kio reads the field types as objects, not strings.
import datetime
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import GroupId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta

HEARTBEAT_KEY = 68
PREPARE_ASSIGNMENT_KEY = 1000
INSTALL_ASSIGNMENT_KEY = 1001
CLIENT_ASSIGNORS_TAG = 1000


def _entity(kind, api_key: int, header: type):
    """Class decorator: kio's frozen dataclass with the class variables its introspection reads."""

    def wrap(cls):
        cls.__type__ = kind
        cls.__version__ = i16(0 if api_key != HEARTBEAT_KEY else 1)
        cls.__flexible__ = True
        cls.__api_key__ = i16(api_key)
        cls.__header_schema__ = header
        cls.__annotations__ = {
            "__type__": ClassVar, "__version__": ClassVar[i16], "__flexible__": ClassVar[bool],
            "__api_key__": ClassVar[i16], "__header_schema__": ClassVar[type], **cls.__annotations__}
        return dataclass(frozen=True, slots=True, kw_only=True)(cls)

    return wrap


# --- ConsumerGroupHeartbeat v1 with ClientAssignors ----------------------------------------------

@_entity(EntityType.nested, HEARTBEAT_KEY, RequestHeader)
class ClientAssignor:
    name: str = field(metadata={"kafka_type": "string"})
    minimum_version: i16 = field(metadata={"kafka_type": "int16"})
    maximum_version: i16 = field(metadata={"kafka_type": "int16"})
    reason: i8 = field(metadata={"kafka_type": "int8"})
    metadata_version: i16 = field(metadata={"kafka_type": "int16"})
    metadata_bytes: bytes = field(metadata={"kafka_type": "bytes"})


@_entity(EntityType.nested, HEARTBEAT_KEY, RequestHeader)
class HeartbeatTopicPartitions:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@_entity(EntityType.request, HEARTBEAT_KEY, RequestHeader)
class ConsumerGroupHeartbeatRequest:
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    member_id: str = field(metadata={"kafka_type": "string"})
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    rack_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    rebalance_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"},
                                            default=i32Timedelta.parse(datetime.timedelta(milliseconds=-1)))
    subscribed_topic_names: tuple[TopicName, ...] | None = field(metadata={"kafka_type": "string"}, default=None)
    subscribed_topic_regex: str | None = field(metadata={"kafka_type": "string"}, default=None)
    server_assignor: str | None = field(metadata={"kafka_type": "string"}, default=None)
    topic_partitions: tuple[HeartbeatTopicPartitions, ...] | None
    client_assignors: tuple[ClientAssignor, ...] | None = field(metadata={"tag": CLIENT_ASSIGNORS_TAG}, default=None)
    """null if not used or unchanged since the last heartbeat; the member's client-side
    assignors otherwise, by its precedence."""


@_entity(EntityType.nested, HEARTBEAT_KEY, ResponseHeader)
class AssignedTopicPartitions:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@_entity(EntityType.nested, HEARTBEAT_KEY, ResponseHeader)
class HeartbeatAssignment:
    topic_partitions: tuple[AssignedTopicPartitions, ...]
    error: i8 = field(metadata={"kafka_type": "int8", "tag": 1000}, default=i8(0))
    """The client-side assignor's error for this member (0: none)."""
    metadata_version: i16 = field(metadata={"kafka_type": "int16", "tag": 1001}, default=i16(0))
    metadata_bytes: bytes = field(metadata={"kafka_type": "bytes", "tag": 1002}, default=b"")
    """What the client-side assignor gave this member beside its partitions."""


@_entity(EntityType.response, HEARTBEAT_KEY, ResponseHeader)
class ConsumerGroupHeartbeatResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    member_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    heartbeat_interval: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    assignment: HeartbeatAssignment | None = field(default=None)
    should_compute_assignment: bool = field(metadata={"kafka_type": "bool", "tag": 1000}, default=False)
    """True: this member was chosen to compute the group's next target assignment
    (ConsumerGroupPrepareAssignment, then ConsumerGroupInstallAssignment)."""


# --- ConsumerGroupPrepareAssignment (1000) ------------------------------------------------------

@_entity(EntityType.request, PREPARE_ASSIGNMENT_KEY, RequestHeader)
class ConsumerGroupPrepareAssignmentRequest:
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    member_id: str = field(metadata={"kafka_type": "string"})
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})


@_entity(EntityType.nested, PREPARE_ASSIGNMENT_KEY, ResponseHeader)
class PreparedTopicPartitions:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@_entity(EntityType.nested, PREPARE_ASSIGNMENT_KEY, ResponseHeader)
class PreparedMember:
    member_id: str = field(metadata={"kafka_type": "string"})
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    instance_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    rack_id: str | None = field(metadata={"kafka_type": "string"}, default=None)
    subscribed_topic_ids: tuple[uuid.UUID | None, ...] = field(metadata={"kafka_type": "uuid"}, default=())
    assignor_version: i16 = field(metadata={"kafka_type": "int16"})
    assignor_reason: i8 = field(metadata={"kafka_type": "int8"})
    assignor_metadata: bytes = field(metadata={"kafka_type": "bytes"})
    topic_partitions: tuple[PreparedTopicPartitions, ...]
    """The member's current target assignment."""


@_entity(EntityType.nested, PREPARE_ASSIGNMENT_KEY, ResponseHeader)
class PreparedTopic:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    topic_name: str = field(metadata={"kafka_type": "string"})
    num_partitions: i32 = field(metadata={"kafka_type": "int32"})


@_entity(EntityType.response, PREPARE_ASSIGNMENT_KEY, ResponseHeader)
class ConsumerGroupPrepareAssignmentResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    group_epoch: i32 = field(metadata={"kafka_type": "int32"})
    assignor_name: str = field(metadata={"kafka_type": "string"})
    members: tuple[PreparedMember, ...]
    topics: tuple[PreparedTopic, ...]


# --- ConsumerGroupInstallAssignment (1001) ------------------------------------------------------

@_entity(EntityType.nested, INSTALL_ASSIGNMENT_KEY, RequestHeader)
class InstalledTopicPartitions:
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@_entity(EntityType.nested, INSTALL_ASSIGNMENT_KEY, RequestHeader)
class InstalledMember:
    member_id: str = field(metadata={"kafka_type": "string"})
    topic_partitions: tuple[InstalledTopicPartitions, ...]
    metadata_version: i16 = field(metadata={"kafka_type": "int16"})
    metadata_bytes: bytes = field(metadata={"kafka_type": "bytes"})


@_entity(EntityType.request, INSTALL_ASSIGNMENT_KEY, RequestHeader)
class ConsumerGroupInstallAssignmentRequest:
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    member_id: str = field(metadata={"kafka_type": "string"})
    member_epoch: i32 = field(metadata={"kafka_type": "int32"})
    group_epoch: i32 = field(metadata={"kafka_type": "int32"})
    error: i8 = field(metadata={"kafka_type": "int8"})
    members: tuple[InstalledMember, ...]


@_entity(EntityType.response, INSTALL_ASSIGNMENT_KEY, ResponseHeader)
class ConsumerGroupInstallAssignmentResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)


# (api_key, version) -> (request class, response class), used by the version table instead of kio's.
SCHEMAS: dict[tuple[int, int], tuple[type, type]] = {
    (HEARTBEAT_KEY, 1): (ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
    (PREPARE_ASSIGNMENT_KEY, 0): (ConsumerGroupPrepareAssignmentRequest, ConsumerGroupPrepareAssignmentResponse),
    (INSTALL_ASSIGNMENT_KEY, 0): (ConsumerGroupInstallAssignmentRequest, ConsumerGroupInstallAssignmentResponse),
}

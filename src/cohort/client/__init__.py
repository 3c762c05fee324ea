"""cohort.client: an asyncio KIP-848 consumer, with client-side assignors (see docs/client.md)."""

from cohort.client.assignors import (
    AssignorMember,
    ClientAssignor,
    ClientGroupSpec,
    MemberAssignment,
    ServerSideAssignor,
)
from cohort.client.connection import KafkaConnectionError, UnsupportedVersionError
from cohort.client.consumer import (
    CommitFailedError,
    Consumer,
    KafkaError,
    NoOffsetForPartitionError,
    TopicPartition,
)
from cohort.client.records import ConsumerRecord

__all__ = [
    "AssignorMember", "ClientAssignor", "ClientGroupSpec", "CommitFailedError", "Consumer", "ConsumerRecord",
    "KafkaConnectionError", "KafkaError", "MemberAssignment", "NoOffsetForPartitionError", "ServerSideAssignor",
    "TopicPartition", "UnsupportedVersionError",
]

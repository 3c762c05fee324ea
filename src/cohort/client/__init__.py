"""cohort.client: an asyncio KIP-848 consumer, with client-side assignors (see docs/client.md).

The names below load on first use, so the tools that need only the wire connection
(`cohort.client.connection`) do not import the consumer with it: every `cohort` command did.
"""

from cohort.lazy_exports import lazy_exports

_EXPORTS = {
    "AssignorMember": "cohort.client.assignors",
    "ClientAssignor": "cohort.client.assignors",
    "ClientGroupSpec": "cohort.client.assignors",
    "MemberAssignment": "cohort.client.assignors",
    "ServerSideAssignor": "cohort.client.assignors",
    "KafkaConnectionError": "cohort.client.connection",
    "UnsupportedVersionError": "cohort.client.connection",
    "CommitFailedError": "cohort.client.consumer",
    "Consumer": "cohort.client.consumer",
    "KafkaError": "cohort.client.consumer",
    "NoOffsetForPartitionError": "cohort.client.consumer",
    "TopicPartition": "cohort.client.consumer",
    "ConsumerRecord": "cohort.client.records",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS, globals())

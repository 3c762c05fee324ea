"""Topics, partition logs and the coordinator's durable log, behind one synchronous API."""

from cohort.broker.broker import Broker, BrokerError, MetadataSnapshot, ProduceResult, TopicSnapshot
from cohort.broker.coordinator_log import OFFSETS_TOPIC, CoordinatorLog
from cohort.broker.topics import Topic

__all__ = [
    "OFFSETS_TOPIC",
    "Broker",
    "BrokerError",
    "CoordinatorLog",
    "MetadataSnapshot",
    "ProduceResult",
    "Topic",
    "TopicSnapshot",
]

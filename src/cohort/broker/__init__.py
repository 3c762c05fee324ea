"""Topics, partition logs and the coordinator's durable log, behind one synchronous API.

The names below load on first use, so a module that needs only a light part of the package
(the lag snapshot format, say) does not pull in the wire codec with it.
"""

from cohort.lazy_exports import lazy_exports

_EXPORTS = {
    "Broker": "cohort.broker.broker",
    "BrokerError": "cohort.broker.broker",
    "MetadataSnapshot": "cohort.broker.broker",
    "ProduceResult": "cohort.broker.broker",
    "TopicSnapshot": "cohort.broker.broker",
    "OFFSETS_TOPIC": "cohort.broker.coordinator_log",
    "CoordinatorLog": "cohort.broker.coordinator_log",
    "Topic": "cohort.broker.topics",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS, globals())

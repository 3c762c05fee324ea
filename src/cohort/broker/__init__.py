"""Topics, partition logs and the coordinator's durable log, behind one synchronous API.

The names below load on first use, so a module that needs only a light part of the package
(the lag snapshot format, say) does not pull in the wire codec with it.
"""

import importlib

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


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cohort.broker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

"""Topic metadata (name, id, partition count, configs) and its durable store.

The store is one JSON file replaced atomically (write temp, fsync, rename, fsync directory), so
after a crash it holds either the old or the new state, never a mix.
"""

from __future__ import annotations

import base64
import json
import os
import re
import uuid
from dataclasses import dataclass, field

from cohort.security import files

META_FILE = "cohort-meta.json"
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249

# Topic-level configs cohort accepts (CreateTopics, IncrementalAlterConfigs) with Kafka's
# defaults. They are stored and reported; cohort acts on the segment, flush, retention and
# compaction ones (see docs/storage.md) and max.message.bytes. Anything else gets
# INVALID_CONFIG, as in Kafka.
TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}
TOPIC_CONFIGS = frozenset(TOPIC_CONFIG_DEFAULTS)
# Topic configs whose default comes from a broker setting (Kafka's ServerTopicConfigSynonyms).
TOPIC_CONFIG_BROKER_DEFAULTS = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "max.message.bytes": "message.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
}
_INT_TOPIC_CONFIGS = {"segment.bytes": 1024, "max.message.bytes": 0, "index.interval.bytes": 0, "retention.ms": -1,
                      "retention.bytes": -1, "segment.ms": 1, "min.insync.replicas": 1, "flush.messages": 1,
                      "flush.ms": 0, "delete.retention.ms": 0, "min.compaction.lag.ms": 0, "max.compaction.lag.ms": 1,
                      "file.delete.delay.ms": 0, "segment.jitter.ms": 0, "message.timestamp.before.max.ms": 0,
                      "message.timestamp.after.max.ms": 0}


def topic_config_error(key: str, value: str | None) -> str | None:
    """Why ``key=value`` is not an acceptable topic config, or None."""
    if key not in TOPIC_CONFIGS:
        return f"unknown topic config {key!r}"
    if value is not None and key in _INT_TOPIC_CONFIGS:
        try:
            if int(value) < _INT_TOPIC_CONFIGS[key]:
                raise ValueError
        except ValueError:
            return f"{key} must be an integer >= {_INT_TOPIC_CONFIGS[key]}, got {value!r}"
    if key == "min.cleanable.dirty.ratio" and value is not None:
        try:
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError
        except ValueError:
            return f"min.cleanable.dirty.ratio must be a number between 0 and 1, got {value!r}"
    if key == "message.timestamp.type" and value is not None and value not in ("CreateTime", "LogAppendTime"):
        return f"message.timestamp.type must be CreateTime or LogAppendTime, got {value!r}"
    if key == "cleanup.policy" and value is not None:
        if not set(value.split(",")) <= {"delete", "compact"}:
            return f"cleanup.policy must be a list of delete and compact, got {value!r}"
    return None


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's rules), or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name is longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "id": str(self.id),
            "partitions": self.partitions,
            "configs": self.configs,
            "internal": self.internal,
        }

    @classmethod
    def from_json(cls, d: dict) -> "Topic":
        return cls(d["name"], uuid.UUID(d["id"]), int(d["partitions"]), dict(d.get("configs", {})), bool(d.get("internal")))


def new_topic_id() -> uuid.UUID:
    """A random topic id that is never the zero UUID (which means 'no id' on the wire)."""
    while True:
        tid = uuid.uuid4()
        if tid.int:
            return tid


def new_cluster_id() -> str:
    """Kafka-style cluster id: a UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class BrokerState:
    """Everything in the metadata file."""

    cluster_id: str
    topics: dict[str, Topic]
    producer_id_block_end: int = 0
    # Dynamic broker configs as set by IncrementalAlterConfigs, by Kafka's resource name:
    # "" for the cluster-wide defaults, a node id for that broker's own.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)


class MetadataStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, META_FILE)

    def load(self) -> BrokerState:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return BrokerState(new_cluster_id(), {})
        except (ValueError, UnicodeDecodeError) as exc:
            raise OSError(f"{self.path} is not valid JSON ({exc}); refusing to start") from None
        topics = [Topic.from_json(t) for t in raw.get("topics", [])]
        configs = {str(k): {str(n): str(v) for n, v in d.items()} for k, d in raw.get("broker_configs", {}).items()}
        return BrokerState(raw["cluster_id"], {t.name: t for t in topics}, int(raw.get("producer_id_block_end", 0)), configs)

    def save(self, state: BrokerState) -> None:
        data = json.dumps(
            {
                "version": 1,
                "cluster_id": state.cluster_id,
                "producer_id_block_end": state.producer_id_block_end,
                "broker_configs": state.broker_configs,
                "topics": [t.to_json() for t in sorted(state.topics.values(), key=lambda t: t.name)],
            },
        ).encode()
        files.replace_atomically(self.path, data)

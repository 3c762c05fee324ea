"""cohort in front of an existing Kafka-compatible cluster (the "upstream"): coordinator state kept
in the upstream's own topics, so it outlives the machine cohort runs on.

Public surface: `UpstreamRecordLog` (a shard's record log in an upstream topic partition),
`group_logs` (one per group coordinator shard) and `ensure_topic` (the compacted topic they live in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cohort.upstream.record_log import UpstreamLogError, UpstreamRecordLog, transactional_id

__all__ = ["UpstreamLogError", "UpstreamRecordLog", "ensure_topic", "group_logs", "transactional_id"]


def group_logs(client: Mapping[str, Any], topic: str, cluster: str, shards: int,
               timeout_s: float) -> list[UpstreamRecordLog]:
    """The group coordinator's shard logs: shard k is partition k of ``topic``."""
    return [UpstreamRecordLog(topic, k, transactional_id(cluster, k), client, timeout_s=timeout_s)
            for k in range(shards)]


def ensure_topic(client: Mapping[str, Any], topic: str, partitions: int, replication_factor: int,
                 timeout_s: float) -> tuple[bool, int]:
    """Create ``topic`` compacted with ``partitions`` partitions unless it exists. Returns
    (created, its partition count): an existing topic keeps its count, which the caller must
    adopt or refuse (a shard is a partition: another count would move groups). Blocking; raises
    UpstreamLogError with a one-line reason."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(dict(client))
    new = NewTopic(topic, partitions, replication_factor, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new], request_timeout=timeout_s)[topic].result(timeout_s)
        return True, partitions
    except ck.KafkaException as exc:
        err = exc.args[0]
        if err.code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
            raise UpstreamLogError(f"cannot create the upstream topic {topic}: {err.str()}") from None
    except Exception as exc:  # noqa: BLE001 - a timeout: no answer from the upstream
        raise UpstreamLogError(f"cannot create the upstream topic {topic}: {exc}") from None
    try:
        found = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except ck.KafkaException as exc:
        raise UpstreamLogError(f"cannot describe the upstream topic {topic}: {exc.args[0].str()}") from None
    if found is None or found.error is not None or not found.partitions:
        raise UpstreamLogError(f"cannot describe the upstream topic {topic}: "
                               f"{found.error.str() if found is not None and found.error else 'no partitions'}")
    return False, len(found.partitions)

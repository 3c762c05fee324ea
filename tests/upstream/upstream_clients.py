"""Client-side probes shared by the upstream tests: what a group has committed, and which node
FindCoordinator names for it."""

from __future__ import annotations

import confluent_kafka as ck
from kio.index import load_request_schema

from cohort.protocol.entities import build
from cohort_testing import WireClient


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """{partition: committed offset} of ``group`` on ``topic``, read through a real client."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in c.committed(
            [ck.TopicPartition(topic, p) for p in range(partitions)], timeout=30)}
    finally:
        c.close()


def coordinator_of(port: int, group: str) -> int:
    """The node id FindCoordinator (asked on ``port``) names for ``group``; -1 while its shard has no owner."""
    with WireClient(port) as w:
        found = w.request(10, 3, build(load_request_schema(10, 3), key=group, key_type=0))
    return found.node_id if found.error_code == 0 else -1

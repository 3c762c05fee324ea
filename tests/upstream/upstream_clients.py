"""Client-side probes shared by the upstream tests: what a group has committed, which node
FindCoordinator names for it, and how the instances of a cohort cluster list one another."""

from __future__ import annotations

import time

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


def own_node_id(port: int) -> int | None:
    """The node id the instance on ``port`` lists itself under in Metadata (None: not settled)."""
    own = [n for n, (_, p) in brokers_of(port).items() if p == port]
    return own[0] if own else None


def settled_ids(ports: list[int]) -> list[int] | None:
    """Each instance's node id once every instance lists every other one, else None."""
    ids = [own_node_id(port) for port in ports]
    if None in ids or len(set(ids)) != len(ids):
        return None
    if any(not set(ids) <= set(brokers_of(port)) for port in ports):
        return None
    return ids


def brokers_of(port: int) -> dict[int, tuple[str, int]]:
    """node id -> (host, port) as Metadata from the instance on ``port`` lists them."""
    with WireClient(port) as w:
        md = w.request(3, 12, build(load_request_schema(3, 12), topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False))
    return {b.node_id: (b.host, b.port) for b in md.brokers}


def wait_for(what: str, check, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def cluster_formed(ports: list[int], found: list[int]) -> bool:
    """Every instance (on ``ports``) settled its node id, lists the others, and all of them name
    the same coordinator for each of 30 groups, spread over every instance; ``found`` gets the
    node ids, in the order of ``ports``."""
    ids = settled_ids(ports)
    if ids is None:
        return False
    found[:] = ids
    probe = [f"group-{i}" for i in range(30)]
    return all(len({coordinator_of(port, g) for port in ports}) == 1 for g in probe) and \
        {coordinator_of(ports[0], g) for g in probe} == set(ids)

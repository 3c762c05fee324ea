"""What cohort knows of the upstream cluster: its brokers (to reach each through a port of
cohort's own) and its topics (names, ids, partition counts), refreshed by polling its metadata.

`UpstreamCluster` offers the group coordinator the same small view of topics the local broker
does (`topics`, `topic_by_id`, `metadata_snapshot`, `topic_listeners`), so assignments and
subscriptions resolve against the upstream's topics and topic ids, which are what clients see.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from cohort.broker import MetadataSnapshot, TopicSnapshot

log = logging.getLogger("cohort.upstream")

UPSTREAM_INTERNAL = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


@dataclass(frozen=True, slots=True)
class UpstreamTopic:
    name: str
    id: uuid.UUID
    partitions: int
    internal: bool


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """A partition's upstream offsets, read like a local log's by the coordinator's lag view."""

    start_offset: int
    end_offset: int  # the last stable offset

    def last_stable_offset(self, _end: int) -> int:
        return self.end_offset


@dataclass(frozen=True, slots=True)
class Brokers:
    """The upstream's brokers (node id -> host, port), its cluster id and controller."""

    nodes: Mapping[int, tuple[str, int]]
    cluster_id: str | None
    controller_id: int


class UpstreamCluster:
    """The upstream's brokers and topics, as of the last `refresh` (see the module docstring)."""

    def __init__(self, client: Mapping[str, Any], internal: frozenset[str] = frozenset(), *,
                 timeout_s: float = 30.0) -> None:
        self._client = dict(client)
        self._internal = UPSTREAM_INTERNAL | internal
        self._timeout = timeout_s
        self._admin: Any = None
        self.brokers = Brokers({}, None, -1)
        self.topics: dict[str, UpstreamTopic] = {}
        self._by_id: dict[uuid.UUID, UpstreamTopic] = {}
        self.topic_version = 0
        self.topic_listeners: list[Callable[[], None]] = []
        # (topic, partition) -> its upstream offsets, read with the metadata: the lag the
        # coordinator's lag-aware assignment and metrics use (as the broker's `logs`).
        self.logs: dict[tuple[str, int], PartitionOffsets] = {}
        # (topic, partition) -> the upstream node id leading it (share fetches read from it)
        self.leaders: dict[tuple[str, int], int] = {}

    # --- the coordinator's view ----------------------------------------------------------------

    def topic_by_id(self, topic_id: uuid.UUID) -> UpstreamTopic | None:
        return self._by_id.get(topic_id)

    def metadata_snapshot(self) -> MetadataSnapshot:
        """As the broker's; offsets as of the last refresh."""
        logs, none = self.logs, PartitionOffsets(0, 0)
        views = {}
        for t in self.topics.values():
            offsets = [logs.get((t.name, p), none) for p in range(t.partitions)]
            views[t.name] = TopicSnapshot(t.name, t.id, t.partitions, tuple(o.start_offset for o in offsets),
                                          tuple(o.end_offset for o in offsets), t.internal)
        return MetadataSnapshot(self.topic_version, views, {t.id: t.name for t in self.topics.values()})

    # --- refreshing (blocking: run on a worker thread, apply on the loop) -----------------------

    def fetch(self) -> tuple[Brokers, dict[str, UpstreamTopic], dict[tuple[str, int], "PartitionOffsets"]]:
        """The upstream's brokers, topics and their partitions' offsets now (and, in `leaders`,
        who leads each partition). Raises OSError with a one-line reason."""
        import confluent_kafka as ck
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self._client)
        try:
            md = self._admin.list_topics(timeout=self._timeout)
        except ck.KafkaException as exc:
            raise OSError(f"cannot read the upstream's metadata: {exc.args[0].str()}") from None
        brokers = Brokers({b.id: (b.host, b.port) for b in md.brokers.values()}, md.cluster_id, md.controller_id)
        names = sorted(name for name, t in md.topics.items() if t.error is None)
        topics: dict[str, UpstreamTopic] = {}
        leaders = {(name, p.id): p.leader for name, t in md.topics.items() if t.error is None
                   for p in t.partitions.values() if p.leader >= 0}
        if names:
            futures = self._admin.describe_topics(TopicCollection(names), request_timeout=self._timeout)
            for name, fut in futures.items():
                try:
                    d = fut.result(self._timeout)
                except Exception:  # noqa: BLE001 - deleted meanwhile, or no answer now: the next refresh says
                    known = self.topics.get(name)
                    if known is not None:  # not taken for deleted on one failed answer (its share state would go)
                        topics[name] = known
                    continue
                tid = d.topic_id
                bits = (tid.get_most_significant_bits() << 64 | tid.get_least_significant_bits() & (2**64 - 1))
                topics[name] = UpstreamTopic(name, uuid.UUID(int=bits & (2**128 - 1)), len(d.partitions),
                                             name in self._internal)
        self.leaders = leaders  # one reference swapped: readers on the loop see the old or the new map
        return brokers, topics, self._offsets(topics)

    def _offsets(self, topics: dict[str, UpstreamTopic]) -> dict[tuple[str, int], "PartitionOffsets"]:
        """Every user topic partition's log start and last stable offset (what a read_committed
        consumer can reach: the end for lag, as the broker counts it)."""
        import confluent_kafka as ck
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        tps = [ck.TopicPartition(t.name, p) for t in topics.values() if not t.internal for p in range(t.partitions)]
        if not tps:
            return {}
        found: dict[tuple[str, int], list[int]] = {}
        for slot, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):
            futures = self._admin.list_offsets({tp: spec for tp in tps}, isolation_level=IsolationLevel.READ_COMMITTED,
                                               request_timeout=self._timeout)
            for tp, fut in futures.items():
                try:
                    offset = fut.result(self._timeout).offset
                except Exception:  # noqa: BLE001 - a partition without a leader right now: next refresh
                    continue
                found.setdefault((tp.topic, tp.partition), [0, 0])[slot] = max(offset, 0)
        return {key: PartitionOffsets(start, max(start, end)) for key, (start, end) in found.items()}

    def apply(self, brokers: Brokers, topics: dict[str, UpstreamTopic],
              offsets: dict[tuple[str, int], "PartitionOffsets"] | None = None) -> bool:
        """Take a fetched state; True (and the listeners told) if the topics changed."""
        self.brokers = brokers
        if offsets is not None:
            self.logs = offsets
        if topics == self.topics:
            return False
        self.topics.clear()  # in place: readers hold its bound methods
        self.topics.update(topics)
        self._by_id = {t.id: t for t in topics.values()}
        self.topic_version += 1
        for cb in self.topic_listeners:
            cb()
        return True

    def close(self) -> None:
        self._admin = None

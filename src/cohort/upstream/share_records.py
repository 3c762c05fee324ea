"""The records share groups hand out, read from the upstream's partition leaders.

In front of an upstream, cohort keeps a share group's share-partitions (which records are
acquired, by whom, how often delivered) while the records stay in the upstream's topics.
`UpstreamShareRecords` is what the share-partition manager reads them through: Fetch (v12, a
read every current Kafka-compatible broker serves) with the group's isolation level, ListOffsets
for `share.auto.offset.reset`, and a long-polling Fetch to wait for new records. The batches come
back as bytes and are handed to the share consumer unchanged, as Kafka's own ShareFetch does.

Reads go out on one connection per upstream broker, answered at once (MinBytes 0); a wait for
new records has a connection of its own for its duration, as a broker answers one connection's
requests in order and a long poll would hold the reads up.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from cohort.client.connection import (AuthenticationError, BrokerConnection, KafkaConnectionError, Security,
                                      UnsupportedVersionError)
from cohort.protocol.entities import build, nested
from cohort.protocol.versions import request_schema
from cohort.share.records import LATEST, Read
from cohort.upstream.cluster import UpstreamCluster

log = logging.getLogger("cohort.upstream")
E = ErrorCode
FETCH, LIST_OFFSETS = 1, 2
FETCH_VERSION, LIST_OFFSETS_VERSION = 12, 7
CONNECT_TIMEOUT_S = 10.0
IDLE_POLLERS = 4  # long-poll connections kept per broker between waits
_GONE = (KafkaConnectionError, AuthenticationError, UnsupportedVersionError, OSError, asyncio.TimeoutError)


class UpstreamShareRecords:
    """See the module docstring. `cluster` is the proxy's view of the upstream (topics, leaders,
    broker addresses); ``stale`` asks it to read the upstream's metadata again (a leader moved)."""

    remote = True

    def __init__(self, cluster: UpstreamCluster, client: Mapping[str, Any], stale: Callable[[], None]) -> None:
        self.cluster = cluster
        self.security = Security.from_config(client)
        self.client_id = "cohort-share"
        self._stale = stale
        self._reads: dict[int, BrokerConnection] = {}
        self._opening: dict[int, asyncio.Future] = {}
        self._pollers: dict[int, list[BrokerConnection]] = {}
        self._busy: set[BrokerConnection] = set()
        self._ends: dict[tuple[str, int, bool], int] = {}  # (topic, partition, committed) -> the end last read
        self._closed = False

    # --- the topics (as the broker's) ----------------------------------------------------------

    def topic_by_id(self, topic_id: Any) -> Any:
        return self.cluster.topic_by_id(topic_id)

    def topic(self, name: str) -> Any:
        return self.cluster.topics.get(name)

    def high_watermark(self, topic: str, partition: int) -> int:
        """The partition's end as last seen (a read's answer, or the last metadata refresh)."""
        known = self.cluster.logs.get((topic, partition))
        return max(self._ends.get((topic, partition, False), 0), known.end_offset if known else 0)

    def log_start(self, topic: str, partition: int) -> int:
        known = self.cluster.logs.get((topic, partition))
        return known.start_offset if known else 0

    # --- reading ---------------------------------------------------------------------------------

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int, read_committed: bool,
                   allow_oversize: bool = True) -> Read:
        """Whole batches from ``offset``, answered at once. The upstream gives at least one batch
        however large (KIP-74), whatever ``allow_oversize`` says: the caller's budget is soft."""
        # MaxWaitMs 1, MinBytes 0: answered at once. Tansu 0.6 answers a MaxWaitMs of 0 with no
        # partitions at all, records or not (seen against its binary, 2026-11-29).
        body = self._fetch(((topic, partition, offset),), max_bytes, read_committed, 1, 0)
        answer = await self._on_leader(topic, partition, lambda conn: conn.request(FETCH, FETCH_VERSION, body))
        if isinstance(answer, Read):
            return answer
        for t in answer.responses:
            for p in t.partitions:
                code = int(p.error_code)
                if code:
                    if code != E.offset_out_of_range:
                        self._stale()
                    return Read(code, b"", (), int(p.log_start_offset))
                self._remember_end(topic, partition, read_committed, p)
                aborted = tuple(p.aborted_transactions or ()) if read_committed else ()
                return Read(E.none, bytes(p.records or b""), aborted, int(p.log_start_offset))
        return Read(E.none)  # the partition left out of the answer: nothing there now

    def _remember_end(self, topic: str, partition: int, read_committed: bool, p: Any) -> None:
        self._ends[(topic, partition, False)] = int(p.high_watermark)
        if read_committed and p.last_stable_offset >= 0:
            self._ends[(topic, partition, True)] = int(p.last_stable_offset)

    async def offset_for(self, topic: str, partition: int, timestamp: int) -> int:
        """ListOffsets: the earliest (-2), the latest (-1), or the first offset at or after a
        timestamp (the latest when there is none); -1 when the upstream cannot say now."""
        topic_cls = nested(request_schema(LIST_OFFSETS, LIST_OFFSETS_VERSION), "topics")
        part_cls = nested(topic_cls, "partitions")
        request = dict(replica_id=-1, isolation_level=0, topics=(build(topic_cls, name=topic, partitions=(
            build(part_cls, partition_index=partition, current_leader_epoch=-1, timestamp=timestamp),)),))
        answer = await self._on_leader(topic, partition,
                                       lambda conn: conn.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, **request))
        if isinstance(answer, Read):
            return -1
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code:
                    self._stale()
                    return -1
                if p.offset < 0 and timestamp >= 0:
                    return await self.offset_for(topic, partition, LATEST)
                return int(p.offset)
        return -1

    async def wait_for_records(self, keys: Iterable[tuple[str, int]], timeout: float, read_committed: bool) -> None:
        """Returns once one of the partitions has records beyond the end last read, or after
        ``timeout`` seconds (a long-polling Fetch per leader; the first answer ends the wait)."""
        by_leader: dict[int, list[tuple[str, int, int]]] = {}
        for topic, partition in keys:
            leader = self.cluster.leaders.get((topic, partition))
            if leader is None:
                continue
            end = self._ends.get((topic, partition, read_committed))
            if end is None:
                end = self.high_watermark(topic, partition)
            by_leader.setdefault(leader, []).append((topic, partition, end))
        if not by_leader or timeout <= 0:
            await asyncio.sleep(max(timeout, 0))
            return
        wait_ms = int(timeout * 1000)
        polls = [asyncio.ensure_future(self._poll(node, self._fetch(tps, 1, read_committed, wait_ms, 1),
                                                  read_committed)) for node, tps in by_leader.items()]
        done, _ = await asyncio.wait(polls, timeout=timeout + 1, return_when=asyncio.FIRST_COMPLETED)
        # The rest run out on their own (their connections go back to the pool when answered).
        for fut in done:
            fut.exception()  # retrieved: a failed poll only ends the wait early

    async def _poll(self, node: int, body: Any, read_committed: bool) -> None:
        conn = await self._poller(node)
        if conn is None:
            await asyncio.sleep(0.2)  # the broker cannot be reached now: a short pause, not a spin
            return
        self._busy.add(conn)
        try:
            answer = await conn.request(FETCH, FETCH_VERSION, body)
        except Exception:  # noqa: BLE001 - a failed poll only ends a wait early (closed, or undecodable)
            await conn.close()
            return
        finally:
            self._busy.discard(conn)
        # The ends it saw: the next wait starts there, so records that a share-partition cannot
        # acquire yet (its in-flight limit, held by others) end one wait, not every one.
        for t in answer.responses:
            for p in t.partitions:
                if not p.error_code:
                    self._remember_end(t.topic, p.partition_index, read_committed, p)
        idle = self._pollers.setdefault(node, [])
        if len(idle) < IDLE_POLLERS and not self._closed:
            idle.append(conn)
        else:
            await conn.close()

    async def _poller(self, node: int) -> BrokerConnection | None:
        idle = self._pollers.setdefault(node, [])
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        try:
            return await self._dial(node)
        except _GONE:
            return None

    # --- connections -----------------------------------------------------------------------------

    async def _on_leader(self, topic: str, partition: int, call: Callable[[BrokerConnection], Any]) -> Any:
        """``call`` on the reads connection of the partition's leader; a Read with an error when
        there is none or it went away (the share fetch finds nothing there this time)."""
        leader = self.cluster.leaders.get((topic, partition))
        if leader is None:
            self._stale()
            return Read(E.leader_not_available)
        conn = await self._connection(leader)
        if conn is None:
            self._stale()
            return Read(E.leader_not_available)
        try:
            return await call(conn)
        except _GONE as exc:
            log.warning("share records from upstream broker %d: %s", leader, exc)
            self._stale()
            return Read(E.leader_not_available)

    async def _connection(self, node: int) -> BrokerConnection | None:
        conn = self._reads.get(node)
        if conn is not None and not conn.closed:
            return conn
        opening = self._opening.get(node)
        if opening is None:
            opening = self._opening[node] = asyncio.ensure_future(self._open(node))
            opening.add_done_callback(lambda _: self._opening.pop(node, None))
        return await asyncio.shield(opening)

    async def _open(self, node: int) -> BrokerConnection | None:
        if self._closed:
            return None
        try:
            conn = await self._dial(node)
        except _GONE as exc:
            log.warning("share records: cannot reach upstream broker %d: %s", node, exc)
            return None
        if conn is not None:
            self._reads[node] = conn
        return conn

    async def _dial(self, node: int) -> BrokerConnection | None:
        """A new connection to upstream broker ``node`` (None: the upstream does not list it now)."""
        address = self.cluster.brokers.nodes.get(node)
        if address is None:
            return None
        return await BrokerConnection.open(*address, self.client_id, node, CONNECT_TIMEOUT_S, self.security)

    def _fetch(self, tps: Iterable[tuple[str, int, int]], max_bytes: int, read_committed: bool, wait_ms: int,
               min_bytes: int) -> Any:
        schema = request_schema(FETCH, FETCH_VERSION)
        topic_cls = nested(schema, "topics")
        part_cls = nested(topic_cls, "partitions")
        by_topic: dict[str, list] = {}
        for topic, partition, offset in tps:
            by_topic.setdefault(topic, []).append(build(
                part_cls, partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=max_bytes))
        return build(schema, replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=min_bytes,
                     max_bytes=max_bytes, isolation_level=1 if read_committed else 0, session_id=0, session_epoch=-1,
                     topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                     forgotten_topics_data=(), rack_id="")

    async def close(self) -> None:
        self._closed = True
        conns = [*self._reads.values(), *(c for idle in self._pollers.values() for c in idle), *self._busy]
        self._reads.clear()
        self._pollers.clear()
        self._busy.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

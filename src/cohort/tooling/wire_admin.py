"""The admin requests librdkafka has no call for, over cohort's own wire client.

OffsetDelete (kafka-consumer-groups.sh --delete-offsets) and the transaction admin APIs
(ListTransactions, DescribeTransactions, DescribeProducers, WriteTxnMarkers, as
kafka-transactions.sh sends them) go to the broker Kafka's admin client would pick: the group's
or the transactional id's coordinator, a partition's leader, or every broker. Works against any
Kafka-compatible cluster, with the tool's TLS and SASL settings (librdkafka's names).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from cohort.client.connection import (AuthenticationError, BrokerConnection, KafkaConnectionError, Security,
                                      UnsupportedVersionError)
from cohort.protocol.entities import build, error_name, nested
from cohort.protocol.versions import request_schema
from cohort.tooling.client import ToolError, UsageError

METADATA, FIND_COORDINATOR, LIST_GROUPS, WRITE_TXN_MARKERS, OFFSET_DELETE = 3, 10, 16, 27, 47
LIST_OFFSETS, DELETE_GROUPS = 2, 42
SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_OFFSETS, ALTER_SHARE_OFFSETS, DELETE_SHARE_OFFSETS = 77, 90, 91, 92
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
GROUP_KEY, TRANSACTION_KEY = 0, 1
T = TypeVar("T")


class KafkaError(ToolError):
    """An error code from the broker, named as Kafka names it."""

    def __init__(self, code: Any, message: str | None = None) -> None:
        name = code if isinstance(code, str) else getattr(code, "name", str(code)).upper()
        super().__init__(f"{name}: {message}" if message else name)


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: none open
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


def run(conf: Mapping[str, Any], timeout: float, fn: Callable[["WireAdmin"], Awaitable[T]]) -> T:
    """Run ``fn`` with a connected admin on a loop of its own; connections closed after."""

    async def main() -> T:
        admin = WireAdmin(conf, timeout)
        try:
            return await asyncio.wait_for(fn(admin), timeout)
        except asyncio.TimeoutError:
            raise ToolError(f"no answer within {timeout:g} s") from None
        except (KafkaConnectionError, AuthenticationError, UnsupportedVersionError) as exc:
            raise ToolError(str(exc)) from None
        finally:
            await admin.close()

    return asyncio.run(main())


class ShareAdmin:
    """The share-group admin requests (kafka-share-groups.sh), mixed into WireAdmin."""

    async def share_groups(self) -> dict[str, str]:
        """ListGroups with the `share` type filter on every broker: group id -> state."""
        await self.metadata(())  # type: ignore[attr-defined]
        out = {}
        for node_id in sorted(self.brokers):  # type: ignore[attr-defined]
            conn = await self.node(node_id)  # type: ignore[attr-defined]
            resp = await conn.request(LIST_GROUPS, conn.pick(LIST_GROUPS, 5), states_filter=(), types_filter=("share",))
            if resp.error_code:
                raise KafkaError(resp.error_code, f"broker {node_id}")
            out.update((g.group_id, g.group_state or "Unknown") for g in resp.groups)
        return out

    async def _group_request(self, group: str, api_key: int, version: int, **fields: Any) -> tuple[int, Any]:
        """A request to the group's coordinator, retried while it moves or loads."""
        deadline = asyncio.get_running_loop().time() + self.timeout  # type: ignore[attr-defined]
        while True:
            node_id, conn = await self.coordinator(group, GROUP_KEY)  # type: ignore[attr-defined]
            resp = await conn.request(api_key, conn.pick(api_key, version), **fields)
            code = getattr(resp, "error_code", 0)
            if api_key in (SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_OFFSETS):
                code = resp.groups[0].error_code
            if int(code) in _RETRIABLE and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
                continue
            return node_id, resp

    async def describe_share_group(self, group: str) -> tuple[int, Any]:
        """ShareGroupDescribe: (coordinator id, the described group); KafkaError for its error."""
        node_id, resp = await self._group_request(group, SHARE_GROUP_DESCRIBE, 1, group_ids=(group,),
                                                  include_authorized_operations=False)
        g = resp.groups[0]
        if g.error_code:
            raise KafkaError(g.error_code, g.error_message or f"group {group}")
        return node_id, g

    async def share_offsets(self, group: str) -> dict[tuple[str, int], tuple[int, int]]:
        """DescribeShareGroupOffsets of every initialized share-partition: (start offset, lag)."""
        schema = request_schema(DESCRIBE_SHARE_OFFSETS, 1)
        _, resp = await self._group_request(group, DESCRIBE_SHARE_OFFSETS, 1, groups=(
            build(nested(schema, "groups"), group_id=group, topics=None),))
        g = resp.groups[0]
        if g.error_code:
            raise KafkaError(g.error_code, g.error_message or f"group {group}")
        return {(t.topic_name, p.partition_index): (p.start_offset, getattr(p, "lag", -1))
                for t in g.topics for p in t.partitions if not p.error_code}

    async def alter_share_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        schema = request_schema(ALTER_SHARE_OFFSETS, 0)
        topic_cls = nested(schema, "topics")
        by_topic: dict[str, list] = {}
        for (t, p), o in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(build(nested(topic_cls, "partitions"), partition_index=p, start_offset=o))
        _, resp = await self._group_request(group, ALTER_SHARE_OFFSETS, 0, group_id=group, topics=tuple(
            build(topic_cls, topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or f"group {group}")
        return {(t.topic_name, p.partition_index): int(p.error_code) for t in resp.responses for p in t.partitions}

    async def delete_share_offsets(self, group: str, topics: list[str]) -> dict[str, int]:
        schema = request_schema(DELETE_SHARE_OFFSETS, 0)
        _, resp = await self._group_request(group, DELETE_SHARE_OFFSETS, 0, group_id=group, topics=tuple(
            build(nested(schema, "topics"), topic_name=t) for t in topics))
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or f"group {group}")
        return {t.topic_name: int(t.error_code) for t in resp.responses}

    async def delete_group(self, group: str) -> int:
        _, resp = await self._group_request(group, DELETE_GROUPS, 2, groups_names=(group,))
        return int(resp.results[0].error_code)

    async def list_offsets(self, topic: str, partitions: list[int], timestamp: int) -> dict[int, int]:
        """ListOffsets at the leaders: -2 earliest, -1 latest, else the first offset at or after."""
        resp = await self.metadata((topic,))  # type: ignore[attr-defined]
        (t,) = resp.topics
        if t.error_code:
            raise KafkaError(t.error_code, f"topic {topic}")
        leaders: dict[int, list[int]] = {}
        for p in t.partitions:
            if p.partition_index in partitions:
                leaders.setdefault(p.leader_id, []).append(p.partition_index)
        schema = request_schema(LIST_OFFSETS, 7)
        topic_cls = nested(schema, "topics")
        out = {}
        for leader, ps in leaders.items():
            conn = await self.node(leader)  # type: ignore[attr-defined]
            answer = await conn.request(LIST_OFFSETS, conn.pick(LIST_OFFSETS, 7, 5), replica_id=-1, isolation_level=0,
                                        topics=(build(topic_cls, name=topic, partitions=tuple(
                                            build(nested(topic_cls, "partitions"), partition_index=p,
                                                  current_leader_epoch=-1, timestamp=timestamp) for p in ps)),))
            for part in answer.topics[0].partitions:
                if part.error_code:
                    raise KafkaError(part.error_code, f"{topic}-{part.partition_index}")
                out[part.partition_index] = part.offset
        return out


class WireAdmin(ShareAdmin):
    def __init__(self, conf: Mapping[str, Any], timeout: float) -> None:
        try:
            self.security = Security.from_config(conf)
        except (ValueError, OSError) as exc:
            raise UsageError(f"client settings: {exc}") from None
        self.bootstrap = [_address(a) for a in str(conf["bootstrap.servers"]).split(",") if a.strip()]
        self.client_id = str(conf.get("client.id") or "cohort-tools")
        self.timeout = timeout
        self.brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[Any, BrokerConnection] = {}

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for conn in connections.values():
            await conn.close()

    async def _connect(self, key: Any, host: str, port: int) -> BrokerConnection:
        conn = self._connections.get(key)
        if conn is None or conn.closed:
            conn = await BrokerConnection.open(host, port, self.client_id, timeout=self.timeout, security=self.security)
            self._connections[key] = conn
        return conn

    async def any_broker(self) -> BrokerConnection:
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                return await self._connect(("bootstrap", host, port), host, port)
            except KafkaConnectionError as exc:
                last = exc
        raise ToolError(str(last) if last else "no bootstrap server")

    async def node(self, node_id: int) -> BrokerConnection:
        if node_id not in self.brokers:
            await self.metadata(())
        address = self.brokers.get(node_id)
        if address is None:
            raise ToolError(f"broker {node_id} is not in the cluster's metadata")
        return await self._connect(node_id, *address)

    async def metadata(self, topics: tuple[str, ...] | None) -> Any:
        """Metadata for ``topics`` (None: all); learns the brokers' addresses."""
        conn = await self.any_broker()
        version = conn.pick(METADATA, 12, 9, 4, 1)
        schema = request_schema(METADATA, version)
        entries = None if topics is None else tuple(build(nested(schema, "topics"), name=t, topic_id=None) for t in topics)
        resp = await conn.request(METADATA, version, topics=entries, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return resp

    async def leader(self, topic: str, partition: int) -> int:
        resp = await self.metadata((topic,))
        (t,) = resp.topics
        if t.error_code:
            raise KafkaError(t.error_code, f"topic {topic}")
        for p in t.partitions:
            if p.partition_index == partition:
                if p.error_code and p.leader_id < 0:
                    raise KafkaError(p.error_code, f"{topic}-{partition}")
                return p.leader_id
        raise KafkaError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic}-{partition}")

    async def coordinator(self, key: str, key_type: int) -> tuple[int, BrokerConnection]:
        """The node id of ``key``'s coordinator and a connection to it (retrying while it loads)."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            conn = await self.any_broker()
            version = conn.pick(FIND_COORDINATOR, 4, 3, 2, 1)
            resp = await conn.request(FIND_COORDINATOR, version, key=key, key_type=key_type, coordinator_keys=(key,))
            answer = resp.coordinators[0] if version >= 4 else resp
            if not answer.error_code:
                self.brokers[answer.node_id] = (answer.host, answer.port)
                return answer.node_id, await self._connect(answer.node_id, answer.host, answer.port)
            if int(answer.error_code) not in _RETRIABLE or asyncio.get_running_loop().time() > deadline:
                raise KafkaError(answer.error_code, answer.error_message)
            await asyncio.sleep(0.1)

    # --- the requests ---------------------------------------------------------------------------

    async def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """OffsetDelete: each partition's error code (0: deleted)."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        while True:
            _, conn = await self.coordinator(group, GROUP_KEY)
            schema = request_schema(OFFSET_DELETE, 0)
            topic_cls = nested(schema, "topics")
            part_cls = nested(topic_cls, "partitions")
            resp = await conn.request(OFFSET_DELETE, conn.pick(OFFSET_DELETE, 0), group_id=group, topics=tuple(
                build(topic_cls, name=t, partitions=tuple(build(part_cls, partition_index=p) for p in ps))
                for t, ps in by_topic.items()))
            if int(resp.error_code) in _RETRIABLE and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
                continue
            if resp.error_code:
                raise KafkaError(resp.error_code, f"group {group}")
            return {(t.name, p.partition_index): int(p.error_code) for t in resp.topics for p in t.partitions}

    async def group_states(self) -> dict[str, str]:
        """ListGroups (v4+) on every broker: group id -> its state as the coordinator spells it."""
        await self.metadata(())
        out = {}
        for node_id in sorted(self.brokers):
            conn = await self.node(node_id)
            resp = await conn.request(LIST_GROUPS, conn.pick(LIST_GROUPS, 5, 4), states_filter=(), types_filter=())
            if resp.error_code:
                raise KafkaError(resp.error_code, f"broker {node_id}")
            out.update((g.group_id, g.group_state or "Unknown") for g in resp.groups)
        return out

    async def list_transactions(self, states: list[str], producer_ids: list[int]) -> list[tuple[str, int, int, str]]:
        """ListTransactions on every broker: (transactional id, broker, producer id, state)."""
        await self.metadata(())
        out = []
        for node_id in sorted(self.brokers):
            conn = await self.node(node_id)
            version = conn.pick(LIST_TRANSACTIONS, 1, 0)
            resp = await conn.request(LIST_TRANSACTIONS, version, state_filters=tuple(states),
                                      producer_id_filters=tuple(producer_ids), duration_filter=-1)
            if resp.error_code:
                raise KafkaError(resp.error_code, f"broker {node_id}")
            out += [(t.transactional_id, node_id, t.producer_id, t.transaction_state) for t in resp.transaction_states]
        return sorted(out)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        node_id, conn = await self.coordinator(transactional_id, TRANSACTION_KEY)
        resp = await conn.request(DESCRIBE_TRANSACTIONS, conn.pick(DESCRIBE_TRANSACTIONS, 0),
                                  transactional_ids=(transactional_id,))
        (d,) = resp.transaction_states
        if d.error_code:
            raise KafkaError(d.error_code, f"transactional id {transactional_id}")
        return TransactionDescription(transactional_id, node_id, d.transaction_state, _millis(d.transaction_timeout),
                                      _millis(d.transaction_start_time), d.producer_id, d.producer_epoch,
                                      tuple(sorted((t.topic, p) for t in d.topics for p in t.partitions)))

    async def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        conn = await self.node(await self.leader(topic, partition))
        schema = request_schema(DESCRIBE_PRODUCERS, 0)
        resp = await conn.request(DESCRIBE_PRODUCERS, conn.pick(DESCRIBE_PRODUCERS, 0), topics=(
            build(nested(schema, "topics"), name=topic, partition_indexes=(partition,)),))
        (p,) = resp.topics[0].partitions
        if p.error_code:
            raise KafkaError(p.error_code, p.error_message or f"{topic}-{partition}")
        return sorted(ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                    s.coordinator_epoch, s.current_txn_start_offset) for s in p.active_producers)

    async def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> None:
        """WriteTxnMarkers with an ABORT marker, to the partition's leader (Kafka's abortTransaction)."""
        conn = await self.node(await self.leader(topic, partition))
        schema = request_schema(WRITE_TXN_MARKERS, 1)
        marker_cls = nested(schema, "markers")
        marker = build(marker_cls, producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
                       coordinator_epoch=coordinator_epoch,
                       topics=(build(nested(marker_cls, "topics"), name=topic, partition_indexes=(partition,)),))
        resp = await conn.request(WRITE_TXN_MARKERS, conn.pick(WRITE_TXN_MARKERS, 1), markers=(marker,))
        for t in resp.markers[0].topics:
            for p in t.partitions:
                if p.error_code:
                    raise KafkaError(p.error_code, f"{t.name}-{p.partition_index}")


# Kafka's retriable coordinator errors: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
_RETRIABLE = {14, 15, 16}


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"bootstrap server {text.strip()!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _millis(value: Any) -> int:
    """A duration or a time from kio as milliseconds (-1 for "none")."""
    if value is None:
        return -1
    if isinstance(value, dt.timedelta):
        return int(value / dt.timedelta(milliseconds=1))
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    return int(value)

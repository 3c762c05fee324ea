"""The upstream's coordinator-bound group requests, over cohort's own wire client: DescribeGroups
(the cohort cluster's view of its members) and OffsetCommit without a member (the offset mirror).

Not librdkafka's admin client: librdkafka 2.x aborts the whole process
(``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed``) when a group
admin request timed out before its coordinator lookup finished and the lookup ends later
(confluentinc/librdkafka#4605, open). Dropping the client after every failure made that rarer,
not impossible: an instance still aborted during a 40 s upstream outage in a six-worker CI run
(2026-11-29). Here each call opens its connections (with the upstream client's TLS and SASL
settings), finds the group's coordinator, sends its request and closes them again, on an event
loop of its own on the calling thread; a failure is one ``AdminError`` line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from cohort.client.connection import (AuthenticationError, BrokerConnection, KafkaConnectionError, Security,
                                      UnsupportedVersionError)
from cohort.coordinator.consumer_protocol import ConsumerProtocolError, decode_assignment
from cohort.protocol.entities import build, error_name, nested
from cohort.protocol.versions import request_schema

FIND_COORDINATOR, DESCRIBE_GROUPS, OFFSET_COMMIT = 10, 15, 8
_LOADING = {int(ErrorCode.coordinator_load_in_progress), int(ErrorCode.coordinator_not_available),
            int(ErrorCode.not_coordinator)}
T = TypeVar("T")


class AdminError(Exception):
    """A group request the upstream did not answer, or refused (one line)."""


@dataclass(frozen=True)
class GroupMember:
    client_id: str
    assignment: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partitions) as the leader assigned them


class GroupAdmin:
    """Blocking calls: make them from a worker thread, never from a running event loop."""

    def __init__(self, client: Mapping[str, Any], timeout_s: float) -> None:
        self.security = Security.from_config(client)
        self.bootstrap = [_address(a) for a in str(client["bootstrap.servers"]).split(",") if a.strip()]
        self.client_id = str(client.get("client.id") or "cohort-upstream")
        self.timeout = timeout_s

    def describe_members(self, group: str) -> list[GroupMember]:
        """The group's members and their assignments (none while it rebalances or is empty)."""
        return self._run(group, lambda conn: self._describe(conn, group))

    def commit_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Commits ``offsets`` for ``group`` as an admin does (no member, generation -1);
        returns each partition's error code (0: taken)."""
        return self._run(group, lambda conn: self._commit(conn, group, offsets))

    # --- on the call's own loop --------------------------------------------------------------

    def _run(self, group: str, fn: Callable[[BrokerConnection], Awaitable[T]]) -> T:
        async def main() -> T:
            opened: list[BrokerConnection] = []
            try:
                return await asyncio.wait_for(self._with_coordinator(group, fn, opened), self.timeout)
            except asyncio.TimeoutError:
                raise AdminError(f"no answer within {self.timeout:g} s") from None
            except (KafkaConnectionError, AuthenticationError, UnsupportedVersionError, OSError) as exc:
                raise AdminError(str(exc) or type(exc).__name__) from None
            finally:
                for conn in opened:
                    await conn.close()

        return asyncio.run(main())

    async def _open(self, host: str, port: int, opened: list[BrokerConnection]) -> BrokerConnection:
        conn = await BrokerConnection.open(host, port, self.client_id, timeout=self.timeout, security=self.security)
        opened.append(conn)
        return conn

    async def _with_coordinator(self, group: str, fn: Callable[[BrokerConnection], Awaitable[T]],
                                opened: list[BrokerConnection]) -> T:
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                any_broker = await self._open(host, port, opened)
                break
            except (KafkaConnectionError, OSError) as exc:
                last = exc
        else:
            raise AdminError(str(last) if last else "no bootstrap server")
        while True:  # until the coordinator is found, or the call's deadline
            version = any_broker.pick(FIND_COORDINATOR, 4, 3, 2, 1)
            resp = await any_broker.request(FIND_COORDINATOR, version, key=group, key_type=0, coordinator_keys=(group,))
            answer = resp.coordinators[0] if version >= 4 else resp
            code = int(answer.error_code)
            if not code:
                break
            if code not in _LOADING:
                raise AdminError(_error(code, answer.error_message))
            await asyncio.sleep(0.1)
        conn = await self._open(answer.host, answer.port, opened)
        return await fn(conn)

    async def _describe(self, conn: BrokerConnection, group: str) -> list[GroupMember]:
        version = conn.pick(DESCRIBE_GROUPS, 5, 4, 3, 2, 1, 0)
        resp = await conn.request(DESCRIBE_GROUPS, version, groups=(group,), include_authorized_operations=False)
        (found,) = resp.groups
        if found.error_code:
            raise AdminError(_error(int(found.error_code), getattr(found, "error_message", None)))
        members = []
        for m in found.members:
            try:
                parts = decode_assignment(m.member_assignment).partitions if m.member_assignment else ()
            except ConsumerProtocolError:
                parts = ()  # not a consumer-protocol member: it holds no shard
            members.append(GroupMember(m.client_id, tuple((t, tuple(ps)) for t, ps in parts)))
        return members

    async def _commit(self, conn: BrokerConnection, group: str,
                      offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        version = conn.pick(OFFSET_COMMIT, 8, 7, 6, 5, 4, 3, 2)
        schema = request_schema(OFFSET_COMMIT, version)
        topic_cls = nested(schema, "topics")
        part_cls = nested(topic_cls, "partitions")
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append((partition, offset))
        topics = tuple(build(topic_cls, name=t, partitions=tuple(
            build(part_cls, partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
            for p, o in parts)) for t, parts in by_topic.items())
        resp = await conn.request(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=-1,
                                  member_id="", group_instance_id=None, topics=topics)
        return {(t.name, p.partition_index): int(p.error_code) for t in resp.topics for p in t.partitions}


def _error(code: int, message: str | None = None) -> str:
    name = error_name(code)
    return f"{name}: {message}" if message else name


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    return host.strip("[]"), int(port)

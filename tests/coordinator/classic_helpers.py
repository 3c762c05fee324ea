"""Builders for classic-protocol tests: a shard with predictable member ids and request shortcuts."""

from __future__ import annotations

import itertools

from cohort.coordinator import CoordinatorConfig, GroupCoordinatorShard
from cohort.coordinator.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from cohort.coordinator.requests import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    Parked,
    SyncGroupRequest,
)

from cg_helpers import RangeTestAssignor, image

SUB_FOO = encode_subscription(Subscription(("foo",)))
SESSION = 10_000
REBALANCE = 60_000


def classic_shard(now: int = 0, **config) -> GroupCoordinatorShard:
    """Member ids come out as `{client id}-1`, `{client id}-2`, ... in join order."""
    config.setdefault("consumer_assignors", ("simple", "uniform", "range"))
    counter = itertools.count(1)
    shard = GroupCoordinatorShard(CoordinatorConfig(**config), assignors={"simple": RangeTestAssignor()},
                                  image=image(foo=6, bar=3), member_id_factory=lambda: str(next(counter)))
    shard.on_loaded(now)
    return shard


def join_req(group: str = "g", member: str = "", protocols=None, *, session: int = SESSION, rebalance: int = REBALANCE,
             version: int = 5, instance: str | None = None, client: str = "c", protocol_type: str = "consumer"):
    protocols = protocols if protocols is not None else (("range", SUB_FOO),)
    return JoinGroupRequest(group, member, protocol_type, protocols, session, rebalance, instance,
                            api_version=version, client_id=client, client_host="/127.0.0.1")


def sync_req(group: str, member: str, generation: int, assignments=(), instance: str | None = None):
    return SyncGroupRequest(group, generation, member, instance, assignments=assignments)


def hb_req(group: str, member: str, generation: int, instance: str | None = None):
    return HeartbeatRequest(group, generation, member, instance)


def leave_req(group: str, *members: str, version: int = 3):
    if version >= 3:
        return LeaveGroupRequest(group, members=tuple(LeaveGroupMember(m) for m in members), api_version=version)
    return LeaveGroupRequest(group, member_id=members[0], api_version=version)


def assignment(*partitions: int, topic: str = "foo") -> bytes:
    return encode_assignment(Assignment(((topic, tuple(partitions)),)))


class Driver:
    """Sends requests to a classic shard, commits every result at once and keeps every response
    by request id, the way the server would deliver them."""

    def __init__(self, shard: GroupCoordinatorShard):
        self.shard = shard
        self.now = 0
        self.log: list = []
        self.delivered: dict[int, object] = {}

    def send(self, request, now: int | None = None):
        if now is not None:
            self.now = now
        result = self.shard.handle(request, self.now)
        self.shard.commit(result.end_offset)
        self.log.extend(result.records)
        for rid, response in result.completions:
            self.delivered[rid] = response
        return result

    def tick(self, now: int):
        self.now = now
        result = self.shard.expire(now)
        self.shard.commit(result.end_offset)
        self.log.extend(result.records)
        for rid, response in result.completions:
            self.delivered[rid] = response
        return result

    def answer(self, result):
        """The response of a request: direct, or its completion if it was parked (None if still parked)."""
        response = result.response
        if isinstance(response, Parked):
            return self.delivered.get(response.request_id)
        return response

    def join_new(self, group: str = "g", **kw) -> str:
        """A v5 dynamic member's first round trip: MEMBER_ID_REQUIRED, then the join is parked."""
        first = self.send(join_req(group, **kw)).response
        assert first.error_code == 79, first
        return first.member_id

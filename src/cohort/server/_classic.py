"""The classic group protocol over the wire: JoinGroup (11), SyncGroup (14), Heartbeat (12),
LeaveGroup (13) and DescribeGroups (15), served from the same shard as the KIP-848 APIs.

Each handler maps the kio entity of any version to the shard's version-neutral request and runs
it as a write of :class:`cohort.server.groups.GroupCoordinator`, which also handles the parked
joins and syncs (see its module docstring). The versions are the codec table's full ranges:
librdkafka sends JoinGroup 5 / SyncGroup 3 / Heartbeat 3 / LeaveGroup 1, kafka-python up to
7 / 5 / 4 / 5, aiokafka and kafkajs older ones (docs/broker.md, "Classic protocol").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from cohort.coordinator import requests as rq
from cohort.coordinator.errors import Errors
from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, nested
from cohort.protocol.operations import GROUP_OPS
from cohort.security import acls
from cohort.server._group_codec import ONE_MS, UNKNOWN_OPS, ZERO, client_host, err, group_ops

if TYPE_CHECKING:
    from cohort.coordinator_common.runtime import CoordinatorRuntime
    from cohort.server.context import RequestContext
    from cohort.server.server import Server


class GroupRouter(Protocol):
    """What these handlers use of the group coordinator (`cohort.server.groups.GroupCoordinator`,
    which installs them: the dependency goes one way)."""

    def serving(self, group_id: str) -> bool: ...

    def unserved(self, group_id: str) -> tuple[int, str]: ...

    def write(self, ctx: Any, req: Any, answer: Callable[[Any], Any], fail: Callable[[int, str], Any]) -> Any: ...

    def read(self, ctx: Any, group_ids: Any, fn: Callable[[], Any]) -> Any: ...

    def by_runtime(self, group_ids: Any) -> dict["CoordinatorRuntime", list[str]]: ...



def install(server: "Server", coordinator: GroupRouter) -> None:
    api = ClassicApi(coordinator)
    reg = server.apis.register
    reg(11, api.join_group, min_version=0, max_version=9)
    reg(14, api.sync_group, min_version=0, max_version=5)
    reg(12, api.heartbeat, min_version=0, max_version=4)
    reg(13, api.leave_group, min_version=0, max_version=5)
    reg(15, api.describe_groups, min_version=0, max_version=5)


# --- wire <-> coordinator ------------------------------------------------------------------------


def join_request(body: Any, version: int, client_id: str, client_host: str) -> rq.JoinGroupRequest:
    rebalance = getattr(body, "rebalance_timeout", None)
    return rq.JoinGroupRequest(
        group_id=body.group_id, member_id=body.member_id, protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
        session_timeout_ms=body.session_timeout // ONE_MS,
        rebalance_timeout_ms=-1 if rebalance is None else rebalance // ONE_MS,
        group_instance_id=getattr(body, "group_instance_id", None), reason=getattr(body, "reason", None),
        api_version=version, client_id=client_id, client_host=client_host)


def join_response(resp: type, version: int, r: rq.JoinGroupResponse) -> Any:
    member_cls = nested(resp, "members")
    members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                          metadata=m.metadata) for m in r.members)
    name = r.protocol_name if version >= 7 else (r.protocol_name or "")  # nullable from v7
    return build(resp, throttle_time=ZERO, error_code=err(r.error_code), generation_id=r.generation_id,
                 protocol_type=r.protocol_type, protocol_name=name, leader=r.leader,
                 skip_assignment=r.skip_assignment, member_id=r.member_id, members=members)


def sync_request(body: Any, version: int) -> rq.SyncGroupRequest:
    return rq.SyncGroupRequest(
        group_id=body.group_id, generation_id=body.generation_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None), protocol_name=getattr(body, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in body.assignments), api_version=version)


def sync_response(resp: type, r: rq.SyncGroupResponse) -> Any:
    return build(resp, throttle_time=ZERO, error_code=err(r.error_code), protocol_type=r.protocol_type,
                 protocol_name=r.protocol_name, assignment=r.assignment or b"")


def leave_request(body: Any, version: int) -> rq.LeaveGroupRequest:
    if version < 3:
        return rq.LeaveGroupRequest(body.group_id, member_id=body.member_id, api_version=version)
    members = tuple(rq.LeaveGroupMember(m.member_id, m.group_instance_id, getattr(m, "reason", None))
                    for m in body.members)
    return rq.LeaveGroupRequest(body.group_id, members=members, api_version=version)


def leave_response(resp: type, version: int, r: rq.LeaveGroupResponse) -> Any:
    members = ()
    if version >= 3:
        cls = nested(resp, "members")
        members = tuple(cls(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=err(m.error_code))
                        for m in r.members)
    return build(resp, throttle_time=ZERO, error_code=err(r.error_code), members=members)


def describe_response(resp: type, groups: list[rq.DescribedClassicGroup], with_ops: bool) -> Any:
    group_cls = nested(resp, "groups")
    member_cls = nested(group_cls, "members")
    out = []
    for g in groups:
        members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                              client_id=m.client_id, client_host=m.client_host, member_metadata=m.member_metadata,
                              member_assignment=m.member_assignment) for m in g.members)
        ops = group_ops(with_ops, g.group_id) if with_ops and g.error_code == 0 else UNKNOWN_OPS
        out.append(build(group_cls, error_code=err(g.error_code), group_id=g.group_id, group_state=g.group_state,
                         protocol_type=g.protocol_type, protocol_data=g.protocol_data, members=members,
                         authorized_operations=ops))
    return build(resp, throttle_time=ZERO, groups=tuple(out))


# --- handlers ------------------------------------------------------------------------------------


class ClassicApi:
    def __init__(self, coordinator: GroupRouter) -> None:
        self.c = coordinator

    def join_group(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, version, resp = req.body, req.version, req.codec.response_type

        def fail(code: int, _: str) -> Any:
            return join_response(resp, version, rq.JoinGroupResponse(error_code=code, member_id=body.member_id))

        if not self.c.serving(body.group_id):
            return fail(*self.c.unserved(body.group_id))
        if not ctx.authorize(acls.READ, acls.GROUP, body.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, "")
        request = join_request(body, version, req.client_id or "", client_host(ctx.peer))
        return self.c.write(ctx, request, lambda r: join_response(resp, version, r), fail)

    def sync_group(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        version, resp = req.version, req.codec.response_type

        def fail(code: int, _: str) -> Any:
            return sync_response(resp, rq.SyncGroupResponse(error_code=code))

        if not self.c.serving(req.body.group_id):
            return fail(*self.c.unserved(req.body.group_id))
        if not ctx.authorize(acls.READ, acls.GROUP, req.body.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, "")
        return self.c.write(ctx, sync_request(req.body, version), lambda r: sync_response(resp, r), fail)

    def heartbeat(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type

        def answer(r: Any) -> Any:
            return build(resp, throttle_time=ZERO, error_code=err(r.error_code))

        if not self.c.serving(body.group_id):
            return answer(rq.HeartbeatResponse(self.c.unserved(body.group_id)[0]))
        if not ctx.authorize(acls.READ, acls.GROUP, body.group_id):
            return answer(rq.HeartbeatResponse(Errors.GROUP_AUTHORIZATION_FAILED))
        request = rq.HeartbeatRequest(body.group_id, body.generation_id, body.member_id,
                                      getattr(body, "group_instance_id", None), req.version)
        return self.c.write(ctx, request, answer, lambda code, _: answer(rq.HeartbeatResponse(code)))

    def leave_group(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        version, resp = req.version, req.codec.response_type
        request = leave_request(req.body, version)

        def fail(code: int, _: str) -> Any:
            return leave_response(resp, version, rq.LeaveGroupResponse(code))

        if not self.c.serving(req.body.group_id):
            return fail(*self.c.unserved(req.body.group_id))
        if not ctx.authorize(acls.READ, acls.GROUP, req.body.group_id):
            return fail(Errors.GROUP_AUTHORIZATION_FAILED, "")
        return self.c.write(ctx, request, lambda r: leave_response(resp, version, r), fail)

    def describe_groups(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        """Classic groups live (their rebalance is in-memory state), consumer groups as Kafka 4.0
        describes them, an unknown id as state "Dead" (v0-5), an offsets-only group "Empty"."""
        body, version, resp = req.body, req.version, req.codec.response_type
        ops = getattr(body, "include_authorized_operations", False)
        if ops and ctx.server.authorizer is not None:
            ops = lambda group: ctx.authorized_operations(acls.GROUP, group, GROUP_OPS)  # noqa: E731
        if body.groups and not any(self.c.serving(g) for g in body.groups):
            return describe_response(resp, [rq.DescribedClassicGroup(g, self.c.unserved(g)[0])
                                            for g in body.groups], False)
        valid = [g for g in body.groups if g and g.strip() and ctx.authorize(acls.DESCRIBE, acls.GROUP, g)]

        def describe() -> Any:
            found = {}
            for runtime, ids in self.c.by_runtime(valid).items():
                if not runtime.loaded:
                    found.update((g, rq.DescribedClassicGroup(g, runtime.unserved[0])) for g in ids)
                    continue
                found.update((g.group_id, g) for g in runtime.shard.describe_classic_groups(
                    rq.DescribeGroupsRequest(tuple(ids), ops, version)).groups)
            return describe_response(resp, [found[g] if g in found else rq.DescribedClassicGroup(
                g, Errors.INVALID_GROUP_ID if not (g and g.strip()) else Errors.GROUP_AUTHORIZATION_FAILED)
                for g in body.groups], ops)

        return self.c.read(ctx, valid, describe)

"""The security APIs served after authentication: SaslHandshake / SaslAuthenticate on an
authenticated (or PLAINTEXT) connection answer ILLEGAL_SASL_STATE as Kafka's KafkaApis does,
and DescribeUserScramCredentials / AlterUserScramCredentials manage SCRAM users over the wire,
so Kafka's tools and AdminClients work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, nested
from cohort.security import acls
from cohort.security.credentials import MECHANISM_IDS
from cohort.server.handlers import ZERO

if TYPE_CHECKING:
    from cohort.server.api import Host
    from cohort.server.context import RequestContext

E = ErrorCode
CLUSTER_DENIED = "Cluster authorization failed."  # Kafka's Errors.CLUSTER_AUTHORIZATION_FAILED message


def install(server: "Host") -> None:
    reg = server.apis.register
    reg(17, sasl_handshake)
    reg(36, sasl_authenticate)
    reg(50, describe_user_scram_credentials)
    reg(51, alter_user_scram_credentials)
    reg(29, describe_acls)
    reg(30, create_acls)
    reg(31, delete_acls)


def sasl_handshake(ctx: "RequestContext", req: DecodedRequest) -> Any:
    return build(req.codec.response_type, error_code=E.illegal_sasl_state, mechanisms=ctx.sasl_mechanisms())


def sasl_authenticate(ctx: "RequestContext", req: DecodedRequest) -> Any:
    return build(req.codec.response_type, error_code=E.illegal_sasl_state,
                 error_message="SaslAuthenticate request received after successful authentication",
                 auth_bytes=b"", session_lifetime=ZERO)


def describe_user_scram_credentials(ctx: "RequestContext", req: DecodedRequest) -> Any:
    resp = req.codec.response_type
    result_cls = nested(resp, "results")
    info_cls = nested(result_cls, "credential_infos")
    if not ctx.authorize(acls.DESCRIBE, acls.CLUSTER, acls.CLUSTER_NAME):
        return build(resp, throttle_time=ZERO, error_code=E.cluster_authorization_failed, error_message=CLUSTER_DENIED,
                     results=())
    users = ctx.server.credentials.users()
    wanted = [u.name for u in req.body.users] if req.body.users else sorted(users)
    results = []
    for name in dict.fromkeys(wanted):
        if wanted.count(name) > 1:
            results.append(build(result_cls, user=name, error_code=E.duplicate_resource, credential_infos=(),
                                 error_message="Cannot describe SCRAM credentials for the same user twice in a single request"))
        elif name not in users:
            results.append(build(result_cls, user=name, error_code=E.resource_not_found, credential_infos=(),
                                 error_message="Attempt to describe a user credential that does not exist"))
        else:
            infos = tuple(build(info_cls, mechanism=MECHANISM_IDS[m], iterations=i) for m, i in users[name])
            results.append(build(result_cls, user=name, error_code=E.none, error_message=None, credential_infos=infos))
    return build(resp, throttle_time=ZERO, error_code=E.none, error_message=None, results=tuple(results))


async def alter_user_scram_credentials(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    resp = req.codec.response_type
    result_cls = nested(resp, "results")
    deletions = [(d.name, d.mechanism) for d in body.deletions]
    upsertions = [(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password)) for u in body.upsertions]
    if not ctx.authorize(acls.ALTER, acls.CLUSTER, acls.CLUSTER_NAME):
        names = dict.fromkeys(n for n, *_ in deletions + upsertions)
        return build(resp, throttle_time=ZERO, results=tuple(
            build(result_cls, user=n, error_code=E.cluster_authorization_failed, error_message=CLUSTER_DENIED) for n in names))
    outcome = await ctx.server.offload(ctx.server.credentials.alter, deletions, upsertions)
    results = tuple(build(result_cls, user=name, error_code=E(code), error_message=message)
                    for name, (code, message) in outcome.items())
    return build(resp, throttle_time=ZERO, results=results)


# --- ACLs -------------------------------------------------------------------------------------


def _filter(body: Any) -> acls.AclFilter:
    return acls.AclFilter(body.resource_type_filter, body.resource_name_filter, body.pattern_type_filter,
                          body.principal_filter, body.host_filter, body.operation, body.permission_type)


def describe_acls(ctx: "RequestContext", req: DecodedRequest) -> Any:
    resp = req.codec.response_type
    if ctx.server.authorizer is None:
        return build(resp, throttle_time=ZERO, error_code=E.security_disabled, error_message="No Authorizer is configured.",
                     resources=())
    if not ctx.authorize(acls.DESCRIBE, acls.CLUSTER, acls.CLUSTER_NAME):
        return build(resp, throttle_time=ZERO, error_code=E.cluster_authorization_failed,
                     error_message=CLUSTER_DENIED, resources=())
    res_cls = nested(resp, "resources")
    acl_cls = nested(res_cls, "acls")
    grouped: dict[tuple, list] = {}
    for b in ctx.server.authorizer.describe(_filter(req.body)):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            build(acl_cls, principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission))
    resources = tuple(build(res_cls, resource_type=t, resource_name=n, pattern_type=p, acls=tuple(a))
                      for (t, n, p), a in grouped.items())
    return build(resp, throttle_time=ZERO, error_code=E.none, error_message=None, resources=resources)


async def create_acls(ctx: "RequestContext", req: DecodedRequest) -> Any:
    resp = req.codec.response_type
    result_cls = nested(resp, "results")
    creations = req.body.creations
    authorizer = ctx.server.authorizer
    if authorizer is None or not ctx.authorize(acls.ALTER, acls.CLUSTER, acls.CLUSTER_NAME):
        code = E.security_disabled if authorizer is None else E.cluster_authorization_failed
        message = "No Authorizer is configured." if authorizer is None else CLUSTER_DENIED
        return build(resp, throttle_time=ZERO, results=tuple(build(result_cls, error_code=code, error_message=message)
                                                              for _ in creations))
    bindings = [acls.AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                                c.operation, c.permission_type) for c in creations]
    errors = [acls.binding_error(b) for b in bindings]
    valid = [b for b, e in zip(bindings, errors) if e is None]
    failure = None
    if valid:
        try:
            await ctx.server.offload(authorizer.create, valid)
        except OSError as exc:
            failure = f"cannot store the ACLs: {exc}"
    results = []
    for e in errors:
        if e is not None:
            results.append(build(result_cls, error_code=E.invalid_request, error_message=e))
        elif failure is not None:
            results.append(build(result_cls, error_code=E.kafka_storage_error, error_message=failure))
        else:
            results.append(build(result_cls, error_code=E.none, error_message=None))
    return build(resp, throttle_time=ZERO, results=tuple(results))


async def delete_acls(ctx: "RequestContext", req: DecodedRequest) -> Any:
    resp = req.codec.response_type
    result_cls = nested(resp, "filter_results")
    match_cls = nested(result_cls, "matching_acls")
    filters = req.body.filters
    authorizer = ctx.server.authorizer
    if authorizer is None or not ctx.authorize(acls.ALTER, acls.CLUSTER, acls.CLUSTER_NAME):
        code = E.security_disabled if authorizer is None else E.cluster_authorization_failed
        message = "No Authorizer is configured." if authorizer is None else CLUSTER_DENIED
        return build(resp, throttle_time=ZERO, filter_results=tuple(
            build(result_cls, error_code=code, error_message=message, matching_acls=()) for _ in filters))
    try:
        matched = await ctx.server.offload(authorizer.delete, [_filter(f) for f in filters])
    except OSError as exc:
        return build(resp, throttle_time=ZERO, filter_results=tuple(
            build(result_cls, error_code=E.kafka_storage_error, error_message=str(exc), matching_acls=()) for _ in filters))
    results = tuple(
        build(result_cls, error_code=E.none, error_message=None, matching_acls=tuple(
            build(match_cls, error_code=E.none, error_message=None, resource_type=b.resource_type,
                  resource_name=b.resource_name, pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                  operation=b.operation, permission_type=b.permission) for b in m))
        for m in matched)
    return build(resp, throttle_time=ZERO, filter_results=results)

"""The security APIs served after authentication: SaslHandshake / SaslAuthenticate on an
authenticated (or PLAINTEXT) connection answer ILLEGAL_SASL_STATE as Kafka's KafkaApis does,
and DescribeUserScramCredentials / AlterUserScramCredentials manage SCRAM users over the wire,
so Kafka's tools and AdminClients work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, nested
from cohort.security.credentials import MECHANISM_IDS
from cohort.server.handlers import ZERO

if TYPE_CHECKING:
    from cohort.server.server import RequestContext, Server

E = ErrorCode


def install(server: "Server") -> None:
    reg = server.apis.register
    reg(17, sasl_handshake)
    reg(36, sasl_authenticate)
    reg(50, describe_user_scram_credentials)
    reg(51, alter_user_scram_credentials)


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
    outcome = await ctx.server.offload(ctx.server.credentials.alter, deletions, upsertions)
    results = tuple(build(result_cls, user=name, error_code=E(code), error_message=message)
                    for name, (code, message) in outcome.items())
    return build(resp, throttle_time=ZERO, results=results)

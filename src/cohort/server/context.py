"""What a request handler may use besides the request itself (`RequestContext`), kept apart from
the server so that the API modules the server installs never import it: the server uses them,
not the reverse."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cohort.security.sasl import Authenticator
    from cohort.server.listeners import Listener

ANONYMOUS = "User:ANONYMOUS"


class RequestContext:
    """What a handler may use besides the request itself: the connection's listener and its
    authenticated principal."""

    __slots__ = ("server", "broker", "config", "peer", "warned_invalid", "listener", "principal", "sasl",
                 "mechanism", "session_expiry", "auth_started")

    def __init__(self, server: Any, peer: Any, listener: Listener | None = None, principal: str = ANONYMOUS,
                 sasl: Authenticator | None = None) -> None:
        """``server``: the `cohort.server.server.Server` that accepted the connection."""
        self.server = server
        self.broker = server.broker
        self.config = server.config
        self.peer = peer
        self.warned_invalid = False  # one WARNING per connection for INVALID_REQUEST answers
        self.listener = listener if listener is not None else server.listeners[0]
        self.principal = principal  # "User:<name>"
        self.sasl = sasl  # the SASL exchange while it runs (None once complete, or without SASL)
        self.mechanism: str | None = None  # the SASL mechanism of the session
        self.session_expiry: float | None = None  # loop time when the SASL session ends (KIP-368)
        self.auth_started = 0.0  # loop time the last (re-)authentication began

    def authorize(self, operation: int, resource_type: int, name: str) -> bool:
        """Whether this connection's principal may do ``operation`` on the resource (always,
        without an authorizer)."""
        authorizer = self.server.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def authorized_operations(self, resource_type: int, name: str, supported: int) -> int:
        """Kafka's authorized-operations bitfield: the supported operations this principal may do."""
        if self.server.authorizer is None:
            return supported
        return sum(1 << op for op in range(3, 15) if supported & (1 << op) and self.authorize(op, resource_type, name))

    @property
    def host(self) -> str:
        return self.peer[0] if isinstance(self.peer, tuple) else str(self.peer)

    def endpoint(self) -> tuple[str, int]:
        """The advertised (host, port) of the listener this request arrived on: what Metadata,
        FindCoordinator and DescribeCluster tell the client, as in Kafka."""
        return self.server.endpoint(self.listener)

    def sasl_mechanisms(self) -> tuple[str, ...]:
        return self.server.sasl_mechanisms(self.listener) if self.listener.sasl else ()

"""The one table that maps api_key -> handler: the seam where the group coordinator plugs in.

A handler is ``handler(ctx, request) -> response``, where ``request`` is a
:class:`cohort.protocol.DecodedRequest` (``request.body`` is the kio entity, ``request.version``
its version, ``request.codec.response_type`` the kio class to answer with) and the result is
either the kio response entity, :data:`NO_RESPONSE`, or an awaitable of one of those (for
long-polls, joins, or responses parked until their records are durable). Responses on one
connection leave in request order whatever order handlers finish in.

Only registered APIs are advertised in ApiVersions; a request for an unregistered API closes
the connection, as Kafka does for APIs it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Union

from cohort.protocol.versions import SUPPORTED

if TYPE_CHECKING:
    from cohort.protocol import DecodedRequest
    from cohort.server.context import RequestContext

NO_RESPONSE: Any = object()
"""Returned by a handler when the client expects no answer (Produce with acks=0)."""
CLOSE_WITHOUT_ANSWER: Any = object()
"""Returned by a handler that cannot answer: the connection is closed instead (the client retries)."""


class Unprefixed:
    """A response frame without its size prefix (as read from an upstream broker); the writer
    sends the prefix before it, so a large answer is not copied to prepend four bytes."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body


class Encoded(bytes):
    """A response a handler encoded itself (size prefix included), e.g. on a worker thread;
    the writer sends it as it is."""


class CloseConnection(Exception):
    """Raised by a handler to close the client's connection after earlier responses are sent
    (Kafka's answer to a failed acks=0 produce, which has no response to carry the error)."""

Handler = Callable[["RequestContext", "DecodedRequest"], Union[Any, Awaitable[Any]]]


@dataclass(frozen=True, slots=True)
class ApiEntry:
    api_key: int
    handler: Handler
    min_version: int
    max_version: int


class ApiTable:
    def __init__(self) -> None:
        self._entries: dict[int, ApiEntry] = {}

    def register(self, api_key: int, handler: Handler, *, min_version: int | None = None, max_version: int | None = None) -> None:
        """Serve ``api_key`` with ``handler`` over a version range inside what the codec
        supports (default: all of it). Re-registering replaces the previous handler."""
        if api_key not in SUPPORTED:
            raise ValueError(f"api_key {api_key} has no codec in cohort.protocol.versions.SUPPORTED")
        _, clo, chi = SUPPORTED[api_key]
        lo = clo if min_version is None else min_version
        hi = chi if max_version is None else max_version
        if not clo <= lo <= hi <= chi:
            raise ValueError(f"api_key {api_key}: versions {lo}-{hi} are outside the codec's {clo}-{chi}")
        self._entries[api_key] = ApiEntry(api_key, handler, lo, hi)

    def unregister(self, api_key: int) -> None:
        self._entries.pop(api_key, None)

    def lookup(self, api_key: int, version: int) -> Handler | None:
        entry = self._entries.get(api_key)
        if entry is None or not entry.min_version <= version <= entry.max_version:
            return None
        return entry.handler

    def advertised(self) -> dict[int, tuple[int, int]]:
        """api_key -> (min, max) for ApiVersions."""
        return {k: (e.min_version, e.max_version) for k, e in sorted(self._entries.items())}

    def __contains__(self, api_key: int) -> bool:
        return api_key in self._entries


class Host(Protocol):
    """What an API module's ``install(server)`` and its config providers use of the server
    (`cohort.server.server.Server`, which installs them: the dependency goes one way)."""

    apis: ApiTable
    broker: Any
    config: Any
    config_resources: dict[int, Any]

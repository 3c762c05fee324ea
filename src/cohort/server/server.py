"""The asyncio TCP server: framing, per-connection ordering, dispatch through the API table.

Each connection has a reader loop: it decodes a request, calls its handler and adds the result
(a response, or a future for handlers that wait) to the connection's `Responses`, which writes
answers strictly in request order as they become ready. So a Fetch long-poll or a JoinGroup
holds back later responses on its own connection only, as Kafka clients expect, while other
connections proceed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import functools
import importlib
import logging
import socket
import struct
import time
import types
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kio.schema.errors import ErrorCode

from cohort.broker import Broker
from cohort.config import Config, ConfigError
from cohort.protocol.codec import (
    API_VERSIONS_KEY,
    InvalidRequest,
    MalformedRequest,
    UnsupportedApi,
    api_versions_fallback,
    decode_request,
    encode_response,
    frame_size,
)
from cohort.protocol.entities import build, error_response, has_top_level_error
from cohort.protocol.versions import ApiCodec, VersionTable, default_table
from cohort.security import acls, tls
from cohort.security.acls import Authorizer
from cohort.security.credentials import CredentialStore
from cohort.security.sasl import (
    SUPPORTED_MECHANISMS,
    AuthenticationFailed,
    Authenticator,
    IllegalState,
    jaas_options,
    mechanism_factory,
    plain_users_from_jaas,
)
from cohort.security.sasl import State as SaslState
from cohort.server import configs, handlers, http, listeners, overview, security_apis
from cohort.server.api import ApiTable, CloseConnection, Encoded
from cohort.server.context import ANONYMOUS, RequestContext
from cohort.server.limits import ConnectionQuotas, ConnectionState, RequestMemory, parse_overrides
from cohort.server.listeners import Listener
from cohort.server.responses import Responses
from cohort.broker.waiters import AppendWaiters
from cohort.stats import RequestStats

if TYPE_CHECKING:
    from cohort.server.http_listener import HttpListener

log = logging.getLogger("cohort.server")

SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 17, 36
_NO_LIFETIME = datetime.timedelta(0)  # SaslAuthenticate session lifetime: no re-authentication required

# Modules that register more APIs: each must define ``install(server)``.
SHUTDOWN_GRACE_S = 0.05  # time for answers written by the shutdown hooks to leave
# upstream first (it may replace where topics are known); transactions use the group coordinator
PLUGINS = ("cohort.server.upstream", "cohort.server.groups", "cohort.server.transactions", "cohort.share.manager")


class Server:
    def __init__(self, config: Config, *, table: VersionTable | None = None, plugins: tuple[str, ...] = PLUGINS) -> None:
        self.config = config
        self.table = table or default_table()
        self.broker = Broker(config)
        try:
            self._setup(plugins)
        except BaseException:
            self.broker.close()
            raise

    def _setup(self, plugins: tuple[str, ...]) -> None:
        config = self.config
        self.apis = ApiTable()
        self.waiters = AppendWaiters()
        self.broker.append_listeners.append(self.waiters.notify)
        self.startup_hooks: list[Callable[[], Awaitable[None]]] = []
        self.failure: str | None = None  # why the server refuses to go on (`fail`)
        self._stopping = False
        self.failed = asyncio.Event()
        self.shutdown_hooks: list[Callable[[], Awaitable[None]]] = []
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[asyncio.Task] = set()
        self._background: set[asyncio.Task] = set()
        self._orphans: set[asyncio.Future] = set()  # requests still running after their connection closed
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cohort-offload")
        self._quotas = ConnectionQuotas(config["max.connections"], config["max.connections.per.ip"],
                                        parse_overrides(config["max.connections.per.ip.overrides"]))
        self._memory = RequestMemory(config["queued.max.request.bytes"])
        self.broker.config_listeners.append(self._limits_changed)
        self._states: set[ConnectionState] = set()
        self.stats = RequestStats()  # read by /metrics (cohort.tooling.metrics)
        self._refused = 0
        self._refusal_logged = float("-inf")
        self.listeners: list[Listener] = listeners.parse(config)
        self.host: str = self.listeners[0].host
        self.port: int = self.listeners[0].port
        self.ports: dict[str, int] = {}  # listener name -> port bound
        self.http_address = http.parse_address(config["http.listener"])
        self.http: HttpListener | None = None  # started with the broker when http_address is set
        self.credentials = CredentialStore(self.broker.data_dir)
        self.authorizer: Authorizer | None = (
            Authorizer(self.broker.data_dir, config["super.users"], config["allow.everyone.if.no.acl.found"])
            if acls.enabled(config["authorizer.class.name"]) else None)
        self._tls = {l.name: tls.server_context(lambda key, l=l: self._tls_setting(l, key), l.name)
                     for l in self.listeners if l.tls}
        self._principal_rules = {l.name: tls.PrincipalMapper(config.for_listener(l.name, "ssl.principal.mapping.rules"))
                                 for l in self.listeners if l.tls}
        self._mechanisms = {l.name: self._enabled_mechanisms(l) for l in self.listeners if l.sasl}
        self._plain_users = {l.name: plain_users_from_jaas(config.for_listener(l.name, "sasl.jaas.config", "PLAIN"))
                             for l in self.listeners if l.sasl}
        self._oauth_options = {l.name: jaas_options(config.for_listener(l.name, "sasl.jaas.config", "OAUTHBEARER"))
                               for l in self.listeners if l.sasl}
        # resource type -> provider for DescribeConfigs / IncrementalAlterConfigs
        self.config_resources: dict[int, configs.ConfigProvider] = {}
        # Where the group coordinator learns topics (the upstream plugin may replace it), and a
        # router that may take a request frame before it is decoded (forwarding to an upstream).
        self.topic_source: Any = self.broker
        self.frame_router: Callable[[bytes, RequestContext], tuple | None] | None = None
        self.connection_closed: list[Callable[[RequestContext], None]] = []
        # group id -> (error, node id, host, port) of its coordinator when that is not always this
        # node (the upstream plugin's cohort cluster); FindCoordinator asks it
        self.group_coordinator_locator: Callable[[str], tuple[int, int, str, int]] | None = None
        handlers.install(self)
        configs.install(self)
        security_apis.install(self)
        for name in plugins:
            importlib.import_module(name).install(self)

    def _limits_changed(self) -> None:
        """Dynamic connection limits apply to connections accepted from now on (as in Kafka,
        open connections are not closed)."""
        self._quotas.max_total = self.config["max.connections"]
        self._quotas.max_per_ip = self.config["max.connections.per.ip"]
        self._quotas.overrides = parse_overrides(self.config["max.connections.per.ip.overrides"])

    # --- listeners ---------------------------------------------------------------------------

    def endpoint(self, listener: Listener) -> tuple[str, int]:
        """A listener's advertised address: ``advertised.listeners`` (or ``advertised.host`` /
        ``advertised.port`` for the default listener), else where it listens (this machine's
        name for a wildcard host)."""
        host = listener.advertised_host or listener.host
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        return host, listener.advertised_port or self.ports.get(listener.name, listener.port)

    @property
    def advertised_host(self) -> str:
        return self.endpoint(self.listeners[0])[0]

    @property
    def advertised_port(self) -> int:
        return self.endpoint(self.listeners[0])[1]

    def _tls_setting(self, listener: Listener, key: str) -> Any:
        if key == "ssl.client.auth" and listener.protocol == "SASL_SSL" and not self.config.listener_override(listener.name, key):
            return "none"  # KIP-684: on SASL_SSL only a listener-prefixed ssl.client.auth applies
        return self.config.for_listener(listener.name, key)

    def _enabled_mechanisms(self, listener: Listener) -> tuple[str, ...]:
        names = tuple(m.strip().upper() for m in self.config.for_listener(listener.name, "sasl.enabled.mechanisms").split(",") if m.strip())
        unknown = [m for m in names if m not in SUPPORTED_MECHANISMS]
        if unknown or not names:
            raise ConfigError(f"listener {listener.name}: sasl.enabled.mechanisms {list(names)}: cohort supports "
                              f"{', '.join(SUPPORTED_MECHANISMS)}")
        return names

    def sasl_mechanisms(self, listener: Listener) -> tuple[str, ...]:
        return self._mechanisms.get(listener.name, ())

    # --- lifecycle ---------------------------------------------------------------------------

    async def open_listener(self, listener: Listener) -> int:
        """Listen on ``listener`` (with its TLS context, if it has one); returns its port. Also
        used while running, for the plain listeners the upstream plugin adds."""
        if self._stopping:
            raise OSError(f"listener {listener.name}: the server is stopping")
        srv = await asyncio.start_server(functools.partial(self._on_connection, listener=listener),
                                         listener.host or None, listener.port, limit=_SMALL_FRAME, reuse_address=True,
                                         ssl=self._tls.get(listener.name))
        self._servers.append(srv)
        self.ports[listener.name] = port = srv.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        for listener in self.listeners:
            await self.open_listener(listener)
        self.port = self.ports[self.listeners[0].name]
        if self.http_address is not None:
            self.http = http.listener(self)
            try:
                await self.http.start(*self.http_address)
            except OSError as exc:
                host, port = self.http_address
                raise OSError(f"http.listener {host}:{port}: {exc.strerror or exc} (set http.listener to another "
                              "address, or empty to turn it off)") from None
            log.info("cohort broker %d: metrics and dashboard on http://%s:%d/", self.broker.node_id,
                     self.http_address[0] or "*", self.http.port)
        for hook in self.startup_hooks:
            self.spawn(hook())
        self.spawn(self.broker.maintenance_loop())
        self.spawn(self._sweep_connections())
        for listener in self.listeners:
            log.info("cohort broker %d: listener %s (%s) on %s:%d", self.broker.node_id, listener.name, listener.protocol,
                     listener.host or "*", self.ports[listener.name])
        log.info("cohort broker %d listening on %s:%d (data in %s)", self.broker.node_id, self.host, self.port, self.broker.data_dir)

    # --- views for operators (/metrics, the dashboard) ------------------------------------------

    def partitions(self) -> list:
        """Every client topic's partitions: log start, end, size (cohort.server.overview)."""
        return overview.partition_views(self.broker)

    def end_offsets(self) -> dict[tuple[str, int], int]:
        """Log end offsets (high watermarks) of every client topic's partitions."""
        snap = self.broker.metadata_snapshot()
        return {(t.name, p): end for t in snap.topics.values() if not t.internal for p, end in enumerate(t.end_offsets)}

    async def offload(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run CPU-heavy work (a large group's assignment) on the server's worker thread, so
        the event loop keeps serving other connections meanwhile (the GIL is handed over every
        ``sys.getswitchinterval()``, 5 ms by default)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task:
        """Run a background task owned by the server (cancelled on stop)."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def fail(self, reason: str) -> None:
        """A condition the server must not serve under (a misconfigured cohort cluster): logged,
        and `cohort serve` stops with ``reason`` as its one-line error."""
        log.error("%s", reason)
        self.failure = reason
        self.failed.set()

    async def stop(self) -> None:
        self._stopping = True
        for srv in self._servers:
            srv.close()
        if self.http is not None:
            await self.http.stop()
        # Hooks run while connections are still open, so what they answer (NOT_COORDINATOR for
        # parked joins and syncs) reaches the clients; a short grace lets those answers go out.
        for hook in self.shutdown_hooks:
            await hook()
        if self.shutdown_hooks and self._connections:
            await asyncio.sleep(SHUTDOWN_GRACE_S)
        for task in list(self._connections) + list(self._background):
            task.cancel()
        await asyncio.gather(*self._connections, *self._background, return_exceptions=True)
        # Requests whose connection closed under them: writes finish (their records are on
        # their way to the log), what is left (a long-poll) ends now.
        if self._orphans:
            _, left = await asyncio.wait(set(self._orphans), timeout=SHUTDOWN_GRACE_S)
            for fut in left:
                fut.cancel()
            await asyncio.gather(*left, return_exceptions=True)
        for srv in self._servers:
            srv.close()  # again: one opened while the first ones closed (the upstream's ports) too
            await srv.wait_closed()
        self._servers = []
        await self.broker.drain_coordinator_logs()  # writes of the last requests, made durable
        self._executor.shutdown(wait=True)
        self.broker.close()

    # --- connections -------------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             listener: Listener | None = None) -> None:
        listener = listener or self.listeners[0]
        peer = writer.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) else str(peer)
        refused = self._quotas.admit(ip)
        if refused is not None:
            self._log_refusal(peer, refused)
            writer.transport.abort()
            return
        task = asyncio.current_task()
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state = ConnectionState(peer, writer.transport, task, asyncio.get_running_loop().time())
        self._states.add(state)
        stats, name = self.stats, listener.name
        stats.connections_opened[name] = stats.connections_opened.get(name, 0) + 1
        stats.connections_open[name] = stats.connections_open.get(name, 0) + 1
        responses = Responses(writer, state, stats, name, self._encode_failed, self.config["queued.max.requests"])
        ctx = None
        try:
            try:
                ctx = self._context(peer, listener, writer)
                await self._read_loop(reader, responses, ctx, state)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            except _Close as exc:
                log.warning("closing connection from %s: %s", peer, _one_line(exc))
            # Answer what was already read, then close.
            await responses.finish()
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            for fut in responses.close():
                self._orphans.add(fut)
                fut.add_done_callback(self._orphans.discard)
            writer.close()
            if ctx is not None:
                for hook in self.connection_closed:
                    hook(ctx)
            self._states.discard(state)
            stats.connections_open[name] -= 1
            self._quotas.release(ip)
            self._connections.discard(task)

    def _context(self, peer: Any, listener: Listener, writer: asyncio.StreamWriter) -> RequestContext:
        """The connection's principal: a TLS client certificate's mapped subject, else
        ANONYMOUS; on a SASL listener the SASL exchange replaces it once complete."""
        principal = ANONYMOUS
        if listener.tls:
            cert = writer.get_extra_info("peercert")
            if cert:
                try:
                    principal = "User:" + self._principal_rules[listener.name].name(tls.subject_dn(cert))
                except ValueError as exc:
                    raise _Close(str(exc)) from None
        return RequestContext(self, peer, listener, principal, self._authenticator(listener) if listener.sasl else None)

    def _log_refusal(self, peer: Any, reason: str) -> None:
        """One WARNING a minute for refused connections, with how many were refused."""
        self._refused += 1
        now = asyncio.get_running_loop().time()
        if now - self._refusal_logged >= 60.0:
            log.warning("refused connection from %s: %s (%d refused in the last minute)", peer, reason, self._refused)
            self._refusal_logged = now
            self._refused = 0

    async def _wait_for_request_memory(self, reader: asyncio.StreamReader) -> None:
        """Wait until the request bytes held are below ``queued.max.request.bytes``.

        As in Kafka's memory pool, a large frame waits here, then takes its whole size at once
        (it may pass the cap by this one frame), so two half-read frames can never wait for
        each other. Small frames (heartbeats, metadata, commits) never wait: they are counted,
        so large ones wait for them, but clients that hold the cap with large frames cannot
        stall everyone else until their deadline."""
        # Stop taking bytes from the socket meanwhile: the stream's buffer would otherwise fill
        # up to its own high-water mark on every waiting connection.
        transport = reader._transport  # noqa: SLF001 - asyncio has no public way to reach it
        transport.pause_reading()
        try:
            await self._memory.wait_for_room()
        finally:
            if not transport.is_closing():
                transport.resume_reading()

    async def _read_loop(self, reader: asyncio.StreamReader, responses: Responses, ctx: RequestContext,
                         state: ConnectionState) -> None:
        max_bytes = self.config["socket.request.max.bytes"]
        table = self.table
        apis = self.apis
        memory = self._memory
        clock = asyncio.get_running_loop().time
        sasl_max = self.config["sasl.server.max.receive.size"]
        stats, name = self.stats, ctx.listener.name
        stats.bytes_in.setdefault(name, 0)
        while True:
            prefix = await reader.readexactly(4)
            state.frame_started = clock()
            size = frame_size(prefix)
            if ctx.sasl is not None and not 0 <= size <= sasl_max:
                raise _Close(f"frame size {size} before authentication outside 0..{sasl_max} (sasl.server.max.receive.size)")
            if size < 0 or size > max_bytes:
                raise _Close(f"frame size {size} outside 0..{max_bytes} (socket.request.max.bytes)")
            if size > _SMALL_FRAME and memory.full():
                await self._wait_for_request_memory(reader)
            memory.take(size)
            try:
                frame = await reader.readexactly(size)
            except BaseException:
                memory.give_back(size)
                raise
            state.frame_started = None
            state.last_active = received = clock()
            stats.bytes_in[name] += size + 4
            failure = None
            if ctx.session_expiry is not None and ctx.sasl is None:
                self._check_session(frame, ctx, clock())
            try:
                if ctx.sasl is not None:
                    item, failure = self._authenticate(frame, ctx)
                else:
                    item = self._handle(frame, ctx, apis, table)
            finally:
                memory.give_back(size)
            if item is not None:
                responses.add(*item, received)
                if responses.needs_room():
                    await responses.room()
            if failure is not None:
                # Kafka's connection.failed.authentication.delay.ms: the answer leaves now, the
                # connection closes a little later, so guessing passwords is slow.
                await asyncio.sleep(self.config["connection.failed.authentication.delay.ms"] / 1000)
                raise _Close(failure)

    def _handle(self, frame: bytes, ctx: RequestContext, apis: ApiTable, table: VersionTable) -> tuple | None:
        """Decode and dispatch one frame: the queue item to answer it with, None for no answer
        at all, or _Close."""
        if self.frame_router is not None:
            try:
                routed = self.frame_router(frame, ctx)
            except MalformedRequest as exc:
                raise _Close(f"malformed request: {_one_line(exc)}") from None
            if routed is not None:
                return routed
        try:
            request = decode_request(frame, table)
        except UnsupportedApi as exc:
            if exc.api_key == API_VERSIONS_KEY and exc.version >= 0:
                return (exc.correlation_id, None, api_versions_fallback(exc.correlation_id, apis.advertised()))
            raise _Close(str(exc)) from None
        except InvalidRequest as exc:
            if apis.lookup(exc.api_key, exc.version) is None or not has_top_level_error(exc.codec.response_type):
                raise _Close(f"invalid request: {_one_line(exc)}") from None
            if not ctx.warned_invalid:
                ctx.warned_invalid = True
                log.warning("answering INVALID_REQUEST to %s: api_key=%d v%d: %s", ctx.peer, exc.api_key, exc.version,
                            _one_line(exc))
            return (exc.correlation_id, exc.codec, error_response(exc.codec.response_type, ErrorCode.invalid_request, str(exc)))
        except MalformedRequest as exc:
            raise _Close(f"malformed request: {_one_line(exc)}") from None
        handler = apis.lookup(request.api_key, request.version)
        if handler is None:
            raise _Close(f"api_key={request.api_key} version={request.version} is not served")
        try:
            result = handler(ctx, request)
        except CloseConnection as exc:
            raise _Close(str(exc)) from None
        except Exception:  # noqa: BLE001 - a handler bug must not take the server down
            log.exception("handler for api_key=%d v%d failed", request.api_key, request.version)
            if not has_top_level_error(request.codec.response_type):
                raise _Close("internal error") from None
            result = error_response(request.codec.response_type, ErrorCode.unknown_server_error)
        if type(result) is types.CoroutineType:  # an async handler (asyncio.iscoroutine is slower)
            result = asyncio.ensure_future(result)
        return (request.correlation_id, request.codec, result)

    def _authenticate(self, frame: bytes, ctx: RequestContext) -> tuple[tuple | None, str | None]:
        """One frame of the SASL exchange: (queue item to answer with, or None; failure
        message after which the connection closes, or None). See cohort.security.sasl."""
        auth = ctx.sasl
        if auth.raw_tokens:  # after a v0 handshake: a raw token, answered raw (no error frame)
            try:
                challenge = auth.token(frame)
            except AuthenticationFailed as exc:
                return None, f"SASL authentication failed for {ctx.peer}: {exc}"
            self._maybe_authenticated(ctx)
            return (None if challenge is None else (0, None, Encoded(struct.pack(">i", len(challenge)) + challenge))), None
        try:
            request = decode_request(frame, self.table)
        except UnsupportedApi as exc:
            if exc.api_key == API_VERSIONS_KEY and exc.version >= 0 and auth.state is SaslState.INITIAL:
                return (exc.correlation_id, None, api_versions_fallback(exc.correlation_id, self.apis.advertised())), None
            return None, f"{exc} before SASL authentication"
        except (InvalidRequest, MalformedRequest) as exc:
            return None, f"invalid request before SASL authentication: {_one_line(exc)}"
        codec = request.codec
        resp = codec.response_type
        if auth.state is SaslState.AUTHENTICATE and request.api_key != SASL_AUTHENTICATE_KEY:
            why = f"api_key={request.api_key} during SASL authentication"
            if has_top_level_error(resp):
                return (request.correlation_id, codec, error_response(resp, ErrorCode.illegal_sasl_state, why)), why
            return None, why
        try:
            auth.check_request(request.api_key)
        except IllegalState as exc:
            return None, str(exc)
        if request.api_key == API_VERSIONS_KEY:
            auth.api_versions()
            return (request.correlation_id, codec, self.apis.lookup(API_VERSIONS_KEY, request.version)(ctx, request)), None
        if request.api_key == SASL_HANDSHAKE_KEY:
            try:
                code = auth.handshake(request.body.mechanism, request.version)
            except AuthenticationFailed as exc:
                return None, f"re-authentication of {ctx.principal} failed: {exc}"
            answer = build(resp, error_code=ErrorCode(code), mechanisms=auth.enabled)
            failure = None if code == 0 else f"SASL mechanism {request.body.mechanism!r} is not enabled"
            return (request.correlation_id, codec, answer), failure
        try:
            challenge = auth.token(bytes(request.body.auth_bytes))
        except AuthenticationFailed as exc:
            log.info("failed authentication of %s on listener %s (%s)", ctx.peer, ctx.listener.name, auth.mechanism_name)
            answer = build(resp, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc), auth_bytes=b"",
                           session_lifetime=_NO_LIFETIME)
            return (request.correlation_id, codec, answer), f"SASL authentication failed for {ctx.peer}: {exc}"
        lifetime = self._maybe_authenticated(ctx)
        answer = build(resp, error_code=ErrorCode.none, error_message=None, auth_bytes=challenge or b"",
                       session_lifetime=lifetime)
        return (request.correlation_id, codec, answer), None

    def _check_session(self, frame: bytes, ctx: RequestContext, now: float) -> None:
        """KIP-368 on an authenticated connection: a SaslHandshake (at least a second after the
        last authentication began) starts re-authentication; any other request after the
        session expired closes the connection."""
        api_key = struct.unpack_from(">h", frame)[0] if len(frame) >= 2 else -1
        if api_key == SASL_HANDSHAKE_KEY and now - ctx.auth_started >= 1.0:
            ctx.sasl = self._authenticator(ctx.listener, (ctx.mechanism, ctx.principal.removeprefix("User:")))
            ctx.auth_started = now
        elif now >= ctx.session_expiry:
            raise _Close(f"SASL session of {ctx.principal} expired (connections.max.reauth.ms) without re-authentication")

    def _authenticator(self, listener: Listener, reauthenticating: tuple[str, str] | None = None) -> Authenticator:
        return Authenticator(self._mechanisms[listener.name],
                             mechanism_factory(self._plain_users[listener.name], self.credentials,
                                               self._oauth_options[listener.name]), reauthenticating)

    def _maybe_authenticated(self, ctx: RequestContext) -> datetime.timedelta:
        """After a token: if the exchange completed, the principal and the session's end (its
        lifetime is returned for SaslAuthenticate v1+, 0 = no expiry)."""
        auth = ctx.sasl
        if not auth.complete:
            return _NO_LIFETIME
        loop_now = asyncio.get_running_loop().time()
        lifetimes = [self.config.for_listener(ctx.listener.name, "connections.max.reauth.ms", auth.mechanism_name)]
        token = auth.credential_lifetime_ms(time.time() * 1000)
        if token is not None:
            lifetimes.append(token)
        lifetime = min((t for t in lifetimes if t > 0), default=0)
        if auth.reauthenticating is None:
            log.info("authenticated %s as User:%s on listener %s (%s)", ctx.peer, auth.principal, ctx.listener.name,
                     auth.mechanism_name)
        else:
            log.info("re-authenticated %s as User:%s on listener %s", ctx.peer, auth.principal, ctx.listener.name)
        ctx.principal = "User:" + auth.principal
        ctx.mechanism = auth.mechanism_name
        ctx.session_expiry = loop_now + lifetime / 1000 if lifetime else None
        if not ctx.auth_started:
            ctx.auth_started = loop_now
        ctx.sasl = None
        return datetime.timedelta(milliseconds=lifetime)

    def _encode_failed(self, correlation_id: int, codec: ApiCodec) -> bytes | None:
        """After a response failed to encode (logged here, once): an error-only answer, or None
        if the API has none (the connection is then closed after what came before it)."""
        log.exception("cannot encode the response to api_key=%d v%d", codec.api_key, codec.version)
        if has_top_level_error(codec.response_type):
            return encode_response(correlation_id, codec, error_response(codec.response_type, ErrorCode.unknown_server_error))
        return None

    async def _sweep_connections(self) -> None:
        """Close connections idle past ``connections.max.idle.ms`` and frames still arriving
        past ``socket.request.read.timeout.ms``."""
        idle_s = self.config["connections.max.idle.ms"] / 1000
        frame_s = self.config["socket.request.read.timeout.ms"] / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.01, min(1.0, idle_s / 10, frame_s / 10)))
            now = loop.time()
            for state in list(self._states):
                if state.closed:
                    continue
                if state.frame_started is not None and now - state.frame_started > frame_s:
                    log.warning("closing connection from %s: request frame not complete after %.0f ms "
                                "(socket.request.read.timeout.ms)", state.peer, frame_s * 1000)
                elif state.frame_started is None and state.pending == 0 and now - state.last_active > idle_s:
                    log.debug("closing connection from %s: idle for %.0f ms", state.peer, idle_s * 1000)
                else:
                    continue
                state.closed = True
                state.transport.abort()
                state.task.cancel()  # a reader waiting for request memory gives its bytes back


_SMALL_FRAME = 65536  # frames up to this size never wait for request memory (and the stream's limit)


def _one_line(exc: Exception | str, limit: int = 300) -> str:
    """A message for one log line: client-supplied text escaped, whitespace folded, cut short."""
    text = " ".join(str(exc).split())
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Close(Exception):
    """Close this connection (bad frame, unknown API): Kafka's answer to unparseable input."""

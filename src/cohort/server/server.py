"""The asyncio TCP server: framing, per-connection ordering, dispatch through the API table.

Each connection has a reader loop and a writer loop joined by a bounded queue of response
slots. The reader decodes a request, calls its handler and queues the result (a response, or a
future for handlers that wait); the writer sends results strictly in queue order. So a Fetch
long-poll or a JoinGroup holds back later responses on its own connection only, as Kafka
clients expect, while other connections proceed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import socket
from typing import Any, Awaitable, Callable

from cohort.broker import Broker
from cohort.config import Config
from cohort.protocol.codec import (
    API_VERSIONS_KEY,
    MalformedRequest,
    UnsupportedApi,
    api_versions_fallback,
    decode_request,
    encode_response,
    frame_size,
)
from cohort.protocol.versions import VersionTable, default_table
from cohort.server import configs, handlers
from cohort.server.api import NO_RESPONSE, ApiTable, CloseConnection
from cohort.server.waiters import AppendWaiters

log = logging.getLogger("cohort.server")

# Modules that register more APIs: each must define ``install(server)``.
SHUTDOWN_GRACE_S = 0.05  # time for answers written by the shutdown hooks to leave
PLUGINS = ("cohort.server.groups",)


class RequestContext:
    """What a handler may use besides the request itself."""

    __slots__ = ("server", "broker", "config", "peer")

    def __init__(self, server: "Server", peer: Any) -> None:
        self.server = server
        self.broker = server.broker
        self.config = server.config
        self.peer = peer


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
        self.shutdown_hooks: list[Callable[[], Awaitable[None]]] = []
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self._background: set[asyncio.Task] = set()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cohort-offload")
        self.host: str = config["listener.host"]
        self.port: int = config["listener.port"]
        # resource type -> provider for DescribeConfigs / IncrementalAlterConfigs
        self.config_resources: dict[int, configs.ConfigProvider] = {}
        handlers.install(self)
        configs.install(self)
        for name in plugins:
            importlib.import_module(name).install(self)

    @property
    def advertised_host(self) -> str:
        """``advertised.host``, else the listen host (this machine's name for a wildcard)."""
        if self.config["advertised.host"]:
            return self.config["advertised.host"]
        if self.host in ("", "0.0.0.0", "::"):
            return socket.getfqdn()
        return self.host

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._on_connection, self.config["listener.host"], self.config["listener.port"],
            limit=1 << 20, reuse_address=True,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        for hook in self.startup_hooks:
            self.spawn(hook())
        self.spawn(self.broker.maintenance_loop())
        log.info("cohort broker %d listening on %s:%d (data in %s)", self.broker.node_id, self.host, self.port, self.broker.data_dir)

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

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        # Hooks run while connections are still open, so what they answer (NOT_COORDINATOR for
        # parked joins and syncs) reaches the clients; a short grace lets those answers go out.
        for hook in self.shutdown_hooks:
            await hook()
        if self.shutdown_hooks and self._connections:
            await asyncio.sleep(SHUTDOWN_GRACE_S)
        for task in list(self._connections) + list(self._background):
            task.cancel()
        await asyncio.gather(*self._connections, *self._background, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        self._executor.shutdown(wait=True)
        self.broker.close()

    # --- connections -------------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        queue: asyncio.Queue = asyncio.Queue(self.config["queued.max.requests"])
        sender = asyncio.ensure_future(self._send_loop(queue, writer, peer))
        try:
            try:
                await self._read_loop(reader, queue, RequestContext(self, peer))
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            except _Close as exc:
                log.info("closing connection from %s: %s", peer, exc)
            # Answer what was already read, then close.
            await queue.put(None)
            await sender
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            sender.cancel()
            writer.close()
            self._connections.discard(task)

    async def _read_loop(self, reader: asyncio.StreamReader, queue: asyncio.Queue, ctx: RequestContext) -> None:
        max_bytes = self.config["socket.request.max.bytes"]
        table = self.table
        apis = self.apis
        while True:
            size = frame_size(await reader.readexactly(4))
            if size < 0 or size > max_bytes:
                raise _Close(f"frame size {size} outside 0..{max_bytes} (socket.request.max.bytes)")
            frame = await reader.readexactly(size)
            try:
                request = decode_request(frame, table)
            except UnsupportedApi as exc:
                if exc.api_key == API_VERSIONS_KEY and exc.version >= 0:
                    await queue.put((exc.correlation_id, None, api_versions_fallback(exc.correlation_id, apis.advertised())))
                    continue
                raise _Close(str(exc)) from None
            except MalformedRequest as exc:
                raise _Close(f"malformed request: {exc}") from None
            handler = apis.lookup(request.api_key, request.version)
            if handler is None:
                raise _Close(f"api_key={request.api_key} version={request.version} is not served")
            try:
                result = handler(ctx, request)
            except CloseConnection as exc:
                raise _Close(str(exc)) from None
            except Exception:  # noqa: BLE001 - a handler bug must not take the server down
                log.exception("handler for api_key=%d v%d failed", request.api_key, request.version)
                raise _Close("internal error") from None
            if asyncio.iscoroutine(result):
                result = asyncio.ensure_future(result)
            await queue.put((request.correlation_id, request.codec, result))

    async def _send_loop(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, peer: Any) -> None:
        """Send results in queue order. Everything already answered when the loop wakes goes
        out in one write (pipelined requests cost one syscall, not one each)."""
        while True:
            item = await queue.get()
            out: list[bytes] = []
            while True:
                if item is None:
                    if out:
                        writer.writelines(out)
                    await writer.drain()
                    return
                correlation_id, codec, result = item
                if isinstance(result, asyncio.Future):
                    if not result.done() and out:
                        writer.writelines(out)  # do not hold finished responses behind a wait
                        out = []
                    try:
                        result = await result
                    except asyncio.CancelledError:
                        raise
                    except Exception:  # noqa: BLE001
                        log.exception("handler for api_key=%d v%d failed", codec.api_key, codec.version)
                        writer.close()
                        return
                if result is not NO_RESPONSE:
                    out.append(result if codec is None else encode_response(correlation_id, codec, result))
                if queue.empty():
                    break
                item = queue.get_nowait()
            if out:
                writer.writelines(out)
            await writer.drain()


class _Close(Exception):
    """Close this connection (bad frame, unknown API): Kafka's answer to unparseable input."""

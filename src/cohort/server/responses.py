"""The answers of one connection, written in request order.

An answer goes to the socket as soon as it is ready: a waiting one (a future) from its
done-callback, together with every later answer already ready behind it; responses handlers
return at once are gathered until the reader has taken every request already received, and
leave in one write (pipelined requests cost one send, not one each). Kafka clients match answers to requests by
order, so a waiting answer (a Fetch long-poll, a parked JoinGroup, a commit until its fsync)
holds back the later ones of its connection only.

This replaced a writer task fed by a queue, which cost two task wake-ups per request (the
queue's, then the awaited future's) on the path of every offset commit and heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from cohort.protocol.codec import encode_response
from cohort.protocol.entities import error_response, has_top_level_error
from cohort.server.api import CLOSE_WITHOUT_ANSWER, NO_RESPONSE, Encoded, Unprefixed
from cohort.server.limits import ConnectionState
from cohort.stats import RequestStats

log = logging.getLogger("cohort.server")

_Future = asyncio.Future
_WRITE_HIGH = 1 << 16  # bytes waiting in the transport before the reader waits for the socket


class Responses:
    """A connection's answers in request order (see the module docstring).

    The reader adds each request's answer with `add`, then awaits `room` only when
    ``limit`` answers are unwritten or the socket is not taking bytes; `finish` waits until
    everything added was written. An answer that cannot be given (`CLOSE_WITHOUT_ANSWER`, a
    response that fails to encode for an API without an error code, a cancelled handler) closes
    the connection after the answers before it."""

    __slots__ = ("_items", "_writer", "_transport", "_state", "_stats", "_listener", "_encode_failed",
                 "_limit", "_clock", "_loop", "_waiter", "_closed", "_closing_task", "_flushing")

    def __init__(self, writer: asyncio.StreamWriter, state: ConnectionState, stats: RequestStats, listener: str,
                 encode_failed: Callable[[int, Any], bytes | None], limit: int) -> None:
        self._items: deque = deque()  # (correlation id, codec, result, time received), oldest first
        self._writer, self._transport = writer, writer.transport
        self._state, self._stats, self._listener = state, stats, listener
        self._encode_failed, self._limit = encode_failed, max(1, limit)
        self._loop = asyncio.get_running_loop()
        self._clock = self._loop.time
        self._flushing = False  # a write of the ready answers is scheduled
        self._waiter: asyncio.Future | None = None  # the reader, waiting for room or for the end
        self._closed = False
        self._closing_task: asyncio.Task | None = None
        stats.bytes_out.setdefault(listener, 0)

    def add(self, correlation_id: int, codec: Any, result: Any, received: float) -> None:
        """The answer to the next request: a response (or frame) now, or a future of one."""
        if self._closed:
            return  # never cancelled: a write in flight must still reach the log
        self._state.pending += 1
        items = self._items
        items.append((correlation_id, codec, result, received))
        if isinstance(result, _Future) and not result.done():
            result.add_done_callback(self._ready)
        elif not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)

    def needs_room(self) -> bool:
        """True if the reader should wait (`room`) before reading the next request."""
        return self._state.pending >= self._limit or self._transport.get_write_buffer_size() > _WRITE_HIGH

    async def room(self) -> None:
        """Wait until fewer than ``limit`` answers are unwritten and the socket takes bytes."""
        while not self._closed and self._state.pending >= self._limit:
            await self._wait()
        if not self._closed:
            await self._writer.drain()

    async def finish(self) -> None:
        """Wait until every answer added so far was written and handed to the socket."""
        while not self._closed and self._items:
            await self._wait()
        if self._closing_task is not None:
            await self._closing_task
        elif not self._transport.is_closing():
            await self._writer.drain()

    def close(self) -> list[asyncio.Future]:
        """The connection is gone: answers still waiting are dropped. Returns the requests still
        running (a write must still reach the log; the server waits for them when it stops)."""
        self._closed = True
        running = []
        for _, _, result, _ in self._items:
            if isinstance(result, _Future):
                result.remove_done_callback(self._ready)
                if not result.done():
                    running.append(result)
        self._items.clear()
        self._wake()
        return running

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _ready(self, fut: asyncio.Future) -> None:
        items = self._items
        if items and items[0][2] is fut:
            self._safely_write()

    def _flush(self) -> None:
        self._flushing = False
        if self._items:
            self._safely_write()

    def _safely_write(self) -> None:
        try:
            self._write()
        except Exception:  # noqa: BLE001 - a bug here must close this connection, not hang it
            log.exception("cannot write the answers of %s", self._state.peer)
            self._close_after([])

    def _write(self) -> None:
        """Write every answer ready at the head, in one write."""
        items, state, stats = self._items, self._state, self._stats
        out: list[bytes] = []
        size = answered = 0
        while items:
            correlation_id, codec, result, received = items[0]
            if isinstance(result, _Future):
                if not result.done():
                    break
                if result.cancelled():
                    self._close_after(out)
                    return
                exc = result.exception()
                if exc is None:
                    result = result.result()
                else:
                    log.error("handler for api_key=%d v%d failed", codec.api_key if codec else -1,
                              codec.version if codec else -1, exc_info=exc)
                    result = (error_response(codec.response_type, ErrorCode.unknown_server_error)
                              if codec is not None and has_top_level_error(codec.response_type) else CLOSE_WITHOUT_ANSWER)
            items.popleft()
            state.pending -= 1
            answered += 1
            if result is CLOSE_WITHOUT_ANSWER:
                frame = None
            elif result is NO_RESPONSE:
                frame = b""
            elif type(result) is Unprefixed:
                frame = result.body
                out.append(struct.pack(">i", len(frame)))
            elif codec is None or isinstance(result, Encoded):
                frame = result
            else:
                try:
                    frame = encode_response(correlation_id, codec, result)
                except Exception:  # noqa: BLE001 - a response that does not fit its schema is a bug
                    frame = self._encode_failed(correlation_id, codec)
            if frame is None:
                self._close_after(out)
                return
            if frame:
                out.append(frame)
                size += len(frame)
            if codec is not None:
                h = stats.by_codec.get(id(codec))
                if h is None:
                    h = stats.histogram(codec.api_key, codec.version, codec)
                h.observe(self._clock() - received)
        if out:
            self._transport.writelines(out)
            stats.bytes_out[self._listener] += size
        if answered:
            state.last_active = self._clock()
        if self._waiter is not None and (not items or state.pending < self._limit):
            self._wake()

    def _close_after(self, out: list[bytes]) -> None:
        """Close the connection once the answers before this one have left."""
        if out:
            self._transport.writelines(out)
        self.close()
        self._closing_task = asyncio.ensure_future(self._drain_then_abort())

    async def _drain_then_abort(self) -> None:
        try:
            await self._writer.drain()
        except ConnectionError:
            pass
        finally:
            self._transport.abort()

"""Forwarding requests to the upstream's brokers as bytes.

Each client connection gets, lazily, one connection of its own to each upstream broker it
sends to. Kafka answers the requests of a connection in order, and the client's requests on
that upstream connection are exactly its own, so frames go out unchanged (the client's
correlation ids are kept: nothing else shares the connection) and answers come back in the
order asked. The server queues every answer of a client connection, local or forwarded, in
request order, so the client sees Kafka's ordering even when some are answered here.

Record batches are never decoded: a Produce or Fetch costs a copy each way. Only a Produce
with acks=0 is parsed that far (it gets no answer, so none is awaited).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct

from cohort.protocol.codec import skip_request_header
from cohort.protocol.tagged import read_uvarint

PRODUCE = 0
_SIZE = struct.Struct(">i")


class UpstreamGone(ConnectionError):
    """The upstream broker closed the connection or could not be reached."""


class BrokerConnection:
    """One connection to one upstream broker, on behalf of one client connection."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._waiting: collections.deque[asyncio.Future] = collections.deque()
        self._connecting: asyncio.Future | None = None
        self.closed = False

    async def _connect(self) -> None:
        try:
            # a large limit: a Fetch answer of megabytes is read without pausing the socket every 128 KiB
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        except OSError as exc:
            raise UpstreamGone(f"cannot reach upstream broker {self.host}:{self.port}: {exc}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writer = writer
        self._reader_task = asyncio.ensure_future(self._read_loop(reader))

    async def request(self, frame: bytes, expect_answer: bool = True) -> bytes | None:
        """Send a request frame (without its size prefix); its answer frame (without prefix)."""
        if self.closed:
            raise UpstreamGone("the upstream connection is closed")
        if self._writer is None:
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
            await asyncio.shield(self._connecting)
        fut = asyncio.get_running_loop().create_future() if expect_answer else None
        if fut is not None:
            self._waiting.append(fut)
        self._writer.writelines((_SIZE.pack(len(frame)), frame))  # no copy of a large frame to prefix it
        try:
            await self._writer.drain()  # a slow upstream holds the client back, not cohort's memory
        except (ConnectionError, OSError) as exc:
            raise UpstreamGone(f"upstream broker {self.host}:{self.port}: {exc}") from None
        if fut is None:
            return None
        return await fut

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                prefix = await reader.readexactly(4)
                body = await reader.readexactly(_SIZE.unpack(prefix)[0])
                if not self._waiting:
                    break  # an answer nobody asked for: the connection is not what we think
                fut = self._waiting.popleft()
                if not fut.done():
                    fut.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self._fail(UpstreamGone(f"upstream broker {self.host}:{self.port} closed the connection"))

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self._writer is not None:
            self._writer.close()

    def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
        self._fail(UpstreamGone("closed"))


def produce_acks(frame: bytes, version: int) -> int:
    """The ``acks`` of a Produce request frame (without size prefix), read past the header and
    ``transactional_id`` without decoding the rest."""
    flexible = version >= 9
    _, pos = skip_request_header(frame, flexible)
    if version >= 3:  # transactional_id
        if flexible:
            length, pos = read_uvarint(frame, pos)
            pos += max(length - 1, 0)
        else:
            (n,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(n, 0)
    return struct.unpack_from(">h", frame, pos)[0]


class ConnectionRoutes:
    """The upstream connections of one client connection, by upstream node id (and those to
    other instances of the cohort cluster, by ("peer", their node id))."""

    __slots__ = ("connections",)

    def __init__(self) -> None:
        self.connections: dict[object, BrokerConnection] = {}

    def get(self, node_id: object, address: tuple[str, int]) -> BrokerConnection:
        conn = self.connections.get(node_id)
        if conn is None or conn.closed or (conn.host, conn.port) != address:
            if conn is not None:
                conn.close()
            conn = self.connections[node_id] = BrokerConnection(*address)
        return conn

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()


# --- share requests between the instances of a cohort cluster --------------------------------
#
# A share consumer sends ShareFetch and ShareAcknowledge to the leader of each partition, which
# clients reach through whichever instance advertises that upstream broker. The group's
# share-partitions are served by the owner of the group's shard: an instance that is not the
# owner passes the request on, to the owner's coordinator port, with the upstream node the client
# addressed written into the request's client id. The owner keys its share sessions by that node
# (a client keeps one session per broker) and never passes a request so marked on again.

PEER_MARK = "cohort-peer;"


def peer_frame(frame: bytes, node: int | None) -> bytes:
    """``frame`` with its client id marked as passed on by a peer, for upstream node ``node``
    (None: the client addressed a coordinator port)."""
    client_id, _ = skip_request_header(frame, flexible=False)
    (n,) = struct.unpack_from(">h", frame, 8)
    marked = f"{PEER_MARK}{'' if node is None else node};{client_id or ''}".encode()
    return frame[:8] + struct.pack(">h", len(marked)) + marked + frame[10 + max(n, 0):]


def peer_node(client_id: str | None) -> tuple[bool, int | None]:
    """(passed on by a peer, the upstream node the client addressed) from a request's client id."""
    if not client_id or not client_id.startswith(PEER_MARK):
        return False, None
    node = client_id[len(PEER_MARK):].split(";", 1)[0]
    return True, int(node) if node.lstrip("-").isdigit() else None


def share_request_ids(frame: bytes) -> tuple[str | None, str | None]:
    """(client id, group id) of a ShareFetch or ShareAcknowledge frame (the group id is its body's
    first field, a compact string in every version), read without decoding the rest; the group
    id is None if it is not there."""
    client_id, pos = skip_request_header(frame, flexible=True)
    length, pos = read_uvarint(frame, pos)
    if length == 0 or pos + length - 1 > len(frame):
        return client_id, None
    return client_id, frame[pos:pos + length - 1].decode("utf-8", "replace")

"""What one client may take from the broker: connections, request bytes in memory, time.

Kafka's names: ``max.connections``, ``max.connections.per.ip`` (with
``max.connections.per.ip.overrides``), ``connections.max.idle.ms``, ``queued.max.request.bytes``
and ``socket.request.max.bytes``; and one of cohort's own, ``socket.request.read.timeout.ms``,
the deadline for a frame that has started arriving (Kafka has none: a client that trickles a
frame holds its connection until the idle timeout). The server asks these objects; they hold
no sockets.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from cohort.config import ConfigError, declare

INT_MAX = 2**31 - 1

declare("max.connections", int, INT_MAX, "Connections the broker holds at once; a connection beyond it "
        "is closed as soon as it is accepted (logged once a minute).", minimum=0, group="server", dynamic=True)
declare("max.connections.per.ip", int, INT_MAX, "Connections one client address may hold at once; one "
        "beyond it is closed at once.", minimum=0, group="server", dynamic=True)
declare("max.connections.per.ip.overrides", str, "", "Per-address exceptions to `max.connections.per.ip`: "
        "comma-separated `host-or-ip:count` (e.g. `127.0.0.1:200,backup.example:0`).", group="server",
        dynamic=True)
declare("connections.max.idle.ms", int, 600000, "Close a connection that has read no request and has no "
        "response pending for this long.", minimum=1, group="server")
declare("queued.max.request.bytes", int, 104857600, "Request bytes all connections together may hold "
        "while frames are read and handled (-1: no cap). A frame larger than 64 KiB waits to be read "
        "while the cap is reached, then takes its size (so the cap may be passed by one frame); smaller "
        "frames are counted but never wait. Kafka's default is -1, where the JVM heap is the cap; "
        "cohort sets one.", minimum=-1, group="server")
declare("socket.request.read.timeout.ms", int, 60000, "Close a connection whose request frame has started "
        "arriving but is not complete after this long (a frame trickled byte by byte would otherwise "
        "hold its connection and its bytes until the idle timeout).", minimum=1, group="server")


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,...`` -> {ip: count}; host names are resolved once, at start."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(f"max.connections.per.ip.overrides: expected host:count, got {item!r}")
        host = host.strip("[] ")
        try:
            ips = [str(ipaddress.ip_address(host))]
        except ValueError:
            try:
                ips = sorted({info[4][0] for info in socket.getaddrinfo(host, None)})
            except OSError:
                raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host!r}") from None
        for ip in ips:
            out[ip] = int(count)
    return out


class ConnectionQuotas:
    """Counts open connections, overall and per client address."""

    def __init__(self, max_total: int, max_per_ip: int, overrides: dict[str, int]) -> None:
        self.max_total = max_total
        self.max_per_ip = max_per_ip
        self.overrides = overrides
        self.total = 0
        self.by_ip: dict[str, int] = {}

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; or the reason it is refused (nothing counted)."""
        if self.total >= self.max_total:
            return f"max.connections ({self.max_total}) reached"
        limit = self.overrides.get(ip, self.max_per_ip)
        held = self.by_ip.get(ip, 0)
        if held >= limit:
            return f"max.connections.per.ip ({limit}) reached for {ip}"
        self.total += 1
        self.by_ip[ip] = held + 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        held = self.by_ip[ip] - 1
        if held:
            self.by_ip[ip] = held
        else:
            del self.by_ip[ip]


class RequestMemory:
    """Broker-wide count of request bytes held (``queued.max.request.bytes``), as Kafka's
    memory pool: a frame takes its whole size when its reading starts, and a large frame waits
    while the count is at the cap. The count is bookkeeping, not allocation: a client that
    announces 100 MB and trickles holds a reservation (until its frame deadline), not memory.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap if cap >= 0 else None
        self.used = 0
        self.waiting = 0  # readers in wait_for_room: only they need waking
        self._room = asyncio.Event()
        self._room.set()

    def full(self) -> bool:
        return self.cap is not None and self.used >= self.cap

    async def wait_for_room(self) -> None:
        self.waiting += 1
        try:
            while self.full():
                self._room.clear()
                await self._room.wait()
        finally:
            self.waiting -= 1

    def take(self, n: int) -> None:
        self.used += n

    def give_back(self, n: int) -> None:
        self.used -= n
        if self.waiting and not self.full():
            self._room.set()


@dataclass(eq=False, slots=True)
class ConnectionState:
    """What the sweeper reads to close idle and stalled connections (times: loop.time())."""

    peer: Any
    transport: Any
    task: Any  # the connection's task
    last_active: float
    frame_started: float | None = None
    pending: int = 0  # responses not yet written
    closed: bool = False

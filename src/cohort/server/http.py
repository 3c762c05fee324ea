"""The operator's HTTP listener: `/metrics` (Prometheus), `/healthz`, `/readyz`, the dashboard
(`/`) and the JSON it reads (`/api/...`).

It runs on the broker's event loop (aiohttp): the dashboard's views are read in one pass between
two requests of the broker, and /metrics reads a large fleet in steps of 1,000 groups, each
group whole. Nothing it serves writes state. It has no authentication: keep `http.listener` on a
loopback or otherwise trusted address.
"""

from __future__ import annotations

from typing import Any

from cohort.config import ConfigError, declare

declare("http.listener", str, "127.0.0.1:9308", "Address of the HTTP listener serving `/metrics` "
        "(Prometheus), `/healthz`, `/readyz` and the dashboard, `host:port` (port 0 picks a free one). "
        "Empty: no HTTP listener. It has no authentication, so keep it on a trusted address.", group="server")
declare("metrics.cluster.name", str, "cohort", "The `cluster_name` label of the lag series "
        "(kafka-lag-exporter's name for it).", group="server")


def parse_address(text: str) -> tuple[str, int] | None:
    """`host:port` -> (host, port); empty -> None (ConfigError otherwise)."""
    text = text.strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"http.listener: expected host:port or nothing, got {text!r}")
    return host.strip("[]"), int(port)


def listener(server: Any):
    """The listener for `server` (`cohort.server.http_listener.HttpListener`), imported only when
    one is configured."""
    from cohort.server.http_listener import HttpListener

    return HttpListener(server)

"""The HTTP listener itself (aiohttp), apart from its settings (`cohort.server.http`): a broker
without `http.listener` never imports aiohttp or the Prometheus client, which cost every
`cohort serve` process some 0.2 s of CPU at start."""

from __future__ import annotations

import importlib.resources
import time
from typing import Any

from aiohttp import web

from cohort.tooling import metrics

# The Prometheus text format every Prometheus release reads (what generate_latest writes for these names).
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def _json(data: Any) -> web.Response:
    return web.json_response(data, headers={"Cache-Control": "no-store"})


def _member(m: Any) -> dict:
    pairs = lambda tps: [[t, p] for t, p in tps]  # noqa: E731
    return {"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id, "host": m.host,
            "epoch": m.epoch, "state": m.state, "assigned": pairs(m.assigned), "target": pairs(m.target),
            "pending_revocation": pairs(m.pending_revocation)}


class HttpListener:
    def __init__(self, server: Any) -> None:
        self.server = server
        self.registry = metrics.registry_for(server)
        self.fleet = metrics.FleetRenderer()
        self.runner: web.AppRunner | None = None
        self.port = 0
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/api/groups", self.api_groups)
        app.router.add_get("/api/groups/{group_id}", self.api_group)
        app.router.add_get("/api/topics", self.api_topics)
        app.router.add_get("/api/share-groups", self.api_share_groups)
        app.router.add_get("/api/cluster", self.api_cluster)
        app.router.add_get("/", self.dashboard)
        self.app = app

    async def start(self, host: str, port: int) -> int:
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, host or None, port, reuse_address=True)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # --- endpoints ------------------------------------------------------------------------------

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        pieces = await metrics.render(self.server, self.registry, self.fleet)
        response = web.StreamResponse(headers={"Content-Type": TEXT_FORMAT})
        response.content_length = sum(map(len, pieces))
        await response.prepare(request)
        for piece in pieces:  # sent as they are: the families are kept from scrape to scrape
            await response.write(piece)
        await response.write_eof()
        return response

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")  # answered on the broker's loop: the loop is alive

    def _coordinator(self) -> Any:
        return getattr(self.server, "group_coordinator", None)

    async def readyz(self, request: web.Request) -> web.Response:
        coordinator = self._coordinator()
        if coordinator is not None and not coordinator.loaded:
            return web.Response(status=503, text="loading the group coordinator\n")
        return web.Response(text="ready\n")

    async def api_groups(self, request: web.Request) -> web.Response:
        coordinator = self._coordinator()
        if coordinator is None or not coordinator.loaded:
            return _json({"loaded": False, "groups": []})
        ends = self.server.end_offsets()
        out = []
        for g in coordinator.group_lags():  # the cheap pass: no member views
            lag = 0
            for tp, value in g.committed.items():
                end = ends.get(tp, value.offset)
                lag += end - value.offset if end > value.offset else 0
            out.append({"group_id": g.group_id, "type": g.type, "state": g.state, "epoch": g.epoch,
                        "members": g.members, "lag": lag})
        return _json({"loaded": True, "time_ms": int(time.time() * 1000), "groups": out})

    async def api_group(self, request: web.Request) -> web.Response:
        coordinator = self._coordinator()
        group_id = request.match_info["group_id"]
        if coordinator is None or not coordinator.loaded:
            return _json({"error": "the group coordinator is loading"})
        found = coordinator.groups(only=group_id)
        if not found:
            return web.json_response({"error": f"Consumer group '{group_id}' does not exist."}, status=404)
        g = found[0]
        ends = self.server.end_offsets()
        lags = g.lag(ends)
        owner = {tp: m.member_id for m in g.members for tp in m.assigned}
        partitions = sorted(set(lags) | set(owner))
        return _json({
            "group_id": g.group_id, "type": g.type, "protocol": g.protocol, "state": g.state, "epoch": g.epoch,
            "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
            "members": [_member(m) for m in g.members],
            "timeline": [{"time_ms": t, "epoch": e} for t, e in coordinator.timeline.of(group_id)],
            "partitions": [{"topic": t, "partition": p, "committed": g.committed.get((t, p)), "end": ends.get((t, p)),
                            "lag": lags.get((t, p)), "member_id": owner.get((t, p))} for t, p in partitions],
            "time_ms": int(time.time() * 1000),
        })

    async def api_topics(self, request: web.Request) -> web.Response:
        topics: dict[str, list] = {}
        for p in self.server.partitions():
            topics.setdefault(p.topic, []).append({"partition": p.partition, "start": p.start, "end": p.end,
                                                   "size": p.size})
        return _json({"topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})

    async def api_share_groups(self, request: web.Request) -> web.Response:
        share = getattr(self.server, "share_partitions", None)
        if share is None or not share.loaded:
            return _json({"loaded": False, "groups": []})
        return _json({"loaded": True, "time_ms": int(time.time() * 1000), "groups": share.group_views()})

    async def api_cluster(self, request: web.Request) -> web.Response:
        """The cohort cluster in front of an upstream: instances, node ids, endpoints, shards."""
        proxy = getattr(self.server, "upstream_proxy", None)
        if proxy is None:
            return _json({"upstream": False, "instances": []})
        return _json({"upstream": True, **proxy.cohort_cluster()})

    async def dashboard(self, request: web.Request) -> web.Response:
        page = importlib.resources.files("cohort.tooling").joinpath("dashboard.html").read_text("utf-8")
        return web.Response(text=page, content_type="text/html", headers={"Cache-Control": "no-store"})

"""cohort in front of an upstream Kafka-compatible cluster (``upstream.bootstrap.servers`` with
``upstream.forward``): cohort coordinates the consumer groups, the upstream keeps the data.

* **Who answers what.** Group APIs (KIP-848 and classic, offsets, ListGroups, DescribeGroups,
  DeleteGroups, OffsetDelete), ApiVersions, SASL, and DescribeConfigs / IncrementalAlterConfigs
  naming only group resources (dynamic group configs) are answered here; everything else goes to
  the upstream as bytes (`cohort.upstream.forward`). A connection's answers leave in the order
  its requests came, local or forwarded.
* **Addresses.** Each upstream broker is reached through a port of cohort's own
  (``upstream.broker.port.base`` + its node id, or a free port when the base is 0), so partition
  leadership is kept: Produce and Fetch go to the broker that leads. Metadata and DescribeCluster
  answers list those ports under the upstream's node ids, plus cohort's coordinator under a node
  id of its own (``upstream.coordinator.node.id``, which must not be an upstream id): clients
  that look a coordinator up in Metadata (franz-go, aiokafka, librdkafka) find it there.
  FindCoordinator answers cohort for groups, and the upstream's coordinator (through its cohort
  port) for transactions.
* **Versions.** A forwarded API is offered over the versions both cohort's codec and the
  upstream support; Produce above v9 and Fetch above v15 are not offered (their answers may
  name brokers in ``NodeEndpoints``, which are not rewritten yet).
* **Topics** for subscriptions and assignments are the upstream's (`UpstreamCluster`, polled).
* With ``upstream.mirror.offsets``, committed offsets are copied into the upstream's own group
  offsets (`OffsetMirror`) for lag tools that read the upstream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import struct
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cohort.config import ConfigError, upstream_client_settings

from cohort.protocol.codec import (MalformedRequest, MalformedResponse, UnsupportedApi, decode_request,
                                   decode_response, encode_request, encode_response, peek_header)
from cohort.protocol.extensions import INSTALL_ASSIGNMENT_KEY, PREPARE_ASSIGNMENT_KEY
from cohort.protocol.tagged import Truncated
from cohort.protocol.versions import SUPPORTED
from cohort.protocol.entities import build, has_field, nested
from cohort.server.api import CLOSE_WITHOUT_ANSWER, NO_RESPONSE, Encoded, Unprefixed
from cohort.server.listeners import Listener
from cohort.upstream.cluster import UpstreamCluster
from cohort.upstream.forward import (BrokerConnection, ConnectionRoutes, UpstreamGone, peer_frame, peer_node,
                                     produce_acks, share_request_ids)
from cohort.upstream import identity
from cohort.upstream.admin import GroupAdmin
from cohort.upstream.membership import ClusterView, Instance, Membership, describe_error, membership_group, read_view
from cohort.upstream.mirror import OffsetMirror

if TYPE_CHECKING:
    from cohort.server.context import RequestContext
    from cohort.server.server import Server

log = logging.getLogger("cohort.upstream")

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, LIST_GROUPS = 0, 1, 3, 10, 16
SASL_HANDSHAKE, API_VERSIONS, TXN_OFFSET_COMMIT, SASL_AUTHENTICATE, DESCRIBE_CLUSTER = 17, 18, 28, 36, 60
GROUP_APIS = frozenset({8, 9, 11, 12, 13, 14, 15, 16, 42, 47, 68, 69, 76, 77, PREPARE_ASSIGNMENT_KEY, INSTALL_ASSIGNMENT_KEY})
SHARE_APIS = frozenset({78, 79, 90, 91, 92})  # ShareFetch, ShareAcknowledge, share group offsets: cohort's share groups
SHARE_DATA_APIS = frozenset({78, 79})  # ShareFetch, ShareAcknowledge: sent to partition leaders, passed to the group's owner
LOCAL_APIS = GROUP_APIS | SHARE_APIS | {SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE, TXN_OFFSET_COMMIT}
VERSION_CAPS = {PRODUCE: 9, FETCH: 15}  # NodeEndpoints (KIP-951) above these
GROUP_KEY = 0
GROUP_CONFIG_APIS, GROUP_RESOURCE = frozenset({32, 33, 44}), 32  # Describe-, Alter-, IncrementalAlterConfigs; GROUP
TOPIC_CHANGES = frozenset({19, 20, 37})  # CreateTopics, DeleteTopics, CreatePartitions: read topics again
SETTLE_RETRY_S = 1.0  # how often the cohort cluster's group is read while settling a node id
SETTLE_READ_TIMEOUT_S = 5.0  # one such read (short: a stop waits for the one in flight)
DUPLICATE_GRACE_S = 2.0  # beyond the membership session: time for a dead holder of a set node id to leave


def install(server: "Server") -> None:
    config = server.config
    if not config["upstream.bootstrap.servers"] or not config["upstream.forward"]:
        return
    if server.authorizer is not None:
        raise ConfigError("upstream.forward: ACLs are not enforced on forwarded requests yet; turn the authorizer "
                          "off or set upstream.forward=false")
    if any(listener.tls or listener.sasl for listener in server.listeners):
        raise ConfigError("upstream.forward: the listeners of an instance in front of an upstream must be "
                          "PLAINTEXT for now (the upstream's broker ports are plain)")
    if upstream_client_settings(config).get("security.protocol", "PLAINTEXT").upper() != "PLAINTEXT":
        raise ConfigError("upstream.forward: forwarded connections to the upstream are PLAINTEXT for now; set "
                          "upstream.forward=false to keep only the groups' records on a TLS or SASL upstream")
    proxy = UpstreamProxy(server)
    server.upstream_proxy = proxy  # type: ignore[attr-defined]
    server.topic_source = proxy.cluster
    server.frame_router = proxy.route
    server.group_coordinator_locator = proxy.group_coordinator
    server.connection_closed.append(proxy.closed)
    server.broker.node_id = proxy.coordinator_id
    server.apis.register(API_VERSIONS, proxy.api_versions)
    server.startup_hooks.append(proxy.run)


class UpstreamProxy:
    def __init__(self, server: "Server") -> None:
        config = server.config
        self.server = server
        self.client = upstream_client_settings(config)
        self.cluster = UpstreamCluster(self.client, frozenset({config["upstream.groups.topic"],
                                                               config["upstream.share.state.topic"]}),
                                       timeout_s=config["upstream.request.timeout.ms"] / 1000)
        # This instance's coordinator node id: set, or chosen once the cohort cluster's members
        # are known (`_settle_node_id`); until then a provisional one that Metadata does not list.
        self.identity = identity.load(server.broker.data_dir)
        self.explicit = config[identity.SETTING] >= 0
        self.coordinator_id = (config[identity.SETTING] if self.explicit else
                               self.identity.node_id if self.identity.node_id is not None else identity.FIRST_NODE_ID)
        self.settled = self.explicit or not (config["upstream.forward"] and config["upstream.membership"])
        if self.settled and not self.explicit and self.identity.node_id != self.coordinator_id:
            self._keep_node_id(self.coordinator_id)
        self.port_base = config["upstream.broker.port.base"]
        self.refresh_s = config["upstream.metadata.refresh.ms"] / 1000
        self.node_ports: dict[int, int] = {}  # upstream node id -> cohort's port for it
        self.listener_nodes: dict[str, int] = {}  # listener name -> upstream node id
        self.upstream_versions: dict[int, tuple[int, int]] = {}
        self.ready = asyncio.Event()
        self._collision_logged = False
        self.cluster_timeout_s = config["upstream.request.timeout.ms"] / 1000
        self._wanted = asyncio.Event()  # a refresh is wanted before the period is over
        self._started = self._completed = 0  # refreshes begun and finished
        self._progress = asyncio.Event()  # set (and replaced) when a refresh finishes
        self._routes: dict[int, ConnectionRoutes] = {}  # id(client connection) -> its upstream connections
        self._local_api_versions = server.apis.lookup(API_VERSIONS, 0)
        self.membership: Membership | None = None  # shared: this instance's seat in its cohort cluster

    # --- keeping up with the upstream ------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.server.spawn(self._join())
        if self.server.config["upstream.mirror.offsets"]:
            groups = self.server.group_coordinator  # type: ignore[attr-defined]
            mirror = OffsetMirror(self.client, groups.changes.subscribe(), groups.committed_offsets, groups.group_ids,
                                  timeout_s=self.cluster_timeout_s)
            self.server.spawn(mirror.run())
        while True:
            self._wanted.clear()
            self._started += 1
            number = self._started
            try:
                brokers, topics, offsets = await loop.run_in_executor(None, self.cluster.fetch)
                self.cluster.apply(brokers, topics, offsets)
                for node_id in sorted(brokers.nodes):
                    if node_id == self.coordinator_id:
                        if not self._collision_logged:
                            self._collision_logged = True
                            log.error("upstream node id %d is cohort's upstream.coordinator.node.id: set it to "
                                      "another value", node_id)
                    elif node_id not in self.node_ports:
                        await self._open_port(node_id)
                if not self.upstream_versions:
                    self.upstream_versions = await self._upstream_api_versions()
                if not self.ready.is_set():
                    log.info("forwarding to upstream %s: brokers %s on ports %s", self.client["bootstrap.servers"],
                             sorted(brokers.nodes), [self.node_ports[n] for n in sorted(self.node_ports)])
                self.ready.set()
            except (OSError, MalformedResponse) as exc:
                log.warning("upstream %s: %s", self.client["bootstrap.servers"], exc)
            except Exception:  # noqa: BLE001 - keep following the upstream whatever one refresh did
                log.exception("upstream %s: refresh failed", self.client["bootstrap.servers"])
            self._completed = number
            progress, self._progress = self._progress, asyncio.Event()
            progress.set()
            try:
                await asyncio.wait_for(self._wanted.wait(), self.refresh_s)
            except asyncio.TimeoutError:
                pass

    async def _join(self) -> None:
        """Shared: once the upstream's brokers have their ports here and the shards' topic exists,
        join the cohort cluster's group on the upstream; its assignment says which shards to serve.
        The node id is settled first, and chosen again if another instance turns out to share it."""
        groups = self.server.group_coordinator  # type: ignore[attr-defined]
        if not groups.shared:
            return
        await self.ready.wait()
        await groups.topic_ready.wait()
        config = self.server.config
        while not groups.closing:  # stopped while starting: joining now would leave a member nobody stops
            try:
                node = await self._settle_node_id()
            except identity.DuplicateNodeId as exc:
                self.server.fail(str(exc))
                return
            if groups.closing:
                return
            host, port = self.server.endpoint(self.server.listeners[0])
            me = Instance(node, host, port, dict(self.node_ports), self.identity.instance_id, self.explicit)
            self.membership = Membership(
                self.client, config["upstream.cluster.name"], config["upstream.groups.topic"], me,
                acquire=groups.acquire, release=groups.release,
                session_timeout_ms=config["upstream.membership.session.timeout.ms"], timeout_s=self.cluster_timeout_s)
            groups.membership = self.membership
            self.membership.start()
            log.info("joining cohort cluster %s on the upstream as coordinator node %d", self.membership.group, node)
            shared_with = await self.membership.follow(self._conflict)
            if shared_with is None:
                return
            await self.membership.stop()  # gives its shards back first
            if self.explicit:
                self.server.fail(self._duplicate(node, shared_with))
                return
            log.warning("coordinator node id %d is also %s's; choosing another", node, shared_with)

    async def _settle_node_id(self) -> int:
        """The node id to join with. Set: once no other live instance holds it (a predecessor
        with another data dir leaves when its session times out), else DuplicateNodeId. Chosen:
        the persisted one if free, else the smallest free one (`cohort.upstream.identity`)."""
        config = self.server.config
        group, topic = membership_group(config["upstream.cluster.name"]), config["upstream.groups.topic"]
        timeout = min(self.cluster_timeout_s, SETTLE_READ_TIMEOUT_S)
        admin = GroupAdmin(self.client, timeout)
        loop = asyncio.get_running_loop()
        patience = config["upstream.membership.session.timeout.ms"] / 1000 + DUPLICATE_GRACE_S
        started = loop.time()
        failed = False
        while True:
            try:
                view = await loop.run_in_executor(None, read_view, admin, group, topic)
            except Exception as exc:  # noqa: BLE001 - the upstream is away: wait for it
                if not failed:  # once, not at every retry
                    log.warning("cannot read the cohort cluster's group %s on the upstream: %s; retrying",
                                group, describe_error(exc))
                failed = True
                await asyncio.sleep(SETTLE_RETRY_S)
                continue
            others = [i for i in view.members if i.instance_id != self.identity.instance_id]
            if not self.explicit:
                node = identity.choose(self.identity.node_id, (i.node_id for i in others),
                                       self.cluster.brokers.nodes)
                break
            node = self.coordinator_id
            holders = [i for i in others if i.node_id == node and i.explicit]
            if not holders:
                break
            if loop.time() - started >= patience:
                raise identity.DuplicateNodeId(self._duplicate(node, f"{holders[0].host}:{holders[0].port}"))
            await asyncio.sleep(SETTLE_RETRY_S)
        if node != self.coordinator_id or not self.settled:
            self.coordinator_id = self.server.broker.node_id = node
            self.settled = True
        if not self.explicit and node != self.identity.node_id:
            await loop.run_in_executor(None, self._keep_node_id, node)
        return node

    def _keep_node_id(self, node: int) -> None:
        self.identity = dataclasses.replace(self.identity, node_id=node)
        identity.save(self.server.broker.data_dir, self.identity)

    def _conflict(self, view: ClusterView) -> str | None:
        """The address of an instance this one must give its node id up to, if any."""
        me = self.membership.me if self.membership is not None else None
        if me is None:
            return None
        for other in view.sharing(me.instance_id, me.node_id):
            if identity.must_yield(me.instance_id, me.explicit, other.instance_id, other.explicit):
                return f"{other.host}:{other.port}"
        return None

    def _duplicate(self, node: int, other: str) -> str:
        return (f"another live instance of cohort cluster {self.server.config['upstream.cluster.name']} ({other}) "
                f"has coordinator node id {node}: give each instance its own {identity.SETTING}, or leave it unset "
                "to have one chosen")

    # --- where clients are sent -----------------------------------------------------------------

    def _view(self) -> ClusterView:
        return self.membership.view if self.membership is not None else ClusterView()

    def broker_endpoint(self, node_id: int) -> tuple[str, int]:
        """Where clients reach upstream broker ``node_id``: through the instance every instance
        of the cluster names for it (`ClusterView.broker_instance`), else through this one."""
        chosen = self._view().broker_instance(node_id)
        if chosen is not None:
            return chosen.host, chosen.brokers[node_id]
        host, _ = self.server.endpoint(self.server.listeners[0])
        return host, self.node_ports[node_id]

    def coordinators(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every group coordinator instance clients may be sent to."""
        host, port = self.server.endpoint(self.server.listeners[0])
        found = {self.coordinator_id: (host, port)} if self.settled else {}
        for i in self._view().instances:
            found.setdefault(i.node_id, (i.host, i.port))
        return [(n, h, p) for n, (h, p) in sorted(found.items())]

    def cohort_cluster(self) -> dict:
        """The cohort cluster as this instance sees it (`/api/cluster`, /metrics): each instance's
        node id, endpoint and shards, this one first marked."""
        groups = self.server.group_coordinator  # type: ignore[attr-defined]
        host, port = self.server.endpoint(self.server.listeners[0])
        view = self._view()
        mine = sorted(self.membership.owned) if self.membership is not None else (
            [] if groups.shared else list(range(len(groups.runtimes))))
        rows = {i.node_id: {"node_id": i.node_id, "host": i.host, "port": i.port, "shards": view.shards_of(i.node_id),
                            "instance_id": i.instance_id, "node_id_set": i.explicit, "this": False}
                for i in view.instances}
        if self.settled:
            rows[self.coordinator_id] = {"node_id": self.coordinator_id, "host": host, "port": port, "shards": mine,
                                         "instance_id": self.identity.instance_id, "node_id_set": self.explicit,
                                         "this": True}
        return {"name": self.server.config["upstream.cluster.name"], "shared": groups.shared,
                "shards": len(groups.runtimes), "node_id": self.coordinator_id if self.settled else None,
                "instances": [rows[n] for n in sorted(rows)]}

    def group_coordinator(self, group_id: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the instance serving ``group_id``'s shard: this one
        unless shared; in a cohort cluster its owner, COORDINATOR_NOT_AVAILABLE while it has none."""
        host, port = self.server.endpoint(self.server.listeners[0])
        groups = self.server.group_coordinator  # type: ignore[attr-defined]
        if not groups.shared:
            return ErrorCode.none, self.coordinator_id, host, port
        shard = groups.partition_of(groups.runtime_for(group_id))
        if self.membership is not None:
            if shard in self.membership.owned:
                return ErrorCode.none, self.coordinator_id, host, port
            owner = self.membership.view.owner(shard)
            if owner is not None and owner.node_id != self.coordinator_id:
                return ErrorCode.none, owner.node_id, owner.host, owner.port
        return ErrorCode.coordinator_not_available, -1, "", -1

    async def refresh(self) -> None:
        """Return once a refresh of the upstream's topics begun after this call has finished
        (after a CreateTopics passed through, the topic is subscribable and committable)."""
        wanted = self._started + 1
        self._wanted.set()
        deadline = asyncio.get_running_loop().time() + self.cluster_timeout_s
        while self._completed < wanted:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._progress.wait(), left)
            except asyncio.TimeoutError:
                return

    def refresh_soon(self) -> None:
        """Read the upstream's metadata again now, not at the end of the period (a leader moved)."""
        self._wanted.set()

    def node_of(self, ctx: "RequestContext", client_id: str | None) -> int | None:
        """The upstream node a request was sent to (through its cohort port; for a request another
        instance passed on, the node its client addressed); None: a coordinator port."""
        peer, node = peer_node(client_id)
        return node if peer else self.listener_nodes.get(ctx.listener.name)

    async def _open_port(self, node_id: int) -> None:
        first = self.server.listeners[0]
        name = f"UPSTREAM-{node_id}"
        port = self.port_base + node_id if self.port_base else 0
        listener = Listener(name, "PLAINTEXT", first.host, port, first.advertised_host, 0)
        self.node_ports[node_id] = await self.server.open_listener(listener)
        self.listener_nodes[name] = node_id

    async def _upstream_api_versions(self) -> dict[int, tuple[int, int]]:
        host, port = next(iter(self.cluster.brokers.nodes.values()))
        conn = BrokerConnection(host, port)
        try:
            body = build(_api_versions_request(), client_software_name="cohort", client_software_version="1")
            frame = await conn.request(encode_request(API_VERSIONS, 3, 1, "cohort", body)[4:])
        except UpstreamGone as exc:
            raise OSError(str(exc)) from None
        finally:
            conn.close()
        _, resp = decode_response(API_VERSIONS, 3, frame)
        return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    # --- requests -----------------------------------------------------------------------------

    def closed(self, ctx: "RequestContext") -> None:
        routes = self._routes.pop(id(ctx), None)
        if routes is not None:
            routes.close()

    def route(self, frame: bytes, ctx: "RequestContext") -> tuple | None:
        """The queue item answering ``frame``, or None when cohort answers it itself. A frame
        that cannot be read is MalformedRequest (the server closes the connection)."""
        try:
            return self._route(frame, ctx)
        except MalformedRequest:
            raise
        except (UnsupportedApi, Truncated, struct.error, IndexError) as exc:
            raise MalformedRequest(f"cannot route the request: {exc}") from None

    def _route(self, frame: bytes, ctx: "RequestContext") -> tuple | None:
        api_key, version, correlation_id = peek_header(frame)
        node = self.listener_nodes.get(ctx.listener.name)  # None: cohort's own (coordinator) port
        if api_key in LOCAL_APIS:
            if api_key == API_VERSIONS:
                return None
            if api_key in SHARE_DATA_APIS:
                client_id, group_id = share_request_ids(frame)
                return self._pass_on(ctx, frame, node, correlation_id, client_id, (group_id,))
            if api_key == LIST_GROUPS and node is not None:  # groups are listed by the coordinator only
                req = decode_request(frame, self.server.table)
                return correlation_id, req.codec, build(req.codec.response_type, throttle_time=datetime.timedelta(0),
                                                        error_code=ErrorCode.none, groups=())
            return None
        request = None
        if api_key in GROUP_CONFIG_APIS:
            # Dynamic group configs are cohort's (the groups are); the rest is the upstream's.
            decoded = decode_request(frame, self.server.table)
            if decoded.body.resources and all(r.resource_type == GROUP_RESOURCE for r in decoded.body.resources):
                # A group's configs are kept with the group: passed to the instance serving it.
                return self._pass_on(ctx, frame, node, correlation_id, decoded.client_id,
                                     tuple(r.resource_name for r in decoded.body.resources))
        if api_key in (METADATA, DESCRIBE_CLUSTER, FIND_COORDINATOR):
            request = decode_request(frame, self.server.table)
            if api_key == FIND_COORDINATOR and getattr(request.body, "key_type", GROUP_KEY) == GROUP_KEY:
                return None  # cohort's own FindCoordinator, through `group_coordinator` (any port)
        if api_key == PRODUCE and produce_acks(frame, version) == 0:
            asyncio.ensure_future(self._forward(ctx, node, api_key, frame, None, expect_answer=False))
            return correlation_id, None, NO_RESPONSE
        return correlation_id, None, asyncio.ensure_future(self._forward(ctx, node, api_key, frame, request))

    def _pass_on(self, ctx: "RequestContext", frame: bytes, node: int | None, correlation_id: int,
                 client_id: str | None, group_ids: tuple[str | None, ...]) -> tuple | None:
        """The queue item passing a request about these groups on to the instance serving them,
        or None when it is answered here (`_owner_elsewhere`)."""
        owner = self._owner_elsewhere(client_id, group_ids)
        if owner is None:
            return None
        return correlation_id, None, asyncio.ensure_future(self._to_peer(ctx, owner, peer_frame(frame, node)))

    def _owner_elsewhere(self, client_id: str | None, group_ids: tuple[str | None, ...]) -> Instance | None:
        """The other instance a request about these groups goes to (a ShareFetch or
        ShareAcknowledge, sent to a partition leader; group configs, sent to any broker): the
        one owning their shards. None: answered here (this instance owns one of them, nobody
        does right now, they have different owners, or another instance passed the request on:
        it is never passed on twice)."""
        groups = self.server.group_coordinator  # type: ignore[attr-defined]
        if not groups.shared or self.membership is None or not group_ids or not all(group_ids):
            return None
        if peer_node(client_id)[0]:
            return None
        owners: dict[int, Instance] = {}
        for group_id in group_ids:
            shard = groups.partition_of(groups.runtime_for(group_id))
            if shard in self.membership.owned:
                return None
            owner = self.membership.view.owner(shard)
            if owner is None or owner.node_id == self.coordinator_id:
                return None
            owners[owner.node_id] = owner
        return next(iter(owners.values())) if len(owners) == 1 else None

    def _routes_of(self, ctx: "RequestContext") -> ConnectionRoutes:
        """The client connection's own connections onward (to upstream brokers and to other instances)."""
        routes = self._routes.get(id(ctx))
        if routes is None:
            routes = self._routes[id(ctx)] = ConnectionRoutes()
        return routes

    async def _to_peer(self, ctx: "RequestContext", owner: Instance, frame: bytes) -> Any:
        """A share request passed on to the instance owning its group (see `cohort.upstream.forward`),
        on a connection of this client connection's own: closing it releases what the client held there."""
        try:
            answer = await self._routes_of(ctx).get(("peer", owner.node_id), (owner.host, owner.port)).request(frame)
        except UpstreamGone as exc:
            log.debug("passing a share request to instance %d: %s", owner.node_id, exc)
            return CLOSE_WITHOUT_ANSWER
        return Unprefixed(answer)

    async def _forward(self, ctx: "RequestContext", node: int | None, api_key: int, frame: bytes, request: Any,
                       expect_answer: bool = True) -> Any:
        if not self.ready.is_set():
            await self.ready.wait()
        nodes = self.cluster.brokers.nodes
        target = node if node is not None else min(nodes)
        address = nodes.get(target)
        if address is None:
            return CLOSE_WITHOUT_ANSWER  # the broker left the upstream: the client asks Metadata again
        try:
            answer = await self._routes_of(ctx).get(target, address).request(frame, expect_answer)
        except UpstreamGone as exc:
            log.debug("forwarding to node %d: %s", target, exc)
            return CLOSE_WITHOUT_ANSWER
        if api_key in TOPIC_CHANGES:
            await self.refresh()
        if request is None:
            return Unprefixed(answer)
        return Encoded(self._rewrite(ctx, request, answer))

    def _rewrite(self, ctx: "RequestContext", request: Any, answer: bytes) -> bytes:
        """Metadata, DescribeCluster, FindCoordinator: upstream addresses become cohort's."""
        correlation_id, body = decode_response(request.api_key, request.version, answer)
        resp = request.codec.response_type
        if request.api_key == FIND_COORDINATOR:
            if has_field(resp, "coordinators"):
                coords = []
                for c in body.coordinators:
                    if c.node_id >= 0 and c.node_id in self.node_ports:
                        host, port = self.broker_endpoint(c.node_id)
                        c = dataclasses.replace(c, host=host, port=port)
                    coords.append(c)
                body = dataclasses.replace(body, coordinators=tuple(coords))
            elif body.node_id >= 0 and body.node_id in self.node_ports:
                host, port = self.broker_endpoint(body.node_id)
                body = dataclasses.replace(body, host=host, port=port)
        else:
            id_field = "node_id" if request.api_key == METADATA else "broker_id"
            brokers = []
            for b in body.brokers:
                node = getattr(b, id_field)
                if node in self.node_ports:
                    host, port = self.broker_endpoint(node)
                    brokers.append(dataclasses.replace(b, host=host, port=port))
            entry = nested(resp, "brokers")
            brokers.extend(build(entry, **{id_field: node, "host": host, "port": port, "rack": None})
                           for node, host, port in self.coordinators())
            body = dataclasses.replace(body, brokers=tuple(brokers))
        return encode_response(correlation_id, request.codec, body)

    def api_versions(self, ctx: "RequestContext", req: Any) -> Any:
        """cohort's own answer, with every forwarded API narrowed to what the upstream serves
        (once that is known: a client connecting sooner waits for it)."""
        if not self.upstream_versions:
            return self._api_versions_when_ready(ctx, req)
        return self._api_versions(ctx, req)

    async def _api_versions_when_ready(self, ctx: "RequestContext", req: Any) -> Any:
        await self.ready.wait()
        return self._api_versions(ctx, req)

    def _api_versions(self, ctx: "RequestContext", req: Any) -> Any:
        answer = self._local_api_versions(ctx, req)
        local = {k.api_key: k for k in answer.api_keys}
        entry = nested(req.codec.response_type, "api_keys")
        keys = []
        for api_key in sorted(set(local) | set(self.upstream_versions)):
            if api_key in LOCAL_APIS:
                if api_key in local:
                    keys.append(local[api_key])
                continue
            ours = SUPPORTED.get(api_key)
            theirs = self.upstream_versions.get(api_key)
            if ours is None or theirs is None:
                continue
            lo, hi = max(ours[1], theirs[0]), min(ours[2], theirs[1], VERSION_CAPS.get(api_key, 1 << 15))
            if lo <= hi:
                keys.append(build(entry, api_key=api_key, min_version=lo, max_version=hi))
        return dataclasses.replace(answer, api_keys=tuple(keys))


def _api_versions_request() -> type:
    from kio.index import load_request_schema

    return load_request_schema(API_VERSIONS, 3)

"""Several cohort instances in front of one upstream share the group coordinator's shards through
the upstream's own group membership: the upstream is the election, cohort builds none.

Every instance of cohort cluster ``C`` is a member of the classic consumer group ``cohort-C`` on
the upstream, subscribed to the shards' topic (``upstream.groups.topic``) with the
cooperative-sticky assignor. The partitions the group assigns an instance are the shards it
owns: it loads a shard when it is assigned (the upstream log fences the previous owner first)
and unloads it before giving it back, so a shard moves without being served twice. The assigned
partitions are paused at once: nothing is ever fetched through this membership.

* **Endpoints.** An instance describes itself in its member's client id (`Instance.client_id`):
  its coordinator node id and address, and its port for each upstream broker. Every instance
  reads the group (DescribeGroups, `cohort.upstream.admin`) after each rebalance and
  periodically, so all of them know which instance owns which shard (`ClusterView`).
* **Losing a shard without being told.** Classic membership is no lease. An instance cut off
  from the upstream does not hear that its shards moved; librdkafka ends the session itself when
  no heartbeat succeeded for ``session.timeout.ms`` (``rd_kafka_cgrp_session_timeout_check``)
  and reports the partitions lost, which unloads the shards here on the instance's own deadline.
  Writes of a zombie in the meantime are refused by the upstream (fenced); reads are bounded by
  that deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cohort.upstream.admin import GroupAdmin

log = logging.getLogger("cohort.upstream")

PREFIX = "cohort"  # first field of an instance's client id
DESCRIBE_PERIOD_S = 2.0  # how often the group is read again without a rebalance
JOINING_DESCRIBE_PERIOD_S = 0.25  # the same before this instance's first assignment
HANDOVER_TIMEOUT_S = 60.0  # longest an unload may hold up the membership (it answers the rebalance)


def membership_group(cluster: str) -> str:
    """The upstream consumer group whose members are the instances of cohort cluster ``cluster``."""
    return f"cohort-{cluster}"


@dataclass(frozen=True)
class Instance:
    """One cohort instance as the others see it."""

    node_id: int  # the node id clients see for its coordinator
    host: str
    port: int  # its coordinator (group API) listener
    brokers: Mapping[int, int] = field(default_factory=dict)  # upstream node id -> its port for that broker
    instance_id: str = ""  # its data dir's own id (`cohort.upstream.identity`); "" from instances before it
    explicit: bool = True  # its node id was set, not chosen (`identity.must_yield`)

    def client_id(self) -> str:
        ports = ",".join(f"{n}:{p}" for n, p in sorted(self.brokers.items()))
        mode = "set" if self.explicit else "auto"
        return f"{PREFIX};{self.node_id};{self.host};{self.port};{ports};{self.instance_id};{mode}"

    @classmethod
    def parse(cls, client_id: str) -> "Instance | None":
        """The instance a member's client id describes; None for anything else."""
        parts = client_id.split(";")
        if len(parts) not in (5, 7) or parts[0] != PREFIX:
            return None
        try:
            brokers = {int(n): int(p) for n, p in (e.split(":") for e in parts[4].split(",") if e)}
            if len(parts) == 5:  # an instance from before automatic node ids
                return cls(int(parts[1]), parts[2], int(parts[3]), brokers)
            return cls(int(parts[1]), parts[2], int(parts[3]), brokers, parts[5], parts[6] != "auto")
        except ValueError:
            return None


@dataclass(frozen=True)
class ClusterView:
    """Which instance owns which shard, as last read from the upstream group."""

    instances: tuple[Instance, ...] = ()  # live instances, by node id (one per node id)
    owners: Mapping[int, int] = field(default_factory=dict)  # shard -> owner's node id
    members: tuple[Instance, ...] = ()  # every member that is an instance, node ids shared or not

    def owner(self, shard: int) -> Instance | None:
        node = self.owners.get(shard)
        return next((i for i in self.instances if i.node_id == node), None)

    def shards_of(self, node_id: int) -> list[int]:
        return sorted(s for s, n in self.owners.items() if n == node_id)

    def broker_instance(self, upstream_node: int) -> Instance | None:
        """The instance through which every instance advertises upstream broker ``upstream_node``:
        one choice all of them agree on (clients are never told two addresses for one node id),
        spread over the instances that have a port for it."""
        able = [i for i in self.instances if upstream_node in i.brokers]
        return able[upstream_node % len(able)] if able else None

    def sharing(self, instance_id: str, node_id: int) -> list[Instance]:
        """The other instances (by instance id) that use node id ``node_id``."""
        return [i for i in self.members if i.node_id == node_id and i.instance_id != instance_id]

    @classmethod
    def of(cls, members: list[tuple[str, list[int]]]) -> "ClusterView":
        """From (client id, assigned shards) of the group's members. Two members with one node
        id (a restarted instance and its predecessor until that one's session times out, or a
        collision being resolved) are one instance to clients: the one holding shards."""
        instances: dict[int, Instance] = {}
        owners: dict[int, int] = {}
        found_all = []
        for client_id, shards in members:
            found = Instance.parse(client_id)
            if found is None:
                continue
            found_all.append(found)
            if found.node_id not in instances or shards:
                instances[found.node_id] = found
            for s in shards:
                owners[s] = found.node_id
        return cls(tuple(sorted(instances.values(), key=lambda i: i.node_id)), owners, tuple(found_all))


def describe_error(exc: BaseException) -> str:
    """One line for a failed admin request (a future's timeout has no message of its own)."""
    import confluent_kafka as ck

    if isinstance(exc, ck.KafkaException) and exc.args:
        return exc.args[0].str()
    return str(exc) or f"no answer ({type(exc).__name__})"


def read_view(admin: GroupAdmin, group: str, topic: str) -> ClusterView:
    """The cohort cluster's group as the upstream describes it now (blocking)."""
    members = []
    for m in admin.describe_members(group):
        members.append((m.client_id, [p for t, ps in m.assignment if t == topic for p in ps]))
    return ClusterView.of(members)


class Membership:
    """This instance's seat in its cohort cluster (see the module docstring). ``acquire(shards)``
    and ``release(shards)`` are coroutines run on the event loop; a release finishes before the
    shards are given back to the upstream group."""

    def __init__(self, client: Mapping[str, Any], cluster: str, topic: str, me: Instance, *,
                 acquire: Callable[[list[int]], Awaitable[None]], release: Callable[[list[int]], Awaitable[None]],
                 session_timeout_ms: int, timeout_s: float) -> None:
        self.group = membership_group(cluster)
        self.topic, self.me = topic, me
        self._client = dict(client)
        self._acquire, self._release = acquire, release
        self._session_timeout_ms = session_timeout_ms
        self._timeout = timeout_s
        self.view = ClusterView()
        self.owned: set[int] = set()  # shards this instance holds, as the group last said
        self.joined = asyncio.Event()  # set once the first assignment has been taken
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._changed = asyncio.Event()  # a rebalance happened: read the group again now
        self._describer: concurrent.futures.ThreadPoolExecutor | None = None

    # --- the event loop's side ---------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="cohort-membership", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Leave the group: every shard is released first (the others take them over at once)."""
        self._stop.set()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        if self._describer is not None:
            self._describer.shutdown(wait=False)

    async def follow(self, conflict: Callable[[ClusterView], str | None] = lambda view: None) -> str | None:
        """Keep `view` current: after each rebalance, and every DESCRIBE_PERIOD_S. Returns
        ``conflict(view)`` the first time it is not None (the caller leaves and rejoins or
        refuses), or None once stopped."""
        self._describer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cohort-membership-view")
        admin = GroupAdmin(self._client, self._timeout)
        loop = asyncio.get_running_loop()
        unlisted = False
        try:
            while not self._stop.is_set():
                self._changed.clear()
                try:
                    self.view = await loop.run_in_executor(self._describer, read_view, admin, self.group, self.topic)
                except Exception as exc:  # noqa: BLE001 - keep the last view; read again soon
                    log.warning("cannot read the cohort cluster's group %s on the upstream: %s", self.group,
                                describe_error(exc))
                else:
                    if self.joined.is_set() and not self.view.instances and not unlisted:
                        unlisted = True  # Tansu 0.6 answers DescribeGroups with no members
                        log.warning("the upstream's DescribeGroups does not list the members of %s: the instances of "
                                    "this cohort cluster cannot send clients to one another; run a single instance "
                                    "in front of this upstream", self.group)
                    if log.isEnabledFor(logging.DEBUG):
                        log.debug("cohort cluster %s: members %s", self.group,
                                  [(i.node_id, i.instance_id[:8]) for i in self.view.members])
                    verdict = conflict(self.view)
                    if verdict is not None:
                        return verdict
                try:  # often until the first assignment: a node id shared with another joiner shows then
                    await asyncio.wait_for(self._changed.wait(),
                                           DESCRIBE_PERIOD_S if self.joined.is_set() else JOINING_DESCRIBE_PERIOD_S)
                except asyncio.TimeoutError:
                    pass
            return None
        finally:
            self._describer.shutdown(wait=False)

    async def _assigned(self, shards: list[int]) -> None:
        self.owned.update(shards)
        self._changed.set()
        await self._acquire(shards)
        self.joined.set()

    async def _revoked(self, shards: list[int]) -> None:
        self.owned.difference_update(shards)
        self._changed.set()
        await self._release(shards)

    # --- the membership thread ---------------------------------------------------------------

    def _call(self, coro: Awaitable[None], wait: bool) -> None:
        assert self._loop is not None
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        except RuntimeError:  # the event loop is gone (the process is stopping): nothing left to serve
            coro.close()  # type: ignore[attr-defined]
            return
        if wait:
            try:
                fut.result(HANDOVER_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - the group must still hear back
                log.error("releasing shards for the cohort cluster's group: %r", exc)

    def _run(self) -> None:
        import confluent_kafka as ck

        def on_assign(consumer: Any, partitions: list) -> None:
            consumer.incremental_assign(partitions)
            if partitions:
                consumer.pause(partitions)
            shards = sorted(p.partition for p in partitions if p.topic == self.topic)
            if shards:
                log.info("cohort cluster %s: this instance takes shards %s", self.group, shards)
            self._call(self._assigned(shards), wait=False)

        def on_revoke(consumer: Any, partitions: list) -> None:
            shards = sorted(p.partition for p in partitions if p.topic == self.topic)
            if shards:
                log.info("cohort cluster %s: this instance gives up shards %s", self.group, shards)
                self._call(self._revoked(shards), wait=True)
            consumer.incremental_unassign(partitions)

        session = self._session_timeout_ms
        consumer = ck.Consumer({
            **self._client, "group.id": self.group, "client.id": self.me.client_id(),
            "partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "latest",
            "session.timeout.ms": session, "heartbeat.interval.ms": max(100, min(1000, session // 10)),
        })
        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        last_error = None
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                err = msg.error() if msg is not None else None
                if err is not None and err.str() != last_error:  # once per kind, not at every poll
                    last_error = err.str()  # e.g. a session timeout the upstream refuses
                    (log.error if err.fatal() else log.warning)("cohort cluster %s: %s", self.group, last_error)
        finally:
            consumer.close()  # leaves the group; on_revoke releases every shard first

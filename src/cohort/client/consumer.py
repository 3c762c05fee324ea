"""An asyncio consumer that speaks KIP-848 (ConsumerGroupHeartbeat) to any broker that does
(cohort, Kafka 4), and runs client-side assignors where the broker offers them (cohort).

Three tasks run beside the application: the membership (heartbeats, reconciliation, the
rebalance callbacks, a client-side assignment when the coordinator asks for one), the fetcher
(one Fetch per partition leader at a time, decoded into a buffer the application drains), and
auto-commit. Settings use Kafka's consumer names.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode as E

from cohort.client.assignors import AssignorMember, ClientAssignor, ClientGroupSpec, MemberAssignment
from cohort.client.connection import BrokerConnection, KafkaConnectionError, Security
from cohort.client.records import ConsumerRecord, decode_records
from cohort.protocol import extensions as x
from cohort.protocol.entities import build, nested
from cohort.protocol.versions import request_schema

log = logging.getLogger("cohort.client")

HEARTBEAT, PREPARE, INSTALL = 68, x.PREPARE_ASSIGNMENT_KEY, x.INSTALL_ASSIGNMENT_KEY
METADATA, FIND_COORDINATOR, OFFSET_FETCH, OFFSET_COMMIT, LIST_OFFSETS, FETCH = 3, 10, 9, 8, 2, 1
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
EARLIEST, LATEST = -2, -1

DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": None,
    "group.id": None,
    "group.instance.id": None,
    "client.id": "cohort-client",
    "client.rack": None,
    "group.remote.assignor": None,
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "max.poll.interval.ms": 300_000,
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
    "fetch.max.wait.ms": 500,
    "isolation.level": "read_uncommitted",
    "check.crcs": True,
    "retry.backoff.ms": 100,
    "request.timeout.ms": 30_000,
    "security.protocol": "PLAINTEXT",
    "ssl.ca.location": None,
    "ssl.certificate.location": None,
    "ssl.key.location": None,
    "ssl.key.password": None,
    "ssl.endpoint.identification.algorithm": "https",
    "sasl.mechanism": None,
    "sasl.username": None,
    "sasl.password": None,
}
_RETRIABLE_COORDINATOR = {E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress}
# a leader moving, a topic being created: worth reading the cluster again and retrying
_RETRIABLE_DATA = {E.not_leader_or_follower, E.unknown_topic_or_partition, E.leader_not_available,
                   E.fenced_leader_epoch, E.unknown_leader_epoch, E.offset_not_available}


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class KafkaError(Exception):
    """A Kafka error code the consumer cannot handle by itself."""

    def __init__(self, code: int, message: str | None = None) -> None:
        try:
            name = E(code).name.upper()
        except ValueError:
            name = f"error {code}"
        super().__init__(f"{name}: {message}" if message else name)
        self.code = code


class CommitFailedError(KafkaError):
    """An offset commit was refused (for example: the member lost its partitions meanwhile)."""


class NoOffsetForPartitionError(RuntimeError):
    """No committed offset and `auto.offset.reset` is `none`."""


def _ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


class Consumer:
    """A KIP-848 group consumer.

    ::

        consumer = Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"})
        consumer.subscribe(["orders"])
        await consumer.start()
        batch = await consumer.getmany(timeout_ms=1000)
        await consumer.commit()
        await consumer.close()

    `listener` may have `on_partitions_revoked`, `on_partitions_assigned` and
    `on_partitions_lost` (each called with a set of TopicPartition; plain or async functions).
    `assignors` are client-side assignors, by this member's precedence (cohort.client.assignors).
    """

    def __init__(self, config: Mapping[str, Any], *, assignors: Sequence[ClientAssignor] = (),
                 listener: Any = None) -> None:
        unknown = set(config) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown consumer settings: {', '.join(sorted(unknown))}")
        self.config = {**DEFAULTS, **config}
        for required in ("bootstrap.servers", "group.id"):
            if not self.config[required]:
                raise ValueError(f"the setting {required} is required")
        if self.config["auto.offset.reset"] not in ("earliest", "latest", "none"):
            raise ValueError("auto.offset.reset must be earliest, latest or none")
        if self.config["isolation.level"] not in ("read_uncommitted", "read_committed"):
            raise ValueError("isolation.level must be read_uncommitted or read_committed")
        self._security = Security.from_config(self.config)
        self.group_id: str = self.config["group.id"]
        self.member_id = uuid.uuid4().hex  # ConsumerGroupHeartbeat v1: the member makes its own id
        self.member_epoch = 0
        self._assignors = list(assignors)
        self._listener = listener
        self._topics: frozenset[str] = frozenset()
        self._pattern: str | None = None
        self._subscription_changed = False
        self._send_full = True
        self._owned: set[TopicPartition] = set()
        self._owned_changed = False
        self._positions: dict[TopicPartition, int] = {}  # next offset to hand to the application
        self._fetch_positions: dict[TopicPartition, int] = {}  # next offset to fetch
        self._buffer: deque[tuple[TopicPartition, list[ConsumerRecord]]] = deque()
        self._buffered: set[TopicPartition] = set()
        self._iterated: deque[ConsumerRecord] = deque()  # what `async for` took but has not yielded yet
        self._interval_s = 5.0
        self._assignment_result: tuple[int, int, bytes] = (0, 0, b"")
        # The coordinator's latest assignment not reconciled yet: a revocation waits until the
        # application is done with the records it was given (its next getmany), as Kafka's
        # consumers revoke only inside poll(); otherwise a record handed out just before the
        # revocation and committed just after it would be consumed again by the next owner.
        self._target: set[TopicPartition] | None = None
        self._handed_out = False  # getmany returned records and has not been called since
        # cluster view
        self._bootstrap: list[tuple[str, int]] = []
        for entry in str(self.config["bootstrap.servers"]).split(","):
            host, _, port = entry.strip().rpartition(":")
            self._bootstrap.append((host or "127.0.0.1", int(port)))
        self._brokers: dict[int, tuple[str, int]] = {}
        self._conns: dict[int, BrokerConnection] = {}
        self._any_conn: BrokerConnection | None = None
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._coordinator: BrokerConnection | None = None
        # tasks and signals
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()  # heartbeat now
        self._data = asyncio.Event()  # records buffered
        self._fetch_wake = asyncio.Event()  # something to fetch
        self._fatal: BaseException | None = None
        self._closing = False
        self._started = False
        self._membership_lock = asyncio.Lock()

    # ---------------------------------------------------------------- the application's side

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Subscribe to topic names, or to a regular expression (RE2, matched by the broker)."""
        self._topics, self._pattern = frozenset(topics), pattern
        if listener is not None:
            self._listener = listener
        self._subscription_changed = True
        self._wake.set()

    def unsubscribe(self) -> None:
        self.subscribe(())

    def assignment(self) -> set[TopicPartition]:
        return set(self._owned)

    def position(self, tp: TopicPartition) -> int | None:
        return self._positions.get(tp)

    @property
    def assignment_metadata(self) -> tuple[int, int, bytes]:
        """(error, version, bytes) a client-side assignor gave this member with its partitions."""
        return self._assignment_result

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self._refresh_metadata()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._membership(), name="cohort-client-membership"),
                       loop.create_task(self._fetching(), name="cohort-client-fetcher")]
        if self.config["enable.auto.commit"]:
            self._tasks.append(loop.create_task(self._auto_commit(), name="cohort-client-auto-commit"))

    async def __aenter__(self) -> "Consumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def getmany(self, timeout_ms: int = 1000, max_records: int | None = None) -> dict[TopicPartition, list]:
        """The records buffered now, or the first to arrive within `timeout_ms` ({} if none)."""
        self._raise_fatal()
        if self._handed_out:
            self._handed_out = False
            if self._target is not None:  # a revocation waited for this call: made before any new record
                async with self._membership_lock:
                    if await self._reconcile_target():
                        self._wake.set()  # tell the coordinator now
        if not self._buffer:
            self._data.clear()
            try:
                await asyncio.wait_for(self._data.wait(), timeout_ms / 1000)
            except asyncio.TimeoutError:
                self._raise_fatal()
                return {}
            self._raise_fatal()
        out: dict[TopicPartition, list] = {}
        budget = max_records if max_records is not None else 1 << 62
        while self._buffer and budget > 0:
            tp, records = self._buffer[0]
            if tp not in self._owned or self._positions.get(tp) != records[0].offset:
                self._buffer.popleft()  # revoked, reset or sought since it was fetched
                self._buffered.discard(tp)
                continue
            if len(records) > budget:
                taken, self._buffer[0] = records[:budget], (tp, records[budget:])
            else:
                taken = records
                self._buffer.popleft()
                self._buffered.discard(tp)
                self._fetch_wake.set()
            out.setdefault(tp, []).extend(taken)
            self._positions[tp] = taken[-1].offset + 1
            budget -= len(taken)
        self._handed_out = bool(out)
        return out

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._iterated:
            batch = await self.getmany(timeout_ms=1000)
            self._iterated.extend(r for records in batch.values() for r in records)
        return self._iterated.popleft()

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (next offsets to read), by default the positions of every owned
        partition; raises CommitFailedError when the coordinator refuses them."""
        if offsets is None:
            offsets = {tp: p for tp, p in self._positions.items() if tp in self._owned}
        if not offsets:
            return
        backoff = self.config["retry.backoff.ms"] / 1000
        for attempt in range(10):
            try:
                coordinator = await self._coordinator_conn()
                by_topic: dict[str, list] = {}
                for tp, offset in sorted(offsets.items()):
                    by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
                resp = await coordinator.request(
                    OFFSET_COMMIT, 9, group_id=self.group_id, generation_id_or_member_epoch=self.member_epoch,
                    member_id=self.member_id, group_instance_id=self.config["group.instance.id"],
                    topics=tuple(_commit_topic(t, parts) for t, parts in by_topic.items()))
            except (KafkaConnectionError, OSError):
                self._coordinator = None
                await asyncio.sleep(backoff)
                continue
            codes = {int(p.error_code) for t in resp.topics for p in t.partitions} - {0}
            if not codes:
                return
            if codes == {E.stale_member_epoch} and attempt < 9:
                # KIP-848: the epoch moved under the commit; retry with the next heartbeat's epoch,
                # for the partitions this member still owns
                self._wake.set()
                await asyncio.sleep(backoff)
                offsets = {tp: o for tp, o in offsets.items() if tp in self._owned}
                if not offsets:
                    return
                continue
            if codes & _RETRIABLE_COORDINATOR and attempt < 9:
                if E.not_coordinator in codes or E.coordinator_not_available in codes:
                    self._coordinator = None
                await asyncio.sleep(backoff)
                continue
            raise CommitFailedError(min(codes), "the offset commit was refused")
        raise CommitFailedError(E.coordinator_not_available, "no coordinator answered the commit")

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None,
                     callback: Callable[[BaseException | None], Any] | None = None) -> asyncio.Task:
        """Commit in the background; `callback(error or None)` when done."""
        task = asyncio.get_running_loop().create_task(self.commit(offsets))
        if callback is not None:
            task.add_done_callback(lambda t: callback(None if t.cancelled() else t.exception()))
        return task

    async def close(self) -> None:
        """Commit (with auto-commit), revoke, leave the group (a static member leaves temporarily)
        and close every connection."""
        if self._closing:
            return
        self._closing = True
        async with self._membership_lock:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                    pass
            try:
                if self._owned:
                    if self.config["enable.auto.commit"] and self.member_epoch > 0 and self._fatal is None:
                        try:
                            await asyncio.wait_for(self.commit(), self.config["request.timeout.ms"] / 1000)
                        except (KafkaError, asyncio.TimeoutError) as exc:
                            log.warning("the commit on close failed: %s", exc)
                    await self._call("on_partitions_revoked", set(self._owned))
                if self.member_epoch > 0 or self._owned or not self._send_full:
                    await self._leave()
            finally:
                for conn in list(self._conns.values()) + [c for c in (self._any_conn, self._coordinator) if c is not None]:
                    await conn.close()
                self._conns.clear()

    # ---------------------------------------------------------------- cluster metadata

    async def _bootstrap_conn(self) -> BrokerConnection:
        if self._any_conn is not None and not self._any_conn.closed:
            return self._any_conn
        for node_id, conn in self._conns.items():
            if not conn.closed:
                return conn
        errors = []
        for host, port in self._bootstrap:
            try:
                self._any_conn = await BrokerConnection.open(host, port, self.config["client.id"],
                                                             security=self._security)
                return self._any_conn
            except (KafkaConnectionError, OSError) as exc:
                errors.append(str(exc))
        raise KafkaConnectionError(f"no bootstrap server answered: {'; '.join(errors)}")

    async def _refresh_metadata(self) -> None:
        conn = await self._bootstrap_conn()
        resp = await conn.request(METADATA, 12, topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        self._brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        leaders: dict[TopicPartition, int] = {}
        for t in resp.topics:
            if t.error_code or t.name is None:
                continue
            self._names[t.topic_id] = t.name
            self._ids[t.name] = t.topic_id
            for p in t.partitions:
                leaders[TopicPartition(t.name, p.partition_index)] = p.leader_id
        self._leaders = leaders

    async def _broker(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        if node_id not in self._brokers:
            await self._refresh_metadata()
        host, port = self._brokers[node_id]
        conn = self._conns[node_id] = await BrokerConnection.open(host, port, self.config["client.id"], node_id,
                                                                  security=self._security)
        return conn

    async def _coordinator_conn(self) -> BrokerConnection:
        if self._coordinator is not None and not self._coordinator.closed:
            return self._coordinator
        conn = await self._bootstrap_conn()
        resp = await conn.request(FIND_COORDINATOR, 4, key_type=0, coordinator_keys=(self.group_id,))
        (found,) = resp.coordinators
        if found.error_code:
            raise KafkaConnectionError(f"no coordinator for group {self.group_id}: {found.error_message}")
        # A connection of its own, as Kafka's clients keep: responses come back in request order,
        # so a heartbeat or commit behind a long-polling Fetch would wait for it.
        if self._coordinator is not None:
            await self._coordinator.close()
        self._coordinator = await BrokerConnection.open(found.host, found.port, self.config["client.id"],
                                                        found.node_id, security=self._security)
        return self._coordinator

    # ---------------------------------------------------------------- membership

    def _heartbeat_request(self) -> Any:
        full = self.member_epoch == 0 or self._send_full
        subscription = full or self._subscription_changed
        owned: dict[uuid.UUID, list[int]] = {}
        for tp in self._owned:
            owned.setdefault(self._ids[tp.topic], []).append(tp.partition)
        assignors = None
        if self._assignors and full:
            assignors = tuple(_assignor_entry(a) for a in self._assignors)
        return x.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            instance_id=self.config["group.instance.id"] if full else None,
            rack_id=self.config["client.rack"] if full else None,
            rebalance_timeout=_ms(self.config["max.poll.interval.ms"] if full else -1),
            subscribed_topic_names=tuple(sorted(self._topics)) if subscription and self._pattern is None else None,
            subscribed_topic_regex=self._pattern if subscription and self._pattern is not None else None,
            server_assignor=self.config["group.remote.assignor"] if full else None,
            topic_partitions=tuple(x.HeartbeatTopicPartitions(topic_id=t, partitions=tuple(sorted(ps)))
                                   for t, ps in sorted(owned.items())) if full or self._owned_changed else None,
            client_assignors=assignors,
        )

    async def _membership(self) -> None:
        backoff = self.config["retry.backoff.ms"] / 1000
        try:
            while True:
                if not self._topics and self._pattern is None:
                    if self.member_epoch > 0 or self._owned:
                        async with self._membership_lock:
                            await self._leave()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                async with self._membership_lock:
                    delay = await self._heartbeat_once(backoff)
                if delay is None:
                    return
                if delay:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - surfaced to the application
            self._set_fatal(exc)

    async def _heartbeat_once(self, backoff: float) -> float | None:
        """One heartbeat and what follows from it; the delay before the next (None: stop)."""
        changed = (self._subscription_changed, self._owned_changed, self._send_full)
        try:
            coordinator = await self._coordinator_conn()
            resp = await asyncio.wait_for(coordinator.request(HEARTBEAT, 1, self._heartbeat_request()),
                                          self.config["request.timeout.ms"] / 1000)
        except (KafkaConnectionError, OSError, asyncio.TimeoutError) as exc:
            log.debug("heartbeat: %s", exc)
            self._coordinator = None
            self._send_full = True  # the response may be lost: say everything again
            return backoff
        code = int(resp.error_code)
        if code in (E.not_coordinator, E.coordinator_not_available):
            self._coordinator = None
            return backoff
        if code == E.coordinator_load_in_progress:
            return backoff
        if code in (E.fenced_member_epoch, E.unknown_member_id):
            await self._lose(f"{E(code).name}: {resp.error_message}")
            return 0
        if code:
            self._set_fatal(KafkaError(code, resp.error_message))
            return None
        if changed[0] == self._subscription_changed:
            self._subscription_changed = False
        if changed[1] == self._owned_changed:
            self._owned_changed = False
        self._send_full = False
        self.member_epoch = resp.member_epoch
        self._interval_s = resp.heartbeat_interval.total_seconds()
        now_again = False
        if resp.assignment is not None:
            target = set()
            for tp in resp.assignment.topic_partitions:
                name = self._names.get(tp.topic_id)
                if name is None:
                    await self._refresh_metadata()
                    name = self._names.get(tp.topic_id)
                if name is not None:
                    target.update(TopicPartition(name, p) for p in tp.partitions)
            self._assignment_result = (int(getattr(resp.assignment, "error", 0)),
                                       int(getattr(resp.assignment, "metadata_version", 0)),
                                       bytes(getattr(resp.assignment, "metadata_bytes", b"")))
            self._target = target
        if self._target is not None:
            now_again = await self._reconcile_target()
        if getattr(resp, "should_compute_assignment", False):
            await self._compute_assignment()
            now_again = True
        if self.member_epoch == 0:  # a new group waiting for its first client-side assignment
            self._send_full = True
        return 0 if now_again else self._interval_s

    async def _reconcile_target(self) -> bool:
        """Reconcile with the pending target, unless it revokes a partition while the
        application still has records it was given (then after its next getmany)."""
        target = self._target
        if target is None or (self._handed_out and self._owned - target):
            return False
        self._target = None
        return await self._reconcile(target)

    async def _reconcile(self, target: set[TopicPartition]) -> bool:
        """Revoke first, then assign; True when the coordinator must hear of it now."""
        revoked, added = self._owned - target, target - self._owned
        if revoked:
            if self.config["enable.auto.commit"] and self.member_epoch > 0:
                try:
                    await self.commit({tp: p for tp, p in self._positions.items() if tp in revoked})
                except KafkaError as exc:
                    log.warning("the commit before revoking %s failed: %s", sorted(revoked), exc)
            await self._call("on_partitions_revoked", revoked)
            self._drop(revoked)
        if added:
            await self._init_positions(added)
            self._owned |= added
            await self._call("on_partitions_assigned", added)
            self._fetch_wake.set()
        if revoked or added:
            self._owned_changed = True
            return True
        return False

    def _drop(self, tps: set[TopicPartition]) -> None:
        self._owned -= tps
        for tp in tps:
            self._positions.pop(tp, None)
            self._fetch_positions.pop(tp, None)
            self._buffered.discard(tp)
        self._buffer = deque(entry for entry in self._buffer if entry[0] not in tps)

    async def _lose(self, why: str) -> None:
        log.info("member %s of group %s lost its partitions (%s); rejoining", self.member_id, self.group_id, why)
        lost = set(self._owned)
        self._target = None
        if lost:
            await self._call("on_partitions_lost" if self._has("on_partitions_lost") else "on_partitions_revoked",
                             lost)
            self._drop(lost)
        self.member_epoch = 0
        self._send_full = True

    async def _leave(self) -> None:
        static = self.config["group.instance.id"] is not None
        try:
            coordinator = await self._coordinator_conn()
            await asyncio.wait_for(coordinator.request(HEARTBEAT, 1, x.ConsumerGroupHeartbeatRequest(
                group_id=self.group_id, member_id=self.member_id,
                member_epoch=STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH,
                instance_id=self.config["group.instance.id"], topic_partitions=None)), 5)
        except (KafkaConnectionError, OSError, asyncio.TimeoutError) as exc:
            log.warning("leaving group %s: %s", self.group_id, exc)
        self._target = None
        self._drop(set(self._owned))
        self.member_epoch = 0
        self._send_full = True

    async def _compute_assignment(self) -> None:
        """The coordinator chose this member: Prepare, run the selected assignor, Install."""
        coordinator = await self._coordinator_conn()
        prepared = await coordinator.request(PREPARE, 0, x.ConsumerGroupPrepareAssignmentRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch))
        if prepared.error_code:
            log.info("prepare assignment: %s", KafkaError(int(prepared.error_code), prepared.error_message))
            return
        assignor = next((a for a in self._assignors if a.name == prepared.assignor_name), None)
        if assignor is None:
            log.warning("the coordinator selected assignor %s, which this member does not have", prepared.assignor_name)
            return
        names = {t.topic_id: t.topic_name for t in prepared.topics}
        ids = {t.topic_name: t.topic_id for t in prepared.topics}
        spec = ClientGroupSpec(
            self.group_id, prepared.group_epoch,
            {m.member_id: AssignorMember(
                m.member_id, m.instance_id, m.rack_id,
                frozenset(names[t] for t in m.subscribed_topic_ids if t in names), m.assignor_version,
                bytes(m.assignor_metadata),
                {names[tp.topic_id]: tuple(tp.partitions) for tp in m.topic_partitions if tp.topic_id in names})
             for m in prepared.members},
            {t.topic_name: t.num_partitions for t in prepared.topics}, ids)
        try:
            result = assignor.assign(spec)
        except Exception:  # noqa: BLE001 - another member will be chosen after the rebalance timeout
            log.exception("client-side assignor %s failed", assignor.name)
            return
        members = []
        for member_id, assigned in sorted(result.items()):
            if not isinstance(assigned, MemberAssignment):
                assigned = MemberAssignment(assigned)
            members.append(x.InstalledMember(
                member_id=member_id, metadata_version=assigned.metadata_version, metadata_bytes=assigned.metadata,
                topic_partitions=tuple(x.InstalledTopicPartitions(topic_id=ids[t], partitions=tuple(sorted(ps)))
                                       for t, ps in sorted(assigned.partitions.items()) if ps)))
        installed = await coordinator.request(INSTALL, 0, x.ConsumerGroupInstallAssignmentRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            group_epoch=prepared.group_epoch, error=0, members=tuple(members)))
        if installed.error_code:
            log.info("install assignment: %s", KafkaError(int(installed.error_code), installed.error_message))

    def _has(self, name: str) -> bool:
        return self._listener is not None and callable(getattr(self._listener, name, None))

    async def _call(self, name: str, partitions: set[TopicPartition]) -> None:
        if not self._has(name):
            return
        try:
            result = getattr(self._listener, name)(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception:  # noqa: BLE001 - Kafka's consumer logs a failing listener and goes on
            log.exception("%s raised", name)

    # ---------------------------------------------------------------- positions

    async def _init_positions(self, tps: set[TopicPartition]) -> None:
        committed = await self._committed(tps)
        missing = set()
        for tp in tps:
            offset = committed.get(tp, -1)
            if offset >= 0:
                self._positions[tp] = self._fetch_positions[tp] = offset
            else:
                missing.add(tp)
        if missing:
            await self._reset(missing)

    async def _committed(self, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
        backoff = self.config["retry.backoff.ms"] / 1000
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        for _ in range(20):
            try:
                coordinator = await self._coordinator_conn()
                resp = await coordinator.request(OFFSET_FETCH, 9, groups=(_offset_fetch_group(
                    self.group_id, self.member_id, self.member_epoch, by_topic),), require_stable=True)
            except (KafkaConnectionError, OSError):
                self._coordinator = None
                await asyncio.sleep(backoff)
                continue
            (group,) = resp.groups
            codes = {int(group.error_code)} | {int(p.error_code) for t in group.topics for p in t.partitions}
            codes.discard(0)
            if codes & (_RETRIABLE_COORDINATOR | {E.unstable_offset_commit}):
                if codes & {E.not_coordinator, E.coordinator_not_available}:
                    self._coordinator = None
                await asyncio.sleep(backoff)
                continue
            if codes:
                raise KafkaError(min(codes), "fetching committed offsets failed")
            return {TopicPartition(t.name, p.partition_index): p.committed_offset
                    for t in group.topics for p in t.partitions}
        raise KafkaError(E.coordinator_not_available, "no coordinator answered OffsetFetch")

    async def _reset(self, tps: set[TopicPartition], attempts: int = 20) -> None:
        policy = self.config["auto.offset.reset"]
        if policy == "none":
            raise NoOffsetForPartitionError(f"no committed offset for {sorted(tps)}")
        timestamp = EARLIEST if policy == "earliest" else LATEST
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            if tp not in self._leaders:
                await self._refresh_metadata()
            by_leader.setdefault(self._leaders.get(tp, -1), []).append(tp)
        retry: set[TopicPartition] = set()
        for leader, group in by_leader.items():
            conn = await self._broker(leader)
            by_topic: dict[str, list[int]] = {}
            for tp in group:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            resp = await conn.request(LIST_OFFSETS, conn.pick(LIST_OFFSETS, 7), replica_id=-1,
                                      isolation_level=self._isolation(), topics=tuple(
                                          _list_offsets_topic(t, ps, timestamp) for t, ps in by_topic.items()))
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code in _RETRIABLE_DATA:
                        retry.add(tp)
                    elif p.error_code:
                        raise KafkaError(int(p.error_code), f"ListOffsets for {t.name}-{p.partition_index}")
                    else:
                        self._positions[tp] = self._fetch_positions[tp] = p.offset
        if retry:
            if attempts <= 1:
                raise KafkaError(E.not_leader_or_follower, f"ListOffsets for {sorted(retry)} kept failing")
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
            await self._refresh_metadata()
            await self._reset(retry, attempts - 1)

    def _isolation(self) -> int:
        return 1 if self.config["isolation.level"] == "read_committed" else 0

    # ---------------------------------------------------------------- fetching

    async def _fetching(self) -> None:
        backoff = self.config["retry.backoff.ms"] / 1000
        try:
            while True:
                wanted = [tp for tp in self._owned if tp in self._fetch_positions and tp not in self._buffered]
                if not wanted:
                    self._fetch_wake.clear()
                    await self._fetch_wake.wait()
                    continue
                by_leader: dict[int, list[TopicPartition]] = {}
                for tp in wanted:
                    by_leader.setdefault(self._leaders.get(tp, -1), []).append(tp)
                if -1 in by_leader:
                    await self._refresh_metadata()
                    by_leader.pop(-1)
                results = await asyncio.gather(*(self._fetch_from(n, tps) for n, tps in by_leader.items()),
                                               return_exceptions=True)
                if any(isinstance(r, BaseException) for r in results) or not by_leader:
                    for r in results:
                        if isinstance(r, BaseException) and not isinstance(r, (KafkaConnectionError, OSError)):
                            raise r
                    await asyncio.sleep(backoff)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - surfaced to the application
            self._set_fatal(exc)

    async def _fetch_from(self, node_id: int, tps: list[TopicPartition]) -> None:
        conn = await self._broker(node_id)
        started = {tp: self._fetch_positions[tp] for tp in tps}
        by_topic: dict[str, list] = {}
        max_partition = self.config["max.partition.fetch.bytes"]
        for tp, offset in started.items():
            by_topic.setdefault(tp.topic, []).append(_fetch_partition(tp.partition, offset, max_partition))
        resp = await conn.request(
            FETCH, 12, replica_id=-1, max_wait=_ms(self.config["fetch.max.wait.ms"]),
            min_bytes=self.config["fetch.min.bytes"], max_bytes=self.config["fetch.max.bytes"],
            isolation_level=self._isolation(), session_id=0, session_epoch=-1,
            topics=tuple(_fetch_topic(t, ps) for t, ps in by_topic.items()), forgotten_topics_data=(), rack_id="")
        if resp.error_code:
            raise KafkaError(int(resp.error_code), "Fetch")
        committed_only = self.config["isolation.level"] == "read_committed"
        refresh = False
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                if tp not in started or self._fetch_positions.get(tp) != started[tp] or tp not in self._owned:
                    continue  # revoked or moved while the fetch was out
                code = int(p.error_code)
                if code == E.offset_out_of_range:
                    await self._reset({tp})
                    continue
                if code:
                    refresh = True
                    continue
                if not p.records:
                    continue
                aborted = ([(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()]
                           if committed_only else None)
                records, next_offset = decode_records(tp.topic, tp.partition, p.records, started[tp], aborted,
                                                      self.config["check.crcs"])
                self._fetch_positions[tp] = next_offset
                if records:
                    self._buffer.append((tp, records))
                    self._buffered.add(tp)
                    self._data.set()
                elif next_offset != started[tp]:
                    self._positions[tp] = max(self._positions.get(tp, next_offset), next_offset)
        if refresh:  # a leader moved or a topic went: read the cluster again, after a pause
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
            await self._refresh_metadata()

    async def _auto_commit(self) -> None:
        interval = self.config["auto.commit.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            if self.member_epoch > 0 and self._owned:
                try:
                    async with self._membership_lock:
                        await self.commit()
                except KafkaError as exc:
                    log.warning("auto-commit failed: %s", exc)

    def _set_fatal(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._data.set()

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal


# ---------------------------------------------------------------- request pieces

def _assignor_entry(a: ClientAssignor) -> Any:
    version, metadata = a.metadata()
    return x.ClientAssignor(name=a.name, minimum_version=a.minimum_version, maximum_version=a.maximum_version,
                            reason=0, metadata_version=version, metadata_bytes=metadata)


def _commit_topic(topic: str, parts: list[tuple[int, int]]) -> Any:
    topic_cls = nested(request_schema(OFFSET_COMMIT, 9), "topics")
    part_cls = nested(topic_cls, "partitions")
    return build(topic_cls, name=topic, partitions=tuple(
        build(part_cls, partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
        for p, o in parts))


def _offset_fetch_group(group_id: str, member_id: str, epoch: int, by_topic: dict[str, list[int]]) -> Any:
    group_cls = nested(request_schema(OFFSET_FETCH, 9), "groups")
    topic_cls = nested(group_cls, "topics")
    return build(group_cls, group_id=group_id, member_id=member_id, member_epoch=epoch, topics=tuple(
        build(topic_cls, name=t, partition_indexes=tuple(sorted(ps))) for t, ps in sorted(by_topic.items())))


def _list_offsets_topic(topic: str, partitions: list[int], timestamp: int) -> Any:
    topic_cls = nested(request_schema(LIST_OFFSETS, 7), "topics")
    part_cls = nested(topic_cls, "partitions")
    return build(topic_cls, name=topic, partitions=tuple(
        build(part_cls, partition_index=p, current_leader_epoch=-1, timestamp=timestamp) for p in sorted(partitions)))


def _fetch_partition(partition: int, offset: int, max_bytes: int) -> Any:
    cls = nested(nested(request_schema(FETCH, 12), "topics"), "partitions")
    return cls(partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
               log_start_offset=-1, partition_max_bytes=max_bytes)


def _fetch_topic(topic: str, partitions: list) -> Any:
    return nested(request_schema(FETCH, 12), "topics")(topic=topic, partitions=tuple(partitions))


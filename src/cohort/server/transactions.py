"""The transaction coordinator's host and the transaction APIs.

Each ``__transaction_state`` partition's `TransactionCoordinatorShard` is hosted by a
`CoordinatorRuntime` (its log replayed on start, its writes answered once durable), and a
transactional id goes to the shard Kafka's hash of it picks. This module also does what Kafka's
TransactionMarkerChannelManager does, inside the broker: once a PrepareCommit / PrepareAbort is
durable it writes the markers (data partitions through the broker, ``__consumer_offsets``
partitions through their group coordinator shard), then completes the transaction. A marker
write that fails is retried until it succeeds, so a transaction the coordinator decided is
always finished, after a restart too.

APIs: InitProducerId (with a transactional id; without one the broker's idempotent path
answers), AddPartitionsToTxn (v0-3 from clients, v4-5 batched), AddOffsetsToTxn, EndTxn,
TxnOffsetCommit (verified here, written by the group coordinator), WriteTxnMarkers (what
``kafka-transactions.sh abort`` sends), DescribeTransactions, ListTransactions and
DescribeProducers (KIP-664).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cohort.broker.coordinator_log import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from cohort.coordinator import partition_for
from cohort.coordinator import requests as rq
from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, error_code, nested
from cohort.security import acls
from cohort.server import handlers
from cohort.coordinator_common.runtime import CoordinatorRuntime, Failed, now_ms
from cohort.transactions import coordinator as tc
from cohort.transactions.records import STATE_BY_NAME, decode, encode
from cohort.transactions.requests import (
    AddPartitions,
    CompleteTxn,
    EndTxn,
    InitProducerId,
    MarkerJob,
)

if TYPE_CHECKING:
    from cohort.server.context import RequestContext
    from cohort.server.server import Server

log = logging.getLogger("cohort.transactions")
E = ErrorCode
ZERO = datetime.timedelta(0)
LOADING = "the transaction coordinator is loading"
MARKER_RETRY_S = 0.1
PLACEMENT_CACHE = 100_000  # transactional ids whose shard is remembered (cleared when full: ids are client input)


def install(server: "Server") -> None:
    coordinator = TransactionCoordinator(server)
    server.transaction_coordinator = coordinator  # type: ignore[attr-defined]
    reg = server.apis.register
    reg(22, coordinator.init_producer_id, min_version=0, max_version=4)
    reg(24, coordinator.add_partitions_to_txn, min_version=0, max_version=5)
    reg(25, coordinator.add_offsets_to_txn, min_version=0, max_version=4)
    reg(26, coordinator.end_txn, min_version=0, max_version=4)  # v5 is transaction.version 2
    reg(27, coordinator.write_txn_markers, min_version=1, max_version=1)
    reg(28, coordinator.txn_offset_commit, min_version=0, max_version=4)  # v5 is transaction.version 2
    reg(61, coordinator.describe_producers, min_version=0, max_version=0)
    reg(65, coordinator.describe_transactions, min_version=0, max_version=0)
    reg(66, coordinator.list_transactions, min_version=0, max_version=1)
    server.broker.transaction_verifier = coordinator.verify
    server.startup_hooks.append(coordinator.load)
    server.shutdown_hooks.append(coordinator.unload)


def _millis(td: Any) -> int:
    return int(td.total_seconds() * 1000) if isinstance(td, datetime.timedelta) else int(td)


class TransactionCoordinator:
    """The transaction coordinator's shards and their marker writing (see the module docstring)."""

    def __init__(self, server: "Server") -> None:
        self.server = server
        self.broker = server.broker
        config = server.config
        self.config = tc.TxnConfig(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            expiration_check_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"])
        self.runtimes: list[CoordinatorRuntime] = []
        offsets_partitions = len(self.broker.coordinator_logs)
        group_order = server.group_coordinator.order  # type: ignore[attr-defined]
        self._markers_due = asyncio.Event()
        for p, tlog in enumerate(self.broker.transaction_logs):
            shard = tc.TransactionCoordinatorShard(
                self.config, producer_ids=self.broker.next_producer_id,
                offsets_partition=lambda group: (OFFSETS_TOPIC, partition_for(group, offsets_partitions)),
                markers_ready=self._markers_due.set)
            self.runtimes.append(CoordinatorRuntime(
                f"{TRANSACTION_STATE_TOPIC}-{p}", shard, tlog, encode=encode, decode=decode,
                offload=lambda fn, *args: server.offload(fn, *args), order=group_order, loading_message=LOADING))
        self._in_flight: set[str] = set()  # transactional ids whose markers are being written
        self._placed: dict[str, CoordinatorRuntime] = {}  # transactional id -> its shard's runtime (a cache)

    # --- placement, lifecycle ----------------------------------------------------------------

    def runtime_for(self, transactional_id: str) -> CoordinatorRuntime:
        if len(self.runtimes) == 1:
            return self.runtimes[0]
        placed = self._placed.get(transactional_id)
        if placed is None:  # Java's String.hashCode in Python costs microseconds: once per id
            if len(self._placed) >= PLACEMENT_CACHE:
                self._placed.clear()
            placed = self._placed[transactional_id] = self.runtimes[partition_for(transactional_id, len(self.runtimes))]
        return placed

    async def load(self) -> None:
        for runtime in self.runtimes:
            await runtime.load()
            self.server.spawn(runtime.timer_loop())
        self.server.spawn(self._marker_loop())
        self._markers_due.set()  # decided transactions found in the log get their markers

    async def unload(self) -> None:
        for runtime in self.runtimes:
            runtime.unload()

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partition: tuple[str, int]) -> int:
        """KIP-890 verification for the broker's transactional appends and TxnOffsetCommit."""
        runtime = self.runtime_for(transactional_id)
        if not runtime.loaded:
            return tc.CONCURRENT_TRANSACTIONS  # retriable for the producer
        return runtime.shard.verify(transactional_id, producer_id, producer_epoch, partition)

    # --- markers -----------------------------------------------------------------------------

    async def _marker_loop(self) -> None:
        """Write the markers of every transaction whose PrepareCommit / PrepareAbort is durable."""
        while True:
            await self._markers_due.wait()
            self._markers_due.clear()
            for runtime in self.runtimes:
                if not runtime.loaded:
                    continue
                for job in runtime.shard.markers_due():
                    if job.transactional_id not in self._in_flight:
                        self._in_flight.add(job.transactional_id)
                        self.server.spawn(self._finish(runtime, job))

    async def _finish(self, runtime: CoordinatorRuntime, job: MarkerJob) -> None:
        try:
            remaining = list(job.partitions)
            while remaining:
                remaining = [tp for tp in remaining if not await self._write_marker(job, tp)]
                if remaining:
                    await asyncio.sleep(MARKER_RETRY_S)
            while True:
                done = await runtime.write_async(CompleteTxn(job.transactional_id, job.producer_id, job.producer_epoch))
                if not isinstance(done, Failed):
                    break
                if not runtime.loaded:
                    return  # unloaded: the next load finds the transaction prepared and finishes it
                await asyncio.sleep(MARKER_RETRY_S)
        finally:
            self._in_flight.discard(job.transactional_id)
            self._markers_due.set()  # a transaction prepared again meanwhile

    async def _mark(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    topic: str, partition: int) -> int:
        """Write one partition's marker; its WriteTxnMarkers error code. ``__consumer_offsets``
        partitions go through their group shard (a lost write: NOT_LEADER_OR_FOLLOWER, as Kafka
        reports the group coordinator's errors)."""
        if topic == OFFSETS_TOPIC:
            groups = self.server.group_coordinator  # type: ignore[attr-defined]
            if not 0 <= partition < len(groups.runtimes):
                return E.unknown_topic_or_partition
            if not groups.runtimes[partition].log.supports_transactions:
                return E.none  # it refuses TxnOffsetCommit: no pending offset there to settle
            result = await groups.runtimes[partition].write_async(
                rq.TxnMarkerRequest(producer_id, producer_epoch, commit, coordinator_epoch))
            return E.not_leader_or_follower if isinstance(result, Failed) else E.none
        return E(self.broker.write_marker(topic, partition, producer_id, producer_epoch, commit, coordinator_epoch))

    async def _write_marker(self, job: MarkerJob, tp: tuple[str, int]) -> bool:
        """One partition's marker for the coordinator; True when done (written, or the partition is gone)."""
        topic, partition = tp
        code = await self._mark(job.producer_id, job.producer_epoch, job.commit, job.coordinator_epoch, topic, partition)
        if code == E.unknown_topic_or_partition:
            return True  # the topic was deleted: nothing left to mark
        if code == E.invalid_producer_epoch:
            log.error("%s: the %s marker of producer %d epoch %d was refused by %s-%d (a newer epoch wrote there); "
                      "skipped", job.transactional_id, "COMMIT" if job.commit else "ABORT", job.producer_id,
                      job.producer_epoch, topic, partition)
            return True
        return code == E.none

    # --- InitProducerId (22) -----------------------------------------------------------------

    def init_producer_id(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body = req.body
        if body.transactional_id is None:
            return handlers.init_producer_id(ctx, req)
        resp = req.codec.response_type

        def answer(r: Any) -> Any:
            error = r.error
            if error == tc.PRODUCER_FENCED and req.version < 4:
                error = tc.INVALID_PRODUCER_EPOCH
            return build(resp, throttle_time=ZERO, error_code=error_code(error), producer_id=r.producer_id,
                         producer_epoch=r.producer_epoch)

        def fail(code: int, _: str) -> Any:
            return build(resp, throttle_time=ZERO, error_code=error_code(code), producer_id=-1, producer_epoch=-1)

        pid, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
        if (pid == -1) != (epoch == -1):
            return fail(E.invalid_request, "")
        if not ctx.authorize(acls.WRITE, acls.TRANSACTIONAL_ID, body.transactional_id):
            return fail(E.transactional_id_authorization_failed, "")
        runtime = self.runtime_for(body.transactional_id)
        if not runtime.loaded:
            return fail(E.coordinator_load_in_progress, "")
        timeout = _millis(body.transaction_timeout)
        return runtime.write(ctx, InitProducerId(body.transactional_id, timeout, pid, epoch), answer, fail)

    # --- AddPartitionsToTxn (24) -------------------------------------------------------------

    def add_partitions_to_txn(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        topic_cls = nested(resp, "results_by_topic_v3_and_below" if req.version < 4 else "results_by_transaction")
        if req.version >= 4:
            topic_cls = nested(topic_cls, "topic_results")
        part_cls = nested(topic_cls, "results_by_partition")

        def results(errors: dict[tuple[str, int], int], version: int) -> tuple:
            by_topic: dict[str, list] = {}
            for (topic, partition), code in errors.items():
                if code == tc.TRANSACTION_ABORTABLE and version < 5:
                    code = tc.INVALID_TXN_STATE
                by_topic.setdefault(topic, []).append(build(part_cls, partition_index=partition,
                                                            partition_error_code=error_code(code)))
            return tuple(build(topic_cls, name=t, results_by_partition=tuple(ps)) for t, ps in by_topic.items())

        if req.version < 4:
            return self._add_partitions(
                ctx, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch, body.v3_and_below_topics, False,
                lambda errors: build(resp, throttle_time=ZERO, results_by_topic_v3_and_below=results(errors, req.version)))
        if not ctx.authorize(acls.CLUSTER_ACTION, acls.CLUSTER, acls.CLUSTER_NAME):
            return build(resp, throttle_time=ZERO, error_code=E.cluster_authorization_failed, results_by_transaction=())
        txn_cls = nested(resp, "results_by_transaction")

        async def batched() -> Any:
            answers = []
            for t in body.transactions:
                out = self._add_partitions(ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics,
                                           t.verify_only, lambda errors: errors)
                errors = await out if isinstance(out, asyncio.Future) else out
                answers.append(build(txn_cls, transactional_id=t.transactional_id,
                                     topic_results=results(errors, req.version)))
            return build(resp, throttle_time=ZERO, error_code=E.none, results_by_transaction=tuple(answers))

        return batched()

    def _add_partitions(self, ctx: "RequestContext", tid: str, pid: int, epoch: int, topics: Any,
                        verify_only: bool, answer: Any) -> Any:
        """``answer(errors per partition)``, now or as a future. AddPartitionsToTxn fails as a whole:
        with one unauthorized or unknown partition, the others get OPERATION_NOT_ATTEMPTED."""
        wanted = [(t.name, p) for t in topics for p in t.partitions]
        if not ctx.authorize(acls.WRITE, acls.TRANSACTIONAL_ID, tid):
            return answer({tp: E.transactional_id_authorization_failed for tp in wanted})
        refused = {}
        for topic, partition in wanted:
            known = self.broker.topics.get(topic)
            if not ctx.authorize(acls.WRITE, acls.TOPIC, topic):
                refused[(topic, partition)] = E.topic_authorization_failed
            elif known is None or not 0 <= partition < known.partitions or known.internal:
                refused[(topic, partition)] = E.unknown_topic_or_partition
        if refused:
            return answer({tp: refused.get(tp, E.operation_not_attempted) for tp in wanted})
        runtime = self.runtime_for(tid)
        if not runtime.loaded:
            return answer({tp: E.coordinator_load_in_progress for tp in wanted})
        return runtime.write(ctx, AddPartitions(tid, pid, epoch, tuple(wanted), verify_only),
                             lambda r: answer(r.errors), lambda code, _: answer({tp: code for tp in wanted}))

    # --- AddOffsetsToTxn (25) ----------------------------------------------------------------

    def add_offsets_to_txn(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body = req.body
        reply = _error_reply(req)

        if not ctx.authorize(acls.WRITE, acls.TRANSACTIONAL_ID, body.transactional_id):
            return reply(E.transactional_id_authorization_failed)
        if not ctx.authorize(acls.READ, acls.GROUP, body.group_id):
            return reply(E.group_authorization_failed)
        runtime = self.runtime_for(body.transactional_id)
        if not runtime.loaded:
            return reply(E.coordinator_load_in_progress)
        tp = runtime.shard.add_offsets_partition(body.group_id)
        request = AddPartitions(body.transactional_id, body.producer_id, body.producer_epoch, (tp,))
        return runtime.write(ctx, request, lambda r: reply(r.errors[tp]), lambda code, _: reply(code))

    # --- EndTxn (26) -------------------------------------------------------------------------

    def end_txn(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body = req.body
        reply = _error_reply(req)

        if not ctx.authorize(acls.WRITE, acls.TRANSACTIONAL_ID, body.transactional_id):
            return reply(E.transactional_id_authorization_failed)
        runtime = self.runtime_for(body.transactional_id)
        if not runtime.loaded:
            return reply(E.coordinator_load_in_progress)
        request = EndTxn(body.transactional_id, body.producer_id, body.producer_epoch, body.committed)
        return runtime.write(ctx, request, lambda r: reply(r.error), lambda code, _: reply(code))

    # --- TxnOffsetCommit (28) ----------------------------------------------------------------

    def txn_offset_commit(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        """Checked here (ACLs, KIP-890 verification that the group's partition is in the
        transaction), written by the group's coordinator shard as pending offsets."""
        body, resp = req.body, req.codec.response_type
        topic_cls = nested(resp, "topics")
        part_cls = nested(topic_cls, "partitions")
        groups = self.server.group_coordinator  # type: ignore[attr-defined]

        def reply(codes: dict[tuple[str, int], int]) -> Any:
            return build(resp, throttle_time=ZERO, topics=tuple(
                build(topic_cls, name=t.name, partitions=tuple(
                    build(part_cls, partition_index=p.partition_index, error_code=E(codes.get((t.name, p.partition_index), 0)))
                    for p in t.partitions)) for t in body.topics))

        def every(code: int) -> dict:
            return {(t.name, p.partition_index): code for t in body.topics for p in t.partitions}

        if not ctx.authorize(acls.WRITE, acls.TRANSACTIONAL_ID, body.transactional_id):
            return reply(every(E.transactional_id_authorization_failed))
        if not ctx.authorize(acls.READ, acls.GROUP, body.group_id):
            return reply(every(E.group_authorization_failed))
        runtime = groups.runtime_for(body.group_id)
        if not runtime.loaded:
            return reply(every(E.coordinator_load_in_progress))
        if not runtime.log.supports_transactions:  # an upstream log: the client's transaction is not ours to hold
            return reply(every(E.unsupported_for_message_format))
        offsets_partition = (OFFSETS_TOPIC, groups.partition_of(runtime))
        verified = self.verify(body.transactional_id, body.producer_id, body.producer_epoch, offsets_partition)
        if verified != tc.NONE:
            if verified == tc.PRODUCER_FENCED:
                verified = tc.INVALID_PRODUCER_EPOCH
            elif verified == tc.CONCURRENT_TRANSACTIONS:
                verified = E.coordinator_load_in_progress  # retriable: the previous transaction is completing
            elif verified != tc.INVALID_PRODUCER_ID_MAPPING or req.version < 4:
                verified = tc.INVALID_TXN_STATE
            return reply(every(verified))
        allowed = {t.name for t in body.topics if ctx.authorize(acls.READ, acls.TOPIC, t.name)}
        rejected = {(t.name, p.partition_index): E.topic_authorization_failed for t in body.topics
                    for p in t.partitions if t.name not in allowed}
        topics = tuple(rq.OffsetCommitTopic(t.name, tuple(
            rq.OffsetCommitPartition(p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                     p.committed_metadata) for p in t.partitions))
            for t in body.topics if t.name in allowed)
        request = rq.TxnOffsetCommitRequest(
            body.group_id, body.transactional_id, body.producer_id, body.producer_epoch, topics,
            getattr(body, "generation_id", -1), getattr(body, "member_id", ""), getattr(body, "group_instance_id", None))

        def answer(r: rq.OffsetCommitResponse) -> Any:
            codes = dict(rejected)
            for t in r.topics:
                for p in t.partitions:
                    codes[(t.name, p.partition)] = p.error_code
            return reply(codes)

        if not topics:
            return reply(rejected)
        return runtime.write(ctx, request, answer, lambda code, _: reply({**every(code), **rejected}))

    # --- WriteTxnMarkers (27) ----------------------------------------------------------------

    async def write_txn_markers(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        """Markers written on an operator's or a coordinator's behalf (``kafka-transactions.sh
        abort`` aborts a hanging transaction this way); needs CLUSTER_ACTION."""
        body, resp = req.body, req.codec.response_type
        marker_cls = nested(resp, "markers")
        topic_cls = nested(marker_cls, "topics")
        part_cls = nested(topic_cls, "partitions")
        allowed = ctx.authorize(acls.CLUSTER_ACTION, acls.CLUSTER, acls.CLUSTER_NAME)
        out = []
        for m in body.markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    code = E.cluster_authorization_failed if not allowed else await self._mark(
                        m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch, t.name, p)
                    parts.append(build(part_cls, partition_index=p, error_code=code))
                topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
            out.append(build(marker_cls, producer_id=m.producer_id, topics=tuple(topics)))
        return build(resp, markers=tuple(out))

    # --- DescribeTransactions (65), ListTransactions (66) ------------------------------------

    def describe_transactions(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp = req.codec.response_type
        state_cls = nested(resp, "transaction_states")
        topic_cls = nested(state_cls, "topics")
        out = []
        for tid in req.body.transactional_ids:
            runtime = self.runtime_for(tid)
            if not ctx.authorize(acls.DESCRIBE, acls.TRANSACTIONAL_ID, tid):
                described = None
                error = E.transactional_id_authorization_failed
            elif not runtime.loaded:
                described, error = None, E.coordinator_load_in_progress
            else:
                described = runtime.shard.describe([tid])[0]
                error = E(described.error)
            if described is None or error != E.none:
                out.append(build(state_cls, error_code=error, transactional_id=tid, transaction_state="",
                                 transaction_timeout=ZERO, transaction_start_time=_time(0), producer_id=-1,
                                 producer_epoch=-1, topics=()))  # Kafka leaves an error entry's fields at 0 / -1
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in described.partitions:
                if ctx.authorize(acls.DESCRIBE, acls.TOPIC, topic):
                    by_topic.setdefault(topic, []).append(partition)
            out.append(build(state_cls, error_code=E.none, transactional_id=tid,
                             transaction_state=described.state.kafka_name,
                             transaction_timeout=datetime.timedelta(milliseconds=described.timeout_ms),
                             transaction_start_time=_time(described.start_ms), producer_id=described.producer_id,
                             producer_epoch=described.producer_epoch,
                             topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
        return build(resp, throttle_time=ZERO, transaction_states=tuple(out))

    def list_transactions(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        body, resp = req.body, req.codec.response_type
        state_cls = nested(resp, "transaction_states")
        states = tuple(body.state_filters)
        unknown = tuple(s for s in states if s.lower() not in STATE_BY_NAME)
        if any(not r.loaded for r in self.runtimes):
            return build(resp, throttle_time=ZERO, error_code=E.coordinator_load_in_progress,
                         unknown_state_filters=(), transaction_states=())
        now = now_ms()
        listed = []
        for runtime in self.runtimes:
            for t in runtime.shard.list(states, body.producer_id_filters, getattr(body, "duration_filter", -1), now):
                if ctx.authorize(acls.DESCRIBE, acls.TRANSACTIONAL_ID, t.transactional_id):
                    listed.append(build(state_cls, transactional_id=t.transactional_id, producer_id=t.producer_id,
                                        transaction_state=t.state.kafka_name))
        return build(resp, throttle_time=ZERO, error_code=E.none, unknown_state_filters=unknown,
                     transaction_states=tuple(listed))

    # --- DescribeProducers (61) --------------------------------------------------------------

    def describe_producers(self, ctx: "RequestContext", req: DecodedRequest) -> Any:
        resp = req.codec.response_type
        topic_cls = nested(resp, "topics")
        part_cls = nested(topic_cls, "partitions")
        producer_cls = nested(part_cls, "active_producers")
        topics = []
        for t in req.body.topics:
            parts = []
            topic = self.broker.topics.get(t.name)
            for p in t.partition_indexes:
                producers: tuple = ()
                if not ctx.authorize(acls.READ, acls.TOPIC, t.name):
                    error = E.topic_authorization_failed
                elif topic is None or not 0 <= p < topic.partitions:
                    error = E.unknown_topic_or_partition
                else:
                    error = E.none
                    plog = self.broker.log(t.name, p)
                    producers = tuple(build(producer_cls, producer_id=e.producer_id, producer_epoch=e.epoch,
                                            last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                                            coordinator_epoch=e.coordinator_epoch,
                                            current_txn_start_offset=e.current_txn_first_offset)
                                      for e in plog.producers.describe())
                parts.append(build(part_cls, partition_index=p, error_code=error, error_message=None,
                                   active_producers=producers))
            topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
        return build(resp, throttle_time=ZERO, topics=tuple(topics))


def _error_reply(req: DecodedRequest) -> Any:
    """The answer of AddOffsetsToTxn / EndTxn: an error code alone; below v2 PRODUCER_FENCED
    is INVALID_PRODUCER_EPOCH, which older clients know."""
    def reply(code: int) -> Any:
        if code == tc.PRODUCER_FENCED and req.version < 2:
            code = tc.INVALID_PRODUCER_EPOCH
        return build(req.codec.response_type, throttle_time=ZERO, error_code=error_code(code))

    return reply


def _time(ms: int) -> datetime.datetime:
    """kio's type for an int64 timestamp (-1 when unknown)."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)

"""Handlers for the broker's own APIs (everything except the group coordinator's).

One function per API serves every version: responses are built with
:func:`cohort.protocol.entities.build`, which drops fields a version lacks.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from cohort.broker import BrokerError
from cohort.broker import broker as codes
from cohort.broker.topics import topic_name_error
from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, error_code, has_field, nested
from cohort.protocol.operations import CLUSTER_OPS, NOT_REQUESTED, TOPIC_OPS
from cohort.security import acls
from cohort.security.acls import CLUSTER, CLUSTER_NAME, TOPIC
from cohort.protocol.codec import encode_response
from cohort.server.api import NO_RESPONSE, CloseConnection, Encoded

if TYPE_CHECKING:
    from cohort.server.api import Host
    from cohort.server.context import RequestContext

ZERO = datetime.timedelta(0)
NULL_UUID = uuid.UUID(int=0)

E = ErrorCode


def install(server: "Host") -> None:
    """Register the core APIs with the version ranges cohort advertises."""
    reg = server.apis.register
    reg(18, api_versions)
    reg(3, metadata)
    reg(0, produce)
    reg(1, fetch)
    reg(2, list_offsets)
    reg(19, create_topics)
    reg(20, delete_topics)
    reg(37, create_partitions)
    reg(21, delete_records)
    reg(23, offset_for_leader_epoch)
    reg(22, init_producer_id)
    reg(10, find_coordinator)
    reg(60, describe_cluster)


# --- ApiVersions ------------------------------------------------------------------------------


# Kafka's feature flags cohort serves: name -> (lowest supported, highest supported, finalized level).
# share.version 1: share groups (KIP-932) are on, as on a cluster formatted by Kafka 4.2.
FEATURES = {"share.version": (0, 1, 1)}


def api_versions(ctx: "RequestContext", req: DecodedRequest) -> Any:
    resp = req.codec.response_type
    entry = nested(resp, "api_keys")
    keys = tuple(entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ctx.server.apis.advertised().items())
    if req.version < 3:
        return build(resp, error_code=E.none, api_keys=keys, throttle_time=ZERO)
    supported, finalized = nested(resp, "supported_features"), nested(resp, "finalized_features")
    return build(resp, error_code=E.none, api_keys=keys, throttle_time=ZERO,
                 supported_features=tuple(supported(name=n, min_version=lo, max_version=hi)
                                          for n, (lo, hi, _) in FEATURES.items()),
                 finalized_features_epoch=0,
                 finalized_features=tuple(finalized(name=n, max_version_level=level, min_version_level=level)
                                          for n, (_, _, level) in FEATURES.items()),
                 zk_migration_ready=False)


# --- Metadata ---------------------------------------------------------------------------------


OFFLOADED_METADATA_PARTITIONS = 2000
"""A Metadata answer with more partitions than this is built and encoded on the server's worker
thread (about 25 us a partition), so a client asking for 100,000 partitions does not hold the
event loop for seconds; the GIL is handed back every few milliseconds meanwhile."""


def metadata(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    broker = ctx.broker
    entries, missing = _resolve_topics(ctx, req)
    if getattr(body, "allow_auto_topic_creation", True):
        missing = [name for name in missing if broker.may_auto_create(name)]  # CREATE was checked in _resolve_topics
        if missing:
            return _metadata_after_creating(ctx, req, missing)
    return _metadata_answer(ctx, req, entries)


def _may_create(ctx: "RequestContext", name: str) -> bool:
    """Kafka: CREATE on the cluster, or on the topic."""
    return ctx.authorize(acls.CREATE, CLUSTER, CLUSTER_NAME) or ctx.authorize(acls.CREATE, TOPIC, name)


async def _metadata_after_creating(ctx: "RequestContext", req: DecodedRequest, names: list[str]) -> Any:
    """Auto-create ``names`` (partitions made in the storage thread, as CreateTopics does, so
    a Metadata naming many new topics does not hold the event loop), then answer."""
    for name in dict.fromkeys(names):
        try:
            await ctx.broker.auto_create_async(name)
        except BrokerError:
            pass  # answered below as unknown
    entries, _ = _resolve_topics(ctx, req)
    result = _metadata_answer(ctx, req, entries)
    return await result if asyncio.iscoroutine(result) else result  # a large answer is offloaded


def _resolve_topics(ctx: "RequestContext", req: DecodedRequest) -> tuple[list[Any], list[str]]:
    """The requested topics as entries for :func:`_metadata_response` (a Topic, or (error, name,
    topic_id)), and the names that do not exist."""
    body = req.body
    broker = ctx.broker
    # v0: an empty list means all topics; v1+: null means all topics (those the principal may describe).
    if body.topics is None or (req.version == 0 and not body.topics):
        wanted = [(t.name, None) for t in broker.topics.values() if ctx.authorize(acls.DESCRIBE, TOPIC, t.name)]
    else:
        wanted = [(t.name, getattr(t, "topic_id", None)) for t in body.topics]
        ids = [i for _, i in wanted if i not in (None, NULL_UUID)]
        if ids and req.version >= 12:
            # Kafka (KafkaApis.handleTopicMetadataRequest): once any topic carries an id, the ids
            # are used and the names ignored. Kafka's client sends "" as the name of a topic it
            # asks for by id (MetadataRequest.Builder.forTopicIds), not null.
            wanted = [(None, i) for i in dict.fromkeys(ids)]
    entries: list[Any] = []
    missing: list[str] = []
    for name, topic_id in wanted:
        if req.version < 12 and (name is None or topic_id not in (None, NULL_UUID)):
            # Kafka: "Topic IDs are not supported in requests for version 10/11", and the
            # response has no way to name the topic (its name is not nullable before v12).
            entries.append((E.invalid_request, name or "", topic_id or NULL_UUID))
            continue
        if name is None:
            topic = broker.topic_by_id(topic_id) if topic_id not in (None, NULL_UUID) else None
            if topic is not None and not ctx.authorize(acls.DESCRIBE, TOPIC, topic.name):
                entries.append((E.topic_authorization_failed, None, topic_id))
                continue
            if topic is None:
                entries.append((E.unknown_topic_id, None, topic_id or NULL_UUID))
                continue
        else:
            if not ctx.authorize(acls.DESCRIBE, TOPIC, name):
                entries.append((E.topic_authorization_failed, name, NULL_UUID))
                continue
            topic = broker.topics.get(name)
            if topic is None and getattr(body, "allow_auto_topic_creation", True) and broker.may_auto_create(name) \
                    and not _may_create(ctx, name):
                entries.append((E.topic_authorization_failed, name, NULL_UUID))  # would be created, but may not
                continue
            if topic is None:
                missing.append(name)
                error = E.invalid_topic_exception if topic_name_error(name) else E.unknown_topic_or_partition
                entries.append((error, name, NULL_UUID))
                continue
        entries.append(topic)
    return entries, missing


def _metadata_answer(ctx: "RequestContext", req: DecodedRequest, entries: list[Any]) -> Any:
    broker = ctx.broker
    body = req.body
    topic_ops = None
    if getattr(body, "include_topic_authorized_operations", False):
        topic_ops = {e.name: ctx.authorized_operations(TOPIC, e.name, TOPIC_OPS) for e in entries if not isinstance(e, tuple)}
    cluster_ops = NOT_REQUESTED
    if getattr(body, "include_cluster_authorized_operations", False):
        cluster_ops = (ctx.authorized_operations(CLUSTER, CLUSTER_NAME, CLUSTER_OPS)
                       if ctx.authorize(acls.DESCRIBE, CLUSTER, CLUSTER_NAME) else 0)
    args = (req.codec.response_type, entries, broker.node_id, *ctx.endpoint(),
            broker.cluster_id, topic_ops, cluster_ops)
    if sum(e.partitions for e in entries if not isinstance(e, tuple)) <= OFFLOADED_METADATA_PARTITIONS:
        return _metadata_response(*args)

    def build_and_encode() -> Encoded:
        return Encoded(encode_response(req.correlation_id, req.codec, _metadata_response(*args)))

    return ctx.server.offload(build_and_encode)


def _metadata_response(resp: type, entries: list, node: int, host: str, port: int, cluster_id: str,
                       topic_ops: dict[str, int] | None = None, cluster_ops: int = NOT_REQUESTED) -> Any:
    """The Metadata answer for resolved entries; reads no broker state (it may run off the loop)."""
    topic_cls = nested(resp, "topics")
    part_cls = nested(topic_cls, "partitions")
    with_ids = has_field(topic_cls, "topic_id")
    out = []
    for entry in entries:
        if isinstance(entry, tuple):
            error, name, topic_id = entry
            out.append(build(topic_cls, error_code=error, name=name, topic_id=topic_id, is_internal=False,
                             partitions=(), topic_authorized_operations=NOT_REQUESTED))
            continue
        parts = tuple(
            build(part_cls, error_code=E.none, partition_index=p, leader_id=node, leader_epoch=0,
                  replica_nodes=(node,), isr_nodes=(node,), offline_replicas=())
            for p in range(entry.partitions)
        )
        out.append(build(topic_cls, error_code=E.none, name=entry.name, topic_id=entry.id if with_ids else None,
                         is_internal=entry.internal, partitions=parts,
                         topic_authorized_operations=NOT_REQUESTED if topic_ops is None else topic_ops[entry.name]))
    brokers = (build(nested(resp, "brokers"), node_id=node, host=host, port=port, rack=None),)
    return build(resp, throttle_time=ZERO, brokers=brokers, cluster_id=cluster_id, controller_id=node,
                 topics=tuple(out), cluster_authorized_operations=cluster_ops, error_code=E.none)


# --- Produce ----------------------------------------------------------------------------------


def produce(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    broker = ctx.broker
    resp = req.codec.response_type
    topic_cls = nested(resp, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    error_cls = nested(part_cls, "record_errors") if has_field(part_cls, "record_errors") else None
    acks = body.acks
    topics = []
    for t in body.topic_data:
        parts = []
        for p in t.partition_data:
            append_time, record_errors = -1, ()
            if acks not in (0, 1, -1):
                error, base, start, msg = E.invalid_required_acks, -1, -1, f"acks={acks} is not 0, 1 or -1"
            elif not ctx.authorize(acls.WRITE, TOPIC, t.name):
                error, base, start, msg = E.topic_authorization_failed, -1, -1, None
            elif body.transactional_id is not None and not ctx.authorize(acls.WRITE, acls.TRANSACTIONAL_ID,
                                                                         body.transactional_id):
                error, base, start, msg = E.transactional_id_authorization_failed, -1, -1, None
            else:
                r = broker.produce(t.name, p.index, p.records, version=req.version,
                                   transactional_id=body.transactional_id)
                error, base, start, msg = r.error, r.base_offset, r.log_start_offset, r.message
                append_time, record_errors = r.log_append_time, r.record_errors
            parts.append(build(part_cls, index=p.index, error_code=error_code(error), base_offset=base,
                               log_append_time=_millis(append_time), log_start_offset=start,
                               record_errors=tuple(build(error_cls, batch_index=i, batch_index_error_message=m)
                                                   for i, m in record_errors),
                               error_message=msg))
        topics.append(build(topic_cls, name=t.name, partition_responses=tuple(parts)))
    if acks == 0:
        failed = [(t.name, p.index, p.error_code) for t in topics for p in t.partition_responses if p.error_code != E.none]
        if failed:
            raise CloseConnection(f"acks=0 produce failed: {failed[0][0]}-{failed[0][1]}: {failed[0][2].name}")
        return NO_RESPONSE
    return build(resp, responses=tuple(topics), throttle_time=ZERO)


def _millis(ms: int) -> datetime.datetime | None:
    """kio's type for an int64 timestamp field (-1 is None)."""
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


# --- Fetch ------------------------------------------------------------------------------------


def fetch(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    if getattr(body, "session_id", 0) != 0 or getattr(body, "session_epoch", -1) > 0:
        resp = req.codec.response_type
        return build(resp, throttle_time=ZERO, error_code=E.fetch_session_id_not_found, session_id=0, responses=())
    response, nbytes, keys, errors = _fetch_once(ctx, req)
    wait_ms = body.max_wait.total_seconds() * 1000
    if nbytes >= body.min_bytes or wait_ms <= 0 or errors or not keys:
        return response
    return _fetch_long_poll(ctx, req, wait_ms / 1000, keys)


async def _fetch_long_poll(ctx: "RequestContext", req: DecodedRequest, timeout: float, keys: list) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        if not await ctx.server.waiters.wait(keys, remaining):
            break
        response, nbytes, _, errors = _fetch_once(ctx, req)
        if nbytes >= req.body.min_bytes or errors:
            return response
    return _fetch_once(ctx, req)[0]


def _fetch_once(ctx: "RequestContext", req: DecodedRequest) -> tuple[Any, int, list, bool]:
    """Build a full (sessionless) response: every requested partition is answered."""
    body = req.body
    broker = ctx.broker
    resp = req.codec.response_type
    topic_cls = nested(resp, "responses")
    part_cls = nested(topic_cls, "partitions")
    by_id = req.version >= 13
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    aborted_cls = nested(part_cls, "aborted_transactions") if read_committed else None  # type hints: not per fetch
    budget = min(body.max_bytes, ctx.config["fetch.max.bytes"])
    total = 0
    keys = []
    errors = False
    topics = []
    for t in body.topics:
        topic = broker.topic_by_id(t.topic_id) if by_id else broker.topics.get(t.topic)
        parts = []
        for p in t.partitions:
            aborted = None
            lso = -1
            if topic is not None and not ctx.authorize(acls.READ, TOPIC, topic.name) or (
                    topic is None and not by_id and not ctx.authorize(acls.READ, TOPIC, t.topic)):
                error, hw, start, data = E.topic_authorization_failed, -1, -1, b""
            elif topic is None:
                error, hw, start, data = (E.unknown_topic_id if by_id else E.unknown_topic_or_partition), -1, -1, b""
            elif p.partition < 0 or p.partition >= topic.partitions:
                error, hw, start, data = E.unknown_topic_or_partition, -1, -1, b""
            else:
                log = broker.log(topic.name, p.partition)
                hw = broker.high_watermark(topic.name, p.partition)
                start = log.start_offset
                # KIP-74: only the first non-empty partition may exceed the limits.
                limit = min(p.partition_max_bytes, budget - total)
                lso = log.last_stable_offset(hw)
                if read_committed:  # up to the LSO, naming the aborted transactions in what is returned
                    code, data, found = broker.read_committed(topic.name, p.partition, p.fetch_offset, max(limit, 0),
                                                              allow_oversize=total == 0)
                    aborted = tuple(build(aborted_cls, producer_id=a.producer_id, first_offset=a.first_offset)
                                    for a in found)
                else:
                    code, data = broker.read(topic.name, p.partition, p.fetch_offset, max(limit, 0),
                                             allow_oversize=total == 0)
                error = E(code)
                total += len(data)
                keys.append((topic.name, p.partition))
            errors = errors or error != E.none
            parts.append(build(part_cls, partition_index=p.partition, error_code=error, high_watermark=hw,
                               last_stable_offset=lso, log_start_offset=start, aborted_transactions=aborted,
                               preferred_read_replica=-1, records=data))
        topics.append(build(topic_cls, topic=getattr(t, "topic", None), topic_id=getattr(t, "topic_id", None),
                            partitions=tuple(parts)))
    response = build(resp, throttle_time=ZERO, error_code=E.none, session_id=0, responses=tuple(topics))
    return response, total, keys, errors


# --- ListOffsets ------------------------------------------------------------------------------

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
READ_COMMITTED = 1


def list_offsets(ctx: "RequestContext", req: DecodedRequest) -> Any:
    broker = ctx.broker
    resp = req.codec.response_type
    topic_cls = nested(resp, "topics")
    part_cls = nested(topic_cls, "partitions")
    topics = []
    read_committed = getattr(req.body, "isolation_level", 0) == READ_COMMITTED
    for t in req.body.topics:
        topic = broker.topics.get(t.name)
        parts = []
        for p in t.partitions:
            error, offset, ts = E.none, -1, -1
            if not ctx.authorize(acls.DESCRIBE, TOPIC, t.name):
                error = E.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < topic.partitions:
                error = E.unknown_topic_or_partition
            else:
                log = broker.log(topic.name, p.partition_index)
                hw = broker.high_watermark(topic.name, p.partition_index)
                bound = log.last_stable_offset(hw) if read_committed else hw  # read_committed: the LSO
                if p.timestamp == LATEST:
                    offset = bound
                elif p.timestamp == EARLIEST:
                    offset = log.start_offset
                elif p.timestamp == MAX_TIMESTAMP and req.version >= 7:
                    found = log.max_timestamp()
                    if found is not None:
                        offset, ts = found
                elif p.timestamp >= 0:
                    found = log.offset_for_timestamp(p.timestamp)
                    if found is not None and found[0] < bound:
                        offset, ts = found
                else:
                    error = E.invalid_request
            parts.append(build(part_cls, partition_index=p.partition_index, error_code=error, timestamp=ts,
                               offset=offset, leader_epoch=0))
        topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
    return build(resp, throttle_time=ZERO, topics=tuple(topics))


# --- CreateTopics / DeleteTopics --------------------------------------------------------------


async def create_topics(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    broker = ctx.broker
    resp = req.codec.response_type
    result_cls = nested(resp, "topics")
    config_cls = nested(result_cls, "configs") if has_field(result_cls, "configs") else None
    names = [t.name for t in body.topics]
    results = []
    for t in body.topics:
        topic_id, partitions, configs = NULL_UUID, -1, {}
        try:
            if names.count(t.name) > 1:
                raise BrokerError(codes.INVALID_REQUEST, f"topic {t.name!r} appears more than once in the request")
            if not _may_create(ctx, t.name):
                raise BrokerError(E.topic_authorization_failed, "Authorization failed.")
            partitions = t.num_partitions
            if t.assignments:
                if partitions != -1 or t.replication_factor != -1:
                    raise BrokerError(codes.INVALID_REQUEST, "replica assignments require num_partitions and replication_factor of -1")
                if sorted(a.partition_index for a in t.assignments) != list(range(len(t.assignments))) or any(
                    tuple(a.broker_ids) != (broker.node_id,) for a in t.assignments
                ):
                    raise BrokerError(E.invalid_replica_assignment, f"assignments must place partitions 0..n-1 on broker {broker.node_id}")
                partitions = len(t.assignments)
            requested = {c.name: c.value for c in t.configs}
            if body.validate_only:
                partitions, configs = broker.validate_new_topic(t.name, partitions, t.replication_factor, requested)
            else:
                topic = await broker.create_topic_async(t.name, partitions, requested, replication_factor=t.replication_factor)
                topic_id, partitions, configs = topic.id, topic.partitions, topic.configs
            error, message = E.none, None
        except BrokerError as exc:
            error, message = E(exc.code), exc.message
        cfgs = None
        config_error = 0
        if error == E.none and not ctx.authorize(acls.DESCRIBE_CONFIGS, TOPIC, t.name):
            config_error, config_cls_used = E.topic_authorization_failed, None  # Kafka hides the configs
        else:
            config_cls_used = config_cls
        if config_cls_used is not None and error == E.none:
            cfgs = tuple(build(config_cls, name=k, value=v, read_only=False, config_source=1, is_sensitive=False)
                         for k, v in sorted(configs.items()))
        results.append(build(result_cls, name=t.name, topic_id=topic_id, error_code=error, error_message=message,
                             topic_config_error_code=config_error, num_partitions=partitions if error == E.none else -1,
                             replication_factor=1 if error == E.none else -1, configs=cfgs))
    return build(resp, throttle_time=ZERO, topics=tuple(results))


def delete_topics(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    broker = ctx.broker
    resp = req.codec.response_type
    result_cls = nested(resp, "responses")
    if has_field(type(body), "topics"):
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = []
    for name, topic_id in wanted:
        error, message = E.none, None
        try:
            if name is None:
                topic = broker.topic_by_id(topic_id) if topic_id not in (None, NULL_UUID) else None
                if topic is None:
                    raise BrokerError(codes.UNKNOWN_TOPIC_ID, f"no topic with id {topic_id}")
                name = topic.name
            elif topic_id not in (None, NULL_UUID):
                raise BrokerError(codes.INVALID_REQUEST, "give a topic name or a topic id, not both")
            if not (ctx.authorize(acls.DELETE, CLUSTER, CLUSTER_NAME) or ctx.authorize(acls.DELETE, TOPIC, name)):
                if not ctx.authorize(acls.DESCRIBE, TOPIC, name):
                    name = name if topic_id in (None, NULL_UUID) else None  # an id's name is not echoed
                raise BrokerError(E.topic_authorization_failed, "Authorization failed.")
            topic = broker.delete_topic(name)
            topic_id = topic.id
        except BrokerError as exc:
            error, message = E(exc.code), exc.message
        results.append(build(result_cls, name=name, topic_id=topic_id or NULL_UUID, error_code=error, error_message=message))
    return build(resp, throttle_time=ZERO, responses=tuple(results))


# --- DeleteRecords / OffsetForLeaderEpoch ----------------------------------------------------


def delete_records(ctx: "RequestContext", req: DecodedRequest) -> Any:
    broker = ctx.broker
    resp = req.codec.response_type
    topic_cls = nested(resp, "topics")
    part_cls = nested(topic_cls, "partitions")
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            try:
                if not ctx.authorize(acls.DELETE, TOPIC, t.name):
                    raise BrokerError(E.topic_authorization_failed, "Authorization failed.")
                low, error = broker.delete_records(t.name, p.partition_index, p.offset), E.none
            except BrokerError as exc:
                low, error = -1, E(exc.code)
            parts.append(build(part_cls, partition_index=p.partition_index, low_watermark=low, error_code=error))
        topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
    return build(resp, throttle_time=ZERO, topics=tuple(topics))


LEADER_EPOCH = 0  # a single node leads every partition in its first and only epoch


def offset_for_leader_epoch(ctx: "RequestContext", req: DecodedRequest) -> Any:
    """The end offset of a leader epoch (KIP-101/320): the log end for epoch 0, undefined
    (-1, -1) for any other; a current_leader_epoch other than 0 is fenced or unknown."""
    broker = ctx.broker
    resp = req.codec.response_type
    topic_cls = nested(resp, "topics")
    part_cls = nested(topic_cls, "partitions")
    topics = []
    for t in req.body.topics:
        topic = broker.topics.get(t.topic)
        parts = []
        for p in t.partitions:
            epoch, end, error = -1, -1, E.none
            if not (ctx.authorize(acls.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME) or ctx.authorize(acls.DESCRIBE, TOPIC, t.topic)):
                error = E.topic_authorization_failed
            elif topic is None or not 0 <= p.partition < topic.partitions:
                error = E.unknown_topic_or_partition
            elif p.current_leader_epoch > LEADER_EPOCH:
                error = E.unknown_leader_epoch
            elif 0 <= p.current_leader_epoch < LEADER_EPOCH:
                error = E.fenced_leader_epoch
            elif p.leader_epoch == LEADER_EPOCH:
                epoch, end = LEADER_EPOCH, broker.high_watermark(topic.name, p.partition)
            parts.append(build(part_cls, error_code=error, partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(build(topic_cls, topic=t.topic, partitions=tuple(parts)))
    return build(resp, throttle_time=ZERO, topics=tuple(topics))


# --- CreatePartitions ------------------------------------------------------------------------


async def create_partitions(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    broker = ctx.broker
    result_cls = nested(req.codec.response_type, "results")
    names = [t.name for t in body.topics]
    results = []
    for t in body.topics:
        try:
            if names.count(t.name) > 1:
                raise BrokerError(codes.INVALID_REQUEST, "Duplicate topic name.")
            if not ctx.authorize(acls.ALTER, TOPIC, t.name):
                raise BrokerError(E.topic_authorization_failed, "Authorization failed.")
            assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
            if body.validate_only:
                broker.validate_new_partitions(t.name, t.count, assignments)
            else:
                await broker.create_partitions_async(t.name, t.count, assignments)
            error, message = E.none, None
        except BrokerError as exc:
            error, message = E(exc.code), exc.message
        results.append(build(result_cls, name=t.name, error_code=error, error_message=message))
    return build(req.codec.response_type, throttle_time=ZERO, results=tuple(results))


# --- InitProducerId ---------------------------------------------------------------------------


def init_producer_id(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    resp = req.codec.response_type
    if body.transactional_id is not None:
        return build(resp, throttle_time=ZERO, error_code=E.transactional_id_authorization_failed, producer_id=-1, producer_epoch=-1)
    pid = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        return build(resp, throttle_time=ZERO, error_code=E.invalid_request, producer_id=-1, producer_epoch=-1)
    authorizer = ctx.server.authorizer
    if authorizer is not None and not ctx.authorize(acls.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) and \
            not authorizer.authorize_any(ctx.principal, ctx.host, acls.WRITE, TOPIC):
        return build(resp, throttle_time=ZERO, error_code=E.cluster_authorization_failed, producer_id=-1, producer_epoch=-1)
    # Without a transactional id Kafka always hands out a fresh id with epoch 0 (a producer
    # recovering from an error with its old id and epoch gets a new id, not a bumped epoch).
    return build(resp, throttle_time=ZERO, error_code=E.none, producer_id=ctx.broker.next_producer_id(), producer_epoch=0)


# --- FindCoordinator --------------------------------------------------------------------------

GROUP_KEY, TRANSACTION_KEY = 0, 1


def find_coordinator(ctx: "RequestContext", req: DecodedRequest) -> Any:
    """Every group and every transactional id is coordinated by this node, unless the server
    has a `group_coordinator_locator` (several instances in front of an upstream). A key the
    principal may not describe gets GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    body = req.body
    resp = req.codec.response_type
    key_type = getattr(body, "key_type", GROUP_KEY)
    host, port = ctx.endpoint()

    def answer(key: str) -> tuple:
        if key_type == GROUP_KEY:
            if not ctx.authorize(acls.DESCRIBE, acls.GROUP, key):
                return E.group_authorization_failed, None, -1, "", -1
            locate = ctx.server.group_coordinator_locator
            if locate is not None:
                error, node, where, at = locate(key)
                return error, None, node, where, at
            return E.none, None, ctx.broker.node_id, host, port
        if key_type == TRANSACTION_KEY:
            if not ctx.authorize(acls.DESCRIBE, acls.TRANSACTIONAL_ID, key):
                return E.transactional_id_authorization_failed, None, -1, "", -1
            return E.none, None, ctx.broker.node_id, host, port
        return E.invalid_request, f"unknown key_type {key_type}", -1, "", -1

    if has_field(resp, "coordinators"):
        entry = nested(resp, "coordinators")
        coords = []
        for k in body.coordinator_keys:
            error, message, node, h, p = answer(k)
            coords.append(build(entry, key=k, node_id=node, host=h, port=p, error_code=error, error_message=message))
        return build(resp, throttle_time=ZERO, coordinators=tuple(coords))
    error, message, node, h, p = answer(body.key)
    return build(resp, throttle_time=ZERO, error_code=error, error_message=message, node_id=node, host=h, port=p)


# --- DescribeCluster --------------------------------------------------------------------------


def describe_cluster(ctx: "RequestContext", req: DecodedRequest) -> Any:
    resp = req.codec.response_type
    endpoint_type = getattr(req.body, "endpoint_type", 1)
    host, port = ctx.endpoint()
    brokers = (
        build(nested(resp, "brokers"), broker_id=ctx.broker.node_id, host=host, port=port, rack=None),
    )
    if endpoint_type != 1:
        return build(resp, throttle_time=ZERO, error_code=E.unsupported_endpoint_type, error_message="only broker endpoints are described",
                     endpoint_type=endpoint_type, cluster_id=ctx.broker.cluster_id, controller_id=-1, brokers=(),
                     cluster_authorized_operations=NOT_REQUESTED)
    ops = NOT_REQUESTED
    if req.body.include_cluster_authorized_operations:
        ops = (ctx.authorized_operations(CLUSTER, CLUSTER_NAME, CLUSTER_OPS)
               if ctx.authorize(acls.DESCRIBE, CLUSTER, CLUSTER_NAME) else 0)
    return build(resp, throttle_time=ZERO, error_code=E.none, error_message=None, endpoint_type=1,
                 cluster_id=ctx.broker.cluster_id, controller_id=ctx.broker.node_id, brokers=brokers,
                 cluster_authorized_operations=ops)


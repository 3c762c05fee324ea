"""Reading a Kafka-compatible cluster over the wire for the pipeline's sources (confluent-kafka).

`sample_cluster` takes one lag sample of every consumer group with the ordinary admin APIs
(ListGroups, DescribeGroups / ConsumerGroupDescribe, OffsetFetch, ListOffsets, Metadata), the same
calls `kafka-consumer-groups.sh --describe` makes, so it works against any broker, not only cohort.
`read_records` fetches the coordinator's record log (`__consumer_offsets`) from the beginning and
decodes it with `cohort.coordinator.records.decode`. Both run inside Spark's Python workers.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator

import pyarrow as pa

from cohort.pipeline import layout

OFFSETS_TOPIC = "__consumer_offsets"

# The source's wide rows: every partition column, then the member-only columns, then which kind of row it is.
# Columns that only one kind of row has are nullable here, whatever the layout table says.
_KEYS = ("sample_seq", "sample_time", "group_id")
SAMPLE_SCHEMA = pa.schema(
    [f if f.name in _KEYS else f.with_nullable(True) for f in layout.PARTITION_SCHEMA]
    + [layout.MEMBER_SCHEMA.field(n) for n in ("instance_id", "rack", "subscribed_topics")]
    + [pa.field("kind", pa.string(), nullable=False)]
)


class WireError(RuntimeError):
    """The cluster did not answer a sampling or fetch request."""


def _state_name(state) -> str | None:
    """ConsumerGroupState.PREPARING_REBALANCE -> 'PreparingRebalance' (the layout's spelling)."""
    name = getattr(state, "name", None) or (str(state) if state is not None else None)
    if not name or name == "UNKNOWN":
        return None
    return "".join(part.capitalize() for part in name.split("_"))


def _type_name(group_type) -> str | None:
    name = getattr(group_type, "name", None)
    return name.lower() if name and name != "UNKNOWN" else None


def admin(bootstrap: str, timeout: float):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                        "client.id": "cohort-pipeline-lag", "log_level": 0})  # errors come back as WireError


def _result(future, timeout: float, what: str):
    try:
        return future.result(timeout)
    except Exception as exc:  # KafkaException or a timeout: one line for the job
        raise WireError(f"{what}: {str(exc).strip() or f'no answer within {timeout:g} s'}") from None


def check(bootstrap: str, timeout: float) -> None:
    """Fail fast, on the driver, when nothing answers at `bootstrap` (a Metadata request)."""
    import confluent_kafka as ck

    try:
        admin(bootstrap, timeout).list_topics(timeout=timeout)
    except ck.KafkaException as exc:
        raise WireError(f"{bootstrap}: no answer within {timeout:g} s ({exc.args[0].str()})") from None


def sample_cluster(bootstrap: str, sample_seq: int, sample_time: dt.datetime | None = None,
                   timeout: float = 15.0) -> pa.Table:
    """One sweep of the cluster: partition and member rows of every consumer group, in SAMPLE_SCHEMA."""
    import confluent_kafka as ck
    from confluent_kafka.admin import OffsetSpec

    sample_time = sample_time or dt.datetime.now(dt.timezone.utc)
    client = admin(bootstrap, timeout)
    listing = _result(client.list_consumer_groups(request_timeout=timeout), timeout, "ListGroups")
    group_ids = sorted({g.group_id for g in listing.valid if not g.is_simple_consumer_group})
    if not group_ids:
        return SAMPLE_SCHEMA.empty_table()
    described = {g: _result(f, timeout, f"describe {g}")
                 for g, f in client.describe_consumer_groups(group_ids, request_timeout=timeout).items()}
    committed: dict[str, dict[tuple[str, int], int]] = {}
    for g in group_ids:  # librdkafka answers one group per ListConsumerGroupOffsets request
        req = ck.ConsumerGroupTopicPartitions(g)
        res = _result(client.list_consumer_group_offsets([req], request_timeout=timeout)[g], timeout, f"offsets of {g}")
        committed[g] = {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0}
    metadata = client.list_topics(timeout=timeout)
    racks = {b.id: None for b in metadata.brokers.values()}
    try:
        racks.update({n.id: n.rack for n in _result(client.describe_cluster(request_timeout=timeout),
                                                    timeout, "DescribeCluster").nodes})
    except WireError:
        pass  # racks are optional
    owners: dict[str, dict[tuple[str, int], object]] = {}
    topics: set[str] = set()
    group_topics: dict[str, set[str]] = {}
    for g in group_ids:
        owners[g] = {}
        mine = {t for t, _ in committed[g]}
        for m in described[g].members:
            for tp in m.assignment.topic_partitions:
                owners[g][(tp.topic, tp.partition)] = m
                mine.add(tp.topic)
        mine = {t for t in mine if t in metadata.topics}
        group_topics[g] = mine
        topics |= mine
    partitions = {t: sorted(metadata.topics[t].partitions) for t in topics}
    wanted = [ck.TopicPartition(t, p) for t, ps in partitions.items() for p in ps]
    offsets: dict[tuple[str, int], list] = {}
    if wanted:
        for which, spec in ((0, OffsetSpec.earliest()), (1, OffsetSpec.latest())):
            futures = client.list_offsets({tp: spec for tp in wanted}, request_timeout=timeout)
            for tp, f in futures.items():
                offsets.setdefault((tp.topic, tp.partition), [None, None])[which] = _result(f, timeout, "ListOffsets").offset
    rows: dict[str, list] = {f.name: [] for f in SAMPLE_SCHEMA}

    def add(**values):
        for name, column in rows.items():
            column.append(values.get(name))

    for g in group_ids:
        d = described[g]
        state, gtype = _state_name(d.state), _type_name(getattr(d, "type", None))
        common = dict(sample_seq=sample_seq, sample_time=sample_time, group_id=g, group_state=state, group_type=gtype)
        for m in d.members:
            subscribed = sorted({tp.topic for tp in m.assignment.topic_partitions}
                                | {tp.topic for tp in (m.target_assignment.topic_partitions if m.target_assignment else [])})
            add(kind="member", member_id=m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.host, rack=None, subscribed_topics=subscribed, **common)
        for t in sorted(group_topics[g]):
            for p in partitions[t]:
                c = committed[g].get((t, p))
                start, end = offsets.get((t, p), (None, None))
                owner = owners[g].get((t, p))
                replica_racks = sorted({racks.get(r) for r in metadata.topics[t].partitions[p].replicas} - {None})
                add(kind="partition", topic=t, partition=p, committed_offset=c, start_offset=start, end_offset=end,
                    lag=None if c is None or end is None else max(end - c, 0),
                    member_id=owner.member_id if owner else None, client_id=owner.client_id if owner else None,
                    client_host=owner.host if owner else None, replica_racks=replica_racks, **common)
    return pa.table(rows, schema=SAMPLE_SCHEMA)


def project(table: pa.Table, which: str) -> pa.Table:
    """The rows of one layout table ('partitions' or 'members') out of a wide sample."""
    schema = layout.PARTITION_SCHEMA if which == layout.PARTITIONS_TABLE else layout.MEMBER_SCHEMA
    kind = "partition" if which == layout.PARTITIONS_TABLE else "member"
    import pyarrow.compute as pc

    picked = table.filter(pc.equal(table["kind"], kind))
    return pa.table([picked[f.name] for f in schema], schema=schema)  # checks the kind's non-null columns


RECORD_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("record_type", pa.string(), nullable=False),
        pa.field("tombstone", pa.bool_(), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("member_id", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("committed_offset", pa.int64()),
        pa.field("leader_epoch", pa.int32()),
        pa.field("commit_timestamp", pa.int64()),
        pa.field("group_epoch", pa.int32()),
        pa.field("assignment_epoch", pa.int32()),
        pa.field("member_epoch", pa.int32()),
        pa.field("previous_member_epoch", pa.int32()),
        pa.field("member_state", pa.string()),
        pa.field("instance_id", pa.string()),
        pa.field("rack", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_host", pa.string()),
        pa.field("subscribed_topics", pa.list_(pa.string())),
        pa.field("subscribed_regex", pa.string()),
        pa.field("server_assignor", pa.string()),
        pa.field("target_assignment", pa.list_(pa.string())),
        pa.field("assigned_partitions", pa.list_(pa.string())),
        pa.field("pending_revocation", pa.list_(pa.string())),
        pa.field("error", pa.string()),
    ]
)


def _partitions(assignment) -> list[str]:
    """An assignment {topic id: partitions} as sorted 'topic-id:partition' strings."""
    return [f"{tid}:{p}" for tid, ps in sorted(assignment.items(), key=lambda kv: str(kv[0])) for p in ps]


def record_row(offset: int, timestamp: dt.datetime | None, key: bytes, value: bytes | None) -> dict:
    """One decoded coordinator record as a RECORD_SCHEMA row; an undecodable one keeps its error."""
    from cohort.coordinator import records as r

    row: dict = {"offset": offset, "timestamp": timestamp, "tombstone": value is None}
    try:
        rec = r.decode(key, value)
    except r.RecordFormatError as exc:
        return {**row, "record_type": "UNDECODABLE", "group_id": "", "error": str(exc)}
    k, v = rec.key, rec.value
    row.update(record_type=k.TYPE.name, group_id=k.group_id, member_id=getattr(k, "member_id", None))
    if isinstance(k, r.OffsetCommitKey):
        row.update(topic=k.topic, partition=k.partition)
    if v is None:
        return row
    if isinstance(v, r.OffsetCommitValue):
        row.update(committed_offset=v.offset, leader_epoch=v.leader_epoch, commit_timestamp=v.commit_timestamp)
    elif isinstance(v, r.ConsumerGroupMetadataValue):
        row.update(group_epoch=v.epoch)
    elif isinstance(v, r.ConsumerGroupTargetAssignmentMetadataValue):
        row.update(assignment_epoch=v.assignment_epoch)
    elif isinstance(v, r.ConsumerGroupMemberMetadataValue):
        row.update(instance_id=v.instance_id, rack=v.rack_id, client_id=v.client_id, client_host=v.client_host,
                   subscribed_topics=list(v.subscribed_topic_names), subscribed_regex=v.subscribed_topic_regex,
                   server_assignor=v.server_assignor)
    elif isinstance(v, r.ConsumerGroupTargetAssignmentMemberValue):
        row.update(target_assignment=_partitions(v.partitions))
    elif isinstance(v, r.ConsumerGroupCurrentMemberAssignmentValue):
        row.update(member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,
                   member_state=v.state.name, assigned_partitions=_partitions(v.assigned_partitions),
                   pending_revocation=_partitions(v.partitions_pending_revocation))
    elif isinstance(v, r.GroupMetadataValue):
        row.update(group_epoch=v.generation)
    return row


def read_records(bootstrap: str, partition: int = 0, timeout: float = 15.0, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Every record of one `__consumer_offsets` partition from its start to the end seen at the start."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"cohort-records-{uuid.uuid4()}",
                            "enable.auto.commit": False, "enable.auto.offset.store": False,
                            "check.crcs": True, "isolation.level": "read_uncommitted", "log_level": 0})
    try:
        try:
            start, end = consumer.get_watermark_offsets(ck.TopicPartition(OFFSETS_TOPIC, partition), timeout=timeout)
        except ck.KafkaException as exc:
            raise WireError(f"ListOffsets {OFFSETS_TOPIC}: {exc}") from None
        if end <= start:
            return
        consumer.assign([ck.TopicPartition(OFFSETS_TOPIC, partition, ck.OFFSET_BEGINNING)])
        rows: list[dict] = []
        position = start
        idle_until = None
        import time

        while position < end:
            msg = consumer.poll(0.5)
            if msg is None:
                idle_until = idle_until or time.monotonic() + timeout
                if time.monotonic() > idle_until:
                    raise WireError(f"fetching {OFFSETS_TOPIC}: no data for {timeout:.0f} s at offset {position} (end {end})")
                continue
            idle_until = None
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    break
                raise WireError(f"fetching {OFFSETS_TOPIC}: {msg.error()}")
            position = msg.offset() + 1
            ts_type, ts = msg.timestamp()
            when = None if ts_type == ck.TIMESTAMP_NOT_AVAILABLE else dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc)
            rows.append(record_row(msg.offset(), when, msg.key() or b"", msg.value()))
            if len(rows) >= batch_rows:
                yield pa.RecordBatch.from_pylist(rows, schema=RECORD_SCHEMA)
                rows = []
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=RECORD_SCHEMA)
    finally:
        consumer.close()

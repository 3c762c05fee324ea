"""Reading a Kafka-compatible cluster over the wire for the pipeline's sources (confluent-kafka).

`sample_cluster` takes one lag sample of every consumer group with the ordinary admin APIs
(ListGroups, DescribeGroups / ConsumerGroupDescribe, OffsetFetch, ListOffsets, Metadata), the same
calls `kafka-consumer-groups.sh --describe` makes, so it works against any broker, not only cohort.
confluent-kafka's group description leaves out what members subscribe to and their racks, so
`member_facts` asks each group's coordinator itself with cohort's own protocol codec:
ConsumerGroupDescribe for consumer-protocol groups, DescribeGroups (whose member metadata is the
ConsumerProtocol subscription) for classic ones.
`read_records` fetches a range of the coordinator's record log (`__consumer_offsets`; by default
all of it) and decodes it with `cohort.coordinator.records.decode`. Both run inside Spark's Python workers.
"""

from __future__ import annotations

import datetime as dt
import socket
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from cohort.librdkafka import client_settings
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

    return AdminClient(client_settings({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                                        "client.id": "cohort-pipeline-lag", "log_level": 0}))  # errors come back as WireError


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


def group_count(bootstrap: str, timeout: float) -> int:
    """How many consumer groups the cluster lists (ListGroups), asked on the driver."""
    client = admin(bootstrap, timeout)
    listed = _result(client.list_consumer_groups(request_timeout=timeout), timeout, f"{bootstrap}: ListGroups")
    return len(listed.valid)


API_VERSIONS, DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE = 18, 15, 69
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})  # never matched by a regex
_OUR_VERSIONS = {DESCRIBE_GROUPS: (0, 5), CONSUMER_GROUP_DESCRIBE: (0, 1)}


@dataclass(frozen=True)
class MemberFacts:
    """What a group's coordinator says one member subscribes to, and its rack."""

    subscribed_topics: tuple[str, ...]
    rack: str | None


class Connection:
    """One blocking connection to a broker, speaking the protocol with `cohort.protocol`'s codec."""

    def __init__(self, host: str, port: int, timeout: float):
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise WireError(f"{host}:{port}: {exc.strerror or exc}") from None
        self._where = f"{host}:{port}"
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}

    def __enter__(self) -> "Connection":
        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        response = self.request(API_VERSIONS, 0, ApiVersionsRequest())
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        return self

    def __exit__(self, *exc) -> None:
        self._sock.close()

    def version(self, api_key: int) -> int | None:
        """The highest version of the API that both sides speak, or None."""
        theirs, ours = self.versions.get(api_key), _OUR_VERSIONS[api_key]
        if theirs is None or theirs[0] > ours[1] or ours[0] > theirs[1]:
            return None
        return min(theirs[1], ours[1])

    def request(self, api_key: int, version: int, body):
        from cohort.protocol.codec import MalformedResponse, decode_response, encode_request

        self._correlation += 1
        try:
            self._sock.sendall(encode_request(api_key, version, self._correlation, "cohort-pipeline-lag", body))
            (size,) = struct.unpack(">i", self._read(4))
            correlation, response = decode_response(api_key, version, self._read(size))
        except (OSError, MalformedResponse) as exc:
            raise WireError(f"{self._where}: api {api_key} v{version}: {exc}") from None
        if correlation != self._correlation:
            raise WireError(f"{self._where}: api {api_key} answered correlation id {correlation}, not {self._correlation}")
        return response

    def _read(self, n: int) -> bytes:
        chunks = []
        while n > 0:
            chunk = self._sock.recv(min(n, 1 << 20))
            if not chunk:
                raise OSError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def member_facts(coordinator: tuple[str, int], consumer_groups: list[str], classic_groups: list[str],
                 topics: list[str], timeout: float) -> dict[str, dict[str, MemberFacts]]:
    """{group: {member: facts}} for the groups one coordinator holds. A group the coordinator cannot
    describe (an error code, or an API it does not serve) is left out: its members keep the facts
    the admin API gave."""
    import re2
    from kio.index import load_request_schema

    from cohort.coordinator.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_subscription

    found: dict[str, dict[str, MemberFacts]] = {}
    with Connection(*coordinator, timeout) as conn:
        version = conn.version(CONSUMER_GROUP_DESCRIBE)
        if consumer_groups and version is not None:
            request = load_request_schema(CONSUMER_GROUP_DESCRIBE, version)(
                group_ids=tuple(consumer_groups), include_authorized_operations=False)
            for g in conn.request(CONSUMER_GROUP_DESCRIBE, version, request).groups:
                if g.error_code.value != 0:
                    continue
                facts = found.setdefault(g.group_id, {})
                for m in g.members:
                    subscribed = set(m.subscribed_topic_names)
                    if m.subscribed_topic_regex:
                        try:
                            pattern = re2.compile(m.subscribed_topic_regex)
                        except re2.error:
                            pattern = None
                        if pattern is not None:  # as the coordinator resolves it: RE2, full match
                            subscribed.update(t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t))
                    facts[m.member_id] = MemberFacts(tuple(sorted(subscribed)), m.rack_id)
        version = conn.version(DESCRIBE_GROUPS)
        if classic_groups and version is not None:
            request = load_request_schema(DESCRIBE_GROUPS, version)(
                groups=tuple(classic_groups), **({"include_authorized_operations": False} if version >= 3 else {}))
            for g in conn.request(DESCRIBE_GROUPS, version, request).groups:
                if g.error_code.value != 0 or g.protocol_type != PROTOCOL_TYPE:
                    continue
                facts = found.setdefault(g.group_id, {})
                for m in g.members:
                    try:
                        sub = decode_subscription(m.member_metadata)
                    except ConsumerProtocolError:
                        continue
                    facts[m.member_id] = MemberFacts(tuple(sorted(set(sub.topics))), sub.rack_id)
    return found


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
    facts = _member_facts(described, sorted(metadata.topics), timeout)
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
            known = facts.get(g, {}).get(m.member_id)
            if known is not None:
                mine.update(known.subscribed_topics)
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
            known = facts.get(g, {}).get(m.member_id)
            if known is None:  # the topics it is assigned (or about to be) is all the admin API tells
                subscribed = sorted({tp.topic for tp in m.assignment.topic_partitions}
                                    | {tp.topic for tp in (m.target_assignment.topic_partitions if m.target_assignment else [])})
                rack = None
            else:
                subscribed, rack = list(known.subscribed_topics), known.rack
            add(kind="member", member_id=m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.host, rack=rack, subscribed_topics=subscribed, **common)
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


def _member_facts(described: dict, topics: list[str], timeout: float) -> dict[str, dict[str, MemberFacts]]:
    """`member_facts` of every described group, asking each coordinator once. A coordinator that
    cannot be reached or asked leaves its groups with what the admin API gave: those facts are
    extras, and the sample stands without them."""
    by_coordinator: dict[tuple[str, int], tuple[list[str], list[str]]] = {}
    for g, d in described.items():
        node = getattr(d, "coordinator", None)
        if node is None or not d.members:
            continue
        consumer, classic = by_coordinator.setdefault((node.host, node.port), ([], []))
        (consumer if _type_name(getattr(d, "type", None)) == "consumer" else classic).append(g)
    found: dict[str, dict[str, MemberFacts]] = {}
    for coordinator, (consumer, classic) in sorted(by_coordinator.items()):
        try:
            found.update(member_facts(coordinator, consumer, classic, topics, timeout))
        except WireError:
            continue
    return found


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


def _records_consumer(bootstrap: str):
    import confluent_kafka as ck

    return ck.Consumer(client_settings({"bootstrap.servers": bootstrap, "group.id": f"cohort-records-{uuid.uuid4()}",
                                        "enable.auto.commit": False, "enable.auto.offset.store": False,
                                        "enable.partition.eof": True, "check.crcs": True,
                                        "isolation.level": "read_uncommitted", "log_level": 0}))


def log_bounds(bootstrap: str, partition: int = 0, timeout: float = 15.0) -> tuple[int, int]:
    """(first offset, end offset) of one `__consumer_offsets` partition now."""
    import confluent_kafka as ck

    consumer = _records_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(ck.TopicPartition(OFFSETS_TOPIC, partition), timeout=timeout)
    except ck.KafkaException as exc:
        raise WireError(f"ListOffsets {OFFSETS_TOPIC}: {exc}") from None
    finally:
        consumer.close()


def read_records(bootstrap: str, partition: int = 0, timeout: float = 15.0, batch_rows: int = 10_000,
                 start: int | None = None, end: int | None = None) -> Iterator[pa.RecordBatch]:
    """The records of one `__consumer_offsets` partition at offsets [start, end): by default from
    its first offset to the end offset seen when the read starts."""
    import time

    import confluent_kafka as ck

    if start is None or end is None:
        first, last = log_bounds(bootstrap, partition, timeout)
        start = first if start is None else max(start, first)
        end = last if end is None else end
    if end <= start:
        return
    consumer = _records_consumer(bootstrap)
    try:
        consumer.assign([ck.TopicPartition(OFFSETS_TOPIC, partition, start)])
        rows: list[dict] = []
        position = start
        idle_until = None
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
                    break  # the log ends before `end`: nothing left to read there
                raise WireError(f"fetching {OFFSETS_TOPIC}: {msg.error()}")
            if msg.offset() >= end:
                break
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

"""Request builders shared by the server tests (kio entities for any version)."""

import datetime

from kio.index import load_request_schema

from cohort.protocol.entities import build, nested


def req(api_key, version, **kw):
    return build(load_request_schema(api_key, version), **kw)


def sub(api_key, version, *path, **kw):
    cls = load_request_schema(api_key, version)
    for name in path:
        cls = nested(cls, name)
    return build(cls, **kw)


def ms(n):
    return datetime.timedelta(milliseconds=n)


def produce(version, topic, partition, records, acks=-1):
    part = sub(0, version, "topic_data", "partition_data", index=partition, records=records)
    data = sub(0, version, "topic_data", name=topic, partition_data=(part,))
    return req(0, version, transactional_id=None, acks=acks, timeout=ms(1000), topic_data=(data,))


def fetch(version, topics, max_wait=0, min_bytes=1, session_id=0, session_epoch=-1, max_bytes=1 << 24, partition_max_bytes=1 << 20):
    """topics: list of (name or uuid, [(partition, offset)])."""
    entries = []
    for key, parts in topics:
        ps = tuple(sub(1, version, "topics", "partitions", partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes,
                       current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1) for p, o in parts)
        entries.append(sub(1, version, "topics", topic=key, topic_id=key, partitions=ps))
    return req(1, version, replica_id=-1, max_wait=ms(max_wait), min_bytes=min_bytes, max_bytes=max_bytes,
               isolation_level=0, session_id=session_id, session_epoch=session_epoch, topics=tuple(entries),
               forgotten_topics_data=(), rack_id="")


def metadata(version, names=None, ids=None, auto=False, id_name=None):
    """``id_name``: the name sent beside each id (Kafka 4.1's client sends "", others null)."""
    topics = None
    if names is not None:
        topics = tuple(sub(3, version, "topics", name=n, topic_id=None) for n in names)
    if ids is not None:
        topics = tuple(sub(3, version, "topics", name=id_name, topic_id=i) for i in ids)
    return req(3, version, topics=topics, allow_auto_topic_creation=auto, include_cluster_authorized_operations=False,
               include_topic_authorized_operations=False)


def create_topics(version, *specs, validate_only=False):
    """specs: (name, partitions) or (name, partitions, {config: value})."""
    topics = []
    for spec in specs:
        name, n = spec[0], spec[1]
        configs = tuple(sub(19, version, "topics", "configs", name=k, value=v) for k, v in (spec[2] if len(spec) > 2 else {}).items())
        topics.append(sub(19, version, "topics", name=name, num_partitions=n, replication_factor=-1, assignments=(), configs=configs))
    return req(19, version, topics=tuple(topics), timeout=ms(1000), validate_only=validate_only)


def list_offsets(version, topic, partition, timestamp):
    p = sub(2, version, "topics", "partitions", partition_index=partition, timestamp=timestamp, current_leader_epoch=-1)
    t = sub(2, version, "topics", name=topic, partitions=(p,))
    return req(2, version, replica_id=-1, isolation_level=0, topics=(t,))

"""Shared fixtures for the coordinator tests: a fake clock, a tiny assignor, request builders."""

from __future__ import annotations

import uuid

from cohort.assignors.api import GroupSpec, SubscribedTopicDescriber
from cohort.coordinator import (
    ConsumerGroupHeartbeatRequest,
    CoordinatorConfig,
    GroupCoordinatorShard,
    MetadataImage,
    TopicImage,
)

FOO = uuid.UUID(int=0xF00)
BAR = uuid.UUID(int=0xBA4)
BAZ = uuid.UUID(int=0xBA2)
IDS = {"foo": FOO, "bar": BAR, "baz": BAZ}


class RangeTestAssignor:
    """Per topic, contiguous ranges over the subscribers sorted by member id (no stickiness)."""

    name = "simple"

    def __init__(self) -> None:
        self.calls = 0

    def assign(self, spec: GroupSpec, topics: SubscribedTopicDescriber) -> dict:
        self.calls += 1
        out: dict[str, dict] = {m: {} for m in spec.members}
        all_topics = sorted({t for s in spec.members.values() for t in s.subscribed_topic_ids})
        for topic in all_topics:
            n = topics.num_partitions(topic)
            subs = sorted(m for m, s in spec.members.items() if topic in s.subscribed_topic_ids)
            if n <= 0 or not subs:
                continue
            quota, extra = divmod(n, len(subs))
            start = 0
            for i, m in enumerate(subs):
                size = quota + (1 if i < extra else 0)
                if size:
                    out[m][topic] = tuple(range(start, start + size))
                start += size
        return out


class FailingAssignor:
    name = "failing"

    def assign(self, spec, topics):
        raise RuntimeError("boom")


def image(version: int = 1, racks: dict | None = None, **partitions: int) -> MetadataImage:
    racks = racks or {}
    return MetadataImage.of(
        [TopicImage(name, IDS[name], n, racks.get(name, ())) for name, n in partitions.items()], version
    )


def make_shard(config: CoordinatorConfig | None = None, img: MetadataImage | None = None, now: int = 0,
               **kw) -> GroupCoordinatorShard:
    config = config or CoordinatorConfig(consumer_assignors=("simple", "failing", "uniform", "range"))
    assignors = kw.pop("assignors", {"simple": RangeTestAssignor(), "failing": FailingAssignor()})
    shard = GroupCoordinatorShard(config, assignors=assignors, image=img or image(foo=6, bar=3), **kw)
    shard.on_loaded(now)
    return shard


def join(group: str, member: str, topics=("foo",), **kw) -> ConsumerGroupHeartbeatRequest:
    kw.setdefault("rebalance_timeout_ms", 300_000)
    kw.setdefault("topic_partitions", {})
    return ConsumerGroupHeartbeatRequest(group, member, 0, subscribed_topic_names=list(topics), **kw)


def hb(group: str, member: str, epoch: int, owned=None, **kw) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(group, member, epoch, topic_partitions=owned, **kw)


def run(shard: GroupCoordinatorShard, request, now: int):
    """Handle a write and commit it at once (the log append always succeeds)."""
    result = shard.handle(request, now)
    shard.commit(result.end_offset)
    return result


def dump(shard: GroupCoordinatorShard) -> dict:
    """Everything the records determine, in comparable form."""
    groups = {}
    for gid, g in shard.state.groups.items():
        groups[gid] = (
            g.group_epoch, g.metadata_hash, g.assignment_epoch,
            {m: v for m, v in g.members.items()},
            {m: dict(a) for m, a in g.target_assignment.items()}, dict(g.target_results),
            {t: dict(p) for t, p in g.partition_epochs.items() if p},
            dict(g.static_members), dict(g.subscribed_names), dict(g.regex_counts),
            dict(g.resolved_regexes), dict(g.assignor_counts),
        )
    return {
        "groups": groups,
        "offsets": {g: dict(o) for g, o in shard.state.offsets.items()},
        "configs": {g: dict(c.raw) for g, c in shard.state.configs.items()},
    }


def rebuilt(records, config=None, img=None, now: int = 0, **kw) -> GroupCoordinatorShard:
    """A fresh shard loaded from the given records."""
    shard = GroupCoordinatorShard(config or CoordinatorConfig(consumer_assignors=("simple", "failing", "uniform", "range")),
                                  assignors={"simple": RangeTestAssignor(), "failing": FailingAssignor()},
                                  image=img or image(foo=6, bar=3), **kw)
    for record in records:
        shard.replay(record)
    shard.on_loaded(now)
    return shard

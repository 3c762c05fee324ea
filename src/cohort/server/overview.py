"""Read-only views of the running broker for operators: groups, members, lag, topics.

`/metrics` and the dashboard read these. They are built on the event loop from the live state in
one pass (no awaits, so what they show is one consistent moment) and hold only plain values, so
they can be rendered afterwards without touching the coordinator. They show the live state, which
may be a few milliseconds ahead of what is durable; that is what an operator wants to watch.

The runtime also feeds three things the state machines do not keep: each group's epoch timeline
and which groups changed (both from the records it appends), and assignor run times (by wrapping
the assignors it hands the shard).
"""

from __future__ import annotations

import collections
import time
import weakref
from dataclasses import dataclass
from typing import Any, Iterable

from cohort.coordinator.consumer_protocol import ConsumerProtocolError, decode_assignment
from cohort.coordinator.records import (ConsumerGroupMetadataKey, GroupMetadataKey, OffsetCommitKey, ShareGroupMetadataKey,
                                       TxnMarker)
from cohort.stats import Histogram

TIMELINE_LENGTH = 64  # epoch changes kept per group


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    epoch: int
    state: str  # stable, unrevoked_partitions, unreleased_partitions; "classic" for a classic member
    assigned: tuple[tuple[str, int], ...]
    target: tuple[tuple[str, int], ...]
    pending_revocation: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    type: str  # consumer or classic
    protocol: str  # consumer, or a classic group's protocol type ("" for a group with offsets only)
    state: str
    epoch: int  # group epoch, or a classic group's generation
    assignment_epoch: int
    assignor: str
    members: tuple[MemberView, ...]
    committed: dict[tuple[str, int], int]

    def lag(self, ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Per committed partition: log end - committed offset (never below 0)."""
        return {tp: max(ends.get(tp, off) - off, 0) for tp, off in self.committed.items()}


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    partition: int
    start: int
    end: int
    size: int


class EpochTimeline:
    """Each group's recent epoch (or generation) changes: (time ms, epoch), newest last."""

    def __init__(self) -> None:
        self.by_group: dict[str, collections.deque] = {}
        self.bumps = {"consumer": 0, "classic": 0, "share": 0}  # epoch bumps since start, by group type

    def observe(self, records: Iterable[Any], now_ms: int) -> None:
        for record in records:
            key, value = record
            cls = type(key)
            if value is None or (cls is not ConsumerGroupMetadataKey and cls is not GroupMetadataKey
                                 and cls is not ShareGroupMetadataKey):
                continue
            if cls is ConsumerGroupMetadataKey:
                epoch, kind = value.epoch, "consumer"
            elif cls is ShareGroupMetadataKey:
                epoch, kind = value.epoch, "share"
            else:
                epoch, kind = value.generation, "classic"
            line = self.by_group.get(key.group_id)
            if line is None:
                line = self.by_group[key.group_id] = collections.deque(maxlen=TIMELINE_LENGTH)
            if line and line[-1][1] == epoch:
                continue  # the same epoch written again (a metadata hash refresh)
            line.append((now_ms, epoch))
            self.bumps[kind] += 1

    def of(self, group_id: str) -> list[tuple[int, int]]:
        return list(self.by_group.get(group_id, ()))


CHANGES_LIMIT = 1 << 18  # group ids a subscription holds before it says "everything" instead


class ChangeSubscription:
    """The groups whose records were written since the last `take`, for one reader."""

    __slots__ = ("_groups", "_offsets", "_everything", "__weakref__")

    def __init__(self) -> None:
        self._groups: set[str] = set()  # any record but a committed offset
        self._offsets: set[str] = set()  # committed offsets (set or removed)
        self._everything = True  # a new reader has seen nothing yet

    def take(self) -> tuple[set[str], set[str]] | None:
        """(groups with any record other than an offset commit, groups with offset commits) since
        the last call, or None when every group must be read again (the first call, a reverted
        write, new topic metadata, or more changes than were kept)."""
        if self._everything:
            self._everything = False
            self._groups, self._offsets = set(), set()
            return None
        taken = self._groups, self._offsets
        self._groups, self._offsets = set(), set()
        return taken


class ChangeFeed:
    """Which groups the coordinator's records touched, so /metrics re-reads only those.

    Every state change of a consumer group and every committed offset is a record; the runtime
    passes each write's records here. What records do not show (a classic group's rebalance in
    memory) the reader checks itself (`live_classic`)."""

    def __init__(self) -> None:
        # weak references, dropped when their reader is: a plain list costs a write with no
        # reader one truth test (a WeakSet's iterator costs about 3.7 us, on every write)
        self._subscriptions: list[weakref.ref] = []

    def subscribe(self) -> ChangeSubscription:
        subscription = ChangeSubscription()
        self._subscriptions.append(weakref.ref(subscription, self._subscriptions.remove))
        return subscription

    def _live(self) -> list[ChangeSubscription]:
        return [s for s in (ref() for ref in self._subscriptions) if s is not None]

    def observe(self, records: Iterable[Any]) -> None:
        if not self._subscriptions:
            return
        for subscription in self._live():
            if subscription._everything:
                continue
            groups, offsets = subscription._groups, subscription._offsets
            for record in records:
                key = record[0]
                if type(key) is TxnMarker:  # a transaction's end settles offsets in these groups
                    offsets.update(key.groups)
                    continue
                (offsets if type(key) is OffsetCommitKey else groups).add(key.group_id)
            if len(groups) + len(offsets) > CHANGES_LIMIT:
                subscription._everything = True
                subscription._groups, subscription._offsets = set(), set()

    def everything(self) -> None:
        """State moved in a way records do not describe (a revert, topic metadata)."""
        for subscription in self._live():
            subscription._everything = True
            subscription._groups, subscription._offsets = set(), set()


class TimedAssignor:
    """An assignor whose `assign` run times go to a histogram (the shard stays clock-free)."""

    def __init__(self, assignor: Any, histogram: Histogram) -> None:
        self._assignor = assignor
        self._histogram = histogram

    def assign(self, spec: Any, describer: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._assignor.assign(spec, describer)
        finally:
            self._histogram.observe(time.perf_counter() - started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._assignor, name)


def _named(assignment: Any, names: Any) -> tuple[tuple[str, int], ...]:
    out = []
    for topic_id, partitions in assignment.items():
        name = names(topic_id)
        if name is not None:
            out.extend((name, p) for p in partitions)
    out.sort()
    return tuple(out)


def _classic_partitions(data: bytes, protocol_type: str | None) -> tuple[tuple[str, int], ...]:
    if protocol_type != "consumer" or not data:
        return ()
    try:
        parts = decode_assignment(data).partitions
    except ConsumerProtocolError:
        return ()
    return tuple(sorted((t, p) for t, ps in parts for p in ps))


def group_views(shard: Any, topic_name: Any, only: str | None = None) -> list[GroupView]:
    """Every group the shard knows (or just `only`), sorted by id. `topic_name(topic_id)` names a
    topic (None for one deleted since)."""
    state = shard.state
    ids = [only] if only is not None else sorted(state.groups.keys() | state.classic_groups.keys() | state.offsets.keys())
    out = []
    for gid in ids:
        committed = {tp: v.offset for tp, v in state.offsets.get(gid, {}).items()}
        classic = state.classic_groups.get(gid)
        group = state.groups.get(gid)
        if group is not None and (classic is None or not classic.members):
            target_epoch = group.assignment_epoch
            members = tuple(
                MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, m.member_epoch,
                           m.state.name.lower() if m.classic_member_metadata is None else "classic",
                           _named(m.assigned_partitions, topic_name),
                           _named(group.target_assignment.get(m.member_id, {}), topic_name),
                           _named(m.partitions_pending_revocation, topic_name))
                for m in sorted(group.members.values(), key=lambda m: m.member_id))
            out.append(GroupView(gid, "consumer", "consumer", group.state().value, group.group_epoch, target_epoch,
                                 shard.assignor_name(group) if group.members else "", members, committed))
        elif classic is not None:
            members = tuple(
                MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, classic.generation_id, "classic",
                           parts := _classic_partitions(m.assignment, classic.protocol_type), parts, ())
                for m in sorted(classic.members.values(), key=lambda m: m.member_id))
            out.append(GroupView(gid, "classic", classic.protocol_type or "", classic.state.value, classic.generation_id,
                                 classic.generation_id, classic.protocol_name or "", members, committed))
        elif committed:
            out.append(GroupView(gid, "classic", "", "Empty", 0, 0, "", (), committed))
    return out


class GroupLag:
    """What /metrics needs of one group, without building member views. `committed` is the
    shard's own map of (topic, partition) to OffsetCommitValue (read `.offset`; do not keep it
    past the event loop turn). `members_key` changes whenever membership or an assignment does
    (it holds the member values, which the shard replaces rather than mutates, or a classic
    group's generation), so a renderer may cache what `owners()` gave for it."""

    __slots__ = ("group_id", "type", "state", "epoch", "members", "committed", "members_key", "_group", "_topic_name")

    def __init__(self, group_id: str, kind: str, state: str, epoch: int, members: int, committed: Any,
                 members_key: Any, group: Any, topic_name: Any) -> None:
        self.group_id, self.type, self.state, self.epoch, self.members = group_id, kind, state, epoch, members
        self.committed, self.members_key, self._group, self._topic_name = committed, members_key, group, topic_name

    def owners(self) -> dict:
        """(topic, partition) -> (host, member id, client id) of the member holding it now."""
        owners: dict = {}
        group = self._group
        if group is None:
            return owners
        if self.type == "consumer":
            for m in group.members.values():
                who = (m.client_host, m.member_id, m.client_id)
                for topic_id, partitions in m.assigned_partitions.items():
                    name = self._topic_name(topic_id)
                    if name is not None:
                        for p in partitions:
                            owners[(name, p)] = who
        else:
            for m in group.members.values():
                who = (m.client_host, m.member_id, m.client_id)
                for tp in _classic_partitions(m.assignment, group.protocol_type):
                    owners[tp] = who
        return owners


def group_ids(shard: Any) -> list[str]:
    """Every group the shard knows (consumer, classic, or with committed offsets only), sorted."""
    state = shard.state
    return sorted(state.groups.keys() | state.classic_groups.keys() | state.offsets.keys())


def group_lags(shard: Any, topic_name: Any, only: Iterable[str] | None = None) -> list[GroupLag]:
    """Every group sorted by id (or those of `only` that exist, in its order), in one cheap pass
    (the metrics scrape runs it at 10,000s of groups)."""
    state = shard.state
    offsets = state.offsets
    no_offsets: dict = {}
    out = []
    if only is None:
        only = group_ids(shard)
    for gid in only:
        classic = state.classic_groups.get(gid)
        group = state.groups.get(gid)
        committed = offsets.get(gid, no_offsets)
        if group is None and classic is None and gid not in offsets:
            continue
        if group is not None and (classic is None or not classic.members):
            members = group.members
            out.append(GroupLag(gid, "consumer", group.state().value, group.group_epoch, len(members), committed,
                                tuple(members.values()), group, topic_name))
        elif classic is not None:
            key = (classic.generation_id, classic.state, tuple(classic.members))  # assignments land at Stable
            out.append(GroupLag(gid, "classic", classic.state.value, classic.generation_id, len(classic.members),
                                committed, key, classic, topic_name))
        else:
            out.append(GroupLag(gid, "classic", "Empty", 0, 0, committed, (), None, topic_name))
    return out


def committed_offsets(shard: Any, group_ids: Iterable[str]) -> list[Any]:
    """For each group, the shard's own map of (topic, partition) to OffsetCommitValue, or None
    (read `.offset`; do not keep them past the event loop turn)."""
    get = shard.state.offsets.get
    return [get(gid) for gid in group_ids]


def live_classic(shard: Any) -> dict[str, tuple]:
    """Each classic group with members: what of it /metrics shows that changes in memory, without
    a record, during a rebalance (generation, state, member ids)."""
    return {gid: (g.generation_id, g.state, tuple(g.members))
            for gid, g in shard.state.classic_groups.items() if g.members}


def partition_views(broker: Any, include_internal: bool = False) -> list[PartitionView]:
    """Every partition's log start and end offsets and size on disk, by topic and partition."""
    snap = broker.metadata_snapshot()
    out = []
    for name in sorted(snap.topics):
        topic = snap.topics[name]
        if topic.internal and not include_internal:
            continue
        for p in range(topic.num_partitions):
            log = broker.log(name, p)
            out.append(PartitionView(name, p, topic.start_offsets[p], topic.end_offsets[p],
                                     0 if log is None else log.size_bytes))
    return out

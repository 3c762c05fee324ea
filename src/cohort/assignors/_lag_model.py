"""The lag assignor's view of a group: numpy arrays in, plain dicts out.

Members are numbered 0..M-1 in member-id order and partitions get one global index each
(`offset[t] + p`, topics in sorted order), so an assignment is a single owner array. Only the
edges (reading the spec, writing the result) touch Python objects.
"""

from __future__ import annotations

from itertools import chain, islice, repeat

import numpy as np

from cohort.assignors.api import (
    GroupAssignment,
    GroupSpec,
    PartitionAssignorError,
    SubscribedTopicDescriber,
    SubscriptionType,
)

INT64_MAX = (1 << 63) - 1
_singles: list[tuple[int, ...]] = [(p,) for p in range(4096)]


class Model:
    """Topics with at least one partition and one subscriber, their lags, and who subscribes to them."""

    __slots__ = (
        "member_ids", "topic_ids", "counts", "offsets", "subscribers", "lags", "greedy_order",
        "lag", "topic_of", "homogeneous", "total", "active", "class_topics", "member_class",
    )

    def __init__(self, spec: GroupSpec, topics: SubscribedTopicDescriber):
        members = spec.members
        self.member_ids = sorted(members)

        # Members with identical subscriptions form a class; topics subscribed by the same classes
        # share one subscriber array (ascending member indices).
        # The spec's HOMOGENEOUS is trusted, as Kafka does: comparing 10,000 subscriptions of 1,000
        # topics each would cost more than the whole assignment.
        classes: dict[frozenset, list[int]] = {}
        if spec.subscription_type is SubscriptionType.HOMOGENEOUS and members:
            classes[members[self.member_ids[0]].subscribed_topic_ids] = list(range(len(members)))
        else:
            for i, member_id in enumerate(self.member_ids):
                classes.setdefault(members[member_id].subscribed_topic_ids, []).append(i)
        class_members = list(classes.values())
        self.class_topics = list(classes)
        self.member_class = np.zeros(len(members), dtype=np.int64)
        for c, idx in enumerate(class_members):
            self.member_class[idx] = c
        classes_of_topic: dict = {}
        for c, subs in enumerate(classes):
            for topic_id in subs:
                classes_of_topic.setdefault(topic_id, []).append(c)

        self.homogeneous = len(classes) == 1
        shared: dict[tuple, np.ndarray] = {}
        self.topic_ids, self.counts, self.subscribers, raw_lags = [], [], [], []
        for topic_id in sorted(classes_of_topic):
            n = topics.num_partitions(topic_id)
            if n <= 0:
                continue
            sig = tuple(classes_of_topic[topic_id])
            subs = shared.get(sig)
            if subs is None:
                subs = np.sort(np.concatenate([np.array(class_members[c], dtype=np.int64) for c in sig]))
                shared[sig] = subs
            self.topic_ids.append(topic_id)
            self.counts.append(n)
            self.subscribers.append(subs)
            raw_lags.append(topics.partition_lags(topic_id))
        # Members subscribed to at least one topic with partitions.
        self.active = sum(len(class_members[c]) for c in {c for sig in shared for c in sig})

        self.offsets = [0]
        for n in self.counts:
            self.offsets.append(self.offsets[-1] + n)
        self.total = self.offsets[-1]
        cap = INT64_MAX // max(self.total, 1)
        self.lag = _lag_vector(raw_lags, self.counts, cap)
        self.lags = [self.lag[a:b] for a, b in zip(self.offsets, self.offsets[1:])]
        self.topic_of = np.repeat(np.arange(len(self.counts), dtype=np.int64), self.counts)
        # Global partition ids, topic by topic, each topic's by decreasing lag (ties: lower partition):
        # one stable sort on (topic, max - lag) when that key fits in int64, else one sort per topic.
        top = int(self.lag.max()) if self.total else 0
        if len(self.counts) * (top + 1) <= INT64_MAX:
            self.greedy_order = np.argsort(self.topic_of * (top + 1) + (top - self.lag), kind="stable")
        else:
            self.greedy_order = np.concatenate(
                [np.argsort(-lags, kind="stable") + a for lags, a in zip(self.lags, self.offsets)]
            )

    def current_owners(self, spec: GroupSpec) -> tuple[np.ndarray, np.ndarray]:
        """The valid part of the current assignment as an owner array (-1: nobody), and which members'
        current assignment is already in output form (a dict of valid, ascending, non-empty tuples).

        Dropped: topics that are unknown, empty or not subscribed by the member, partitions out of
        range or not integers, and every claim on a partition after the first in member-id order.
        The spec is flattened with C-level iteration (chain/map) and checked in numpy: a group holds
        one entry per (member, topic), far too many for a Python loop per entry.
        """
        m_count = len(self.member_ids)
        owner = np.full(self.total, -1, dtype=np.int64)
        current = [spec.members[m].assignment for m in self.member_ids]
        entries = np.fromiter(map(len, current), dtype=np.int64, count=m_count)
        clean = np.fromiter((type(a) is dict for a in current), dtype=bool, count=m_count)
        if not entries.any():
            return owner, clean
        index = {t: i for i, t in enumerate(self.topic_ids)}
        names = list(chain.from_iterable(current))
        values = list(chain.from_iterable(a.values() for a in current))
        topic = np.fromiter(map(index.get, names, repeat(-1)), dtype=np.int64, count=len(names))
        size = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        entry_member = np.repeat(np.arange(m_count, dtype=np.int64), entries)
        valid = topic >= 0
        if not self.homogeneous:
            valid[valid] = self._subscribed(entry_member[valid], topic[valid])
        if set(map(type, values)) != {tuple}:
            clean[entry_member[[type(v) is not tuple for v in values]]] = False
        clean[entry_member[~valid | (size == 0)]] = False

        parts = _int_array(values, int(size.sum()))
        if len(parts) == 0:
            return owner, clean
        part_topic = np.repeat(topic, size)
        claimer = np.repeat(entry_member, size)
        ok = np.repeat(valid, size)
        ok[ok] = (parts[ok] >= 0) & (parts[ok] < np.array(self.counts, dtype=np.int64)[part_topic[ok]])
        # Output form also needs strictly ascending tuples.
        rising = np.ones(len(parts), dtype=bool)
        rising[1:] = parts[1:] > parts[:-1]
        starts = np.cumsum(size) - size
        rising[starts[size > 0]] = True
        clean[claimer[~(ok & rising)]] = False

        gid = np.array(self.offsets[:-1], dtype=np.int64)[part_topic[ok]] + parts[ok]
        claimer = claimer[ok]
        owner[gid] = claimer
        if (owner[gid] != claimer).any():  # a partition claimed twice: the first claim (member order) wins
            unique, first = np.unique(gid, return_index=True)
            owner[unique] = claimer[first]
            losers = np.ones(len(gid), dtype=bool)
            losers[first] = False
            clean[claimer[losers]] = False
        return owner, clean

    def subscription(self, member: int) -> frozenset:
        """The topics member `member` (an index) subscribes to."""
        return self.class_topics[self.member_class[member]]

    def _subscribed(self, member: np.ndarray, topic: np.ndarray) -> np.ndarray:
        """Whether each (member, topic) pair is a subscription, via one row of topics per subscription class."""
        table = np.array([[t in subs for t in self.topic_ids] for subs in self.class_topics], dtype=bool)
        return table[self.member_class[member], topic]

    def to_assignment(self, owner: np.ndarray, reuse: list | None = None) -> GroupAssignment:
        """Owner array -> {member_id: {topic_id: ascending partitions}}, every member present.

        `reuse[m]`, when not None, is member m's output as is (its unchanged current assignment):
        Kafka hands back the same map for unchanged members, and it saves rebuilding them.
        """
        if reuse is None:
            per_member: list = [{} for _ in self.member_ids]
        else:
            per_member = [{} if r is None else None for r in reuse]
        if reuse is None or None in reuse:
            self._fill(owner, per_member, skip_some=reuse is not None)
        if reuse is not None:
            per_member = [r if d is None else d for d, r in zip(per_member, reuse)]
        return dict(zip(self.member_ids, per_member))

    def _fill(self, owner: np.ndarray, per_member: list, skip_some: bool) -> None:
        """Write each topic's partitions into the members' dicts (None: a member to leave alone)."""
        global _singles
        singles = _singles  # read once and replaced whole, never extended in place: thread-safe
        if max(self.counts, default=0) > len(singles):
            singles = _singles = [(p,) for p in range(max(self.counts))]
        for t, topic_id in enumerate(self.topic_ids):
            n = self.counts[t]
            own = owner[self.offsets[t] : self.offsets[t + 1]]
            if n <= len(self.subscribers[t]):  # at most one partition per member
                if skip_some:
                    for m, single in zip(own.tolist(), singles):
                        target = per_member[m]
                        if target is not None:
                            target[topic_id] = single
                else:
                    for m, single in zip(own.tolist(), singles):
                        per_member[m][topic_id] = single
                continue
            parts = np.argsort(own, kind="stable")
            owners = own[parts]
            cuts = (np.flatnonzero(owners[1:] != owners[:-1]) + 1).tolist()
            plist = parts.tolist()
            olist = owners.tolist()
            start = 0
            for stop in (*cuts, n):
                target = per_member[olist[start]]
                if target is not None:
                    target[topic_id] = tuple(plist[start:stop])
                start = stop


def _int_array(tuples: list, count: int) -> np.ndarray:
    """The concatenated partition ids; anything that is not a usable int becomes -1 (dropped later)."""
    try:
        return np.fromiter(chain.from_iterable(tuples), dtype=np.int64, count=count)
    except (TypeError, ValueError, OverflowError):
        flat = chain.from_iterable(tuples)
        return np.array([v if type(v) is int and 0 <= v <= INT64_MAX else -1 for v in flat], dtype=np.int64)


def _lag_vector(raw_lags: list, counts: list[int], cap: int) -> np.ndarray:
    """All topics' lags end to end: missing ones are 0, negatives 0, each at most `cap` so sums fit int64.

    A length mismatch is tolerated (padded with 0 or cut) because lag and partition counts are read at
    slightly different times while a topic grows; failing the whole group for that would be worse.
    """

    def padded():
        for raw, n in zip(raw_lags, counts):
            if raw is None:
                yield repeat(0, n)
            elif len(raw) == n:
                yield raw
            else:
                yield chain(islice(raw, n), repeat(0, n - len(raw)))

    try:
        lag = np.fromiter(chain.from_iterable(padded()), dtype=np.int64, count=sum(counts))
    except OverflowError:  # some lag is beyond int64: clamp in Python first
        lag = np.array([min(max(v, 0), cap) for v in chain.from_iterable(padded())], dtype=np.int64)
    except (TypeError, ValueError):
        raise PartitionAssignorError("partition lags must be integers") from None
    np.clip(lag, 0, cap, out=lag)
    return lag


def assigned_lag(owner: np.ndarray, lag: np.ndarray, members: int) -> np.ndarray:
    """Total lag per member (int64, exact)."""
    total = np.zeros(members, dtype=np.int64)
    held = owner >= 0
    np.add.at(total, owner[held], lag[held])
    return total


"""Kafka's range assignor, server side, with KIP-881's rack awareness added.

Per topic, the subscribers in *range order* (static members first, by `group.instance.id`, then the
others by member id; so a rolling bounce of static members changes nothing) split the partitions into
contiguous runs from 0: with n partitions and k subscribers each gets n // k and the first n % k one
more. The current assignment is ignored: the output depends only on who subscribes to what.

Topics with the same subscribers and the same partition count get identical runs (co-partitioning:
partition p of each such topic lands on the same member). The assignor works on those groups
directly and hands every member of a group one shared tuple per run, which is what makes half a
million partitions cheap: the work is proportional to the (member, topic) entries of the output.

Rack awareness (the client-side RangeAssignor's KIP-881 rules, see `_range_racks`) applies to a group
only when it can help: some subscriber has a rack that hosts a replica of the group's partitions,
and not every partition sits on the same racks. Kafka switches every group over as soon as one topic
qualifies; here each group decides for itself, so racks on one topic never reshuffle another.
Priorities are balance (the per-topic counts above are kept exactly), then co-partitioning (a group
is matched as a unit, on the racks common to all its topics), then rack alignment, best effort.
Small groups (at most 16 subscribers and 256 partitions) take a shorter path to the same result,
with what a replica layout implies cached per distinct layout (`_range_racks.rack_layout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from itertools import accumulate, chain, repeat
from operator import attrgetter

from cohort.assignors._range_racks import (
    SMALL_PARTITIONS,
    SMALL_SUBSCRIBERS,
    common_racks,
    needs_racks,
    rack_layout,
    rack_owners,
    rack_runs_small,
)
from cohort.assignors._uniform_common import (
    ints,
    native,
    partition_counts,
    sorted_topic_ids,
    subscription_keys,
    subscription_topics,
)
from cohort.assignors.api import (
    FreshGroups,
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    SubscribedTopicDescriber,
    SubscriptionType,
)


def range_order(members: Mapping[str, MemberSubscription], member_ids: list[str]) -> list[str]:
    """Member ids in range order: static members by instance id first, then dynamic ones by member id.

    `member_ids` are the members' ids, sorted; without static members they are the answer as is.
    """
    if _NO_INSTANCE.issuperset(map(_instance_id, members.values())):
        return member_ids
    return sorted(
        member_ids,
        key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id is not None else (1, "", m),
    )


_instance_id = attrgetter("instance_id")
_rack_id = attrgetter("rack_id")
_NO_INSTANCE = frozenset((None,))
_NOWHERE: frozenset = frozenset()


class RangeAssignor:
    """Contiguous per-topic ranges in range order; co-partitioned; rack-aware when that helps."""

    name = "range"

    def assign(self, spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        members = spec.members
        member_ids = sorted(members)
        if spec.subscription_type is SubscriptionType.HOMOGENEOUS and member_ids:
            result = _assign_homogeneous_plain(members, member_ids, topics)
            if result is not None:
                return result
        result = {m: {} for m in member_ids}
        order = range_order(members, member_ids)

        # Members with identical subscriptions form a class; a topic's subscribers are the union of
        # the classes naming it, so topics are grouped by (classes, partition count).
        # The spec's HOMOGENEOUS is trusted, as Kafka does: comparing every member's subscription
        # would cost more than the assignment itself in large groups.
        class_of: dict[frozenset, int] = {}
        class_members: list[list[int]] = []
        if spec.subscription_type is SubscriptionType.HOMOGENEOUS and order:
            class_of[members[order[0]].subscribed_topic_ids] = 0
            class_members.append(list(range(len(order))))
        else:
            for pos, member_id in enumerate(order):
                subs = members[member_id].subscribed_topic_ids
                c = class_of.get(subs)
                if c is None:
                    c = class_of[subs] = len(class_members)
                    class_members.append([])
                class_members[c].append(pos)

        # Each group's topics are kept as dict keys: dict.fromkeys(a_dict, run) reuses the stored
        # hashes, which matters when topic ids are UUIDs (a Python-level __hash__ per key otherwise).
        groups: dict[tuple, dict] = {}
        classes_of_topic: dict = {}
        for subs, c in class_of.items():
            for topic_id in subs:
                classes_of_topic.setdefault(topic_id, []).append(c)
        ordered = sorted_topic_ids(classes_of_topic)
        for topic_id, n in zip(ordered, partition_counts(topics, ordered)):
            if n > 0:
                groups.setdefault((tuple(sorted(classes_of_topic[topic_id])), n), {})[topic_id] = None

        rack_of = list(map(_rack_id, map(members.__getitem__, order)))
        any_rack = rack_of.count(None) != len(rack_of)
        subscribers_of: dict[tuple, list[int]] = {}
        for (sig, n), group in groups.items():
            subs = subscribers_of.get(sig)
            if subs is None:
                subs = class_members[sig[0]] if len(sig) == 1 else sorted(p for c in sig for p in class_members[c])
                subscribers_of[sig] = subs
            if any_rack and self._assign_with_racks(result, order, subs, rack_of, group, n, topics):
                continue
            _assign_ranges(result, [order[p] for p in subs], group, n)
        return result

    def fresh_owners(self, groups: FreshGroups):
        """`assign`'s owners for many fresh groups at once: plain ranges, or KIP-881's rack
        matching where it applies, one step for every group at a time."""
        from cohort.assignors._range_many import range_owners  # numpy only when asked

        return range_owners(groups.member_counts, groups.topic_group, groups.partition_counts,
                            groups.member_racks, groups.partition_racks)

    @staticmethod
    def _assign_with_racks(result, order, subs, rack_of, group, n, topics) -> bool:
        """Rack-matched assignment of one co-partitioned group; False (nothing done) when racks cannot help."""
        sub_racks = rack_of if len(subs) == len(rack_of) else [rack_of[p] for p in subs]
        # Topics of a group usually share one replica layout; work on the distinct layouts only.
        bulk = getattr(topics, "partition_racks", None)
        if bulk is None:
            racks_for = topics.racks_for_partition
            layouts = frozenset(tuple(map(racks_for, repeat(t, n), range(n))) for t in group)
        else:
            layouts = frozenset(map(_sized, map(bulk, group), repeat(n)))
        if len(subs) <= SMALL_SUBSCRIBERS and n <= SMALL_PARTITIONS:
            layout = rack_layout(layouts)
            if not layout.needs_racks(sub_racks):
                return False
            owned = rack_runs_small(n, sub_racks, layout, len(group) > 1)
        else:
            if not any(needs_racks(sub_racks, layout) for layout in layouts):
                return False
            common = common_racks(layouts)
            owned = [[] for _ in subs]
            for p, pos in enumerate(rack_owners(n, sub_racks, common, co_partitioned=len(group) > 1)):
                owned[pos].append(p)  # ascending, since p is
        for pos, parts in enumerate(owned):
            if parts:
                member_id = order[subs[pos]]
                target = result[member_id]
                if target:
                    target.update(dict.fromkeys(group, tuple(parts)))
                else:
                    result[member_id] = dict.fromkeys(group, tuple(parts))
        return True


def _assign_homogeneous_plain(members: Mapping[str, MemberSubscription], member_ids: list[str],
                              topics: SubscribedTopicDescriber) -> GroupAssignment | None:
    """The common case in one pass, or None for the general path: every member subscribes to the
    same topics, none is static (range order is member id order) or has a rack, and the topics
    form one co-partitioned group (one partition count). The output is built directly in member
    id order; in a group of a hundred members the general path's bookkeeping cost more than this."""
    if not _plain(members.values()):
        return None  # an empty instance id or rack still counts
    subscription = members[member_ids[0]].subscribed_topic_ids
    counts = partition_counts(topics, *subscription_topics(subscription))
    n = counts[0] if counts else 0
    if n <= 0 or counts.count(n) != len(counts):
        return None
    receivers, pieces = _range_pieces(member_ids, subscription_keys(subscription), n)
    if native is not None and type(pieces) is list:
        # The spec's members are normally in member id order already (the coordinator keeps
        # them so): the output is then a copy of their dict's key table.
        result = native.copy_with_values(members, member_ids, pieces)
        if result is not NotImplemented:
            return result
    result = dict(zip(receivers, pieces))
    if len(receivers) < len(member_ids):
        result.update({m: {} for m in member_ids[len(receivers):]})
    return result


def _plain(values) -> bool:
    """No member is static or has a rack (read in C at the slots' offsets where it is built)."""
    if native is not None:
        return native.all_none(list(values), "instance_id", "rack_id")
    return _NO_INSTANCE.issuperset(map(_instance_id, values)) and _NO_INSTANCE.issuperset(map(_rack_id, values))


def _sized(racks, n: int) -> tuple:
    """A topic's per-partition racks as a tuple of exactly n sets (missing ones empty)."""
    if len(racks) == n and type(racks) is tuple:
        return racks
    racks = tuple(racks[:n])
    return racks + (_NOWHERE,) * (n - len(racks))


def _assign_ranges(result: GroupAssignment, subscribers: list[str], group: dict, n: int) -> None:
    """Plain range for a co-partitioned group (topic ids as dict keys): one shared run per subscriber.

    The runs and dicts are made by C-level `map`s over all subscribers at once: in a group of a
    hundred members a Python loop per member was most of the assignment."""
    subscribers, pieces = _range_pieces(subscribers, group, n)
    if _EMPTY_ONLY.issuperset(map(len, map(result.__getitem__, subscribers))):
        result.update(zip(subscribers, pieces))
        return
    for member_id, piece in zip(subscribers, pieces):
        target = result[member_id]
        if target:
            target.update(piece)
        else:
            result[member_id] = piece


def _range_pieces(subscribers: list[str], group: dict, n: int):
    """(the subscribers that get partitions, an iterable of their {topic: run} dicts): with n
    partitions and k subscribers the first n % k take n // k + 1, the others n // k.

    The dicts share their keys (the group's topics, in its order): the C `fromkeys_each` copies
    the first one's key table for every other and writes each copy's values in place; built key
    by key, those dicts were most of a small group's assignment."""
    k = len(subscribers)
    small = n <= SHARED_RUNS_MAX_PARTITIONS and k <= SHARED_RUNS_MAX_SUBSCRIBERS
    runs = _shared_runs(n, k) if small else range_runs(n, k)
    if len(runs) < len(subscribers):
        subscribers = subscribers[:len(runs)]  # the rest get nothing from this group
    if native is not None:
        pieces = native.fromkeys_each(group, runs)
        if pieces is not NotImplemented:
            return subscribers, pieces
    return subscribers, map(dict.fromkeys, repeat(group), runs)


def range_runs(n: int, k: int) -> tuple[tuple[int, ...], ...]:
    """The runs of n partitions over k subscribers (only the non-empty ones)."""
    quota, extra = divmod(n, k)
    if quota == 0:
        k = extra
    run = ints(n)  # slices of one shared tuple: copying pointers beats building ints
    stops = list(accumulate(chain(repeat(quota + 1, extra), repeat(quota, k - extra))))
    return tuple(map(run.__getitem__, map(slice, chain((0,), stops), stops)))


_EMPTY_ONLY = frozenset((0,))


# Small shapes' runs are shared between assignments: tuples are immutable, and slicing a hundred
# runs cost about as much as the rest of a small group's assignment. Bounded (about 100 kB a
# shape at most) so that a broker with many large groups of distinct shapes keeps nothing big.
SHARED_RUNS_MAX_PARTITIONS = 4096
SHARED_RUNS_MAX_SUBSCRIBERS = 1024
_shared_runs = lru_cache(maxsize=128)(range_runs)

"""The uniform assignor for groups whose members subscribe to different topics.

Same rules as Kafka's UniformHeterogeneousAssignmentBuilder after its KAFKA-17710 rewrite, with
members numbered in member-id order and ties broken by topic id:

1. Keep every current partition of a topic the member still subscribes to.
2. Topics are ordered by partitions per subscriber (descending), then subscriber count
   (ascending), then topic id. Each topic's unassigned partitions go, one at a time, to its
   least-loaded subscriber (total partitions, then member index): the "least-loaded range" of
   equally loaded subscribers is served round-robin and only widens when its level rises.
3. Balancing: up to 16 passes over the topics with two or more subscribers (same order),
   stopping once a whole pass moves nothing. Within a topic, the highest-numbered partition of
   the most-loaded subscriber that owns one moves to the least-loaded subscriber until the two
   ranges' loads differ by at most one. Subscribers sharing identical subscriptions end up
   perfectly balanced; overlapping subscriptions end up nearly balanced.

Cost is about O(P log P + sum over topics of subscribers) per pass, never O(P * M): state is a
per-topic owner list and a per-member load array, and only members whose partitions changed get
a new mapping in the output. Where the C extension is built, its `hetero_*` functions run the three
per-partition loops (taking over the current assignment, dealing the free partitions, writing the
output) on the same lists; the Python loops here are their reference.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from itertools import repeat
from operator import add, attrgetter, itemgetter


from cohort.assignors._uniform_common import native, partition_tuple, reused, singles, sorted_topic_ids
from cohort.assignors.api import GroupAssignment, GroupSpec, PartitionAssignorError, SubscribedTopicDescriber

MAX_ITERATION_COUNT = 16


def assign_heterogeneous(spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
    members = spec.members
    member_ids = sorted(members)
    if not member_ids:
        return {}
    subscriptions = [members[m] for m in member_ids]
    builder = _Builder(list(map(_subscribed, subscriptions)), topics)
    currents = list(map(_assignment, subscriptions))
    builder.keep_current(currents)
    builder.assign_unassigned()
    builder.balance()
    receiving, assignments = builder.changed_assignments()
    result: GroupAssignment = dict(zip(member_ids, reused(currents)))
    result.update(zip(map(member_ids.__getitem__, receiving), assignments))
    return result


_subscribed = attrgetter("subscribed_topic_ids")
_assignment = attrgetter("assignment")


class _Builder:
    """Mutable state of one assignment, on topic indices (sorted topic id order) and member indices.

    `owners[t][p]` is the member owning partition p of topic t (-1: unassigned), `loads[m]` the
    number of partitions member m holds, `changed[m]` whether its output must be rebuilt.
    """

    def __init__(self, subscriptions: list[frozenset], topics: SubscribedTopicDescriber):
        member_count = len(subscriptions)
        self.loads = [0] * member_count
        self.changed = [False] * member_count

        # Members sharing a subscription are grouped first, so the per-topic subscriber lists
        # cost one list operation per (distinct subscription, topic), not per (member, topic).
        groups: dict[frozenset, list[int]] = {}
        for index, subscription in enumerate(subscriptions):
            group = groups.get(subscription)
            if group is None:
                groups[subscription] = [index]
            else:
                group.append(index)
        counts = {}
        for topic_id in set().union(*groups):
            n = topics.num_partitions(topic_id)
            if n >= 0:
                counts[topic_id] = n
        self.topic_ids = sorted_topic_ids(counts)
        self.counts = [counts[t] for t in self.topic_ids]
        self.by_value = {t: i for i, t in enumerate(self.topic_ids)}
        # Output dicts carry these very topic id objects, so an identity lookup almost always
        # hits; it avoids hashing (uuid.UUID hashes in Python code).
        self.by_identity = {id(t): i for i, t in enumerate(self.topic_ids)}

        subscribers: list[list[int] | None] = [None] * len(self.topic_ids)
        merged = set()
        self.subscribed: list[set[int]] = [set()] * member_count
        for subscription, group in groups.items():
            indices = {self.by_value[t] for t in subscription if t in counts}
            for index in group:
                self.subscribed[index] = indices
            for t in indices:
                existing = subscribers[t]
                if existing is None:
                    subscribers[t] = group
                else:
                    if t not in merged:
                        merged.add(t)
                        existing = subscribers[t] = list(existing)
                    existing.extend(group)
        for t in merged:
            subscribers[t].sort()
        self.subscribers: list[list[int]] = subscribers
        self.owners = [[-1] * n for n in self.counts]

    def topic_order(self, indices) -> list[int]:
        """Partitions per subscriber descending, then subscriber count ascending, then topic id."""
        subscribers, counts = self.subscribers, self.counts

        def key(t):
            k = len(subscribers[t])
            return -(counts[t] / k), k, t

        return sorted(indices, key=key)

    def keep_current(self, currents: list[Mapping]) -> None:
        """Take over the current assignment, dropping what a member may no longer own.

        Dropped: topics the member no longer subscribes to (or unknown ones), out-of-range
        partitions, and partitions already claimed by an earlier member.
        """
        index, count = 0, len(currents)
        while index < count:
            if native is not None:  # all canonical members at C speed; the others in Python
                index = native.hetero_keep_current(currents, index, self.subscribed, self.topic_ids, self.by_value,
                                                   self.owners, self.loads, self.changed)
                if index == count:
                    return
            if currents[index]:
                self._keep_member(index, currents[index])
            index += 1

    def _keep_member(self, index: int, current: Mapping) -> None:
        """keep_current's rules for one member (the reference for the C loop)."""
        owners, loads, changed = self.owners, self.loads, self.changed
        by_identity, by_value = self.by_identity, self.by_value
        subscribed = self.subscribed[index]
        count = 0
        for topic_id, parts in current.items():
            t = by_identity.get(id(topic_id))
            if t is None:
                t = by_value.get(topic_id)
            if t is None or t not in subscribed or not parts:
                changed[index] = True
                continue
            if type(parts) is not tuple:
                changed[index] = True
                parts = partition_tuple(parts)
                if parts is None:
                    continue
            owner = owners[t]
            n = len(owner)
            previous = -1
            for p in parts:
                if p <= previous:
                    changed[index] = True
                previous = p
                if 0 <= p < n and owner[p] == -1:
                    owner[p] = index
                    count += 1
                else:
                    changed[index] = True
        loads[index] += count

    def assign_unassigned(self) -> None:
        """Give each unowned partition to the least-loaded subscriber of its topic.

        Within a topic, the subscribers sorted by (load, member index) are served round-robin
        over a range of equally loaded members, which widens each time its level rises: so the
        picks are ordered[:end] for each successive level, `end` counting members at or below it.
        """
        owners, loads, changed = self.owners, self.loads, self.changed
        pending = {}
        for t, owner in enumerate(owners):
            free = owner.count(-1)
            if free == len(owner):
                pending[t] = range(free)
            elif free:
                pending[t] = [p for p, o in enumerate(owner) if o == -1]
        for t in self.topic_order(pending):
            free = pending[t]
            if native is not None:
                native.hetero_assign_free(owners[t], None if type(free) is range else free, self.subscribers[t],
                                          loads, changed)
                continue
            ordered = sorted(self.subscribers[t], key=loads.__getitem__)
            count, need = len(ordered), len(free)
            picks: list[int] = []
            end = 0
            level = loads[ordered[0]] - 1
            while len(picks) < need:
                level += 1
                while end < count and loads[ordered[end]] == level:
                    end += 1
                picks += ordered[:min(end, need - len(picks))]
            owner = owners[t]
            if type(free) is range:
                owner[:] = picks
            else:
                _consume(map(owner.__setitem__, free, picks))
            # loads[m] += 1 and changed[m] = True for each pick, in C loops (picks may repeat).
            _consume(map(loads.__setitem__, picks, map(add, map(loads.__getitem__, picks), repeat(1))))
            _consume(map(changed.__setitem__, picks, repeat(True)))

    def balance(self) -> None:
        """Move partitions from most- to least-loaded subscribers, topic by topic, up to 16 passes."""
        candidates = self.topic_order(t for t, s in enumerate(self.subscribers) if s is not None and len(s) >= 2)
        subscribers = self.subscribers
        # Topics often share one subscriber list; its spread only changes when something moves.
        spreads: dict[int, int] = {}
        last_rebalanced = -1
        for _ in range(MAX_ITERATION_COUNT):
            for position, t in enumerate(candidates):
                if position == last_rebalanced:
                    return
                members = subscribers[t]
                spread = spreads.get(id(members))
                if spread is None:
                    loads = itemgetter(*members)(self.loads)
                    spread = spreads[id(members)] = max(loads) - min(loads)
                moved = self._balance_topic(t) if spread > 1 else 0
                if moved:
                    spreads.clear()
                if moved or last_rebalanced == -1:
                    last_rebalanced = position

    def _balance_topic(self, t: int) -> int:
        owner = self.owners[t]
        loads, changed = self.loads, self.changed
        ranges = _LoadRanges(self.subscribers[t], loads)
        # Partitions grouped by owner (ascending within an owner); [start, end) per owner.
        grouped = sorted(range(len(owner)), key=owner.__getitem__)
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, p in enumerate(grouped):
            o = owner[p]
            if o not in start:
                start[o] = i
            end[o] = i + 1

        moved = 0
        while not ranges.balanced():
            donor = ranges.next_most_loaded()
            while donor != -1 and end.get(donor, 0) - start.get(donor, 0) <= 0:
                ranges.exclude_most_loaded()
                donor = ranges.next_most_loaded()
            if donor == -1:
                break
            end[donor] -= 1
            p = grouped[end[donor]]
            receiver = ranges.next_least_loaded()
            if ranges.balanced():
                break
            owner[p] = receiver
            loads[donor] -= 1
            loads[receiver] += 1
            changed[donor] = changed[receiver] = True
            moved += 1
        return moved

    def changed_assignments(self) -> tuple[list[int], list[dict]]:
        """(member indices, new {topic id: partitions}) for the members whose output is rebuilt."""
        changed = self.changed
        targets: list[dict | None] = [{} if c else None for c in changed]
        widest = max(self.counts, default=0)
        one = singles(widest)
        for t, owner in enumerate(self.owners):
            if native is not None:
                if not native.hetero_scatter(targets, owner, changed, self.topic_ids[t], one):
                    raise PartitionAssignorError("Some partitions were left unassigned")
                continue
            if -1 in owner:
                raise PartitionAssignorError("Some partitions were left unassigned")
            if not any(map(changed.__getitem__, owner)):
                continue
            # dict.fromkeys over a one-entry dict and dict.update reuse the stored hash of the
            # topic id (uuid.UUID hashes in Python code), and run as C loops over partitions.
            template = {self.topic_ids[t]: None}
            if len(set(owner)) == len(owner) and all(map(changed.__getitem__, owner)):
                # Every owner holds a single partition of this topic (many subscribers).
                pieces = map(dict.fromkeys, repeat(template), one[:len(owner)])
                _consume(map(dict.update, map(targets.__getitem__, owner), pieces))
                continue
            held: dict[int, list[int]] = {}
            for p, o in enumerate(owner):
                if changed[o]:
                    partitions = held.get(o)
                    if partitions is None:
                        held[o] = [p]
                    else:
                        partitions.append(p)
            for o, partitions in held.items():
                targets[o].update(dict.fromkeys(template, tuple(partitions)))
        receiving = [i for i, c in enumerate(changed) if c]
        return receiving, [targets[i] for i in receiving]


def _consume(iterator) -> None:
    deque(iterator, maxlen=0)


class _LoadRanges:
    """The least- and most-loaded ranges of one topic's subscribers, sorted by (load, member index).

    The least-loaded range [0, least_end) grows rightwards and the most-loaded range
    [most_start, most_end) grows leftwards as their levels move; members that own none of the
    topic's partitions are swapped out of the most-loaded range. Loads are read live, so a
    range only widens to members whose load has caught up with its level.
    """

    __slots__ = ("ordered", "loads", "least_end", "least_level", "least_next",
                 "most_start", "most_end", "most_level", "most_next")

    def __init__(self, members: list[int], loads: list[int]):
        self.ordered = sorted(members, key=loads.__getitem__)
        self.loads = loads
        count = len(self.ordered)
        self.least_end = 0
        self.least_level = loads[self.ordered[0]] - 1
        self.least_next = 0
        self.most_start = count
        self.most_end = count
        self.most_level = loads[self.ordered[-1]] + 1
        self.most_next = count - 1

    def balanced(self) -> bool:
        return self.most_level - self.least_level <= 1

    def next_least_loaded(self) -> int:
        ordered, loads = self.ordered, self.loads
        if self.least_next >= self.least_end:
            self.least_level += 1
            while self.least_end < len(ordered) and loads[ordered[self.least_end]] == self.least_level:
                self.least_end += 1
            self.least_next = 0
        member = ordered[self.least_next]
        self.least_next += 1
        return member

    def next_most_loaded(self) -> int:
        ordered, loads = self.ordered, self.loads
        if self.most_next < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # Emptied by exclusions: restart the level from the next member down.
                self.most_level = loads[ordered[self.most_start - 1]]
            else:
                self.most_level -= 1
            while self.most_start > 0 and loads[ordered[self.most_start - 1]] == self.most_level:
                self.most_start -= 1
            self.most_next = self.most_end - 1
        if self.most_next < 0:
            return -1
        member = ordered[self.most_next]
        self.most_next -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Drop the member last returned by next_most_loaded (it has nothing left to give)."""
        ordered = self.ordered
        i, last = self.most_next + 1, self.most_end - 1
        ordered[i], ordered[last] = ordered[last], ordered[i]
        self.most_end -= 1

"""The `simple` share-group assignor (KIP-932): partitions are shared, several members may own one.

Kafka's rules (`SimpleAssignor`): with M members subscribed to a topic set holding P assignable
partitions, each partition is shared by `ceil(M / P)` members (the desired sharing), and the
`sharing * P` slots are spread evenly over the members. Existing assignments are kept where they
fit (a member keeps what it owns up to its quota, a partition keeps its first owners up to the
desired sharing); the rest is handed out, least-shared partition first, to the members with the
most room. It is not rack-aware and prefers balance to stickiness. Members with different
subscriptions are balanced topic by topic, and the results combined.

Pure function: members by id and partitions ascending give a reproducible answer.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping

NAME = "simple"

TopicPartition = tuple[uuid.UUID, int]


def assign(subscriptions: Mapping[str, frozenset[uuid.UUID]],
           partitions: Mapping[uuid.UUID, tuple[int, ...]],
           current: Mapping[str, Mapping[uuid.UUID, tuple[int, ...]]]) -> dict[str, dict[uuid.UUID, tuple[int, ...]]]:
    """The target assignment: member id -> {topic id: partitions}.

    `subscriptions`: member id -> the topic ids it subscribes to (that exist);
    `partitions`: topic id -> its assignable partitions (initialized share-partitions);
    `current`: member id -> its current target, kept where the rules allow."""
    members = sorted(subscriptions)
    result: dict[str, dict[uuid.UUID, list[int]]] = {m: {} for m in members}
    # Homogeneous groups (the common case) are balanced over all their partitions at once;
    # otherwise each topic is balanced among the members subscribing to it.
    topic_sets = {subscriptions[m] for m in members}
    if len(topic_sets) == 1:
        topics = sorted(t for t in next(iter(topic_sets)) if partitions.get(t))
        _balance(members, [(t, p) for t in topics for p in partitions[t]], current, result)
    else:
        by_topic: dict[uuid.UUID, list[str]] = {}
        for m in members:
            for t in subscriptions[m]:
                if partitions.get(t):
                    by_topic.setdefault(t, []).append(m)
        for t in sorted(by_topic):
            _balance(by_topic[t], [(t, p) for p in partitions[t]], current, result)
    return {m: {t: tuple(sorted(ps)) for t, ps in sorted(assigned.items()) if ps} for m, assigned in result.items()}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _balance(members: list[str], slots: list[TopicPartition],
             current: Mapping[str, Mapping[uuid.UUID, tuple[int, ...]]],
             result: dict[str, dict[uuid.UUID, list[int]]]) -> None:
    """Share `slots` (partitions, ascending) among `members` (sorted), adding to `result`."""
    m, p = len(members), len(slots)
    if not m or not p:
        return
    sharing = -(-m // p)
    total = sharing * p  # member i gets ceil(total * (i + 1) / m) - ceil(total * i / m) slots
    quota = {member: _ceil(total * (i + 1), m) - _ceil(total * i, m)
             for i, member in enumerate(members)}
    valid = set(slots)
    owners: dict[TopicPartition, list[str]] = {tp: [] for tp in slots}
    owned: dict[str, set[TopicPartition]] = {member: set() for member in members}
    # 1-3: keep what members own, within their quota and the desired sharing
    for member in members:
        for t, ps in sorted((current.get(member) or {}).items()):
            for part in ps:
                tp = (t, part)
                if (tp in valid and tp not in owned[member] and len(owned[member]) < quota[member]
                        and len(owners[tp]) < sharing):
                    owners[tp].append(member)
                    owned[member].add(tp)
    # 4: the least-shared partitions go to the members with the most room (ties: order)
    room = [(-(quota[member] - len(owned[member])), i, member) for i, member in enumerate(members)
            if quota[member] > len(owned[member])]
    heapq.heapify(room)
    order = {tp: i for i, tp in enumerate(slots)}
    wanting = [(len(owners[tp]), order[tp], tp) for tp in slots if len(owners[tp]) < sharing]
    heapq.heapify(wanting)
    while wanting and room:
        count, rank, tp = heapq.heappop(wanting)
        skipped = []
        chosen = None
        while room:
            entry = heapq.heappop(room)
            if tp in owned[entry[2]]:
                skipped.append(entry)
                continue
            chosen = entry
            break
        for entry in skipped:
            heapq.heappush(room, entry)
        if chosen is None:
            continue  # every member with room already shares this partition
        free, i, member = chosen
        owners[tp].append(member)
        owned[member].add(tp)
        if free + 1 < 0:
            heapq.heappush(room, (free + 1, i, member))
        if count + 1 < sharing:
            heapq.heappush(wanting, (count + 1, rank, tp))
    for member in members:
        target = result[member]
        for t, part in owned[member]:
            target.setdefault(t, []).append(part)

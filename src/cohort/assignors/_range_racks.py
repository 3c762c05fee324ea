"""KIP-881's rack matching for the range assignor, on one group of co-partitioned topics.

The caller has already decided the group is worth it (see `needs_racks`). Everything here works
on subscriber *positions* (0..k-1, range order) and returns one owner position per partition, so
the topics of a co-partitioned group share the result and stay co-partitioned.

Balance is never traded: a subscriber may take at most `n // k` partitions, plus one while some of
the `n % k` extra slots are still free (Kafka's `maxAssignable`). Rack matching only decides *which*
partitions fill those slots; whatever it cannot place on a matching rack is handed out afterwards in
plain range fashion (lowest unassigned partitions first, subscribers in order).

A subscriber without a rack matches every partition, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Sequence


def needs_racks(subscriber_racks: Sequence[str | None], partition_racks: Sequence[frozenset]) -> bool:
    """Kafka's `useRackAwareAssignment`: some subscriber rack hosts a replica, and racks differ by partition."""
    member_racks = {r for r in subscriber_racks if r is not None}
    if not member_racks:
        return False
    union = frozenset().union(*partition_racks)
    if member_racks.isdisjoint(union):
        return False
    return any(racks != union for racks in partition_racks)


class _Quota:
    """Per-subscriber counts against the range quota, with the shared pool of extra slots."""

    __slots__ = ("base", "extra", "count")

    def __init__(self, n: int, k: int):
        self.base, self.extra = divmod(n, k)
        self.count = [0] * k

    def room(self, pos: int) -> int:
        return max(0, self.base + (1 if self.extra > 0 else 0) - self.count[pos])

    def take(self, pos: int, how_many: int) -> None:
        before = self.count[pos]
        self.count[pos] = before + how_many
        if before <= self.base < before + how_many:
            self.extra -= 1


def rack_owners(
    n: int,
    subscriber_racks: Sequence[str | None],
    partition_racks: Sequence[frozenset],
    co_partitioned: bool,
) -> list[int]:
    """Owner position of each of the n partitions.

    `partition_racks[p]` is the set of racks hosting partition p; for a co-partitioned group the
    caller passes, per partition, the racks common to all its topics, so a match holds in every topic.
    """
    k = len(subscriber_racks)
    owner = [-1] * n
    quota = _Quota(n, k)
    if co_partitioned:
        _match_by_partition(owner, quota, subscriber_racks, partition_racks)
    else:
        _match_by_subscriber(owner, quota, subscriber_racks, partition_racks)
    _fill(owner, quota, k)
    return owner


def _match_by_partition(owner, quota: _Quota, subscriber_racks, partition_racks) -> None:
    """Co-partitioned groups: each partition in turn goes to the first subscriber on a hosting rack with room."""
    by_rack: dict[str | None, list[int]] = {}
    for pos, rack in enumerate(subscriber_racks):
        by_rack.setdefault(rack, []).append(pos)
    heads = dict.fromkeys(by_rack, 0)
    rackless = by_rack.get(None)
    for p, racks in enumerate(partition_racks):
        best = -1
        for rack in (*racks, None) if rackless else racks:
            queue = by_rack.get(rack)
            if queue is None:
                continue
            i = heads[rack]
            while i < len(queue) and quota.room(queue[i]) == 0:
                i += 1  # room only ever shrinks, so a full subscriber can be skipped for good
            heads[rack] = i
            if i < len(queue) and (best < 0 or queue[i] < best):
                best = queue[i]
        if best >= 0:
            owner[p] = best
            quota.take(best, 1)


def _match_by_subscriber(owner, quota: _Quota, subscriber_racks, partition_racks) -> None:
    """A lone topic: each subscriber in turn takes the lowest unassigned partitions on its rack, up to its room."""
    on_rack: dict[str, list[int]] = {}
    for p, racks in enumerate(partition_racks):
        for rack in racks:
            on_rack.setdefault(rack, []).append(p)
    heads = dict.fromkeys(on_rack, 0)
    everything = range(len(partition_racks))
    any_head = 0
    for pos, rack in enumerate(subscriber_racks):
        room = quota.room(pos)
        if room == 0:
            continue
        if rack is None:
            candidates, i = everything, any_head
        elif rack in on_rack:
            candidates, i = on_rack[rack], heads[rack]
        else:
            continue
        taken = 0
        while taken < room and i < len(candidates):
            p = candidates[i]
            i += 1
            if owner[p] < 0:
                owner[p] = pos
                taken += 1
        if rack is None:
            any_head = i
        else:
            heads[rack] = i
        if taken:
            quota.take(pos, taken)


def _fill(owner: list[int], quota: _Quota, k: int) -> None:
    """Plain range for what rack matching left: subscribers in order take the lowest unassigned partitions."""
    free = [p for p, o in enumerate(owner) if o < 0]
    i = 0
    for pos in range(k):
        if i == len(free):
            break
        room = quota.room(pos)
        if room == 0:
            continue
        for p in free[i : i + room]:
            owner[p] = pos
        taken = min(room, len(free) - i)
        i += taken
        quota.take(pos, taken)

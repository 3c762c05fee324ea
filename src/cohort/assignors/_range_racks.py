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

from collections.abc import Collection, Sequence


def needs_racks(subscriber_racks: Sequence[str | None], partition_racks: Sequence[frozenset]) -> bool:
    """Kafka's `useRackAwareAssignment`: some subscriber rack hosts a replica, and racks differ by partition."""
    member_racks = set(subscriber_racks)
    member_racks.discard(None)
    if not member_racks or not partition_racks or partition_racks.count(partition_racks[0]) == len(partition_racks):
        return False
    return not member_racks.isdisjoint(frozenset().union(*partition_racks))


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


# ---------------------------------------------------------------------------------------------
# Small groups (a handful of subscribers, a few dozen partitions): the pipeline's million groups.
# Same rules and owners as above, in fewer steps: the facts about a replica layout are worked out
# once per distinct layout and cached (groups on the same topics see the same layouts: a few
# thousand entries at most, dropped wholesale when full), the quota lives in locals, and the
# co-partitioned match works on bit sets of subscriber positions instead of per-rack queues.

SMALL_SUBSCRIBERS = 16
SMALL_PARTITIONS = 256
_CACHED_LAYOUTS = 2048
_CACHEABLE_PARTITIONS = 256  # over all the layouts of an entry: bounds what the cache keeps alive


def common_racks(layouts: Collection[Sequence[frozenset]]) -> Sequence[frozenset]:
    """Per partition, the racks hosting it in every one of the (equally long) replica layouts."""
    return next(iter(layouts)) if len(layouts) == 1 else tuple(map(frozenset.intersection, *layouts))


class RackLayout:
    """What rack matching needs to know about a co-partitioned group's replica layouts.

    Per partition, the racks that count are those hosting it in every topic (the intersection over
    the layouts): `hosted` has each rack's partitions as bits (bit p: partition p), `sets` holds the distinct rack
    sets and `set_of` each partition's index into them. `checks` is (union of racks, every partition
    on the same racks) per layout, for `needs_racks`.
    """

    __slots__ = ("hosted", "sets", "set_of", "checks")

    def __init__(self, layouts: frozenset):
        self.checks = tuple(
            (frozenset().union(*layout), layout.count(layout[0]) == len(layout)) for layout in layouts
        )
        common = common_racks(layouts)
        hosted: dict[str, int] = {}
        sets: dict[frozenset, int] = {}
        for p, racks in enumerate(common):
            for rack in racks:
                hosted[rack] = hosted.get(rack, 0) | 1 << p
            sets.setdefault(racks, len(sets))
        self.hosted = hosted
        self.sets = tuple(map(tuple, sets))
        self.set_of = tuple(map(sets.__getitem__, common))

    def needs_racks(self, subscriber_racks: Sequence[str | None]) -> bool:
        """`needs_racks` of any of the layouts."""
        member_racks = set(subscriber_racks)
        member_racks.discard(None)
        if not member_racks:
            return False
        return any(not uniform and not member_racks.isdisjoint(union) for union, uniform in self.checks)


_layouts: dict[frozenset, RackLayout] = {}


def rack_layout(layouts: frozenset) -> RackLayout:
    """The `RackLayout` of a set of equally long, non-empty replica layouts (tuples), cached when small."""
    found = _layouts.get(layouts)
    if found is None:
        found = RackLayout(layouts)
        if len(layouts) * len(found.set_of) <= _CACHEABLE_PARTITIONS:
            if len(_layouts) >= _CACHED_LAYOUTS:
                _layouts.clear()
            _layouts[layouts] = found
    return found


def rack_runs_small(
    n: int, subscriber_racks: Sequence[str | None], layout: RackLayout, co_partitioned: bool
) -> list[list[int]]:
    """`rack_owners` on the racks common to `layout`'s topics, as each subscriber position's partitions.

    A co-partitioned partition goes to the lowest subscriber position with room among those
    matching its racks (rackless ones included): the minimum `_match_by_partition` takes over its
    per-rack queues. A lone topic is `_match_by_subscriber`'s walk, on the cached per-rack bit sets:
    a subscriber takes the lowest bits of its rack's partitions not yet taken.
    """
    k = len(subscriber_racks)
    base, extra = divmod(n, k)
    owned: list[list[int]] = [[] for _ in range(k)]
    count = [0] * k
    if co_partitioned:
        # Subscriber positions as bits: which match each rack set, which still have room.
        rackless, on_rack = 0, {}
        for pos, rack in enumerate(subscriber_racks):
            if rack is None:
                rackless |= 1 << pos
            else:
                on_rack[rack] = on_rack.get(rack, 0) | 1 << pos
        matching = []
        for racks in layout.sets:
            bits = rackless
            for rack in racks:
                bits |= on_rack.get(rack, 0)
            matching.append(bits)
        free: list[int] = []
        cap = base + 1 if extra else base
        open_ = (1 << k) - 1
        for p, j in enumerate(layout.set_of):
            bits = matching[j] & open_
            if not bits:
                free.append(p)
                continue
            first = bits & -bits
            pos = first.bit_length() - 1
            owned[pos].append(p)
            got = count[pos] = count[pos] + 1
            if got == cap:
                open_ ^= first
            if got > base:  # took one of the extra slots
                extra -= 1
                if not extra:
                    cap = base
                    open_ = sum(1 << q for q, c in enumerate(count) if c < base)
    else:
        untaken = (1 << n) - 1
        hosted = layout.hosted
        for pos, rack in enumerate(subscriber_racks):
            room = base + 1 if extra else base  # nobody has taken anything yet
            bits = untaken if rack is None else hosted.get(rack, 0) & untaken
            if not bits:
                continue
            mine = owned[pos]
            while room and bits:
                low = bits & -bits
                mine.append(low.bit_length() - 1)
                bits ^= low
                untaken ^= low
                room -= 1
            count[pos] = len(mine)
            if count[pos] > base:
                extra -= 1
        free = []
        while untaken:
            low = untaken & -untaken
            free.append(low.bit_length() - 1)
            untaken ^= low
    end, i = len(free), 0
    for pos in range(k):
        if i == end:
            break
        before = count[pos]
        room = base + (1 if extra else 0) - before
        if room <= 0:
            continue
        stop = min(i + room, end)
        mine = owned[pos]
        if mine:
            mine += free[i:stop]
            mine.sort()
        else:
            owned[pos] = free[i:stop]
        if before <= base < before + stop - i:
            extra -= 1
        i = stop
    return owned

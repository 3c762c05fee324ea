"""Which assignor computes a consumer group's target (the seeds' rules, in this order):

1. a server-side assignor, when any member names one: the most common, ties to the earlier
   configured (`ConsumerGroup.preferred_assignor`);
2. otherwise a client-side assignor that every member supports with overlapping metadata
   versions; among several, the one the members put first (the lowest sum of positions in
   their lists), ties by name;
3. otherwise the group's `consumer.assignor`, else the broker's first `group.consumer.assignors`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Selection(NamedTuple):
    name: str
    client_side: bool


def common_client_assignor(members: Iterable) -> str | None:
    """The client-side assignor every member supports, by the members' precedence (None: none)."""
    count = 0
    ranks: dict[str, int] = {}
    ranges: dict[str, tuple[int, int, int]] = {}
    for member in members:
        assignors = member.client_assignors
        if not assignors:
            return None
        count += 1
        seen: set[str] = set()
        for position, a in enumerate(assignors):
            if a.name in seen:
                continue
            seen.add(a.name)
            ranks[a.name] = ranks.get(a.name, 0) + position
            lo, hi, n = ranges.get(a.name, (a.minimum_version, a.maximum_version, 0))
            ranges[a.name] = (max(lo, a.minimum_version), min(hi, a.maximum_version), n + 1)
    common = [name for name, (lo, hi, n) in ranges.items() if n == count and lo <= hi]
    if not common:
        return None
    return min(common, key=lambda name: (ranks[name], name))


def select(group, group_default: str | None, broker_order: Sequence[str]) -> Selection:
    server = group.preferred_assignor(broker_order)
    if server is not None:
        return Selection(server, False)
    client = common_client_assignor(group.members.values())
    if client is not None:
        return Selection(client, True)
    return Selection(group_default or broker_order[0], False)

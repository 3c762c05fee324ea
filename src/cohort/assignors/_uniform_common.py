"""Helpers shared by the two uniform builders: reading the spec and building partition tuples cheaply."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from operator import attrgetter

from cohort.assignors.api import MemberAssignment, SubscribedTopicDescriber

try:  # built from _uniform_native.c at install time where a C compiler is available (setup.py)
    from cohort.assignors import _uniform_native as native
except ImportError:  # pragma: no cover - the builders' Python code does the same work
    native = None

# The shared tuples below are cached up to this many partitions (a few MiB); wider topics get
# a fresh tuple per call rather than pinning memory for the life of the process.
CACHE_LIMIT = 1 << 16

_ints: tuple[int, ...] = tuple(range(1024))
_singles: tuple[tuple[int], ...] = tuple((i,) for i in range(1024))


def ints(n: int) -> tuple[int, ...]:
    """A tuple (0, 1, ..., m-1) with m >= n; slicing it is the cheapest way to build a run of partitions.

    A slice of an existing tuple only copies pointers, which is several times faster than
    `tuple(range(a, b))` and matters when the output holds tens of thousands of tuples.
    """
    global _ints
    if n <= len(_ints):
        return _ints
    if n > CACHE_LIMIT:
        return tuple(range(n))
    _ints = tuple(range(_grown(len(_ints), n)))
    return _ints


def singles(n: int) -> tuple[tuple[int], ...]:
    """Shared one-partition tuples ((0,), (1,), ...) for at least n partitions.

    Sparse assignments (many subscribers per topic) are mostly single partitions; sharing these
    immutable tuples saves allocating, and garbage-collecting, one tuple per output entry.
    """
    global _singles
    if n <= len(_singles):
        return _singles
    if n > CACHE_LIMIT:
        return tuple((i,) for i in range(n))
    _singles = tuple((i,) for i in range(_grown(len(_singles), n)))
    return _singles


def _grown(size: int, n: int) -> int:
    while size < n:
        size *= 2
    return min(size, CACHE_LIMIT)


def sorted_topic_ids(topic_ids: Iterable) -> list:
    """Topic ids in canonical (ascending) order.

    `uuid.UUID` compares in Python code; sorting by its integer gives the same order in C.
    """
    topic_ids = list(topic_ids)
    if len(topic_ids) > 1 and _UUID_ONLY.issuperset(map(type, topic_ids)):
        return sorted(topic_ids, key=_uuid_int)
    return sorted(topic_ids)


_uuid_int = attrgetter("int")
_UUID_ONLY = frozenset((uuid.UUID,))


_sorted_cache: dict[frozenset, tuple[list, list, dict]] = {}


def _cached(topic_ids: frozenset) -> tuple[list, list, dict]:
    found = _sorted_cache.get(topic_ids)
    if found is None:
        if len(_sorted_cache) >= 256:
            _sorted_cache.clear()
        ordered = sorted_topic_ids(topic_ids)
        found = _sorted_cache[topic_ids] = (ordered, list(map(hash, ordered)), dict.fromkeys(ordered))
    return found


def subscription_topics(topic_ids) -> tuple[list, list | None]:
    """(`sorted_topic_ids` of a subscription, the ids' hashes or None), remembered for frozensets:
    the members of a group share one subscription object, and sorting 1,000 topic ids costs about
    0.2 ms a rebalance (hashing them, in Python code for `uuid.UUID`, about as much again).
    Callers must not modify what they get."""
    if type(topic_ids) is not frozenset:
        return sorted_topic_ids(topic_ids), None
    return _cached(topic_ids)[:2]


def subscription_keys(topic_ids) -> dict:
    """The subscription's topic ids, sorted, as the keys of a dict (values None), remembered with
    `subscription_topics`: `dict.fromkeys` of it reuses the stored hashes. Callers must not modify it."""
    if type(topic_ids) is not frozenset:
        return dict.fromkeys(sorted_topic_ids(topic_ids))
    return _cached(topic_ids)[2]


def partition_counts(topics: SubscribedTopicDescriber, topic_ids: list, hashes: list | None = None) -> list[int]:
    """`num_partitions` of each topic (-1: unknown), through the describer's optional
    `partition_counts_hashed` (given the ids' hashes) or `partition_counts` when it has one."""
    if hashes is not None:
        hashed = getattr(topics, "partition_counts_hashed", None)
        if hashed is not None:
            return hashed(topic_ids, hashes)
    many = getattr(topics, "partition_counts", None)
    return many(topic_ids) if many is not None else list(map(topics.num_partitions, topic_ids))


def known_topics(topic_ids, topics: SubscribedTopicDescriber) -> tuple[list, list[int], list | None]:
    """(topic ids, partition counts, their hashes or None) for the topics the describer knows, in
    sorted topic order.

    Unknown topics (-1) are ignored rather than rejected: the coordinator only passes known
    topics, and a topic deleted between metadata refreshes should not fail the whole group.
    Lists rather than a dict: a dict would hash every topic id again (in Python code for
    `uuid.UUID`), a noticeable share of a small group's assignment.
    """
    ordered, hashes = subscription_topics(topic_ids)
    counts = partition_counts(topics, ordered, hashes)
    if min(counts, default=0) >= 0:
        return list(ordered), counts, hashes
    known, kept = [], []
    for topic_id, n in zip(ordered, counts):
        if n >= 0:
            known.append(topic_id)
            kept.append(n)
    kept_hashes = None if hashes is None else [h for h, n in zip(hashes, counts) if n >= 0]
    return known, kept, kept_hashes


def reuse(assignment: Mapping) -> MemberAssignment:
    """Return an unchanged member's current assignment as the output, copying only if it is not a dict.

    Kafka hands back the very same map for members whose assignment did not change; doing the
    same saves building thousands of dicts and tuples, and lets callers compare by identity.
    """
    return assignment if type(assignment) is dict else dict(assignment)


def reused(currents: list) -> list:
    """`reuse` over every member's current assignment, finding the few that are not dicts (a
    joiner's empty mapping, say) with C-level searches instead of a Python call per member."""
    types = list(map(type, currents))
    if types.count(dict) == len(types):
        return currents
    out = list(currents)
    for kind in set(types) - {dict}:
        at = types.index(kind)
        while True:
            out[at] = dict(out[at])
            try:
                at = types.index(kind, at + 1)
            except ValueError:
                break
    return out


def partition_tuple(parts) -> tuple[int, ...] | None:
    """Canonical form of one current-assignment entry: ascending distinct ints, or None to drop it.

    Used only on the slow path (entries that are not already ascending tuples).
    """
    try:
        values = sorted({int(p) for p in parts})
    except (TypeError, ValueError):
        return None
    return tuple(values) if values else None

"""The lag assignor in plain Python, for small groups whose answer needs no lag repair.

The numpy path pays a few microseconds per array operation whatever the size: for a group of a
handful of members and a few dozen partitions that overhead is ten times the work itself, and the
Spark pipeline assigns millions of such groups. This path gives the very same answer as
`LagAssignor.assign` (same dicts, same key order, a kept member's own dict back) in the three
common cases:

* fresh: nobody holds a valid partition, so the answer is the greedy of `_lag_greedy`;
* stable: the valid current assignment (`Model.current_owners`' rules) owns every partition, every
  topic's counts are already balanced, and it is within tolerance (by the lower-bound shortcut or
  against the greedy peak, as in `LagAssignor._sticky`), so nothing moves;
* members joined or left: `_lag_sticky.balance_counts`' count repair (`_balance_counts`, the same
  quotas, shedding and placements on lists) and the result is within tolerance.

Anything else (a group above the size limits, lag to repair after the counts, loads of 2**53 or
more where a count repair is needed, a current assignment entry that is not a sized collection)
gives None and the caller takes the numpy path. Lags or partition ids that are not plain ints go through the numpy path's own readers
(`_lag_vector`, `_int_array`), so they are converted, or rejected, exactly as there.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from fractions import Fraction
from itertools import chain, islice
from operator import add

from cohort.assignors._lag_model import INT64_MAX, _int_array, _lag_vector
from cohort.assignors.api import GroupAssignment, GroupSpec, SubscribedTopicDescriber, SubscriptionType

# Measured (timeit, random lags, homogeneous): within these limits this path is 1.5-6x faster than
# numpy, except fresh groups at both limits at once (64 members, 4 x 64 partitions: on par). Giving
# up (None) costs its setup and the claims check, under 20% of the numpy path at the limits.
SMALL_PARTITIONS = 256
SMALL_MEMBERS = 64
# Partition ids listed by the current assignments (valid or not) beyond which the per-id loops lose
# to numpy: a previous result lists each partition once, so only junk gets near this.
SMALL_CLAIMS = 2 * SMALL_PARTITIONS

_INT = frozenset({int})
_HOMOGENEOUS = SubscriptionType.HOMOGENEOUS  # a plain global: enum attribute lookups are slow


def assign_small(spec: GroupSpec, topics: SubscribedTopicDescriber, factor: Fraction) -> GroupAssignment | None:
    """`LagAssignor.assign(spec, topics)` for the assignor whose `_factor` (1 + τ) is `factor`, or None."""
    members = spec.members
    m_count = len(members)
    if m_count > SMALL_MEMBERS:
        return None
    member_ids = sorted(members)
    subs_of = list(map(members.__getitem__, member_ids))

    # Subscribers of each topic, ascending member indices; a HOMOGENEOUS spec is trusted, as the model does.
    if spec.subscription_type is _HOMOGENEOUS and m_count:
        topic_subs = dict.fromkeys(subs_of[0].subscribed_topic_ids, list(range(m_count)))
        subscriptions = None
    else:
        subscriptions = [s.subscribed_topic_ids for s in subs_of]
        classes: dict[frozenset, list[int]] = {}
        for i, subscription in enumerate(subscriptions):
            classes.setdefault(subscription, []).append(i)
        topic_subs = {}
        for subscription, idx in classes.items():
            for topic_id in subscription:
                subs = topic_subs.get(topic_id)
                topic_subs[topic_id] = idx if subs is None else sorted(subs + idx)
        if len(classes) == 1:
            subscriptions = None  # one subscription for all: nobody's entries need checking against it

    topic_ids, counts, subscribers = [], [], []
    for topic_id in sorted(topic_subs):
        n = topics.num_partitions(topic_id)
        if n > 0:
            topic_ids.append(topic_id)
            counts.append(n)
            subscribers.append(topic_subs[topic_id])
    total = sum(counts)
    if total > SMALL_PARTITIONS:
        return None
    if not total:
        return {m: {} for m in member_ids}
    lags, sums = _lags(list(map(topics.partition_lags, topic_ids)), counts, INT64_MAX // total)

    current = [s.assignment for s in subs_of]
    if any(current):
        index = dict(zip(topic_ids, range(len(topic_ids))))
        everyone = subscriptions is None
        load = _claim_clean(current, subscriptions, index, counts, subscribers, lags)
        if load is not None:  # the common case: a previous result, every member's map kept as is
            if not _within(load, counts, subscribers, lags, sums, factor, everyone):
                return None
            return dict(zip(member_ids, current))
        claimed = _claim(current, subscriptions, index, counts, lags)
        if claimed is None:
            return None
        owners, clean, held, load = claimed
        if any(load) or any(map(any, held)):
            if not _balanced(held, counts, subscribers, everyone):
                before = [owner.copy() for owner in owners]
                if not _balance_counts(owners, counts, subscribers, lags, load):
                    return None
                for old, new in zip(before, owners):  # whoever lost or gained a partition needs a new dict
                    for m, n in zip(old, new):
                        if m != n:
                            if m >= 0:
                                clean[m] = False
                            clean[n] = False
            if not _within(load, counts, subscribers, lags, sums, factor, everyone):
                return None
            if all(clean):
                return dict(zip(member_ids, current))
            return assignment_of(member_ids, topic_ids, owners, [a if c else None for a, c in zip(current, clean)])
    per_member = [{} for _ in member_ids]
    for topic_id, mine in zip(topic_ids, _greedy(m_count, subscribers, counts, lags, True)):
        for target, parts in zip(per_member, mine):
            if parts:
                parts.sort()
                target[topic_id] = tuple(parts)
    return dict(zip(member_ids, per_member))


def _lags(raw_lags: list, counts: list[int], cap: int) -> tuple[list, list[int]]:
    """(each topic's lags as `_lag_vector` reads them, each topic's total lag).

    None is all 0, a list of the wrong length is cut or padded with 0, values are clamped to
    [0, cap]. Values whose sum is not a plain int (floats, numpy ints, strings...) are not plain
    ints or bools: those go through `_lag_vector` itself, which converts them or raises its error.
    """
    result, sums = [], []
    try:
        for raw, n in zip(raw_lags, counts):
            if raw is None:
                result.append([0] * n)
                sums.append(0)
                continue
            if len(raw) == n and (type(raw) is tuple or type(raw) is list):
                values = raw  # read only
            else:
                values = list(islice(raw, n))
                if len(values) < n:
                    values += [0] * (n - len(values))
            total = sum(values)
            if type(total) is not int:
                raise TypeError
            if total > cap or min(values) < 0:  # else every value is in [0, total]
                values = [0 if v < 0 else cap if v > cap else v for v in values]
                total = sum(values)
            result.append(values)
            sums.append(total)
        return result, sums
    except Exception:  # not plain ints: the numpy reader converts them or raises its own error
        it = iter(_lag_vector(raw_lags, counts, cap).tolist())
        result = [list(islice(it, n)) for n in counts]
        return result, list(map(sum, result))


def _claim_clean(current: list[Mapping], subscriptions: list | None, index: dict, counts: list[int],
                 subscribers: list, lags: list) -> list[int] | list[None] | None:
    """Each member's load when every current assignment is in output form (a dict of valid, ascending,
    non-empty tuples), together they own every partition exactly once, and every topic's counts are
    balanced. None otherwise (then `_claim` sorts it out, and `_balance_counts` repairs the counts).

    This is what a previous result looks like, and it can be checked a tuple at a time. An id that
    indexes a list (an int, or a bool or numpy int, which the numpy path reads as the same int) is
    taken as is; anything else fails the lag lookup and goes to `_claim`.
    """
    load = []
    claimed = [[] for _ in counts]
    try:
        for i, assignment in enumerate(current):
            if type(assignment) is not dict:
                return None
            weight = 0
            for topic_id, parts in assignment.items():
                t = index.get(topic_id)
                if t is None or type(parts) is not tuple or not parts:
                    return None
                if subscriptions is not None and topic_id not in subscriptions[i]:
                    return None
                lag = lags[t]
                previous = -1
                for p in parts:  # a plain loop beats sorted() and map() on a few ids
                    if p <= previous:
                        return None  # negative, or not strictly ascending
                    weight += lag[p]  # IndexError: beyond the topic's partitions
                    previous = p
                claimed[t].append(parts)
            load.append(weight)
    except (TypeError, IndexError):
        return None
    for parts, n, subs in zip(claimed, counts, subscribers):
        if len(set().union(*parts)) < n:
            return None  # a partition without owner
        sizes = list(map(len, parts))  # each member lists a topic once: its count, if it holds any
        if sum(sizes) != n:
            return None  # a partition listed twice: the first claim wins, `_claim` works that out
        floor, extra = divmod(n, len(subs))
        if max(sizes) > floor + (extra > 0) or (floor and (len(sizes) < len(subs) or min(sizes) < floor)):
            return None
    return load


def _claim(current: list[Mapping], subscriptions: list | None, index: dict, counts: list[int],
           lags: list, converted=None) -> tuple | None:
    """`Model.current_owners` with per-member bookkeeping, or None (see below).

    Returns (owner of each partition of each topic, -1 for nobody; whether each member's current
    assignment is in output form; partitions each member holds per topic; each member's load).
    `subscriptions` is None when every member subscribes to every topic. None when an entry is not a
    sized collection (the numpy path raises on it) or lists more than SMALL_CLAIMS partition ids.

    Partition ids are taken to be ints, and checked afterwards: if some are not, the claims are
    made again from `converted`, every listed id as the numpy path reads it (`_int_array`).
    """
    m_count = len(current)
    owners = [[-1] * n for n in counts]
    held = [[0] * m_count for _ in counts]
    load = [0] * m_count
    clean = [True] * m_count
    claims = 0
    listed = []  # the valid entries' partition ids, checked to be ints at the end
    try:
        for i, assignment in enumerate(current):
            if type(assignment) is not dict:
                clean[i] = False
            if not assignment:
                continue
            subscription = None if subscriptions is None else subscriptions[i]
            for topic_id, parts in assignment.items():
                t = index.get(topic_id, -1)
                if t >= 0 and subscription is not None and topic_id not in subscription:
                    t = -1
                try:
                    size = len(parts)
                except TypeError:
                    return None
                claims += size
                if claims > SMALL_CLAIMS:
                    return None
                if t < 0 or not size or type(parts) is not tuple:
                    clean[i] = False
                if converted is not None:
                    parts = list(islice(converted, size))
                if t < 0:
                    continue
                listed.append(parts)
                owner, lag, n = owners[t], lags[t], counts[t]
                # Fast lane while the ids are ascending, in range and unclaimed (the usual case).
                previous = -1
                for j, p in enumerate(parts):
                    if p <= previous or p >= n or owner[p] >= 0:
                        break
                    owner[p] = i
                    previous = p
                else:
                    held[t][i] += size
                    load[i] += sum(map(lag.__getitem__, parts))
                    continue
                got = j
                weight = sum(map(lag.__getitem__, islice(parts, j)))
                for p in islice(parts, j, None):
                    if p <= previous or p >= n:  # not ascending, or out of range
                        clean[i] = False
                        if p < 0 or p >= n:
                            continue
                    previous = p
                    if owner[p] < 0:
                        owner[p] = i
                        got += 1
                        weight += lag[p]
                    else:  # claimed before, by another member (a member's own repeat is not ascending)
                        clean[i] = False
                held[t][i] += got
                load[i] += weight
    except TypeError:  # a partition id that is not a number
        if converted is not None:
            raise
        listed = [(None,)]
    if converted is None and set(map(type, chain.from_iterable(listed))) - _INT:
        values = [parts for assignment in current if assignment for parts in assignment.values()]
        try:
            count = sum(map(len, values))
        except TypeError:
            return None
        return _claim(current, subscriptions, index, counts, lags, iter(_int_array(values, count).tolist()))
    return owners, clean, held, load


def _balance_counts(owners: list[list[int]], counts: list[int], subscribers: list, lags: list, load: list[int]) -> bool:
    """`_lag_sticky.balance_counts` on lists, in place (owners per topic, each member's load): the
    same quotas, the same partitions shed and the same placements. False when a topic to fix has
    subscribers whose loads add up to 2**53 or more: the numpy path's mean is a float sum in its
    own order, which only agrees with an exact sum below that (the caller then gives up)."""
    for owner, n, subs, lag in zip(owners, counts, subscribers, lags):
        floor, extra = divmod(n, len(subs))
        held = list(map(owner.count, subs))  # owners are always subscribers
        if -1 not in owner and max(held) <= floor + (extra > 0) and min(held) >= floor:
            continue  # with n <= k: every partition owned, by distinct members
        subs_load = sum(map(load.__getitem__, subs))
        if subs_load >= 1 << 53:
            return False
        _fix_topic(owner, subs, lag, load, held, subs_load, floor, extra)
    return True


def _fix_topic(owner: list[int], subs: list[int], lag: list[int], load: list[int], cnt: list[int], subs_load: int,
               floor: int, extra: int) -> None:
    """`_lag_sticky._fix_topic` on lists: quotas, shedding and placement for one topic, whose
    subscribers hold `cnt` partitions of it and carry `subs_load` in all."""
    k = len(subs)
    quota = [floor] * k
    if extra:
        over = [i for i in range(k) if cnt[i] > floor]
        if len(over) >= extra:
            keep = sorted(over, key=lambda i: (-cnt[i], load[subs[i]], i))[:extra]
        else:
            rest = [i for i in range(k) if cnt[i] <= floor]
            keep = over + sorted(rest, key=lambda i: (load[subs[i]], i))[: extra - len(over)]
        for i in keep:
            quota[i] += 1

    mean = subs_load / k  # exact below 2**53, as numpy's float mean
    for i in range(k):
        surplus = cnt[i] - quota[i]
        if surplus <= 0:
            continue
        member = subs[i]
        mine = [p for p, m in enumerate(owner) if m == member]
        want = max(0.0, float(load[member]) - mean) / surplus
        for p in sorted(mine, key=lambda p: abs(lag[p] - want))[:surplus]:  # stable, as argsort's
            owner[p] = -1
            load[member] -= lag[p]
        cnt[i] = quota[i]

    free = sorted((p for p, m in enumerate(owner) if m < 0), key=lambda p: -lag[p])
    room = [q - c for q, c in zip(quota, cnt)]
    heap = [(load[subs[i]], i) for i in range(k) if room[i] > 0]
    heapq.heapify(heap)
    for p in free:
        total, i = heapq.heappop(heap)
        member = subs[i]
        owner[p] = member
        total += lag[p]
        load[member] = total
        room[i] -= 1
        if room[i]:
            heapq.heappush(heap, (total, i))


def _balanced(held: list, counts: list[int], subscribers: list, everyone: bool) -> bool:
    """Every partition owned and every subscriber of a topic holding floor or ceil of n / k of it."""
    for cnt, n, subs in zip(held, counts, subscribers):
        if sum(cnt) != n:
            return False
        floor, extra = divmod(n, len(subs))
        low = min(cnt) if everyone else min(map(cnt.__getitem__, subs))
        if low < floor or max(cnt) > floor + (extra > 0):
            return False
    return True


def _within(load: list[int], counts: list[int], subscribers: list, lags: list, sums: list[int], factor: Fraction,
            everyone: bool) -> bool:
    """Whether the heaviest load is within tolerance as `LagAssignor._sticky` judges it: against the
    lower bound of the greedy peak first, then against the greedy peak itself."""
    active = len(load) if everyone else len(set(chain.from_iterable(subscribers)))
    bound = max(max(map(max, lags)), -(-sum(sums) // active))
    for subs, topic_lag in zip(subscribers, sums):
        bound = max(bound, -(-topic_lag // len(subs)))
    heaviest = max(load)
    if heaviest <= bound:  # factor >= 1
        return True
    num, den = factor.numerator, factor.denominator
    if heaviest * den <= num * bound:
        return True
    peak = _peak(len(load), counts, lags) if everyone else _greedy(len(load), subscribers, counts, lags, False)
    return heaviest * den <= num * peak


def _greedy(m_count: int, subscribers: list, counts: list[int], lags: list, lists: bool):
    """`_lag_greedy.greedy` one round at a time: each topic's partitions per member (`lists`), else the peak load.

    Each member's key (total lag, total partitions, index) is packed in one exact Python int,
    lag * base + count * m_count + index with count <= total partitions < base / m_count, so one
    sort of the subscribers by key ranks a round.
    """
    base = m_count * (sum(counts) + 1)
    key = list(range(m_count))
    rank = key.__getitem__
    result = []
    for subs, n, lag in zip(subscribers, counts, lags):
        k = len(subs)
        order = sorted(range(n), key=lag.__getitem__, reverse=True)  # stable: ties keep lower ids first
        if lists:
            mine = [[] for _ in key]
            result.append(mine)
            for start in range(0, n, k):
                for p, m in zip(order[start : start + k], sorted(subs, key=rank)):
                    mine[m].append(p)
                    key[m] += lag[p] * base + m_count
        else:
            for start in range(0, n, k):
                for p, m in zip(order[start : start + k], sorted(subs, key=rank)):
                    key[m] += lag[p] * base + m_count
    return result if lists else max(key) // base


def _peak(m_count: int, counts: list[int], lags: list) -> int:
    """The heaviest load of `_greedy` when every member subscribes to every topic.

    Only the loads matter, so a round adds the round's lags, largest first, to the members' keys in
    ascending order: a sort and a map per round instead of a loop per partition.
    """
    base = m_count * (sum(counts) + 1)
    keys = list(range(m_count))  # packed as in _greedy, ascending, in no particular member order
    for n, lag in zip(counts, lags):
        steps = [v * base + m_count for v in sorted(lag, reverse=True)]
        full = n - n % m_count
        for start in range(0, full, m_count):
            keys = sorted(map(add, keys, steps[start : start + m_count]))
        if full < n:
            keys[: n - full] = map(add, keys, steps[full:])
            keys.sort()
    return max(keys) // base


def assignment_of(member_ids: list, topic_ids: list, owners: list[list[int]], reuse: list) -> GroupAssignment:
    """{member_id: {topic_id: ascending partitions}}; member m's entry is reuse[m] when that is not None."""
    per_member = [{} if r is None else None for r in reuse]
    lists = [[] for _ in reuse]
    for topic_id, owner in zip(topic_ids, owners):
        for p, m in enumerate(owner):
            lists[m].append(p)
        for m, (target, parts) in enumerate(zip(per_member, lists)):
            if parts:
                if target is not None:
                    target[topic_id] = tuple(parts)
                lists[m] = []
    return dict(zip(member_ids, [r if d is None else d for d, r in zip(per_member, reuse)]))

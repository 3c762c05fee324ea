"""The greedy lag assignment (KAFKA-5337's algorithm, count first).

Topics in sorted order; within a topic, partitions by decreasing lag (ties: lower partition id), each
to the subscriber that minimises (partitions of this topic, total lag over all topics, total
partitions over all topics, member index).

The count key makes the choice go in rounds: the first k partitions (k subscribers) go to distinct
subscribers, the next k likewise, and so on, and within a round a subscriber's other keys do not
change until it is picked. So a round is "the c best subscribers by (lag, count, index) at the start
of the round, in that order, take the round's c partitions in lag order": a partial sort instead of
a per-partition scan. The three keys are packed into one int64 (`lag * B + count * M + index`, all
distinct) while that provably fits, with an exact lexsort fallback otherwise; both give the same
result.

When every member subscribes to a topic and a round needs few of them, the round only looks at a
*pool*: the members whose key was at most a cut when the pool was built. Keys only grow, so the
members outside stay above the cut, and the pool's best c are the group's best c while it holds c.
"""

from __future__ import annotations

import numpy as np

from cohort.assignors._lag_model import INT64_MAX, Model

_POOL_MIN = 1024  # pool size floor; a pool is rebuilt (one O(M) partition) when it runs low


def greedy(model: Model) -> np.ndarray:
    """Owner (member index) of every partition."""
    m_count = len(model.member_ids)
    owner = np.empty(model.total, dtype=np.int64)
    if model.total == 0:
        return owner
    # Bound on any member's final partition count, so count * M + index < base always holds.
    count_bound = sum(-(-n // len(s)) for n, s in zip(model.counts, model.subscribers))
    base = m_count * (count_bound + 1)
    order = model.greedy_order
    ordered_lags = model.lag[order]
    # The key increment of each partition's new owner, when it cannot overflow (else per round).
    steps = ordered_lags * base + m_count if (int(model.lag.max()) + 1) * base <= INT64_MAX else None
    packed = np.arange(m_count, dtype=np.int64)  # lag * base + count * M + index
    lag_bound = 0  # >= every member's total lag
    pool = pool_cut = None
    for t, subs in enumerate(model.subscribers):
        k = len(subs)
        everyone = k == m_count
        end = model.offsets[t + 1]
        for start in range(model.offsets[t], end, k):
            stop = min(start + k, end)
            c = stop - start
            lag_bound += int(ordered_lags[start])  # the round's largest lag
            if (lag_bound + 1) * base > INT64_MAX:
                lag_bound = int(packed.max()) // base + int(ordered_lags[start])
                if (lag_bound + 1) * base > INT64_MAX:
                    return _greedy_exact(model, owner, packed, base, t, start)
            step = steps[start:stop] if steps is not None else ordered_lags[start:stop] * base + m_count
            if everyone and 8 * c < m_count:
                if pool is None or len(pool) < c:
                    size = min(m_count, max(_POOL_MIN, 8 * c))
                    pool_cut = np.partition(packed, size - 1)[size - 1]
                    pool = np.flatnonzero(packed <= pool_cut)
                chosen = pool[_smallest(packed[pool], c)]
                packed[chosen] += step
                pool = pool[packed[pool] <= pool_cut]
            else:
                if everyone:
                    chosen = _smallest(packed, c) if c < k else np.argsort(packed)
                else:
                    keys = packed[subs]
                    chosen = subs[_smallest(keys, c) if c < k else np.argsort(keys)]
                packed[chosen] += step
                pool = None
            owner[order[start:stop]] = chosen
    return owner


def _smallest(keys: np.ndarray, c: int) -> np.ndarray:
    """Positions of the c smallest of distinct keys, smallest first."""
    if len(keys) <= 4096:  # argpartition wins on small arrays, partition + threshold on large ones
        local = np.argpartition(keys, c - 1)[:c]
    else:
        cut = np.partition(keys, c - 1)[c - 1]
        local = np.flatnonzero(keys <= cut)
    return local[np.argsort(keys[local])]


def _greedy_exact(model: Model, owner: np.ndarray, packed: np.ndarray, base: int, t0: int, start0: int) -> np.ndarray:
    """The same greedy with unpacked keys (lexsort), resumed at global position start0 of topic t0."""
    m_count = len(model.member_ids)
    lag_total = packed // base
    count_total = (packed % base) // m_count
    order = model.greedy_order
    for t in range(t0, len(model.subscribers)):
        subs = model.subscribers[t]
        k, end = len(subs), model.offsets[t + 1]
        for start in range(start0 if t == t0 else model.offsets[t], end, k):
            chunk = order[start : min(start + k, end)]
            chosen = subs[np.lexsort((subs, count_total[subs], lag_total[subs]))[: len(chunk)]]
            owner[chunk] = chosen
            lag_total[chosen] += model.lag[chunk]
            count_total[chosen] += 1
    return owner

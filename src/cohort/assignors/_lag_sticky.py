"""Sticky repair for the lag assignor: keep the current assignment, move only what balance requires.

Starting from the valid part of the current assignment:

1. Count balance, per topic (`balance_counts`). Each subscriber must end with n // k or n // k + 1
   partitions; the n % k larger quotas go first to members already holding more than n // k (so
   the fewest partitions move), then to the lightest. A member over quota by s sheds the s partitions
   whose lags are closest to (its load - the subscribers' mean load) / s, so it lands near the mean;
   the shed and never-owned partitions go out by decreasing lag to the lightest member with room.
   No count-balanced assignment moves fewer partitions.
2. Lag balance (`improve`): while the heaviest member is over the limit, move one of its partitions
   to a lighter subscriber (when the topic's counts allow it) or swap one for a lighter partition of
   the same topic, whichever brings the pair closest to even, preferring single moves and actions
   that bring both under the limit. Per-topic counts never change here. Bounded in steps. Fast but
   not minimal (one move too many in a few small cases), so its result is only the bound that the
   exact search (`_lag_fewest.fewest`) starts from.
"""

from __future__ import annotations

import heapq

import numpy as np

from cohort.assignors._lag_model import Model

RECEIVERS = 4  # lightest members considered as the other side of each move or swap


def balance_counts(model: Model, own: np.ndarray, lag_total: np.ndarray) -> None:
    """Make every topic's counts valid and every partition owned, in place (own, lag_total)."""
    m_count = len(model.member_ids)
    for t, subs in enumerate(model.subscribers):
        n, k = model.counts[t], len(subs)
        offset = model.offsets[t]
        own_t = own[offset : offset + n]
        floor, extra = divmod(n, k)
        if n <= k:
            if (own_t >= 0).all():
                ordered = np.sort(own_t)
                if (ordered[1:] != ordered[:-1]).all():
                    continue
        else:
            held = own_t >= 0
            local = own_t[held] if k == m_count else np.searchsorted(subs, own_t[held])
            cnt = np.bincount(local, minlength=k)
            if held.all() and cnt.max() <= floor + (extra > 0) and cnt.min() >= floor:
                continue
        _fix_topic(model, t, own_t, lag_total, floor, extra)


def _fix_topic(model: Model, t: int, own_t: np.ndarray, lag_total: np.ndarray, floor: int, extra: int) -> None:
    """Quotas, shedding and placement for one topic whose counts or ownership are off."""
    subs, lags = model.subscribers[t], model.lags[t]
    k = len(subs)
    held = own_t >= 0
    local = np.searchsorted(subs, own_t[held])
    cnt = np.bincount(local, minlength=k)
    quota = np.full(k, floor, dtype=np.int64)
    if extra:
        over = np.flatnonzero(cnt > floor)
        if len(over) >= extra:
            keep = over[np.lexsort((over, lag_total[subs[over]], -cnt[over]))[:extra]]
        else:
            rest = np.flatnonzero(cnt <= floor)
            keep = np.concatenate([over, rest[np.lexsort((rest, lag_total[subs[rest]]))[: extra - len(over)]]])
        quota[keep] += 1

    mean = float(lag_total[subs].mean())
    for pos in np.flatnonzero(cnt > quota).tolist():
        member = int(subs[pos])
        mine = np.flatnonzero(own_t == member)
        surplus = len(mine) - int(quota[pos])
        want = max(0.0, float(lag_total[member]) - mean) / surplus
        shed = mine[np.argsort(np.abs(lags[mine] - want), kind="stable")[:surplus]]
        own_t[shed] = -1
        lag_total[member] -= int(lags[shed].sum())
        cnt[pos] = quota[pos]

    free = np.flatnonzero(own_t < 0)
    free = free[np.argsort(-lags[free], kind="stable")]
    room = quota - cnt
    heap = [(int(lag_total[subs[pos]]), pos) for pos in np.flatnonzero(room > 0).tolist()]
    heapq.heapify(heap)
    for p in free.tolist():
        total, pos = heapq.heappop(heap)
        member = int(subs[pos])
        own_t[p] = member
        total += int(lags[p])
        lag_total[member] = total
        room[pos] -= 1
        if room[pos]:
            heapq.heappush(heap, (total, pos))


def moves(before: np.ndarray, after: np.ndarray) -> int:
    """Partitions that had an owner and now have another one."""
    return int(((before >= 0) & (after != before)).sum())


def holdings_index(own: np.ndarray, m_count: int) -> tuple[np.ndarray, list[int]]:
    """(partitions ordered by owner, each member's start in that order): member m holds
    `order[starts[m]:starts[m + 1]]`, ascending."""
    order = np.argsort(own, kind="stable")
    return order, np.searchsorted(own[order], np.arange(m_count + 1)).tolist()


class _Holdings:
    """Each member's partitions (global ids), built lazily from a snapshot and kept up to date."""

    def __init__(self, own: np.ndarray, m_count: int):
        self._order, self._starts = holdings_index(own, m_count)
        self._sets: dict[int, set[int]] = {}

    def of(self, member: int) -> set[int]:
        held = self._sets.get(member)
        if held is None:
            held = set(self._order[self._starts[member] : self._starts[member + 1]].tolist())
            self._sets[member] = held
        return held

    def move(self, g: int, src: int, dst: int) -> None:
        self.of(src).discard(g)
        self.of(dst).add(g)


def improve(model: Model, own: np.ndarray, lag_total: np.ndarray, limit: int, budget: int) -> bool:
    """Moves and swaps from the heaviest member until every member is within `limit`; False if stuck."""
    m_count = len(model.member_ids)
    counts = np.array(model.counts, dtype=np.int64)
    ks = np.array([len(s) for s in model.subscribers], dtype=np.int64)
    floors, ceils = counts // ks, -(-counts // ks)
    topics = len(counts)
    lag, topic_of = model.lag, model.topic_of
    scale = float(lag.max()) + 1.0
    holdings = _Holdings(own, m_count)
    for _ in range(budget):
        h = int(np.argmax(lag_total))
        top = int(lag_total[h])
        if top <= limit:
            return True
        gh = np.array(sorted(holdings.of(h)), dtype=np.int64)
        if len(gh) == 0:
            return False
        th, lh = topic_of[gh], lag[gh]
        cnt_h = np.bincount(th, minlength=topics)
        best = None
        for rank, b in enumerate(_receivers(model, lag_total, h, top)):
            low = int(lag_total[b])
            gap = top - low
            gb = np.array(sorted(holdings.of(b)), dtype=np.int64)
            tb, lb = topic_of[gb], lag[gb]
            cnt_b = np.bincount(tb, minlength=topics)
            # A single move keeps counts valid only from a member at ceil to one at floor of that topic.
            ok = (ceils[th] > floors[th]) & (cnt_h[th] == ceils[th]) & (cnt_b[th] == floors[th])
            ok &= (lh > 0) & (lh < gap)
            if not model.homogeneous and ok.any():
                subs_b = model.subscription(b)
                ok &= np.array([model.topic_ids[t] in subs_b for t in th.tolist()], dtype=bool)
            if ok.any():
                peak = np.maximum(top - lh, low + lh)
                peak[~ok] = top
                i = int(np.argmin(peak))
                cand = _score(int(peak[i]), limit, 0, rank, int(gh[i]), -1, b)
                best = cand if best is None or cand < best else best
            if len(gb):
                swap = _best_swap(th, lh, gh, tb, lb, gb, gap, scale)
                if swap is not None:
                    d, g, q = swap
                    peak_s = max(top - d, low + d)
                    cand = _score(peak_s, limit, 1, rank, g, q, b)
                    best = cand if best is None or cand < best else best
        if best is None:
            return False
        g, q, b = best[-3:]
        own[g] = b
        holdings.move(g, h, b)
        d = int(lag[g])
        if q >= 0:
            own[q] = h
            holdings.move(q, b, h)
            d -= int(lag[q])
        lag_total[h] -= d
        lag_total[b] += d
    return int(lag_total.max()) <= limit


def _score(peak: int, limit: int, kind: int, rank: int, g: int, q: int, b: int) -> tuple:
    """Sort key of a candidate action (kind 0: move, 1: swap); the smallest wins.

    An action that leaves both members within the limit wins, and among those the one moving fewer
    partitions; otherwise the one leaving the pair's heavier side lightest.
    """
    if peak <= limit:
        return (0, kind, peak, rank, g, q, b)
    return (1, peak, kind, rank, g, q, b)


def _receivers(model: Model, lag_total: np.ndarray, h: int, top: int) -> list[int]:
    """Up to RECEIVERS of the lightest members lighter than h that share a topic with it, lightest first."""
    m_count = len(lag_total)
    want = RECEIVERS if model.homogeneous else 16 * RECEIVERS
    for window in (min(m_count, want + 1), m_count):
        if window < m_count:
            near = np.argpartition(lag_total, window - 1)[:window]
            near = near[np.lexsort((near, lag_total[near]))]
        else:
            near = np.argsort(lag_total, kind="stable")
        found = []
        subs_h = None if model.homogeneous else model.subscription(h)
        for b in near.tolist():
            if lag_total[b] >= top or len(found) == RECEIVERS:
                break
            if b != h and (model.homogeneous or not subs_h.isdisjoint(model.subscription(b))):
                found.append(b)
        if len(found) == RECEIVERS or window == m_count or (len(near) and lag_total[near[-1]] >= top):
            return found
    return found


def _best_swap(th, lh, gh, tb, lb, gb, gap: int, scale: float):
    """(lag difference, g, q) of the same-topic swap whose difference is nearest gap/2, or None.

    Nearest is found on float keys (topic + lag/scale) and then checked exactly: the difference must
    be in (0, gap) so both sides end strictly below the heavier one's current total.
    """
    ob = np.lexsort((gb, lb, tb))
    tbs, lbs, gbs = tb[ob], lb[ob], gb[ob]
    keys = tbs + lbs / scale
    target = th + np.clip((lh - gap / 2) / scale, 0.0, np.nextafter(1.0, 0.0))
    pos = np.searchsorted(keys, target)
    best = None
    for side in (pos - 1, pos):
        inside = (side >= 0) & (side < len(keys))
        side = np.clip(side, 0, len(keys) - 1)
        d = lh - lbs[side]
        ok = inside & (tbs[side] == th) & (d > 0) & (d < gap)
        if not ok.any():
            continue
        peak = np.where(ok, np.maximum(-d, d - gap), np.iinfo(np.int64).max)  # peak - top, minimised
        i = int(np.argmin(peak))
        cand = (int(peak[i]), int(gh[i]), int(gbs[side[i]]), int(d[i]))
        best = cand if best is None or cand < best else best
    if best is None:
        return None
    return best[3], best[1], best[2]

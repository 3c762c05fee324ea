"""The fewest moves that bring every member within the lag limit: depth-first branch and bound.

Input: a count-balanced assignment `own` (every partition owned, each subscriber of topic t holding
floor(n/k) or ceil(n/k) of its partitions) and a load limit. Output: an assignment with the same
count rules, every member's load <= limit, and the fewest partitions whose owner differs from `own`.

Search space: each partition moves at most once (only its final owner matters). In any solution
reachable from a state, a member over the limit or over a topic's ceil must lose one of its
not-yet-moved partitions and a member under a topic's floor must gain one, so branching on "which
such partition goes to which subscriber" for one such member is complete. The open member with the
fewest branches is expanded; children are tried by (bound, pair peak, partition, member), integers
only, so the result is deterministic and independent of dict order.

Bound on the further moves (`_member_bound`): a member over the limit by e must shed lag >= e from
its unmoved partitions; removing a partition of topic t beyond its slack above the floor needs one
of t back, a second move bringing back at least t's smallest lag. The fewest removals, the fewest
returns and the fewest moves touching the member (removals cost 1 or 2) are each a lower bound;
every move leaves one member and enters another, so the moves still needed are at least the sum of
the first two over members, the largest third one, and half the sum of the third ones. States
reached before in another order (the same set of moves) are skipped.

`budget` caps the evaluated moves (10-20 us each). When it runs out, the best assignment found so far
is returned; a root with more branches than the budget is not searched at all:
in a group that large no tree would fit, and the caller's greedy repair stands.
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

from cohort.assignors._lag_model import Model
from cohort.assignors._lag_sticky import holdings_index

_ZERO = (0, 0, 0)
_INF = 1 << 62
_IMPOSSIBLE = (_INF, _INF, _INF)


def fewest(model: Model, own: np.ndarray, load: np.ndarray, limit: int, below: int,
           budget: int) -> np.ndarray | None:
    """An owner array moving fewer than `below` partitions from `own`, the fewest possible when the
    search finishes within `budget`; None when it found none (none exists, or the budget ran out
    first). `own` and `load` are not modified.
    """
    search = _Search(model, own, load, limit, below, budget)
    search.run()
    return search.best_owner


def _fewest_touching(ones: list[int], twos: list[int], excess: int) -> int:
    """min i + 2j such that the i largest `ones` and the j largest `twos` sum to >= excess (feasible)."""
    ones.sort(reverse=True)
    twos.sort(reverse=True)
    prefix = [0]
    for v in ones:
        prefix.append(prefix[-1] + v)
    best = _INF
    i, got = len(ones), 0
    for j in range(len(twos) + 1):
        if j:
            got += twos[j - 1]
        while i > 0 and got + prefix[i - 1] >= excess:
            i -= 1
        if got + prefix[i] >= excess:
            best = min(best, i + 2 * j)
        if 2 * j >= best:
            break
    return best


class _Search:
    """The search state, changed by `_apply` and restored by `_undo` (a move is (partition, from, to))."""

    def __init__(self, model: Model, own: np.ndarray, load: np.ndarray, limit: int, below: int, budget: int):
        self.model = model
        self.own0 = own
        self.own = own.copy()
        self.moved = np.zeros(len(own), dtype=bool)
        self.load = load.tolist()
        self.limit = limit
        self.best = below
        self.best_owner: np.ndarray | None = None
        self.budget = budget
        counts = np.array(model.counts, dtype=np.int64)
        ks = np.array([len(s) for s in model.subscribers], dtype=np.int64)
        self.floor = (counts // ks).tolist()
        self.ceil = (-(-counts // ks)).tolist()
        self.k = ks.tolist()
        self.unmoved_left = model.counts[:]
        self.minlag = [int(lags.min()) for lags in model.lags]
        self._subs: dict[int, list[int]] = {}
        self._cnt0: dict[int, np.ndarray] = {}  # topic -> partitions per member in own (members not built)
        self._order: np.ndarray | None = None
        self._starts: list[int] = []
        self._touches = 0
        self.unmoved: dict[int, dict[int, list[tuple[int, int]]]] = {}  # member -> topic -> sorted (-lag, id)
        self.cnt: dict[int, dict[int, int]] = {}  # member -> topic -> partitions held now (members built)
        self.delta: dict[int, dict[int, int]] = {}  # the same as changes from own (members not built)
        self.viol: dict[tuple[int, int], int] = {}  # (member, topic) -> +1 over ceil, -1 under floor
        self.viol_topics: dict[int, set[int]] = {}
        self.over = set(np.flatnonzero(load > limit).tolist())
        self.bounds: dict[int, tuple[int, int, int]] = {}
        self.changed: dict[int, set[int]] = {}  # member -> partitions moved in or out: its state
        self._cache: dict[tuple, tuple[int, int, int]] = {}  # (member, state, +-partition) -> bound
        self.sums = [0, 0, 0]
        self.path: list[tuple] = []
        self.visited: set[frozenset] = set()

    # -- member state -------------------------------------------------------------------------

    def _count(self, m: int, t: int) -> int:
        cnt = self.cnt.get(m)
        if cnt is not None:
            return cnt.get(t, 0)
        cnt0 = self._cnt0.get(t)
        if cnt0 is None:
            a, b = self.model.offsets[t], self.model.offsets[t + 1]
            cnt0 = self._cnt0[t] = np.bincount(self.own0[a:b], minlength=len(self.load))
        delta = self.delta.get(m)
        return int(cnt0[m]) + delta.get(t, 0) if delta else int(cnt0[m])

    def _adjust(self, m: int, t: int, d: int) -> None:
        cnt = self.cnt.get(m)
        if cnt is None:
            cnt = self.delta.setdefault(m, {})
        cnt[t] = cnt.get(t, 0) + d

    def _touch(self, members: list[int]) -> None:
        """Build the unmoved partitions of members not seen yet (one pass for a batch)."""
        members = [m for m in members if m not in self.unmoved]
        if not members:
            return
        if len(members) > 1:
            mask = np.zeros(len(self.load), dtype=bool)
            mask[members] = True
            held = np.flatnonzero(mask[self.own0])
        else:
            m = members[0]
            self._touches += 1
            if self._order is None and self._touches > 8 and len(self.own0) > 4096:
                self._order, self._starts = holdings_index(self.own0, len(self.load))
            if self._order is None:
                held = np.flatnonzero(self.own0 == m)
            else:
                held = self._order[self._starts[m] : self._starts[m + 1]]
        for m in members:
            self.unmoved[m] = {}
            self.cnt[m] = self.delta.pop(m, {})
        lags = self.model.lag[held]
        who = self.own0[held]
        order = np.lexsort((held, -lags, who))
        moved = self.moved[held[order]].tolist()
        for m, t, g, v, gone in zip(who[order].tolist(), self.model.topic_of[held[order]].tolist(),
                                    held[order].tolist(), lags[order].tolist(), moved):
            cnt = self.cnt[m]
            cnt[t] = cnt.get(t, 0) + 1
            if not gone:
                self.unmoved[m].setdefault(t, []).append((-v, g))

    def _subscribers(self, t: int) -> list[int]:
        subs = self.model.subscribers[t]
        cached = self._subs.get(id(subs))
        if cached is None:
            cached = self._subs[id(subs)] = subs.tolist()
        return cached

    def _member_bound(self, m: int) -> tuple[int, int, int]:
        """(fewest moves out of m, fewest into m, fewest touching m) still needed; _INF if impossible."""
        excess = self.load[m] - self.limit
        vt = self.viol_topics.get(m)
        if excess <= 0 and not vt:
            return _ZERO
        self._touch([m])
        per, cnt = self.unmoved[m], self.cnt[m]
        forced_out = forced_in = 0
        rest = {}  # violated topic -> (partitions left after the forced removals, slack)
        for t in vt or ():
            c, f, ceil = cnt.get(t, 0), self.floor[t], self.ceil[t]
            parts = per.get(t, ())
            if c > ceil:
                s = c - ceil
                if len(parts) < s:
                    return _IMPOSSIBLE
                excess += sum(v for v, _ in parts[:s])  # the stored keys are -lag
                forced_out += s
                rest[t] = (parts[s:], ceil - f)
            else:
                forced_in += f - c
                excess += (f - c) * self.minlag[t]
                rest[t] = (parts, 0)
        if excess <= 0:
            return (forced_out, forced_in, forced_out + forced_in)
        ones: list[int] = []  # removals within the slack above the floor: one move each
        twos: list[int] = []  # removals that need a partition back: two moves, net lag - minlag
        for t in (per.keys() | vt) if vt else per:
            if self.k[t] < 2:
                continue
            if t in rest:
                parts, slack = rest[t]
            else:
                parts, slack = per[t], cnt[t] - self.floor[t]
            low = self.minlag[t]
            for i, (v, _) in enumerate(parts):
                if i < slack:
                    if v >= 0:
                        break
                    ones.append(-v)
                else:
                    if -v - low <= 0:
                        break
                    twos.append(-v - low)
        acc = taken = 0
        for v in sorted(ones + twos, reverse=True):
            acc += v
            taken += 1
            if acc >= excess:
                break
        else:
            return _IMPOSSIBLE
        need, back = excess - sum(ones), 0
        if need > 0:
            twos.sort(reverse=True)
            for v in twos:
                need -= v
                back += 1
                if need <= 0:
                    break
        out, into = forced_out + taken, forced_in + back
        return (out, into, forced_out + forced_in + _fewest_touching(ones, twos, excess))

    def _set_bound(self, m: int, new: tuple[int, int, int]) -> tuple[int, int, int]:
        old = self.bounds.get(m, _ZERO)
        if new == _ZERO:
            self.bounds.pop(m, None)
        else:
            self.bounds[m] = new
        s = self.sums
        s[0] += new[0] - old[0]
        s[1] += new[1] - old[1]
        s[2] += new[2] - old[2]
        return old

    def _bound(self) -> int:
        if not self.bounds:
            return 0
        s = self.sums
        top = max(b[2] for b in self.bounds.values())
        return min(_INF, max(s[0], s[1], top, -(-s[2] // 2)))

    def _check(self, m: int, t: int) -> None:
        c = self._count(m, t)
        key = (m, t)
        sign = 1 if c > self.ceil[t] else -1 if c < self.floor[t] else 0
        if sign:
            self.viol[key] = sign
            self.viol_topics.setdefault(m, set()).add(t)
        elif key in self.viol:
            del self.viol[key]
            topics = self.viol_topics[m]
            topics.discard(t)
            if not topics:
                del self.viol_topics[m]

    # -- moves --------------------------------------------------------------------------------

    def _shift(self, g: int, a: int, b: int, t: int, v: int) -> None:
        """Partition g (topic t, lag v) from a to b, bounds aside."""
        self._adjust(a, t, -1)
        self._adjust(b, t, 1)
        self.load[a] -= v
        self.load[b] += v
        self._check(a, t)
        self._check(b, t)
        for m in (a, b):
            if self.load[m] > self.limit:
                self.over.add(m)
            else:
                self.over.discard(m)

    def _apply(self, g: int, a: int, b: int) -> tuple:
        t = int(self.model.topic_of[g])
        v = int(self.model.lag[g])
        per = self.unmoved.get(a)
        if per is not None:
            parts = per[t]
            del parts[bisect_left(parts, (-v, g))]
        self.own[g] = b
        self.moved[g] = True
        self.unmoved_left[t] -= 1
        self.changed.setdefault(a, set()).add(g)
        self.changed.setdefault(b, set()).add(g)
        self._shift(g, a, b, t, v)
        return self._set_bound(a, self._member_bound(a)), self._set_bound(b, self._member_bound(b))

    def _undo(self, g: int, a: int, b: int, saved: tuple) -> None:
        old_a, old_b = saved
        t = int(self.model.topic_of[g])
        v = int(self.model.lag[g])
        self._set_bound(b, old_b)
        self._set_bound(a, old_a)
        per = self.unmoved.get(a)
        if per is not None:
            insort(per.setdefault(t, []), (-v, g))
        self.own[g] = a
        self.moved[g] = False
        self.unmoved_left[t] += 1
        self.changed[a].discard(g)
        self.changed[b].discard(g)
        self._shift(g, b, a, t, v)

    # -- search -------------------------------------------------------------------------------

    def _target(self) -> tuple[int, int, int, int]:
        """(branches, kind, member, topic) of the open member with the fewest branches.

        kind 0: over topic t's ceil, 1: under its floor, 2: over the load limit.
        """
        best = None
        for (m, t), sign in self.viol.items():
            self._touch([m])
            mine = len(self.unmoved[m].get(t, ()))
            if sign > 0:
                key = (mine * (self.k[t] - 1), 0, m, t)
            else:
                key = (self.unmoved_left[t] - mine, 1, m, t)
            if best is None or key < best:
                best = key
        for m in self.over:
            self._touch([m])
            key = (sum(len(ps) * (self.k[t] - 1) for t, ps in self.unmoved[m].items()), 2, m, -1)
            if best is None or key < best:
                best = key
        return best

    def _expand(self, depth: int) -> list | None:
        """Children that may still beat the best, best first; None when the budget ran out.

        A child's bound only needs the bounds of the two members the move touches (`_without`,
        `_receiving`); a member with no bound that stays within the limit and its topic's counts
        keeps none, so most children cost a few comparisons and nothing is applied until chosen.
        """
        _, kind, m, t = self._target()
        kids = []
        if kind == 1:
            a0 = self.model.offsets[t]
            own_t = self.own[a0 : self.model.offsets[t + 1]]
            free = np.flatnonzero(~self.moved[a0 : a0 + len(own_t)] & (own_t != m))
            floor = self.floor[t]
            for p in free.tolist():
                if self.budget <= 0:
                    return None
                self.budget -= 1
                g, a = a0 + p, int(own_t[p])
                if a in self.bounds:
                    given = self._without(g, a)
                elif self._count(a, t) > floor:
                    given = _ZERO
                else:  # within the limit before, lighter after: it only needs a partition back
                    given = (0, 1, 1)
                self._keep(kids, depth, g, a, m, given, self._receiving(g, m))
        else:
            for u in [t] if kind == 0 else sorted(self.unmoved[m]):
                if self.k[u] < 2:
                    continue
                ceil = self.ceil[u]
                for key, g in list(self.unmoved[m].get(u, ())):
                    self.budget -= 1
                    given = self._without(g, m)
                    # A receiver with no bound of its own gets (1, 0, 1) at least if the partition takes
                    # it over the ceil or the limit, and nothing otherwise: skip those that cannot win.
                    least = depth + 1 + self._bound_with({m: given})
                    if least >= self.best and not self.bounds.keys() - {m}:
                        continue
                    forced = depth + 1 + self._bound_with({m: given, -1: (1, 0, 1)})
                    for b in self._subscribers(u):
                        if b == m:
                            continue
                        if b in self.bounds:
                            taken = self._receiving(g, b)
                        elif self.load[b] - key > self.limit or self._count(b, u) >= ceil:
                            if forced >= self.best:
                                continue
                            taken = self._receiving(g, b)
                        elif least >= self.best:
                            continue
                        else:
                            taken = _ZERO
                        if self.budget <= 0:
                            return None
                        self.budget -= 1
                        self._keep(kids, depth, g, m, b, given, taken)
        kids.sort()
        return kids

    def _keep(self, kids: list, depth: int, g: int, a: int, b: int, given: tuple, taken: tuple) -> None:
        """Keep the move (g, a, b) if its bound may still beat the best."""
        bound = self._bound_with({a: given, b: taken})
        if depth + 1 + bound < self.best:
            v = int(self.model.lag[g])
            kids.append((bound, max(self.load[a] - v, self.load[b] + v), g, b, a))

    def _receiving(self, g: int, b: int) -> tuple[int, int, int]:
        """b's bound once it also holds g."""
        key = (b, frozenset(self.changed.get(b, ())), g)
        bound = self._cache.get(key)
        if bound is None:
            bound = self._cache[key] = self._receiving_now(g, b)
        return bound

    def _receiving_now(self, g: int, b: int) -> tuple[int, int, int]:
        t = int(self.model.topic_of[g])
        v = int(self.model.lag[g])
        self._adjust(b, t, 1)
        self.load[b] += v
        self._check(b, t)
        bound = self._member_bound(b)
        self.load[b] -= v
        self._adjust(b, t, -1)
        self._check(b, t)
        return bound

    def _without(self, g: int, a: int) -> tuple[int, int, int]:
        """a's bound once it no longer holds g (whoever takes it)."""
        key = (a, frozenset(self.changed.get(a, ())), -1 - g)
        bound = self._cache.get(key)
        if bound is None:
            bound = self._cache[key] = self._without_now(g, a)
        return bound

    def _without_now(self, g: int, a: int) -> tuple[int, int, int]:
        t = int(self.model.topic_of[g])
        v = int(self.model.lag[g])
        parts = self.unmoved[a][t]
        i = bisect_left(parts, (-v, g))
        del parts[i]
        cnt = self.cnt[a]
        cnt[t] -= 1
        self.load[a] -= v
        self._check(a, t)
        bound = self._member_bound(a)
        self.load[a] += v
        cnt[t] += 1
        self._check(a, t)
        parts.insert(i, (-v, g))
        return bound

    def _bound_with(self, changes: dict[int, tuple[int, int, int]]) -> int:
        """The bound if these members' own bounds were as given (and nothing else changed)."""
        total = self.sums[:]
        top = max([b[2] for n, b in self.bounds.items() if n not in changes] + [b[2] for b in changes.values()])
        for m, new in changes.items():
            old = self.bounds.get(m, _ZERO)
            for i in range(3):
                total[i] += new[i] - old[i]
        return min(_INF, max(total[0], total[1], top, -(-total[2] // 2)))

    def run(self) -> None:
        if not self.over:
            self.best, self.best_owner = 0, self.own.copy()
            return
        self._touch(sorted(self.over))
        for m in sorted(self.over):
            self._set_bound(m, self._member_bound(m))
        if self._bound() >= self.best:
            return
        if self._target()[0] > self.budget:
            return  # the root alone may not fit: a big group, where greedy must do
        kids = self._expand(0)
        if kids is None:
            return
        frames = [[kids, 0]]
        while frames:
            frame = frames[-1]
            kids, i = frame
            depth = len(self.path)
            if i >= len(kids) or depth + 1 + kids[i][0] >= self.best:
                frames.pop()
                if self.path:
                    g, a, b, saved = self.path.pop()
                    self._undo(g, a, b, saved)
                continue
            frame[1] = i + 1
            _, _, g, b, a = kids[i]
            key = frozenset([(p[0], p[2]) for p in self.path] + [(g, b)])
            if key in self.visited:
                continue
            self.visited.add(key)
            saved = self._apply(g, a, b)
            if not self.over and not self.viol:
                self.best, self.best_owner = depth + 1, self.own.copy()
                self._undo(g, a, b, saved)
                continue
            self.path.append((g, a, b, saved))
            children = self._expand(depth + 1)
            if children is None:
                break
            frames.append([children, 0])
        while self.path:
            g, a, b, saved = self.path.pop()
            self._undo(g, a, b, saved)

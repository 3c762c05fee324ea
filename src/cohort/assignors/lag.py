"""The lag-aware assignor ("lag"): KAFKA-5337's proposal done server side, balanced and sticky.

Fresh assignment (no current assignment): per topic, in sorted topic order, partitions by decreasing
lag (ties: lower partition id) each go to the subscriber with the fewest partitions *of that topic*,
ties to the least total assigned lag (over all topics so far), then the fewest partitions in total,
then member id. The count key keeps every topic's counts within one of each other, which is the fix
for the prototype's issue #1 (zero-lag partitions piling onto the first consumers); the total-count
tie-break spreads topics whose lags are all equal (typically 0) round-robin over the group instead of
always starting at the first member. It reproduces KAFKA-5337's worked example: C0, C1 on t0 with lags
[100000, 50000, 60000] give C0 [0] (100,000) and C1 [1, 2] (110,000).

A member's *load* is the sum of the lags of its partitions, over all topics. Lags come from
`topics.partition_lags(topic_id)`: None means all 0; negative values count as 0; a list of the wrong
length is cut or padded with 0 (lag and partition counts are sampled at slightly different times);
each is capped at 2**63 // (total partitions) so loads fit in int64.

Stickiness. Let G be the heaviest load in the fresh assignment for the same members, topics and lags,
and `imbalance_tolerance` = τ >= 0. An assignment is **within tolerance** when

    max over members of load  <=  (1 + τ) * G

measured over the whole group (so with disjoint subscriptions, the heaviest part sets the bar). Given
a current assignment, the assignor keeps its valid part, restores per-topic count balance with the
fewest moves any count-balanced assignment could make (new and orphaned partitions are placed too),
and if the result is within tolerance returns it. Otherwise it searches (`_lag_fewest`) for the
fewest partitions to move from that count-balanced assignment so that every member is within
tolerance and every topic's counts stay balanced, starting from the greedy repair (moves and swaps
off the heaviest member, at most `MAX_STEPS` steps) as the result to beat, and never accepting more
moves in total than the fresh assignment would make. The search evaluates at most `SEARCH_BUDGET` moves:

* if it finishes, the lag step is exact: no count-balanced assignment within tolerance moves fewer
  partitions from the count-balanced one (with the same members and a complete, count-balanced
  current assignment, the live lag-drift case, that is the fewest moves from the current one);
* if the budget runs out, the best assignment found so far is returned, never worse than the greedy
  repair; big groups (more possible first moves than the budget) keep the greedy repair at once.

If neither finds an assignment within tolerance that moves at most as many partitions as the fresh
assignment, it returns the fresh one. Hence:

* with the same lags, re-assigning from the previous result moves nothing;
* it never moves more partitions than the fresh assignment would (a *move* is a partition whose valid
  current owner is not its new owner; new and orphaned partitions do not count);
* a member whose partitions do not change gets its current assignment dict back (when it is already
  in output form: valid entries, ascending non-empty tuples), as Kafka returns unchanged maps;
* τ = 0 accepts nothing heavier than the greedy result; the default 0.1 lets lag drift 10% past what a
  full reshuffle would achieve before anything moves.

G is only computed when needed: if the count-balanced current assignment is within (1 + τ) times a
lower bound of G (the largest partition lag, each topic's lag over its subscribers, all lag over all
subscribers), it is certainly within tolerance.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import TYPE_CHECKING

from cohort.assignors.api import FreshGroups, GroupAssignment, GroupSpec, SubscribedTopicDescriber

if TYPE_CHECKING:
    import numpy as np

    from cohort.assignors._lag_model import Model

# The arrays (`_lag_*`, numpy: 0.18 s of CPU to import) load with the first assignment, not with
# the broker: most brokers never run `lag`, and every `cohort serve` process would pay for them.

MAX_STEPS = 512  # bound on improving moves/swaps per assignment (each costs O(members) at most)
SEARCH_BUDGET = 3000  # moves the exact search may evaluate (10-20 us each): tens of ms at worst


class LagAssignor:
    """Per-topic count balance first, then lag balance; sticky within `imbalance_tolerance`."""

    name = "lag"

    def __init__(self, imbalance_tolerance: float = 0.1):
        if not isinstance(imbalance_tolerance, numbers.Real) or isinstance(imbalance_tolerance, bool):
            raise TypeError(f"imbalance_tolerance must be a number, not {type(imbalance_tolerance).__name__}")
        if not math.isfinite(imbalance_tolerance) or imbalance_tolerance < 0:
            raise ValueError(f"imbalance_tolerance must be a finite number >= 0, not {imbalance_tolerance!r}")
        self.imbalance_tolerance = imbalance_tolerance
        self._factor = 1 + Fraction(imbalance_tolerance)

    def __repr__(self) -> str:
        return f"LagAssignor(imbalance_tolerance={self.imbalance_tolerance!r})"

    def assign(self, spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        # Small groups that are fresh or need no move take a plain-Python path (numpy's per-call
        # overhead is most of the work there); it returns exactly what the arrays would, or None.
        from cohort.assignors._lag_small import assign_small

        result = assign_small(spec, topics, self._factor)
        return self.assign_arrays(spec, topics) if result is None else result

    def fresh_owners(self, groups: FreshGroups) -> tuple[np.ndarray, np.ndarray]:
        """`assign`'s owners for many fresh groups at once (`_lag_many`): the greedy's rounds, run
        together; groups whose packed keys could overflow int64 are left to `assign`."""
        from cohort.assignors._lag_many import fresh_owners

        return fresh_owners(groups.member_counts, groups.topic_group, groups.partition_counts, groups.lags)

    def assign_arrays(self, spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        """The assignment computed on numpy arrays, for every group size and case."""
        from cohort.assignors._lag_greedy import greedy
        from cohort.assignors._lag_model import Model

        model = Model(spec, topics)
        if model.total and any(sub.assignment for sub in spec.members.values()):
            current, clean = model.current_owners(spec)
            if (current >= 0).any():
                owner = self._sticky(model, current)
                # Members whose partitions did not change get their current assignment back as is.
                changed = current != owner
                clean[current[changed & (current >= 0)]] = False
                clean[owner[changed]] = False
                reuse = [
                    spec.members[m].assignment if keep else None
                    for m, keep in zip(model.member_ids, clean.tolist())
                ]
                return model.to_assignment(owner, reuse)
        return model.to_assignment(greedy(model))

    def _within(self, load: int, bound: int) -> bool:
        return load <= self._factor * bound

    def _sticky(self, model: Model, current: np.ndarray) -> np.ndarray:
        from cohort.assignors._lag_fewest import fewest
        from cohort.assignors._lag_greedy import greedy
        from cohort.assignors._lag_model import assigned_lag
        from cohort.assignors._lag_sticky import balance_counts, improve, moves

        m_count = len(model.member_ids)
        own = current.copy()
        load = assigned_lag(own, model.lag, m_count)
        balance_counts(model, own, load)
        heaviest = int(load.max())
        if self._within(heaviest, _lower_bound(model)):
            return own
        fresh = greedy(model)
        bar = int(assigned_lag(fresh, model.lag, m_count).max())
        if self._within(heaviest, bar):
            return own
        allowed = moves(current, fresh)
        room = allowed - moves(current, own)  # moves from `own` that still beat the fresh assignment
        if room <= 0:
            return fresh
        limit = math.floor(self._factor * bar)
        steps = min(MAX_STEPS, room)
        greedy_own, greedy_load = own.copy(), load.copy()
        above = int((load > limit).sum())  # each step brings at most one member under the limit
        if not (above <= steps and improve(model, greedy_own, greedy_load, limit, steps)):
            greedy_own = None
        below = room + 1 if greedy_own is None else min(room + 1, moves(own, greedy_own))
        found = fewest(model, own, load, limit, below, SEARCH_BUDGET)
        # Fewest moves from `current` wins (the search's first on a tie), never more than the fresh
        # assignment's: the two can differ when the count balancing placed new or orphaned
        # partitions, which `moves` does not count.
        best, fewest_moves = fresh, allowed + 1
        for candidate in (found, greedy_own):
            if candidate is not None:
                n = moves(current, candidate)
                if n < fewest_moves:
                    best, fewest_moves = candidate, n
        return best


def _lower_bound(model: Model) -> int:
    """A load some member must carry in any assignment: a lower bound of the fresh assignment's peak."""
    import numpy as np

    lag = model.lag
    bound = int(lag.max())
    totals = np.add.reduceat(lag, model.offsets[:-1])
    ks = np.array([len(s) for s in model.subscribers], dtype=np.int64)
    bound = max(bound, int((-(-totals // ks)).max()))
    return max(bound, -(-int(lag.sum()) // model.active))

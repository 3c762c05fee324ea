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
and if the result is within tolerance returns it. Otherwise it moves or swaps partitions from the
heaviest member until within tolerance (at most `MAX_STEPS` steps, and never more moves than the fresh
assignment would need). If that does not get there, it returns the fresh assignment. Hence:

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

import numpy as np

from cohort.assignors._lag_greedy import greedy
from cohort.assignors._lag_model import Model, assigned_lag
from cohort.assignors._lag_sticky import balance_counts, improve, moves
from cohort.assignors.api import GroupAssignment, GroupSpec, SubscribedTopicDescriber

MAX_STEPS = 512  # bound on improving moves/swaps per assignment (each costs O(members) at most)


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
        limit = math.floor(self._factor * bar)
        budget = min(MAX_STEPS, allowed - moves(current, own))
        above = int((load > limit).sum())  # each step brings at most one member under the limit
        if 0 < above <= budget and improve(model, own, load, limit, budget) and moves(current, own) <= allowed:
            return own
        return fresh


def _lower_bound(model: Model) -> int:
    """A load some member must carry in any assignment: a lower bound of the fresh assignment's peak."""
    lag = model.lag
    bound = int(lag.max())
    totals = np.add.reduceat(lag, model.offsets[:-1])
    ks = np.array([len(s) for s in model.subscribers], dtype=np.int64)
    bound = max(bound, int((-(-totals // ks)).max()))
    return max(bound, -(-int(lag.sum()) // model.active))

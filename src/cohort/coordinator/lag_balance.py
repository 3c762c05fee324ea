"""Lag-driven rebalancing: the coordinator re-balances a `lag` group's backlog by itself.

A client-side assignor only acts when something else triggers a rebalance. Here a keyed timer
`lag-evaluation-{group}` fires every `group.lag.rebalance.interval.ms` for each group whose chosen
assignor is `lag`, and the evaluation below decides whether to move partitions. Rules, in order:

1. The group is gone, empty or no longer uses `lag`: the timer is not re-armed (it is armed again
   when the group next computes a target assignment with `lag`, or its config selects it).
2. Not Stable (members still reconciling): no decision, and the streak of imbalanced evaluations
   restarts — a decision needs a settled assignment.
3. Imbalance = the heaviest member's assigned lag / the mean member lag (over the group's target
   assignment, which is everyone's current assignment when Stable). At or below
   `group.lag.imbalance.ratio` the streak restarts; above it, the streak grows.
4. The streak reaches `group.lag.imbalance.evaluations` and the last lag decision is at least
   `group.lag.rebalance.min.interval.ms` ago: the lag assignor is run on the current target
   with the current lags. If it moves nothing (already within its tolerance of the best split, or
   no better split exists), nothing is written. Otherwise the group epoch is bumped (a
   ConsumerGroupMetadata record, as any bump) and the new target is written at once (the same
   records a heartbeat would write), so members reconcile through the incremental protocol.
   Either way the streak restarts and the decision time is remembered.

Hysteresis comes from three places: the trigger needs several consecutive imbalanced readings;
decisions are at least the minimum interval apart; and the sticky lag assignor only moves when the
assignment is worse than (1 + tolerance) x its fresh greedy peak, and then only until it is back
within that bound — so with unchanged lags a second evaluation finds nothing to move. The trigger
ratio (default 1.5, relative to the mean) must stay above 1 + tolerance (default 1.1, relative to
the greedy peak, which is never below the mean): a rebalance brings the heaviest member to at most
1.1 x the best achievable peak, well inside the trigger band, so lag must drift by a real margin
before the next one. Streak and decision time are soft state, rebuilt empty on load.
"""

from __future__ import annotations

from dataclasses import dataclass

from cohort.coordinator.consumer_group import ConsumerGroup, GroupState
from cohort.coordinator.context import GroupContext
from cohort.coordinator.lag import imbalance, member_loads
from cohort.coordinator.records import ConsumerGroupMetadataKey, ConsumerGroupMetadataValue
from cohort.coordinator.target import GroupTopicDescriber, assignor_name, compute_target, write_target


LAG_ASSIGNOR = "lag"
LAG_EVALUATION_PREFIX = "lag-evaluation-"


def evaluation_key(group_id: str) -> str:
    return LAG_EVALUATION_PREFIX + group_id


@dataclass(slots=True)
class LagBalanceState:
    """Soft state of one group's evaluations."""

    streak: int = 0  # consecutive Stable evaluations above the ratio
    last_decision: int | None = None  # when the assignor was last consulted (moved or not)
    last_imbalance: float = 1.0
    rebalances: int = 0  # lag-driven epoch bumps since load


def uses_lag(ctx: GroupContext, group: ConsumerGroup) -> bool:
    """Whether the group has members and its chosen assignor is `lag` (so it is evaluated)."""
    return bool(group.members) and assignor_name(ctx, group) == LAG_ASSIGNOR


def schedule(ctx: GroupContext, group_id: str, now: int) -> None:
    """The group's next evaluation one interval from `now` (replacing a pending one)."""
    ctx.timers.schedule(evaluation_key(group_id), now + ctx.config.lag_rebalance_interval_ms, ("lag", group_id))


def arm(ctx: GroupContext, group_id: str, now: int) -> None:
    """Schedule the group's first evaluation unless one is pending."""
    if evaluation_key(group_id) not in ctx.timers:
        schedule(ctx, group_id, now)


def evaluate(ctx: GroupContext, group_id: str, now: int) -> None:
    """One evaluation (the timer's expiry); records go through `ctx.append` as any write."""
    group = ctx.state.groups.get(group_id)
    if group is None or not uses_lag(ctx, group):
        ctx.lag_balance.pop(group_id, None)
        return
    config = ctx.config
    schedule(ctx, group_id, now)
    state = ctx.lag_balance.get(group_id)
    if state is None:
        state = ctx.lag_balance[group_id] = LagBalanceState()
    if group.state() is not GroupState.STABLE:
        state.streak = 0
        return
    describer = GroupTopicDescriber(ctx.image, group_id, ctx.lag_provider)
    by_name = ctx.image.by_name
    topic_ids = [by_name[n].topic_id for n in group.subscribed_topic_names() if n in by_name]
    lags = {t: describer.partition_lags(t) for t in topic_ids}
    loads = member_loads({m: group.target_assignment.get(m, {}) for m in group.members}, lags)
    state.last_imbalance = ratio = imbalance(loads.values())
    if ratio <= config.lag_imbalance_ratio:
        state.streak = 0
        return
    state.streak += 1
    if state.streak < config.lag_imbalance_evaluations:
        return
    if state.last_decision is not None and now - state.last_decision < config.lag_rebalance_min_interval_ms:
        return
    state.streak = 0
    state.last_decision = now
    if _rebalance(ctx, group, describer):
        state.rebalances += 1


def _rebalance(ctx: GroupContext, group: ConsumerGroup, describer: GroupTopicDescriber) -> bool:
    """Run the lag assignor on the current target; bump the epoch and write the target if it moves anything."""
    gid, epoch = group.group_id, group.group_epoch + 1
    changed = compute_target(group, ctx.image, ctx.assignor(LAG_ASSIGNOR), epoch, describer=describer)
    if not changed:
        return False
    metadata_hash = ctx.image.subscription_hash(group.subscribed_topic_names())
    ctx.append(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch, metadata_hash))
    write_target(ctx, gid, epoch, changed)
    return True

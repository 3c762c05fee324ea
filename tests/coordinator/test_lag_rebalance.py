"""Lag-driven rebalancing (lag_balance.py) on a fake clock: timers, records, hysteresis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator import AlterGroupConfigRequest, CoordinatorConfig, GroupCoordinatorShard
from cohort.coordinator.lag import TopicOffsets, imbalance, member_loads
from cohort.coordinator.lag_balance import evaluation_key
from cohort.coordinator.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

from cg_helpers import FOO, hb, image, join, run

INTERVAL, MIN_INTERVAL = 1_000, 5_000


def lag_config(**kw) -> CoordinatorConfig:
    kw.setdefault("lag_rebalance_interval_ms", INTERVAL)
    kw.setdefault("lag_rebalance_min_interval_ms", MIN_INTERVAL)
    return CoordinatorConfig(consumer_assignors=("lag", "uniform", "range"), **kw)


def stable_group(members=("a", "b", "c"), partitions=12, config=None, now=0) -> GroupCoordinatorShard:
    """A Stable group on foo with no lag known at join time (so the split is by count only);
    lag is then the whole log (`earliest`, nothing committed)."""
    shard = GroupCoordinatorShard(config or lag_config(), image=image(foo=partitions))
    shard.on_loaded(now)
    run(shard, AlterGroupConfigRequest("g", {"consumer.offset.reset": "earliest"}), now)
    for m in members:
        run(shard, join("g", m), now)
    settle(shard, now)
    return shard


def settle(shard: GroupCoordinatorShard, now: int) -> None:
    """Heartbeat every member (acknowledging what it owns) until the group is Stable."""
    for _ in range(6):
        group = shard.group("g")
        if group.state().value == "Stable":
            return
        for m in sorted(group.members):
            member = shard.group("g").members[m]
            run(shard, hb("g", m, member.member_epoch, owned=dict(member.assigned_partitions)), now)
    assert shard.group("g").state().value == "Stable"


def set_lags(shard: GroupCoordinatorShard, lags) -> None:
    shard.update_log_offsets({FOO: TopicOffsets((0,) * len(lags), tuple(lags))})


def owners(shard: GroupCoordinatorShard) -> dict[int, str]:
    return {p: m for m, a in shard.group("g").target_assignment.items() for p in a.get(FOO, ())}


def loads(shard: GroupCoordinatorShard, lags) -> dict[str, int]:
    group = shard.group("g")
    return member_loads({m: group.target_assignment.get(m, {}) for m in group.members}, {FOO: list(lags)})


def expire(shard: GroupCoordinatorShard, now: int):
    result = shard.expire(now)
    shard.commit(result.end_offset)
    return result


def skew_on(shard: GroupCoordinatorShard, heavy: int = 1000, light: int = 10) -> list[int]:
    """Lags that put all the backlog on member a's partitions."""
    mine = set(shard.group("g").target_assignment["a"][FOO])
    return [heavy if p in mine else light for p in range(12)]


def test_imbalance_on_consecutive_evaluations_bumps_the_epoch_and_writes_the_target():
    shard = stable_group()
    assert shard.next_deadline() is not None and evaluation_key("g") in shard.timers
    epoch = shard.group("g").group_epoch
    lags = skew_on(shard)
    set_lags(shard, lags)
    before = owners(shard)

    first = expire(shard, INTERVAL)
    assert first.response == ["lag-evaluation-g"] and first.records == []  # one imbalanced reading is not enough
    second = expire(shard, 2 * INTERVAL)
    assert second.response == ["lag-evaluation-g"]
    keys = [type(r.key) for r in second.records]
    assert keys[0] is ConsumerGroupMetadataKey and keys[-1] is ConsumerGroupTargetAssignmentMetadataKey
    assert set(keys[1:-1]) == {ConsumerGroupTargetAssignmentMemberKey}
    group = shard.group("g")
    assert second.records[0].value == ConsumerGroupMetadataValue(epoch + 1, group.metadata_hash)
    assert second.records[-1].value == ConsumerGroupTargetAssignmentMetadataValue(epoch + 1)
    assert (group.group_epoch, group.assignment_epoch) == (epoch + 1, epoch + 1)

    after = owners(shard)
    moved = sum(before[p] != after[p] for p in range(12))
    heavy = [p for p, lag in enumerate(lags) if lag == 1000]
    assert len({after[p] for p in heavy}) == 3  # the 4 heavy partitions now span all three members
    assert moved == 4  # two heavy partitions swapped against two light ones: the fewest that balance
    counts = sorted(len(a.get(FOO, ())) for a in group.target_assignment.values())
    assert counts == [4, 4, 4]

    # members learn it from their next heartbeat (not the fast path) and reconcile
    response = run(shard, hb("g", "a", epoch, owned=dict(group.members["a"].assigned_partitions)), 2 * INTERVAL).response
    assert response.member_epoch in (epoch, epoch + 1)
    settle(shard, 2 * INTERVAL)
    assert imbalance(loads(shard, lags).values()) < 1.5


def test_stable_lags_after_a_rebalance_cause_no_further_moves():
    shard = stable_group()
    set_lags(shard, skew_on(shard))
    bumps = 0
    for i in range(1, 30):
        result = expire(shard, i * INTERVAL)
        bumps += any(type(r.key) is ConsumerGroupMetadataKey for r in result.records)
        settle(shard, i * INTERVAL)
    assert bumps == 1 and shard.lag_balance["g"].rebalances == 1


def test_balanced_lag_moves_nothing():
    shard = stable_group()
    set_lags(shard, [100] * 12)
    for i in range(1, 10):
        assert expire(shard, i * INTERVAL).records == []
    assert shard.lag_balance["g"].last_imbalance == 1.0


def test_no_decision_while_the_group_is_not_stable():
    shard = stable_group()
    set_lags(shard, skew_on(shard))
    run(shard, join("g", "d"), 0)  # the group now reconciles towards four members
    assert shard.group("g").state().value != "Stable"
    for i in range(1, 5):
        assert expire(shard, i * INTERVAL).records == []
    assert shard.lag_balance["g"].streak == 0


def test_decisions_are_at_least_the_minimum_interval_apart():
    shard = stable_group()
    lags = skew_on(shard)
    set_lags(shard, lags)
    times = []
    for i in range(1, 40):
        result = expire(shard, i * INTERVAL)
        if result.records:
            times.append(i * INTERVAL)
        settle(shard, i * INTERVAL)
        # drift: the backlog keeps piling onto whoever holds partition 0's neighbours
        mine = set(shard.group("g").target_assignment[owners(shard)[0]][FOO])
        set_lags(shard, [1000 if p in mine else 10 for p in range(12)])
    assert len(times) >= 2
    assert all(b - a >= MIN_INTERVAL for a, b in zip(times, times[1:]))


def test_an_unbalanceable_group_is_not_bumped():
    # one partition holds all the lag: no split does better, so the assignor moves nothing
    shard = stable_group()
    set_lags(shard, [1000] + [0] * 11)
    for i in range(1, 20):
        assert expire(shard, i * INTERVAL).records == []
    assert shard.lag_balance["g"].last_imbalance == 3.0 and shard.lag_balance["g"].rebalances == 0


def test_timer_stops_when_the_group_leaves_lag():
    shard = stable_group()
    for m in sorted(shard.group("g").members):
        member = shard.group("g").members[m]
        run(shard, hb("g", m, member.member_epoch, server_assignor="range"), 0)
    expire(shard, INTERVAL)
    assert evaluation_key("g") not in shard.timers and "g" not in shard.lag_balance


def test_evaluations_are_rearmed_on_load():
    live = GroupCoordinatorShard(lag_config(), image=image(foo=12))
    live.on_loaded(0)
    log = [r for m in ("a", "b", "c") for r in run(live, join("g", m), 0).records]
    loaded = GroupCoordinatorShard(lag_config(), image=image(foo=12))
    for record in log:
        loaded.replay(record)
    assert evaluation_key("g") not in loaded.timers
    loaded.on_loaded(100)
    assert loaded.timers.deadline(evaluation_key("g")) == 100 + INTERVAL


def test_operator_switching_a_group_to_lag_reassigns_and_starts_evaluations():
    config = CoordinatorConfig(consumer_assignors=("range", "lag"), lag_rebalance_interval_ms=INTERVAL)
    shard = stable_group(config=config)
    epoch = shard.group("g").group_epoch
    assert evaluation_key("g") not in shard.timers
    result = run(shard, AlterGroupConfigRequest("g", {"consumer.assignor": "lag"}), 10)
    assert [type(r.key).__name__ for r in result.records] == ["GroupConfigurationKey", "ConsumerGroupMetadataKey"]
    assert shard.group("g").group_epoch == epoch + 1
    settle(shard, 10)
    assert evaluation_key("g") in shard.timers


@settings(max_examples=60, deadline=None)
@given(
    members=st.integers(2, 4),
    partitions=st.integers(4, 12),
    data=st.data(),
)
def test_hysteresis_with_stable_lags_at_most_one_lag_driven_bump(members, partitions, data):
    names = [chr(ord("a") + i) for i in range(members)]
    shard = stable_group(members=names, partitions=partitions)
    lags = data.draw(st.lists(st.sampled_from([0, 1, 10, 100, 1000, 5000]), min_size=partitions, max_size=partitions))
    set_lags(shard, lags)
    before = owners(shard)
    bumps, moved = 0, 0
    for i in range(1, 25):
        result = expire(shard, i * INTERVAL)
        if result.records:
            bumps += 1
            after = owners(shard)
            moved = sum(before[p] != after[p] for p in range(partitions))
            # never more moves than reassigning from scratch would cost, and something did move
            fresh = _fresh_owners(names, partitions, lags)
            assert 0 < moved <= sum(before[p] != fresh[p] for p in range(partitions))
        settle(shard, i * INTERVAL)
    assert bumps <= 1
    counts = [len(a.get(FOO, ())) for a in shard.group("g").target_assignment.values()]
    assert max(counts) - min(counts) <= 1


def _fresh_owners(names, partitions, lags) -> dict[int, str]:
    from cohort.assignors import get
    from cohort.assignors.api import GroupSpec, MemberSubscription, TopicDescriber, TopicMetadata

    spec = GroupSpec.of({m: MemberSubscription(frozenset({FOO})) for m in names})
    result = get("lag").assign(spec, TopicDescriber({FOO: TopicMetadata(partitions, (), tuple(lags))}))
    return {p: m for m, a in result.items() for p in a.get(FOO, ())}


def test_timers_report_due_lag_evaluations():
    shard = stable_group()
    assert not shard.timers.any_due(INTERVAL - 1, "lag-evaluation-")
    assert shard.timers.any_due(INTERVAL, "lag-evaluation-")
    assert not shard.timers.any_due(INTERVAL, "no-such-prefix-")

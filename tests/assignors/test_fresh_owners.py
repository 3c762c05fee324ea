"""Assignors' answers for many fresh groups at once (`fresh_owners`, over `FreshGroups` columns).

For every group an assignor takes, the owners must be exactly those of its `assign` on that group
alone. `lag` must take every group whose packed keys fit in int64, `range` every group without
racks, `uniform` every group. The groups one leaves get owners -1 and go through `assign`.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numpy as np

from cohort.assignors.api import FreshGroups, GroupSpec, MemberSubscription, TopicDescriber, TopicMetadata
from cohort.assignors.lag import LagAssignor
from cohort.assignors.range import RangeAssignor
from cohort.assignors.uniform import UniformAssignor

INT64_MAX = (1 << 63) - 1


def random_lags(rng: random.Random, n: int) -> list[int]:
    kind = rng.choice(["small", "wide", "ties", "zero", "huge"])
    if kind == "small":
        return [rng.randint(0, 12) for _ in range(n)]
    if kind == "wide":
        return [rng.randrange(10**6) for _ in range(n)]
    if kind == "ties":
        return [rng.choice([0, 5, 5, 7]) for _ in range(n)]
    if kind == "zero":
        return [0] * n
    return [rng.choice([INT64_MAX, INT64_MAX // rng.randint(1, 100), rng.randrange(1 << 62), 0]) for _ in range(n)]


def random_group(rng: random.Random):
    """(member ids, {topic: lags}, racks) of a fresh group whose members all subscribe to all its topics."""
    size = rng.choice([1, 2, 3, 5, 8, rng.randint(1, 12), rng.randint(60, 70)])
    members = sorted({f"{rng.choice('abxyz')}{rng.randrange(10**4):04d}" for _ in range(size)})
    names = sorted(rng.sample(["orders", "t0", "t1", "zeta", "Ünï"], rng.randint(1, 3)))
    topics = {}
    for name in names:
        n = rng.choice([1, 2, 3, len(members), len(members) + 1, 10, 20, rng.randint(1, 40), 300])
        topics[name] = random_lags(rng, n)
    racks = [rng.choice(["r1", "r2", None]) for _ in members] if rng.random() < 0.3 else [None] * len(members)
    return members, topics, racks


def columns(groups) -> FreshGroups:
    member_counts, topic_group, counts, lags, racked = [], [], [], [], []
    for g, (members, topics, racks) in enumerate(groups):
        member_counts.append(len(members))
        racked.append(any(r is not None for r in racks))
        for name in sorted(topics):
            topic_group.append(g)
            counts.append(len(topics[name]))
            lags += topics[name]
    return FreshGroups(member_counts, topic_group, counts, lags, racked)


def assign_owners(assignor, members, topics, racks) -> list[int]:
    """The owners `assign` gives the group alone, topics in order, partitions in order. Every
    replica is on rack r1, so `range` has something to be rack-aware about."""
    subscription = frozenset(topics)
    spec = GroupSpec.of({m: MemberSubscription(subscription, rack) for m, rack in zip(members, racks)})
    describer = TopicDescriber({t: TopicMetadata(len(lags), racks=(frozenset({"r1"}),) * len(lags), lags=tuple(lags))
                                for t, lags in topics.items()})
    result = assignor.assign(spec, describer)
    owners = []
    for name in sorted(topics):
        owner = [-1] * len(topics[name])
        for index, member in enumerate(members):
            for p in result[member].get(name, ()):
                owner[p] = index
        owners += owner
    return owners


def lag_takes(members, topics, racks) -> bool:
    total = sum(map(len, topics.values()))
    lags = [min(v, INT64_MAX // total) for name in sorted(topics) for v in topics[name]]
    return (sum(lags) + 1) * len(members) * (total + 1) <= INT64_MAX


def range_takes(members, topics, racks) -> bool:
    return all(r is None for r in racks)


def uniform_takes(members, topics, racks) -> bool:
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_owners_are_those_of_assign_group_by_group(rng):
    groups = [random_group(rng) for _ in range(rng.randint(1, 12))]
    for assignor, takes in ((LagAssignor(rng.choice([0.1, 0, 2])), lag_takes), (RangeAssignor(), range_takes),
                            (UniformAssignor(), uniform_takes)):
        owner, done = assignor.fresh_owners(columns(groups))
        at = 0
        for g, group in enumerate(groups):
            total = sum(map(len, group[1].values()))
            mine = owner[at : at + total].tolist()
            at += total
            assert bool(done[g]) == takes(*group)
            assert mine == (assign_owners(assignor, *group) if done[g] else [-1] * total), assignor.name
        assert at == len(owner)


def test_kafka_5337_worked_example_among_other_groups():
    groups = [
        (["a", "b", "c"], {"t": [5, 5, 5, 5]}, [None] * 3),
        (["C0", "C1"], {"t0": [100_000, 50_000, 60_000]}, [None] * 2),
        (["x"], {"u": [1, 2], "v": [3]}, [None]),
    ]
    owner, done = LagAssignor().fresh_owners(columns(groups))
    assert done.tolist() == [True, True, True]
    # C0 takes partition 0 (100,000), C1 partitions 1 and 2 (110,000), as in KAFKA-5337.
    assert owner.tolist() == [0, 1, 2, 0] + [0, 1, 1] + [0, 0, 0]
    owner, done = RangeAssignor().fresh_owners(columns(groups))
    assert owner.tolist() == [0, 0, 1, 2] + [0, 0, 1] + [0, 0, 0]
    owner, done = UniformAssignor().fresh_owners(columns(groups))  # the extra partitions to the last
    assert owner.tolist() == [0, 1, 2, 2] + [0, 1, 1] + [0, 0, 0]


def test_groups_left_to_assign():
    groups = [
        (["a", "b"], {"t": [1, 2, 3]}, [None, None]),
        (["a", "b"], {"t": [INT64_MAX, INT64_MAX]}, [None, None]),  # lag's keys would overflow
        (["c", "d"], {"t": [7, 1]}, ["r1", None]),  # range may be rack-aware
    ]
    owner, done = LagAssignor().fresh_owners(columns(groups))
    assert done.tolist() == [True, False, True]
    assert owner.tolist() == [1, 1, 0] + [-1, -1] + [0, 1]
    owner, done = RangeAssignor().fresh_owners(columns(groups))
    assert done.tolist() == [True, True, False]
    assert owner.tolist() == [0, 0, 1] + [0, 1] + [-1, -1]


def test_no_groups():
    for assignor in (LagAssignor(), RangeAssignor(), UniformAssignor()):
        owner, done = assignor.fresh_owners(FreshGroups([], [], [], [], []))
        assert len(owner) == 0 and len(done) == 0


def test_owners_of_a_large_batch_match_assign():
    rng = random.Random(7)
    groups = [(sorted(f"m{i:02d}" for i in range(rng.randint(1, 9))),
               {t: [rng.randrange(10**5) for _ in range(rng.choice([10, 20]))] for t in rng.sample(["a", "b"], rng.randint(1, 2))},
               [None] * 9)
              for _ in range(2000)]
    groups = [(m, t, r[: len(m)]) for m, t, r in groups]
    for assignor in (LagAssignor(), RangeAssignor(), UniformAssignor()):
        owner, done = assignor.fresh_owners(columns(groups))
        assert done.all()
        expected = [p for group in groups for p in assign_owners(assignor, *group)]
        assert np.array_equal(owner, expected)


def test_uniform_new_groups_beyond_its_small_path():
    # 150 members or 1,100 partitions: `assign` takes the numpy builder, with the same answer.
    rng = random.Random(11)
    groups = [(sorted(f"m{i:03d}" for i in range(150)), {"a": [0] * 40, "b": [0] * 7}, [None] * 150),
              (sorted(f"m{i:03d}" for i in range(9)), {"a": [0] * 600, "c": [0] * 500}, [None] * 9),
              (["solo"], {t: [rng.randrange(9)] * 3 for t in "xyz"}, [None])]
    owner, done = UniformAssignor().fresh_owners(columns(groups))
    assert done.all()
    assert owner.tolist() == [p for group in groups for p in assign_owners(UniformAssignor(), *group)]

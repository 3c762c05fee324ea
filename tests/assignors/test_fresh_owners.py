"""Assignors' answers for many fresh groups at once (`fresh_owners`, over `FreshGroups` columns).

For every group an assignor takes, the owners must be exactly those of its `assign` on that group
alone. `lag` must take every group whose packed keys fit in int64, `range` every group without
racks and those with racks up to 62 members and 256 partitions a topic, `uniform` every group.
The groups one leaves get owners -1 and go through `assign`.
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


RACKS = ("r1", "r2", "r3")


def random_layout(rng: random.Random, n: int) -> tuple:
    """Replica racks of a topic's n partitions: none, all alike, or varying."""
    kind = rng.choice(["none", "alike", "two of three", "any"])
    if kind == "none":
        return (frozenset(),) * n
    if kind == "alike":
        return (frozenset(rng.sample(RACKS, rng.randint(1, 3))),) * n
    if kind == "two of three":
        return tuple(frozenset({RACKS[p % 3], RACKS[(p + 1) % 3]}) for p in range(n))
    return tuple(frozenset(rng.sample(RACKS, rng.randint(0, 3))) for _ in range(n))


def random_group(rng: random.Random):
    """(member ids, {topic: lags}, racks, {topic: replica racks}) of a fresh group whose members
    all subscribe to all its topics."""
    size = rng.choice([1, 2, 3, 5, 8, rng.randint(1, 12), rng.randint(60, 70)])
    members = sorted({f"{rng.choice('abxyz')}{rng.randrange(10**4):04d}" for _ in range(size)})
    names = sorted(rng.sample(["orders", "t0", "t1", "zeta", "Ünï"], rng.randint(1, 3)))
    topics = {}
    same = rng.random() < 0.4  # co-partitioned: every topic of the group with one partition count
    counts = [1, 2, 3, len(members), len(members) + 1, 10, 20, rng.randint(1, 40), 257, 300]
    n = rng.choice(counts)
    for name in names:
        topics[name] = random_lags(rng, n if same else rng.choice(counts))
    racks = [rng.choice(["r1", "r2", "r3", None]) for _ in members] if rng.random() < 0.5 else [None] * len(members)
    layout = random_layout(rng, max(map(len, topics.values())))
    replicas = {name: layout[: len(lags)] if rng.random() < 0.5 else random_layout(rng, len(lags))
                for name, lags in topics.items()}
    return members, topics, racks, replicas


def columns(groups) -> FreshGroups:
    member_counts, topic_group, counts, lags, member_racks, partition_racks = [], [], [], [], [], []
    for g, (members, topics, racks, replicas) in enumerate(groups):
        member_counts.append(len(members))
        member_racks += [-1 if r is None else RACKS.index(r) for r in racks]
        for name in sorted(topics):
            topic_group.append(g)
            counts.append(len(topics[name]))
            lags += topics[name]
            partition_racks += [sum(1 << RACKS.index(r) for r in on) for on in replicas[name]]
    return FreshGroups(member_counts, topic_group, counts, lags, member_racks, partition_racks)


def assign_owners(assignor, members, topics, racks, replicas) -> list[int]:
    """The owners `assign` gives the group alone, topics in order, partitions in order."""
    subscription = frozenset(topics)
    spec = GroupSpec.of({m: MemberSubscription(subscription, rack) for m, rack in zip(members, racks)})
    describer = TopicDescriber({t: TopicMetadata(len(lags), racks=replicas[t], lags=tuple(lags))
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


def lag_takes(members, topics, racks, replicas) -> bool:
    total = sum(map(len, topics.values()))
    lags = [min(v, INT64_MAX // total) for name in sorted(topics) for v in topics[name]]
    return (sum(lags) + 1) * len(members) * (total + 1) <= INT64_MAX


def range_takes(members, topics, racks, replicas) -> bool:
    """Without racks always; with them, up to 62 members and 256 partitions a topic."""
    return all(r is None for r in racks) or (len(members) <= 62 and max(map(len, topics.values())) <= 256)


def uniform_takes(members, topics, racks, replicas) -> bool:
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


def plain(members, topics, racks=None, replicas=None):
    """A group in `random_group`'s shape; by default without racks."""
    racks = racks or [None] * len(members)
    replicas = replicas or {name: (frozenset(),) * len(lags) for name, lags in topics.items()}
    return members, topics, racks, replicas


def test_kafka_5337_worked_example_among_other_groups():
    groups = [
        plain(["a", "b", "c"], {"t": [5, 5, 5, 5]}),
        plain(["C0", "C1"], {"t0": [100_000, 50_000, 60_000]}),
        plain(["x"], {"u": [1, 2], "v": [3]}),
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
    on = [frozenset({"r2"}), frozenset({"r1"})]
    groups = [
        plain(["a", "b"], {"t": [1, 2, 3]}),
        plain(["a", "b"], {"t": [INT64_MAX, INT64_MAX]}),  # lag's keys would overflow
        plain(["c", "d"], {"t": [7, 1]}, ["r1", None], {"t": on}),  # c's rack hosts partition 1
        plain(["c", "d"], {"t": [0] * 257}, ["r1", None], {"t": on * 128 + on[:1]}),  # too long a walk
    ]
    owner, done = LagAssignor().fresh_owners(columns(groups))
    assert done.tolist() == [True, False, True, True]
    assert owner.tolist()[:7] == [1, 1, 0] + [-1, -1] + [0, 1]
    owner, done = RangeAssignor().fresh_owners(columns(groups))
    assert done.tolist() == [True, True, True, False]
    assert owner.tolist() == [0, 0, 1] + [0, 1] + [1, 0] + [-1] * 257
    assert owner.tolist()[5:7] == assign_owners(RangeAssignor(), *groups[2])


def test_no_groups():
    for assignor in (LagAssignor(), RangeAssignor(), UniformAssignor()):
        owner, done = assignor.fresh_owners(FreshGroups([], [], [], [], [], []))
        assert len(owner) == 0 and len(done) == 0


def test_owners_of_a_large_batch_match_assign():
    """The benchmark fleet's shapes: one topic of 20 partitions or two of 10, a third of the
    groups on racks (each member on one of three, each partition on two)."""
    rng = random.Random(7)
    groups = []
    for _ in range(2000):
        members = sorted(f"m{i:02d}" for i in range(rng.randint(1, 9)))
        names = rng.sample(["a", "b"], rng.randint(1, 2))
        topics = {t: [rng.randrange(10**5) for _ in range(20 // len(names))] for t in names}
        if rng.random() < 0.3:
            shift = rng.randrange(3)
            replicas = {t: tuple(frozenset({RACKS[(p + shift) % 3], RACKS[(p + shift + 1) % 3]})
                                 for p in range(len(lags))) for t, lags in topics.items()}
            groups.append(plain(members, topics, [rng.choice(RACKS) for _ in members], replicas))
        else:
            groups.append(plain(members, topics))
    for assignor in (LagAssignor(), RangeAssignor(), UniformAssignor()):
        owner, done = assignor.fresh_owners(columns(groups))
        assert done.all()
        expected = [p for group in groups for p in assign_owners(assignor, *group)]
        assert np.array_equal(owner, expected)


def test_uniform_new_groups_beyond_its_small_path():
    # 150 members or 1,100 partitions: `assign` takes the numpy builder, with the same answer.
    rng = random.Random(11)
    groups = [plain(sorted(f"m{i:03d}" for i in range(150)), {"a": [0] * 40, "b": [0] * 7}),
              plain(sorted(f"m{i:03d}" for i in range(9)), {"a": [0] * 600, "c": [0] * 500}),
              plain(["solo"], {t: [rng.randrange(9)] * 3 for t in "xyz"})]
    owner, done = UniformAssignor().fresh_owners(columns(groups))
    assert done.all()
    assert owner.tolist() == [p for group in groups for p in assign_owners(UniformAssignor(), *group)]

"""The `uniform` assignor: Kafka-like scenarios, the KAFKA-18688 stability rule, and properties.

Both builders are also checked against direct, partition-at-a-time transcriptions of Kafka's
algorithms (`reference_homogeneous`, `reference_heterogeneous`), which the implementation must
match exactly, including on malformed current assignments; the homogeneous numpy path and its
plain-Python small-group path are both run on every example.
"""

from __future__ import annotations

import gc
import random
import uuid
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cohort.assignors import (
    GroupSpec,
    MemberSubscription,
    SubscriptionType,
    TopicDescriber,
    TopicMetadata,
    get,
)
from cohort.assignors import _uniform_heterogeneous
from cohort.assignors._uniform_heterogeneous import MAX_ITERATION_COUNT, _LoadRanges
from cohort.assignors._uniform_homogeneous import assign_homogeneous, native
from cohort.assignors._uniform_small import (
    SMALL_MEMBERS,
    SMALL_PARTITIONS,
    assign_by_partition,
    assign_homogeneous_small,
    keep_balanced,
    keep_single_topic,
    rebalance_tiled,
)
from cohort.assignors.uniform import UniformAssignor

ASSIGNOR = UniformAssignor()


def describer(**counts: int) -> TopicDescriber:
    return TopicDescriber({t: TopicMetadata(n) for t, n in counts.items()})


def member(*topics, assignment=None) -> MemberSubscription:
    return MemberSubscription(frozenset(topics), assignment=assignment or {})


def assign(members: dict, topics: TopicDescriber) -> dict:
    return ASSIGNOR.assign(GroupSpec.of(members), topics)


def rerun(previous: dict, members: dict, topics: TopicDescriber) -> dict:
    """Assign again with `previous` as every member's current assignment."""
    return assign({m: MemberSubscription(s.subscribed_topic_ids, assignment=previous.get(m, {}))
                   for m, s in members.items()}, topics)


def test_registered_under_its_name():
    assignor = get("uniform")
    assert isinstance(assignor, UniformAssignor)
    assert assignor.name == "uniform"


def test_empty_group_gets_empty_assignment():
    assert assign({}, describer(t1=3)) == {}


# --- homogeneous -------------------------------------------------------------------------------


def test_new_group_is_dealt_in_member_then_topic_order():
    result = assign({"C": member("t1", "t2"), "A": member("t1", "t2"), "B": member("t2", "t1")},
                    describer(t1=3, t2=3))
    assert result == {"A": {"t1": (0, 1)}, "B": {"t1": (2,), "t2": (0,)}, "C": {"t2": (1, 2)}}


def test_member_joins_takes_only_the_surplus():
    topics = describer(t1=3, t2=3)
    result = assign({"A": member("t1", "t2", assignment={"t1": (0, 1, 2)}),
                     "B": member("t1", "t2", assignment={"t2": (0, 1, 2)}),
                     "C": member("t1", "t2")}, topics)
    assert result == {"A": {"t1": (0, 1)}, "B": {"t2": (0, 1)}, "C": {"t1": (2,), "t2": (2,)}}


def test_member_leaves_its_partitions_go_to_those_under_quota():
    result = assign({"A": member("t1", "t2", assignment={"t1": (0, 1)}),
                     "B": member("t1", "t2", assignment={"t1": (2,), "t2": (0,)})},
                    describer(t1=3, t2=3))
    assert result == {"A": {"t1": (0, 1), "t2": (1,)}, "B": {"t1": (2,), "t2": (0, 2)}}


def test_subscription_change_drops_unsubscribed_topics():
    result = assign({"A": member("t2", "t3", assignment={"t1": (0, 1, 2)}),
                     "B": member("t2", "t3", assignment={"t2": (0, 1, 2)})},
                    describer(t1=3, t2=3, t3=1))
    # B keeps two of its three; the never-owned t3-0 is dealt first, then B's revoked t2-2.
    assert result == {"A": {"t2": (2,), "t3": (0,)}, "B": {"t2": (0, 1)}}


def test_stability_rule_keeps_a_balanced_assignment_whoever_holds_the_extra():
    # 7 partitions over 3 members: before KAFKA-18688 the extra went to the first member, which
    # moved a partition from C to A although the assignment was already balanced.
    current = {"A": {"t1": (0, 1)}, "B": {"t1": (2, 3)}, "C": {"t1": (4, 5, 6)}}
    members = {m: member("t1", assignment=a) for m, a in current.items()}
    result = assign(members, describer(t1=7))
    assert result == current
    assert all(result[m] is current[m] for m in current)


def test_stability_rule_forces_the_extra_when_no_member_is_left_to_take_it():
    # A and B hand the extra slot back; C is the last member, so it must take it.
    current = {"A": {"t1": (0, 1)}, "B": {"t1": (2, 3)}, "C": {"t1": (4, 5)}}
    result = assign({m: member("t1", assignment=a) for m, a in current.items()}, describer(t1=7))
    assert result == {"A": {"t1": (0, 1)}, "B": {"t1": (2, 3)}, "C": {"t1": (4, 5, 6)}}
    assert result["A"] is current["A"] and result["B"] is current["B"]


def test_new_group_gives_the_extra_partitions_to_the_last_members():
    # Nobody holds anything, so every member hands the extra slot back until the members left
    # are exactly as many as the extra slots (the stability rule's forced tail).
    result = assign({m: member("t1") for m in "ABC"}, describer(t1=5))
    assert result == {"A": {"t1": (0,)}, "B": {"t1": (1, 2)}, "C": {"t1": (3, 4)}}


def test_more_members_than_partitions_leaves_some_empty():
    result = assign({m: member("t1") for m in "ABCD"}, describer(t1=2))
    assert result == {"A": {}, "B": {}, "C": {"t1": (0,)}, "D": {"t1": (1,)}}


def test_unknown_topics_are_ignored_and_their_current_entries_dropped():
    result = assign({"A": member("t1", "gone", assignment={"gone": (0,), "t1": (0,)}),
                     "B": member("t1", "gone")}, describer(t1=2))
    assert result == {"A": {"t1": (0,)}, "B": {"t1": (1,)}}


def test_no_known_topic_gives_every_member_an_empty_assignment():
    result = assign({"A": member("gone", assignment={"gone": (0,)}), "B": member()}, describer(t1=2))
    assert result == {"A": {}, "B": {}}


def test_malformed_current_assignment_is_cleaned():
    # Out-of-range and negative partitions are dropped, a partition claimed twice stays with the
    # first member in member order, non-tuples and unsorted tuples are normalised.
    result = assign({"A": member("t1", assignment={"t1": (5, 0, -1, 9)}),
                     "B": member("t1", assignment={"t1": [0, 2]}),
                     "C": member("t1", assignment={"t1": ()})},
                    describer(t1=6))
    assert result == {"A": {"t1": (0, 5)}, "B": {"t1": (1, 2)}, "C": {"t1": (3, 4)}}
    assert all(type(p) is tuple for a in result.values() for p in a.values())


def test_uuid_topic_ids_sort_by_value_and_match_equal_copies():
    ids = sorted(uuid.UUID(int=random.Random(7).getrandbits(128) >> s) for s in (0, 8, 16))
    topics = TopicDescriber({t: TopicMetadata(2) for t in ids})
    subs = frozenset(ids)
    first = ASSIGNOR.assign(GroupSpec.of({"A": MemberSubscription(subs), "B": MemberSubscription(subs)}), topics)
    assert first == {"A": {ids[0]: (0, 1), ids[1]: (0,)}, "B": {ids[1]: (1,), ids[2]: (0, 1)}}
    # Equal but distinct UUID objects in the current assignment are recognised.
    copies = {m: {uuid.UUID(str(t)): p for t, p in a.items()} for m, a in first.items()}
    again = ASSIGNOR.assign(GroupSpec.of({m: MemberSubscription(subs, assignment=a) for m, a in copies.items()}),
                            topics)
    assert again == first


def test_unchanged_members_get_their_current_mapping_back():
    topics = describer(t1=30, t2=7)
    members = {f"m{i}": member("t1", "t2") for i in range(5)}
    first = assign(members, topics)
    members["m9"] = member("t1", "t2")
    second = rerun(first, members, topics)
    moved = {m for m in first if second[m] != first[m]}
    assert moved and len(moved) < len(first)
    assert all(second[m] is first[m] for m in first if m not in moved)


# --- heterogeneous -----------------------------------------------------------------------------


def test_heterogeneous_overlapping_subscriptions():
    result = assign({"A": member("t1"), "B": member("t1", "t2"), "C": member("t2")}, describer(t1=3, t2=3))
    assert result == {"A": {"t1": (0, 2)}, "B": {"t1": (1,), "t2": (2,)}, "C": {"t2": (0, 1)}}


def test_heterogeneous_topics_with_more_partitions_per_subscriber_go_first():
    # t2 has 4 partitions for one subscriber, so it is placed before t1 (3 for two); B then
    # gets most of t1.
    result = assign({"A": member("t1", "t2"), "B": member("t1")}, describer(t1=3, t2=4))
    assert result == {"A": {"t2": (0, 1, 2, 3)}, "B": {"t1": (0, 1, 2)}}


def test_heterogeneous_member_without_subscription_gets_nothing():
    result = assign({"A": member("t1"), "B": member()}, describer(t1=2))
    assert result == {"A": {"t1": (0, 1)}, "B": {}}


def test_heterogeneous_member_joins_and_balancing_moves_highest_partitions():
    topics = describer(t1=6, t2=2)
    b_current = {"t2": (0, 1)}
    result = assign({"A": member("t1", assignment={"t1": (0, 1, 2, 3, 4, 5)}),
                     "B": member("t1", "t2", assignment=b_current),
                     "C": member("t1")}, topics)
    # Loads start A=6, B=2, C=0. C, the least loaded, takes A's highest partitions one at a
    # time; once A (3) and the least-loaded range (B and C at 2) differ by one, t1 is balanced.
    assert result == {"A": {"t1": (0, 1, 2)}, "B": {"t2": (0, 1)}, "C": {"t1": (3, 4, 5)}}
    assert result["B"] is b_current


def test_heterogeneous_subscription_change_revokes_and_rebalances():
    topics = describer(t1=4, t2=4)
    first = assign({"A": member("t1", "t2"), "B": member("t1")}, topics)
    assert first == {"A": {"t2": (0, 1, 2, 3)}, "B": {"t1": (0, 1, 2, 3)}}
    second = assign({"A": member("t2", assignment=first["A"]), "B": member("t1", "t2", assignment=first["B"])},
                    topics)
    # Both still subscribe to what they hold: nothing moves and the very same mappings come back.
    assert second == first
    assert second["A"] is first["A"] and second["B"] is first["B"]
    third = assign({"A": member("t1", assignment=first["A"]), "B": member("t2", assignment=first["B"])}, topics)
    assert third == {"A": {"t1": (0, 1, 2, 3)}, "B": {"t2": (0, 1, 2, 3)}}


def test_heterogeneous_disjoint_buckets_are_each_perfectly_balanced():
    topics = describer(**{f"t{i}": 7 for i in range(6)})
    members = {f"m{i:02d}": member(*(f"t{j}" for j in ((0, 1, 2) if i < 4 else (3, 4, 5)))) for i in range(10)}
    result = assign(members, topics)
    loads = {m: sum(map(len, a.values())) for m, a in result.items()}
    assert sorted(loads[m] for m in list(members)[:4]) == [5, 5, 5, 6]
    assert sorted(loads[m] for m in list(members)[4:]) == [3, 3, 3, 4, 4, 4]


# --- properties --------------------------------------------------------------------------------

TOPIC_NAMES = ["t0", "t1", "t2", "t3", "t4"]
SUBSCRIBABLE = TOPIC_NAMES + ["unknown"]


@st.composite
def groups(draw, homogeneous: bool):
    counts = draw(st.dictionaries(st.sampled_from(TOPIC_NAMES), st.integers(0, 12), max_size=5))
    member_ids = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=7, unique=True))
    topic_sets = st.frozensets(st.sampled_from(SUBSCRIBABLE), max_size=4)
    shared = draw(topic_sets)
    partitions = st.lists(st.integers(-1, 13), max_size=6)
    members = {}
    for m in member_ids:
        subscription = shared if homogeneous else draw(topic_sets)
        current = draw(st.dictionaries(st.sampled_from(SUBSCRIBABLE), partitions, max_size=3))
        shape = draw(st.sampled_from(["canonical", "raw", "list"]))
        if shape == "canonical":
            current = {t: tuple(sorted(set(p))) for t, p in current.items() if p}
        elif shape == "raw":
            current = {t: tuple(p) for t, p in current.items()}
        members[m] = MemberSubscription(subscription, assignment=current)
    return members, TopicDescriber({t: TopicMetadata(n) for t, n in counts.items()})


def check_contract(members: dict, topics: TopicDescriber, result: dict) -> None:
    assert set(result) == set(members)
    owners: dict = {}
    for m, assignment in result.items():
        for t, parts in assignment.items():
            assert t in members[m].subscribed_topic_ids
            assert type(parts) is tuple and parts and list(parts) == sorted(set(parts))
            assert 0 <= parts[0] and parts[-1] < topics.num_partitions(t)
            for p in parts:
                assert (t, p) not in owners, f"{t}-{p} owned twice"
                owners[(t, p)] = m
    subscribed = set().union(*(s.subscribed_topic_ids for s in members.values()))
    expected = {(t, p) for t in subscribed for p in range(max(topics.num_partitions(t), 0))}
    assert set(owners) == expected


def loads(result: dict) -> dict:
    return {m: sum(map(len, a.values())) for m, a in result.items()}


def permuted(members: dict, rng: random.Random) -> dict:
    order = list(members)
    rng.shuffle(order)
    out = {}
    for m in order:
        s = members[m]
        items = list(s.assignment.items())
        rng.shuffle(items)
        out[m] = MemberSubscription(frozenset(sorted(s.subscribed_topic_ids, key=lambda _: rng.random())),
                                    assignment=dict(items))
    return out


PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(groups(homogeneous=True), st.randoms(use_true_random=False))
def test_homogeneous_properties(group, rng):
    members, topics = group
    spec = GroupSpec.of(members)
    assert spec.subscription_type is SubscriptionType.HOMOGENEOUS
    result = ASSIGNOR.assign(spec, topics)
    check_contract(members, topics, result)
    sizes = loads(result).values()
    assert max(sizes) - min(sizes) <= 1
    assert result == reference_homogeneous(members, topics)
    assert assign_homogeneous(spec, topics, vectorised=True) == result
    assert assign_homogeneous(spec, topics, vectorised=False) == result
    assert ASSIGNOR.assign(GroupSpec.of(permuted(members, rng)), topics) == result
    again = rerun(result, members, topics)
    assert again == result
    assert all(again[m] is result[m] for m in result)


@PROPERTY_SETTINGS
@given(groups(homogeneous=False), st.randoms(use_true_random=False))
def test_heterogeneous_properties(group, rng):
    members, topics = group
    spec = GroupSpec(members, SubscriptionType.HETEROGENEOUS)
    result = ASSIGNOR.assign(spec, topics)
    check_contract(members, topics, result)
    assert result == reference_heterogeneous(members, topics)
    load = loads(result)
    # Balanced per topic: no partition of a topic can move to another of its subscribers and
    # narrow the gap (what the balancing passes guarantee once they converge).
    for t in {t for s in members.values() for t in s.subscribed_topic_ids}:
        subscribers = [m for m, s in members.items() if t in s.subscribed_topic_ids]
        holders = [m for m in subscribers if t in result[m]]
        if len(subscribers) >= 2 and holders:
            assert max(load[m] for m in holders) - min(load[m] for m in subscribers) <= 1
    with python_loops():
        assert_same_result(ASSIGNOR.assign(spec, topics), result, [members[m].assignment for m in sorted(members)])
    shuffled = permuted(members, rng)
    assert ASSIGNOR.assign(GroupSpec(shuffled, SubscriptionType.HETEROGENEOUS), topics) == result
    again = ASSIGNOR.assign(GroupSpec({m: MemberSubscription(s.subscribed_topic_ids, assignment=result[m])
                                       for m, s in members.items()}, SubscriptionType.HETEROGENEOUS), topics)
    assert again == result
    assert all(again[m] is result[m] for m in result)


class python_loops:
    """The heterogeneous builder without its C loops (as where the extension is not built)."""

    def __enter__(self):
        self.saved, _uniform_heterogeneous.native = _uniform_heterogeneous.native, None

    def __exit__(self, *exc):
        _uniform_heterogeneous.native = self.saved


def test_the_heterogeneous_c_loops_leave_odd_members_to_python_and_match_it():
    """Members whose current assignment the C loop does not read (a non-dict mapping, a list of
    partitions, a bool, an int too big for C) are taken over by the Python loop in the middle of
    the C one; the result is the Python builder's, reused dicts included."""
    topics = describer(a=6, b=4, c=3)
    members = {
        "m0": member("a", "b", assignment={"a": (0, 1), "b": (0,)}),
        "m1": member("a", "c", assignment=MappingProxyType({"a": (2,), "c": (0, 1)})),
        "m2": member("b", "c", assignment={"b": [3, 1], "c": (2,)}),
        "m3": member("a", "b", assignment={"a": (True, 3)}),
        "m4": member("a", "c", assignment={"a": (4, 2 ** 70), "c": (1,)}),
        "m5": member("b", "c", assignment={"b": (1, 2)}),
        "m6": member("a", assignment={"a": (5, 5), "zz": (0,)}),
        "m7": member("a", "b", "c"),
    }
    spec = GroupSpec(members, SubscriptionType.HETEROGENEOUS)
    got = ASSIGNOR.assign(spec, topics)
    with python_loops():
        expected = ASSIGNOR.assign(spec, topics)
    assert got == expected == reference_heterogeneous(members, topics)
    assert [m for m in got if got[m] is members[m].assignment] == [m for m in expected
                                                                  if expected[m] is members[m].assignment]
    check_contract(members, topics, got)


def test_the_heterogeneous_c_loops_refuse_what_the_builder_never_passes():
    assert native.hetero_scatter([{}], [-1], [True], "t", ()) is False  # an unowned partition
    targets = [{}, None]
    assert native.hetero_scatter(targets, [0, 1, 0], [True, False], "t", ((0,), (1,))) is True
    assert targets[0] == {"t": (0, 2)}
    with pytest.raises(ValueError):
        native.hetero_assign_free([-1], None, [], [0], [False])  # free partitions, nobody to take them
    with pytest.raises(ValueError):
        native.hetero_assign_free([-1, -1], [0, 5], [0], [0], [False])  # a free partition out of range
    with pytest.raises(ValueError):
        native.hetero_keep_current([{}], 0, [], ["t"], {"t": 0}, [[-1]], [0], [False])


@PROPERTY_SETTINGS
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 30), st.randoms(use_true_random=False))
def test_heterogeneous_identical_subscriptions_balance_like_homogeneous(member_count, topic_count, partitions, rng):
    """Buckets of members sharing a subscription end up with max - min <= 1 inside each bucket."""
    topics = TopicDescriber({f"t{i}": TopicMetadata(rng.randint(0, partitions)) for i in range(topic_count)})
    members = {}
    for i in range(member_count):
        bucket = i % 2
        members[f"m{i:02d}"] = member(*(f"t{j}" for j in range(topic_count) if j % 2 == bucket))
    result = ASSIGNOR.assign(GroupSpec(members, SubscriptionType.HETEROGENEOUS), topics)
    check_contract(members, topics, result)
    for bucket in (0, 1):
        sizes = [len_ for m, len_ in loads(result).items() if int(m[1:]) % 2 == bucket]
        if sizes:
            assert max(sizes) - min(sizes) <= 1


def reference_homogeneous(members: dict, topics: TopicDescriber) -> dict:
    """Kafka's homogeneous builder, partition by partition, in the canonical order."""
    ids = sorted(members)
    subscription = members[ids[0]].subscribed_topic_ids
    counts = {t: topics.num_partitions(t) for t in sorted(subscription) if topics.num_partitions(t) >= 0}
    owner: dict = {}
    walk: dict = {m: [] for m in ids}
    for m in ids:
        current = members[m].assignment
        for t in sorted(current):
            if t not in counts:
                continue
            for p in sorted(set(current[t])):
                if 0 <= p < counts[t] and (t, p) not in owner:
                    owner[(t, p)] = m
                    walk[m].append((t, p))
    unassigned = [(t, p) for t, n in counts.items() for p in range(n) if (t, p) not in owner]
    min_quota, extra = divmod(sum(counts.values()), len(ids))
    target: dict = {}
    unfilled = []
    for i, m in enumerate(ids):
        quota, granted = min_quota, False
        if extra > 0:
            quota, granted = quota + 1, True
        target[m] = walk[m][:quota]
        unassigned += walk[m][quota:]
        quota -= len(target[m])
        if granted and quota > 0 and len(ids) - i > extra:
            quota, granted = quota - 1, False
        if quota > 0:
            unfilled.append((m, quota))
        if granted:
            extra -= 1
    position = 0
    for m, quota in unfilled:
        target[m] += unassigned[position:position + quota]
        position += quota
    assert position == len(unassigned)
    result = {}
    for m, pairs in target.items():
        by_topic: dict = {}
        for t, p in sorted(pairs):
            by_topic.setdefault(t, []).append(p)
        result[m] = {t: tuple(ps) for t, ps in by_topic.items()}
    return result


@pytest.mark.parametrize("member_count,partitions", [(1, 0), (3, 1), (64, 1000), (1000, 999)])
def test_larger_homogeneous_groups_match_the_reference(member_count, partitions):
    rng = random.Random(member_count)
    counts = {f"t{i:03d}": rng.randint(0, 2 * partitions // 10 + 1) for i in range(10)}
    topics = describer(**counts)
    subscription = frozenset(counts)
    members = {f"m{i:04d}": MemberSubscription(subscription) for i in range(member_count)}
    first = assign(members, topics)
    assert first == reference_homogeneous(members, topics)
    assert assign_homogeneous(GroupSpec.of(members), topics, vectorised=not_default(members, topics)) == first
    # Some members leave, others join: still Kafka's answer.
    survivors = {m: MemberSubscription(subscription, assignment=a) for m, a in first.items() if rng.random() < 0.7}
    survivors.update({f"n{i:04d}": MemberSubscription(subscription) for i in range(member_count // 3 + 1)})
    second = assign(survivors, topics)
    assert second == reference_homogeneous(survivors, topics)
    assert assign_homogeneous(GroupSpec.of(survivors), topics, vectorised=not_default(survivors, topics)) == second
    check_contract(survivors, topics, second)


def not_default(members: dict, topics: TopicDescriber) -> bool:
    """The path `assign` would not take for this group, so that both paths are exercised."""
    total = sum(max(topics.num_partitions(t), 0) for t in next(iter(members.values())).subscribed_topic_ids)
    return total <= SMALL_PARTITIONS and len(members) <= SMALL_MEMBERS


def reference_heterogeneous(members: dict, topics: TopicDescriber) -> dict:
    """Kafka's heterogeneous builder with dict state and one partition at a time.

    It shares only `_LoadRanges` (the member ranges) with the implementation, so it checks the
    bulk fill, the skipped balancing work and the index bookkeeping against the plain algorithm.
    """
    ids = sorted(members)
    subs = [members[m].subscribed_topic_ids for m in ids]
    counts = {t: topics.num_partitions(t) for s in subs for t in s if topics.num_partitions(t) >= 0}
    subscribers = {t: [i for i, s in enumerate(subs) if t in s] for t in counts}
    owner = {t: [-1] * n for t, n in counts.items()}
    loads = [0] * len(ids)
    for i, m in enumerate(ids):
        for t, parts in members[m].assignment.items():
            if t in counts and t in subs[i]:
                for p in parts:
                    if 0 <= p < counts[t] and owner[t][p] == -1:
                        owner[t][p] = i
                        loads[i] += 1

    def order(topic_ids):
        return sorted(topic_ids, key=lambda t: (-(counts[t] / len(subscribers[t])), len(subscribers[t]), t))

    for t in order(t for t in counts if -1 in owner[t]):
        ranges = _LoadRanges(subscribers[t], loads)
        for p in range(counts[t]):
            if owner[t][p] == -1:
                owner[t][p] = ranges.next_least_loaded()
                loads[owner[t][p]] += 1

    def balance_topic(t):
        ranges = _LoadRanges(subscribers[t], loads)
        if loads[ranges.ordered[-1]] - loads[ranges.ordered[0]] <= 1:
            return 0
        held = {}
        for p in sorted(range(counts[t]), key=lambda p: (owner[t][p], p)):
            held.setdefault(owner[t][p], []).append(p)
        moved = 0
        while not ranges.balanced():
            donor = ranges.next_most_loaded()
            while donor != -1 and not held.get(donor):
                ranges.exclude_most_loaded()
                donor = ranges.next_most_loaded()
            if donor == -1:
                break
            p = held[donor].pop()
            receiver = ranges.next_least_loaded()
            if ranges.balanced():
                break
            owner[t][p] = receiver
            loads[donor] -= 1
            loads[receiver] += 1
            moved += 1
        return moved

    candidates = order(t for t in counts if len(subscribers[t]) >= 2)
    last = -1
    for _ in range(MAX_ITERATION_COUNT):
        for position, t in enumerate(candidates):
            if position == last:
                break
            if balance_topic(t) or last == -1:
                last = position
        else:
            continue
        break

    result = {m: {} for m in ids}
    for t in sorted(counts):
        for p, i in enumerate(owner[t]):
            result[ids[i]][t] = result[ids[i]].get(t, ()) + (p,)
    return result


@pytest.mark.parametrize("seed", range(4))
def test_larger_heterogeneous_groups_match_the_reference(seed):
    rng = random.Random(seed)
    names = [f"t{i:02d}" for i in range(12)]
    topics = describer(**{t: rng.randint(0, 40) for t in names})
    members = {f"m{i:03d}": member(*rng.sample(names, rng.randint(1, 5))) for i in range(60)}
    first = assign(members, topics)
    assert first == reference_heterogeneous(members, topics)
    # Members leave, join and change subscriptions; the survivors bring their assignment.
    survivors = {}
    for m, s in members.items():
        if rng.random() < 0.8:
            topics_now = s.subscribed_topic_ids if rng.random() < 0.8 else frozenset(rng.sample(names, 3))
            survivors[m] = MemberSubscription(topics_now, assignment=first[m])
    survivors.update({f"n{i:03d}": member(*rng.sample(names, 4)) for i in range(10)})
    second = assign(survivors, topics)
    assert second == reference_heterogeneous(survivors, topics)
    check_contract(survivors, topics, second)


# --- small groups: the shortcuts against the partition-at-a-time loop ----------------------------


def small_args(members: dict, topics: TopicDescriber) -> tuple:
    """The arguments `assign_homogeneous` hands the small-group builder."""
    ids = sorted(members)
    subscription = members[ids[0]].subscribed_topic_ids
    topic_ids = [t for t in sorted(subscription) if topics.num_partitions(t) >= 0]
    return ids, [members[m].assignment for m in ids], topic_ids, [topics.num_partitions(t) for t in topic_ids]


def assert_same_result(result: dict, expected: dict, currents: list) -> None:
    """Same content, same key order (members and topics), and the same inputs handed back."""
    assert result == expected
    assert list(result) == list(expected)
    assert [list(a) for a in result.values()] == [list(a) for a in expected.values()]
    assert all(type(p) is tuple for a in result.values() for p in a.values())
    assert [a is c for a, c in zip(result.values(), currents)] == [a is c for a, c in zip(expected.values(), currents)]


@st.composite
def small_groups(draw):
    """Homogeneous small groups whose current assignment is mostly well formed.

    Each partition has at most one owner (or, rarely, two), so members hold ascending tuples
    that are often not runs and loads that are often unbalanced; optional damage covers what
    the shortcuts must leave to the general loop (unknown topics, empty entries, lists, ...).
    """
    uuids = draw(st.booleans())
    names = [uuid.UUID(int=i * 7919 + 1) if uuids else f"t{i}" for i in range(3)]
    counts = {t: draw(st.integers(0, 25)) for t in names[:draw(st.integers(1, 3))]}
    ids = draw(st.lists(st.text("abcdefghij", min_size=1, max_size=2), min_size=1, max_size=9, unique=True))
    holders = ids + ["gone"] * draw(st.integers(0, 2))  # partitions of members that left
    owned: dict = {m: {} for m in ids}
    fresh = draw(st.booleans())
    for t, n in counts.items():
        for p in range(n):
            if fresh:
                break
            owner = draw(st.sampled_from(holders + [None]))
            if owner in owned:
                owned[owner].setdefault(t, []).append(p)
            if draw(st.integers(0, 30)) == 0:  # rarely, claimed twice
                owned[draw(st.sampled_from(ids))].setdefault(t, []).append(p)
    members = {}
    for m in ids:
        current = {t: tuple(sorted(set(ps))) for t, ps in owned[m].items()}
        damage = draw(st.sampled_from(["none"] * 6 + ["unknown", "empty", "copy", "list", "proxy", "grown"]))
        if damage == "unknown":
            current["unknown" if not uuids else uuid.UUID(int=5)] = (0, 1)
        elif damage == "empty" and counts:
            current[next(iter(counts))] = ()
        elif damage == "copy" and uuids:
            current = {uuid.UUID(str(t)): ps for t, ps in current.items()}
        elif damage == "list" and current:
            current[next(iter(current))] = list(next(iter(current.values())))
        elif damage == "grown" and current:  # a partition beyond the topic (it shrank)
            t = next(iter(current))
            current[t] = current[t] + (counts[t],)
        items = list(current.items())
        draw(st.randoms(use_true_random=False)).shuffle(items)
        current = dict(items)
        members[m] = MemberSubscription(frozenset(counts),
                                        assignment=MappingProxyType(current) if damage == "proxy" else current)
    return members, TopicDescriber({t: TopicMetadata(n) for t, n in counts.items()})


@PROPERTY_SETTINGS
@given(small_groups())
def test_small_group_shortcuts_match_the_partition_loop(group):
    members, topics = group
    args = small_args(members, topics)
    expected = assign_by_partition(*args)
    assert expected == reference_homogeneous(members, topics)
    assert_same_result(assign_homogeneous_small(*args), expected, args[1])
    assert_same_result(UniformAssignor().assign(GroupSpec.of(members), topics), expected, args[1])
    assert assign_homogeneous(GroupSpec.of(members), topics, vectorised=True) == expected
    # A stable group stays put, handing every member its mapping back.
    again = {m: MemberSubscription(s.subscribed_topic_ids, assignment=expected[m]) for m, s in members.items()}
    stable = assign_homogeneous_small(*small_args(again, topics))
    assert_same_result(stable, expected, [expected[m] for m in sorted(members)])


@st.composite
def tiled_groups(draw):
    """Small homogeneous groups whose current tuples cover every partition exactly once, with
    any shares: members joined (holding nothing), members left (their partitions went to others
    at random), tuples that are runs or scattered, topics listed in any order."""
    names = [uuid.UUID(int=i * 7919 + 1) for i in range(4)]
    counts = {t: draw(st.integers(1, 25)) for t in names[:draw(st.integers(1, 4))]}
    ids = draw(st.lists(st.text("abcdefghij", min_size=1, max_size=2), min_size=1, max_size=9, unique=True))
    holders = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=len(ids), unique=True))
    rng = draw(st.randoms(use_true_random=False))
    owned: dict = {m: {} for m in ids}
    for t, n in counts.items():
        runs = draw(st.booleans())
        for p in range(n):
            owner = holders[p * len(holders) // n] if runs else rng.choice(holders)
            owned[owner].setdefault(t, []).append(p)
    members = {}
    for m in ids:
        items = [(t, tuple(ps)) for t, ps in owned[m].items()]
        rng.shuffle(items)
        members[m] = MemberSubscription(frozenset(counts), assignment=dict(items))
    return members, TopicDescriber({t: TopicMetadata(n) for t, n in counts.items()})


@PROPERTY_SETTINGS
@given(tiled_groups())
def test_joins_and_leaves_on_whole_tuples_match_the_partition_loop(group):
    members, topics = group
    args = small_args(members, topics)
    result = rebalance_tiled(*args)
    assert result is not None  # every such group takes the shortcut
    assert_same_result(result, assign_by_partition(*args), args[1])
    assert result == reference_homogeneous(members, topics)


def test_a_member_joining_takes_the_tails_of_the_fullest_members():
    members = {"A": member("t1", assignment={"t1": (0, 1, 2)}), "B": member("t1", assignment={"t1": (3, 4, 5)}),
               "C": member("t1")}
    args = small_args(members, describer(t1=6))
    result = rebalance_tiled(*args)
    assert result == {"A": {"t1": (0, 1)}, "B": {"t1": (3, 4)}, "C": {"t1": (2, 5)}}
    declined = [{"A": {"t1": (0, 1, 2)}, "B": {"t1": (3, 4)}},  # 5 is nobody's
                {"A": {"t1": (0, 1, 2)}, "B": {"t1": (2, 3, 4, 5)}},  # 2 twice
                {"A": {"t1": [0, 1, 2]}, "B": {"t1": (3, 4, 5)}}]  # a list
    for current in declined:
        members = {m: member("t1", assignment=a) for m, a in current.items()} | {"C": member("t1")}
        args = small_args(members, describer(t1=6))
        assert rebalance_tiled(*args) is None, current
        assert_same_result(assign_homogeneous_small(*args), assign_by_partition(*args), args[1])


def test_new_group_shortcut_hands_back_empty_mappings_of_members_left_without_partitions():
    empty, proxy = {}, MappingProxyType({})
    subscription = frozenset({"t1", "t2"})
    members = {"A": MemberSubscription(subscription, assignment=empty),
               "B": MemberSubscription(subscription, assignment=proxy),
               "C": member("t1", "t2"), "D": member("t1", "t2"), "E": member("t1", "t2")}
    topics = describer(t1=1, t2=2)
    result = assign(members, topics)
    assert result == {"A": {}, "B": {}, "C": {"t1": (0,)}, "D": {"t2": (0,)}, "E": {"t2": (1,)}}
    assert result["A"] is empty and type(result["B"]) is dict
    assert_same_result(result, assign_by_partition(*small_args(members, topics)), [empty, proxy])


class Parts(tuple):
    """A tuple subclass, which the builders normalise to a plain tuple."""


def test_single_topic_shortcut_keeps_only_complete_balanced_runs():
    stable = {"B": {"t1": (2, 3, 4)}, "A": {"t1": (0, 1)}}
    members = {m: member("t1", assignment=a) for m, a in stable.items()}
    result = keep_single_topic(*small_args(members, describer(t1=5))[:2], "t1", 5)
    assert result == stable and list(result) == ["A", "B"]
    assert all(result[m] is stable[m] for m in stable)
    interleaved = {"A": {"t1": (0, 2, 5)}, "B": {"t1": (1, 3)}, "C": {"t1": (4, 6)}}
    members = {m: member("t1", assignment=a) for m, a in interleaved.items()}
    result = keep_single_topic(*small_args(members, describer(t1=7))[:2], "t1", 7)
    assert result == interleaved and all(result[m] is interleaved[m] for m in interleaved)
    declined = [
        ({"A": {"t1": ()}, "B": {"t1": (0,)}}, 1),  # an empty entry is dropped, which changes A
        ({"A": {"t1": (0,)}, "B": {"t1": (1, 2, 3)}}, 4),  # unbalanced
        ({"A": {"t1": (0, 3)}, "B": {"t1": (2, 1)}}, 4),  # B's tuple is not sorted
        ({"A": {"t1": (0, 2)}, "B": {"t1": (1, 2)}}, 3),  # claimed twice, not runs
        ({"A": {"t1": (0, 1.0)}, "B": {"t1": (2, 3)}}, 4),  # not ints
        ({"A": {"t1": [0, 1]}, "B": {"t1": (2, 3)}}, 4),  # not a tuple
        ({"A": {"t1": Parts((0, 1))}, "B": {"t1": (2, 3)}}, 4),  # nor a subclass: the output is plain tuples
        ({"A": {"t0": (0, 1)}, "B": {"t1": (2, 3)}}, 4),  # another topic
        ({"A": {"t1": (0, 1)}, "B": {"t1": (2, 3)}}, 5),  # incomplete
        ({"A": {"t1": (0, 1)}, "B": {"t1": (1, 2)}}, 3),  # claimed twice
    ]
    for current, count in declined:
        members = {m: member("t1", assignment=a) for m, a in current.items()}
        args = small_args(members, describer(t1=count))
        assert keep_single_topic(args[0], args[1], "t1", count) is None, current
        if any(type(p) is float for a in current.values() for ps in a.values() for p in ps):  # no partition: raises
            with pytest.raises(TypeError):
                assign_by_partition(*args)
            with pytest.raises(TypeError):
                assign_homogeneous_small(*args)
            continue
        assert_same_result(assign_homogeneous_small(*args), assign_by_partition(*args), args[1])


def test_several_topics_shortcut_keeps_only_complete_balanced_assignments():
    topics = describer(t1=3, t2=4)
    stable = {"A": {"t1": (0, 2), "t2": (3,)}, "B": {"t2": (0, 2)}, "C": {"t1": (1,), "t2": (1,)}}
    members = {m: member("t1", "t2", assignment=a) for m, a in stable.items()}
    result = keep_balanced(*small_args(members, topics))
    assert result == stable and all(result[m] is stable[m] for m in stable)
    # Fewer partitions than members: holding nothing is balanced.
    few = {"A": {}, "B": {"t1": (0,)}, "C": {"t2": (0,)}}
    members = {m: MemberSubscription(frozenset({"t1", "t2"}), assignment=a) for m, a in few.items()}
    result = keep_balanced(*small_args(members, describer(t1=1, t2=1)))
    assert result == few and all(result[m] is few[m] for m in few)
    declined = [
        {"A": {"t1": (0, 1, 2)}, "B": {"t2": (0, 1, 2, 3)}, "C": {}},  # C holds nothing
        {"A": {"t1": (0, 2), "t2": (3,)}, "B": {"t2": (0, 2)}, "C": {"t1": (1,), "t2": ()}},  # empty entry
        {"A": {"t1": (0, 2), "t2": (3,)}, "B": {"t2": (2, 0)}, "C": {"t1": (1,), "t2": (1,)}},  # unsorted
        {"A": {"t1": (0, 2), "t3": (3,)}, "B": {"t2": (0, 2)}, "C": {"t1": (1,), "t2": (1,)}},  # unknown topic
        {"A": {"t1": (0, 2), "t2": (3,)}, "B": {"t2": (0, 1)}, "C": {"t1": (1,), "t2": (1,)}},  # claimed twice
        {"A": {"t1": (0, 1, 2), "t2": (3,)}, "B": {"t2": (0, 2)}, "C": {"t2": (1,)}},  # unbalanced
        {"A": {"t1": (0, 2), "t2": (3,)}, "B": {"t2": Parts((0, 2))}, "C": {"t1": (1,), "t2": (1,)}},  # subclass
    ]
    for current in declined:
        members = {m: MemberSubscription(frozenset({"t1", "t2"}), assignment=a) for m, a in current.items()}
        args = small_args(members, topics)
        assert keep_balanced(*args) is None, current
        assert_same_result(assign_homogeneous_small(*args), assign_by_partition(*args), args[1])


def test_reused_copies_only_the_mappings_that_are_not_dicts():
    """Unchanged members' outputs are their input dicts themselves; other mappings become dicts."""
    import types

    from cohort.assignors._uniform_common import reused
    from cohort.coordinator.records import EMPTY_ASSIGNMENT

    a, b = {"t": (0,)}, {"t": (1, 2)}
    proxy = types.MappingProxyType({"u": (3,)})
    assert reused([a, b]) == [a, b] and all(x is y for x, y in zip(reused([a, b]), [a, b]))
    out = reused([EMPTY_ASSIGNMENT, a, proxy, b, EMPTY_ASSIGNMENT, proxy])
    assert [type(x) for x in out] == [dict] * 6
    assert out == [{}, a, {"u": (3,)}, b, {}, {"u": (3,)}]
    assert out[1] is a and out[3] is b


def canonical(currents: list, topic_ids: list, counts: list) -> bool:
    """Whether current assignments are in the form the C builder takes (it declines the rest)."""
    index = {t: i for i, t in enumerate(topic_ids)}
    claimed = set()
    for current in currents:
        if type(current) is not dict:
            if len(current):
                return False
            continue
        last = (-1, -1)
        for t, parts in current.items():
            if t not in index or type(parts) is not tuple or not parts:
                return False
            for p in parts:
                if type(p) is not int or not 0 <= p < counts[index[t]] or (index[t], p) <= last:
                    return False
                if (index[t], p) in claimed:
                    return False
                claimed.add((index[t], p))
                last = (index[t], p)
    return True


def test_the_c_builder_is_built():
    """`make test` (pip install) compiles it; the Python builders are only the fallback."""
    assert native is not None, "cohort.assignors._uniform_native was not built: is a C compiler installed?"


@PROPERTY_SETTINGS
@given(small_groups(), st.booleans())
def test_the_c_builder_matches_the_python_builders_or_declines(group, with_hashes):
    members, topics = group
    ids, currents, topic_ids, counts = small_args(members, topics)
    hashes = list(map(hash, topic_ids)) if with_hashes else None
    result = native.assign_homogeneous(ids, currents, topic_ids, counts, hashes, tuple(range(max(counts, default=0))))
    if not canonical(currents, topic_ids, counts):
        assert result is None
        return
    expected = assign_by_partition(ids, currents, topic_ids, counts)
    assert expected == reference_homogeneous(members, topics)
    assert result is not None
    assert_same_result(result, expected, currents)
    assert assign_homogeneous(GroupSpec.of(members), topics, vectorised=True) == result
    # Its own output is canonical: assigning again hands every member its dict back.
    again = native.assign_homogeneous(ids, [result[m] for m in ids], topic_ids, counts, None, tuple(range(max(counts, default=0))))
    assert all(again[m] is result[m] for m in ids)


@PROPERTY_SETTINGS
@given(small_groups(), st.integers(0, 9), st.randoms(use_true_random=False))
def test_the_c_builder_reads_a_member_dict_in_order_or_with_joiners_appended(group, tail, rnd):
    # The coordinator's view: members in member id order, the last `tail` of them appended out
    # of order (joiners); a fully shuffled dict may be declined (NotImplemented), nothing else.
    members, topics = group
    ids, currents, topic_ids, counts = small_args(members, topics)
    ints = tuple(range(max(counts, default=0)))
    expected = native.assign_homogeneous(ids, currents, topic_ids, counts, None, ints)
    joiners = ids[len(ids) - min(tail, len(ids)):]
    rnd.shuffle(joiners)
    order = [m for m in ids if m not in joiners] + joiners
    view = {m: members[m] for m in order}
    got = native.assign_homogeneous_members(view, topic_ids, counts, None, ints)
    assert got is not NotImplemented
    assert got == expected and (got is None or list(got) == ids)
    if got is not None:
        assert all(got[m] is members[m].assignment for m in ids if expected[m] is currents[ids.index(m)])
    shuffled = list(ids)
    rnd.shuffle(shuffled)
    declined = native.assign_homogeneous_members({m: members[m] for m in shuffled}, topic_ids, counts, None, ints)
    assert declined is NotImplemented or declined == expected
    assert assign_homogeneous(GroupSpec(view, SubscriptionType.HOMOGENEOUS), topics) == assign_by_partition(
        ids, currents, topic_ids, counts)


def test_the_c_builder_declines_a_member_dict_it_cannot_read_in_order():
    member = MemberSubscription(frozenset({"t"}))
    many = {f"m{i:03d}": member for i in range(100, 0, -1)}  # 99 keys out of order: more than a tail
    assert native.assign_homogeneous_members(many, ["t"], [10], None, tuple(range(10))) is NotImplemented
    assert native.assign_homogeneous_members({1: member}, ["t"], [10], None, tuple(range(10))) is NotImplemented
    with pytest.raises(AttributeError):
        native.assign_homogeneous_members({"a": object()}, ["t"], [10], None, tuple(range(10)))
    spec = GroupSpec.of(many)  # the Python side sorts them and takes the list entry point
    assert list(assign_homogeneous(spec, TopicDescriber({"t": TopicMetadata(10)}))) == sorted(many)


def test_the_c_builder_reads_each_members_assignment_as_getattr_does():
    """The members' `assignment` is read at its slot's offset for the assignors' own class and a
    subclass, through getattr for anything else: a property overriding it, a plain object, and a
    class borrowing another class's slot descriptor (never read at a foreign offset)."""
    from types import SimpleNamespace

    class Slotted(MemberSubscription):
        __slots__ = ("extra",)

    class Overridden(MemberSubscription):
        __slots__ = ()
        assignment = property(lambda self: {"t": (0, 1, 2)})  # over the base's slot, which holds {"t": (6,)}

    overridden = object.__new__(Overridden)
    for name, value in (("subscribed_topic_ids", frozenset({"t"})), ("rack_id", None), ("instance_id", None)):
        object.__setattr__(overridden, name, value)
    MemberSubscription.assignment.__set__(overridden, {"t": (6,)})

    class Borrowed:
        __slots__ = ("a", "b", "c", "d")
        assignment = MemberSubscription.assignment

    subs = frozenset({"t"})
    view = {"a": MemberSubscription(subs, assignment={"t": (3, 4)}), "b": Slotted(subs, assignment={"t": (5,)}),
            "c": overridden, "d": SimpleNamespace(assignment={"t": (7, 8)}),
            "e": MemberSubscription(subs)}
    currents = [{"t": (3, 4)}, {"t": (5,)}, {"t": (0, 1, 2)}, {"t": (7, 8)}, {}]
    ints = tuple(range(10))
    got = native.assign_homogeneous_members(view, ["t"], [10], None, ints)
    assert got == native.assign_homogeneous(list(view), currents, ["t"], [10], None, ints)
    assert got["a"] is view["a"].assignment and got["d"] is view["d"].assignment  # kept: the very dicts
    with pytest.raises(TypeError):  # getattr's own answer for the borrowed descriptor
        native.assign_homogeneous_members({"a": Borrowed()}, ["t"], [10], None, ints)


def test_the_c_builder_lends_its_kept_arrays_to_one_call_at_a_time():
    """The builder keeps its large arrays between calls; a call made while one is running (here
    from a member's `assignment` property, read mid-scan) gets arrays of its own, and neither
    answer is disturbed. Calls of other sizes then reuse the kept arrays."""
    ints = tuple(range(400))
    inner_view = {f"i{k:03d}": MemberSubscription(frozenset({"u"})) for k in range(30)}
    inner = []

    class Reentrant(MemberSubscription):
        __slots__ = ()

        @property
        def assignment(self):
            inner.append(native.assign_homogeneous_members(inner_view, ["u"], [300], None, ints))
            return {"t": (1, 2)}

    reentrant = object.__new__(Reentrant)
    for name, value in (("subscribed_topic_ids", frozenset({"t"})), ("rack_id", None), ("instance_id", None),
                        ("assignment", {})):
        MemberSubscription.__dict__[name].__set__(reentrant, value)
    view = {f"m{k:03d}": MemberSubscription(frozenset({"t"}), assignment={"t": (k,)} if k > 2 else {})
            for k in range(200)}
    view["m001"] = reentrant
    currents = [{"t": (1, 2)} if m == "m001" else v.assignment for m, v in view.items()]
    got = native.assign_homogeneous_members(view, ["t"], [400], None, ints)
    assert got == native.assign_homogeneous(list(view), currents, ["t"], [400], None, ints)
    # a view in member id order is the output's template: written in place, same keys, same order
    assert list(got) == list(view) and gc.is_tracked(got)
    assert sorted(p for parts in got.values() for part in parts.values() for p in part) == list(range(400))
    alone = native.assign_homogeneous_members(inner_view, ["u"], [300], None, ints)
    assert len(inner) == 1 and inner[0] == alone
    assert sorted(p for parts in alone.values() for part in parts.values() for p in part) == list(range(300))
    for members, partitions in ((5, 7), (250, 390), (1, 1)):  # smaller and larger than the kept arrays
        small = {f"s{k:03d}": MemberSubscription(frozenset({"t"})) for k in range(members)}
        made = native.assign_homogeneous_members(small, ["t"], [partitions], None, ints)
        assert made == native.assign_homogeneous(list(small), [{}] * members, ["t"], [partitions], None, ints)
        assert list(made) == list(small) and all(type(v) is MemberSubscription for v in small.values())
        assert sorted(p for parts in made.values() for part in parts.values() for p in part) == list(range(partitions))


def test_the_c_builder_takes_a_large_view_with_hundreds_of_joiners_appended():
    # The coordinator re-sorts its view once joiners are a sixteenth of it: 250 joiners appended
    # to 4,000 members in order are read as they are, and give what the sorted lists give.
    rng = random.Random(848)
    member = MemberSubscription(frozenset({"t"}))
    ids = sorted({f"{rng.getrandbits(64):016x}" for _ in range(4250)})
    joiners = rng.sample(ids, 250)
    view = {m: member for m in ids if m not in set(joiners)} | {m: member for m in joiners}
    ints = tuple(range(5000))
    got = native.assign_homogeneous_members(view, ["t"], [5000], None, ints)
    assert got is not NotImplemented and list(got) == ids
    assert got == native.assign_homogeneous(ids, [{}] * len(ids), ["t"], [5000], None, ints)


@pytest.mark.parametrize("member_count,partitions", [(1, 0), (3, 1), (10, 4000), (64, 1000), (1000, 999), (3000, 20000)])
def test_the_c_builder_matches_the_reference_as_members_leave_and_join(member_count, partitions):
    rng = random.Random(member_count)
    topic_ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(10)]
    topics = TopicDescriber({t: TopicMetadata(rng.randint(0, 2 * partitions // 10 + 1)) for t in topic_ids})
    subscription = frozenset(topic_ids)
    members = {str(uuid.UUID(int=rng.getrandbits(128))): MemberSubscription(subscription) for _ in range(member_count)}
    for _ in range(3):
        result = assign(members, topics)
        args = small_args(members, topics)
        assert canonical(*args[1:])
        assert result == reference_homogeneous(members, topics)
        assert_same_result(result, assign_homogeneous(GroupSpec.of(members), topics, vectorised=True), args[1])
        members = {m: MemberSubscription(subscription, assignment=a) for m, a in result.items() if rng.random() < 0.8}
        members.update({str(uuid.UUID(int=rng.getrandbits(128))): MemberSubscription(subscription)
                        for _ in range(member_count // 4 + 1)})


@pytest.mark.parametrize("member_count,counts", [
    (400, [2000, 400, 4000]),  # 16 each: shared runs, and runs starting past 1,024 (built)
    (40, [1000, 30]),  # 25 or more each: runs past the shared length (built)
])
def test_the_c_builder_shares_one_tuple_per_short_run_and_builds_the_others(member_count, counts):
    ids = [f"m{i:04d}" for i in range(member_count)]
    topic_ids = [f"t{i}" for i in range(len(counts))]
    empty = [{}] * member_count
    first = native.assign_homogeneous(ids, empty, topic_ids, counts, None, tuple(range(max(counts))))
    again = native.assign_homogeneous(ids, empty, topic_ids, counts, None, tuple(range(max(counts))))
    assert first == again == assign_by_partition(ids, empty, topic_ids, counts)
    runs = [(m, t, parts) for m in ids for t, parts in first[m].items()]
    assert all(parts == tuple(range(parts[0], parts[0] + len(parts))) for _, _, parts in runs)
    shared = [len(parts) <= 16 and parts[0] < 1024 for _, _, parts in runs]
    assert [again[m][t] is parts for m, t, parts in runs] == shared
    assert not all(shared)


def test_the_c_builder_reads_its_shared_runs_as_runs_and_still_refuses_them_where_they_do_not_fit():
    """A current entry that is one of the shared run tuples is taken as its run without reading
    its ints; the same checks hold as for any tuple: a run claimed twice, one past the topic's
    end, or one out of order in a member's topics makes the input not canonical (None), and the
    Python builders clean it up as for any other tuple."""
    ids = [f"m{i}" for i in range(4)]
    ints = tuple(range(64))
    first = native.assign_homogeneous(ids, [{}] * 4, ["a", "b"], [8, 8], None, ints)
    run = first["m0"]["a"]  # (0, 1, 2, 3), a shared tuple
    assert run == (0, 1, 2, 3) and native.assign_homogeneous(ids, [{}] * 4, ["a", "b"], [8, 8], None, ints)["m0"]["a"] is run
    steady = native.assign_homogeneous(ids, [first[m] for m in ids], ["a", "b"], [8, 8], None, ints)
    assert all(steady[m] is first[m] for m in ids)
    odd_inputs = [
        [{"a": run}, {"a": run}, {}, {}],  # claimed twice
        [{"a": run}, {}, {}, {}],  # fine: the control case
        [{"b": first["m2"]["b"], "a": first["m1"]["a"]}, {}, {}, {}],  # topics out of order
    ]
    outcomes = []
    for counts in ([8, 8], [3, 8]):  # [3, 8]: the run (0, 1, 2, 3) no longer fits topic a
        for currents in odd_inputs:
            got = native.assign_homogeneous(ids, currents, ["a", "b"], counts, None, ints)
            if canonical(currents, ["a", "b"], counts):
                assert got == assign_by_partition(ids, currents, ["a", "b"], counts)
            else:
                assert got is None
            outcomes.append(got is None)
    assert outcomes == [True, False, True, True, True, True]


def test_the_c_builder_rejects_mismatched_arguments():
    with pytest.raises(ValueError):
        native.assign_homogeneous(["a"], [], ["t"], [1], None, (0,))
    with pytest.raises(ValueError):
        native.assign_homogeneous(["a"], [{}], ["t"], [-1], None, (0,))
    with pytest.raises(ValueError):
        native.assign_homogeneous(["a"], [{}], ["t"], [5], None, (0, 1))
    with pytest.raises(TypeError):
        native.assign_homogeneous(("a",), [{}], ["t"], [1], None, (0,))

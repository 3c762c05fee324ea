"""The lag assignor's plain-Python path for small groups (`_lag_small.assign_small`).

Whenever it answers, the answer must be the numpy path's to the last detail: the same members in
the same order, the same topics in the same order, the same partition tuples, and the very same
dict objects for the members whose current assignment the numpy path hands back. It must answer
for every fresh group within its size limits and for a group re-assigned from its previous result
with unchanged lags, and it must fail on bad lags exactly as the numpy path does.
"""

from __future__ import annotations

import random
from fractions import Fraction
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numpy as np

from cohort.assignors._lag_greedy import greedy
from cohort.assignors._lag_model import Model, assigned_lag
from cohort.assignors._lag_sticky import balance_counts
from cohort.assignors._lag_small import SMALL_MEMBERS, SMALL_PARTITIONS, _greedy, _peak, assign_small
from cohort.assignors.api import (
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscriptionType,
    TopicDescriber,
    TopicMetadata,
)
from cohort.assignors.lag import LagAssignor, _lower_bound

INT64_MAX = (1 << 63) - 1
TOLERANCES = [0.1, 0, 0.5, Fraction(1, 3), 2]


def numpy_path(assignor: LagAssignor, spec: GroupSpec, topics: TopicDescriber):
    """The reference answer: the assignor's numpy path, which assign() takes when the small path declines."""
    return assignor.assign_arrays(spec, topics)


def small_path(assignor: LagAssignor, spec: GroupSpec, topics: TopicDescriber):
    return assign_small(spec, topics, assignor._factor)


def outcome(call, *args):
    try:
        return call(*args), None
    except Exception as error:  # noqa: BLE001 - the error itself is what is compared
        return None, error


def assert_same(small: dict, reference: dict, spec: GroupSpec) -> None:
    """Equal content, equal key order at both levels, tuples, and reuse of exactly the same dicts."""
    assert small == reference
    assert list(small) == list(reference)
    for member_id, assignment in reference.items():
        mine = small[member_id]
        assert list(mine) == list(assignment)
        assert all(type(parts) is tuple for parts in mine.values())
        current = spec.members[member_id].assignment
        assert (mine is current) == (assignment is current), member_id
    # Members never share one dict unless the numpy path shares it too.
    assert len({id(a) for a in small.values()}) == len({id(a) for a in reference.values()})


def check(assignor: LagAssignor, spec: GroupSpec, topics: TopicDescriber):
    """Compare both paths on one group; returns the small path's answer (None: not handled)."""
    reference, error = outcome(numpy_path, assignor, spec, topics)
    small, small_error = outcome(small_path, assignor, spec, topics)
    if error is not None:
        # The caller falls back on None, which raises the same; otherwise the very same error.
        if small_error is None:
            assert small is None, f"numpy path raised {error!r}"
        else:
            assert (type(small_error), str(small_error)) == (type(error), str(error))
        return None
    assert small_error is None, small_error
    if small is not None:
        assert_same(small, reference, spec)
    return small


def fresh_for_the_model(spec: GroupSpec, topics: TopicDescriber) -> bool:
    """No member holds a partition the numpy path would keep."""
    model = Model(spec, topics)
    if not model.total or not any(sub.assignment for sub in spec.members.values()):
        return True
    return not (model.current_owners(spec)[0] >= 0).any()


def with_assignments(spec: GroupSpec, current: dict) -> GroupSpec:
    members = {m: MemberSubscription(s.subscribed_topic_ids, s.rack_id, s.instance_id, current.get(m, {}))
               for m, s in spec.members.items()}
    return GroupSpec(members, spec.subscription_type)


# ---------------------------------------------------------------------------------------------
# Random small groups


def random_lags(rng: random.Random, n: int):
    """None, or lags of about n entries: small, negative, large, or near and beyond the int64 caps."""
    if rng.random() < 0.15:
        return None
    length = n if rng.random() < 0.7 else max(0, n + rng.randint(-3, 3))
    kind = rng.choice(["small", "wide", "huge", "ties"])
    values = []
    for _ in range(length):
        if kind == "small":
            values.append(rng.randint(-3, 12))
        elif kind == "wide":
            values.append(rng.randrange(1_000_000))
        elif kind == "ties":
            values.append(rng.choice([0, 5, 5, 7]))
        else:
            values.append(rng.choice([INT64_MAX, INT64_MAX // rng.randint(1, 100), 1 << 64, -(1 << 70),
                                      rng.randrange(1 << 62), 0]))
    return tuple(values)


def random_topics(rng: random.Random) -> tuple[list[str], dict]:
    """Up to 3 known topics (0-30 partitions) and the names members may subscribe to (with unknown ones)."""
    names = [f"t{i}" for i in range(rng.randint(1, 3))]
    meta = {}
    for name in names:
        n = rng.choice([0, 1, 2, 3, 5, 7, 10, 20, 30, rng.randint(0, 30)])
        meta[name] = TopicMetadata(n, lags=random_lags(rng, n))
    return names + ["ghost"], meta


def random_members(rng: random.Random, names: list[str]) -> GroupSpec:
    count = rng.randint(1, 8)
    ids = [f"{rng.choice('abcxyz')}{rng.randrange(1000):03d}-{i}" for i in range(count)]
    rng.shuffle(ids)  # insertion order is not member order
    known = names[:-1]
    if rng.random() < 0.5:
        subscription = frozenset(rng.sample(names, rng.randint(1, len(names))) or known)
        members = {m: MemberSubscription(subscription) for m in ids}
    else:
        members = {m: MemberSubscription(frozenset(rng.sample(names, rng.randint(0, len(names))))) for m in ids}
    spec = GroupSpec.of(members)
    if rng.random() < 0.05:  # a spec that claims HOMOGENEOUS is trusted even when it is not
        spec = GroupSpec(members, SubscriptionType.HOMOGENEOUS)
    return spec


def garbage(rng: random.Random, names: list[str], meta: dict):
    """A current assignment with a bit of everything the numpy path drops."""
    entries = {}
    for name in rng.sample(names, rng.randint(0, len(names))):
        n = max(meta[name].num_partitions, 1) if name in meta else 3
        parts = sorted(rng.sample(range(-2, n + 2), rng.randint(0, min(4, n + 4))))
        style = rng.random()
        if style < 0.1:
            parts.reverse()
        elif style < 0.15:
            parts = parts + parts[:1]
        elif style < 0.2:
            parts = [float(p) for p in parts]
        elif style < 0.22:
            parts = [str(p) for p in parts]
        elif style < 0.24:
            parts = [True] + parts
        elif style < 0.26:
            parts = parts + [1 << 70]
        entries[name] = parts if rng.random() < 0.15 else tuple(parts)
    return MappingProxyType(entries) if rng.random() < 0.1 else entries


def balanced(rng: random.Random, spec: GroupSpec, meta: dict) -> dict:
    """A random count-balanced assignment covering every partition (not the greedy one)."""
    ids = sorted(spec.members)
    current: dict = {m: {} for m in ids}
    for name, topic in sorted(meta.items()):
        subs = [m for m in ids if name in spec.members[m].subscribed_topic_ids]
        if not subs or topic.num_partitions <= 0:
            continue
        parts = list(range(topic.num_partitions))
        rng.shuffle(parts)
        rng.shuffle(subs)
        for i, m in enumerate(subs):
            mine = tuple(sorted(parts[i :: len(subs)]))
            if mine:
                current[m][name] = mine
    return current


def random_group(rng: random.Random):
    """(assignor, topic names, topic metadata, spec, describer) of one random small group, no current assignment."""
    assignor = LagAssignor(rng.choice(TOLERANCES))
    names, meta = random_topics(rng)
    spec = random_members(rng, names)
    return assignor, names, meta, spec, TopicDescriber(meta)


def scenario(rng: random.Random):
    """(assignor, spec, describer, kind) for one random small group and current assignment."""
    assignor, names, meta, spec, topics = random_group(rng)
    kind = rng.choice(["fresh", "previous", "drifted", "changed", "balanced", "garbage", "mixed"])
    if kind == "fresh":
        return assignor, spec, topics, kind
    if kind == "garbage":
        return assignor, with_assignments(spec, {m: garbage(rng, names, meta) for m in spec.members}), topics, kind
    if kind == "balanced":
        return assignor, with_assignments(spec, balanced(rng, spec, meta)), topics, kind
    try:
        previous = numpy_path(assignor, spec, topics)
    except PartitionAssignorError:
        return assignor, spec, topics, "fresh"
    spec = with_assignments(spec, previous)
    if kind == "drifted":  # same owners, lags moved a little or a lot
        scale = rng.choice([1, 2, 50])
        meta = {name: TopicMetadata(t.num_partitions, lags=None if t.lags is None else tuple(
            max(0, v + rng.randint(-scale, scale)) if abs(v) < (1 << 60) else v for v in t.lags))
            for name, t in meta.items()}
        topics = TopicDescriber(meta)
    elif kind == "changed":  # a member leaves, a member joins
        members = dict(spec.members)
        if len(members) > 1 and rng.random() < 0.5:
            del members[rng.choice(sorted(members))]
        if rng.random() < 0.5:
            members["new"] = MemberSubscription(next(iter(members.values())).subscribed_topic_ids)
        spec = GroupSpec.of(members)
    elif kind == "mixed":  # the previous result with some members' entries spoiled
        current = {m: (garbage(rng, names, meta) if rng.random() < 0.3 else a) for m, a in previous.items()}
        spec = with_assignments(spec, current)
    return assignor, spec, topics, kind


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_small_path_answers_as_the_numpy_path(rng):
    assignor, spec, topics, kind = scenario(rng)
    small = check(assignor, spec, topics)
    if kind == "previous" and small is None:
        # Only a group whose lags the numpy path rejects has no previous result to keep.
        assert outcome(numpy_path, assignor, spec, topics)[1] is not None
    if kind == "previous" and small is not None and any(small.values()):
        assert all(small[m] is spec.members[m].assignment for m in small)


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False))
def test_small_path_answers_every_fresh_group(rng):
    assignor, names, meta, spec, topics = random_group(rng)
    if rng.random() < 0.5:
        spec = with_assignments(spec, {m: garbage(rng, names, meta) for m in spec.members})
    reference, error = outcome(numpy_path, assignor, spec, topics)
    if error is not None or not fresh_for_the_model(spec, topics):
        return
    small = small_path(assignor, spec, topics)
    assert small is not None
    assert_same(small, reference, spec)


@settings(max_examples=150, deadline=None)
@given(st.randoms(use_true_random=False))
def test_small_path_keeps_the_previous_result_when_lags_are_unchanged(rng):
    assignor, _, _, spec, topics = random_group(rng)
    first, error = outcome(numpy_path, assignor, spec, topics)
    if error is not None:
        return
    again = with_assignments(spec, first)
    small = small_path(assignor, again, topics)
    assert small is not None
    assert_same(small, numpy_path(assignor, again, topics), again)
    if any(first.values()):  # with no partitions at all, every member gets a new empty dict
        assert all(small[m] is first[m] for m in first)


def repaired_counts_suffice(assignor: LagAssignor, spec: GroupSpec, topics: TopicDescriber) -> bool:
    """Whether the numpy path's answer is its count repair alone (`LagAssignor._sticky`'s first two
    exits), with all lags adding up to less than 2**53 (no member's load reaches that), where the
    small path must answer."""
    model = Model(spec, topics)
    current, _ = model.current_owners(spec)
    if not model.total or not (current >= 0).any():
        return False
    m_count = len(model.member_ids)
    own = current.copy()
    if int(model.lag.sum()) >= 1 << 53:
        return False
    load = assigned_lag(own, model.lag, m_count)
    balance_counts(model, own, load)
    heaviest = int(load.max())
    bar = int(assigned_lag(greedy(model), model.lag, m_count).max())
    return assignor._within(heaviest, _lower_bound(model)) or assignor._within(heaviest, bar)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_small_path_repairs_counts_after_members_join_and_leave(rng):
    assignor, names, meta, spec, topics = random_group(rng)
    previous, error = outcome(numpy_path, assignor, spec, topics)
    if error is not None:
        return
    members = dict(with_assignments(spec, previous).members)
    for member in rng.sample(sorted(members), rng.randint(0, len(members) - 1)):
        del members[member]  # left: its partitions have no owner
    subscriptions = sorted({s.subscribed_topic_ids for s in members.values()}, key=sorted)
    for i in range(rng.randint(0, 3)):
        members[f"joined-{i}"] = MemberSubscription(rng.choice(subscriptions))  # holds nothing yet
    changed = GroupSpec.of(members)
    reference = numpy_path(assignor, changed, topics)
    small = small_path(assignor, changed, topics)
    if repaired_counts_suffice(assignor, changed, topics):
        assert small is not None
    if small is not None:
        assert_same(small, reference, changed)


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False))
def test_greedy_peak_and_owners_match_the_numpy_greedy(rng):
    # The tolerance check rests on the greedy peak: compare it (and the owners) on their own, since
    # a wrong peak only shows in an answer when it flips a decision.
    names, meta = random_topics(rng)
    spec = random_members(rng, names)
    try:
        model = Model(spec, TopicDescriber(meta))
    except PartitionAssignorError:
        return
    if not model.total:
        return
    m_count = len(model.member_ids)
    owner = greedy(model)
    peak = int(assigned_lag(owner, model.lag, m_count).max())
    lags = [lag.tolist() for lag in model.lags]
    subscribers = [subs.tolist() for subs in model.subscribers]
    assert _greedy(m_count, subscribers, model.counts, lags, False) == peak
    lists = _greedy(m_count, subscribers, model.counts, lags, True)
    for t, per_member in enumerate(lists):
        own = owner[model.offsets[t] : model.offsets[t + 1]].tolist()
        expected = [[p for p, o in enumerate(own) if o == m] for m in range(m_count)]
        assert [sorted(parts) for parts in per_member] == expected
    if model.homogeneous:
        assert _peak(m_count, model.counts, lags) == peak


# ---------------------------------------------------------------------------------------------
# Examples


def group(*members, current=None):
    current = current or {}
    return GroupSpec.of({m: MemberSubscription(frozenset(ts), assignment=current.get(m, {})) for m, ts in members})


def test_kafka_5337_worked_example():
    topics = TopicDescriber({"t0": TopicMetadata(3, lags=(100_000, 50_000, 60_000))})
    spec = group(("C0", ["t0"]), ("C1", ["t0"]))
    assert check(LagAssignor(), spec, topics) == {"C0": {"t0": (0,)}, "C1": {"t0": (1, 2)}}


def test_previous_result_comes_back_as_the_same_dicts():
    topics = TopicDescriber({f"t{i}": TopicMetadata(10, lags=tuple((i * 31 + p * 17) % 97 for p in range(10)))
                             for i in range(2)})
    spec = group(*[(f"m{i}", ["t0", "t1"]) for i in range(8)])
    first = check(LagAssignor(), spec, topics)
    again = with_assignments(spec, first)
    result = check(LagAssignor(), again, topics)
    assert result == first and all(result[m] is first[m] for m in first)


def test_unclean_members_get_new_dicts_and_clean_ones_keep_theirs():
    # B lists its partitions as a list and an unknown topic: it keeps its partitions, in a new dict.
    topics = TopicDescriber({"t": TopicMetadata(4, lags=(4, 3, 2, 1))})
    current = {"A": {"t": (0, 3)}, "B": {"t": [1, 2], "ghost": (0,)}}
    spec = group(("A", ["t"]), ("B", ["t"]), current=current)
    result = check(LagAssignor(), spec, topics)
    assert result == {"A": {"t": (0, 3)}, "B": {"t": (1, 2)}}
    assert result["A"] is current["A"] and result["B"] is not current["B"]


def test_counts_are_repaired_as_on_the_numpy_path():
    topics = TopicDescriber({"t": TopicMetadata(6, lags=(5,) * 6)})
    # C joins: A and B each shed the partition whose lag is nearest their excess over the mean
    # (all equal: the lowest id), and C takes them.
    current = {"A": {"t": (0, 1, 2)}, "B": {"t": (3, 4, 5)}}
    joined = group(("A", ["t"]), ("B", ["t"]), ("C", ["t"]), current=current)
    assert check(LagAssignor(), joined, topics) == {"A": {"t": (1, 2)}, "B": {"t": (4, 5)}, "C": {"t": (0, 3)}}
    # Partition 5 has no owner: it goes to the lighter member, and A keeps its own dict.
    current = {"A": {"t": (0, 1, 2)}, "B": {"t": (3, 4)}}
    uncovered = group(("A", ["t"]), ("B", ["t"]), current=current)
    result = check(LagAssignor(), uncovered, topics)
    assert result == {"A": {"t": (0, 1, 2)}, "B": {"t": (3, 4, 5)}}
    assert result["A"] is current["A"] and result["B"] is not current["B"]


def test_lag_to_repair_is_left_to_the_numpy_path():
    skewed = TopicDescriber({"t": TopicMetadata(4, lags=(100, 100, 1, 1))})
    heavy = group(("A", ["t"]), ("B", ["t"]), current={"A": {"t": (0, 1)}, "B": {"t": (2, 3)}})
    assert check(LagAssignor(), heavy, skewed) is None  # lag to repair


def test_dropped_entries_are_noticed():
    topics = TopicDescriber({"t": TopicMetadata(2, lags=(3, 1)), "u": TopicMetadata(1, lags=(1,))})
    # A negative id is dropped, not read from the end: partition 1 has no owner.
    negative = group(("A", ["t"]), ("B", ["t"]), current={"A": {"t": (-1,)}, "B": {"t": (0,)}})
    assert check(LagAssignor(), negative, topics) == {"A": {"t": (1,)}, "B": {"t": (0,)}}
    # An empty tuple makes the member's map not in output form: same partitions, a new dict.
    current = {"A": {"t": (0,), "u": ()}, "B": {"t": (1,), "u": (0,)}}
    empty = group(("A", ["t", "u"]), ("B", ["t", "u"]), current=current)
    result = check(LagAssignor(1), empty, topics)
    assert result == {"A": {"t": (0,)}, "B": {"t": (1,), "u": (0,)}}
    assert result["A"] is not current["A"] and result["B"] is current["B"]
    # A partition listed twice by one member: kept once, in a new dict.
    twice = group(("A", ["t"]), ("B", ["t"]), current={"A": {"t": (0, 0)}, "B": {"t": (1,)}})
    result = check(LagAssignor(), twice, topics)
    assert result == {"A": {"t": (0,)}, "B": {"t": (1,)}}


def test_a_partition_claimed_twice_goes_to_the_first_member():
    # B's claim on 1 loses to A's (member order); what is left is balanced, so nothing moves, but
    # B's map is no longer what it holds.
    topics = TopicDescriber({"t": TopicMetadata(3, lags=(1, 1, 1))})
    current = {"A": {"t": (0, 1)}, "B": {"t": (1, 2)}}
    spec = group(("A", ["t"]), ("B", ["t"]), current=current)
    result = check(LagAssignor(), spec, topics)
    assert result == {"A": {"t": (0, 1)}, "B": {"t": (2,)}}
    assert result["A"] is current["A"] and result["B"] is not current["B"]


def test_entries_for_unsubscribed_topics_are_dropped():
    topics = TopicDescriber({"t": TopicMetadata(2, lags=(2, 1)), "u": TopicMetadata(1, lags=(5,))})
    # A does not subscribe to u: its claim on u0 is dropped, and B's stands.
    current = {"A": {"t": (0,), "u": (0,)}, "B": {"t": (1,), "u": (0,)}}
    spec = group(("A", ["t"]), ("B", ["t", "u"]), current=current)
    result = check(LagAssignor(1), spec, topics)
    assert result == {"A": {"t": (0,)}, "B": {"t": (1,), "u": (0,)}}
    assert result["A"] is not current["A"] and result["B"] is current["B"]
    # Only A claims u0: it is unowned, and goes to B, u's only subscriber.
    alone = group(("A", ["t"]), ("B", ["t", "u"]), current={"A": {"t": (0,), "u": (0,)}, "B": {"t": (1,)}})
    assert check(LagAssignor(1), alone, topics) == {"A": {"t": (0,)}, "B": {"t": (1,), "u": (0,)}}


def test_drift_within_tolerance_is_kept_and_beyond_it_is_not():
    current = {"A": {"t": (0, 1)}, "B": {"t": (2, 3)}}
    spec = group(("A", ["t"]), ("B", ["t"]), current=current)
    drifted = TopicDescriber({"t": TopicMetadata(4, lags=(12, 10, 10, 10))})  # A at 22, greedy peak 22
    assert check(LagAssignor(0), spec, drifted) == current
    shifted = TopicDescriber({"t": TopicMetadata(4, lags=(30, 10, 10, 10))})  # A at 40, greedy peak 40
    assert check(LagAssignor(0), spec, shifted) == current
    worse = TopicDescriber({"t": TopicMetadata(4, lags=(30, 20, 10, 10))})  # A at 50, greedy peak 40
    assert check(LagAssignor(0), spec, worse) is None
    assert check(LagAssignor(0.25), spec, worse) == current


@pytest.mark.parametrize("lags", [("x", 1), (1, None), (object(), 2), "ab"])
def test_bad_lags_fail_as_on_the_numpy_path(lags):
    topics = TopicDescriber({"t": TopicMetadata(2, lags=lags)})
    for spec in (group(("a", ["t"])), group(("a", ["t"]), current={"a": {"t": (0, 1)}})):
        with pytest.raises(PartitionAssignorError, match="^partition lags must be integers$"):
            small_path(LagAssignor(), spec, topics)
        with pytest.raises(PartitionAssignorError, match="^partition lags must be integers$"):
            numpy_path(LagAssignor(), spec, topics)


@pytest.mark.parametrize("lags", [(1.9, 7), (True, False), (1 << 64, -(1 << 64)), (INT64_MAX, INT64_MAX)])
def test_odd_but_readable_lags_are_read_as_on_the_numpy_path(lags):
    topics = TopicDescriber({"t": TopicMetadata(3, lags=lags), "u": TopicMetadata(2, lags=(INT64_MAX, 1))})
    spec = group(("a", ["t", "u"]), ("b", ["t", "u"]))
    assert check(LagAssignor(), spec, topics) is not None


def test_numpy_ints_are_read_as_on_the_numpy_path():
    lags = np.array([5, 1, 9, 3, 7, 2], dtype=np.int64)
    topics = TopicDescriber({"t": TopicMetadata(6, lags=lags)})
    spec = group(("A", ["t"]), ("B", ["t"]), ("C", ["t"]))
    first = check(LagAssignor(), spec, topics)
    assert first is not None
    as_numpy = {m: {t: tuple(np.int64(p) for p in ps) for t, ps in a.items()} for m, a in first.items()}
    again = with_assignments(spec, as_numpy)
    assert check(LagAssignor(), again, topics) == first


def test_partition_ids_that_are_not_ints_are_read_as_on_the_numpy_path():
    topics = TopicDescriber({"t": TopicMetadata(4, lags=(1, 2, 3, 4))})
    # Every id converts, so (0.0, 1.0) is a claim on 0 and 1 (in a member that is not in output form).
    floats = group(("A", ["t"]), ("B", ["t"]), current={"A": {"t": (0.0, 3.0)}, "B": {"t": (1, 2)}})
    assert check(LagAssignor(1), floats, topics) == {"A": {"t": (0, 3)}, "B": {"t": (1, 2)}}
    # One id does not convert: the numpy path then drops every id that is not a plain int.
    mixed = group(("A", ["t"]), ("B", ["t"]), current={"A": {"t": (0.0, 3.0)}, "B": {"t": (1, 2), "u": ("x",)}})
    # 0 and 3 are unowned and go to A, which then holds what it listed, in a new dict.
    assert check(LagAssignor(1), mixed, topics) == {"A": {"t": (0, 3)}, "B": {"t": (1, 2)}}
    assert fresh_for_the_model(group(("A", ["t"]), current={"A": {"t": ("x", 1.0)}}), topics)


def test_entries_that_are_not_collections_are_left_to_the_numpy_path():
    topics = TopicDescriber({"t": TopicMetadata(2)})
    spec = group(("A", ["t"]), current={"A": {"t": 1}})
    assert small_path(LagAssignor(), spec, topics) is None
    with pytest.raises(TypeError):
        numpy_path(LagAssignor(), spec, topics)


def test_size_limits():
    topics = TopicDescriber({"t": TopicMetadata(SMALL_PARTITIONS), "u": TopicMetadata(1)})
    assert check(LagAssignor(), group(("a", ["t"])), topics) is not None
    assert check(LagAssignor(), group(("a", ["t", "u"])), topics) is None
    many = group(*[(f"m{i:03d}", ["u"]) for i in range(SMALL_MEMBERS + 1)])
    assert check(LagAssignor(), many, topics) is None
    assert check(LagAssignor(), group(*[(f"m{i:03d}", ["u"]) for i in range(SMALL_MEMBERS)]), topics) is not None


def test_groups_without_partitions():
    topics = TopicDescriber({"empty": TopicMetadata(0)})
    spec = group(("a", ["empty", "ghost"]), ("b", []), current={"a": {"empty": (0,)}})
    result = check(LagAssignor(), spec, topics)
    assert result == {"a": {}, "b": {}} and result["a"] is not spec.members["a"].assignment
    assert check(LagAssignor(), GroupSpec.of({}), topics) == {}


def test_assign_takes_the_small_path_and_falls_back_to_arrays():
    topics = TopicDescriber({"t": TopicMetadata(6, lags=(50, 1, 1, 1, 1, 1))})
    spec = GroupSpec.of({m: MemberSubscription(frozenset({"t"})) for m in ("a", "b")})
    assignor = LagAssignor()
    fresh = assignor.assign(spec, topics)
    assert fresh == small_path(assignor, spec, topics) == numpy_path(assignor, spec, topics)
    # b leaves its partitions to a joiner: a count repair, which both paths make alike
    moved = GroupSpec.of({"a": MemberSubscription(frozenset({"t"}), assignment=fresh["a"]),
                          "c": MemberSubscription(frozenset({"t"}))})
    assert assignor.assign(moved, topics) == small_path(assignor, moved, topics) == numpy_path(assignor, moved, topics)
    # a holds 91 of the lag against a greedy peak of 52: a lag repair, which only the arrays do
    skewed = TopicDescriber({"t": TopicMetadata(6, lags=(50, 40, 1, 1, 1, 1))})
    heavy = GroupSpec.of({"a": MemberSubscription(frozenset({"t"}), assignment={"t": (0, 1, 2)}),
                          "b": MemberSubscription(frozenset({"t"}), assignment={"t": (3, 4, 5)})})
    assert small_path(assignor, heavy, skewed) is None
    result = assignor.assign(heavy, skewed)
    assert result == numpy_path(assignor, heavy, skewed) and result["a"] != {"t": (0, 1, 2)}

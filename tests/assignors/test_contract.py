"""The contract every built-in assignor keeps, checked with random group specs.

Each subscribed, known partition goes to exactly one subscriber; members get only what they
subscribe to; every member appears; partitions are ascending tuples; the result does not depend
on the order in which members or topics were inserted into the input mappings.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from cohort import assignors
from cohort.assignors import GroupSpec, MemberSubscription, TopicDescriber, TopicMetadata

BUILTINS = ("uniform", "range", "lag")
RACKS = ("a", "b", "c")


@st.composite
def groups(draw):
    """A random group: topics with partitions, racks and lags; members with subscriptions and a valid current assignment."""
    n_topics = draw(st.integers(1, 5))
    topics = {}
    for t in range(n_topics):
        count = draw(st.integers(0, 12))
        racks = ()
        if draw(st.booleans()):
            racks = tuple(frozenset(draw(st.sets(st.sampled_from(RACKS), min_size=1))) for _ in range(count))
        lags = tuple(draw(st.lists(st.integers(0, 10**6), min_size=count, max_size=count))) if draw(st.booleans()) else None
        topics[f"topic-{t}"] = TopicMetadata(count, racks, lags)
    known = sorted(topics)
    member_ids = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=8, unique=True))
    owner: dict[tuple[str, int], str] = {}
    members = {}
    for m in member_ids:
        subscribed = draw(st.sets(st.sampled_from(known + ["ghost"]), min_size=1))
        current: dict[str, list[int]] = {}
        for t in sorted(subscribed & set(known)):
            for p in range(topics[t].num_partitions):
                if (t, p) not in owner and draw(st.integers(0, 3)) == 0:
                    owner[(t, p)] = m
                    current.setdefault(t, []).append(p)
        members[m] = MemberSubscription(
            subscribed_topic_ids=frozenset(subscribed),
            rack_id=draw(st.sampled_from((None,) + RACKS)),
            instance_id=draw(st.sampled_from((None, f"i-{m}"))),
            assignment={t: tuple(ps) for t, ps in current.items()},
        )
    return members, topics


def _run(name, members, topics):
    return assignors.get(name).assign(GroupSpec.of(members), TopicDescriber(topics))


def _check_contract(result, members, topics):
    assert set(result) == set(members)
    seen: dict[tuple[str, int], str] = {}
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert topic_id in members[member_id].subscribed_topic_ids, "member got a topic it does not subscribe to"
            assert isinstance(partitions, tuple) and len(partitions) > 0
            assert list(partitions) == sorted(set(partitions))
            for p in partitions:
                assert 0 <= p < topics[topic_id].num_partitions
                assert (topic_id, p) not in seen, f"{topic_id}-{p} owned by {seen[(topic_id, p)]} and {member_id}"
                seen[(topic_id, p)] = member_id
    subscribed = set().union(*(m.subscribed_topic_ids for m in members.values()))
    expected = {(t, p) for t in subscribed if t in topics for p in range(topics[t].num_partitions)}
    assert set(seen) == expected, "some subscribed partition is unassigned"


def _reordered(members, topics):
    return dict(reversed(list(members.items()))), dict(reversed(list(topics.items())))


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(BUILTINS))
def test_every_builtin_keeps_the_contract(group, name):
    members, topics = group
    result = _run(name, members, topics)
    _check_contract(result, members, topics)
    assert _run(name, *_reordered(members, topics)) == result, "output depends on input order"


@settings(max_examples=60, deadline=None)
@given(groups(), st.sampled_from(BUILTINS))
def test_assignors_are_pure(group, name):
    members, topics = group
    before = {m: dict(s.assignment) for m, s in members.items()}
    first = _run(name, members, topics)
    assert {m: dict(s.assignment) for m, s in members.items()} == before, "the assignor mutated its input"
    assert _run(name, members, topics) == first


def test_an_empty_group_gets_an_empty_assignment():
    for name in BUILTINS:
        assert _run(name, {}, {"t": TopicMetadata(3)}) == {}



def test_a_describer_looks_topics_up_by_the_hashes_it_is_given():
    """`partition_counts_hashed` answers as `partition_counts` does (unknown topics -1), with ids
    equal to the known ones but other objects too; `lookup_hashed` takes any mapping."""
    from types import MappingProxyType

    from cohort.assignors.api import lookup_hashed

    known = [uuid.UUID(int=i * 7919) for i in range(1, 6)]
    asked = [known[3], uuid.UUID(int=12345), known[0], uuid.UUID(int=known[1].int)]
    hashes = list(map(hash, asked))
    api = TopicDescriber({t: TopicMetadata(i + 1) for i, t in enumerate(known)})
    assert api.partition_counts_hashed(asked, hashes) == api.partition_counts(asked) == [4, -1, 1, 2]
    plain = {t: str(t) for t in known}
    expected = [str(known[3]), None, str(known[0]), str(known[1])]
    assert lookup_hashed(plain, asked, hashes) == lookup_hashed(MappingProxyType(plain), asked, hashes) == expected

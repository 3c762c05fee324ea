"""The `simple` share-group assignor: Kafka's sharing and balance rules, as properties."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.assignors.simple import assign

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def owners(result):
    out = {}
    for member, topics in result.items():
        for t, ps in topics.items():
            for p in ps:
                out.setdefault((t, p), []).append(member)
    return out


def test_more_members_than_partitions_share_them():
    result = assign({m: frozenset([T1]) for m in "abc"}, {T1: (0,)}, {})
    assert result == {m: {T1: (0,)} for m in "abc"}


def test_kafkas_examples():
    # 3 members, 2 partitions: sharing 2, slots 2/1/1
    result = assign({m: frozenset([T1]) for m in "abc"}, {T1: (0, 1)}, {})
    assert sorted(sum(len(ps) for ps in r.values()) for r in result.values()) == [1, 1, 2]
    assert all(len(ms) == 2 for ms in owners(result).values())
    # 2 members, 4 partitions: 2 each, nothing shared
    result = assign({m: frozenset([T1]) for m in "ab"}, {T1: (0, 1, 2, 3)}, {})
    assert [len(result[m][T1]) for m in "ab"] == [2, 2]
    assert all(len(ms) == 1 for ms in owners(result).values())


def test_existing_assignments_are_kept_where_they_fit():
    current = {"a": {T1: (2, 3)}, "b": {T1: (0, 1)}}
    assert assign({m: frozenset([T1]) for m in "ab"}, {T1: (0, 1, 2, 3)}, current) == current
    # a newcomer takes from the member with too many
    result = assign({m: frozenset([T1]) for m in "abc"}, {T1: (0, 1, 2, 3)}, current)
    assert len(owners(result)) == 4 and sorted(len(r[T1]) for r in result.values()) == [1, 1, 2]
    kept = sum(len(set(result[m][T1]) & set(current[m][T1])) for m in "ab")
    assert kept >= 3


def test_uninitialized_or_unsubscribed_partitions_are_not_assigned():
    result = assign({"a": frozenset([T1]), "b": frozenset([T2])}, {T1: (0, 1), T2: ()}, {})
    assert result == {"a": {T1: (0, 1)}, "b": {}}


def test_no_members_or_no_partitions():
    assert assign({}, {T1: (0,)}, {}) == {}
    assert assign({"a": frozenset()}, {T1: (0,)}, {}) == {"a": {}}


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.data())
def test_homogeneous_rules(n_members, n_partitions, data):
    members = [f"m{i:02d}" for i in range(n_members)]
    parts = tuple(range(n_partitions))
    current = data.draw(st.dictionaries(st.sampled_from(members), st.lists(st.integers(0, 15), max_size=6)
                                        .map(lambda ps: {T1: tuple(sorted(set(ps)))})))
    result = assign({m: frozenset([T1]) for m in members}, {T1: parts}, current)
    sharing = -(-n_members // n_partitions)
    by_partition = owners(result)
    # every partition is owned, by at most the desired sharing, never twice by one member
    assert set(by_partition) == {(T1, p) for p in parts}
    assert all(1 <= len(ms) <= sharing and len(set(ms)) == len(ms) for ms in by_partition.values())
    # the members' loads differ by at most one
    loads = [sum(len(ps) for ps in result[m].values()) for m in members]
    assert max(loads) - min(loads) <= 1
    # the answer does not depend on the order the members come in
    assert assign({m: frozenset([T1]) for m in reversed(members)}, {T1: parts}, current) == result


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text("abcdef", min_size=1, max_size=2), st.sets(st.sampled_from([T1, T2]), min_size=1),
                       min_size=1, max_size=8), st.integers(1, 6), st.integers(1, 6))
def test_heterogeneous_members_get_only_their_topics_and_every_partition_is_owned(subs, p1, p2):
    partitions = {T1: tuple(range(p1)), T2: tuple(range(p2))}
    result = assign({m: frozenset(ts) for m, ts in subs.items()}, partitions, {})
    for m, topics in result.items():
        assert set(topics) <= subs[m]
    wanted = {(t, p) for ts in subs.values() for t in ts for p in partitions[t]}
    assert set(owners(result)) == wanted

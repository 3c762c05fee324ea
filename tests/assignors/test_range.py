"""RangeAssignor: the javadoc's examples, KIP-881 rack awareness, and properties on random groups."""

from __future__ import annotations

import random
import sys
from types import MappingProxyType
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.assignors import _range_racks, registry
from cohort.assignors import range as range_module
from cohort.assignors._range_racks import needs_racks, rack_layout, rack_owners, rack_runs_small
from cohort.assignors.api import GroupSpec, MemberSubscription, SubscriptionType, TopicDescriber, TopicMetadata
from cohort.assignors.range import RangeAssignor

RANGE = RangeAssignor()


def member(*topics, instance_id=None, rack=None):
    return MemberSubscription(frozenset(topics), rack_id=rack, instance_id=instance_id)


def assign(members, topics):
    return RANGE.assign(GroupSpec.of(members), TopicDescriber(topics))


def racks(*per_partition):
    return tuple(frozenset(r) for r in per_partition)


def test_registered_under_range():
    assert registry.get("range").name == "range"
    assert isinstance(registry.get("range"), RangeAssignor)


def test_javadoc_example_two_consumers_two_topics():
    topics = {"t0": TopicMetadata(3), "t1": TopicMetadata(3)}
    result = assign({"C0": member("t0", "t1"), "C1": member("t0", "t1")}, topics)
    assert result == {"C0": {"t0": (0, 1), "t1": (0, 1)}, "C1": {"t0": (2,), "t1": (2,)}}


def test_javadoc_rolling_bounce_reshuffles_dynamic_members():
    # C0 -> C3 and C1 -> C2 after a bounce: member-id order flips, and so does the assignment.
    topics = {"t0": TopicMetadata(3), "t1": TopicMetadata(3)}
    result = assign({"C3": member("t0", "t1"), "C2": member("t0", "t1")}, topics)
    assert result == {"C2": {"t0": (0, 1), "t1": (0, 1)}, "C3": {"t0": (2,), "t1": (2,)}}


def test_javadoc_static_members_keep_their_ranges_across_a_bounce():
    topics = {"t0": TopicMetadata(3), "t1": TopicMetadata(3)}
    before = assign({"C0": member("t0", "t1", instance_id="I0"), "C1": member("t0", "t1", instance_id="I1")}, topics)
    after = assign({"C3": member("t0", "t1", instance_id="I0"), "C2": member("t0", "t1", instance_id="I1")}, topics)
    assert before == {"C0": {"t0": (0, 1), "t1": (0, 1)}, "C1": {"t0": (2,), "t1": (2,)}}
    assert after == {"C3": {"t0": (0, 1), "t1": (0, 1)}, "C2": {"t0": (2,), "t1": (2,)}}


def test_static_members_come_before_dynamic_ones():
    topics = {"t": TopicMetadata(5)}
    members = {"A": member("t"), "Z": member("t", instance_id="static-1"), "M": member("t", instance_id="static-0")}
    result = assign(members, topics)
    assert result == {"M": {"t": (0, 1)}, "Z": {"t": (2, 3)}, "A": {"t": (4,)}}


def test_an_empty_instance_id_is_still_static():
    # Range order falls back to member ids only when no member has an instance id at all.
    topics = {"t": TopicMetadata(3)}
    result = assign({"A": member("t"), "B": member("t", instance_id="")}, topics)
    assert result == {"B": {"t": (0, 1)}, "A": {"t": (2,)}}
    assert assign({"B": member("t"), "A": member("t")}, topics) == {"A": {"t": (0, 1)}, "B": {"t": (2,)}}


def test_heterogeneous_ranges_are_per_topic_subscribers():
    topics = {"a": TopicMetadata(4), "b": TopicMetadata(3)}
    result = assign({"m0": member("a"), "m1": member("a", "b"), "m2": member("b")}, topics)
    assert result == {"m0": {"a": (0, 1)}, "m1": {"a": (2, 3), "b": (0, 1)}, "m2": {"b": (2,)}}


def test_unknown_and_empty_topics_are_ignored_and_every_member_appears():
    topics = {"t": TopicMetadata(1), "empty": TopicMetadata(0)}
    result = assign({"a": member("t", "empty", "ghost"), "b": member("t"), "c": member("ghost"), "d": member()}, topics)
    assert result == {"a": {"t": (0,)}, "b": {}, "c": {}, "d": {}}


def test_no_members():
    assert assign({}, {"t": TopicMetadata(3)}) == {}


def test_rack_aware_co_partitioning_example():
    # KIP-881 / javadoc: partition p of every topic has its replica on rack p; partition p of all
    # topics goes to the consumer on rack p, although plain range would cross racks for every one.
    layout = racks("a", "b", "c")
    topics = {"t0": TopicMetadata(3, layout), "t1": TopicMetadata(3, layout), "t2": TopicMetadata(3, layout)}
    members = {"C0": member("t0", "t1", "t2", rack="c"), "C1": member("t0", "t1", "t2", rack="a"),
               "C2": member("t0", "t1", "t2", rack="b")}
    result = assign(members, topics)
    assert result == {
        "C0": {"t0": (2,), "t1": (2,), "t2": (2,)},
        "C1": {"t0": (0,), "t1": (0,), "t2": (0,)},
        "C2": {"t0": (1,), "t1": (1,), "t2": (1,)},
    }
    members_without_racks = {m: member("t0", "t1", "t2") for m in members}
    assert assign(members_without_racks, topics)["C0"] == {"t0": (0,), "t1": (0,), "t2": (0,)}


def test_co_partitioning_matches_on_racks_common_to_all_topics():
    # Per partition, only the racks hosting it in *every* topic count: {a,b} & {b} = {b} for both
    # partitions. The b consumer takes partition 0 of both topics, which fills its quota of one, so
    # partition 1 of both goes to the a consumer: co-partitioning and balance before alignment.
    topics = {"t0": TopicMetadata(2, racks("ab", "b")), "t1": TopicMetadata(2, racks("b", "ab"))}
    result = assign({"C0": member("t0", "t1", rack="a"), "C1": member("t0", "t1", rack="b")}, topics)
    assert result == {"C0": {"t0": (1,), "t1": (1,)}, "C1": {"t0": (0,), "t1": (0,)}}


def test_single_topic_rack_matching_keeps_range_counts():
    topics = {"t": TopicMetadata(6, racks("b", "b", "a", "a", "b", "a"))}
    result = assign({"C0": member("t", rack="a"), "C1": member("t", rack="b")}, topics)
    assert result == {"C0": {"t": (2, 3, 5)}, "C1": {"t": (0, 1, 4)}}


def test_balance_wins_over_rack_alignment():
    # Five of six partitions live only on rack a, but each consumer still gets exactly three.
    topics = {"t": TopicMetadata(6, racks("a", "a", "a", "a", "a", "b"))}
    result = assign({"C0": member("t", rack="a"), "C1": member("t", rack="b")}, topics)
    assert result == {"C0": {"t": (0, 1, 2)}, "C1": {"t": (3, 4, 5)}}


def test_racks_ignored_when_every_partition_has_the_same_racks():
    topics = {"t": TopicMetadata(4, racks("ab", "ab", "ab", "ab"))}
    result = assign({"C0": member("t", rack="b"), "C1": member("t", rack="a")}, topics)
    assert result == {"C0": {"t": (0, 1)}, "C1": {"t": (2, 3)}}


def test_racks_ignored_when_no_member_rack_hosts_a_replica():
    topics = {"t": TopicMetadata(4, racks("a", "b", "a", "b"))}
    result = assign({"C0": member("t", rack="x"), "C1": member("t", rack="y")}, topics)
    assert result == {"C0": {"t": (0, 1)}, "C1": {"t": (2, 3)}}


def test_racks_on_one_group_leave_other_groups_plain():
    topics = {"racked": TopicMetadata(2, racks("b", "a")), "plain": TopicMetadata(3)}
    result = assign({"C0": member("racked", "plain", rack="a"), "C1": member("racked", "plain", rack="b")}, topics)
    assert result == {"C0": {"racked": (1,), "plain": (0, 1)}, "C1": {"racked": (0,), "plain": (2,)}}


def test_co_partitioning_wins_over_rack_alignment():
    # Same subscribers and partition count: one group. The rackless topic shares no rack with the
    # racked one, so no partition can be matched in both, and the pair stays plain range.
    topics = {"racked": TopicMetadata(2, racks("b", "a")), "plain": TopicMetadata(2)}
    result = assign({"C0": member("racked", "plain", rack="a"), "C1": member("racked", "plain", rack="b")}, topics)
    assert result == {"C0": {"plain": (0,), "racked": (0,)}, "C1": {"plain": (1,), "racked": (1,)}}


def test_rackless_consumer_matches_every_partition():
    # Kafka: a consumer without a rack "matches" everything, so it fills its quota first in order.
    topics = {"t": TopicMetadata(4, racks("b", "b", "a", "a"))}
    result = assign({"C0": member("t", rack="a"), "C1": member("t")}, topics)
    assert result == {"C0": {"t": (2, 3)}, "C1": {"t": (0, 1)}}


# ---------------------------------------------------------------------------------------------
# Properties

RACKS = ["r0", "r1", "r2"]


@st.composite
def groups(draw, with_racks=True):
    n_topics = draw(st.integers(1, 5))
    topics = {}
    for i in range(n_topics):
        if i and draw(st.booleans()):  # a copy of t0: co-partitioned, racks in common
            topics[f"t{i}"] = topics["t0"]
            continue
        n = draw(st.sampled_from([0, 1, 2, 3, 4, 6, 7, 12]))
        layout = ()
        if with_racks and draw(st.booleans()):
            layout = tuple(frozenset(draw(st.sets(st.sampled_from(RACKS), max_size=2))) for _ in range(n))
        topics[f"t{i}"] = TopicMetadata(n, layout)
    names = sorted(topics) + ["unknown"]
    homogeneous = draw(st.booleans())
    shared = frozenset(draw(st.sets(st.sampled_from(names), min_size=1)))
    members = {}
    for i in range(draw(st.integers(0, 7))):
        subs = shared if homogeneous else frozenset(draw(st.sets(st.sampled_from(names))))
        instance = draw(st.sampled_from([None, None, f"i{i}", f"j{7 - i}"]))
        rack = draw(st.sampled_from([None, *RACKS])) if with_racks else None
        members[f"m{draw(st.integers(0, 99)):02d}-{i}"] = MemberSubscription(subs, rack_id=rack, instance_id=instance)
    return members, topics


def range_key(members, m):
    inst = members[m].instance_id
    return (0, inst, m) if inst is not None else (1, "", m)


def check_contract(members, topics, result):
    assert list(result) == sorted(members)
    owners = {}
    for m, assignment in result.items():
        for t, parts in assignment.items():
            assert t in members[m].subscribed_topic_ids
            assert isinstance(parts, tuple) and parts and list(parts) == sorted(set(parts))
            for p in parts:
                assert (t, p) not in owners
                owners[t, p] = m
    for t, meta in topics.items():
        subs = sorted((m for m in members if t in members[m].subscribed_topic_ids), key=lambda m: range_key(members, m))
        expected = {(t, p) for p in range(meta.num_partitions)} if subs else set()
        assert {k for k in owners if k[0] == t} == expected
        if subs:
            quota, extra = divmod(meta.num_partitions, len(subs))
            counts = sorted((len(result[m].get(t, ())) for m in subs), reverse=True)
            assert counts == [quota + 1] * extra + [quota] * (len(subs) - extra)
    assert not any(k[0] not in topics for k in owners)


@settings(max_examples=150, deadline=None)
@given(groups(with_racks=False))
def test_plain_range_is_exactly_kafkas_formula(group):
    members, topics = group
    result = assign(members, topics)
    check_contract(members, topics, result)
    for t, meta in topics.items():
        subs = sorted((m for m in members if t in members[m].subscribed_topic_ids), key=lambda m: range_key(members, m))
        start = 0
        for i, m in enumerate(subs):
            size = meta.num_partitions // len(subs) + (1 if i < meta.num_partitions % len(subs) else 0)
            assert result[m].get(t, ()) == tuple(range(start, start + size))
            start += size


@settings(max_examples=200, deadline=None)
@given(groups())
def test_the_homogeneous_shortcut_answers_as_the_general_path(group):
    # A spec marked heterogeneous takes the general path whatever its members subscribe to.
    members, topics = group
    spec = GroupSpec.of(members)
    general = RANGE.assign(GroupSpec(members, SubscriptionType.HETEROGENEOUS), TopicDescriber(topics))
    assert RANGE.assign(spec, TopicDescriber(topics)) == general
    assert list(general) == sorted(members)


@settings(max_examples=150, deadline=None)
@given(groups())
def test_rack_aware_keeps_contract_and_co_partitioning(group):
    members, topics = group
    result = assign(members, topics)
    check_contract(members, topics, result)
    # Topics with the same subscribers and partition count are co-partitioned.
    by_key = {}
    for t, meta in topics.items():
        subs = frozenset(m for m in members if t in members[m].subscribed_topic_ids)
        if subs and meta.num_partitions:
            by_key.setdefault((subs, meta.num_partitions), []).append(t)
    for (subs, _), ts in by_key.items():
        for m in subs:
            assert len({result[m].get(t, ()) for t in ts}) == 1


@settings(max_examples=100, deadline=None)
@given(groups(), st.randoms(use_true_random=False))
def test_output_ignores_dict_order(group, rnd):
    members, topics = group
    items = list(members.items())
    rnd.shuffle(items)
    shuffled = {m: MemberSubscription(frozenset(sorted(s.subscribed_topic_ids, key=lambda _: rnd.random())),
                                      s.rack_id, s.instance_id) for m, s in items}
    topic_items = list(topics.items())
    rnd.shuffle(topic_items)
    first = assign(members, topics)
    second = assign(shuffled, dict(topic_items))
    assert first == second
    assert [list(d.items()) for d in first.values()] == [list(second[m].items()) for m in first]


def reference_rack_range(members, topics):
    """A direct transcription of KIP-881's rules, O(n * k) per topic, for comparison."""
    result = {m: {} for m in sorted(members)}
    order = sorted(members, key=lambda m: range_key(members, m))
    groups_ = {}
    for t in sorted(topics):
        n = topics[t].num_partitions
        subs = tuple(m for m in order if t in members[m].subscribed_topic_ids)
        if n > 0 and subs:
            groups_.setdefault((subs, n), []).append(t)
    for (subs, n), ts in groups_.items():
        k = len(subs)
        rack = {m: members[m].rack_id for m in subs}
        layouts = [[topics[t].racks[p] if p < len(topics[t].racks) else frozenset() for p in range(n)] for t in ts]

        def needs(layout):
            mine = {r for r in rack.values() if r}
            union = frozenset().union(*layout)
            return bool(mine & union) and any(r != union for r in layout)

        owner = [None] * n
        count = dict.fromkeys(subs, 0)
        extra = [n % k]

        def room(m):
            return max(0, n // k + (1 if extra[0] > 0 else 0) - count[m])

        def give(m, p):
            owner[p] = m
            count[m] += 1
            if count[m] == n // k + 1:
                extra[0] -= 1

        def match(m, p):
            return rack[m] is None or all(rack[m] in layout[p] for layout in layouts)

        if any(needs(layout) for layout in layouts):
            if len(ts) > 1:
                for p in range(n):
                    for m in subs:
                        if room(m) > 0 and match(m, p):
                            give(m, p)
                            break
            else:
                for m in subs:
                    for p in [p for p in range(n) if owner[p] is None and match(m, p)][: room(m)]:
                        give(m, p)
        for m in subs:
            for p in [p for p in range(n) if owner[p] is None][: room(m)]:
                give(m, p)
        for m in subs:
            mine = tuple(p for p in range(n) if owner[p] == m)
            if mine:
                for t in ts:
                    result[m][t] = mine
    return result


@settings(max_examples=150, deadline=None)
@given(groups())
def test_matches_a_direct_transcription_of_the_rules(group):
    members, topics = group
    assert assign(members, topics) == reference_rack_range(members, topics)


def test_many_racks_large_group_matches_reference():
    rnd = random.Random(7)
    topics = {
        f"t{i}": TopicMetadata(40, tuple(frozenset(rnd.sample(["a", "b", "c", "d"], 2)) for _ in range(40)))
        for i in range(3)
    }
    topics["t3"] = TopicMetadata(40, topics["t0"].racks)
    members = {f"m{i:02d}": member("t0", "t1", "t2", "t3", rack=rnd.choice("abcde")) for i in range(11)}
    assert assign(members, topics) == reference_rack_range(members, topics)
    # Co-partitioned pair with two common racks per partition, and some members without a rack.
    members = {f"m{i:02d}": member("t0", "t3", rack=rnd.choice(["a", "b", "c", "d", None])) for i in range(11)}
    assert assign(members, topics) == reference_rack_range(members, topics)


def test_long_runs_beyond_the_cached_ints():
    result = assign({"a": member("t"), "b": member("t"), "c": member("t")}, {"t": TopicMetadata(10_001)})
    assert result["a"]["t"] == tuple(range(0, 3334))
    assert result["b"]["t"] == tuple(range(3334, 6668))
    assert result["c"]["t"] == tuple(range(6668, 10_001))


# ---------------------------------------------------------------------------------------------
# The small-group rack path (`rack_layout` + `rack_runs_small`) against the general one


def general_path(members, topics):
    """The assignment with the small-group rack path switched off (every group takes `rack_owners`)."""
    with patch.object(range_module, "SMALL_SUBSCRIBERS", 0):
        return assign(members, topics)


@st.composite
def small_rack_groups(draw):
    """Pipeline-like groups, widened: uneven and missing racks, empty rack sets, static members,
    up to three co-partitioned topics with their own replica layouts, sometimes a topic without racks."""
    n = draw(st.integers(1, 24))
    rack_pool = draw(st.sampled_from([RACKS, RACKS + ["r3"], ["r0", "r1"]]))
    replica_sets = st.frozensets(st.sampled_from(rack_pool), max_size=3)
    topics = {}
    for i in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(["own", "own", "copy", "none"]))
        if shape == "copy" and topics:
            layout = topics["t0"].racks
        elif shape == "none":
            layout = ()
        else:
            layout = tuple(draw(replica_sets) for _ in range(n))
        topics[f"t{i}"] = TopicMetadata(n, layout)
    subs = frozenset(topics)
    weights = draw(st.lists(st.integers(0, 4), min_size=len(rack_pool) + 2, max_size=len(rack_pool) + 2))
    choices = [r for r, w in zip([None, "elsewhere", *rack_pool], weights) for _ in range(w)] or [None]
    static = draw(st.booleans())
    members = {}
    for i in range(draw(st.integers(1, 17))):
        instance = f"i{draw(st.integers(0, 20)):02d}-{i}" if static and draw(st.booleans()) else None
        rack = draw(st.sampled_from(choices))
        members[f"m{draw(st.integers(0, 99)):02d}-{i}"] = member(*subs, instance_id=instance, rack=rack)
    return members, topics


@settings(max_examples=300, deadline=None)
@given(small_rack_groups())
def test_small_group_rack_path_matches_the_general_path(group):
    members, topics = group
    fast = assign(members, topics)
    general = general_path(members, topics)
    assert fast == general
    assert [list(a.items()) for a in fast.values()] == [list(a.items()) for a in general.values()]
    assert all(type(parts) is tuple for a in fast.values() for parts in a.values())


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 30),
    st.lists(st.sampled_from([None, "r0", "r1", "r2", "x"]), min_size=1, max_size=16),
    st.lists(
        st.lists(st.frozensets(st.sampled_from(RACKS), max_size=3), min_size=30, max_size=30), min_size=1, max_size=3
    ),
    st.booleans(),
)
def test_rack_runs_small_matches_rack_owners(n, sub_racks, layouts, co_partitioned):
    layouts = frozenset(tuple(layout[:n]) for layout in layouts)
    layout = rack_layout(layouts)
    assert layout.needs_racks(sub_racks) == any(needs_racks(sub_racks, racks) for racks in layouts)
    common = [frozenset.intersection(*racks) for racks in zip(*layouts)]
    owned = [[] for _ in sub_racks]
    for p, pos in enumerate(rack_owners(n, sub_racks, common, co_partitioned)):
        owned[pos].append(p)
    assert rack_runs_small(n, sub_racks, layout, co_partitioned) == owned


def test_small_path_fleet_shape_matches_general_path():
    # The pipeline's shape: 2-8 members on three racks, one topic of 20 or two of 10, replicas on two racks.
    rnd = random.Random(11)
    pairs = [frozenset({"rack-a", "rack-b"}), frozenset({"rack-b", "rack-c"}), frozenset({"rack-c", "rack-a"})]
    for _ in range(300):
        n_topics = rnd.choice([1, 2])
        n = 20 // n_topics
        topics = {f"events-{j}": TopicMetadata(n, tuple(rnd.choice(pairs) for _ in range(n))) for j in range(n_topics)}
        static = rnd.random() < 0.3
        members = {
            f"g-m{i:03d}": member(*topics, rack=rnd.choice(["rack-a", "rack-b", "rack-c"]),
                                  instance_id=f"instance-{rnd.randint(0, 99)}" if static else None)
            for i in range(rnd.randint(2, 8))
        }
        result = assign(members, topics)
        assert result == general_path(members, topics)
        check_contract(members, topics, result)


def test_layout_cache_is_bounded_and_keyed_by_content():
    layouts = frozenset({racks("a", "b")})
    first = rack_layout(layouts)
    assert rack_layout(frozenset({racks("a", "b")})) is first  # equal layouts, other objects: same entry
    for i in range(_range_racks._CACHED_LAYOUTS + 10):
        rack_layout(frozenset({(frozenset({f"r{i}"}), frozenset({"x"}))}))
    assert 0 < len(_range_racks._layouts) <= _range_racks._CACHED_LAYOUTS
    big = frozenset({racks(*["a", "b"] * 65), racks(*["b", "a"] * 65)})  # 2 x 130 partitions: not kept
    assert rack_layout(big).set_of == (0,) * 130
    assert big not in _range_racks._layouts


class PerPartitionDescriber:
    """Only the describer protocol: racks one partition at a time, no `partition_racks`."""

    def __init__(self, topics):
        self._inner = TopicDescriber(topics)

    def num_partitions(self, topic_id):
        return self._inner.num_partitions(topic_id)

    def racks_for_partition(self, topic_id, partition):
        return self._inner.racks_for_partition(topic_id, partition)

    def partition_lags(self, topic_id):
        return self._inner.partition_lags(topic_id)


@settings(max_examples=200, deadline=None)
@given(groups(), st.data())
def test_bulk_partition_racks_give_what_per_partition_lookups_give(group, data):
    members, topics = group
    # Some layouts list fewer partitions than the topic has: the missing ones have no racks.
    topics = {t: TopicMetadata(meta.num_partitions, meta.racks[: data.draw(st.integers(0, len(meta.racks)))])
              for t, meta in topics.items()}
    spec = GroupSpec.of(members)
    bulk = RANGE.assign(spec, TopicDescriber(topics))
    one_by_one = RANGE.assign(spec, PerPartitionDescriber(topics))
    assert bulk == one_by_one
    assert [list(a.items()) for a in bulk.values()] == [list(a.items()) for a in one_by_one.values()]


def test_the_plain_group_check_reads_slots_and_anything_else_through_getattr():
    """`all_none` (range's check that no member is static or has a rack) answers as getattr does
    for the assignors' own members, a subclass, any other object, and a class that borrows
    another class's slot descriptor (whose offset would describe another layout)."""
    from cohort.assignors._uniform_common import native

    plain = [MemberSubscription(frozenset({"t"})) for _ in range(3)]
    assert native.all_none(plain, "instance_id", "rack_id") is True
    assert native.all_none(plain + [MemberSubscription(frozenset(), instance_id="")], "instance_id", "rack_id") is False
    assert native.all_none(plain + [MemberSubscription(frozenset(), rack_id="r")], "instance_id", "rack_id") is False

    class Sub(MemberSubscription):
        __slots__ = ("extra",)

    assert native.all_none([Sub(frozenset())], "instance_id", "rack_id") is True
    assert native.all_none([Sub(frozenset(), rack_id="r")], "instance_id", "rack_id") is False

    class Borrowed:
        __slots__ = ("a", "b", "c")
        instance_id = MemberSubscription.instance_id  # a descriptor of another class's layout
        rack_id = None

    odd = Borrowed()
    with pytest.raises(TypeError):  # getattr's own answer, not a read at a foreign offset
        native.all_none([odd], "instance_id", "rack_id")
    with pytest.raises(AttributeError):
        native.all_none([object()], "instance_id", "rack_id")


@settings(max_examples=150, deadline=None)
@given(groups())
def test_copied_run_dicts_give_what_building_each_gives(group):
    """The C `fromkeys_each` (every member's {topic: run} a copy of the first's key table) and
    `copy_with_values` (the output a copy of the members' dict, when they come in member id
    order, as the coordinator keeps them) give what building each dict gives, in the same order."""
    members, topics = group
    for given in (members, dict(sorted(members.items()))):
        spec = GroupSpec.of(given)
        copied = RANGE.assign(spec, TopicDescriber(topics))
        with patch.object(range_module, "native", None):
            built = RANGE.assign(spec, TopicDescriber(topics))
        assert [(m, list(a.items())) for m, a in copied.items()] == [(m, list(a.items())) for m, a in built.items()]
        assert list(given.values()) == [spec.members[m] for m in given]  # the spec's members untouched


def test_copy_with_values_writes_into_a_copy_of_the_template():
    """On CPython 3.11 (the dict layout the module is built with) the output is a copy of the
    template with the values written in; on any other Python it is always NotImplemented, and
    `range` builds the dict itself (the property test above checks that answer)."""
    import gc

    from cohort.assignors._uniform_common import native

    keys = [f"member-{i}" for i in range(6)]
    template = {k: MemberSubscription(frozenset({"t"})) for k in keys}
    subscription = template["member-0"]
    pieces = [{"t": (0,)}, {"t": (1,)}, {"t": (2,)}]
    before = sys.getrefcount(pieces[0]), sys.getrefcount(subscription)
    made = native.copy_with_values(template, keys, pieces)
    if sys.version_info[:2] != (3, 11):
        assert made is NotImplemented and native.copy_with_values({}, [], []) is NotImplemented
        assert (sys.getrefcount(pieces[0]), sys.getrefcount(subscription)) == before
        return
    assert made == {"member-0": {"t": (0,)}, "member-1": {"t": (1,)}, "member-2": {"t": (2,)},
                    "member-3": {}, "member-4": {}, "member-5": {}}
    same = [made[k] is v for k, v in zip(keys, pieces)]
    fresh = made["member-3"] is not made["member-4"]
    assert list(made) == keys and same == [True] * 3 and fresh
    assert gc.is_tracked(made)
    assert template["member-0"] is subscription and len(template) == 6  # the template is as it was
    held = sys.getrefcount(pieces[0]), sys.getrefcount(subscription)
    assert held == (before[0] + 1, before[1])  # each value held once more, the template's as before
    made["member-6"] = {}  # a dict of its own, which grows as any does
    assert "member-6" not in template
    del made
    after = sys.getrefcount(pieces[0])
    assert after == before[0]

    # not a copy to write into: NotImplemented, and the caller builds the dict itself
    assert native.copy_with_values(template, keys[::-1], pieces) is NotImplemented  # another order
    assert native.copy_with_values(template, keys[:5], pieces) is NotImplemented  # other keys
    assert native.copy_with_values(template, keys, pieces * 3) is NotImplemented  # more values than keys
    assert native.copy_with_values(MappingProxyType(template), keys, pieces) is NotImplemented
    holed = dict(template)
    holed["gone"] = None
    del holed["gone"]
    assert native.copy_with_values(holed, keys, pieces) is NotImplemented  # a hole where a key was
    assert native.copy_with_values({}, [], []) == {}
    with pytest.raises(TypeError):
        native.copy_with_values(template, tuple(keys), pieces)


def test_fromkeys_each_is_dict_fromkeys_for_each_value():
    import gc
    import sys
    import uuid

    from cohort.assignors._uniform_common import native

    keys = dict.fromkeys(uuid.UUID(int=i) for i in range(7))
    run, other = (0, 1), (2,)
    values = [run, other, "not a tuple", (3, "not an int"), run]
    before = sys.getrefcount(run)
    made = native.fromkeys_each(keys, values)
    assert made == [dict.fromkeys(keys, v) for v in values]
    assert all(list(d) == list(keys) for d in made)
    assert [d[uuid.UUID(int=3)] is v for d, v in zip(made, values)] == [True] * len(values)
    assert sys.getrefcount(run) == before + 2 * len(keys)  # held by the two dicts, nothing leaked
    # tuples of ints hold no reference that could close a cycle: those dicts are not tracked
    assert [gc.is_tracked(d) for d in made] == [False, False, True, True, False]
    made[0][uuid.UUID(int=0)] = [made]  # a container put in later tracks the dict again
    assert gc.is_tracked(made[0])
    del made
    gc.collect()  # that cycle is found: every dict goes, and every reference to the run with them
    assert sys.getrefcount(run) == before
    # str keys (a table of the unicode kind) and a source dict with a hole where a key was deleted
    names = dict.fromkeys(f"topic-{i}" for i in range(9))
    del names["topic-4"]
    values = [(1,), (2, 3), ["a list"], (4,)]
    made = native.fromkeys_each(names, values)
    assert made == [dict.fromkeys(names, v) for v in values]
    assert [list(d) for d in made] == [list(names)] * len(values)
    assert [gc.is_tracked(d) for d in made] == [False, False, True, False]
    made[1]["topic-9"] = (5,)  # each copy is a dict of its own, resizable as any
    assert list(made[1].values())[-2:] == [(2, 3), (5,)] and "topic-9" not in made[2]
    assert native.fromkeys_each({}, [(1,), (2,)]) == [{}, {}]
    assert native.fromkeys_each(keys, ()) == []
    with pytest.raises(TypeError):
        native.fromkeys_each(keys, 3)
    with pytest.raises(TypeError):
        native.fromkeys_each([1, 2], [(1,)])

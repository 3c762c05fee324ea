"""The pure parts of a cohort cluster's membership: how an instance describes itself in its
member's client id, and the view every instance builds from the group's members."""

from hypothesis import given
from hypothesis import strategies as st

from cohort.upstream.membership import ClusterView, Instance, membership_group

hosts = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,30}", fullmatch=True)
ports = st.integers(1, 65535)
instances = st.builds(Instance, st.integers(0, 2**31 - 1), hosts, ports,
                      st.dictionaries(st.integers(0, 2**31 - 1), ports, max_size=5),
                      st.uuids().map(lambda u: u.hex), st.booleans())


@given(instances)
def test_an_instance_reads_back_from_its_client_id(instance):
    assert Instance.parse(instance.client_id()) == instance


def test_other_client_ids_are_not_instances():
    for foreign in ("rdkafka", "", "cohort", "cohort;x;h;1;", "cohort;1;h;1;2:x", "other;1;h;1;", "cohort;1;h;1;;",
                    "cohort;1;h;1;;abc"):
        assert Instance.parse(foreign) is None, foreign
    assert membership_group("payments") == "cohort-payments"


def test_the_view_names_each_shards_owner_and_ignores_foreign_members():
    a = Instance(1000001, "a.example", 9092, {1: 9101, 2: 9102})
    b = Instance(1000002, "b.example", 9092, {1: 9201, 2: 9202})
    view = ClusterView.of([(b.client_id(), [1, 3]), ("some-tool", [0]), (a.client_id(), [0, 2])])
    assert view.instances == (a, b)
    assert {s: view.owner(s) for s in range(5)} == {0: a, 1: b, 2: a, 3: b, 4: None}


@given(st.lists(instances, min_size=1, max_size=6, unique_by=lambda i: i.node_id), st.randoms(), st.integers(0, 10))
def test_every_instance_advertises_the_same_address_for_an_upstream_broker(members, rnd, node):
    """Whatever order the group lists its members in, the chosen instance is the same, and it
    has a port for that broker."""
    listed = [(i.client_id(), []) for i in members]
    first = ClusterView.of(listed).broker_instance(node)
    rnd.shuffle(listed)
    assert ClusterView.of(listed).broker_instance(node) == first
    able = [i for i in members if node in i.brokers]
    assert (first is None) == (not able)
    if first is not None:
        assert node in first.brokers


def test_a_restarted_instance_and_its_predecessor_share_a_node_id_until_the_old_one_goes():
    old = Instance(7, "h", 1111, {1: 2001})
    new = Instance(7, "h", 2222, {1: 3001})
    view = ClusterView.of([(old.client_id(), [0, 1]), (new.client_id(), [])])
    assert view.owner(0) == old and view.instances == (old,)  # the shardless newcomer waits its turn
    view = ClusterView.of([(old.client_id(), []), (new.client_id(), [0])])
    assert view.owner(0) == new


def test_an_instance_from_before_automatic_ids_reads_as_a_set_id():
    old = Instance.parse("cohort;1000000;h;9092;1:9101")
    assert old == Instance(1000000, "h", 9092, {1: 9101}, "", True)


def test_the_view_lists_every_member_sharing_a_node_id():
    a = Instance(1000000, "a", 1, {}, "a" * 32, False)
    b = Instance(1000000, "b", 2, {}, "b" * 32, False)
    c = Instance(1000001, "c", 3, {}, "c" * 32, True)
    view = ClusterView.of([(a.client_id(), []), (b.client_id(), [0]), (c.client_id(), [1])])
    assert view.instances == (b, c)  # clients are sent to the one holding shards
    assert view.sharing(a.instance_id, 1000000) == [b]
    assert view.sharing(b.instance_id, 1000000) == [a]
    assert view.sharing(c.instance_id, 1000001) == []
    assert view.shards_of(1000000) == [0] and view.shards_of(1000001) == [1]

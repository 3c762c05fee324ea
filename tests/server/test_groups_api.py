"""The group coordinator APIs through the real server, with kio-encoded requests over TCP."""

import time
import uuid

import pytest
from kio.schema.errors import ErrorCode as E
from rawreq import create_topics, ms, req, sub

from cohort_testing import ServerThread, WireClient

FAST = {"group.consumer.heartbeat.interval.ms": 200, "group.consumer.min.heartbeat.interval.ms": 50,
        "group.consumer.session.timeout.ms": 1500, "group.consumer.min.session.timeout.ms": 500}


# --- request helpers (shared with test_groups_durability) ----------------------------------------


def wait_loaded(srv, timeout=10):
    deadline = time.monotonic() + timeout
    while not srv.server.group_coordinator.loaded:
        assert time.monotonic() < deadline, "coordinator did not load"
        time.sleep(0.01)


def heartbeat(c, group, member, epoch, topics=None, owned=None, rebalance=-1, instance=None, regex=None,
              assignor=None, version=1):
    """owned: {topic_id: partitions} or None (unchanged)."""
    parts = None if owned is None else tuple(
        sub(68, version, "topic_partitions", topic_id=t, partitions=tuple(ps)) for t, ps in owned.items())
    return c.request(68, version, req(
        68, version, group_id=group, member_id=member, member_epoch=epoch, instance_id=instance, rack_id=None,
        rebalance_timeout=ms(rebalance), subscribed_topic_names=None if topics is None else tuple(topics),
        subscribed_topic_regex=regex, server_assignor=assignor, topic_partitions=parts))


def join(c, group, member, topics, **kw):
    return heartbeat(c, group, member, 0, topics=topics, owned={}, rebalance=30000, **kw)


def assigned(resp):
    return {tp.topic_id: tuple(tp.partitions) for tp in resp.assignment.topic_partitions}


def commit(c, version, group, offsets, epoch=-1, member=""):
    """offsets: {topic name (or id for v10): {partition: offset}}."""
    topics = tuple(
        sub(8, version, "topics", name=t, topic_id=t, partitions=tuple(
            sub(8, version, "topics", "partitions", partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                committed_metadata=f"m{o}") for p, o in parts.items()))
        for t, parts in offsets.items())
    resp = c.request(8, version, req(8, version, group_id=group, generation_id_or_member_epoch=epoch, member_id=member,
                                     group_instance_id=None, retention_time=ms(-1), topics=topics))
    return {(t.topic_id if version >= 10 else t.name, p.partition_index): p.error_code
            for t in resp.topics for p in t.partitions}


def fetch_offsets(c, version, group, topics=None, member=None, epoch=-1):
    """topics: {name or id: [partitions]} or None (all). Returns (group error, {(topic, p): (offset, metadata, error)})."""
    def topic_entries(*path):
        if topics is None:
            return None
        return tuple(sub(9, version, *path, name=t, topic_id=t, partition_indexes=tuple(ps)) for t, ps in topics.items())

    if version >= 8:
        g = sub(9, version, "groups", group_id=group, member_id=member, member_epoch=epoch,
                topics=topic_entries("groups", "topics"))
        resp = c.request(9, version, req(9, version, groups=(g,), require_stable=True))
        [r] = resp.groups
        error, found = r.error_code, r.topics
    else:
        resp = c.request(9, version, req(9, version, group_id=group, topics=topic_entries("topics"), require_stable=False))
        error, found = getattr(resp, "error_code", E.none), resp.topics
    key = (lambda t: t.topic_id) if version >= 10 else (lambda t: t.name)
    return error, {(key(t), p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                   for t in found for p in t.partitions}


def describe(c, *groups, version=1):
    return c.request(69, version, req(69, version, group_ids=groups, include_authorized_operations=False)).groups


def topic_ids(c, *names):
    resp = c.request(3, 12, req(3, 12, topics=tuple(sub(3, 12, "topics", name=n, topic_id=None) for n in names),
                                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return {t.name: t.topic_id for t in resp.topics}


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = ServerThread(tmp_path_factory.mktemp("groups"), FAST).start()
    wait_loaded(s)
    with WireClient(s.port) as c:
        assert c.request(19, 7, create_topics(7, ("t6", 6), ("t2", 2), ("t3", 3))).topics[0].error_code == E.none
    yield s
    s.stop()


@pytest.fixture
def c(srv):
    with WireClient(srv.port) as client:
        yield client


@pytest.fixture
def ids(c):
    return topic_ids(c, "t6", "t2", "t3")


# --- tests ------------------------------------------------------------------------------------


def test_api_versions_advertise_the_group_apis(c):
    resp = c.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1"))
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert served[68] == (0, 1) and served[69] == (0, 1)
    assert served[8] == (2, 10) and served[9] == (1, 10) and served[16] == (0, 5) and served[15] == (0, 5)
    assert served[42] == (0, 2) and served[47] == (0, 0) and served[10] == (0, 6)
    assert (served[11], served[14], served[12], served[13]) == ((0, 9), (0, 5), (0, 4), (0, 5))  # classic


def test_find_coordinator_single_and_batched(c, srv):
    r = c.request(10, 3, req(10, 3, key="grp", key_type=0))
    assert (r.error_code, r.node_id, r.port) == (E.none, 1, srv.port)
    r = c.request(10, 4, req(10, 4, key_type=0, coordinator_keys=("a", "b")))
    assert [(x.key, x.error_code, x.node_id, x.port) for x in r.coordinators] == [
        ("a", E.none, 1, srv.port), ("b", E.none, 1, srv.port)]


def test_heartbeat_join_rebalance_and_leave(c, ids):
    t6 = ids["t6"]
    a = join(c, "hb", "member-a", ["t6"])
    assert a.error_code == E.none and a.member_epoch == 1 and a.heartbeat_interval == ms(200)
    assert assigned(a) == {t6: (0, 1, 2, 3, 4, 5)}
    # a steady heartbeat: nothing changes, no assignment sent
    steady = heartbeat(c, "hb", "member-a", 1, owned={t6: range(6)})
    assert (steady.error_code, steady.member_epoch, steady.assignment) == (E.none, 1, None)
    b = join(c, "hb", "member-b", ["t6"])
    assert b.member_epoch == 2 and assigned(b) == {}  # b waits until a revokes
    a = heartbeat(c, "hb", "member-a", 1, owned={t6: range(6)})
    kept = assigned(a)[t6]
    assert len(kept) == 3 and a.member_epoch == 1  # revoke first, keep the epoch
    a = heartbeat(c, "hb", "member-a", 1, owned={t6: kept})
    assert a.member_epoch == 2
    b = heartbeat(c, "hb", "member-b", 2, owned={})
    assert sorted(assigned(b)[t6] + kept) == list(range(6))
    [g] = describe(c, "hb")
    assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Stable", 2, 2)
    assert sorted(m.member_id for m in g.members) == ["member-a", "member-b"]
    left = heartbeat(c, "hb", "member-a", -1)
    assert (left.error_code, left.member_epoch) == (E.none, -1)
    b = heartbeat(c, "hb", "member-b", 2, owned={t6: assigned(b)[t6]})
    assert assigned(b) == {t6: (0, 1, 2, 3, 4, 5)} and b.member_epoch == 3


def test_heartbeat_errors_on_the_wire(c, ids):
    r = heartbeat(c, "hb-err", "", 0, topics=["t6"], owned={}, rebalance=1000)
    assert r.error_code == E.invalid_request and r.error_message == "MemberId can't be empty."
    r = heartbeat(c, "hb-err", "m", 3, owned={})
    assert r.error_code == E.group_id_not_found
    assert join(c, "hb-err", "m", ["t6"]).error_code == E.none
    assert heartbeat(c, "hb-err", "m", 7, owned={}).error_code == E.fenced_member_epoch
    assert heartbeat(c, "hb-err", "other", 1, owned={}).error_code == E.unknown_member_id
    assert join(c, "hb-err", "n", ["t6"], assignor="nope").error_code == E.unsupported_assignor
    assert join(c, "hb-err", "n", [], regex="(unclosed").error_code == E.invalid_regular_expression
    v0 = heartbeat(c, "hb-v0", "", 0, topics=["t2"], owned={}, rebalance=1000, version=0)
    assert v0.error_code == E.none and uuid.UUID(v0.member_id)  # v0: the coordinator names the member


def test_session_timeout_removes_a_silent_member(c, ids):
    a = join(c, "silent", "a", ["t2"])
    assert a.member_epoch == 1
    time.sleep(2.0)  # session timeout 1.5 s
    [g] = describe(c, "silent")
    assert (g.error_code, g.group_state, g.members, g.group_epoch) == (E.none, "Empty", (), 2)
    assert heartbeat(c, "silent", "a", 1, owned={}).error_code == E.unknown_member_id


def test_describe_list_and_classic_describe(c, ids):
    join(c, "desc", "d1", ["t3"], instance="inst-1")
    [g, missing, blank] = describe(c, "desc", "no-such-group", "")
    assert g.error_code == E.none and g.assignor_name == "uniform"
    [m] = g.members
    assert (m.member_id, m.instance_id, m.client_id, m.client_host, m.member_type) == ("d1", "inst-1", "test", "/127.0.0.1", 1)
    assert [(tp.topic_name, tuple(tp.partitions)) for tp in m.assignment.topic_partitions] == [("t3", (0, 1, 2))]
    assert missing.error_code == E.group_id_not_found and blank.error_code == E.invalid_group_id
    assert commit(c, 9, "simple-only", {"t3": {0: 4}}) == {("t3", 0): E.none}

    def listed(version, **kw):
        r = c.request(16, version, req(16, version, **kw))
        return {g.group_id: g for g in r.groups}

    all_groups = listed(5, states_filter=(), types_filter=())
    assert all_groups["desc"].group_state == "Stable" and all_groups["desc"].group_type == "consumer"
    assert all_groups["desc"].protocol_type == "consumer"
    assert all_groups["simple-only"].group_type == "classic" and all_groups["simple-only"].protocol_type == ""
    assert "simple-only" not in listed(4, states_filter=("stable",)) and "desc" in listed(4, states_filter=("Stable",))
    assert set(listed(5, states_filter=(), types_filter=("classic",))) >= {"simple-only"}
    assert "desc" not in listed(5, states_filter=(), types_filter=("classic",))
    assert "desc" in listed(0)
    classic = c.request(15, 5, req(15, 5, groups=("desc", "simple-only", "nothing"), include_authorized_operations=False))
    assert [(g.group_id, g.error_code, g.group_state, len(g.members)) for g in classic.groups] == [
        ("desc", E.none, "Stable", 1), ("simple-only", E.none, "Empty", 0), ("nothing", E.none, "Dead", 0)]


@pytest.mark.parametrize("version", [2, 5, 7, 8, 9])
def test_simple_group_commit_and_fetch_by_name(c, version):
    """kafka-python (v8) and aiokafka (v2-3) commit with generation -1 and no member: a "simple" group."""
    group = f"simple-v{version}"
    assert commit(c, version, group, {"t2": {0: 11, 1: 12}, "gone": {0: 1}, "t3": {7: 1}}) == {
        ("t2", 0): E.none, ("t2", 1): E.none, ("gone", 0): E.unknown_topic_or_partition,
        ("t3", 7): E.unknown_topic_or_partition}
    for fv in (1, 3, 5, 7, 8, 9):
        error, found = fetch_offsets(c, fv, group, {"t2": [0, 1], "t3": [0]})
        assert error == E.none
        assert found[("t2", 0)][:2] == (11, "m11") and found[("t2", 1)][:2] == (12, "m12")
        assert found[("t3", 0)][:2] == (-1, "")
    error, everything = fetch_offsets(c, 9, group)
    assert set(everything) == {("t2", 0), ("t2", 1)}


def test_commit_and_fetch_by_topic_id_v10(c, ids):
    unknown = uuid.uuid4()
    assert commit(c, 10, "by-id", {ids["t6"]: {5: 50}, unknown: {0: 1}}) == {
        (ids["t6"], 5): E.none, (unknown, 0): E.unknown_topic_id}
    error, found = fetch_offsets(c, 10, "by-id", {ids["t6"]: [5, 4], unknown: [0]})
    assert error == E.none
    assert found[(ids["t6"], 5)] == (50, "m50", E.none) and found[(ids["t6"], 4)][0] == -1
    assert found[(unknown, 0)][2] == E.unknown_topic_id
    assert fetch_offsets(c, 10, "by-id")[1] == {(ids["t6"], 5): (50, "m50", E.none)}
    assert fetch_offsets(c, 9, "by-id", {"t6": [5]})[1][("t6", 5)][0] == 50  # same offsets by name


def test_member_commits_need_v9_and_the_current_epoch(c, ids):
    r = join(c, "members", "m1", ["t2"])
    assert commit(c, 9, "members", {"t2": {0: 3}}, epoch=r.member_epoch, member="m1") == {("t2", 0): E.none}
    assert commit(c, 9, "members", {"t2": {0: 4}}, epoch=r.member_epoch + 5, member="m1") == {("t2", 0): E.stale_member_epoch}
    assert commit(c, 8, "members", {"t2": {0: 4}}, epoch=r.member_epoch, member="m1") == {("t2", 0): E.unsupported_version}
    assert commit(c, 9, "members", {"t2": {0: 4}}, epoch=1, member="stranger") == {("t2", 0): E.unknown_member_id}
    assert commit(c, 9, "members", {"t2": {0: 4}}) == {("t2", 0): E.unknown_member_id}  # admin commit to a live group
    assert fetch_offsets(c, 9, "members", {"t2": [0]}, member="m1", epoch=9)[0] == E.stale_member_epoch
    error, found = fetch_offsets(c, 9, "members", {"t2": [0]}, member="m1", epoch=r.member_epoch)
    assert error == E.none and found[("t2", 0)][0] == 3


def test_offset_fetch_v8_answers_several_groups(c):
    commit(c, 9, "multi-a", {"t2": {0: 1}})
    commit(c, 9, "multi-b", {"t2": {0: 2}})
    groups = tuple(sub(9, 8, "groups", group_id=g, topics=None) for g in ("multi-a", "multi-b", "multi-none"))
    resp = c.request(9, 8, req(9, 8, groups=groups, require_stable=False))
    got = {g.group_id: [(t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions]
           for g in resp.groups}
    assert got == {"multi-a": [("t2", 0, 1)], "multi-b": [("t2", 0, 2)], "multi-none": []}


def test_delete_groups_and_offset_delete(c, ids):
    join(c, "del", "d", ["t2"])
    commit(c, 9, "del-simple", {"t2": {0: 1}, "t3": {0: 2}})
    r = c.request(42, 2, req(42, 2, groups_names=("del", "del-simple", "del-none")))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("del", E.non_empty_group), ("del-simple", E.none), ("del-none", E.group_id_not_found)]
    assert fetch_offsets(c, 9, "del-simple")[1] == {}
    commit(c, 9, "offdel", {"t2": {0: 1}, "t3": {0: 2}})
    od = c.request(47, 0, req(47, 0, group_id="offdel", topics=(
        sub(47, 0, "topics", name="t2", partitions=(sub(47, 0, "topics", "partitions", partition_index=0),)),)))
    assert od.error_code == E.none and od.topics[0].partitions[0].error_code == E.none
    assert set(fetch_offsets(c, 9, "offdel")[1]) == {("t3", 0)}
    od = c.request(47, 0, req(47, 0, group_id="offdel-none", topics=()))
    assert od.error_code == E.group_id_not_found
    # a group subscribed to the topic keeps its offsets
    r = join(c, "offdel-live", "x", ["t2"])
    commit(c, 9, "offdel-live", {"t2": {0: 1}}, epoch=r.member_epoch, member="x")
    od = c.request(47, 0, req(47, 0, group_id="offdel-live", topics=(
        sub(47, 0, "topics", name="t2", partitions=(sub(47, 0, "topics", "partitions", partition_index=0),)),)))
    assert od.topics[0].partitions[0].error_code == E.group_subscribed_to_topic


def _alter(c, group, ops, validate_only=False):
    cfgs = tuple(sub(44, 1, "resources", "configs", name=k, config_operation=op, value=v) for k, op, v in ops)
    r = c.request(44, 1, req(44, 1, resources=(sub(44, 1, "resources", resource_type=32, resource_name=group, configs=cfgs),),
                             validate_only=validate_only))
    return r.responses[0].error_code, r.responses[0].error_message


def _describe_configs(c, group):
    r = c.request(32, 4, req(32, 4, resources=(sub(32, 4, "resources", resource_type=32, resource_name=group,
                                                   configuration_keys=None),),
                             include_synonyms=False, include_documentation=True))
    return {e.name: (e.value, e.config_source) for e in r.results[0].configs}


def test_group_configs_describe_and_alter(c, ids):
    assert _describe_configs(c, "cfg")["consumer.heartbeat.interval.ms"] == ("200", 5)
    assert _alter(c, "cfg", [("consumer.heartbeat.interval.ms", 0, "300")], validate_only=True) == (E.none, None)
    assert _describe_configs(c, "cfg")["consumer.heartbeat.interval.ms"] == ("200", 5)
    assert _alter(c, "cfg", [("consumer.heartbeat.interval.ms", 0, "300")]) == (E.none, None)
    assert _describe_configs(c, "cfg")["consumer.heartbeat.interval.ms"] == ("300", 8)
    assert join(c, "cfg", "m", ["t2"]).heartbeat_interval == ms(300)
    error, message = _alter(c, "cfg", [("consumer.session.timeout.ms", 0, "10")])
    assert error == E.invalid_config and "consumer.session.timeout.ms" in message
    assert _alter(c, "cfg", [("no.such.config", 0, "1")])[0] == E.invalid_config
    assert _alter(c, "cfg", [("consumer.heartbeat.interval.ms", 2, "1")])[0] == E.invalid_config
    assert _alter(c, "cfg", [("consumer.heartbeat.interval.ms", 1, None)]) == (E.none, None)
    assert _describe_configs(c, "cfg")["consumer.heartbeat.interval.ms"] == ("200", 5)

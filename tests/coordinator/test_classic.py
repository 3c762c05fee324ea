"""Classic groups on a fake clock: JoinGroup / SyncGroup / Heartbeat / LeaveGroup rules, the
records they write, parked requests and their completions, replay, offsets, describe and list."""

from __future__ import annotations

import struct

import pytest

from cohort.coordinator import Errors, Record
from cohort.coordinator.classic_group import ClassicGroupState
from cohort.coordinator.consumer_protocol import Subscription, encode_subscription
from cohort.coordinator.records import GroupMetadataKey, GroupMetadataMember, GroupMetadataValue, decode, encode
from cohort.coordinator.requests import (
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    Parked,
    SyncGroupRequest,
    SyncGroupResponse,
)

from cg_helpers import rebuilt
from classic_helpers import (
    REBALANCE,
    SESSION,
    SUB_FOO,
    Driver,
    assignment,
    classic_shard,
    hb_req,
    join_req,
    leave_req,
    sync_req,
)

A0_2, A3_5 = assignment(0, 1, 2), assignment(3, 4, 5)


def stable_pair(**config) -> tuple[Driver, str, str]:
    """Members c-1 (leader) and d-2 through the initial delay and the leader's sync, generation 1."""
    d = Driver(classic_shard(**config))
    a = d.join_new()
    ja = d.send(join_req(member=a))
    b = d.join_new(client="d")
    jb = d.send(join_req(member=b, client="d"))
    d.tick(3_000)  # b arrived during the initial delay: it is extended once
    d.tick(6_000)
    assert d.answer(ja).generation_id == d.answer(jb).generation_id == 1
    sb = d.send(sync_req("g", b, 1))
    d.send(sync_req("g", a, 1, [(a, A0_2), (b, A3_5)]))
    assert d.answer(sb).assignment == A3_5
    return d, a, b


def group_record(generation, leader, members, protocol="range", timestamp=0, ptype="consumer"):
    return Record(GroupMetadataKey("g"), GroupMetadataValue(ptype, generation, protocol, leader, timestamp, tuple(
        GroupMetadataMember(m, iid, client, "/127.0.0.1", REBALANCE, SESSION, SUB_FOO, a) for m, iid, client, a in members)))


# ---------------------------------------------------------------------------- JoinGroup


def test_v4_join_without_member_id_gets_member_id_required_then_the_join_is_parked():
    d = Driver(classic_shard())
    result = d.send(join_req(client="app"))
    assert result.response == JoinGroupResponse(error_code=Errors.MEMBER_ID_REQUIRED, member_id="app-1",
                                                error_message=result.response.error_message)
    assert result.records == [] and result.completions == []
    assert d.shard.timers.deadline("heartbeat-g-app-1") == SESSION  # a pending member expires too
    parked = d.send(join_req(member="app-1", client="app"))
    assert isinstance(parked.response, Parked) and parked.records == []
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.PREPARING_REBALANCE
    assert d.shard.timers.deadline("join-g") == 3_000  # group.initial.rebalance.delay.ms


def test_pre_v4_join_without_member_id_enters_directly():
    d = Driver(classic_shard())
    result = d.send(join_req(version=3))
    assert isinstance(result.response, Parked)
    assert list(d.shard.state.classic_groups["g"].members) == ["c-1"]


def test_a_pending_member_that_never_comes_back_leaves_no_group():
    d = Driver(classic_shard())
    d.send(join_req())
    d.tick(SESSION)
    assert "g" not in d.shard.state.classic_groups
    assert d.shard.list_groups().groups == ()


def test_initial_delay_completes_with_generation_1_and_no_record():
    d = Driver(classic_shard())
    a = d.join_new()
    ja = d.send(join_req(member=a))
    assert d.tick(2_999).completions == []
    result = d.tick(3_000)
    assert result.records == []  # the generation is persisted by the leader's SyncGroup
    assert result.completions == [(ja.response.request_id, JoinGroupResponse(
        generation_id=1, protocol_type="consumer", protocol_name="range", leader=a, member_id=a,
        members=(JoinGroupMember(a, None, SUB_FOO),)))]
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.COMPLETING_REBALANCE


def test_initial_delay_is_extended_while_new_members_arrive_up_to_the_rebalance_timeout():
    d = Driver(classic_shard())
    a = d.join_new()
    d.send(join_req(member=a, rebalance=7_000))
    b = d.join_new(client="d")
    d.send(join_req(member=b, client="d", rebalance=7_000), now=1_000)
    assert d.tick(3_000).completions == []  # b arrived: another min(3000, 7000 - 3000) ms
    assert d.shard.timers.deadline("join-g") == 6_000
    c = d.join_new(client="e")
    d.send(join_req(member=c, client="e", rebalance=7_000), now=5_000)
    assert d.tick(6_000).completions == []  # c arrived: min(3000, remaining 1000)
    assert d.shard.timers.deadline("join-g") == 7_000
    x = d.join_new(client="x")
    d.send(join_req(member=x, client="x", rebalance=7_000), now=6_500)
    done = d.tick(7_000)  # the rebalance timeout bounds the delay even though x just joined
    assert sorted(r.member_id for _, r in done.completions) == sorted([a, b, c, x])
    assert {r.generation_id for _, r in done.completions} == {1}


def test_session_timeout_bounds():
    d = Driver(classic_shard())
    for session in (5_999, 1_800_001):
        response = d.send(join_req(session=session)).response
        assert response.error_code == Errors.INVALID_SESSION_TIMEOUT
    assert d.send(join_req(session=6_000)).response.error_code == Errors.MEMBER_ID_REQUIRED
    custom = Driver(classic_shard(classic_min_session_timeout_ms=1_000, classic_max_session_timeout_ms=2_000))
    assert custom.send(join_req(session=3_000)).response.error_code == Errors.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_invalid():
    d = Driver(classic_shard())
    assert d.send(join_req(" ")).response.error_code == Errors.INVALID_GROUP_ID


def test_join_with_unknown_member_id_on_a_missing_group():
    d = Driver(classic_shard())
    assert d.send(join_req(member="ghost")).response.error_code == Errors.UNKNOWN_MEMBER_ID
    assert "g" not in d.shard.state.classic_groups


def test_protocol_selection_votes_among_common_protocols():
    d = Driver(classic_shard())
    ids = []
    for client, protocols in (("a", (("rr", b"1"), ("range", b"2"))), ("b", (("rr", b"3"), ("range", b"4"))),
                              ("c", (("range", b"5"), ("rr", b"6"), ("sticky", b"7")))):
        member = d.join_new(client=client, protocols=protocols)
        d.send(join_req(member=member, client=client, protocols=protocols))
        ids.append(member)
    assert d.tick(3_000).completions == []  # members arrived during the delay: extended once
    leader_join = d.tick(6_000).completions
    responses = {r.member_id: r for _, r in leader_join}
    assert {r.protocol_name for r in responses.values()} == {"rr"}  # two votes for rr, one for range
    assert responses[ids[0]].members == tuple(
        JoinGroupMember(m, None, meta)
        for m, meta in zip(ids, (b"1", b"3", b"6")))
    assert responses[ids[1]].members == responses[ids[2]].members == ()
    assert all(r.leader == ids[0] for r in responses.values())


def test_inconsistent_protocols_are_rejected():
    d, a, b = stable_pair()
    for request in (join_req(protocols=(("sticky", b""),), client="x", version=3),
                    join_req(protocol_type="connect", client="x", version=3),
                    join_req(member=a, protocols=(("sticky", b""),))):
        response = d.send(request).response
        assert response.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL, request
    fresh = Driver(classic_shard())
    assert fresh.send(join_req(protocols=())).response.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert fresh.send(join_req(protocol_type="")).response.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_join_of_a_new_member_into_a_stable_group_rebalances_and_completes_when_all_rejoined():
    d, a, b = stable_pair()
    d.now = 10_000
    c = d.join_new(client="e")
    jc = d.send(join_req(member=c, client="e"))
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.PREPARING_REBALANCE
    assert d.shard.timers.deadline("join-g") == 10_000 + REBALANCE
    assert d.send(hb_req("g", a, 1)).response.error_code == Errors.REBALANCE_IN_PROGRESS
    assert d.send(sync_req("g", b, 1)).response.error_code == Errors.REBALANCE_IN_PROGRESS
    ja = d.send(join_req(member=a))
    assert isinstance(ja.response, Parked)
    jb = d.send(join_req(member=b, client="d"))  # the last one: completes the join phase at once
    assert jb.response.generation_id == 2 and jb.response.members == ()
    assert {rid for rid, _ in jb.completions} == {ja.response.request_id, jc.response.request_id}
    assert d.answer(ja).leader == a and len(d.answer(ja).members) == 3
    assert "join-g" not in d.shard.timers and d.shard.timers.deadline("sync-g") == 10_000 + REBALANCE


def test_follower_rejoin_without_changes_in_stable_returns_the_current_generation():
    d, a, b = stable_pair()
    response = d.send(join_req(member=b, client="d")).response
    assert (response.generation_id, response.member_id, response.leader, response.members) == (1, b, a, ())
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.STABLE
    # the leader re-joining always rebalances (it may want a new assignment)
    assert isinstance(d.send(join_req(member=a)).response, Parked)
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.PREPARING_REBALANCE


def test_rebalance_timeout_removes_members_that_did_not_rejoin():
    d, a, b = stable_pair()
    d.now = 10_000
    c = d.join_new(client="e")
    d.send(join_req(member=c, client="e"))
    ja = d.send(join_req(member=a))
    d.send(hb_req("g", b, 1))  # b keeps heartbeating but never re-joins
    result = d.tick(10_000 + REBALANCE)
    assert sorted(r.member_id for _, r in result.completions) == sorted([a, c])
    group = d.shard.state.classic_groups["g"]
    assert sorted(group.members) == sorted([a, c]) and group.generation_id == 2
    assert d.answer(ja).leader == a
    assert d.send(hb_req("g", b, 1)).response.error_code == Errors.UNKNOWN_MEMBER_ID


def test_leader_that_leaves_during_a_rebalance_is_replaced_by_a_joined_member():
    d, a, b = stable_pair()
    jb = d.send(join_req(member=b, client="d", protocols=(("range", b"changed"),)))
    assert isinstance(jb.response, Parked)
    left = d.send(leave_req("g", a))
    assert left.response.members[0].error_code == 0
    assert d.answer(jb).leader == b and d.answer(jb).generation_id == 2
    assert d.answer(jb).members[0].metadata == b"changed"


# ---------------------------------------------------------------------------- SyncGroup


def test_sync_propagates_the_leaders_assignment_and_writes_the_generation():
    d = Driver(classic_shard())
    a = d.join_new()
    d.send(join_req(member=a))
    b = d.join_new(client="d")
    d.send(join_req(member=b, client="d"))
    d.tick(3_000)
    d.tick(6_000)
    sb = d.send(sync_req("g", b, 1))
    assert isinstance(sb.response, Parked) and sb.records == []
    sa = d.send(sync_req("g", a, 1, [(a, A0_2), (b, A3_5)]))
    assert sa.response == SyncGroupResponse(protocol_type="consumer", protocol_name="range", assignment=A0_2)
    assert sa.completions == [(sb.response.request_id, SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=A3_5))]
    assert sa.records == [group_record(1, a, [(a, None, "c", A0_2), (b, None, "d", A3_5)], timestamp=6_000)]
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.STABLE
    # a member missing from the leader's assignment gets empty bytes; a stable group answers directly
    assert d.send(sync_req("g", b, 1)).response.assignment == A3_5


def test_sync_errors():
    d, a, b = stable_pair()
    assert d.send(sync_req("g", b, 7)).response.error_code == Errors.ILLEGAL_GENERATION
    assert d.send(sync_req("g", "ghost", 1)).response.error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.send(sync_req("nope", b, 1)).response.error_code == Errors.UNKNOWN_MEMBER_ID
    bad = d.shard.handle(SyncGroupRequest("g", 1, b, protocol_type="consumer", protocol_name="roundrobin"), d.now)
    assert bad.response.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_members_that_never_sync_are_removed_at_the_rebalance_timeout():
    d = Driver(classic_shard())
    a = d.join_new(session=100_000)
    d.send(join_req(member=a, session=100_000))
    b = d.join_new(client="d", session=100_000)
    d.send(join_req(member=b, client="d", session=100_000))
    d.tick(3_000)
    d.tick(6_000)
    d.send(sync_req("g", a, 1, [(a, A0_2), (b, A3_5)]))
    assert d.send(hb_req("g", b, 1), now=8_000).response.error_code == 0  # heartbeats do not replace the sync
    d.tick(6_000 + REBALANCE)
    group = d.shard.state.classic_groups["g"]
    assert list(group.members) == [a] and group.state is ClassicGroupState.PREPARING_REBALANCE
    assert d.send(hb_req("g", b, 1)).response.error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.send(hb_req("g", a, 1)).response.error_code == Errors.REBALANCE_IN_PROGRESS
    rejoin = d.send(join_req(member=a, session=100_000)).response
    assert (rejoin.generation_id, rejoin.leader, len(rejoin.members)) == (2, a, 1)


# ---------------------------------------------------------------------------- Heartbeat / session


def test_heartbeat_errors():
    d, a, b = stable_pair()
    assert d.send(hb_req("g", a, 1)).response.error_code == 0
    assert d.send(hb_req("g", "ghost", 1)).response.error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.send(hb_req("g", a, 0)).response.error_code == Errors.ILLEGAL_GENERATION
    assert d.send(hb_req("other", a, 1)).response.error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.send(hb_req("g", a, 1, instance="i")).response.error_code == Errors.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_the_member_and_rebalances():
    d, a, b = stable_pair()
    d.send(hb_req("g", a, 1), now=9_000)
    d.tick(6_000 + SESSION)  # b's last sign of life was its sync at 6000
    group = d.shard.state.classic_groups["g"]
    assert list(group.members) == [a] and group.state is ClassicGroupState.PREPARING_REBALANCE
    response = d.send(hb_req("g", a, 1)).response
    assert response.error_code == Errors.REBALANCE_IN_PROGRESS
    rejoin = d.send(join_req(member=a)).response
    assert (rejoin.generation_id, rejoin.leader) == (2, a)


def test_new_member_join_timeout_bounds_a_member_that_never_completes_its_first_join():
    d = Driver(classic_shard())
    a = d.join_new()
    d.send(join_req(member=a, rebalance=400_000))
    assert d.shard.timers.deadline(f"heartbeat-g-{a}") == 300_000
    d.tick(300_000)
    assert d.shard.state.classic_groups["g"].members == {}


# ---------------------------------------------------------------------------- LeaveGroup


def test_leave_v0_and_batched_leave_v3():
    d, a, b = stable_pair()
    c = d.join_new(client="e")
    assert d.send(leave_req("g", c, version=1)).response.error_code == 0  # a pending member just goes
    result = d.send(LeaveGroupRequest("g", members=(LeaveGroupMember(a), LeaveGroupMember("ghost"),
                                                    LeaveGroupMember(b))))
    assert [(m.member_id, m.error_code) for m in result.response.members] == [
        (a, 0), ("ghost", Errors.UNKNOWN_MEMBER_ID), (b, 0)]
    group = d.shard.state.classic_groups["g"]
    assert group.state is ClassicGroupState.EMPTY and group.generation_id == 2
    assert result.records == [Record(GroupMetadataKey("g"), GroupMetadataValue("consumer", 2, None, None, 6_000, ()))]
    assert d.send(leave_req("g", "ghost", version=0)).response.error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.send(leave_req("nope", a)).response.error_code == Errors.UNKNOWN_MEMBER_ID


def test_leave_of_a_parked_member_answers_its_join():
    d = Driver(classic_shard())
    a = d.join_new()
    ja = d.send(join_req(member=a))
    result = d.send(leave_req("g", a))
    assert result.completions == [(ja.response.request_id, JoinGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID,
                                                                             member_id=a))]


# ---------------------------------------------------------------------------- static membership


def test_static_member_replacement_fences_the_old_id_without_a_rebalance():
    d = Driver(classic_shard())
    ja = d.send(join_req(instance="i1", client="x"))
    assert isinstance(ja.response, Parked)  # static members skip MEMBER_ID_REQUIRED
    old = "i1-1"
    d.tick(3_000)
    d.send(sync_req("g", old, 1, [(old, A0_2)], instance="i1"))
    again = d.send(join_req(instance="i1", client="x"), now=5_000)
    assert again.response.member_id == "i1-2" and again.response.generation_id == 1
    assert again.records == [group_record(1, "i1-2", [("i1-2", "i1", "x", A0_2)], timestamp=3_000)]
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.STABLE
    assert d.send(hb_req("g", old, 1, instance="i1")).response.error_code == Errors.FENCED_INSTANCE_ID
    assert d.send(sync_req("g", "i1-2", 1, instance="i1")).response.assignment == A0_2
    left = d.send(LeaveGroupRequest("g", members=(LeaveGroupMember(old, "i1"),))).response
    assert left.members[0].error_code == Errors.FENCED_INSTANCE_ID


def test_static_replacement_fences_the_parked_join_of_the_old_member():
    d = Driver(classic_shard())
    ja = d.send(join_req(instance="i1"))
    jb = d.send(join_req(instance="i1"))
    assert (ja.response.request_id, JoinGroupResponse(error_code=Errors.FENCED_INSTANCE_ID, member_id="i1-1",
                                                      error_message=jb.completions[0][1].error_message)) \
        == jb.completions[0]
    assert list(d.shard.state.classic_groups["g"].members) == ["i1-2"]


def test_static_members_that_do_not_rejoin_are_kept_through_the_join_phase():
    d = Driver(classic_shard())
    d.send(join_req(instance="i1", session=100_000))
    b = d.join_new(client="d", session=100_000)
    d.send(join_req(member=b, client="d", session=100_000))
    d.tick(3_000)
    d.tick(6_000)
    d.send(sync_req("g", "i1-1", 1, [("i1-1", A0_2), (b, A3_5)], instance="i1"))
    rejoin = d.send(join_req(member=b, client="d", session=100_000, protocols=(("range", b"new"),)), now=7_000)
    d.tick(7_000 + REBALANCE)
    group = d.shard.state.classic_groups["g"]
    assert sorted(group.members) == sorted(["i1-1", b]) and group.generation_id == 2
    assert d.answer(rejoin).leader == b  # the old leader did not re-join


# ---------------------------------------------------------------------------- group.max.size


def test_group_max_size():
    d = Driver(classic_shard(classic_max_size=2))
    for client in ("a", "b"):
        member = d.join_new(client=client)
        d.send(join_req(member=member, client=client))
    d.tick(3_000)
    d.tick(6_000)
    response = d.send(join_req(client="c", version=3)).response
    assert response.error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert len(d.shard.state.classic_groups["g"].members) == 2


# ---------------------------------------------------------------------------- replay, revert, unload


def test_replay_rebuilds_a_stable_classic_group():
    d, a, b = stable_pair()
    fresh = rebuilt([decode(*encode(r)) for r in d.log], now=50_000)
    group = fresh.state.classic_groups["g"]
    assert group.state is ClassicGroupState.STABLE and group.generation_id == 1 and group.leader_id == a
    assert {m: (x.assignment, x.metadata("range")) for m, x in group.members.items()} == {
        a: (A0_2, SUB_FOO), b: (A3_5, SUB_FOO)}
    assert fresh.timers.deadline(f"heartbeat-g-{b}") == 50_000 + SESSION
    assert fresh.handle(hb_req("g", b, 1), 50_001).response.error_code == 0
    assert fresh.handle(sync_req("g", b, 1), 50_001).response.assignment == A3_5
    assert fresh.describe_classic_groups(DescribeGroupsRequest(["g"])) == \
        d.shard.describe_classic_groups(DescribeGroupsRequest(["g"]))


def test_replay_of_an_emptied_group_and_its_tombstone():
    d, a, b = stable_pair()
    d.send(leave_req("g", a, b))
    fresh = rebuilt(d.log)
    assert fresh.state.classic_groups["g"].state is ClassicGroupState.EMPTY
    assert fresh.state.classic_groups["g"].generation_id == 2
    deleted = d.send(DeleteGroupsRequest(["g"]))
    assert deleted.records == [Record(GroupMetadataKey("g"), None)]
    assert "g" not in rebuilt(d.log).state.classic_groups


def test_failed_append_of_the_leaders_sync_goes_back_to_the_last_durable_generation():
    d, a, b = stable_pair()
    c = d.join_new(client="e")
    jc = d.send(join_req(member=c, client="e"))
    d.send(join_req(member=a))
    d.send(join_req(member=b, client="d"))
    sc = d.send(sync_req("g", c, 2))
    result = d.shard.handle(sync_req("g", a, 2, [(a, A0_2), (b, A3_5), (c, b"")]), d.now)
    assert result.completions and result.records
    released = d.shard.revert(result.end_offset - 1)
    assert released == []  # the parked sync was already released by the failed result (the server fails it)
    group = d.shard.state.classic_groups["g"]
    assert group.generation_id == 1 and group.state is ClassicGroupState.STABLE and c not in group.members
    assert d.answer(jc).generation_id == 2 and isinstance(sc.response, Parked)


def test_unload_answers_parked_requests_with_not_coordinator():
    d = Driver(classic_shard())
    a = d.join_new()
    ja = d.send(join_req(member=a))
    released = d.shard.unload()
    assert released == [(ja.response.request_id, JoinGroupResponse(error_code=Errors.NOT_COORDINATOR, member_id=a))]
    assert d.shard.next_deadline() is None


# ---------------------------------------------------------------------------- offsets


def commit(group, member, generation, offset=10, instance=None, version=8):
    return OffsetCommitRequest(group, [OffsetCommitTopic("foo", [OffsetCommitPartition(0, offset)])], member,
                               generation, instance, api_version=version)


def test_offset_commit_classic_rules():
    d, a, b = stable_pair()
    assert d.send(commit("g", a, 1)).response.topics[0].partitions[0].error_code == 0
    assert d.send(commit("g", a, 2)).response.topics[0].partitions[0].error_code == Errors.ILLEGAL_GENERATION
    assert d.send(commit("g", "ghost", 1)).response.topics[0].partitions[0].error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.send(commit("g", "", -1)).response.topics[0].partitions[0].error_code == Errors.UNKNOWN_MEMBER_ID
    d.send(join_req(member=a))
    d.send(join_req(member=b, client="d"))  # CompletingRebalance, generation 2
    assert d.send(commit("g", a, 2)).response.topics[0].partitions[0].error_code == Errors.REBALANCE_IN_PROGRESS
    d.send(leave_req("g", a, b))
    ok = d.send(commit("g", "", -1, offset=99))  # a manual commit into the now Empty group
    assert ok.response.topics[0].partitions[0].error_code == 0
    assert d.shard.state.offsets["g"][("foo", 0)].offset == 99


def test_a_member_commit_counts_as_a_heartbeat():
    d, a, b = stable_pair()
    d.send(commit("g", b, 1), now=9_000)
    assert d.shard.timers.deadline(f"heartbeat-g-{b}") == 9_000 + SESSION


def test_simple_group_manual_commits_and_listing():
    d = Driver(classic_shard())
    assert d.send(commit("simple", "", -1, version=2)).response.topics[0].partitions[0].error_code == 0
    listed = d.shard.list_groups(ListGroupsRequest(types_filter=["classic"])).groups
    assert [(g.group_id, g.group_state, g.protocol_type) for g in listed] == [("simple", "Empty", "")]


# ---------------------------------------------------------------------------- describe / list


def test_describe_and_list_classic_groups():
    d, a, b = stable_pair()
    described = d.shard.read(DescribeGroupsRequest(["g", "missing"], api_version=6)).groups
    g = described[0]
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.member_metadata, m.member_assignment) for m in g.members] == [
        (a, "c", SUB_FOO, A0_2), (b, "d", SUB_FOO, A3_5)]
    assert described[1].error_code == Errors.GROUP_ID_NOT_FOUND
    old = d.shard.read(DescribeGroupsRequest(["missing"], api_version=5)).groups[0]
    assert (old.error_code, old.group_state) == (0, "Dead")
    d.send(join_req(member=a))
    g = d.shard.read(DescribeGroupsRequest(["g"])).groups[0]
    assert g.group_state == "PreparingRebalance" and all(m.member_metadata == b"" for m in g.members)
    listed = d.shard.list_groups(ListGroupsRequest(states_filter=["preparingrebalance"])).groups
    assert [(x.group_id, x.group_type, x.protocol_type) for x in listed] == [("g", "classic", "consumer")]


def test_delete_groups_refuses_a_non_empty_classic_group():
    d, a, b = stable_pair()
    assert d.send(DeleteGroupsRequest(["g"])).response.results[0].error_code == Errors.NON_EMPTY_GROUP


# ---------------------------------------------------------------------------- group type boundaries


def test_join_group_on_an_empty_consumer_group_replaces_it():
    d = Driver(classic_shard())
    d.send(ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["foo"],
                                         topic_partitions={}))
    d.send(ConsumerGroupHeartbeatRequest("g", "m", -1))
    assert "g" in d.shard.state.groups
    result = d.send(join_req(version=3))
    assert isinstance(result.response, Parked)
    assert "g" not in d.shard.state.groups and "g" in d.shard.state.classic_groups
    assert result.records[-1].value is None  # the consumer group's tombstones


def test_consumer_member_replaces_an_empty_classic_group():
    d, a, b = stable_pair()
    d.send(leave_req("g", a, b))
    result = d.send(ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1000,
                                                  subscribed_topic_names=["foo"], topic_partitions={}))
    assert result.response.error_code == 0
    assert result.records[0] == Record(GroupMetadataKey("g"), None)
    assert "g" not in d.shard.state.classic_groups and "g" in d.shard.state.groups


@pytest.mark.parametrize("version", [0, 1, 2])
def test_group_metadata_old_value_versions_decode(version):
    sub = encode_subscription(Subscription(("foo",), version=0))
    body = struct.pack(">h", version) + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 4)
    body += struct.pack(">h", 5) + b"range" + struct.pack(">h", 1) + b"m"
    if version >= 2:
        body += struct.pack(">q", 77)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"m" + struct.pack(">h", 1) + b"c" + struct.pack(">h", 1) + b"h"
    if version >= 1:
        body += struct.pack(">i", 30_000)
    body += struct.pack(">i", 10_000) + struct.pack(">i", len(sub)) + sub + struct.pack(">i", 0)
    record = decode(b"\x00\x02\x00\x01g", body)
    rebalance = 30_000 if version >= 1 else 10_000
    assert record.value == GroupMetadataValue("consumer", 4, "range", "m", 77 if version >= 2 else -1, (
        GroupMetadataMember("m", None, "c", "h", rebalance, 10_000, sub, b""),))


# ---------------------------------------------------------------------------- offsets: expiry and delete


def test_offsets_of_an_empty_classic_group_expire_from_the_time_it_became_empty():
    day = 24 * 3_600_000
    d, a, b = stable_pair(offsets_retention_ms=day, offsets_retention_check_interval_ms=day)
    d.send(commit("g", a, 1))
    d.send(leave_req("g", a, b), now=day // 2)  # Empty from here
    d.tick(day)  # a day after the commit, half a day after the group emptied: kept
    assert ("foo", 0) in d.shard.state.offsets["g"]
    expired = d.tick(2 * day)
    assert Record(GroupMetadataKey("g"), None) in expired.records  # all offsets gone: the group goes too
    assert "g" not in d.shard.state.offsets and "g" not in d.shard.state.classic_groups


def test_stable_classic_group_expires_only_offsets_of_unsubscribed_topics():
    day = 24 * 3_600_000
    d, a, b = stable_pair(offsets_retention_ms=day, offsets_retention_check_interval_ms=day)
    d.send(OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 1)]),
                                     OffsetCommitTopic("bar", [OffsetCommitPartition(0, 1)])], a, 1, api_version=8))
    for t in range(5_000, day + 1, 5_000):  # both members stay alive
        d.send(hb_req("g", a, 1), now=t)
        d.send(hb_req("g", b, 1), now=t)
    d.tick(day + 6_000)
    assert list(d.shard.state.offsets["g"]) == [("foo", 0)]


def test_offset_delete_on_classic_groups():
    from cohort.coordinator.requests import OffsetDeleteRequest, OffsetFetchTopic
    d, a, b = stable_pair()
    d.send(OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 1)]),
                                     OffsetCommitTopic("bar", [OffsetCommitPartition(0, 1)])], a, 1, api_version=8))
    result = d.send(OffsetDeleteRequest("g", [OffsetFetchTopic("foo", [0]), OffsetFetchTopic("bar", [0])])).response
    assert [(t.name, t.partitions[0].error_code) for t in result.topics] == [
        ("foo", Errors.GROUP_SUBSCRIBED_TO_TOPIC), ("bar", 0)]
    other = Driver(classic_shard())
    other.send(join_req(version=3, protocol_type="connect"))
    other.send(commit("g", "", -1))
    assert other.send(OffsetDeleteRequest("g", [OffsetFetchTopic("foo", [0])])).response.error_code == \
        Errors.NON_EMPTY_GROUP


# ---------------------------------------------------------------------------- describe across types


def test_consumer_group_describe_of_a_classic_group_and_describe_groups_of_a_consumer_group():
    from cohort.coordinator.requests import ConsumerGroupDescribeRequest
    from cohort.coordinator.consumer_protocol import decode_subscription, decode_assignment
    d, a, b = stable_pair()
    described = d.shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0]
    assert (described.error_code, described.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
    d.send(ConsumerGroupHeartbeatRequest("cg", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["foo"],
                                         topic_partitions={}))
    g = d.shard.read(DescribeGroupsRequest(["cg"])).groups[0]
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "simple")
    member = g.members[0]
    assert decode_subscription(member.member_metadata).topics == ("foo",)
    assert decode_assignment(member.member_assignment).partitions == (("foo", (0, 1, 2, 3, 4, 5)),)


def test_join_group_v0_uses_the_session_timeout_as_rebalance_timeout():
    d = Driver(classic_shard())
    d.send(join_req(version=0, rebalance=-1, session=7_000))
    assert d.shard.state.classic_groups["g"].members["c-1"].rebalance_timeout_ms == 7_000


def test_caller_provided_request_ids_are_used_for_parking():
    d = Driver(classic_shard())
    a = d.join_new()
    parked = d.shard.handle(join_req(member=a), 0, request_id=777)
    assert parked.response == Parked(777)
    assert [rid for rid, _ in d.shard.expire(3_000).completions] == [777]


def test_revert_answers_requests_parked_on_a_group_it_rebuilds():
    d, a, b = stable_pair()
    d.send(join_req(member=a))  # the leader re-joins: PreparingRebalance
    d.send(join_req(member=b, client="d"))  # generation 2, CompletingRebalance
    sync = d.shard.handle(sync_req("g", a, 2, [(a, A0_2), (b, A3_5)]), d.now)  # appended, not yet durable
    d.log.extend(sync.records)
    c = d.shard.handle(join_req(client="e"), d.now).response.member_id  # pipelined behind it, uncommitted
    jc = d.shard.handle(join_req(member=c, client="e"), d.now)  # parked
    assert isinstance(jc.response, Parked)
    released = d.shard.revert(sync.end_offset - 1)  # the sync's append failed
    assert released == [(jc.response.request_id, JoinGroupResponse(error_code=Errors.REBALANCE_IN_PROGRESS,
                                                                    member_id=c))]
    group = d.shard.state.classic_groups["g"]
    assert (group.generation_id, group.state, sorted(group.members)) == (1, ClassicGroupState.STABLE, sorted([a, b]))


def test_classic_settings_from_kafka_property_names():
    from cohort.coordinator import CoordinatorConfig
    config = CoordinatorConfig.from_properties({
        "group.min.session.timeout.ms": 1_000, "group.max.session.timeout.ms": 2_000, "group.max.size": 5,
        "group.initial.rebalance.delay.ms": 0, "group.consumer.migration.policy": "Upgrade"})
    assert (config.classic_min_session_timeout_ms, config.classic_max_session_timeout_ms, config.classic_max_size,
            config.classic_initial_rebalance_delay_ms) == (1_000, 2_000, 5, 0)
    assert (config.upgrade_allowed, config.downgrade_allowed) == (True, False)
    defaults = CoordinatorConfig()
    assert (defaults.classic_min_session_timeout_ms, defaults.classic_max_session_timeout_ms,
            defaults.classic_initial_rebalance_delay_ms, defaults.consumer_migration_policy) == (
        6_000, 1_800_000, 3_000, "bidirectional")
    for bad in ({"group.consumer.migration.policy": "sideways"}, {"group.max.size": 0},
                {"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5}):
        with pytest.raises(ValueError):
            CoordinatorConfig.from_properties(bad)

"""Client-side assignors in the sans-IO shard: selection, the chosen member, Prepare / Install
validation, a chosen member that lets its rebalance timeout pass, and replay."""

from __future__ import annotations

import pytest

from cohort.coordinator import ConsumerGroupDescribeRequest, Errors
from cohort.coordinator.records import ClientAssignorMetadata as CA
from cohort.coordinator.requests import InstallAssignmentRequest, InstalledMember, PrepareAssignmentRequest
from cohort.coordinator.selection import common_client_assignor

from cg_helpers import BAR, FOO, dump, hb, join, make_shard, rebuilt, run


def ca(name: str, lo: int = 0, hi: int = 1, version: int = 0, metadata: bytes = b"", reason: int = 0) -> CA:
    return CA(name, lo, hi, reason, version, metadata)


class M:  # what selection reads of a member
    def __init__(self, *assignors):
        self.client_assignors = assignors


def collect(shard):
    log = []

    def go(request, now):
        result = run(shard, request, now)
        log.extend(result.records)
        return result.response
    return go, log


def grouped(assignors=(ca("affinity", metadata=b"a-meta"),), b_assignors=None):
    """Members a and b, both with client-side assignors; a joined first and was chosen."""
    shard = make_shard()
    go, log = collect(shard)
    ra = go(join("g", "a", topics=("foo", "bar"), client_assignors=assignors), 0)
    rb = go(join("g", "b", topics=("foo",), client_assignors=b_assignors or (ca("affinity", metadata=b"b-meta"),)), 10)
    return shard, go, log, ra, rb


# ------------------------------------------------------------------ selection

def test_selection_takes_the_assignor_every_member_supports_by_the_members_precedence():
    assert common_client_assignor([M(ca("x"), ca("y")), M(ca("y"), ca("x"))]) == "x"  # tie on positions: by name
    assert common_client_assignor([M(ca("x"), ca("y")), M(ca("y"), ca("z"), ca("x"))]) == "y"
    assert common_client_assignor([M(ca("x")), M(ca("y"))]) is None
    assert common_client_assignor([M(ca("x")), M()]) is None  # a member without client assignors
    assert common_client_assignor([M(ca("x", 0, 1)), M(ca("x", 2, 3))]) is None  # no common version
    assert common_client_assignor([M(ca("x", 0, 2)), M(ca("x", 2, 3))]) == "x"


def test_a_server_side_assignor_named_by_any_member_wins_over_client_side_ones():
    shard = make_shard()
    run(shard, join("g", "a", client_assignors=(ca("affinity"),)), 0)
    r = run(shard, join("g", "b", server_assignor="simple", client_assignors=(ca("affinity"),)), 10).response
    assert not r.should_compute_assignment
    group = shard.group("g")
    assert group.assignment_epoch == group.group_epoch  # computed on the server at once
    assert shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0].assignor_name == "simple"


def test_a_member_without_client_assignors_keeps_the_group_on_the_server_default():
    shard = make_shard()
    run(shard, join("g", "a", client_assignors=(ca("affinity"),)), 0)
    r = run(shard, join("g", "b"), 10).response  # e.g. librdkafka, which names no assignor
    assert not r.should_compute_assignment
    assert shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0].assignor_name == "simple"


# ------------------------------------------------------------------ the chosen member, Prepare, Install

def test_the_chosen_member_prepares_and_installs_and_the_group_reconciles_to_it():
    shard, go, log, ra, rb = grouped()
    assert ra.should_compute_assignment and ra.member_epoch == 0 and ra.assignment == {}
    assert not rb.should_compute_assignment
    group = shard.group("g")
    assert group.group_epoch == 2 and group.assignment_epoch == 0
    assert shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0].assignor_name == "affinity"

    p = go(PrepareAssignmentRequest("g", "a", 0), 20)
    assert (p.error_code, p.group_epoch, p.assignor_name) == (0, 2, "affinity")
    assert [(m.member_id, set(m.subscribed_topic_ids), m.assignor_metadata) for m in p.members] == [
        ("a", {FOO, BAR}, b"a-meta"), ("b", {FOO}, b"b-meta")]
    assert {(t.topic_id, t.topic_name, t.num_partitions) for t in p.topics} == {(FOO, "foo", 6), (BAR, "bar", 3)}

    before = len(log)
    r = go(InstallAssignmentRequest("g", "a", 0, 2, 0, (
        InstalledMember("a", {BAR: [0, 1, 2], FOO: [5]}, 1, b"for-a"),
        InstalledMember("b", {FOO: [0, 1, 2, 3, 4]}))), 30)
    assert r.error_code == 0
    assert shard.group("g").assignment_epoch == 2
    assert {rec.key.member_id: (dict(rec.value.partitions), rec.value.metadata_bytes)
            for rec in log[before:] if hasattr(rec.key, "member_id")} == {
        "a": ({BAR: (0, 1, 2), FOO: (5,)}, b"for-a"), "b": ({FOO: (0, 1, 2, 3, 4)}, b"")}

    # Until a group's first target is installed its members stay at epoch 0 and heartbeat as joins
    ra = go(join("g", "a", topics=("foo", "bar")), 40)
    assert ra.member_epoch == 2 and ra.assignment == {BAR: (0, 1, 2), FOO: (5,)}
    assert ra.assignment_result == (0, 1, b"for-a") and not ra.should_compute_assignment
    rb = go(join("g", "b"), 50)
    assert rb.member_epoch == 2 and rb.assignment == {FOO: (0, 1, 2, 3, 4)} and rb.assignment_result is None

    # replay gives the same state, the assignor's results included
    assert dump(rebuilt(log)) == dump(shard)


def test_install_refuses_what_the_seeds_refuse_and_changes_nothing():
    shard, go, log, ra, rb = grouped()
    cases = [
        (PrepareAssignmentRequest("g", "b", 0), Errors.INVALID_REQUEST),  # b was not chosen
        (PrepareAssignmentRequest("g", "a", 7), Errors.FENCED_MEMBER_EPOCH),
        (PrepareAssignmentRequest("g", "zz", 0), Errors.UNKNOWN_MEMBER_ID),
        (PrepareAssignmentRequest("nope", "a", 0), Errors.GROUP_ID_NOT_FOUND),
        (InstallAssignmentRequest("g", "a", 0, 1, 0, ()), Errors.FENCED_MEMBER_EPOCH),  # a stale group epoch
        (InstallAssignmentRequest("g", "b", 0, 2, 0, ()), Errors.INVALID_REQUEST),
        (InstallAssignmentRequest("g", "a", 0, 2, 0, (InstalledMember("zz", {FOO: [0]}),)), Errors.INVALID_REQUEST),
        (InstallAssignmentRequest("g", "a", 0, 2, 0, (InstalledMember("b", {BAR: [0]}),)), Errors.INVALID_REQUEST),
        (InstallAssignmentRequest("g", "a", 0, 2, 0, (InstalledMember("a", {FOO: [6]}),)), Errors.INVALID_REQUEST),
        (InstallAssignmentRequest("g", "a", 0, 2, 0, (InstalledMember("a", {FOO: [1]}), InstalledMember("b", {FOO: [1]}))),
         Errors.INVALID_REQUEST),
        (InstallAssignmentRequest("g", "a", 0, 2, 0, (InstalledMember("a", {FOO: [1, 1]}),)), Errors.INVALID_REQUEST),
        (InstallAssignmentRequest("g", "a", 0, 2, 0, (InstalledMember("a", {}), InstalledMember("a", {}))),
         Errors.INVALID_REQUEST),
    ]
    state = dump(shard)
    for request, code in cases:
        result = shard.handle(request, 20)
        assert (result.response.error_code, result.records) == (code, []), request
        assert dump(shard) == state
    assert shard.group("g").assignment_epoch == 0


def test_a_chosen_member_that_lets_its_rebalance_timeout_pass_is_replaced_and_nothing_is_revoked():
    shard = make_shard()
    go, log = collect(shard)
    go(join("g", "a", client_assignors=(ca("affinity"),), rebalance_timeout_ms=1000), 0)
    go(join("g", "b", client_assignors=(ca("affinity"),), rebalance_timeout_ms=1000), 10)
    go(InstallAssignmentRequest("g", "a", 0, 2, 0, (InstalledMember("a", {FOO: [0, 1, 2]}),
                                                   InstalledMember("b", {FOO: [3, 4, 5]}))), 20)
    assert go(join("g", "a", rebalance_timeout_ms=1000), 30).assignment == {FOO: (0, 1, 2)}
    assert go(join("g", "b", rebalance_timeout_ms=1000), 40).assignment == {FOO: (3, 4, 5)}

    # b's assignor metadata changes: a new epoch; b, whose heartbeat moved it, is chosen and never installs
    r = go(hb("g", "b", 2, owned={FOO: [3, 4, 5]}, client_assignors=(ca("affinity", metadata=b"new"),)), 100)
    assert shard.group("g").group_epoch == 3 and r.should_compute_assignment
    assert not go(hb("g", "a", 2, owned={FOO: [0, 1, 2]}), 110).should_compute_assignment
    assert go(hb("g", "b", 2, owned={FOO: [3, 4, 5]}), 500).should_compute_assignment  # still b's turn
    shard.expire(100 + 1000)
    r = go(hb("g", "b", 2, owned={FOO: [3, 4, 5]}), 1200)
    assert not r.should_compute_assignment  # it had its turn
    r = go(hb("g", "a", 2, owned={FOO: [0, 1, 2]}), 1210)
    assert r.should_compute_assignment
    group = shard.group("g")
    assert group.assignment_epoch == 2 and group.members["b"].assigned_partitions == {FOO: (3, 4, 5)}
    assert go(PrepareAssignmentRequest("g", "b", 2), 1220).error_code == Errors.INVALID_REQUEST
    assert go(InstallAssignmentRequest("g", "a", 2, 3, 0, (InstalledMember("a", {FOO: [0, 1]}),
                                                          InstalledMember("b", {FOO: [2, 3, 4, 5]}))), 1230).error_code == 0
    r = go(hb("g", "a", 2, owned={FOO: [0, 1, 2]}), 1240)
    assert r.member_epoch == 2 and r.assignment == {FOO: (0, 1)}  # revoke first, as with server-side assignors
    r = go(hb("g", "a", 2, owned={FOO: [0, 1]}), 1250)
    assert r.member_epoch == 3 and r.assignment is None
    assert dump(rebuilt(log)) == dump(shard)


def test_a_chosen_member_that_leaves_is_replaced_by_the_next_to_heartbeat():
    shard, go, log, ra, rb = grouped()
    assert ra.should_compute_assignment
    go(hb("g", "a", -1), 20)  # leaves: a new epoch
    r = go(join("g", "b"), 30)
    assert r.should_compute_assignment
    p = go(PrepareAssignmentRequest("g", "b", 0), 40)
    assert p.group_epoch == 3 and [m.member_id for m in p.members] == ["b"]


@pytest.mark.parametrize("bad", [(ca(""),), (ca("x", 2, 1),), (ca("x", 0, 1, version=3),), (ca("x", -1, 1),),
                                 tuple(ca(f"a{i}") for i in range(33))])
def test_heartbeats_with_invalid_client_assignors_are_refused(bad):
    shard = make_shard()
    r = shard.handle(join("g", "a", client_assignors=bad), 0)
    assert r.response.error_code == Errors.INVALID_REQUEST and r.records == []
    assert run(shard, join("g", "a", client_assignors=tuple(ca(f"a{i}") for i in range(32))), 0).response.error_code == 0

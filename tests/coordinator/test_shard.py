"""The shard contract: replay rebuilds state, reads see only committed records, revert undoes."""

from __future__ import annotations

import pytest

from cohort.coordinator import (
    ConsumerGroupDescribeRequest,
    Errors,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Record,
    decode,
    encode,
)
from cohort.coordinator.requests import OffsetCommitPartition, OffsetCommitTopic

from cg_helpers import FOO, dump, hb, image, join, make_shard, rebuilt, run


def scenario():
    """A shard that went through joins, revocations, a static leave, a commit and a fence."""
    shard = make_shard()
    log = []

    def go(request, now):
        result = run(shard, request, now)
        log.extend(result.records)
        return result

    go(join("g", "a", instance_id="i1"), 0)
    go(join("g", "b"), 10)
    go(join("g", "c", subscribed_topic_regex="ba.", topics=()), 15)
    go(hb("g", "a", 1, owned={FOO: [0, 1, 2, 3, 4, 5]}), 20)
    go(OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 17, 3, "x")])], "a", 1), 25)
    go(hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 30)
    go(hb("g", "a", -2, instance_id="i1"), 40)
    go(join("h", "z"), 50)
    go(hb("h", "z", -1), 60)
    return shard, log


def test_replaying_all_records_rebuilds_identical_state():
    shard, log = scenario()
    assert dump(rebuilt(log)) == dump(shard)


def test_replaying_serialised_records_rebuilds_identical_state():
    shard, log = scenario()
    assert dump(rebuilt([decode(*encode(r)) for r in log])) == dump(shard)


def test_loading_rearms_timers():
    shard, log = scenario()
    loaded = rebuilt(log, now=1000)
    assert loaded.timers.deadline("session-timeout-g-b") == 1000 + 45_000
    assert loaded.timers.deadline("session-timeout-g-a") == 1000 + 45_000  # parked static member
    assert "session-timeout-h-z" not in loaded.timers
    assert loaded.timers.deadline("offsets-expiration") == 1000 + 600_000


def test_loading_rearms_rebalance_timer_of_unrevoked_member():
    shard = make_shard()
    log = []
    for req, now in [(join("g", "a", rebalance_timeout_ms=5000), 0), (join("g", "b"), 0),
                     (hb("g", "a", 1, owned={FOO: [0, 1, 2, 3, 4, 5]}), 0)]:
        log += run(shard, req, now).records
    loaded = rebuilt(log, now=100)
    assert loaded.timers.deadline("rebalance-timeout-g-a") == 5100
    assert loaded.timers.payload("rebalance-timeout-g-a") == ("rebalance", "g", "a", 1)


def describe(shard, gid="g"):
    return shard.describe_groups(ConsumerGroupDescribeRequest([gid])).groups[0]


def test_reads_do_not_see_uncommitted_records():
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    pending = shard.handle(join("g", "b"), 10)
    assert "b" in shard.group("g").members  # applied...
    committed = describe(shard)
    assert [m.member_id for m in committed.members] == ["a"]  # ...but not visible
    assert (committed.group_epoch, committed.group_state) == (1, "Stable")
    shard.commit(pending.end_offset)
    assert [m.member_id for m in describe(shard).members] == ["a", "b"]


def test_uncommitted_new_group_is_invisible():
    shard = make_shard()
    result = shard.handle(join("g", "a"), 0)
    assert describe(shard).error_code == Errors.GROUP_ID_NOT_FOUND
    assert shard.list_groups(ListGroupsRequest()).groups == ()
    shard.commit(result.end_offset)
    assert [g.group_id for g in shard.list_groups().groups] == ["g"]


def test_uncommitted_offsets_are_invisible():
    shard = make_shard()
    run(shard, OffsetCommitRequest("s", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 5)])]), 0)
    result = shard.handle(OffsetCommitRequest("s", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 9)])]), 1)
    fetched = shard.fetch_offsets(OffsetFetchRequest("s"))
    assert fetched.topics[0].partitions[0].committed_offset == 5
    shard.commit(result.end_offset)
    assert shard.fetch_offsets(OffsetFetchRequest("s")).topics[0].partitions[0].committed_offset == 9


def test_revert_restores_exact_state():
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    run(shard, join("g", "b"), 10)
    before = dump(shard)
    start = shard.last_written_offset
    shard.handle(hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 20)
    shard.handle(hb("g", "b", -1), 30)
    shard.handle(join("x", "y"), 30)
    assert dump(shard) != before
    shard.revert(start)
    assert dump(shard) == before
    assert shard.last_written_offset == start
    # and the shard keeps working
    assert run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 40).response.member_epoch == 2


def test_revert_below_committed_offset_is_refused():
    shard = make_shard()
    result = run(shard, join("g", "a"), 0)
    with pytest.raises(ValueError):
        shard.revert(result.end_offset - 1)


def test_commit_beyond_written_is_refused():
    shard = make_shard()
    with pytest.raises(ValueError):
        shard.commit(1)


def test_offsets_are_consecutive_across_results():
    shard = make_shard()
    r1 = shard.handle(join("g", "a"), 0)
    r2 = shard.handle(join("g", "b"), 0)
    assert r1.end_offset == len(r1.records)
    assert r2.end_offset == r1.end_offset + len(r2.records)


def test_replay_refuses_while_writes_are_pending():
    shard = make_shard()
    result = shard.handle(join("g", "a"), 0)
    with pytest.raises(RuntimeError):
        shard.replay(result.records[0])


def test_record_for_unknown_member_assignment_is_an_error():
    from cohort.coordinator.errors import IllegalStateError
    from cohort.coordinator.records import ConsumerGroupCurrentMemberAssignmentKey as K
    from cohort.coordinator.records import ConsumerGroupCurrentMemberAssignmentValue as V
    from cohort.coordinator.records import MemberState
    shard = make_shard()
    with pytest.raises(IllegalStateError):
        shard.replay(Record(K("g", "ghost"), V(1, 0, MemberState.STABLE, {}, {})))


def test_double_ownership_in_a_log_is_detected():
    from cohort.coordinator.errors import IllegalStateError
    from cohort.coordinator.records import ConsumerGroupCurrentMemberAssignmentKey as K
    from cohort.coordinator.records import ConsumerGroupCurrentMemberAssignmentValue as V
    from cohort.coordinator.records import ConsumerGroupMemberMetadataKey as MK
    from cohort.coordinator.records import MemberState
    shard = make_shard()
    log = run(shard, join("g", "a"), 0).records  # a owns foo 0-5 at epoch 1
    md = next(r for r in log if r.key == MK("g", "a"))
    fresh = rebuilt(log)
    fresh.replay(Record(MK("g", "intruder"), md.value))
    with pytest.raises(IllegalStateError, match="still owned at epoch 1"):
        fresh.replay(Record(K("g", "intruder"), V(1, 0, MemberState.STABLE, {FOO: (0,)}, {})))


def test_metadata_image_change_is_noticed_after_load():
    shard, log = scenario()
    loaded = rebuilt(log, img=image(foo=12, bar=3))
    epoch = loaded.group("g").group_epoch
    member = loaded.group("g").members["b"]
    result = run(loaded, hb("g", "b", member.member_epoch), 100)
    assert result.response.error_code == 0
    assert loaded.group("g").group_epoch == epoch + 1


def test_uncommitted_group_deletion_is_invisible():
    from cohort.coordinator import DeleteGroupsRequest
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    run(shard, hb("g", "a", -1), 0)
    result = shard.handle(DeleteGroupsRequest(["g"]), 0)
    assert result.response.results[0].error_code == 0 and shard.group("g") is None
    assert describe(shard).group_state == "Empty"
    assert [g.group_id for g in shard.list_groups().groups] == ["g"]
    shard.commit(result.end_offset)
    assert describe(shard).error_code == Errors.GROUP_ID_NOT_FOUND
    assert shard.list_groups().groups == ()


def test_stored_group_config_outside_new_broker_bounds_does_not_break_loading():
    from cohort.coordinator import AlterGroupConfigRequest, CoordinatorConfig
    shard = make_shard()
    log = run(shard, AlterGroupConfigRequest("g", {"consumer.session.timeout.ms": "60000",
                                                   "consumer.heartbeat.interval.ms": "6000"}), 0).records
    narrower = CoordinatorConfig(consumer_assignors=("simple",), consumer_max_session_timeout_ms=50_000)
    loaded = rebuilt(log, config=narrower)
    cfg = loaded.state.group_config("g")
    assert (cfg.session_timeout(narrower), cfg.heartbeat_interval(narrower)) == (45_000, 6000)


@pytest.mark.parametrize("group_id, java_hash", [
    ("", 0), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0
])
def test_partition_for_uses_java_string_hash(group_id, java_hash):
    from cohort.coordinator import partition_for
    expected = 0 if java_hash == -(2**31) else abs(java_hash)
    assert partition_for(group_id, 50) == expected % 50
    assert partition_for(group_id, 2**31 - 1) == expected % (2**31 - 1)

"""Share groups (KIP-932) in the coordinator shard: ShareGroupHeartbeat, the simple assignment,
describe / list / delete, the one namespace with the other group types, records and replay."""

from __future__ import annotations

import pytest
from cg_helpers import FOO, BAR, image

from cohort.coordinator import (
    ConsumerGroupHeartbeatRequest,
    CoordinatorConfig,
    DeleteGroupsRequest,
    GroupCoordinatorShard,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from cohort.coordinator.errors import Errors
from cohort.coordinator.records import decode, encode
from cohort.coordinator.requests import JoinGroupRequest, OffsetCommitPartition, OffsetCommitTopic
from cohort.coordinator.share_requests import ShareGroupDescribeRequest, ShareGroupHeartbeatRequest as HB

SESSION = 45_000


def new_shard(**config) -> GroupCoordinatorShard:
    shard = GroupCoordinatorShard(CoordinatorConfig(**config), image=image(foo=2, bar=3))
    shard.on_loaded(0)
    return shard


def run(shard, request, now=0):
    result = shard.handle(request, now)
    shard.commit(result.end_offset)
    return result


def join(shard, member, topics=("foo",), group="g", now=0):
    return run(shard, HB(group, member, 0, subscribed_topic_names=tuple(topics)), now).response


def beat(shard, member, epoch, group="g", now=0, topics=None):
    return run(shard, HB(group, member, epoch, subscribed_topic_names=topics), now).response


def describe(shard, group="g"):
    return shard.describe_share_groups(ShareGroupDescribeRequest((group,))).groups[0]


def test_a_first_member_gets_every_partition_in_its_first_response():
    shard = new_shard()
    r = join(shard, "m1")
    assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms) == (0, 1, 5000)
    assert r.assignment == {FOO: (0, 1)}


def test_members_share_partitions_when_there_are_more_members_than_partitions():
    shard = new_shard()
    for m in ("m1", "m2", "m3", "m4", "m5"):
        join(shard, m)
    for m in ("m1", "m2", "m3", "m4", "m5"):  # each catches up with the target at once (no revocation)
        r = beat(shard, m, shard.state.share_groups["g"].members[m].member_epoch)
        assert r.member_epoch == 5
    owners = {p: [m for m, member in shard.state.share_groups["g"].members.items()
                  if p in member.assigned_partitions.get(FOO, ())] for p in (0, 1)}
    assert sorted(len(v) for v in owners.values()) == [3, 3]  # sharing ceil(5/2) = 3, 6 slots over 5 members
    d = describe(shard)
    assert (d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == ("Stable", 5, 5, "simple")


def test_assignment_is_sent_only_when_it_changes_or_the_request_is_full():
    shard = new_shard()
    join(shard, "m1")
    assert beat(shard, "m1", 1).assignment is None
    assert beat(shard, "m1", 1, topics=("foo",)).assignment == {FOO: (0, 1)}  # a full request
    assert join(shard, "m1").assignment == {FOO: (0, 1)}  # epoch 0 with a known id: same member, full answer
    assert beat(shard, "m1", 1).member_epoch == 1


def test_epoch_fencing_accepts_only_the_current_or_the_previous_epoch():
    shard = new_shard()
    join(shard, "m1")
    join(shard, "m2")
    assert beat(shard, "m1", 1).member_epoch == 2  # m1 moves from 1 to 2
    assert beat(shard, "m1", 1).error_code == 0  # its previous epoch: the last response may be lost
    assert beat(shard, "m1", 3).error_code == Errors.FENCED_MEMBER_EPOCH
    join(shard, "m3")
    beat(shard, "m1", 2)  # now at 3, previous 2
    assert beat(shard, "m1", 1).error_code == Errors.FENCED_MEMBER_EPOCH


@pytest.mark.parametrize("request_, code", [
    (HB("g", "", 0, subscribed_topic_names=("foo",)), Errors.INVALID_REQUEST),
    (HB("g", "x" * 37, 0, subscribed_topic_names=("foo",)), Errors.INVALID_REQUEST),
    (HB("", "m", 0, subscribed_topic_names=("foo",)), Errors.INVALID_REQUEST),
    (HB("g", "m", 0, rack_id="", subscribed_topic_names=("foo",)), Errors.INVALID_REQUEST),
    (HB("g", "m", 0), Errors.INVALID_REQUEST),
    (HB("g", "m", 0, subscribed_topic_names=()), Errors.INVALID_REQUEST),
    (HB("g", "m", -2), Errors.INVALID_REQUEST),
    (HB("g", "m", 3), Errors.GROUP_ID_NOT_FOUND),
    (HB("g", "m", -1), Errors.GROUP_ID_NOT_FOUND),
])
def test_invalid_heartbeats_get_kafkas_errors_and_write_nothing(request_, code):
    shard = new_shard()
    result = shard.handle(request_, 0)
    assert result.response.error_code == code and result.records == []


def test_unknown_member_and_group_max_size():
    shard = new_shard(share_max_size=2, share_max_share_sessions=2)
    join(shard, "m1")
    assert beat(shard, "zz", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    join(shard, "m2")
    assert join(shard, "m3").error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert join(shard, "m1").error_code == 0  # a known member rejoining is not a new one


def test_leave_and_session_timeout_fence_the_member_and_bump_the_epoch():
    shard = new_shard()
    join(shard, "m1")
    join(shard, "m2", now=1000)
    r = run(shard, HB("g", "m1", -1)).response
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert set(shard.state.share_groups["g"].members) == {"m2"}
    assert shard.state.share_groups["g"].group_epoch == 3
    assert run(shard, HB("g", "m1", -1)).response.error_code == Errors.UNKNOWN_MEMBER_ID
    # m2 sends nothing: its session expires
    result = shard.expire(1000 + SESSION)
    shard.commit(result.end_offset)
    assert "session-timeout-g-m2" in result.response
    assert describe(shard).group_state == "Empty"
    assert beat(shard, "m2", 2).error_code == Errors.UNKNOWN_MEMBER_ID


def test_a_heartbeat_keeps_the_session_alive():
    shard = new_shard()
    join(shard, "m1")
    beat(shard, "m1", 1, now=SESSION - 1)
    shard.commit(shard.expire(SESSION).end_offset)
    assert "m1" in shard.state.share_groups["g"].members


def test_subscription_changes_and_topics_that_appear_later():
    shard = new_shard()
    join(shard, "m1", topics=("foo", "later"))
    assert beat(shard, "m1", 1, topics=("bar",)).assignment == {BAR: (0, 1, 2)}
    # a topic created later, and partitions added, become assignable on the next heartbeat
    from cohort.coordinator import MetadataImage, TopicImage
    import uuid
    later = uuid.UUID(int=77)
    shard.update_metadata(MetadataImage.of([TopicImage("foo", FOO, 2), TopicImage("bar", BAR, 5),
                                            TopicImage("later", later, 1)], 2))
    r = beat(shard, "m1", 2, topics=("bar", "later"))
    assert r.assignment == {BAR: (0, 1, 2, 3, 4), later: (0,)}
    # a deleted topic leaves the assignment and the group's initialized state
    shard.update_metadata(MetadataImage.of([TopicImage("bar", BAR, 5)], 3))
    r = beat(shard, "m1", r.member_epoch)
    assert r.assignment == {BAR: (0, 1, 2, 3, 4)}
    assert set(shard.state.share_groups["g"].initialized) == {BAR}


def test_initialized_partitions_are_recorded_once_and_kept_after_unsubscribing():
    shard = new_shard()
    join(shard, "m1")
    group = shard.state.share_groups["g"]
    assert group.initialized_partitions(FOO) == (0, 1)
    records = run(shard, HB("g", "m1", 1, subscribed_topic_names=("bar",))).records
    assert group.initialized_partitions(FOO) == (0, 1)  # offsets outlive the subscription, as in Kafka
    assert group.initialized_partitions(BAR) == (0, 1, 2)
    assert sum(1 for rec in records if type(rec.key).__name__ == "ShareGroupStatePartitionMetadataKey") == 1


def test_one_namespace_across_group_types():
    shard = new_shard()
    join(shard, "m1", group="sg")
    # other types' APIs do not find a share group
    r = run(shard, ConsumerGroupHeartbeatRequest("sg", "c1", 0, rebalance_timeout_ms=30000,
                                                 subscribed_topic_names=("foo",), topic_partitions={})).response
    assert r.error_code == Errors.GROUP_ID_NOT_FOUND
    r = run(shard, JoinGroupRequest("sg", "", "consumer", (("range", b""),), 10000)).response
    assert r.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    r = run(shard, OffsetCommitRequest("sg", (OffsetCommitTopic("foo", (OffsetCommitPartition(0, 5),)),))).response
    assert {p.error_code for t in r.topics for p in t.partitions} == {Errors.GROUP_ID_NOT_FOUND}
    assert shard.fetch_offsets(OffsetFetchRequest("sg")).error_code == Errors.GROUP_ID_NOT_FOUND
    # and a share member cannot join an id another type holds
    run(shard, ConsumerGroupHeartbeatRequest("cg", "c1", 0, rebalance_timeout_ms=30000,
                                             subscribed_topic_names=("foo",), topic_partitions={}))
    run(shard, OffsetCommitRequest("simple", (OffsetCommitTopic("foo", (OffsetCommitPartition(0, 5),)),)))
    for gid in ("cg", "simple"):
        r = join(shard, "m1", group=gid)
        assert (r.error_code, r.error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        assert describe(shard, gid).error_code == Errors.GROUP_ID_NOT_FOUND
    listed = {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in shard.list_groups().groups}
    assert listed["sg"] == ("share", "Stable", "share")
    assert [g.group_id for g in shard.list_groups(ListGroupsRequest(types_filter=("share",))).groups] == ["sg"]


def test_delete_an_empty_share_group_only():
    shard = new_shard()
    join(shard, "m1")
    r = run(shard, DeleteGroupsRequest(("g",))).response
    assert r.results[0].error_code == Errors.NON_EMPTY_GROUP
    run(shard, HB("g", "m1", -1))
    r = run(shard, DeleteGroupsRequest(("g",)))
    assert r.response.results[0].error_code == 0
    assert "g" not in shard.state.share_groups and describe(shard).error_code == Errors.GROUP_ID_NOT_FOUND
    assert join(shard, "m1").assignment == {FOO: (0, 1)}  # the id is free again


def test_records_round_trip_and_replay_rebuilds_the_group():
    shard = new_shard()
    log = []
    for request, now in [(HB("g", "m1", 0, rack_id="r1", subscribed_topic_names=("foo", "bar")), 0),
                         (HB("g", "m2", 0, subscribed_topic_names=("foo",)), 10),
                         (HB("g", "m1", 1), 20), (HB("g", "m2", -1), 30)]:
        result = run(shard, request, now)
        for record in result.records:
            key, value = encode(record)
            assert decode(key, value) == record
            log.append((key, value))
    replayed = GroupCoordinatorShard(CoordinatorConfig(), image=image(foo=2, bar=3))
    for key, value in log:
        replayed.replay(decode(key, value))
    replayed.on_loaded(100)
    assert describe(replayed) == describe(shard)
    assert replayed.state.share_groups["g"].initialized == shard.state.share_groups["g"].initialized
    assert replayed.next_deadline() == 100 + SESSION


def test_a_failed_append_is_undone():
    shard = new_shard()
    join(shard, "m1")
    before = describe(shard)
    result = shard.handle(HB("g", "m2", 0, subscribed_topic_names=("foo", "bar")), 0)
    assert result.records
    shard.revert(result.end_offset - len(result.records))
    assert describe(shard) == before
    assert set(shard.state.share_groups["g"].members) == {"m1"}
    assert set(shard.state.share_groups["g"].initialized) == {FOO}
    # a group created by the failed write is gone entirely
    result = shard.handle(HB("new", "m9", 0, subscribed_topic_names=("foo",)), 0)
    shard.revert(result.end_offset - len(result.records))
    assert "new" not in shard.state.share_groups


def test_group_configs_set_the_share_interval_and_session():
    from cohort.coordinator.requests import AlterGroupConfigRequest
    shard = new_shard()
    r = run(shard, AlterGroupConfigRequest("g", {"share.heartbeat.interval.ms": "6000",
                                                 "share.session.timeout.ms": "50000"})).response
    assert r.error_code == 0
    assert join(shard, "m1").heartbeat_interval_ms == 6000
    shard.commit(shard.expire(SESSION + 1).end_offset)
    assert "m1" in shard.state.share_groups["g"].members  # 50 s, not 45 s
    for bad in ({"share.session.timeout.ms": "1000"}, {"share.record.lock.duration.ms": "999"},
                {"share.auto.offset.reset": "by_duration:-PT1H"}, {"share.isolation.level": "read_dirty"},
                {"share.heartbeat.interval.ms": "4999"}):
        r = run(shard, AlterGroupConfigRequest("g", bad)).response
        assert r.error_code == Errors.INVALID_CONFIG, bad
    ok = run(shard, AlterGroupConfigRequest("g", {"share.auto.offset.reset": "by_duration:PT1H",
                                                  "share.isolation.level": "read_committed"})).response
    assert ok.error_code == 0
    assert shard.state.group_config("g").share_isolation_level == "read_committed"

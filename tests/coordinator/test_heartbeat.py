"""ConsumerGroupHeartbeat scenarios: responses and the exact records emitted, on a fake clock."""

from __future__ import annotations

import pytest

from cohort.coordinator import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CoordinatorConfig,
    Errors,
    MemberState,
    Record,
)
from cohort.coordinator.records import (
    ConsumerGroupCurrentMemberAssignmentKey as CurKey,
    ConsumerGroupCurrentMemberAssignmentValue as Cur,
    ConsumerGroupMemberMetadataKey as MdKey,
    ConsumerGroupMemberMetadataValue as Md,
    ConsumerGroupMetadataKey as GroupKey,
    ConsumerGroupMetadataValue as GroupValue,
    ConsumerGroupTargetAssignmentMemberKey as TgtKey,
    ConsumerGroupTargetAssignmentMemberValue as Tgt,
    ConsumerGroupTargetAssignmentMetadataKey as TgtMetaKey,
    ConsumerGroupTargetAssignmentMetadataValue as TgtMeta,
)

from cg_helpers import BAR, FOO, hb, image, join, make_shard, run

STABLE, UNREVOKED, UNRELEASED = MemberState.STABLE, MemberState.UNREVOKED_PARTITIONS, MemberState.UNRELEASED_PARTITIONS


def md(topics=("foo",), **kw) -> Md:
    fields = dict(instance_id=None, rack_id=None, client_id="", client_host="", subscribed_topic_names=tuple(topics),
                  subscribed_topic_regex=None, rebalance_timeout_ms=300_000, server_assignor=None)
    fields.update(kw)
    return Md(**fields)


def epoch_of(shard, group="g"):
    return shard.group(group).group_epoch


def two_member_group():
    """a owns foo 0-2, b owns foo 3-5, both stable at epoch 2."""
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    run(shard, join("g", "b"), 10)
    run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 20)
    run(shard, hb("g", "b", 2, owned={}), 30)
    return shard


# ------------------------------------------------------------------ joining

def test_first_member_creates_group_and_gets_everything():
    shard = make_shard()
    result = run(shard, join("g", "a"), 0)
    h = shard.group("g").metadata_hash
    assert h != 0
    assert result.records == [
        Record(MdKey("g", "a"), md()),
        Record(GroupKey("g"), GroupValue(1, h)),
        Record(TgtKey("g", "a"), Tgt({FOO: (0, 1, 2, 3, 4, 5)})),
        Record(TgtMetaKey("g"), TgtMeta(1)),
        Record(CurKey("g", "a"), Cur(1, 0, STABLE, {FOO: (0, 1, 2, 3, 4, 5)}, {})),
    ]
    r = result.response
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "a", 1, 5000)
    assert r.assignment == {FOO: (0, 1, 2, 3, 4, 5)}


def test_second_member_waits_for_revocation_before_getting_partitions():
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    result = run(shard, join("g", "b"), 10)
    assert result.records[1:] == [
        Record(GroupKey("g"), GroupValue(2, shard.group("g").metadata_hash)),
        Record(TgtKey("g", "a"), Tgt({FOO: (0, 1, 2)})),
        Record(TgtKey("g", "b"), Tgt({FOO: (3, 4, 5)})),
        Record(TgtMetaKey("g"), TgtMeta(2)),
        Record(CurKey("g", "b"), Cur(2, 0, UNRELEASED, {}, {})),
    ]
    assert (result.response.member_epoch, result.response.assignment) == (2, {})
    # a still owns everything: it must revoke 3-5 and stays at epoch 1 meanwhile
    result = run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2, 3, 4, 5]}), 20)
    assert result.records == [Record(CurKey("g", "a"), Cur(1, 1, UNREVOKED, {FOO: (0, 1, 2)}, {FOO: (3, 4, 5)}))]
    assert (result.response.member_epoch, result.response.assignment) == (1, {FOO: (0, 1, 2)})
    # b still cannot have 3-5: a has not released them. Kafka's updateMemberEpoch still moves the
    # previous epoch (0 -> 2), which is a record; the next identical heartbeat writes nothing.
    result = run(shard, hb("g", "b", 2, owned={}), 25)
    assert result.records == [Record(CurKey("g", "b"), Cur(2, 2, UNRELEASED, {}, {}))]
    assert (result.response.member_epoch, result.response.assignment) == (2, None)
    assert run(shard, hb("g", "b", 2, owned={}), 26).records == []
    # a acknowledges the revocation: it moves to epoch 2
    result = run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 30)
    assert result.records == [Record(CurKey("g", "a"), Cur(2, 1, STABLE, {FOO: (0, 1, 2)}, {}))]
    assert (result.response.member_epoch, result.response.assignment) == (2, None)
    # now b gets them
    result = run(shard, hb("g", "b", 2, owned={}), 40)
    assert result.records == [Record(CurKey("g", "b"), Cur(2, 2, STABLE, {FOO: (3, 4, 5)}, {}))]
    assert result.response.assignment == {FOO: (3, 4, 5)}
    assert shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0].group_state == "Stable"


def test_steady_state_heartbeat_writes_nothing_and_omits_assignment():
    shard = two_member_group()
    result = run(shard, hb("g", "a", 2, owned={FOO: [0, 1, 2]}), 50)
    assert result.records == []
    assert (result.response.member_epoch, result.response.assignment) == (2, None)
    result = run(shard, hb("g", "a", 2), 60)
    assert result.records == [] and result.response.assignment is None


def test_full_request_gets_the_assignment_even_when_unchanged():
    shard = two_member_group()
    result = run(shard, hb("g", "a", 2, owned={FOO: [0, 1, 2]}, rebalance_timeout_ms=300_000,
                           subscribed_topic_names=["foo"]), 50)
    assert result.records == []
    assert result.response.assignment == {FOO: (0, 1, 2)}


def test_v0_join_gets_a_generated_member_id():
    shard = make_shard(member_id_factory=lambda: "generated-1")
    result = run(shard, join("g", "", api_version=0), 0)
    assert result.response.member_id == "generated-1"
    assert "generated-1" in shard.group("g").members


def test_known_member_rejoining_with_epoch_zero_is_accepted():
    shard = two_member_group()
    result = run(shard, join("g", "a"), 50)
    assert result.response.error_code == 0
    assert (result.response.member_epoch, result.response.assignment) == (2, {FOO: (0, 1, 2)})
    assert epoch_of(shard) == 2


def test_rejoin_after_leave_gets_a_new_assignment():
    shard = two_member_group()
    run(shard, hb("g", "b", -1), 50)
    result = run(shard, join("g", "b"), 60)
    assert result.response.member_epoch == 4


# ------------------------------------------------------------------ validation

@pytest.mark.parametrize(
    "request_, code, message",
    [
        (ConsumerGroupHeartbeatRequest("g", "", 0, rebalance_timeout_ms=1, subscribed_topic_names=[], topic_partitions={}),
         Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (ConsumerGroupHeartbeatRequest("g", " ", 3, api_version=0), Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (ConsumerGroupHeartbeatRequest("g", "", -1, api_version=0), Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (ConsumerGroupHeartbeatRequest(" ", "m", 1), Errors.INVALID_REQUEST, "GroupId can't be empty."),
        (ConsumerGroupHeartbeatRequest("g", "m", 1, instance_id=""), Errors.INVALID_REQUEST, "InstanceId can't be empty."),
        (ConsumerGroupHeartbeatRequest("g", "m", 1, rack_id=" "), Errors.INVALID_REQUEST, "RackId can't be empty."),
        (ConsumerGroupHeartbeatRequest("g", "m", 0, subscribed_topic_names=["foo"], topic_partitions={}),
         Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
        (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["foo"]),
         Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
        (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["foo"],
                                       topic_partitions={FOO: [1]}),
         Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
        (ConsumerGroupHeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, topic_partitions={}),
         Errors.INVALID_REQUEST, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
        (ConsumerGroupHeartbeatRequest("g", "m", -2), Errors.INVALID_REQUEST, "InstanceId can't be null."),
        (ConsumerGroupHeartbeatRequest("g", "m", -3), Errors.INVALID_REQUEST, "MemberEpoch is invalid."),
        (ConsumerGroupHeartbeatRequest("g", "m", 1, server_assignor="sticky"), Errors.UNSUPPORTED_ASSIGNOR,
         "ServerAssignor sticky is not supported. Supported assignors: simple, failing, uniform, range."),
        (ConsumerGroupHeartbeatRequest("nope", "m", 1), Errors.GROUP_ID_NOT_FOUND, "Group nope not found."),
        (ConsumerGroupHeartbeatRequest("nope", "m", -1), Errors.GROUP_ID_NOT_FOUND, "Group nope not found."),
        (ConsumerGroupHeartbeatRequest("g", "zz", 1), Errors.UNKNOWN_MEMBER_ID, "Member zz is not a member of group g."),
        (ConsumerGroupHeartbeatRequest("g", "zz", -1), Errors.UNKNOWN_MEMBER_ID, "Member zz is not a member of group g."),
        (ConsumerGroupHeartbeatRequest("g", "a", 3), Errors.FENCED_MEMBER_EPOCH,
         "The consumer group member has a greater member epoch (3) than the one known by the group coordinator (2). "
         "The member must abandon all its partitions and rejoin."),
        (ConsumerGroupHeartbeatRequest("g", "a", 1), Errors.FENCED_MEMBER_EPOCH,
         "The consumer group member has a smaller member epoch (1) than the one known by the group coordinator (2). "
         "The member must abandon all its partitions and rejoin."),
        (ConsumerGroupHeartbeatRequest("g", "a", 2, subscribed_topic_regex="(", api_version=1),
         Errors.INVALID_REGULAR_EXPRESSION, None),
    ],
)
def test_invalid_requests_are_rejected_without_records(request_, code, message):
    shard = two_member_group()
    before = shard.last_written_offset
    result = shard.handle(request_, 100)
    assert result.records == [] and shard.last_written_offset == before
    assert result.response.error_code == code
    if message is not None:
        assert result.response.error_message == message
    else:
        assert result.response.error_message.startswith("SubscribedTopicRegex `(` is not a valid regular expression")


def test_validation_order_member_id_before_group_id():
    shard = make_shard()
    result = shard.handle(ConsumerGroupHeartbeatRequest("", "", 5), 0)
    assert result.response.error_message == "MemberId can't be empty."


def test_lost_response_tolerance():
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    run(shard, join("g", "b"), 10)  # a: target 0-2 at epoch 2
    run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 20)  # a -> epoch 2 (previous 1)
    # the response was lost: a heartbeats again with epoch 1 and a subset of its partitions
    ok = run(shard, hb("g", "a", 1, owned={FOO: [0, 1]}), 30)
    assert ok.response.error_code == 0 and ok.response.member_epoch == 2
    # but not with partitions it does not own, nor without owned partitions
    bad = run(shard, hb("g", "a", 1, owned={FOO: [5]}), 40)
    assert bad.response.error_code == Errors.FENCED_MEMBER_EPOCH
    bad = run(shard, hb("g", "a", 1), 50)
    assert bad.response.error_code == Errors.FENCED_MEMBER_EPOCH


# ------------------------------------------------------------------ leaving and fencing

def test_leave_writes_tombstones_then_bumps_epoch():
    shard = two_member_group()
    result = run(shard, hb("g", "b", -1), 50)
    h = shard.group("g").metadata_hash
    assert result.records == [
        Record(CurKey("g", "b"), None),
        Record(TgtKey("g", "b"), None),
        Record(MdKey("g", "b"), None),
        Record(GroupKey("g"), GroupValue(3, h)),
    ]
    assert (result.response.member_id, result.response.member_epoch) == ("b", -1)
    assert "session-timeout-g-b" not in shard.timers
    assert shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0].group_state == "Assigning"
    # the next heartbeat computes the new target lazily
    result = run(shard, hb("g", "a", 2), 60)
    assert result.records == [
        Record(TgtKey("g", "a"), Tgt({FOO: (0, 1, 2, 3, 4, 5)})),
        Record(TgtMetaKey("g"), TgtMeta(3)),
        Record(CurKey("g", "a"), Cur(3, 2, STABLE, {FOO: (0, 1, 2, 3, 4, 5)}, {})),
    ]


def test_last_member_leaving_moves_assignment_epoch_too():
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    result = run(shard, hb("g", "a", -1), 10)
    assert result.records[-2:] == [Record(GroupKey("g"), GroupValue(2, 0)), Record(TgtMetaKey("g"), TgtMeta(2))]
    described = shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0]
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == ("Empty", 2, 2)


def test_session_timeout_fences_member():
    shard = two_member_group()
    assert shard.next_deadline() == 20 + 45_000  # a's last heartbeat was at 20
    assert shard.expire(20 + 44_999).records == []
    result = shard.expire(20 + 45_000)
    shard.commit(result.end_offset)
    assert result.response == ["session-timeout-g-a"]
    assert [r.key for r in result.records[:3]] == [CurKey("g", "a"), TgtKey("g", "a"), MdKey("g", "a")]
    assert "a" not in shard.group("g").members and epoch_of(shard) == 3


def test_heartbeat_rearms_session_timer():
    shard = two_member_group()
    run(shard, hb("g", "a", 2), 40_000)
    shard.expire(60_000)  # b (last heartbeat at 30) expires, a does not
    assert set(shard.group("g").members) == {"a"}
    assert shard.timers.deadline("session-timeout-g-a") == 85_000


def test_rebalance_timeout_fences_member_that_does_not_revoke():
    shard = make_shard()
    run(shard, join("g", "a", rebalance_timeout_ms=1000), 0)
    run(shard, join("g", "b"), 10)
    run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2, 3, 4, 5]}), 20)  # a -> UNREVOKED
    assert shard.timers.deadline("rebalance-timeout-g-a") == 1020
    result = shard.expire(1020)
    assert result.response == ["rebalance-timeout-g-a"]
    assert "a" not in shard.group("g").members


def test_rebalance_timer_cancelled_when_revocation_acknowledged():
    shard = make_shard()
    run(shard, join("g", "a", rebalance_timeout_ms=1000), 0)
    run(shard, join("g", "b"), 10)
    run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2, 3, 4, 5]}), 20)
    run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 500)
    assert "rebalance-timeout-g-a" not in shard.timers
    assert shard.expire(2000).records == []


def test_stale_rebalance_timer_does_not_fence_a_member_at_a_newer_epoch():
    shard = make_shard()
    run(shard, join("g", "a", rebalance_timeout_ms=1000), 0)
    run(shard, join("g", "b"), 10)
    run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2, 3, 4, 5]}), 20)
    # simulate a timer that was armed at an older epoch
    shard.timers.schedule("rebalance-timeout-g-a", 30, ("rebalance", "g", "a", 0))
    assert shard.expire(30).records == []
    assert "a" in shard.group("g").members


def test_session_timeout_from_group_config():
    from cohort.coordinator import AlterGroupConfigRequest
    shard = make_shard()
    assert run(shard, AlterGroupConfigRequest("g", {"consumer.session.timeout.ms": "50000",
                                                   "consumer.heartbeat.interval.ms": "6000"}), 0).response.error_code == 0
    result = run(shard, join("g", "a"), 0)
    assert result.response.heartbeat_interval_ms == 6000
    assert shard.timers.deadline("session-timeout-g-a") == 50_000


# ------------------------------------------------------------------ group epoch bumps

def test_subscription_change_bumps_epoch_and_revokes():
    shard = two_member_group()
    result = run(shard, hb("g", "a", 2, subscribed_topic_names=["bar"], owned={FOO: [0, 1, 2]}), 50)
    keys = [r.key for r in result.records]
    assert keys[:2] == [MdKey("g", "a"), GroupKey("g")]
    assert result.records[1].value.epoch == 3
    assert result.records[-1] == Record(CurKey("g", "a"), Cur(2, 2, UNREVOKED, {}, {FOO: (0, 1, 2)}))
    assert result.response.assignment == {}


def test_unchanged_subscription_does_not_bump():
    shard = two_member_group()
    result = run(shard, hb("g", "a", 2, subscribed_topic_names=["foo"]), 50)
    assert result.records == [] and epoch_of(shard) == 2


def test_client_id_change_writes_metadata_without_bump():
    shard = two_member_group()
    result = run(shard, hb("g", "a", 2, client_id="new-client"), 50)
    assert result.records == [Record(MdKey("g", "a"), md(client_id="new-client"))]


def test_topic_metadata_change_bumps_epoch_on_next_heartbeat():
    shard = two_member_group()
    shard.update_metadata(image(version=2, foo=8, bar=3))
    result = run(shard, hb("g", "a", 2), 50)
    assert result.records[0].key == GroupKey("g") and result.records[0].value.epoch == 3
    assert shard.group("g").target_assignment["b"] == {FOO: (4, 5, 6, 7)}


def test_unrelated_topic_change_does_not_bump():
    shard = two_member_group()
    shard.update_metadata(image(version=2, foo=6, bar=9))
    assert run(shard, hb("g", "a", 2), 50).records == [] and epoch_of(shard) == 2


def test_rack_change_of_subscribed_topic_bumps():
    shard = two_member_group()
    shard.update_metadata(image(version=2, racks={"foo": tuple(frozenset({"r1"}) for _ in range(6))}, foo=6, bar=3))
    run(shard, hb("g", "a", 2), 50)
    assert epoch_of(shard) == 3


def test_preferred_assignor_change_bumps_epoch():
    shard = two_member_group()
    result = run(shard, hb("g", "a", 2, server_assignor="range"), 50)
    # a alone names "range": it becomes the most common server assignor
    assert result.records[1] == Record(GroupKey("g"), GroupValue(3, shard.group("g").metadata_hash))


# ------------------------------------------------------------------ static membership

def test_static_member_temporary_leave_and_replacement():
    shard = make_shard()
    run(shard, join("g", "a", instance_id="i1"), 0)
    run(shard, join("g", "b"), 10)
    run(shard, hb("g", "a", 1, owned={FOO: [0, 1, 2]}), 20)
    run(shard, hb("g", "b", 2, owned={}), 30)
    assert epoch_of(shard) == 2

    taken = run(shard, join("g", "a2", instance_id="i1"), 40)
    assert taken.response.error_code == Errors.UNRELEASED_INSTANCE_ID
    assert taken.response.error_message == (
        "Static member a2 with instance id i1 cannot join the group because the instance id is owned by a member.")

    left = run(shard, hb("g", "a", -2, instance_id="i1"), 50)
    assert left.records == [Record(CurKey("g", "a"), Cur(-2, 1, STABLE, {FOO: (0, 1, 2)}, {}))]
    assert (left.response.member_id, left.response.member_epoch) == ("a", -2)
    assert epoch_of(shard) == 2

    rejoin = run(shard, join("g", "a2", instance_id="i1"), 60)
    assert rejoin.records == [
        Record(CurKey("g", "a"), None),
        Record(TgtKey("g", "a"), None),
        Record(MdKey("g", "a"), None),
        Record(MdKey("g", "a2"), md(instance_id="i1")),
        Record(TgtKey("g", "a2"), Tgt({FOO: (0, 1, 2)})),
        Record(CurKey("g", "a2"), Cur(0, 0, STABLE, {FOO: (0, 1, 2)}, {})),
        Record(CurKey("g", "a2"), Cur(2, 0, STABLE, {FOO: (0, 1, 2)}, {})),
    ]
    assert (rejoin.response.member_epoch, rejoin.response.assignment) == (2, {FOO: (0, 1, 2)})
    assert epoch_of(shard) == 2
    assert "session-timeout-g-a" not in shard.timers

    old = run(shard, hb("g", "a", 2, instance_id="i1"), 70)
    assert old.response.error_code == Errors.FENCED_INSTANCE_ID
    assert old.response.error_message == "Static member a with instance id i1 was fenced by member a2."
    unknown = run(shard, hb("g", "x", 2, instance_id="i9"), 70)
    assert (unknown.response.error_code, unknown.response.error_message) == (
        Errors.UNKNOWN_MEMBER_ID, "Instance id i9 is unknown.")


def test_static_member_that_does_not_return_is_fenced_by_session_timeout():
    shard = make_shard()
    run(shard, join("g", "a", instance_id="i1"), 0)
    run(shard, hb("g", "a", -2, instance_id="i1"), 10)
    result = shard.expire(45_000)
    assert "a" not in shard.group("g").members and result.records[-2].value.epoch == 2


def test_static_leave_with_minus_one_removes_the_member():
    shard = make_shard()
    run(shard, join("g", "a", instance_id="i1"), 0)
    result = run(shard, hb("g", "a", -1, instance_id="i1"), 10)
    assert result.response.member_epoch == -1 and not shard.group("g").members


# ------------------------------------------------------------------ group size

def test_group_max_size():
    shard = make_shard(CoordinatorConfig(consumer_assignors=("simple",), consumer_max_size=2))
    run(shard, join("g", "a", instance_id="i1"), 0)
    run(shard, join("g", "b"), 0)
    full = run(shard, join("g", "c"), 0)
    assert full.response.error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert full.response.error_message == "The consumer group has reached its maximum capacity of 2 members."
    assert run(shard, join("g", "b"), 0).response.error_code == 0  # existing member
    run(shard, hb("g", "a", -2, instance_id="i1"), 0)
    assert run(shard, join("g", "a2", instance_id="i1"), 0).response.error_code == 0  # static rejoin (trunk)


# ------------------------------------------------------------------ assignors

def test_assignor_is_most_common_then_group_config_then_first_configured():
    from cohort.coordinator import AlterGroupConfigRequest
    seen = []

    class Named:
        def __init__(self, name):
            self.name = name

        def assign(self, spec, topics):
            seen.append(self.name)
            return {m: {} for m in spec.members}

    config = CoordinatorConfig(consumer_assignors=("one", "two", "three"))
    shard = make_shard(config, assignors={n: Named(n) for n in ("one", "two", "three")})
    run(shard, join("g", "a"), 0)
    assert seen[-1] == "one"
    run(shard, join("g", "b", server_assignor="three"), 0)
    assert seen[-1] == "three"
    run(shard, join("g", "c", server_assignor="two"), 0)  # tie 1-1: the earlier configured wins
    assert seen[-1] == "two"
    run(shard, join("g", "d", server_assignor="three"), 0)
    assert seen[-1] == "three"
    run(shard, AlterGroupConfigRequest("h", {"consumer.assignor": "two"}), 0)
    run(shard, join("h", "a"), 0)
    assert seen[-1] == "two"


def test_failing_assignor_rejects_heartbeat_and_changes_nothing():
    shard = two_member_group()
    before = shard.last_written_offset
    result = run(shard, hb("g", "a", 2, subscribed_topic_names=["foo", "bar"], server_assignor="failing"), 50)
    assert result.response.error_code == Errors.UNKNOWN_SERVER_ERROR
    assert "Failed to compute a new target assignment for epoch 3" in result.response.error_message
    assert result.records == [] and shard.last_written_offset == before
    assert epoch_of(shard) == 2 and shard.group("g").members["a"].subscribed_topic_names == {"foo"}


def test_rack_and_instance_ids_reach_the_assignor():
    specs = []

    class Spy:
        name = "simple"

        def assign(self, spec, topics):
            specs.append(spec)
            return {m: {} for m in spec.members}

    shard = make_shard(assignors={"simple": Spy()})
    run(shard, join("g", "a", rack_id="rack-1", instance_id="i1"), 0)
    sub = specs[-1].members["a"]
    assert (sub.rack_id, sub.instance_id, sub.subscribed_topic_ids) == ("rack-1", "i1", frozenset({FOO}))


def test_lag_provider_feeds_the_describer():
    calls = []

    class LagSpy:
        name = "simple"

        def assign(self, spec, topics):
            calls.append(topics.partition_lags(FOO))
            return {m: {} for m in spec.members}

    shard = make_shard(assignors={"simple": LagSpy()}, lag_provider=lambda g, t, n: [g, t, n])
    run(shard, join("g", "a"), 0)
    assert calls == [["g", FOO, 6]]


# ------------------------------------------------------------------ regular expressions

def test_regex_subscription_full_match_and_refresh():
    from cohort.coordinator.records import ConsumerGroupRegularExpressionKey as RxKey
    from cohort.coordinator.records import ConsumerGroupRegularExpressionValue as Rx
    shard = make_shard(img=image(version=7, foo=2, bar=2))
    result = run(shard, ConsumerGroupHeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000,
                                                      subscribed_topic_regex="ba.", topic_partitions={}), 5)
    assert result.records[1] == Record(RxKey("g", "ba."), Rx(("bar",), 7, 5))
    assert result.response.assignment == {BAR: (0, 1)}
    # "fo" does not fully match "foo"
    result = run(shard, hb("g", "a", 1, subscribed_topic_regex="fo", owned={}), 6)
    assert result.records[1:3] == [Record(RxKey("g", "fo"), Rx((), 7, 6)), Record(RxKey("g", "ba."), None)]
    assert result.response.member_epoch == 2 and result.response.assignment == {}
    # a new topic matching the regex appears: the next heartbeat resolves it and bumps the epoch
    run(shard, hb("g", "a", 2, subscribed_topic_regex="ba[rz]", owned={}), 7)
    epoch = epoch_of(shard)
    assert shard.group("g").members["a"].member_epoch == epoch == 3
    shard.update_metadata(image(version=8, foo=2, bar=2, baz=1))
    result = run(shard, hb("g", "a", epoch), 8)
    assert result.records[0] == Record(RxKey("g", "ba[rz]"), Rx(("bar", "baz"), 8, 8))
    assert epoch_of(shard) == epoch + 1
    # leaving removes the regex
    result = run(shard, hb("g", "a", -1), 9)
    assert Record(RxKey("g", "ba[rz]"), None) in result.records


def test_regex_is_rejected_for_an_invalid_pattern_on_join():
    shard = make_shard()
    result = run(shard, ConsumerGroupHeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000,
                                                      subscribed_topic_regex="[", topic_partitions={}), 0)
    assert result.response.error_code == Errors.INVALID_REGULAR_EXPRESSION
    assert shard.group("g") is None


# ------------------------------------------------------------------ group states

def test_group_states():
    shard = make_shard()

    def state():
        return shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups[0].group_state

    run(shard, join("g", "a"), 0)
    assert state() == "Stable"
    run(shard, join("g", "b"), 0)
    assert state() == "Reconciling"
    run(shard, hb("g", "b", -1), 0)
    assert state() == "Assigning"
    run(shard, hb("g", "a", -1), 0)
    assert state() == "Empty"


def test_only_members_whose_target_changed_get_records():
    shard = make_shard()
    run(shard, join("g", "a", topics=("foo",)), 0)
    run(shard, join("g", "b", topics=("bar",)), 0)
    result = run(shard, join("g", "c", topics=("bar",)), 0)
    targets = [r.key.member_id for r in result.records if isinstance(r.key, TgtKey)]
    assert targets == ["b", "c"]
    assert shard.group("g").target_assignment["a"] == {FOO: (0, 1, 2, 3, 4, 5)}
    assert shard.group("g").target_assignment["c"] == {BAR: (2,)}


def test_real_assignors_drive_the_group(real_assignor):
    shard = make_shard(CoordinatorConfig(consumer_assignors=(real_assignor,)), assignors={})
    run(shard, join("g", "a", topics=("foo", "bar")), 0)
    run(shard, join("g", "b", topics=("foo", "bar")), 0)
    for _ in range(3):
        for m in ("a", "b"):
            member = shard.group("g").members[m]
            run(shard, hb("g", m, member.member_epoch, owned=dict(member.assigned_partitions)), 10)
    group = shard.group("g")
    assert group.state().value == "Stable"
    owned = [(t, p) for m in group.members.values() for t, ps in m.assigned_partitions.items() for p in ps]
    assert sorted(owned) == sorted([(FOO, p) for p in range(6)] + [(BAR, p) for p in range(3)])
    assert abs(sum(len(v) for v in group.members["a"].assigned_partitions.values()) - 4.5) <= 0.5


def test_static_member_rejoining_with_its_own_id_after_temporary_leave_is_reset_to_epoch_zero_first():
    shard = make_shard()
    run(shard, join("g", "a", instance_id="i1"), 0)
    run(shard, hb("g", "a", -2, instance_id="i1"), 10)
    result = run(shard, join("g", "a", instance_id="i1"), 20)
    assert [r.key for r in result.records[:3]] == [CurKey("g", "a"), TgtKey("g", "a"), MdKey("g", "a")]
    assert result.records[5] == Record(CurKey("g", "a"), Cur(0, 0, STABLE, {FOO: (0, 1, 2, 3, 4, 5)}, {}))
    assert result.records[-1] == Record(CurKey("g", "a"), Cur(1, 0, STABLE, {FOO: (0, 1, 2, 3, 4, 5)}, {}))
    assert (result.response.member_epoch, result.response.assignment) == (1, {FOO: (0, 1, 2, 3, 4, 5)})


def test_static_member_retrying_a_lost_join_is_accepted():
    shard = make_shard()
    first = run(shard, join("g", "a", instance_id="i1"), 0)
    again = run(shard, join("g", "a", instance_id="i1"), 10)
    assert again.response.error_code == 0
    assert again.response.assignment == first.response.assignment and again.records == []

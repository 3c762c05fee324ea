"""ConsumerGroupDescribe, ListGroups, group configs and the broker configuration."""

from __future__ import annotations

import pytest

from cohort.coordinator import (
    AlterGroupConfigRequest,
    ConsumerGroupDescribeRequest,
    CoordinatorConfig,
    DescribeGroupConfigRequest,
    Errors,
    ListGroupsRequest,
    OffsetCommitRequest,
)
from cohort.coordinator.requests import DescribedTopicPartitions, OffsetCommitPartition, OffsetCommitTopic

from cg_helpers import BAR, FOO, hb, image, join, make_shard, run


def test_describe_reports_members_with_current_and_target_assignment():
    shard = make_shard()
    run(shard, join("g", "a", rack_id="r1", client_id="c1", client_host="/10.0.0.1", topics=("foo", "bar")), 0)
    run(shard, join("g", "b", instance_id="i-b", topics=("foo",), server_assignor="simple"), 0)
    (group,) = shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups
    assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch, group.assignor_name) == (
        0, "Reconciling", 2, 2, "simple")
    a, b = group.members
    assert (a.member_id, a.rack_id, a.client_id, a.client_host, a.member_epoch, a.member_type) == (
        "a", "r1", "c1", "/10.0.0.1", 1, 1)
    assert a.subscribed_topic_names == ("bar", "foo") and a.subscribed_topic_regex is None
    assert a.assignment == (DescribedTopicPartitions(BAR, "bar", (0, 1, 2)),
                            DescribedTopicPartitions(FOO, "foo", (0, 1, 2, 3, 4, 5)))
    assert a.target_assignment == (DescribedTopicPartitions(BAR, "bar", (0, 1, 2)),
                                   DescribedTopicPartitions(FOO, "foo", (0, 1, 2)))
    assert (b.instance_id, b.member_epoch, b.assignment) == ("i-b", 2, ())
    assert b.target_assignment == (DescribedTopicPartitions(FOO, "foo", (3, 4, 5)),)


def test_describe_omits_topics_missing_from_metadata():
    shard = make_shard()
    run(shard, join("g", "a", topics=("foo", "bar")), 0)
    shard.update_metadata(image(version=2, foo=6))
    (group,) = shard.describe_groups(ConsumerGroupDescribeRequest(["g"])).groups
    assert [t.topic_name for t in group.members[0].assignment] == ["foo"]


def test_describe_errors():
    shard = make_shard()
    run(shard, OffsetCommitRequest("simple", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 1)])]), 0)
    groups = shard.describe_groups(ConsumerGroupDescribeRequest(["", "nope", "simple"])).groups
    assert [(g.error_code, g.error_message) for g in groups] == [
        (Errors.INVALID_GROUP_ID, "Group id can't be empty."),
        (Errors.GROUP_ID_NOT_FOUND, "Group nope not found."),
        (Errors.GROUP_ID_NOT_FOUND, "Group simple is not a consumer group."),
    ]


def test_list_groups_with_filters():
    shard = make_shard()
    run(shard, join("stable", "a"), 0)
    run(shard, join("reconciling", "a"), 0)
    run(shard, join("reconciling", "b"), 0)
    run(shard, join("empty", "a"), 0)
    run(shard, hb("empty", "a", -1), 0)
    run(shard, OffsetCommitRequest("simple", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 1)])]), 0)

    def ids(**kw):
        return [(g.group_id, g.group_state, g.group_type) for g in shard.list_groups(ListGroupsRequest(**kw)).groups]

    assert ids() == [("empty", "Empty", "consumer"), ("reconciling", "Reconciling", "consumer"),
                     ("simple", "Empty", "classic"), ("stable", "Stable", "consumer")]
    assert ids(states_filter=["stable", "RECONCILING"]) == [("reconciling", "Reconciling", "consumer"),
                                                            ("stable", "Stable", "consumer")]
    assert ids(types_filter=["classic"]) == [("simple", "Empty", "classic")]
    assert ids(states_filter=["empty"], types_filter=["consumer"]) == [("empty", "Empty", "consumer")]
    assert shard.list_groups().groups[0].protocol_type == "consumer"


def test_alter_and_describe_group_config():
    shard = make_shard()
    result = run(shard, AlterGroupConfigRequest("g", {"consumer.heartbeat.interval.ms": "7000"}), 0)
    assert result.response.error_code == 0 and len(result.records) == 1
    entries = {e.name: (e.value, e.is_default) for e in
               shard.describe_group_config(DescribeGroupConfigRequest("g")).configs}
    assert entries == {"consumer.session.timeout.ms": ("45000", True),
                       "consumer.heartbeat.interval.ms": ("7000", False),
                       "consumer.assignor": ("simple", True),
                       # a group id names one group of any type: Kafka lists every type's settings
                       "share.session.timeout.ms": ("45000", True),
                       "share.heartbeat.interval.ms": ("5000", True),
                       "share.record.lock.duration.ms": ("30000", True),
                       "share.auto.offset.reset": ("latest", True),
                       "share.isolation.level": ("read_uncommitted", True)}
    assert run(shard, join("g", "a"), 0).response.heartbeat_interval_ms == 7000
    # removing the override returns to the broker default, with a tombstone
    result = run(shard, AlterGroupConfigRequest("g", {"consumer.heartbeat.interval.ms": None}), 0)
    assert result.records[0].value is None
    assert run(shard, hb("g", "a", 1), 0).response.heartbeat_interval_ms == 5000


@pytest.mark.parametrize("configs, fragment", [
    ({"consumer.session.timeout.ms": "44999"}, "between 45000 and 60000"),
    ({"consumer.session.timeout.ms": "60001"}, "between 45000 and 60000"),
    ({"consumer.heartbeat.interval.ms": "4999"}, "between 5000 and 15000"),
    ({"consumer.heartbeat.interval.ms": "abc"}, "must be an integer"),
    ({"consumer.assignor": "sticky"}, "is not one of group.consumer.assignors"),
    ({"no.such.config": "1"}, "Unknown group config name"),
])
def test_invalid_group_configs_are_rejected(configs, fragment):
    shard = make_shard()
    result = run(shard, AlterGroupConfigRequest("g", configs), 0)
    assert result.response.error_code == Errors.INVALID_CONFIG and fragment in result.response.error_message
    assert result.records == []


def test_validate_only_writes_nothing():
    shard = make_shard()
    result = run(shard, AlterGroupConfigRequest("g", {"consumer.session.timeout.ms": "50000"}, validate_only=True), 0)
    assert result.response.error_code == 0 and result.records == []


def test_broker_config_from_properties():
    config = CoordinatorConfig.from_properties({
        "group.consumer.session.timeout.ms": "50000",
        "group.consumer.heartbeat.interval.ms": 6000,
        "group.consumer.max.size": "10",
        "group.consumer.assignors": "range, uniform",
        "offsets.retention.minutes": "1",
        "offset.metadata.max.bytes": "100",
        "unrelated.setting": "x",
    })
    assert (config.consumer_session_timeout_ms, config.consumer_heartbeat_interval_ms, config.consumer_max_size,
            config.consumer_assignors, config.offsets_retention_ms, config.offset_metadata_max_bytes) == (
        50_000, 6000, 10, ("range", "uniform"), 60_000, 100)
    defaults = CoordinatorConfig()
    assert (defaults.consumer_session_timeout_ms, defaults.consumer_heartbeat_interval_ms,
            defaults.consumer_assignors) == (45_000, 5000, ("uniform", "range", "lag"))


@pytest.mark.parametrize("props", [
    {"group.consumer.session.timeout.ms": "30000"},
    {"group.consumer.session.timeout.ms": "70000"},
    {"group.consumer.heartbeat.interval.ms": "20000"},
    {"group.consumer.max.size": "0"},
    {"group.consumer.assignors": ""},
    {"group.consumer.max.size": "many"},
])
def test_broker_config_bounds(props):
    with pytest.raises(ValueError):
        CoordinatorConfig.from_properties(props)

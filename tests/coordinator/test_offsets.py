"""OffsetCommit / OffsetFetch / OffsetDelete, offset expiry and group deletion."""

from __future__ import annotations

import pytest

from cohort.coordinator import (
    CoordinatorConfig,
    DeleteGroupsRequest,
    Errors,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    Record,
)
from cohort.coordinator.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
)
from cohort.coordinator.requests import OffsetCommitPartition, OffsetCommitTopic, OffsetFetchTopic

from cg_helpers import hb, join, make_shard, run


def commit(group, member="", epoch=-1, topic="foo", partition=0, offset=10, metadata="", version=9, **kw):
    return OffsetCommitRequest(group, [OffsetCommitTopic(topic, [OffsetCommitPartition(partition, offset, 3, metadata)])],
                               member, epoch, api_version=version, **kw)


def codes(result):
    return [p.error_code for t in result.response.topics for p in t.partitions]


def stable_group():
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    return shard


def test_member_commits_with_its_epoch():
    shard = stable_group()
    result = run(shard, commit("g", "a", 1), 100)
    assert codes(result) == [0]
    assert result.records == [Record(OffsetCommitKey("g", "foo", 0), OffsetCommitValue(10, 3, "", 100))]


@pytest.mark.parametrize("member, epoch, version, code", [
    ("a", 0, 9, Errors.STALE_MEMBER_EPOCH),
    ("a", 2, 9, Errors.STALE_MEMBER_EPOCH),
    ("zz", 1, 9, Errors.UNKNOWN_MEMBER_ID),
    ("a", 1, 8, Errors.UNSUPPORTED_VERSION),
    ("", -1, 9, Errors.UNKNOWN_MEMBER_ID),  # admin commit on a non-empty group
])
def test_commit_validation(member, epoch, version, code):
    shard = stable_group()
    result = run(shard, commit("g", member, epoch, version=version), 100)
    assert codes(result) == [code] and result.records == []


def test_commit_to_missing_group():
    shard = make_shard()
    assert codes(run(shard, commit("nope", "m", 3, version=9), 0)) == [Errors.GROUP_ID_NOT_FOUND]
    assert codes(run(shard, commit("nope", "m", 3, version=8), 0)) == [Errors.ILLEGAL_GENERATION]
    admin = run(shard, commit("nope", "", -1), 0)  # creates a "simple" group
    assert codes(admin) == [0] and len(admin.records) == 1
    listed = shard.list_groups(ListGroupsRequest()).groups
    assert [(g.group_id, g.group_type, g.group_state) for g in listed] == [("nope", "classic", "Empty")]


def test_admin_commit_on_empty_consumer_group():
    shard = stable_group()
    run(shard, hb("g", "a", -1), 10)
    assert codes(run(shard, commit("g"), 20)) == [0]


def test_classic_member_gets_illegal_generation():
    from cohort.coordinator.records import ClassicMemberMetadata
    shard = stable_group()
    group = shard.group("g")
    group.members["a"] = group.members["a"]._replace(classic_member_metadata=ClassicMemberMetadata(10_000))
    assert codes(run(shard, commit("g", "a", 5, version=8), 0)) == [Errors.ILLEGAL_GENERATION]
    assert codes(run(shard, commit("g", "a", 1, version=8), 0)) == [0]


def test_metadata_too_large():
    shard = make_shard(CoordinatorConfig(consumer_assignors=("simple",), offset_metadata_max_bytes=4))
    run(shard, join("g", "a"), 0)
    request = OffsetCommitRequest("g", [OffsetCommitTopic("foo", [
        OffsetCommitPartition(0, 1, -1, "12345"), OffsetCommitPartition(1, 1, -1, "1234")])], "a", 1)
    result = run(shard, request, 0)
    assert codes(result) == [Errors.OFFSET_METADATA_TOO_LARGE, 0]
    assert [r.key.partition for r in result.records] == [1]


def test_fetch_all_and_specific_partitions():
    shard = stable_group()
    run(shard, commit("g", "a", 1, partition=2, offset=7, metadata="m"), 0)
    run(shard, commit("g", "a", 1, topic="bar", partition=0, offset=3), 0)
    every = shard.fetch_offsets(OffsetFetchRequest("g"))
    assert [(t.name, [(p.partition, p.committed_offset, p.committed_leader_epoch, p.metadata) for p in t.partitions])
            for t in every.topics] == [("bar", [(0, 3, 3, "")]), ("foo", [(2, 7, 3, "m")])]
    some = shard.fetch_offsets(OffsetFetchRequest("g", [OffsetFetchTopic("foo", [1, 2])], "a", 1))
    assert [(p.partition, p.committed_offset) for p in some.topics[0].partitions] == [(1, -1), (2, 7)]


def test_fetch_validates_member_and_epoch():
    shard = stable_group()
    stale = shard.fetch_offsets(OffsetFetchRequest("g", None, "a", 0))
    assert stale.error_code == Errors.STALE_MEMBER_EPOCH
    unknown = shard.fetch_offsets(OffsetFetchRequest("g", None, "zz", 1))
    assert unknown.error_code == Errors.UNKNOWN_MEMBER_ID
    assert shard.fetch_offsets(OffsetFetchRequest("g", None, None, -1)).error_code == 0


def test_fetch_unknown_group_answers_no_offsets():
    shard = make_shard()
    response = shard.fetch_offsets(OffsetFetchRequest("nope", [OffsetFetchTopic("foo", [0])], "m", 3))
    assert response.error_code == 0
    assert response.topics[0].partitions[0].committed_offset == -1


def test_offsets_expire_only_for_unsubscribed_topics():
    config = CoordinatorConfig(consumer_assignors=("simple",), offsets_retention_ms=1000,
                               offsets_retention_check_interval_ms=500)
    shard = make_shard(config)
    run(shard, join("g", "a"), 0)
    run(shard, commit("g", "a", 1, topic="foo"), 0)
    run(shard, commit("g", "a", 1, topic="bar"), 0)
    assert shard.expire(500).records == []  # not old enough
    result = shard.expire(1000)
    assert result.records == [Record(OffsetCommitKey("g", "bar", 0), None)]
    shard.commit(result.end_offset)
    assert {k for k in shard.state.offsets["g"]} == {("foo", 0)}


def test_empty_group_is_deleted_once_its_offsets_expire():
    config = CoordinatorConfig(consumer_assignors=("simple",), offsets_retention_ms=1000,
                               offsets_retention_check_interval_ms=1000)
    shard = make_shard(config)
    run(shard, join("g", "a"), 0)
    run(shard, commit("g", "a", 1), 0)
    run(shard, hb("g", "a", -1), 0)
    result = shard.expire(1000)
    assert result.records == [
        Record(OffsetCommitKey("g", "foo", 0), None),
        Record(ConsumerGroupTargetAssignmentMetadataKey("g"), None),
        Record(ConsumerGroupMetadataKey("g"), None),
    ]
    shard.commit(result.end_offset)
    assert shard.group("g") is None and shard.list_groups().groups == ()


def test_retention_time_of_old_commit_versions_sets_expire_timestamp():
    shard = make_shard()
    result = run(shard, commit("s", retention_time_ms=50, version=4), 10)
    assert result.records[0].value.expire_timestamp == 60
    assert shard.expire(59).records == []
    shard.timers.schedule("offsets-expiration", 60, ("offsets",))
    assert shard.expire(60).records == [Record(OffsetCommitKey("s", "foo", 0), None)]


def test_delete_groups():
    shard = stable_group()
    run(shard, commit("g", "a", 1), 0)
    result = run(shard, DeleteGroupsRequest(["g", "nope"]), 0)
    assert [(r.group_id, r.error_code) for r in result.response.results] == [
        ("g", Errors.NON_EMPTY_GROUP), ("nope", Errors.GROUP_ID_NOT_FOUND)]
    assert result.records == []
    run(shard, hb("g", "a", -1), 0)
    result = run(shard, DeleteGroupsRequest(["g"]), 0)
    assert result.response.results[0].error_code == 0
    assert [r.key for r in result.records] == [
        OffsetCommitKey("g", "foo", 0), ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupMetadataKey("g")]
    assert all(r.value is None for r in result.records)
    assert shard.group("g") is None and "g" not in shard.state.offsets


def test_offset_delete():
    shard = stable_group()
    run(shard, commit("g", "a", 1, topic="foo"), 0)
    run(shard, commit("g", "a", 1, topic="bar"), 0)
    result = run(shard, OffsetDeleteRequest("g", [OffsetFetchTopic("foo", [0]), OffsetFetchTopic("bar", [0, 1])]), 0)
    assert [(t.name, [(p.partition, p.error_code) for p in t.partitions]) for t in result.response.topics] == [
        ("foo", [(0, Errors.GROUP_SUBSCRIBED_TO_TOPIC)]), ("bar", [(0, 0), (1, 0)])]
    assert result.records == [Record(OffsetCommitKey("g", "bar", 0), None)]
    missing = run(shard, OffsetDeleteRequest("nope", [OffsetFetchTopic("foo", [0])]), 0)
    assert missing.response.error_code == Errors.GROUP_ID_NOT_FOUND

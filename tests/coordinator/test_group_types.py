"""Each group type through its surface alone: a `GroupContext` over a plain state, record list and
timers, with no shard (no undo log, no results, no routing). What a type writes, schedules,
releases and asks for is all that is seen."""

from __future__ import annotations

import itertools

import pytest

from cohort.coordinator import classic, consumer, migration, offsets
from cohort.coordinator.classic_group import ClassicGroup
from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.consumer_group import ShardState
from cohort.coordinator.context import GroupContext
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.records import GroupMetadataKey, OffsetCommitKey, Record
from cohort.coordinator.requests import (
    ConsumerGroupHeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
)
from cohort.coordinator.timers import Timers

from cg_helpers import FOO, RangeTestAssignor, image


class Host:
    """The least a group type needs: records applied at once and kept, actions run on `settle()`."""

    def __init__(self) -> None:
        self.config = CoordinatorConfig(consumer_assignors=("simple",))
        self.state = ShardState(self.config)
        self.timers = Timers()
        self.records: list[Record] = []
        self.completions: list[tuple[int, object]] = []
        self.deferred: list = []
        self.fenced: list[str] = []
        self.now = 1_000
        ids = (f"id-{n}" for n in itertools.count(1))
        self.ctx = GroupContext(
            self.state, self.timers, self.config, lag_balance={}, append=self.append,
            complete=lambda rid, response: self.completions.append((rid, response)), after=self.deferred.append,
            new_member_id=lambda: next(ids), committed_state=lambda gid: self.state,
            assignor={"simple": RangeTestAssignor()}.__getitem__,
            fence_member=lambda group, member: self.fenced.append(member.member_id), image=lambda: image(foo=4),
            now=lambda: self.now, lag_provider=lambda: (lambda group, topic, n: None))

    def append(self, key, value) -> None:
        record = Record(key, value)
        self.state.apply(record, track=False)
        self.records.append(record)

    def settle(self) -> None:
        for action in self.deferred:
            action()
        self.deferred.clear()

    def kinds(self) -> list[str]:
        out = [type(r.key).__name__.removesuffix("Key") + ("" if r.value is not None else " tombstone") for r in self.records]
        self.records.clear()
        return out


@pytest.fixture
def host() -> Host:
    return Host()


def join(member: str, epoch: int = 0, **kw) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest("g", member, epoch, rebalance_timeout_ms=30_000, subscribed_topic_names=["foo"],
                                         topic_partitions={}, **kw)


def test_consumer_join_writes_the_member_the_epoch_the_target_and_the_assignment(host):
    consumer.validate_heartbeat(host.ctx, join("a"))
    response = consumer.heartbeat(host.ctx, join("a"), host.now)
    assert (response.member_epoch, dict(response.assignment)) == (1, {FOO: (0, 1, 2, 3)})
    assert host.kinds() == ["ConsumerGroupMemberMetadata", "ConsumerGroupMetadata",
                            "ConsumerGroupTargetAssignmentMember", "ConsumerGroupTargetAssignmentMetadata",
                            "ConsumerGroupCurrentMemberAssignment"]
    assert consumer.session_timeout_key("g", "a") not in host.timers  # timers wait for the write to be kept
    host.settle()
    assert consumer.session_timeout_key("g", "a") in host.timers


def test_consumer_validation_rejects_before_anything_is_written(host):
    with pytest.raises(CoordinatorError) as refused:
        consumer.validate_heartbeat(host.ctx, ConsumerGroupHeartbeatRequest("g", "a", 0, subscribed_topic_names=["foo"],
                                                                            topic_partitions={}))
    assert refused.value.code == Errors.INVALID_REQUEST and host.records == []


def test_consumer_leave_fences_through_the_context_and_removal_writes_tombstones(host):
    consumer.heartbeat(host.ctx, join("a"), host.now)
    host.kinds()
    response = consumer.heartbeat(host.ctx, ConsumerGroupHeartbeatRequest("g", "a", -1), host.now)
    assert response.member_epoch == -1 and host.fenced == ["a"] and host.records == []  # the choice is not its own
    group = host.state.groups["g"]
    consumer.remove_member(host.ctx, group, group.members["a"])
    assert host.kinds() == ["ConsumerGroupCurrentMemberAssignment tombstone",
                            "ConsumerGroupTargetAssignmentMember tombstone", "ConsumerGroupMemberMetadata tombstone",
                            "ConsumerGroupMetadata", "ConsumerGroupTargetAssignmentMetadata"]


def test_classic_new_member_gets_a_member_id_from_the_context(host):
    req = JoinGroupRequest("cg", "", "consumer", (("range", b"meta"),), 10_000, 30_000, client_id="client")
    response = classic.join_group(host.ctx, req, host.now, rid=7)
    assert response.error_code == Errors.MEMBER_ID_REQUIRED and response.member_id == "client-id-1"
    assert host.records == [] and host.completions == []


def test_classic_empty_group_deleted_through_its_own_surface(host):
    group = host.state.classic_groups["cg"] = ClassicGroup("cg", host.now)
    classic.delete_group(host.ctx, group)
    assert "cg" not in host.state.classic_groups and host.records == []  # never persisted: nothing to tombstone


def test_offsets_commit_and_fetch_through_the_context(host):
    request = OffsetCommitRequest("solo", (OffsetCommitTopic("foo", (OffsetCommitPartition(0, 42, metadata="m"),)),))
    response = offsets.commit_offsets(host.ctx, request, host.now)
    assert [p.error_code for t in response.topics for p in t.partitions] == [0]
    assert [type(r.key) for r in host.records] == [OffsetCommitKey]
    fetched = offsets.fetch_offsets(host.ctx, OffsetFetchRequest("solo"))
    assert [(t.name, p.partition, p.committed_offset, p.metadata) for t in fetched.topics for p in t.partitions] == [
        ("foo", 0, 42, "m")]


def test_migration_an_empty_classic_group_gives_way_to_a_consumer_member(host):
    group = host.state.classic_groups["g"] = ClassicGroup("g", host.now)
    group.persisted = object()  # written once: its tombstone is due
    migration.consumer_member_joins(host.ctx, group, host.now)
    assert "g" not in host.state.classic_groups
    assert [(type(r.key), r.value) for r in host.records] == [(GroupMetadataKey, None)]


def test_migration_fencing_the_last_member_of_a_plain_consumer_group_removes_it(host):
    consumer.heartbeat(host.ctx, join("a"), host.now)
    host.kinds()
    group = host.state.groups["g"]
    migration.fence_member(host.ctx, group, group.members["a"])  # no classic members: no downgrade
    assert host.kinds()[:3] == ["ConsumerGroupCurrentMemberAssignment tombstone",
                                "ConsumerGroupTargetAssignmentMember tombstone", "ConsumerGroupMemberMetadata tombstone"]
    assert host.state.groups["g"].members == {}


"""Online migration: classic groups upgraded by a consumer-protocol member, classic members living
in a consumer group, the downgrade when the last consumer-protocol member leaves, and the
migration policies. Ownership is checked the way clients see it: a classic member owns what its
last successful SyncGroup returned (an eager client gives everything up when it re-joins)."""

from __future__ import annotations

import pytest

from cohort.coordinator import Errors, Record
from cohort.coordinator.classic_group import ClassicGroupState
from cohort.coordinator.consumer_protocol import Subscription, decode_assignment, encode_subscription
from cohort.coordinator.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    MemberState,
    decode,
    encode,
)
from cohort.coordinator.requests import (
    ConsumerGroupHeartbeatRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    Parked,
)

from cg_helpers import FOO, dump, rebuilt
from classic_helpers import Driver, assignment, classic_shard, hb_req, join_req, leave_req, sync_req


def sub(*owned: int) -> bytes:
    return encode_subscription(Subscription(("foo",), None, (("foo", tuple(owned)),) if owned else ()))


def cg_join(member: str, group: str = "g"):
    return ConsumerGroupHeartbeatRequest(group, member, 0, rebalance_timeout_ms=60_000, subscribed_topic_names=["foo"],
                                         topic_partitions={})


def cg_hb(member: str, epoch: int, owned, group: str = "g"):
    return ConsumerGroupHeartbeatRequest(group, member, epoch, topic_partitions={FOO: tuple(owned)} if owned else {})


class Rolling:
    """A classic group of b-1 (leader) and c-2 on foo-0..5 at generation 1, then upgraded by the
    consumer-protocol member `a`; tracks what every client believes it owns."""

    def __init__(self, **config):
        config.setdefault("classic_initial_rebalance_delay_ms", 0)
        self.d = Driver(classic_shard(**config))
        d = self.d
        self.b = d.join_new(client="b")
        d.send(join_req(member=self.b, client="b"))
        self.c = d.join_new(client="c")
        d.send(join_req(member=self.c, client="c"))
        d.tick(0)
        d.tick(0)
        d.send(sync_req("g", self.c, 1))
        d.send(sync_req("g", self.b, 1, [(self.b, assignment(0, 1, 2)), (self.c, assignment(3, 4, 5))]))
        self.owned = {self.b: {0, 1, 2}, self.c: {3, 4, 5}}
        self.generation = {self.b: 1, self.c: 1}
        self.check()

    def check(self) -> None:
        seen: dict[int, str] = {}
        for member, parts in self.owned.items():
            for p in parts:
                assert p not in seen, f"foo-{p} owned by {seen[p]} and {member}"
                seen[p] = member

    def classic_rejoin(self, member: str, client: str):
        """An eager classic client: revoke everything, JoinGroup, then SyncGroup."""
        self.owned[member] = set()
        joined = self.d.send(join_req(member=member, client=client, protocols=(("range", sub()),))).response
        assert joined.error_code == 0, joined
        self.generation[member] = joined.generation_id
        synced = self.d.send(sync_req("g", member, joined.generation_id)).response
        if synced.error_code == 0:
            self.owned[member] = {p for _, ps in decode_assignment(synced.assignment).partitions for p in ps}
        self.check()
        return joined, synced

    def consumer_heartbeat(self, member: str, epoch: int):
        response = self.d.send(cg_hb(member, epoch, sorted(self.owned.get(member, ())))).response
        assert response.error_code == 0, response
        if response.assignment is not None:
            self.owned[member] = set(response.assignment.get(FOO, ()))
        self.check()
        return response


def test_upgrade_in_place_and_the_rolling_upgrade_walkthrough():
    r = Rolling()
    d = r.d
    joined = d.send(cg_join("a"), now=100)
    assert joined.response.error_code == 0 and joined.response.member_epoch == 2
    assert joined.records[0] == Record(GroupMetadataKey("g"), None)  # the classic group goes first
    assert "g" not in d.shard.state.classic_groups
    group = d.shard.group("g")
    b, c = group.members[r.b], group.members[r.c]
    assert (b.member_epoch, b.is_classic, dict(b.assigned_partitions)) == (1, True, {FOO: (0, 1, 2)})
    assert (c.member_epoch, c.is_classic, dict(c.assigned_partitions)) == (1, True, {FOO: (3, 4, 5)})
    assert dict(group.target_assignment["a"]) == {FOO: (0, 1)}  # the server-side assignor decides now
    r.owned["a"] = set()
    r.check()
    # classic members learn through their heartbeat that they must re-join
    assert d.send(hb_req("g", r.b, 1)).response.error_code == Errors.REBALANCE_IN_PROGRESS
    joined_b, synced_b = r.classic_rejoin(r.b, "b")
    assert joined_b.generation_id == 2 and joined_b.leader == "" and joined_b.protocol_name == "range"
    assert r.owned[r.b] == {2}  # foo-3 is still C's
    assert d.shard.group("g").members[r.b].state is MemberState.UNRELEASED_PARTITIONS
    assert r.consumer_heartbeat("a", 2).assignment == {FOO: (0, 1)}  # B released them by re-joining
    assert d.send(hb_req("g", r.c, 1)).response.error_code == Errors.REBALANCE_IN_PROGRESS
    r.classic_rejoin(r.c, "c")
    assert r.owned[r.c] == {4, 5}
    # C released foo-3: B's next heartbeat sends it back through JoinGroup to pick it up
    assert d.send(hb_req("g", r.b, 2)).response.error_code == Errors.REBALANCE_IN_PROGRESS
    r.classic_rejoin(r.b, "b")
    assert r.owned == {"a": {0, 1}, r.b: {2, 3}, r.c: {4, 5}}
    assert d.shard.group("g").state().value == "Stable"
    assert d.send(hb_req("g", r.b, 2)).response.error_code == 0
    assert d.send(hb_req("g", r.c, 2)).response.error_code == 0
    assert dump(rebuilt([decode(*encode(x)) for x in d.log])) == dump(d.shard)


def test_classic_member_completes_its_rebalance_through_join_group_as_in_the_seed():
    """The KIP-848 walkthrough: A (upgraded) still at the old epoch, C gives up its partitions in
    JoinGroup and gets the new epoch there, with its new assignment, before A has reconciled."""
    r = Rolling()
    d = r.d
    d.send(cg_join("a"))
    r.owned["a"] = set()
    joined_c, _ = r.classic_rejoin(r.c, "c")
    group = d.shard.group("g")
    assert joined_c.generation_id == group.group_epoch == 2
    member_c = group.members[r.c]
    assert (member_c.member_epoch, member_c.state) == (2, MemberState.STABLE)
    assert r.owned[r.c] == {4, 5}


def test_offsets_never_go_backwards_across_the_upgrade():
    r = Rolling()
    d = r.d
    commit = OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(3, 50)])], r.c, 1,
                                 api_version=8)
    assert d.send(commit).response.topics[0].partitions[0].error_code == 0
    d.send(cg_join("a"))
    stale = OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(3, 10)])], r.c, 0,
                                api_version=8)
    assert d.send(stale).response.topics[0].partitions[0].error_code == Errors.ILLEGAL_GENERATION
    fetched = d.shard.fetch_offsets(OffsetFetchRequest("g"))
    assert fetched.topics[0].partitions[0].committed_offset == 50
    # still at generation 1 = its member epoch: C's commit of its own partition is accepted
    ok = OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(3, 60)])], r.c, 1, api_version=8)
    assert d.send(ok).response.topics[0].partitions[0].error_code == 0


def test_parked_requests_are_answered_rebalance_in_progress_by_the_upgrade():
    r = Rolling()
    d = r.d
    parked = d.send(join_req(member=r.b, client="b", protocols=(("range", sub(0, 1, 2)),)))
    assert isinstance(parked.response, Parked)
    result = d.send(cg_join("a"))
    assert result.response.error_code == 0
    assert [(rid, resp.error_code) for rid, resp in result.completions] == [
        (parked.response.request_id, Errors.REBALANCE_IN_PROGRESS)]


def test_downgrade_when_the_last_consumer_member_leaves():
    r = Rolling()
    d = r.d
    d.send(cg_join("a"))
    r.owned["a"] = set()
    r.classic_rejoin(r.b, "b")
    r.classic_rejoin(r.c, "c")
    r.consumer_heartbeat("a", 2)
    left = d.send(ConsumerGroupHeartbeatRequest("g", "a", -1), now=1_000)
    assert left.response.member_epoch == -1
    r.owned.pop("a")
    keys = [type(x.key).__name__ for x in left.records]
    assert keys[-2:] == ["ConsumerGroupMetadataKey", "GroupMetadataKey"] and left.records[-2].value is None
    assert "g" not in d.shard.state.groups
    group = d.shard.state.classic_groups["g"]
    assert group.state is ClassicGroupState.PREPARING_REBALANCE and group.generation_id == 2
    persisted = left.records[-1].value
    assert {m.member_id: decode_assignment(m.assignment).partitions for m in persisted.members} == {
        r.b: (("foo", (2,)),), r.c: (("foo", (4, 5)),)}
    assert d.send(hb_req("g", r.b, 2)).response.error_code == Errors.REBALANCE_IN_PROGRESS
    jb = d.send(join_req(member=r.b, client="b"))
    jc = d.send(join_req(member=r.c, client="c"))
    assert jc.response.generation_id == 3 and d.answer(jb).leader in (r.b, r.c)
    fresh = rebuilt([decode(*encode(x)) for x in d.log])
    assert fresh.state.classic_groups["g"].generation_id == 2  # loads the last persisted generation
    assert "g" not in fresh.state.groups


def test_downgrade_also_follows_a_session_expiry():
    r = Rolling()
    d = r.d
    d.send(cg_join("a"))
    r.classic_rejoin(r.b, "b")
    r.classic_rejoin(r.c, "c")
    for t in range(5_000, 45_000, 5_000):
        d.send(hb_req("g", r.b, 2), now=t)
        d.send(hb_req("g", r.c, 2), now=t)
    d.tick(45_000)  # a's session (45 s) expired
    assert d.shard.state.classic_groups["g"].state is ClassicGroupState.PREPARING_REBALANCE


def test_policy_upgrade_only_keeps_the_mixed_group_when_the_consumer_member_leaves():
    r = Rolling(consumer_migration_policy="upgrade")
    d = r.d
    assert d.send(cg_join("a")).response.error_code == 0
    d.send(ConsumerGroupHeartbeatRequest("g", "a", -1))
    assert "g" in d.shard.state.groups and "g" not in d.shard.state.classic_groups
    assert sorted(d.shard.group("g").members) == sorted([r.b, r.c])


def test_policy_downgrade_only_refuses_the_upgrade():
    r = Rolling(consumer_migration_policy="downgrade")
    response = r.d.send(cg_join("a")).response
    assert response.error_code == Errors.GROUP_ID_NOT_FOUND
    assert r.d.shard.state.classic_groups["g"].state is ClassicGroupState.STABLE


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_policies_without_upgrade_refuse_the_consumer_member(policy):
    r = Rolling(consumer_migration_policy=policy)
    assert r.d.send(cg_join("a")).response.error_code == Errors.GROUP_ID_NOT_FOUND


def test_policy_disabled_refuses_classic_members_in_a_consumer_group():
    d = Driver(classic_shard(consumer_migration_policy="disabled"))
    d.send(cg_join("a"))
    response = d.send(join_req(client="x", version=3)).response
    assert response.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_bidirectional_policy_downgrades_and_upgrades_again():
    r = Rolling()
    d = r.d
    d.send(cg_join("a"))
    d.send(ConsumerGroupHeartbeatRequest("g", "a", -1))
    assert "g" in d.shard.state.classic_groups
    assert d.send(cg_join("a2")).response.error_code == 0
    assert "g" in d.shard.state.groups


def test_upgrade_refused_for_other_protocol_types_and_oversized_groups():
    d = Driver(classic_shard(classic_initial_rebalance_delay_ms=0))
    d.send(join_req(version=3, protocol_type="connect"))
    assert d.send(cg_join("a")).response.error_code == Errors.GROUP_ID_NOT_FOUND
    r = Rolling(consumer_max_size=2)
    assert r.d.send(cg_join("a")).response.error_code == Errors.GROUP_ID_NOT_FOUND


def test_classic_member_joins_an_existing_consumer_group():
    d = Driver(classic_shard())
    d.send(cg_join("a"))
    first = d.send(join_req(client="x")).response
    assert first.error_code == Errors.MEMBER_ID_REQUIRED
    joined = d.send(join_req(member=first.member_id, client="x")).response
    assert joined.error_code == 0 and joined.generation_id == 2
    group = d.shard.group("g")
    member = group.members[first.member_id]
    assert member.is_classic and member.classic_member_metadata.session_timeout_ms == 10_000
    assert d.shard.timers.deadline(f"session-timeout-g-{first.member_id}") == 10_000
    assert d.shard.timers.deadline(f"sync-g-{first.member_id}") == 60_000
    synced = d.send(sync_req("g", first.member_id, 2)).response
    assert f"sync-g-{first.member_id}" not in d.shard.timers
    assert decode_assignment(synced.assignment).partitions in ((), (("foo", (3, 4, 5)),))
    assert d.send(sync_req("g", first.member_id, 1)).response.error_code == Errors.ILLEGAL_GENERATION
    assert d.send(hb_req("g", "a", 1)).response.error_code == Errors.UNKNOWN_MEMBER_ID  # a consumer member


def test_classic_member_that_never_syncs_is_fenced():
    d = Driver(classic_shard())
    d.send(cg_join("a"))
    joined = d.send(join_req(client="x", version=3, session=100_000)).response
    assert d.send(cg_hb("a", 1, []), now=30_000).response.member_epoch == 2
    d.tick(59_999)
    assert joined.member_id in d.shard.group("g").members
    d.tick(60_000)  # its rebalance timeout after the join
    assert joined.member_id not in d.shard.group("g").members


def test_leave_group_of_classic_members_in_a_consumer_group():
    r = Rolling()
    d = r.d
    d.send(cg_join("a"))
    result = d.send(LeaveGroupRequest("g", members=(LeaveGroupMember(r.b), LeaveGroupMember("a"),
                                                    LeaveGroupMember("ghost"))))
    assert [m.error_code for m in result.response.members] == [0, Errors.UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID]
    assert r.b not in d.shard.group("g").members
    assert d.send(leave_req("g", r.c, version=1)).response.error_code == 0
    current = [x for x in result.records if type(x.key) is ConsumerGroupCurrentMemberAssignmentKey]
    assert current[0].value is None
    assert any(type(x.key) is ConsumerGroupMetadataKey for x in result.records)


def test_static_classic_member_replaces_its_old_incarnation_inside_a_consumer_group():
    d = Driver(classic_shard())
    d.send(cg_join("a"))
    first = d.send(join_req(instance="i1", client="x")).response
    assert first.error_code == 0
    again = d.send(join_req(instance="i1", client="x")).response  # restarted: unknown member id, same instance
    assert again.error_code == 0 and again.member_id != first.member_id
    group = d.shard.group("g")
    assert first.member_id not in group.members and group.static_members["i1"] == again.member_id
    fenced = d.send(join_req(member=first.member_id, instance="i1", client="x")).response
    assert fenced.error_code == Errors.FENCED_INSTANCE_ID
    assert d.send(hb_req("g", first.member_id, first.generation_id, instance="i1")).response.error_code == \
        Errors.FENCED_INSTANCE_ID


def test_mixed_group_replays_and_reloads_with_the_classic_session_timeouts():
    r = Rolling()
    d = r.d
    d.send(cg_join("a"))
    fresh = rebuilt([decode(*encode(x)) for x in d.log], now=1_000)
    assert dump(fresh) == dump(d.shard)
    assert fresh.timers.deadline(f"session-timeout-g-{r.b}") == 1_000 + 10_000  # its classic session timeout
    assert fresh.timers.deadline("session-timeout-g-a") == 1_000 + 45_000
    assert fresh.handle(hb_req("g", r.b, 1), 1_001).response.error_code == Errors.REBALANCE_IN_PROGRESS

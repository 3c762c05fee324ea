"""Hypothesis state machine: groups spread over several shards, placed as Kafka places them.

Members of six groups join, heartbeat, commit offsets, leave and time out; each request goes to
the shard `partition_for(group id, shards)` picks, as the runtime routes it, and each shard keeps
its own record log. A rule restarts one shard alone: a fresh shard replays that shard's log and
takes its place while the others keep their state. After every step:
* every shard holds only the groups (and offsets) placed on it;
* no partition of a group is owned by two of its members;
* replaying a shard's log into a fresh shard rebuilds that shard's state, for every shard;
* a restarted shard answers as the one it replaced: the same members and epochs.
"""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cohort.coordinator import (
    ConsumerGroupHeartbeatRequest,
    CoordinatorConfig,
    GroupCoordinatorShard,
    MetadataImage,
    TopicImage,
    decode,
    encode,
    partition_for,
)
from cohort.coordinator.requests import OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic

from cg_helpers import RangeTestAssignor, dump

SHARDS = 3
GROUPS = [f"group-{i}" for i in range(6)]
MEMBERS = ["a", "b", "c"]
TOPIC, TOPIC_ID, PARTITIONS = "t", uuid.uuid5(uuid.NAMESPACE_OID, "t"), 6


def test_the_groups_of_the_machine_are_spread_over_its_shards():
    assert len({partition_for(g, SHARDS) for g in GROUPS}) == SHARDS


class ShardedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = CoordinatorConfig(consumer_assignors=("simple",))
        self.image = MetadataImage.of([TopicImage(TOPIC, TOPIC_ID, PARTITIONS)], 1)
        self.shards = [self._fresh() for _ in range(SHARDS)]
        for shard in self.shards:
            shard.on_loaded(0)
        self.logs: list[list] = [[] for _ in range(SHARDS)]
        self.now = 0
        self.epochs: dict[tuple[str, str], int] = {}  # (group, member) -> the epoch the member last got
        self.restarts = 0

    def _fresh(self) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(self.config, assignors={"simple": RangeTestAssignor()}, image=self.image)

    def _send(self, group: str, request):
        p = partition_for(group, SHARDS)
        result = self.shards[p].handle(request, self.now)
        self.shards[p].commit(result.end_offset)
        self.logs[p].extend(result.records)
        return result.response

    # ---------------------------------------------------------------- rules

    @rule(group=st.sampled_from(GROUPS), member=st.sampled_from(MEMBERS))
    def join(self, group, member):
        if (group, member) in self.epochs:
            return
        r = self._send(group, ConsumerGroupHeartbeatRequest(group, member, 0, rebalance_timeout_ms=60_000,
                                                            subscribed_topic_names=[TOPIC], topic_partitions={}))
        assert r.error_code == 0, r
        self.epochs[(group, member)] = r.member_epoch

    @rule(data=st.data())
    def heartbeat(self, data):
        if not self.epochs:
            return
        group, member = data.draw(st.sampled_from(sorted(self.epochs)))
        shard = self.shards[partition_for(group, SHARDS)]
        owned = shard.group(group).members[member].assigned_partitions
        r = self._send(group, ConsumerGroupHeartbeatRequest(group, member, self.epochs[(group, member)],
                                                            topic_partitions=dict(owned)))
        if r.error_code:  # fenced meanwhile (session timeout): it rejoins later
            del self.epochs[(group, member)]
        else:
            self.epochs[(group, member)] = r.member_epoch

    @rule(group=st.sampled_from(GROUPS), offset=st.integers(0, 1000))
    def commit(self, group, offset):
        """A member commits with its epoch; a group without members takes an admin's commit."""
        members = sorted(m for g, m in self.epochs if g == group)
        member, epoch = (members[0], self.epochs[(group, members[0])]) if members else ("", -1)
        r = self._send(group, OffsetCommitRequest(group, (OffsetCommitTopic(TOPIC, (
            OffsetCommitPartition(offset % PARTITIONS, offset),)),), member, epoch))
        assert all(p.error_code == 0 for t in r.topics for p in t.partitions), r

    @rule(data=st.data())
    def leave(self, data):
        if not self.epochs:
            return
        group, member = data.draw(st.sampled_from(sorted(self.epochs)))
        self._send(group, ConsumerGroupHeartbeatRequest(group, member, -1))
        del self.epochs[(group, member)]

    @rule(ms=st.sampled_from([1_000, 20_000, 46_000]))
    def tick(self, ms):
        self.now += ms
        for p, shard in enumerate(self.shards):
            result = shard.expire(self.now)
            shard.commit(result.end_offset)
            self.logs[p].extend(result.records)
        for (group, member) in list(self.epochs):
            live = self.shards[partition_for(group, SHARDS)].group(group)
            if live is None or member not in live.members:
                del self.epochs[(group, member)]  # its session expired

    @precondition(lambda self: self.restarts < 3)
    @rule(p=st.integers(0, SHARDS - 1))
    def restart_one_shard(self, p):
        """The shard goes away and comes back from its log; the others are not touched."""
        before = dump(self.shards[p])
        others = [dump(s) for i, s in enumerate(self.shards) if i != p]
        self.shards[p].unload()
        fresh = self._fresh()
        for record in self.logs[p]:
            fresh.replay(decode(*encode(record)))
        fresh.on_loaded(self.now)
        self.shards[p] = fresh
        self.restarts += 1
        assert dump(fresh) == before
        assert [dump(s) for i, s in enumerate(self.shards) if i != p] == others

    # ---------------------------------------------------------------- invariants

    @invariant()
    def each_shard_holds_only_its_own_groups(self):
        for p, shard in enumerate(self.shards):
            ids = set(shard.state.groups) | set(shard.state.offsets)
            assert all(partition_for(g, SHARDS) == p for g in ids), (p, ids)

    @invariant()
    def no_partition_has_two_owners(self):
        for shard in self.shards:
            for group in shard.state.groups.values():
                owners: dict = {}
                for member_id, member in group.members.items():
                    for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                        for topic_id, parts in assignment.items():
                            for p in parts:
                                assert (topic_id, p) not in owners, (group.group_id, p, owners[(topic_id, p)], member_id)
                                owners[(topic_id, p)] = member_id

    @invariant()
    def every_shard_replays_to_its_state(self):
        for p, shard in enumerate(self.shards):
            fresh = self._fresh()
            for record in self.logs[p]:
                fresh.replay(decode(*encode(record)))
            assert dump(fresh) == dump(shard), f"shard {p}"


ShardedMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestShardedCoordinator = ShardedMachine.TestCase

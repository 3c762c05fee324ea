"""Hypothesis state machine: random clients against one shard, checked after every step.

Clients join, leave, heartbeat with or without acknowledging revocations, lose responses, let
their sessions expire, and topics change underneath them. After every step:
* no partition is owned (assigned or pending revocation) by two members;
* group, assignment and member epochs never go backwards;
* replaying every record written so far (through bytes) into a fresh shard rebuilds the same state;
* a write whose append fails is reverted exactly, and reads never see a write before its commit;
* and the `converge` rule checks that members which keep heartbeating and acknowledging reach
  the target assignment, with the group Stable, within a bounded number of rounds.
"""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cohort.coordinator import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CoordinatorConfig,
    Errors,
    GroupCoordinatorShard,
    MetadataImage,
    TopicImage,
    decode,
    encode,
)

from cohort.coordinator.records import ClientAssignorMetadata
from cohort.coordinator.requests import InstallAssignmentRequest, InstalledMember, PrepareAssignmentRequest

from cg_helpers import RangeTestAssignor, dump

GROUP = "g"
MEMBERS = [f"m{i}" for i in range(5)]
TOPICS = ["foo", "bar"]
CONVERGENCE_ROUNDS = 6


class Client:
    """What a consumer believes: its epoch, the partitions it owns and the last assignment it got."""

    def __init__(self) -> None:
        self.joined = False
        self.epoch = 0
        self.owned: dict[uuid.UUID, tuple[int, ...]] = {}
        self.assignment: dict[uuid.UUID, tuple[int, ...]] = {}
        self.topics: list[str] = []
        self.resend_full = False  # after a lost response the next heartbeat carries every field


class CoordinatorMachine(RuleBasedStateMachine):
    assignor_name = "simple"

    def __init__(self) -> None:
        super().__init__()
        assignors = {"simple": RangeTestAssignor()} if self.assignor_name == "simple" else {}
        self.config = CoordinatorConfig(consumer_assignors=(self.assignor_name,))
        self.topic_ids = {name: uuid.uuid5(uuid.NAMESPACE_OID, name) for name in TOPICS}
        self.partitions = {"foo": 4, "bar": 3}
        self.version = 1
        self.shard = GroupCoordinatorShard(self.config, assignors=assignors, image=self._image())
        self.shard.on_loaded(0)
        self.now = 0
        self.log: list = []
        self.clients = {m: Client() for m in MEMBERS}
        self.seen_group_epoch = 0
        self.seen_assignment_epoch = 0
        self.seen_member_epochs: dict[str, int] = {}

    def _image(self) -> MetadataImage:
        return MetadataImage.of([TopicImage(n, self.topic_ids[n], self.partitions[n]) for n in TOPICS], self.version)

    # ---------------------------------------------------------------- plumbing

    def _send(self, request, lose: bool = False):
        result = self.shard.handle(request, self.now)
        self.shard.commit(result.end_offset)
        self.log.extend(result.records)
        return None if lose else result.response

    def _heartbeat(self, member: str, ack: bool, lose: bool = False):
        client = self.clients[member]
        if ack:
            client.owned = dict(client.assignment)
        response = self._send(self._next_heartbeat(member), lose)
        client.resend_full = lose
        self._absorb(client, response)

    def _next_heartbeat(self, member: str) -> ConsumerGroupHeartbeatRequest:
        """What the client sends next: a full heartbeat after a lost response (Kafka's consumer
        does, so that the coordinator sends the assignment it missed), else a plain one."""
        if self.clients[member].resend_full:
            return self._full_heartbeat(member)
        return self._plain_heartbeat(member)

    def _full_heartbeat(self, member: str) -> ConsumerGroupHeartbeatRequest:
        """A heartbeat with every field, as a client sends after a lost response."""
        client = self.clients[member]
        return ConsumerGroupHeartbeatRequest(GROUP, member, client.epoch, rebalance_timeout_ms=60_000,
                                             subscribed_topic_names=client.topics, topic_partitions=dict(client.owned))

    def _plain_heartbeat(self, member: str, **changes) -> ConsumerGroupHeartbeatRequest:
        """A heartbeat with the client's epoch and owned partitions, and `changes`."""
        client = self.clients[member]
        return ConsumerGroupHeartbeatRequest(GROUP, member, client.epoch, topic_partitions=dict(client.owned), **changes)

    def _absorb(self, client: Client, response) -> None:
        if response is None:
            return
        if response.error_code:
            event(f"heartbeat error {Errors(response.error_code).name}")
        if response.error_code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID, Errors.GROUP_ID_NOT_FOUND):
            client.joined, client.epoch, client.owned, client.assignment = False, 0, {}, {}
            return
        assert response.error_code == 0, response
        client.epoch = response.member_epoch
        if response.assignment is not None:
            client.assignment = dict(response.assignment)

    # ---------------------------------------------------------------- rules

    @rule(member=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def join(self, member, topics):
        if not self.clients[member].joined:
            self._join(member, sorted(topics))

    def _join(self, member, topics):
        client = self.clients[member]
        response = self._send(ConsumerGroupHeartbeatRequest(
            GROUP, member, 0, rebalance_timeout_ms=60_000, subscribed_topic_names=topics, topic_partitions={}))
        assert response.error_code == 0, response
        client.joined, client.owned, client.topics = True, {}, topics
        self._absorb(client, response)

    @rule(members=st.sets(st.sampled_from(MEMBERS), min_size=2), topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def join_many(self, members, topics):
        for member in sorted(members):
            if not self.clients[member].joined:
                self._join(member, sorted(topics))

    @rule(member=st.sampled_from(MEMBERS), ack=st.booleans())
    def heartbeat(self, member, ack):
        if self.clients[member].joined:
            self._heartbeat(member, ack)

    @rule(member=st.sampled_from(MEMBERS), ack=st.booleans())
    def heartbeat_response_lost(self, member, ack):
        if self.clients[member].joined:
            self._heartbeat(member, ack, lose=True)

    @rule(member=st.sampled_from(MEMBERS), ack=st.booleans())
    def heartbeat_append_fails(self, member, ack):
        """The log append of a write fails: the shard reverts, the client sees no response."""
        client = self.clients[member]
        if not client.joined:
            return
        before = dump(self.shard)
        start = self.shard.last_written_offset
        if ack:
            client.owned = dict(client.assignment)
        self.shard.handle(self._next_heartbeat(member), self.now)
        self.shard.revert(start)
        client.resend_full = True
        assert dump(self.shard) == before

    @rule(member=st.sampled_from(MEMBERS), ack=st.booleans())
    def reads_wait_for_commit(self, member, ack):
        """While a write is not yet durable, describe and list show the state before it."""
        client = self.clients[member]
        if not client.joined:
            return
        describe = ConsumerGroupDescribeRequest([GROUP])
        before = (self.shard.describe_groups(describe), self.shard.list_groups())
        if ack:
            client.owned = dict(client.assignment)
        result = self.shard.handle(self._next_heartbeat(member), self.now)
        assert (self.shard.describe_groups(describe), self.shard.list_groups()) == before
        self.shard.commit(result.end_offset)
        self.log.extend(result.records)
        client.resend_full = False
        self._absorb(client, result.response)

    @rule(member=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(TOPICS)))
    def change_subscription(self, member, topics):
        client = self.clients[member]
        if not client.joined:
            return
        client.topics = sorted(topics)
        response = self._send(self._full_heartbeat(member) if client.resend_full
                              else self._plain_heartbeat(member, subscribed_topic_names=client.topics))
        client.resend_full = False
        self._absorb(client, response)

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member):
        client = self.clients[member]
        if not client.joined:
            return
        response = self._send(ConsumerGroupHeartbeatRequest(GROUP, member, -1))
        assert response.error_code in (0, Errors.UNKNOWN_MEMBER_ID)
        client.joined, client.epoch, client.owned, client.assignment = False, 0, {}, {}

    @rule(ms=st.sampled_from([1_000, 1_000, 5_000, 20_000, 46_000, 61_000]))
    def tick(self, ms):
        self.now += ms
        result = self.shard.expire(self.now)
        self.shard.commit(result.end_offset)
        self.log.extend(result.records)

    @rule(topic=st.sampled_from(TOPICS), grow=st.integers(0, 3), recreate=st.booleans())
    def topic_change(self, topic, grow, recreate):
        self.partitions[topic] += grow
        if recreate:
            self.topic_ids[topic] = uuid.uuid4()
        self.version += 1
        self.shard.update_metadata(self._image())

    @rule()
    def converge(self):
        """Members that keep heartbeating and acknowledging reach their target, and the group is Stable.

        A member fenced meanwhile (session expired, stale epoch) rejoins, as a real consumer does.
        """
        group = self.shard.group(GROUP)
        active = [m for m in MEMBERS if self.clients[m].joined or (group is not None and m in group.members)]
        if not active:
            return
        for _ in range(CONVERGENCE_ROUNDS):
            for member in active:
                if self.clients[member].joined:
                    self._heartbeat(member, ack=True)
                else:
                    self._join(member, self.clients[member].topics)
            group = self.shard.group(GROUP)
            if group.state().value == "Stable" and all(self.clients[m].joined for m in active):
                break
        group = self.shard.group(GROUP)
        event(f"converge: {len(active)} members")
        assert set(group.members) == set(active)
        assert group.state().value == "Stable", f"not stable after {CONVERGENCE_ROUNDS} rounds"
        for member_id, member in group.members.items():
            assert member.assigned_partitions == group.target_assignment.get(member_id, {})
            assert self.clients[member_id].assignment == dict(member.assigned_partitions)
        described = self.shard.describe_groups(ConsumerGroupDescribeRequest([GROUP])).groups[0]
        assert described.group_state == "Stable"

    # ---------------------------------------------------------------- invariants

    @invariant()
    def single_ownership(self):
        group = self.shard.group(GROUP)
        if group is None:
            return
        owners: dict[tuple, str] = {}
        for member_id, member in group.members.items():
            for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic_id, parts in assignment.items():
                    for p in parts:
                        assert (topic_id, p) not in owners, f"{topic_id}-{p} owned by {owners[(topic_id, p)]} and {member_id}"
                        owners[(topic_id, p)] = member_id

    @invariant()
    def clients_in_good_standing_never_share_partitions(self):
        """Consumers the coordinator would accept offset commits from (their epoch is the member's
        current epoch) never believe they own the same partition. A client behind by one epoch
        after a lost response may briefly act on a stale assignment, as in Kafka, but its commits
        are refused with STALE_MEMBER_EPOCH, so it is not counted."""
        group = self.shard.group(GROUP)
        if group is None:
            return
        owners: dict[tuple, str] = {}
        for member_id, client in self.clients.items():
            member = group.members.get(member_id)
            if not client.joined or member is None:
                continue
            if client.epoch != member.member_epoch:
                continue
            for topic_id, parts in client.owned.items():
                for p in parts:
                    assert (topic_id, p) not in owners, f"clients {owners[(topic_id, p)]} and {member_id} both own {p}"
                    owners[(topic_id, p)] = member_id

    @invariant()
    def epochs_never_go_backwards(self):
        group = self.shard.group(GROUP)
        if group is None:  # an empty group is deleted at the retention check; a new one starts over
            self.seen_group_epoch = self.seen_assignment_epoch = 0
            self.seen_member_epochs.clear()
            return
        assert group.group_epoch >= self.seen_group_epoch
        assert group.assignment_epoch >= self.seen_assignment_epoch
        assert group.group_epoch >= group.assignment_epoch
        self.seen_group_epoch, self.seen_assignment_epoch = group.group_epoch, group.assignment_epoch
        for member_id in list(self.seen_member_epochs):
            if member_id not in group.members:
                del self.seen_member_epochs[member_id]  # a new incarnation may start again at 0
        for member_id, member in group.members.items():
            assert member.member_epoch >= self.seen_member_epochs.get(member_id, 0)
            assert member.member_epoch <= group.assignment_epoch
            self.seen_member_epochs[member_id] = member.member_epoch

    @invariant()
    def replay_rebuilds_state(self):
        fresh = GroupCoordinatorShard(self.config, assignors={"simple": RangeTestAssignor()}, image=self._image())
        for record in self.log:
            fresh.replay(decode(*encode(record)))
        assert dump(fresh) == dump(self.shard)


CoordinatorMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestCoordinatorWithTestAssignor = CoordinatorMachine.TestCase


class UniformMachine(CoordinatorMachine):
    assignor_name = "uniform"


class RangeMachine(CoordinatorMachine):
    assignor_name = "range"


UniformMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
RangeMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestCoordinatorWithUniform = UniformMachine.TestCase
TestCoordinatorWithRange = RangeMachine.TestCase


AFFINITY = ClientAssignorMetadata("affinity", 0, 1, 0, 1, b"state")


class ClientSideMachine(CoordinatorMachine):
    """The same clients with a client-side assignor: the member the coordinator chooses runs
    Prepare, computes ranges per topic from what Prepare returns, and Installs them. A `stall`
    rule makes a chosen member sit on it until its rebalance timeout passes and another member
    is chosen. Every invariant above holds, and `converge` (once nobody stalls) still ends Stable."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled: set[str] = set()

    def _join(self, member, topics):
        client = self.clients[member]
        response = self._send(ConsumerGroupHeartbeatRequest(
            GROUP, member, 0, rebalance_timeout_ms=60_000, subscribed_topic_names=topics, topic_partitions={},
            client_assignors=(AFFINITY,)))
        assert response.error_code == 0, response
        client.joined, client.owned, client.topics = True, {}, topics
        self._absorb(client, response)

    def _plain_heartbeat(self, member: str, **changes) -> ConsumerGroupHeartbeatRequest:
        client = self.clients[member]
        if client.epoch != 0:
            return super()._plain_heartbeat(member, **changes)
        # waiting for the group's first installed target: its heartbeats are joins, every field set
        client.owned = {}
        changes.setdefault("subscribed_topic_names", client.topics)
        return ConsumerGroupHeartbeatRequest(GROUP, member, 0, rebalance_timeout_ms=60_000, topic_partitions={},
                                             client_assignors=(AFFINITY,), **changes)

    def _full_heartbeat(self, member: str) -> ConsumerGroupHeartbeatRequest:
        return dataclasses.replace(super()._full_heartbeat(member), client_assignors=(AFFINITY,))

    def _send(self, request, lose: bool = False):
        response = super()._send(request, False)
        if getattr(response, "should_compute_assignment", False) and request.member_id not in self.stalled:
            event("client-side assignment installed")
            self._compute(request.member_id, response.member_epoch)
        return None if lose else response

    def _compute(self, member: str, epoch: int) -> None:
        prepared = self._send(PrepareAssignmentRequest(GROUP, member, epoch))
        assert prepared.error_code == 0, prepared
        out: dict[str, dict] = {m.member_id: {} for m in prepared.members}
        for topic in prepared.topics:
            subs = [m.member_id for m in prepared.members if topic.topic_id in m.subscribed_topic_ids]
            quota, extra = divmod(topic.num_partitions, len(subs))
            start = 0
            for i, m in enumerate(subs):
                size = quota + (i < extra)
                if size:
                    out[m][topic.topic_id] = list(range(start, start + size))
                start += size
        installed = self._send(InstallAssignmentRequest(GROUP, member, epoch, prepared.group_epoch, 0, tuple(
            InstalledMember(m, parts, 1, m.encode()) for m, parts in out.items())))
        assert installed.error_code == 0, installed

    @rule(member=st.sampled_from(MEMBERS))
    def stall(self, member):
        self.stalled.add(member)

    @rule()
    def converge(self):
        self.stalled.clear()
        super().converge()
        group = self.shard.group(GROUP)
        if group is not None and group.members:
            assert self.shard.describe_groups(ConsumerGroupDescribeRequest([GROUP])).groups[0].assignor_name == "affinity"


ClientSideMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
TestCoordinatorWithClientSideAssignor = ClientSideMachine.TestCase

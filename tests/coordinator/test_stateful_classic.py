"""Hypothesis state machine: classic (eager) clients and consumer-protocol clients share one group,
which is upgraded and downgraded as they come and go, against one shard on a fake clock.

Classic clients run the real JoinGroup -> SyncGroup -> Heartbeat loop, including parked requests
answered later through completions, leader-side assignment, MEMBER_ID_REQUIRED, revoking
everything before re-joining, and being fenced. Consumer clients heartbeat as in
test_stateful.py. Every client consumes and commits offsets. After every step:
* no partition is owned by two clients in good standing (a classic client owns what its last
  successful SyncGroup returned, a consumer client what it acknowledged; "good standing" = the
  coordinator would accept its commits: it is a member at the client's generation / epoch);
* a commit is accepted exactly when the client is in good standing, and no committed offset ever
  goes backwards;
* replaying every record written so far (through bytes) rebuilds the same consumer groups,
  offsets, and persisted classic generations.
"""

from __future__ import annotations

import itertools

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cohort.coordinator import CoordinatorConfig, Errors, GroupCoordinatorShard, decode, encode
from cohort.coordinator.classic_group import ClassicGroupState
from cohort.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from cohort.coordinator.requests import (
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
    Parked,
    SyncGroupRequest,
)

from cg_helpers import FOO, RangeTestAssignor, dump, image

GROUP = "g"
PARTITIONS = 6
CLASSIC = ["k0", "k1", "s0"]
STATIC = {"s0": "instance-s0"}  # a static member (group.instance.id)
CONSUMERS = ["n0", "n1"]
SESSION = 10_000
SUBSCRIPTION = encode_subscription(Subscription(("foo",)))


class ClassicClient:
    def __init__(self, name: str):
        self.name = name
        self.instance_id = STATIC.get(name)
        self.member_id = ""
        self.generation = -1
        self.owned: set[int] = set()
        self.waiting: int | None = None  # request id of a parked join or sync
        self.positions: dict[int, int] = {}


class ConsumerClient:
    def __init__(self, name: str):
        self.name = name
        self.joined = False
        self.epoch = 0
        self.owned: set[int] = set()
        self.assignment: set[int] = set()
        self.positions: dict[int, int] = {}


class MixedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count(1)
        self.config = CoordinatorConfig(consumer_assignors=("simple",), classic_initial_rebalance_delay_ms=1_000)
        self.shard = GroupCoordinatorShard(self.config, assignors={"simple": RangeTestAssignor()},
                                           image=image(foo=PARTITIONS), member_id_factory=lambda: str(next(counter)))
        self.shard.on_loaded(0)
        self.now = 0
        self.log: list = []
        self.classic = {n: ClassicClient(n) for n in CLASSIC}
        self.consumers = {n: ConsumerClient(n) for n in CONSUMERS}
        self.waiting: dict[int, ClassicClient] = {}
        self.high_water: dict[int, int] = {}
        self.progress = itertools.count(1)

    # ---------------------------------------------------------------- plumbing

    def _deliver(self, result) -> None:
        self.shard.commit(result.end_offset)
        self.log.extend(result.records)
        for rid, response in result.completions:
            client = self.waiting.pop(rid, None)
            assert client is not None, f"completion for unknown request {rid}"
            client.waiting = None
            self._on_classic_response(client, response)

    def _send(self, request):
        result = self.shard.handle(request, self.now)
        self._deliver(result)
        return result.response

    def _acquire(self, positions: dict[int, int], partitions: set[int]) -> None:
        """A client that gets partitions starts from their committed offsets."""
        fetched = self.shard.fetch_offsets(OffsetFetchRequest(GROUP, [OffsetFetchTopic("foo", sorted(partitions))]))
        committed = {p.partition: p.committed_offset for t in fetched.topics for p in t.partitions}
        for p in partitions:
            positions[p] = max(committed.get(p, -1), 0)

    # ---------------------------------------------------------------- classic client

    def _on_classic_response(self, client: ClassicClient, response) -> None:
        if isinstance(response, Parked):
            client.waiting = response.request_id
            self.waiting[response.request_id] = client
            return
        code = response.error_code
        if code:
            event(f"classic {type(response).__name__} {Errors(code).name}")
        if code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID, Errors.GROUP_ID_NOT_FOUND):
            client.member_id, client.generation, client.owned = "", -1, set()
            return
        if code:
            return  # REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, ...: re-join on a later step
        if hasattr(response, "generation_id"):  # JoinGroupResponse: sync (as leader: with an assignment)
            client.member_id, client.generation = response.member_id, response.generation_id
            assignments = ()
            if response.members:
                ids = sorted(m.member_id for m in response.members)
                assignments = tuple(
                    (m, encode_assignment(Assignment((("foo", tuple(range(i, PARTITIONS, len(ids)))),))))
                    for i, m in enumerate(ids))
            self._on_classic_response(client, self._send(SyncGroupRequest(
                GROUP, client.generation, client.member_id, client.instance_id, assignments=assignments)))
        elif hasattr(response, "assignment"):  # SyncGroupResponse
            new = {p for _, ps in decode_assignment(response.assignment).partitions for p in ps} \
                if response.assignment else set()
            self._acquire(client.positions, new - client.owned)
            client.owned = new

    def _classic_join(self, client: ClassicClient) -> None:
        client.owned = set()  # eager: revoke everything before re-joining
        request = JoinGroupRequest(GROUP, client.member_id, "consumer", (("range", SUBSCRIPTION),), SESSION, 20_000,
                                   client.instance_id, api_version=5, client_id=client.name)
        response = self._send(request)
        if not isinstance(response, Parked) and response.error_code == Errors.MEMBER_ID_REQUIRED:
            client.member_id = response.member_id
            response = self._send(JoinGroupRequest(GROUP, client.member_id, "consumer", (("range", SUBSCRIPTION),),
                                                   SESSION, 20_000, api_version=5, client_id=client.name))
        self._on_classic_response(client, response)

    @rule(name=st.sampled_from(CLASSIC))
    def classic_join(self, name):
        client = self.classic[name]
        if client.waiting is None:
            self._classic_join(client)

    @rule(name=st.sampled_from(CLASSIC))
    def classic_heartbeat(self, name):
        client = self.classic[name]
        if client.waiting is not None or not client.member_id or client.generation < 0:
            return
        response = self._send(HeartbeatRequest(GROUP, client.generation, client.member_id, client.instance_id))
        if response.error_code == Errors.REBALANCE_IN_PROGRESS:
            self._classic_join(client)
        elif response.error_code:
            self._on_classic_response(client, response)
            client.owned = set()
            client.generation = -1

    @rule(name=st.sampled_from(sorted(STATIC)))
    def static_restart(self, name):
        """The static member's process restarts: a new incarnation re-joins under the same
        instance id without a member id; the old one's parked requests are fenced."""
        client = self.classic[name] = ClassicClient(name)
        self._classic_join(client)

    @rule(name=st.sampled_from(CLASSIC))
    def classic_leave(self, name):
        client = self.classic[name]
        if client.waiting is not None or not client.member_id:
            return
        self._send(LeaveGroupRequest(GROUP, members=(LeaveGroupMember(client.member_id, client.instance_id),)))
        client.member_id, client.generation, client.owned = "", -1, set()

    # ---------------------------------------------------------------- consumer client

    def _cg_absorb(self, client: ConsumerClient, response) -> None:
        if response.error_code:
            event(f"consumer heartbeat {Errors(response.error_code).name}")
            client.joined, client.epoch, client.owned, client.assignment = False, 0, set(), set()
            return
        client.joined = True
        client.epoch = response.member_epoch
        if response.assignment is not None:
            client.assignment = set(response.assignment.get(FOO, ()))

    @rule(name=st.sampled_from(CONSUMERS))
    def consumer_join(self, name):
        client = self.consumers[name]
        if client.joined:
            return
        self._cg_absorb(client, self._send(ConsumerGroupHeartbeatRequest(
            GROUP, name, 0, rebalance_timeout_ms=20_000, subscribed_topic_names=["foo"], topic_partitions={})))

    @rule(name=st.sampled_from(CONSUMERS), ack=st.booleans())
    def consumer_heartbeat(self, name, ack):
        client = self.consumers[name]
        if not client.joined:
            return
        if ack:
            self._acquire(client.positions, client.assignment - client.owned)
            client.owned = set(client.assignment)
        self._cg_absorb(client, self._send(ConsumerGroupHeartbeatRequest(
            GROUP, name, client.epoch, topic_partitions={FOO: tuple(sorted(client.owned))})))

    @rule(name=st.sampled_from(CONSUMERS))
    def consumer_leave(self, name):
        client = self.consumers[name]
        if client.joined:
            self._send(ConsumerGroupHeartbeatRequest(GROUP, name, -1))
            client.joined, client.epoch, client.owned, client.assignment = False, 0, set(), set()

    # ---------------------------------------------------------------- consuming, committing, time

    @rule(name=st.sampled_from(CLASSIC + CONSUMERS))
    def consume_and_commit(self, name):
        """Advance the positions of owned partitions and commit them with the client's generation."""
        instance_id = None
        if name in self.classic:
            client = self.classic[name]
            member_id, generation, version, instance_id = client.member_id, client.generation, 8, client.instance_id
        else:
            client = self.consumers[name]
            member_id, generation, version = name, client.epoch, 9
        if not client.owned:
            return
        for p in client.owned:
            client.positions[p] = client.positions.get(p, 0) + next(self.progress) % 7 + 1
        request = OffsetCommitRequest(GROUP, [OffsetCommitTopic("foo", [
            OffsetCommitPartition(p, client.positions[p]) for p in sorted(client.owned)])], member_id, generation,
            instance_id, api_version=version)
        owner = name in self._in_good_standing()
        codes = {p.error_code for t in self._send(request).topics for p in t.partitions}
        event(f"commit {'ok' if codes == {0} else Errors(max(codes)).name}")
        # the coordinator takes commits exactly from the clients it considers current owners
        assert (codes == {0}) == owner, (name, owner, codes)

    @rule(ms=st.sampled_from([500, 1_000, 3_000, 11_000, 21_000]))
    def tick(self, ms):
        self.now += ms
        self._deliver(self.shard.expire(self.now))

    # ---------------------------------------------------------------- invariants

    def _in_good_standing(self) -> dict[str, set[int]]:
        shard = self.shard
        classic_group = shard.state.classic_groups.get(GROUP)
        consumer_group = shard.state.groups.get(GROUP)
        owners = {}
        for name, client in self.classic.items():
            if classic_group is not None:
                ok = (client.member_id in classic_group.members and client.generation == classic_group.generation_id
                      and not classic_group.is_in(ClassicGroupState.COMPLETING_REBALANCE))
            elif consumer_group is not None:
                member = consumer_group.members.get(client.member_id)
                ok = member is not None and member.member_epoch == client.generation
            else:
                ok = False
            if ok:
                owners[name] = client.owned
        for name, client in self.consumers.items():
            member = None if consumer_group is None else consumer_group.members.get(name)
            if client.joined and member is not None and member.member_epoch == client.epoch:
                owners[name] = client.owned
        return owners

    @invariant()
    def no_partition_owned_twice(self):
        seen: dict[int, str] = {}
        for name, owned in self._in_good_standing().items():
            for p in owned:
                assert p not in seen, f"foo-{p} owned by {seen[p]} and {name}"
                seen[p] = name
        group = self.shard.state.groups.get(GROUP)
        if group is not None:
            held: dict = {}
            for member_id, member in group.members.items():
                for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                    for p in assignment.get(FOO, ()):
                        assert p not in held, f"coordinator: foo-{p} held by {held[p]} and {member_id}"
                        held[p] = member_id

    @invariant()
    def committed_offsets_never_go_backwards(self):
        for (topic, p), value in self.shard.state.offsets.get(GROUP, {}).items():
            assert value.offset >= self.high_water.get(p, 0), f"foo-{p} went back to {value.offset}"
            self.high_water[p] = value.offset

    @invariant()
    def at_most_one_group_type(self):
        consumer, classic = self.shard.state.groups.get(GROUP), self.shard.state.classic_groups.get(GROUP)
        assert consumer is None or classic is None
        if consumer is not None and consumer.classic_members:
            event("mixed consumer group (classic members in a consumer group)")
        if classic is not None and classic.state is ClassicGroupState.STABLE:
            event("stable classic group")
        if classic is not None and self.log and type(self.log[-1].key).__name__ == "GroupMetadataKey" and any(
                type(r.key).__name__ == "ConsumerGroupMetadataKey" and r.value is None for r in self.log[-12:]):
            event("downgraded")

    @invariant()
    def replay_rebuilds_state(self):
        fresh = GroupCoordinatorShard(self.config, assignors={"simple": RangeTestAssignor()},
                                      image=image(foo=PARTITIONS))
        for record in self.log:
            fresh.replay(decode(*encode(record)))
        assert dump(fresh) == dump(self.shard)
        live = {g: c.persisted for g, c in self.shard.state.classic_groups.items() if c.persisted is not None}
        assert {g: c.persisted for g, c in fresh.state.classic_groups.items()} == live


MixedMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=80, deadline=None)
TestMixedClassicAndConsumerClients = MixedMachine.TestCase

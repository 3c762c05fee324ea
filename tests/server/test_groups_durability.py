"""Loading, durability and recovery of the group coordinator through the real server."""

import asyncio
import socket
import threading
import time

import pytest
from kio.schema.errors import ErrorCode as E
from rawreq import create_topics, ms, req, sub
from test_groups_api import FAST, assigned, commit, describe, fetch_offsets, heartbeat, join, topic_ids, wait_loaded

from cohort.coordinator import decode
from cohort.coordinator.records import ConsumerGroupMemberMetadataKey, OffsetCommitKey
from cohort.server.groups import GroupCoordinator
from cohort_testing import ServerThread, WireClient


@pytest.fixture
def srv(tmp_path):
    s = ServerThread(tmp_path / "data", FAST).start()
    wait_loaded(s)
    with WireClient(s.port) as c:
        c.request(19, 7, create_topics(7, ("t", 4)))
    yield s
    s.stop()


def test_group_apis_answer_load_in_progress_until_loaded(tmp_path, monkeypatch):
    gate = threading.Event()
    original = GroupCoordinator.load

    async def gated(self):
        while not gate.is_set():
            await asyncio.sleep(0.01)
        await original(self)

    monkeypatch.setattr(GroupCoordinator, "load", gated)
    with ServerThread(tmp_path / "data", FAST) as s, WireClient(s.port) as c:
        assert c.request(10, 3, req(10, 3, key="g", key_type=0)).error_code == E.none  # FindCoordinator answers
        assert join(c, "g", "m", ["t"]).error_code == E.coordinator_load_in_progress
        assert commit(c, 9, "g", {"t": {0: 1}}) == {("t", 0): E.coordinator_load_in_progress}
        assert fetch_offsets(c, 9, "g", {"t": [0]})[0] == E.coordinator_load_in_progress
        assert fetch_offsets(c, 1, "g", {"t": [0]})[1][("t", 0)][2] == E.coordinator_load_in_progress
        assert describe(c, "g")[0].error_code == E.coordinator_load_in_progress
        assert c.request(16, 5, req(16, 5, states_filter=(), types_filter=())).error_code == E.coordinator_load_in_progress
        assert c.request(15, 5, req(15, 5, groups=("g",), include_authorized_operations=False)).groups[0].error_code == E.coordinator_load_in_progress
        assert c.request(42, 2, req(42, 2, groups_names=("g",))).results[0].error_code == E.coordinator_load_in_progress
        assert c.request(47, 0, req(47, 0, group_id="g", topics=())).error_code == E.coordinator_load_in_progress
        r = c.request(32, 4, req(32, 4, resources=(sub(32, 4, "resources", resource_type=32, resource_name="g",
                                                       configuration_keys=None),)))
        assert r.results[0].error_code == E.coordinator_load_in_progress
        gate.set()
        wait_loaded(s)
        assert join(c, "g", "m", ["t"]).error_code == E.none


def _blocking_flush(srv):
    """Make the coordinator log's fsync wait for the returned event."""
    log = srv.server.broker.coordinator_log.log
    original, release = log.flush, threading.Event()

    def flush():
        assert release.wait(10)
        original()

    log.flush = flush
    return release


def _records(srv):
    out = []
    srv.call(lambda: out.extend(decode(k, v) for _, k, v in srv.server.broker.coordinator_log.read_all()))
    return out


def test_responses_leave_only_after_the_records_are_fsynced(srv):
    release = _blocking_flush(srv)
    clog = srv.server.broker.coordinator_log
    durable_before = clog.high_watermark
    with WireClient(srv.port) as c, WireClient(srv.port) as other:
        c.send_raw(c.encode(68, 1, req(68, 1, group_id="d", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
                                       rebalance_timeout=ms(30000), subscribed_topic_names=("t",),
                                       subscribed_topic_regex=None, server_assignor=None, topic_partitions=())))
        c.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            c.sock.recv(1)
        assert clog.high_watermark == durable_before
        # another connection sees only committed state: the group does not exist yet
        assert describe(other, "d")[0].error_code == E.group_id_not_found
        release.set()
        c.sock.settimeout(10)
        _, resp = c.decode(68, 1, c.recv_frame())
        assert resp.error_code == E.none and resp.member_epoch == 1
        assert clog.high_watermark > durable_before
        assert ConsumerGroupMemberMetadataKey("d", "m") in [r.key for r in _records(srv)]
        assert describe(other, "d")[0].group_state == "Stable"


def test_pipelined_requests_of_one_connection_keep_their_order(srv):
    release = _blocking_flush(srv)
    with WireClient(srv.port) as c:
        commit_req = req(8, 9, group_id="pipe", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                         topics=(sub(8, 9, "topics", name="t", partitions=(sub(8, 9, "topics", "partitions",
                                 partition_index=0, committed_offset=42, committed_leader_epoch=-1, committed_metadata=""),)),))
        fetch_req = req(9, 9, groups=(sub(9, 9, "groups", group_id="pipe", member_id=None, member_epoch=-1, topics=None),),
                        require_stable=True)
        c.send_raw(c.encode(8, 9, commit_req) + c.encode(9, 9, fetch_req))
        time.sleep(0.2)
        release.set()
        c.sock.settimeout(10)
        _, committed = c.decode(8, 9, c.recv_frame())
        _, fetched = c.decode(9, 9, c.recv_frame())
        assert committed.topics[0].partitions[0].error_code == E.none
        assert fetched.groups[0].topics[0].partitions[0].committed_offset == 42


def test_a_failed_fsync_reverts_the_state_and_answers_not_coordinator(srv):
    log = srv.server.broker.coordinator_log.log
    original = log.flush
    failures = [OSError(5, "Input/output error")]

    def flush():
        if failures:
            raise failures.pop()
        original()

    log.flush = flush
    with WireClient(srv.port) as c:
        r = join(c, "f", "m", ["t"])
        assert r.error_code == E.not_coordinator
        assert describe(c, "f")[0].error_code == E.group_id_not_found
        assert ConsumerGroupMemberMetadataKey("f", "m") not in [x.key for x in _records(srv)]
        r = join(c, "f", "m", ["t"])  # the storage works again: the same join succeeds from scratch
        assert r.error_code == E.none and r.member_epoch == 1
        failures.append(OSError(28, "No space left on device"))
        assert commit(c, 9, "f", {"t": {0: 5}}, epoch=1, member="m") == {("t", 0): E.not_coordinator}
        assert fetch_offsets(c, 9, "f", {"t": [0]})[1][("t", 0)][0] == -1
        assert commit(c, 9, "f", {"t": {0: 6}}, epoch=1, member="m") == {("t", 0): E.none}
        assert fetch_offsets(c, 9, "f", {"t": [0]})[1][("t", 0)][0] == 6
        assert [x.value.offset for x in _records(srv) if isinstance(x.key, OffsetCommitKey)] == [6]


def test_restart_replays_groups_offsets_configs_and_expired_members(tmp_path):
    data = tmp_path / "data"
    with ServerThread(data, FAST) as s, WireClient(s.port) as c:
        wait_loaded(s)
        c.request(19, 7, create_topics(7, ("t", 4)))
        tid = topic_ids(c, "t")["t"]
        a = join(c, "r", "a", ["t"])
        heartbeat(c, "r", "a", 1, owned=assigned(a))
        join(c, "r-gone", "z", ["t"])
        assert commit(c, 9, "r", {"t": {0: 7, 3: 9}}, epoch=1, member="a") == {("t", 0): E.none, ("t", 3): E.none}
        cfgs = (sub(44, 1, "resources", "configs", name="consumer.heartbeat.interval.ms", config_operation=0, value="400"),)
        c.request(44, 1, req(44, 1, resources=(sub(44, 1, "resources", resource_type=32, resource_name="r", configs=cfgs),),
                             validate_only=False))
        deadline = time.monotonic() + 5
        while describe(c, "r-gone")[0].members:  # z stops heartbeating and times out
            heartbeat(c, "r", "a", 1, owned=assigned(a))
            assert time.monotonic() < deadline
            time.sleep(0.2)
        before = describe(c, "r", "r-gone")
    with ServerThread(data, FAST) as s, WireClient(s.port) as c:
        wait_loaded(s)
        after = describe(c, "r", "r-gone")
        assert after == before
        assert after[0].members[0].member_epoch == 1 and after[1].members == ()
        assert fetch_offsets(c, 9, "r", {"t": [0, 3]})[1] == {("t", 0): (7, "m7", E.none), ("t", 3): (9, "m9", E.none)}
        steady = heartbeat(c, "r", "a", 1, owned={tid: (0, 1, 2, 3)})
        assert (steady.error_code, steady.member_epoch, steady.heartbeat_interval.total_seconds()) == (E.none, 1, 0.4)



def test_heartbeats_of_large_groups_run_on_the_worker_thread(tmp_path):
    """With group.coordinator.offload.min.members=1, a join that computes a new target for a
    group that has members runs handle() on the worker thread; the answers are the same."""
    settings = dict(FAST, **{"group.coordinator.offload.min.members": 1})
    with ServerThread(tmp_path / "data", settings) as s, WireClient(s.port) as c, WireClient(s.port) as other:
        wait_loaded(s)
        c.request(19, 7, create_topics(7, ("t", 4)))
        threads = []
        original = s.server.offload

        async def offload(fn, *args):
            threads.append(fn.__qualname__)
            return await original(fn, *args)

        s.server.offload = offload
        tid = topic_ids(c, "t")["t"]
        a = join(c, "big", "a", ["t"])
        assert threads == []  # a new group: nothing to offload
        b = join(c, "big", "b", ["t"])
        assert threads == ["GroupCoordinatorShard.handle"] and b.member_epoch == 2
        kept = assigned(heartbeat(c, "big", "a", 1, owned={tid: (0, 1, 2, 3)}))[tid]
        a = heartbeat(c, "big", "a", 1, owned={tid: kept})
        b = heartbeat(other, "big", "b", 2, owned={})
        assert a.member_epoch == 2 and sorted(kept + assigned(b)[tid]) == [0, 1, 2, 3]
        assert describe(other, "big")[0].group_state == "Stable"

"""The classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup / DescribeGroups)
through the real server, with kio-encoded requests over TCP. Parked joins and syncs are sent on
their own connection and read later, as a client blocked in JoinGroup would."""

import socket
import threading
import time

import pytest
from kio.schema.errors import ErrorCode as E
from rawreq import create_topics, ms, req, sub
from test_groups_api import commit, fetch_offsets, wait_loaded

from cohort.coordinator.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from cohort_testing import ServerThread, WireClient

SETTINGS = {"group.initial.rebalance.delay.ms": 300, "group.min.session.timeout.ms": 500}


@pytest.fixture
def srv(tmp_path):
    with ServerThread(tmp_path / "data", SETTINGS) as s:
        wait_loaded(s)
        with WireClient(s.port) as c:
            assert c.request(19, 7, create_topics(7, ("t", 4))).topics[0].error_code == E.none
        yield s


@pytest.fixture
def connect(srv):
    clients = []

    def open_one():
        clients.append(WireClient(srv.port))
        return clients[-1]

    yield open_one
    for c in clients:
        c.close()


META = encode_subscription(Subscription(("t",)))


def join_body(group, member, version=5, session=10_000, rebalance=10_000, protocols=(("range", META),), instance=None):
    ps = tuple(sub(11, version, "protocols", name=n, metadata=m) for n, m in protocols)
    return req(11, version, group_id=group, session_timeout=ms(session), rebalance_timeout=ms(rebalance),
               member_id=member, group_instance_id=instance, protocol_type="consumer", protocols=ps, reason=None)


def send(c, api_key, version, body):
    """Send without waiting; ``answer(c, ...)`` reads the response later."""
    c.send_raw(c.encode(api_key, version, body))
    return c._corr


def answer(c, api_key, version, corr, timeout=10):
    c.sock.settimeout(timeout)
    got, body = c.decode(api_key, version, c.recv_frame())
    assert got == corr
    return body


def pending(c, wait=0.3):
    """True if nothing has been answered on ``c`` within ``wait`` seconds (a parked request)."""
    c.sock.settimeout(wait)
    try:
        return not c.sock.recv(1, socket.MSG_PEEK)  # leaves the bytes for the real read
    except TimeoutError:
        return True
    finally:
        c.sock.settimeout(10)


def join(c, group, member="", version=5, **kw):
    return c.request(11, version, join_body(group, member, version, **kw))


def join_new(c, group, version=5, **kw):
    """MEMBER_ID_REQUIRED, then the join with the given id (parked or answered: the response)."""
    first = join(c, group, "", version, **kw)
    assert first.error_code == E.member_id_required and first.member_id
    return join(c, group, first.member_id, version, **kw)


def sync_body(group, generation, member, assignments=(), version=3):
    items = tuple(sub(14, version, "assignments", member_id=m, assignment=a) for m, a in assignments)
    return req(14, version, group_id=group, generation_id=generation, member_id=member, group_instance_id=None,
               protocol_type="consumer", protocol_name="range", assignments=items)


def heartbeat(c, group, generation, member, version=3):
    return c.request(12, version, req(12, version, group_id=group, generation_id=generation, member_id=member,
                                      group_instance_id=None)).error_code


def leave(c, group, *members, version=3):
    if version < 3:
        return c.request(13, version, req(13, version, group_id=group, member_id=members[0]))
    items = tuple(sub(13, version, "members", member_id=m, group_instance_id=None, reason="bye") for m in members)
    return c.request(13, version, req(13, version, group_id=group, members=items))


def describe(c, *groups, version=5):
    return c.request(15, version, req(15, version, groups=groups, include_authorized_operations=False)).groups


def listed(c, version=5, **kw):
    return {g.group_id: g for g in c.request(16, version, req(16, version, **kw)).groups}


ASSIGN_A = encode_assignment(Assignment((("t", (0, 1)),)))
ASSIGN_B = encode_assignment(Assignment((("t", (2, 3)),)))


def stable_pair(connect, group):
    """Two members in a Stable group (generation 2): A is the leader and assigned both."""
    a, b = connect(), connect()
    ja = join_new(a, group)
    assert (ja.error_code, ja.generation_id, ja.leader) == (E.none, 1, ja.member_id)
    assert a.request(14, 3, sync_body(group, 1, ja.member_id, [(ja.member_id, ASSIGN_A)])).error_code == E.none
    first = join(b, group)
    corr = send(b, 11, 5, join_body(group, first.member_id))
    assert pending(b)  # parked until the leader re-joins
    assert heartbeat(a, group, 1, ja.member_id) == E.rebalance_in_progress
    ja2 = join(a, group, ja.member_id)
    jb = answer(b, 11, 5, corr)
    assert (ja2.generation_id, jb.generation_id, ja2.leader, jb.leader) == (2, 2, ja.member_id, ja.member_id)
    return a, b, ja.member_id, jb.member_id


# --- tests ------------------------------------------------------------------------------------


def test_member_id_required_round_trip_and_single_member_generation(connect):
    c = connect()
    first = join(c, "solo")
    assert first.error_code == E.member_id_required and first.member_id.startswith("test-")
    joined = join(c, "solo", first.member_id)
    assert (joined.error_code, joined.generation_id, joined.protocol_name) == (E.none, 1, "range")
    assert joined.leader == joined.member_id == first.member_id
    assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, META)]
    # JoinGroup v3 (before KIP-394): a new member gets its id and joins in one step
    old = join(connect(), "solo-v3", "", version=3)
    assert (old.error_code, old.generation_id) == (E.none, 1) and old.member_id


def test_two_members_join_and_the_leader_syncs(connect):
    a, b = connect(), connect()
    ida = join(a, "pair").member_id
    idb = join(b, "pair").member_id
    corr_a = send(a, 11, 7, join_body("pair", ida, 7))
    corr_b = send(b, 11, 7, join_body("pair", idb, 7))  # parked together while the join phase is open
    ja, jb = answer(a, 11, 7, corr_a), answer(b, 11, 7, corr_b)
    assert ja.generation_id == jb.generation_id == 1 and ja.leader == jb.leader
    assert ja.protocol_type == "consumer" and ja.protocol_name == "range"
    leader, follower = (a, b) if ja.leader == ida else (b, a)
    lid, fid = (ida, idb) if ja.leader == ida else (idb, ida)
    assert sorted(m.member_id for m in (ja if ja.leader == ida else jb).members) == sorted([ida, idb])
    assert (ja if ja.leader != ida else jb).members == ()
    corr_f = send(follower, 14, 5, sync_body("pair", 1, fid, version=5))
    assert pending(follower)  # parked until the leader's SyncGroup
    synced = leader.request(14, 5, sync_body("pair", 1, lid, [(lid, ASSIGN_A), (fid, ASSIGN_B)], version=5))
    assert (synced.error_code, synced.assignment, synced.protocol_name) == (E.none, ASSIGN_A, "range")
    got = answer(follower, 14, 5, corr_f)
    assert (got.error_code, got.assignment) == (E.none, ASSIGN_B)
    assert heartbeat(leader, "pair", 1, lid) == heartbeat(follower, "pair", 1, fid, version=4) == E.none
    assert heartbeat(leader, "pair", 0, lid) == E.illegal_generation
    assert heartbeat(leader, "pair", 1, "nobody") == E.unknown_member_id


def test_parked_join_is_released_by_another_members_join_and_blocks_only_its_connection(connect):
    a, b = connect(), connect()
    ja = join_new(a, "park")
    assert a.request(14, 3, sync_body("park", 1, ja.member_id, [(ja.member_id, ASSIGN_A)])).error_code == E.none
    idb = join(b, "park").member_id
    corr = send(b, 11, 5, join_body("park", idb))
    corr_list = send(b, 16, 4, req(16, 4, states_filter=()))  # behind the parked join on its connection
    assert pending(b)
    other = connect()  # other connections are served meanwhile
    assert describe(other, "park")[0].group_state == "PreparingRebalance"
    assert heartbeat(a, "park", 1, ja.member_id) == E.rebalance_in_progress
    ja2 = join(a, "park", ja.member_id)
    jb = answer(b, 11, 5, corr)
    assert (jb.error_code, jb.generation_id, ja2.generation_id) == (E.none, 2, 2)
    states = [g.group_state for g in answer(b, 16, 4, corr_list).groups if g.group_id == "park"]
    assert states == ["CompletingRebalance"]


def test_join_timeout_removes_a_member_that_does_not_rejoin(connect):
    """The join phase ends at the rebalance timeout (a timer): the parked join is answered."""
    a, b = connect(), connect()
    ja = join_new(a, "slow", rebalance=600)
    assert a.request(14, 3, sync_body("slow", 1, ja.member_id, [(ja.member_id, ASSIGN_A)])).error_code == E.none
    idb = join(b, "slow", rebalance=600).member_id
    started = time.monotonic()
    jb = join(b, "slow", idb, rebalance=600)  # a never re-joins
    assert 0.4 < time.monotonic() - started < 5
    assert (jb.error_code, jb.generation_id, jb.leader) == (E.none, 2, idb)
    assert heartbeat(a, "slow", 1, ja.member_id) == E.unknown_member_id


def test_leave_rebalances_the_rest(connect):
    a, b, ida, idb = stable_pair(connect, "leave")
    corr_b = send(b, 14, 3, sync_body("leave", 2, idb))
    assert a.request(14, 3, sync_body("leave", 2, ida, [(ida, ASSIGN_A), (idb, ASSIGN_B)])).error_code == E.none
    assert answer(b, 14, 3, corr_b).assignment == ASSIGN_B
    left = leave(b, "leave", idb, "ghost")
    assert left.error_code == E.none
    assert [(m.member_id, m.error_code) for m in left.members] == [(idb, E.none), ("ghost", E.unknown_member_id)]
    assert heartbeat(a, "leave", 2, ida) == E.rebalance_in_progress
    alone = join(a, "leave", ida)
    assert (alone.generation_id, [m.member_id for m in alone.members]) == (3, [ida])
    assert a.request(14, 3, sync_body("leave", 3, ida, [(ida, ASSIGN_A)])).error_code == E.none
    assert leave(a, "leave", ida, version=1).error_code == E.none
    assert describe(a, "leave")[0].group_state == "Empty"


def test_describe_and_list_show_a_classic_group(connect):
    a, b, ida, idb = stable_pair(connect, "shown")
    d = connect()
    [g] = describe(d, "shown")
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        E.none, "CompletingRebalance", "consumer", "")
    assert sorted(m.member_id for m in g.members) == sorted([ida, idb])
    corr_b = send(b, 14, 3, sync_body("shown", 2, idb))
    a.request(14, 3, sync_body("shown", 2, ida, [(ida, ASSIGN_A), (idb, ASSIGN_B)]))
    answer(b, 14, 3, corr_b)
    for version in (0, 3, 5):
        [g] = describe(d, "shown", version=version)
        assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
        members = {m.member_id: (m.client_id, m.client_host, m.member_metadata, m.member_assignment) for m in g.members}
        assert members == {ida: ("test", "/127.0.0.1", META, ASSIGN_A), idb: ("test", "/127.0.0.1", META, ASSIGN_B)}
    unknown, blank = describe(d, "nope", "")
    assert (unknown.error_code, unknown.group_state) == (E.none, "Dead") and blank.error_code == E.invalid_group_id
    groups = listed(d, states_filter=(), types_filter=("classic",))
    assert (groups["shown"].protocol_type, groups["shown"].group_state, groups["shown"].group_type) == (
        "consumer", "Stable", "classic")
    assert "shown" in listed(d, version=4, states_filter=("Stable",)) and "shown" in listed(d, version=0)
    assert "shown" not in listed(d, states_filter=("Empty",), types_filter=())


def test_offset_commits_are_checked_against_the_generation(connect):
    a, b, ida, idb = stable_pair(connect, "offs")
    # CompletingRebalance: nobody commits
    assert commit(a, 9, "offs", {"t": {0: 5}}, epoch=2, member=ida) == {("t", 0): E.rebalance_in_progress}
    corr_b = send(b, 14, 3, sync_body("offs", 2, idb))
    a.request(14, 3, sync_body("offs", 2, ida, [(ida, ASSIGN_A), (idb, ASSIGN_B)]))
    answer(b, 14, 3, corr_b)
    assert commit(a, 9, "offs", {"t": {0: 5}}, epoch=2, member=ida) == {("t", 0): E.none}
    assert commit(b, 7, "offs", {"t": {2: 9}}, epoch=2, member=idb) == {("t", 2): E.none}
    assert commit(a, 9, "offs", {"t": {0: 6}}, epoch=1, member=ida) == {("t", 0): E.illegal_generation}
    assert commit(a, 9, "offs", {"t": {0: 6}}, epoch=2, member="ghost") == {("t", 0): E.unknown_member_id}
    assert commit(a, 9, "offs", {"t": {1: 6}}) == {("t", 1): E.unknown_member_id}  # manual commit on a live group
    error, found = fetch_offsets(a, 9, "offs", {"t": [0, 1, 2]})
    assert error == E.none
    assert {k: v[0] for k, v in found.items()} == {("t", 0): 5, ("t", 1): -1, ("t", 2): 9}
    # once every member left, the group is Empty and a manual (generation -1) commit is accepted
    leave(a, "offs", ida, idb)
    assert commit(a, 9, "offs", {"t": {1: 7}}) == {("t", 1): E.none}


def park_a_join(connect, group):
    """A stable one-member group and a second member's join parked on it: (a, b, a's join, b's correlation id)."""
    a, b = connect(), connect()
    ja = join_new(a, group)
    a.request(14, 3, sync_body(group, 1, ja.member_id, [(ja.member_id, ASSIGN_A)]))
    idb = join(b, group).member_id
    corr = send(b, 11, 5, join_body(group, idb))
    assert pending(b)
    return a, b, ja, corr


def test_parked_requests_are_answered_not_coordinator_on_unload(srv, connect):
    """The shutdown hook (`unload`) on a running server: every parked join gets NOT_COORDINATOR."""
    a, b, ja, corr = park_a_join(connect, "unload")
    srv.run(srv.server.group_coordinator.unload())
    got = answer(b, 11, 5, corr)
    assert got.error_code == E.not_coordinator
    assert join(a, "unload", ja.member_id).error_code == E.coordinator_load_in_progress


def _gate_fsync(srv, fail=False):
    """The coordinator log's next fsyncs wait for the returned event; then succeed, or fail once."""
    log = srv.server.broker.coordinator_log.log
    original, release = log.flush, threading.Event()
    failures = [OSError(5, "Input/output error")] if fail else []

    def flush():
        assert release.wait(10)
        if failures:
            raise failures.pop()
        original()

    log.flush = flush
    return release


def completing_pair(connect, group):
    """Two members after their first join (generation 1); returns (leader, follower) clients and ids."""
    a, b = connect(), connect()
    ida, idb = join(a, group).member_id, join(b, group).member_id
    corr_a, corr_b = send(a, 11, 5, join_body(group, ida)), send(b, 11, 5, join_body(group, idb))
    ja, jb = answer(a, 11, 5, corr_a), answer(b, 11, 5, corr_b)
    return ((a, ida), (b, idb)) if ja.leader == ida else ((b, idb), (a, ida))


@pytest.mark.parametrize("fsync_fails", [False, True])
def test_a_released_sync_waits_for_the_fsync_of_the_leaders_assignment(srv, connect, fsync_fails):
    """The follower's parked SyncGroup is completed by the leader's, whose GroupMetadata record
    must be durable first; if its fsync fails, both are answered NOT_COORDINATOR."""
    (leader, lid), (follower, fid) = completing_pair(connect, "durable")
    corr_f = send(follower, 14, 3, sync_body("durable", 1, fid))
    assert pending(follower)
    release = _gate_fsync(srv, fail=fsync_fails)
    corr_l = send(leader, 14, 3, sync_body("durable", 1, lid, [(lid, ASSIGN_A), (fid, ASSIGN_B)]))
    assert pending(leader) and pending(follower)  # both wait for the fsync
    release.set()
    got_l, got_f = answer(leader, 14, 3, corr_l), answer(follower, 14, 3, corr_f)
    if fsync_fails:
        assert got_l.error_code == got_f.error_code == E.not_coordinator
        # the group goes back to its last durable state (none): its members start over
        assert describe(connect(), "durable")[0].group_state == "Dead"
        assert heartbeat(leader, "durable", 1, lid) == E.unknown_member_id
        assert join_new(leader, "durable").error_code == E.none  # the storage works again
    else:
        assert (got_l.error_code, got_l.assignment, got_f.error_code, got_f.assignment) == (
            E.none, ASSIGN_A, E.none, ASSIGN_B)
        assert describe(connect(), "durable")[0].group_state == "Stable"


def test_stopping_the_server_answers_parked_joins_before_closing(srv, connect):
    """A real stop runs the shutdown hooks while connections are open: the parked join is answered."""
    a, b, _, corr = park_a_join(connect, "stopping")  # a stays open: its connection is the stable member's
    srv.stop()
    assert answer(b, 11, 5, corr).error_code == E.not_coordinator


def test_the_startup_line_counts_every_group_type(tmp_path, caplog):
    """Consumer groups, classic groups and groups that only have committed offsets."""
    import logging

    from test_groups_api import join as consumer_join

    data = tmp_path / "data"
    with ServerThread(data, SETTINGS) as s, WireClient(s.port) as c:
        wait_loaded(s)
        c.request(19, 7, create_topics(7, ("t", 2)))
        for group in ("kip848-a", "kip848-b"):
            assert consumer_join(c, group, group, ["t"]).error_code == E.none
        joined = join(c, "classic", "", version=3)
        synced = c.request(14, 3, sync_body("classic", joined.generation_id, joined.member_id,
                                            ((joined.member_id, b""),)))
        assert (joined.error_code, synced.error_code) == (E.none, E.none)  # stored once the leader syncs
        assert commit(c, 8, "offsets-only", {"t": {0: 5}}) == {("t", 0): E.none}
    caplog.set_level(logging.INFO, logger="cohort")
    with ServerThread(data, SETTINGS) as s:
        wait_loaded(s)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("group coordinator loaded")]
    assert line.endswith("; 4 groups: 2 consumer, 1 classic, 1 with committed offsets only"), line

"""Share groups over TCP with kio-encoded requests: ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch
(78), ShareAcknowledge (79) and AlterShareGroupOffsets (91), their sessions, errors and ACLs."""

import time

import pytest
from kio.schema.errors import ErrorCode as E
from rawreq import ms, req, sub
from test_acls import ANON, binding

from cohort.security import acls as A
from cohort_testing import ServerThread, WireClient


def heartbeat(c, group, member, epoch, topics=None, rack=None):
    return c.request(76, 1, req(76, 1, group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
                                subscribed_topic_names=None if topics is None else tuple(topics)))


def describe(c, *groups, ops=False):
    return c.request(77, 1, req(77, 1, group_ids=tuple(groups), include_authorized_operations=ops)).groups


def assigned(resp):
    return {tp.topic_id: tuple(tp.partitions) for tp in resp.assignment.topic_partitions}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerThread(str(tmp_path_factory.mktemp("share") / "data"),
                       {"offsets.topic.num.partitions": 3, "num.partitions": 2}).start()
    srv.call(lambda: srv.server.broker.create_topic("orders", 2))
    yield srv
    srv.stop()


def topic_id(srv, name):
    return srv.call(lambda: srv.server.broker.topics[name].id)


def test_api_versions_advertise_kafka_42s_share_group_versions(server):
    with WireClient(server.port) as c:
        keys = {k.api_key: (k.min_version, k.max_version) for k in c.request(18, 3, req(
            18, 3, client_software_name="t", client_software_version="1")).api_keys}
    assert keys[76] == (1, 1) and keys[77] == (1, 1)


def test_members_join_share_partitions_leave_and_are_described(server):
    orders = topic_id(server, "orders")
    with WireClient(server.port) as c:
        members = {}
        for i in range(3):
            r = heartbeat(c, "queue", f"member-{i}", 0, ["orders"], rack="r1" if i == 0 else None)
            assert r.error_code == E.none and r.member_id == f"member-{i}"
            assert r.heartbeat_interval == __import__("datetime").timedelta(seconds=5)
            members[f"member-{i}"] = r.member_epoch
        assert assigned(r) and set(assigned(r)) == {orders}  # partitions in the first response
        for member, epoch in members.items():
            members[member] = heartbeat(c, "queue", member, epoch).member_epoch
        (group,) = describe(c, "queue")
        assert (group.error_code, group.group_state, group.assignor_name) == (E.none, "Stable", "simple")
        assert group.group_epoch == group.assignment_epoch == 3
        owners = {}
        for m in group.members:
            assert m.client_id and m.client_host.startswith("/127.0.0.1")
            assert m.subscribed_topic_names == ("orders",)
            for tp in m.assignment.topic_partitions:
                assert (tp.topic_id, tp.topic_name) == (orders, "orders")
                for p in tp.partitions:
                    owners.setdefault(p, []).append(m.member_id)
        assert sorted(len(v) for v in owners.values()) == [2, 2]  # 3 members, 2 partitions: shared by 2
        assert {m.member_id: m.rack_id for m in group.members}["member-0"] == "r1"
        # listed as a share group, by type filter too
        listed = c.request(16, 5, req(16, 5, states_filter=(), types_filter=("share",))).groups
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed] == [
            ("queue", "share", "Stable", "share")]
        for member, epoch in members.items():
            r = heartbeat(c, "queue", member, -1)
            assert (r.error_code, r.member_epoch) == (E.none, -1)
        assert describe(c, "queue")[0].group_state == "Empty"
        deleted = c.request(42, 2, req(42, 2, groups_names=("queue",))).results
        assert [(d.group_id, d.error_code) for d in deleted] == [("queue", E.none)]
        assert describe(c, "queue")[0].error_code == E.group_id_not_found


def test_wire_errors(server):
    with WireClient(server.port) as c:
        assert heartbeat(c, "g1", "", 0, ["orders"]).error_code == E.invalid_request
        assert heartbeat(c, "g1", "m" * 37, 0, ["orders"]).error_code == E.invalid_request
        assert heartbeat(c, "g1", "m", 0, None).error_code == E.invalid_request
        assert heartbeat(c, "g1", "m", 5, ["orders"]).error_code == E.group_id_not_found
        # a consumer group's id is not a share group's
        c.request(68, 1, req(68, 1, group_id="cg", member_id="c", member_epoch=0, instance_id=None, rack_id=None,
                             rebalance_timeout=__import__("datetime").timedelta(seconds=30),
                             subscribed_topic_names=("orders",), subscribed_topic_regex=None, server_assignor=None,
                             topic_partitions=()))
        r = heartbeat(c, "cg", "m", 0, ["orders"])
        assert (r.error_code, r.error_message) == (E.group_id_not_found, "Group cg is not a share group.")
        assert describe(c, "cg")[0].error_code == E.group_id_not_found
        # and a share group's id answers the consumer group APIs with GROUP_ID_NOT_FOUND
        assert heartbeat(c, "sg", "m", 0, ["orders"]).error_code == E.none
        d = c.request(69, 0, req(69, 0, group_ids=("sg",), include_authorized_operations=False)).groups[0]
        assert d.error_code == E.group_id_not_found
        fetched = c.request(9, 8, req(9, 8, groups=(__import__("rawreq").sub(
            9, 8, "groups", group_id="sg", topics=None),), require_stable=False)).groups[0]
        assert fetched.error_code == E.group_id_not_found


@pytest.fixture
def secured(tmp_path):
    srv = ServerThread(str(tmp_path / "data"), {"authorizer.class.name": "cohort", "num.partitions": 1}).start()
    for name in ("t", "u"):
        srv.call(lambda name=name: srv.server.broker.create_topic(name))
    yield srv
    srv.stop()


def test_heartbeat_and_describe_need_kafkas_acls(secured):
    with WireClient(secured.port) as c:
        assert heartbeat(c, "g", "m", 0, ["t"]).error_code == E.group_authorization_failed
        assert describe(c, "g")[0].error_code == E.group_authorization_failed
    secured.call(lambda: secured.server.authorizer.create([
        binding(A.GROUP, "g", A.READ, principal=ANON), binding(A.TOPIC, "t", A.DESCRIBE, principal=ANON)]))
    with WireClient(secured.port) as c:
        assert heartbeat(c, "g", "m", 0, ["t", "u"]).error_code == E.topic_authorization_failed  # no DESCRIBE on u
        ok = heartbeat(c, "g", "m", 0, ["t"])
        assert ok.error_code == E.none and assigned(ok)
        (group,) = describe(c, "g", ops=True)  # READ implies DESCRIBE, as in Kafka
        assert group.error_code == E.none and [m.member_id for m in group.members] == ["m"]
        assert group.authorized_operations & (1 << A.READ) and not group.authorized_operations & (1 << A.DELETE)


def share_fetch(c, group, member, epoch, topic_id, acks=(), version=1, max_records=100):
    """One partition (0) of one topic; acks: ((first, last, type), ...)."""
    batches = tuple(sub(78, version, "topics", "partitions", "acknowledgement_batches", first_offset=a, last_offset=b,
                        acknowledge_types=(t,)) for a, b, t in acks)
    topics = (sub(78, version, "topics", topic_id=topic_id, partitions=(
        sub(78, version, "topics", "partitions", partition_index=0, acknowledgement_batches=batches),)),)
    return c.request(78, version, req(78, version, group_id=group, member_id=member, share_session_epoch=epoch,
                                      max_wait=ms(0), min_bytes=1, max_bytes=1 << 20, max_records=max_records,
                                      batch_size=max_records, share_acquire_mode=0, is_renew_ack=False,
                                      topics=topics, forgotten_topics_data=()))


def share_ack(c, group, member, epoch, topic_id, acks, version=1):
    batches = tuple(sub(79, version, "topics", "partitions", "acknowledgement_batches", first_offset=a, last_offset=b,
                        acknowledge_types=(t,)) for a, b, t in acks)
    topics = (sub(79, version, "topics", topic_id=topic_id, partitions=(
        sub(79, version, "topics", "partitions", partition_index=0, acknowledgement_batches=batches),)),)
    return c.request(79, version, req(79, version, group_id=group, member_id=member, share_session_epoch=epoch,
                                      is_renew_ack=False, topics=topics))


def acquired_ranges(resp):
    return [(r.first_offset, r.last_offset, r.delivery_count)
            for t in resp.responses for p in t.partitions for r in p.acquired_records]


def test_share_fetch_and_acknowledge_need_read_on_group_and_topic(secured):
    from cohort.protocol.records import build_batch

    tid = secured.call(lambda: secured.server.broker.topics["t"].id)
    secured.call(lambda: secured.server.broker.produce("t", 0, bytes(build_batch([(None, b"x")] * 3))))
    with WireClient(secured.port) as c:
        assert share_fetch(c, "g", "m", 0, tid).error_code == E.group_authorization_failed
        assert share_ack(c, "g", "m", 1, tid, [(0, 0, 1)]).error_code == E.group_authorization_failed
    secured.call(lambda: secured.server.authorizer.create([binding(A.GROUP, "g", A.READ, principal=ANON)]))
    with WireClient(secured.port) as c:
        r = share_fetch(c, "g", "m", 0, tid)
        assert r.error_code == E.none
        assert [p.error_code for t in r.responses for p in t.partitions] == [E.topic_authorization_failed]
    secured.call(lambda: secured.server.authorizer.create([binding(A.TOPIC, "t", A.READ, principal=ANON)]))
    with WireClient(secured.port) as c:
        r = share_fetch(c, "g", "m", 0, tid)  # latest (the default): nothing yet
        assert r.error_code == E.none and acquired_ranges(r) == []


def test_share_fetch_sessions_acquisition_and_acknowledgement_over_the_wire(server):
    from cohort.protocol.records import build_batch

    srv = server
    srv.call(lambda: srv.server.broker.create_topic("wire-q", 1))
    tid = topic_id(srv, "wire-q")
    group = "wire-g"
    with WireClient(srv.port) as c:
        cfg = c.request(44, 1, req(44, 1, resources=(sub(44, 1, "resources", resource_type=32, resource_name=group,
                                                          configs=(sub(44, 1, "resources", "configs",
                                                                       name="share.auto.offset.reset",
                                                                       config_operation=0, value="earliest"),)),),
                                   validate_only=False))
        assert cfg.responses[0].error_code == E.none
        srv.call(lambda: srv.server.broker.produce("wire-q", 0, bytes(build_batch([(None, b"%d" % i) for i in range(5)]))))
        # acknowledgements cannot open a session
        assert share_fetch(c, group, "m1", 0, tid, acks=[(0, 0, 1)]).error_code == E.invalid_request
        assert share_ack(c, group, "m1", 0, tid, [(0, 0, 1)]).error_code == E.invalid_share_session_epoch
        assert share_fetch(c, group, "m1", 3, tid).error_code == E.share_session_not_found
        r = share_fetch(c, group, "m1", 0, tid)
        assert acquired_ranges(r) == [(0, 4, 1)] and r.acquisition_lock_timeout.total_seconds() == 30
        assert share_fetch(c, group, "m1", 5, tid).error_code == E.invalid_share_session_epoch
        # another member gets nothing while m1 holds them; m1 accepts 0-1, releases 2-4
        assert acquired_ranges(share_fetch(c, group, "m2", 0, tid)) == []
        r = share_ack(c, group, "m2", 1, tid, [(0, 0, 1)])
        assert [p.error_code for t in r.responses for p in t.partitions] == [E.invalid_record_state]
        r = share_fetch(c, group, "m1", 1, tid, acks=[(0, 1, 1), (2, 4, 2)], max_records=2)
        (part,) = [p for t in r.responses for p in t.partitions]
        assert part.acknowledge_error_code == 0
        assert acquired_ranges(r) == [(2, 4, 2)]  # released, acquired again at once: delivery count 2
        # closing the session releases what m1 holds; m2 gets them
        r = share_ack(c, group, "m1", -1, tid, [(2, 2, 3)])  # reject 2 on the way out
        assert [p.error_code for t in r.responses for p in t.partitions] == [E.none]
        r = share_fetch(c, group, "m2", 2, tid)  # its acknowledge above moved its session to epoch 2
        assert acquired_ranges(r) == [(3, 4, 3)]
        assert share_fetch(c, group, "m1", 2, tid).error_code == E.share_session_not_found
    offsets = srv.call(lambda: srv.server.share_partitions.partitions)
    sp = next(sp for k, sp in offsets.items() if k.group_id == group)
    assert sp.start == 3  # 0-1 accepted, 2 rejected


def test_a_closed_connection_releases_what_its_session_held(server):
    from cohort.protocol.records import build_batch

    srv = server
    srv.call(lambda: srv.server.broker.create_topic("wire-close", 1))
    tid = topic_id(srv, "wire-close")
    group = "wire-close-g"
    srv.call(lambda: srv.server.broker.produce("wire-close", 0, bytes(build_batch([(None, b"x")] * 4))))
    with WireClient(srv.port) as c:
        r = c.request(91, 0, req(91, 0, group_id=group, topics=(sub(91, 0, "topics", topic_name="wire-close", partitions=(
            sub(91, 0, "topics", "partitions", partition_index=0, start_offset=0),)),)))
        assert r.error_code == E.none
    with WireClient(srv.port) as c:
        assert acquired_ranges(share_fetch(c, group, "gone", 0, tid)) == [(0, 3, 1)]
        # the lock is 30 s: only the disconnect can hand these over now
    with WireClient(srv.port) as c:
        deadline = time.monotonic() + 10
        epoch, got = 0, []
        while not got:
            assert time.monotonic() < deadline
            got = acquired_ranges(share_fetch(c, group, "next", epoch, tid))
            epoch += 1
        assert got == [(0, 3, 2)]

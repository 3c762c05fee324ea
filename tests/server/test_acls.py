"""ACLs: the StandardAuthorizer's rules as a unit, and over the wire (a PLAINTEXT listener, so
the principal is User:ANONYMOUS): CreateAcls validation, DescribeAcls and its denial,
SECURITY_DISABLED without an authorizer, and Kafka's errors from broker and group APIs."""

import pytest
from kio.schema.errors import ErrorCode

from cohort.security import acls as A
from cohort_testing import ServerThread, WireClient
from rawreq import metadata, ms, produce, req, sub
from cohort.protocol.records import build_batch

ANON = "User:ANONYMOUS"


def binding(rtype, name, op, permission=A.ALLOW, principal="User:alice", pattern=A.LITERAL, host="*"):
    return A.AclBinding(rtype, name, pattern, principal, host, op, permission)


def test_standard_authorizer_rules(tmp_path):
    auth = A.Authorizer(str(tmp_path), super_users="User:root;User:ops")
    auth.create([binding(A.TOPIC, "orders", A.READ), binding(A.TOPIC, "orders", A.WRITE, A.DENY),
                 binding(A.TOPIC, "logs-", A.ALL, pattern=A.PREFIXED), binding(A.TOPIC, "*", A.DESCRIBE, principal="User:*"),
                 binding(A.GROUP, "g", A.ALTER_CONFIGS), binding(A.TOPIC, "hosted", A.READ, host="10.0.0.1")])
    ok = lambda op, rtype, name, who="User:alice", host="127.0.0.1": auth.authorize(who, host, op, rtype, name)  # noqa: E731
    assert ok(A.READ, A.TOPIC, "orders")
    assert ok(A.DESCRIBE, A.TOPIC, "orders")  # implied by READ
    assert not ok(A.WRITE, A.TOPIC, "orders")  # deny wins
    assert ok(A.DELETE, A.TOPIC, "logs-app") and not ok(A.DELETE, A.TOPIC, "log")  # prefixed, ALL
    assert ok(A.DESCRIBE, A.TOPIC, "anything", who="User:bob")  # the * resource, the User:* principal
    assert not ok(A.READ, A.TOPIC, "anything", who="User:bob")  # ACLs exist on it (the * one): denied
    assert ok(A.DESCRIBE_CONFIGS, A.GROUP, "g") and not ok(A.READ, A.GROUP, "g")
    assert not ok(A.READ, A.TOPIC, "hosted") and ok(A.READ, A.TOPIC, "hosted", host="10.0.0.1")
    assert ok(A.ALTER, A.CLUSTER, A.CLUSTER_NAME, who="User:ops")  # super user
    assert not ok(A.READ, A.GROUP, "no-acls")  # no ACL on it, allow.everyone.if.no.acl.found=false
    assert A.Authorizer(str(tmp_path), allow_if_no_acl=True).authorize("User:x", "h", A.READ, A.GROUP, "no-acls")
    assert auth.authorize_any("User:alice", "h", A.WRITE, A.TOPIC)  # ALL on the logs- prefix
    assert not auth.authorize_any("User:bob", "h", A.WRITE, A.TOPIC)  # bob may only describe
    auth.create([binding(A.TOPIC, "x", A.WRITE, principal="User:bob")])
    assert auth.authorize_any("User:bob", "h", A.WRITE, A.TOPIC)
    removed = auth.delete([A.AclFilter(A.TOPIC, "orders", A.MATCH)])
    assert len(removed[0]) == 3  # literal orders READ and WRITE, and the * DESCRIBE
    assert A.Authorizer(str(tmp_path)).bindings == auth.bindings  # durable


@pytest.fixture
def secured(tmp_path):
    srv = ServerThread(str(tmp_path / "data"), {"authorizer.class.name": "cohort", "num.partitions": 1}).start()
    yield srv
    srv.stop()


def create_acls(c, *bindings):
    entries = tuple(sub(30, 3, "creations", resource_type=b.resource_type, resource_name=b.resource_name,
                        resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
                        permission_type=b.permission) for b in bindings)
    return [(r.error_code, r.error_message) for r in c.request(30, 3, req(30, 3, creations=entries)).results]


def test_acl_apis_and_denials_over_the_wire(secured):
    with WireClient(secured.port) as c:
        describe = req(29, 3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                       host_filter=None, operation=1, permission_type=1)
        assert c.request(29, 3, describe).error_code == ErrorCode.cluster_authorization_failed
        assert create_acls(c, binding(A.TOPIC, "t", A.READ, principal=ANON))[0][0] == ErrorCode.cluster_authorization_failed
    # the operator grants ANONYMOUS cluster ALTER/DESCRIBE out of band (a super user would do it over the wire)
    secured.call(lambda: secured.server.authorizer.create([binding(A.CLUSTER, A.CLUSTER_NAME, A.ALTER, principal=ANON),
                                                           binding(A.CLUSTER, A.CLUSTER_NAME, A.DESCRIBE, principal=ANON)]))
    for name in ("t", "u"):
        secured.call(lambda name=name: secured.server.broker.create_topic(name))
    with WireClient(secured.port) as c:
        results = create_acls(c, binding(A.TOPIC, "", A.READ, principal=ANON), binding(A.TOPIC, "t", A.READ, principal="ANONYMOUS"),
                              binding(A.TOPIC, "t", A.ANY_OP, principal=ANON), binding(A.TOPIC, "t", A.WRITE, principal=ANON))
        assert [code for code, _ in results] == [ErrorCode.invalid_request] * 3 + [ErrorCode.none]
        described = c.request(29, 3, describe)
        assert described.error_code == ErrorCode.none
        assert {(r.resource_type, r.resource_name, len(r.acls)) for r in described.resources} == {
            (A.CLUSTER, A.CLUSTER_NAME, 2), (A.TOPIC, "t", 1)}
        # WRITE on t but not on u; no DESCRIBE on u either
        meta = c.request(3, 12, metadata(12, names=["t", "u"]))
        assert [(t.name, t.error_code) for t in meta.topics] == [("t", ErrorCode.none), ("u", ErrorCode.topic_authorization_failed)]
        everything = c.request(3, 12, metadata(12))
        assert [t.name for t in everything.topics] == ["t"]  # "all topics" leaves out what may not be described
        missing = c.request(3, 12, metadata(12, names=["v"], auto=True))
        assert missing.topics[0].error_code == ErrorCode.topic_authorization_failed  # no DESCRIBE, so no CREATE either
        ok = c.request(0, 9, produce(9, "t", 0, build_batch([(None, b"x")])))
        assert ok.responses[0].partition_responses[0].error_code == ErrorCode.none
        denied = c.request(0, 9, produce(9, "u", 0, build_batch([(None, b"x")])))
        assert denied.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
        hb = c.request(68, 0, req(68, 0, group_id="g", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
                                  rebalance_timeout=ms(30000), subscribed_topic_names=("t",), server_assignor=None,
                                  topic_partitions=()))
        assert hb.error_code == ErrorCode.group_authorization_failed
        join = c.request(11, 5, req(11, 5, group_id="g", session_timeout=ms(10000), rebalance_timeout=ms(10000),
                                    member_id="", group_instance_id=None, protocol_type="consumer", protocols=()))
        assert join.error_code == ErrorCode.group_authorization_failed
        fc = c.request(10, 4, req(10, 4, key_type=0, coordinator_keys=("g",)))
        assert fc.coordinators[0].error_code == ErrorCode.group_authorization_failed
        listed = c.request(16, 4, req(16, 4, states_filter=()))
        assert listed.error_code == ErrorCode.none


def test_acl_apis_without_an_authorizer(tmp_path):
    srv = ServerThread(str(tmp_path / "data")).start()
    try:
        with WireClient(srv.port) as c:
            r = c.request(29, 3, req(29, 3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                     principal_filter=None, host_filter=None, operation=1, permission_type=1))
            assert r.error_code == ErrorCode.security_disabled
            assert create_acls(c, binding(A.TOPIC, "t", A.READ))[0][0] == ErrorCode.security_disabled
    finally:
        srv.stop()


def test_offset_commit_needs_read_on_each_topic(secured):
    """Kafka's OffsetCommit: READ on the group, then READ on each topic; a topic without it gets
    TOPIC_AUTHORIZATION_FAILED on each of its partitions while the others are committed."""
    for name in ("t", "u"):
        secured.call(lambda name=name: secured.server.broker.create_topic(name, 2))
    secured.call(lambda: secured.server.authorizer.create([binding(A.GROUP, "g", A.READ, principal=ANON),
                                                           binding(A.TOPIC, "t", A.READ, principal=ANON)]))

    def commit(version, *names):
        topics = tuple(sub(8, version, "topics", name=n, partitions=tuple(
            sub(8, version, "topics", "partitions", partition_index=p, committed_offset=7, committed_leader_epoch=-1,
                committed_metadata="") for p in (0, 1))) for n in names)
        body = req(8, version, group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                   retention_time_ms=-1, topics=topics)
        return [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in c.request(8, version, body).topics]

    with WireClient(secured.port) as c:
        for version in (7, 9):
            assert commit(version, "u", "t") == [
                ("u", [(0, ErrorCode.topic_authorization_failed), (1, ErrorCode.topic_authorization_failed)]),
                ("t", [(0, ErrorCode.none), (1, ErrorCode.none)])]
    committed = secured.call(lambda: dict(secured.server.group_coordinator.shard_for("g").state.offsets.get("g")))
    assert {key: value.offset for key, value in committed.items()} == {("t", 0): 7, ("t", 1): 7}


def test_alter_configs_needs_alter_configs_on_the_resource(secured):
    """AlterConfigs (33): ALTER_CONFIGS on the topic, on the cluster for the broker resource."""
    secured.call(lambda: secured.server.broker.create_topic("cfg"))
    secured.call(lambda: secured.server.broker.create_topic("other"))
    secured.call(lambda: secured.server.authorizer.create([binding(A.TOPIC, "cfg", A.ALTER_CONFIGS, principal=ANON)]))

    def alter(rtype, name):
        cfg = (sub(33, 2, "resources", "configs", name="retention.ms" if rtype == 2 else "background.threads", value="9000"),)
        res = sub(33, 2, "resources", resource_type=rtype, resource_name=name, configs=cfg)
        return c.request(33, 2, req(33, 2, resources=(res,), validate_only=False)).responses[0].error_code

    with WireClient(secured.port) as c:
        assert alter(2, "cfg") == ErrorCode.none
        assert alter(2, "other") == ErrorCode.topic_authorization_failed
        assert alter(4, "1") == ErrorCode.cluster_authorization_failed
    assert secured.call(lambda: secured.server.broker.topics["cfg"].configs) == {"retention.ms": "9000"}
    assert secured.call(lambda: secured.server.broker.topics["other"].configs) == {}

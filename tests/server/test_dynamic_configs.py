"""Dynamic broker configs over the wire: IncrementalAlterConfigs on the broker resource (this
node's id, or "" for cluster-wide defaults), applied at once, persisted across restarts, and
described with Kafka's sources and synonyms; read-only settings refused."""

import socket
import time

import pytest
from kio.schema.errors import ErrorCode

from cohort.protocol.records import build_batch
from cohort_testing import ServerThread, WireClient
from rawreq import ms, produce, req, sub

BROKER = 4
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def server(tmp_path):
    srv = ServerThread(str(tmp_path / "data"), {"log.retention.bytes": 5000}).start()
    yield srv
    srv.stop()


def alter(c, name, *ops, validate_only=False, resource_type=BROKER):
    entries = tuple(sub(44, 1, "resources", "configs", name=k, config_operation=op, value=v) for k, op, v in ops)
    res = sub(44, 1, "resources", resource_type=resource_type, resource_name=name, configs=entries)
    r = c.request(44, 1, req(44, 1, resources=(res,), validate_only=validate_only)).responses[0]
    return r.error_code, r.error_message


def describe(c, name, keys=None, resource_type=BROKER):
    res = sub(32, 4, "resources", resource_type=resource_type, resource_name=name, configuration_keys=keys)
    r = c.request(32, 4, req(32, 4, resources=(res,), include_synonyms=True, include_documentation=False)).results[0]
    assert r.error_code == ErrorCode.none, r.error_message
    return {e.name: e for e in r.configs}


def create_topic(c, name):
    t = sub(19, 7, "topics", name=name, num_partitions=1, replication_factor=-1, assignments=(), configs=())
    assert c.request(19, 7, req(19, 7, topics=(t,), timeout=ms(1000), validate_only=False)).topics[0].error_code == ErrorCode.none


def test_sources_and_read_only(server):
    with WireClient(server.port) as c:
        got = describe(c, "1", ["log.retention.ms", "log.retention.bytes", "node.id"])
        assert (got["log.retention.ms"].config_source, got["log.retention.ms"].read_only) == (DEFAULT, False)
        assert got["log.retention.bytes"].config_source == STATIC and got["log.retention.bytes"].value == "5000"
        assert [(s.value, s.source) for s in got["log.retention.bytes"].synonyms] == [("5000", STATIC), ("-1", DEFAULT)]
        assert got["node.id"].read_only
        error, message = alter(c, "1", ("node.id", SET, "7"))
        assert error == ErrorCode.invalid_config and message == "Cannot update these configs dynamically: Set(node.id)"
        assert alter(c, "1", ("no.such.setting", SET, "1"))[0] == ErrorCode.invalid_config
        assert alter(c, "1", ("log.retention.ms", SET, "soon"))[0] == ErrorCode.invalid_config
        assert alter(c, "1", ("log.cleanup.policy", SET, "shred"))[0] == ErrorCode.invalid_config
        assert alter(c, "1", ("log.retention.ms", APPEND, "1"))[0] == ErrorCode.invalid_config
        assert alter(c, "9", ("log.retention.ms", SET, "1"))[0] == ErrorCode.invalid_request
        assert alter(c, "1", ("log.retention.ms", SET, "1000"), validate_only=True) == (ErrorCode.none, None)
        assert describe(c, "1", ["log.retention.ms"])["log.retention.ms"].config_source == DEFAULT  # nothing changed


def test_changes_apply_at_once_and_persist(tmp_path):
    srv = ServerThread(str(tmp_path / "data")).start()
    try:
        with WireClient(srv.port) as c:
            create_topic(c, "live")
            # the cluster-wide default, then this broker's own value above it
            assert alter(c, "", ("log.retention.ms", SET, "60000"), ("message.max.bytes", SET, "300")) == (ErrorCode.none, None)
            assert alter(c, "1", ("log.retention.ms", SET, "1000")) == (ErrorCode.none, None)
            got = describe(c, "1", ["log.retention.ms", "message.max.bytes"])
            assert (got["log.retention.ms"].value, got["log.retention.ms"].config_source) == ("1000", DYNAMIC_BROKER)
            assert [(s.value, s.source) for s in got["log.retention.ms"].synonyms] == [
                ("1000", DYNAMIC_BROKER), ("60000", DYNAMIC_DEFAULT), ("604800000", DEFAULT)]
            assert set(describe(c, "")) == {"log.retention.ms", "message.max.bytes"}  # the default resource: its own only
            topic = describe(c, "live", ["retention.ms"], resource_type=2)["retention.ms"]
            assert (topic.value, topic.config_source) == ("1000", DYNAMIC_BROKER)
            assert srv.call(lambda: srv.server.broker.log("live", 0).retention_ms) == 1000  # the log's policy changed
            big = c.request(0, 9, produce(9, "live", 0, build_batch([(None, b"x" * 400)], timestamp=int(time.time() * 1000))))
            assert big.responses[0].partition_responses[0].error_code == ErrorCode.message_too_large
            assert alter(c, "", ("log.cleanup.policy", APPEND, "compact")) == (ErrorCode.none, None)
            assert describe(c, "1", ["log.cleanup.policy"])["log.cleanup.policy"].value == "delete,compact"
    finally:
        srv.stop()
    srv = ServerThread(str(tmp_path / "data")).start()  # restart: the dynamic values are back
    try:
        with WireClient(srv.port) as c:
            got = describe(c, "1", ["log.retention.ms", "message.max.bytes", "log.cleanup.policy"])
            assert (got["log.retention.ms"].value, got["message.max.bytes"].value) == ("1000", "300")
            assert got["log.cleanup.policy"].config_source == DYNAMIC_DEFAULT
            assert alter(c, "1", ("log.retention.ms", DELETE, None)) == (ErrorCode.none, None)
            assert describe(c, "1", ["log.retention.ms"])["log.retention.ms"].value == "60000"  # the default shows again
            assert srv.call(lambda: srv.server.broker.log("live", 0).retention_ms) == 60000
    finally:
        srv.stop()


def test_connection_limit_changes_live(server):
    with WireClient(server.port) as c:
        assert alter(c, "1", ("max.connections.per.ip", SET, "2")) == (ErrorCode.none, None)
        with WireClient(server.port) as second:
            assert second.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1")).error_code == ErrorCode.none
            third = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            try:
                assert third.recv(1) == b""  # closed at once: over the new limit
            finally:
                third.close()
        assert alter(c, "1", ("max.connections.per.ip", DELETE, None)) == (ErrorCode.none, None)
        with WireClient(server.port) as again, WireClient(server.port) as more:
            for w in (again, more):
                assert w.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1")).error_code == ErrorCode.none


def legacy_alter(c, resources, validate_only=False, version=2):
    """AlterConfigs (33): resources is [(type, name, {key: value})]."""
    entries = tuple(sub(33, version, "resources", resource_type=t, resource_name=n, configs=tuple(
        sub(33, version, "resources", "configs", name=k, value=v) for k, v in cfgs.items())) for t, n, cfgs in resources)
    r = c.request(33, version, req(33, version, resources=entries, validate_only=validate_only))
    return [(x.error_code, x.error_message) for x in r.responses]


def test_kafka_dynamic_broker_settings_cohort_does_not_use_are_kept_and_described(tmp_path):
    """background.threads and its kind: accepted, validated as Kafka types them, persisted and
    described as DYNAMIC_BROKER_CONFIG; names Kafka does not have stay refused."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    data = str(tmp_path / "data")
    with ServerThread(data) as srv:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry("background.threads", "9", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)
        with WireClient(srv.port) as c:
            assert alter(c, "1", ("background.threads", SET, "nine"))[0] == ErrorCode.invalid_config
            assert alter(c, "1", ("background.threads", SET, "0"))[0] == ErrorCode.invalid_config
            assert alter(c, "1", ("background.thread", SET, "9"))[0] == ErrorCode.invalid_config  # not Kafka's
            assert alter(c, "", ("ssl.cipher.suite", SET, "x"))[0] == ErrorCode.invalid_config
            error, message = alter(c, "", ("ssl.protocol", SET, "TLSv1.3"))  # per-broker only, as in Kafka
            assert error == ErrorCode.invalid_request and "broker id must be specified" in message
            assert alter(c, "", ("num.io.threads", SET, "16")) == (ErrorCode.none, None)
            assert alter(c, "1", ("log.cleaner.threads", SET, "2"), validate_only=True) == (ErrorCode.none, None)
            got = describe(c, "1")
            assert (got["background.threads"].value, got["background.threads"].config_source) == ("9", DYNAMIC_BROKER)
            assert (got["num.io.threads"].value, got["num.io.threads"].config_source) == ("16", DYNAMIC_DEFAULT)
            assert "log.cleaner.threads" not in got  # validate_only changed nothing
            assert set(describe(c, "")) == {"num.io.threads"}
    with ServerThread(data) as srv:  # persisted
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
        (entries,) = [f.result(10) for f in described.values()]
        assert entries["background.threads"].value == "9"
        assert entries["background.threads"].source == ck_source("DYNAMIC_BROKER_CONFIG")
        assert entries["num.io.threads"].source == ck_source("DYNAMIC_DEFAULT_BROKER_CONFIG")


def ck_source(name):
    from confluent_kafka.admin import ConfigSource
    return ConfigSource[name].value


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_the_whole_set_as_kafka_does(tmp_path):
    """confluent-kafka's alter_configs (KIP-133's AlterConfigs): the settings not named go back to
    their defaults, on a topic and on the broker; validate_only changes nothing."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    with ServerThread(str(tmp_path / "data")) as srv:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic("legacy", 1, config={"retention.ms": "1000", "cleanup.policy": "compact"})])[
            "legacy"].result(10)

        def topic_configs():
            res = ConfigResource(ConfigResource.Type.TOPIC, "legacy")
            return admin.describe_configs([res])[res].result(10)

        res = ConfigResource(ConfigResource.Type.TOPIC, "legacy", set_config={"retention.ms": "5000"})
        admin.alter_configs([res], validate_only=True)[res].result(10)
        assert topic_configs()["cleanup.policy"].value == "compact"
        admin.alter_configs([res])[res].result(10)
        got = topic_configs()
        assert got["retention.ms"].value == "5000" and got["retention.ms"].source == ck_source("DYNAMIC_TOPIC_CONFIG")
        assert got["cleanup.policy"].value == "delete" and got["cleanup.policy"].source == ck_source("DEFAULT_CONFIG")
        bad = ConfigResource(ConfigResource.Type.TOPIC, "legacy", set_config={"retention.ms": "soon"})
        with pytest.raises(Exception, match="INVALID_CONFIG|retention.ms"):
            admin.alter_configs([bad])[bad].result(10)
        assert topic_configs()["retention.ms"].value == "5000"  # a refused alter changes nothing

        broker = ConfigResource(ConfigResource.Type.BROKER, "1",
                                set_config={"background.threads": "9", "max.connections": "500"})
        admin.alter_configs([broker])[broker].result(10)
        broker = ConfigResource(ConfigResource.Type.BROKER, "1", set_config={"background.threads": "4"})
        admin.alter_configs([broker])[broker].result(10)
        got = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
        (got,) = [f.result(10) for f in got.values()]
        assert got["background.threads"].value == "4"
        assert got["max.connections"].source == ck_source("DEFAULT_CONFIG")  # not named: back to its default
        with WireClient(srv.port) as c:
            assert legacy_alter(c, [(2, "missing", {"retention.ms": "1"})])[0][0] == ErrorCode.unknown_topic_or_partition
            assert legacy_alter(c, [(2, "legacy", {"retention.ms": None})]) == [
                (ErrorCode.invalid_request, "Null value not supported for : retention.ms")]
            twice = legacy_alter(c, [(2, "legacy", {"retention.ms": "1"}), (2, "legacy", {"retention.ms": "2"})])
            assert [e for e, _ in twice] == [ErrorCode.invalid_request] * 2
            assert legacy_alter(c, [(BROKER, "1", {"node.id": "3"})])[0][0] == ErrorCode.invalid_config
            assert legacy_alter(c, [(8, "some-logger", {"a": "DEBUG"})])[0][0] == ErrorCode.invalid_request
            for version in (0, 1):
                assert legacy_alter(c, [(2, "legacy", {"retention.ms": "7000"})], version=version) == [(ErrorCode.none, None)]
        assert topic_configs()["retention.ms"].value == "7000"

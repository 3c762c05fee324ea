"""DescribeConfigs / IncrementalAlterConfigs over the wire, and the resource-type seam."""

import pytest
from kio.schema.errors import ErrorCode

from cohort.broker import BrokerError
from cohort.server.configs import GROUP, GROUP_CONFIG, ConfigEntry
from cohort_testing import WireClient
from rawreq import create_topics, req, sub


def describe(c, rtype, name, keys=None, version=4):
    res = sub(32, version, "resources", resource_type=rtype, resource_name=name, configuration_keys=keys)
    r = c.request(32, version, req(32, version, resources=(res,), include_synonyms=False, include_documentation=False)).results[0]
    return r.error_code, {e.name: (e.value, e.config_source) for e in r.configs}


def alter(c, rtype, name, ops, validate_only=False):
    cfgs = tuple(sub(44, 1, "resources", "configs", name=k, config_operation=op, value=v) for k, op, v in ops)
    res = sub(44, 1, "resources", resource_type=rtype, resource_name=name, configs=cfgs)
    return c.request(44, 1, req(44, 1, resources=(res,), validate_only=validate_only)).responses[0].error_code


def test_topic_configs_describe_and_alter(server):
    with WireClient(server.port) as c:
        c.request(19, 7, create_topics(7, ("cfg-topic", 1, {"retention.ms": "1000"})))
        err, cfgs = describe(c, 2, "cfg-topic")
        assert err == ErrorCode.none
        assert cfgs["retention.ms"] == ("1000", 1) and cfgs["cleanup.policy"] == ("delete", 5)
        assert cfgs["max.message.bytes"] == ("1048588", 5)  # message.max.bytes, not set: Kafka's DEFAULT_CONFIG
        assert alter(c, 2, "cfg-topic", [("retention.ms", 0, "5000"), ("cleanup.policy", 2, "compact")]) == ErrorCode.none
        err, cfgs = describe(c, 2, "cfg-topic", keys=("retention.ms", "cleanup.policy"))
        assert cfgs == {"retention.ms": ("5000", 1), "cleanup.policy": ("delete,compact", 1)}
        assert alter(c, 2, "cfg-topic", [("retention.ms", 1, None)]) == ErrorCode.none
        assert describe(c, 2, "cfg-topic", keys=("retention.ms",))[1] == {"retention.ms": ("604800000", 5)}
        assert alter(c, 2, "cfg-topic", [("segment.bytes", 0, "12")]) == ErrorCode.invalid_config
        assert alter(c, 2, "cfg-topic", [("made.up", 0, "1")]) == ErrorCode.invalid_config
        assert alter(c, 2, "cfg-topic", [("retention.ms", 0, "7")], validate_only=True) == ErrorCode.none
        assert describe(c, 2, "cfg-topic", keys=("retention.ms",))[1]["retention.ms"][0] == "604800000"
        assert describe(c, 2, "no-such-topic")[0] == ErrorCode.unknown_topic_or_partition
        assert alter(c, 2, "no-such-topic", [("retention.ms", 0, "1")]) == ErrorCode.unknown_topic_or_partition


def test_broker_configs_that_kafka_keeps_static_are_read_only(server):
    with WireClient(server.port) as c:
        err, cfgs = describe(c, 4, "1", version=1)
        assert err == ErrorCode.none
        assert cfgs["num.partitions"] == ("2", 4) and cfgs["auto.create.topics.enable"] == ("true", 5)
        assert describe(c, 4, "7")[0] == ErrorCode.invalid_request
        # Kafka: "Cannot update these configs dynamically" (dynamic ones: tests/server/test_dynamic_configs.py)
        assert alter(c, 4, "1", [("num.partitions", 0, "3")]) == ErrorCode.invalid_config


def test_group_resources_plug_in(server):
    with WireClient(server.port) as c:
        assert describe(c, GROUP, "g1")[0] == ErrorCode.invalid_request  # nobody serves GROUP yet

    class Groups:
        def __init__(self):
            self.values = {"consumer.session.timeout.ms": "45000"}

        def describe(self, name):
            return [ConfigEntry(k, v, GROUP_CONFIG) for k, v in self.values.items()]

        async def alter(self, name, ops, validate_only):
            for key, op, value in ops:
                if key not in self.values:
                    raise BrokerError(40, f"unknown group config {key}")
                if not validate_only:
                    self.values[key] = value

    server.call(lambda: server.server.config_resources.__setitem__(GROUP, Groups()))
    try:
        with WireClient(server.port) as c:
            assert alter(c, GROUP, "g1", [("consumer.session.timeout.ms", 0, "60000")]) == ErrorCode.none
            assert describe(c, GROUP, "g1")[1] == {"consumer.session.timeout.ms": ("60000", 8)}
            assert alter(c, GROUP, "g1", [("bogus", 0, "1")]) == ErrorCode.invalid_config
    finally:
        server.call(lambda: server.server.config_resources.pop(GROUP))


@pytest.mark.e2e
def test_confluent_admin_describe_and_alter_topic_config(server):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry as CkEntry, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("ck-cfg", 1, 1)])["ck-cfg"].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, "ck-cfg",
                         incremental_configs=[CkEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    desc = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "ck-cfg")])
    configs = list(desc.values())[0].result(10)
    assert configs["retention.ms"].value == "123456"

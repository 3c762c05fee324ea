"""`cohort topics|configs|produce|consume|groups` against a live broker, as an operator runs them:
each command in its own process, its output and exit status checked against what the cluster holds."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.index import load_request_schema

from cohort.protocol.entities import build, nested
from cohort_testing import ServerProcess, WireClient


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("tools")
    srv = ServerProcess(base / "data", "num.partitions=3", log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0


def cohort(broker, *argv, input=None, bootstrap=True):
    args = [sys.executable, "-m", "cohort", *argv]
    if bootstrap:
        args += ["--bootstrap-server", broker.bootstrap]
    return subprocess.run(args, capture_output=True, text=True, input=input, timeout=90)


def committed(broker, group):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def test_topics_round_trip(broker):
    made = cohort(broker, "topics", "create", "--topic", "tt", "--partitions", "2", "--config", "retention.ms=3600000")
    assert (made.returncode, made.stdout) == (0, "Created topic tt.\n")
    again = cohort(broker, "topics", "create", "--topic", "tt", "--partitions", "2")
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr == "cohort topics create: error: topic 'tt' already exists\n"
    assert cohort(broker, "topics", "create", "--topic", "tt", "--if-not-exists").returncode == 0
    assert "tt" in cohort(broker, "topics", "list").stdout.split()
    assert cohort(broker, "topics", "alter", "--topic", "tt", "--partitions", "4").returncode == 0
    shrink = cohort(broker, "topics", "alter", "--topic", "tt", "--partitions", "1")
    assert shrink.returncode == 1 and shrink.stderr.count("\n") == 1
    (desc,) = json.loads(cohort(broker, "topics", "describe", "--topic", "tt", "--output", "json").stdout)
    assert desc["partition_count"] == 4 and desc["configs"] == {"retention.ms": "3600000"}
    assert [p["leader"] for p in desc["partitions"]] == [1, 1, 1, 1]
    text = cohort(broker, "topics", "describe", "--topic", "tt").stdout
    assert text.startswith("Topic: tt\tTopicId: ") and "PartitionCount: 4\tReplicationFactor: 1" in text
    assert cohort(broker, "topics", "delete", "--topic", "tt").stdout == "Deleted topic tt.\n"
    gone = cohort(broker, "topics", "delete", "--topic", "tt")
    assert gone.returncode == 1 and "Unknown topic" in gone.stderr
    assert cohort(broker, "topics", "delete", "--topic", "tt", "--if-exists").returncode == 0
    assert "tt" not in json.loads(cohort(broker, "topics", "list", "--output", "json").stdout)


def test_console_producer_and_consumer_round_trip(broker):
    cohort(broker, "topics", "create", "--topic", "console", "--partitions", "1")
    sent = cohort(broker, "produce", "--topic", "console", "--property", "parse.key=true", "--property",
                  "key.separator=:", "--property", "parse.headers=true", "--property", "null.marker=<null>",
                  input="h1:a,h2:b\tk1:hello\n\tk2:world\n\tk3:<null>\n")
    assert (sent.returncode, sent.stdout, sent.stderr) == (0, "", "")
    bad = cohort(broker, "produce", "--topic", "console", "--property", "parse.key=true", input="no separator\n")
    assert bad.returncode == 2 and bad.stderr == "cohort produce: error: line 1: no key separator '\\t' in 'no separator'\n"
    read = cohort(broker, "consume", "--topic", "console", "--group", "console-g", "--from-beginning",
                  "--max-messages", "3", "--property", "print.key=true", "--property", "print.headers=true",
                  "--property", "print.offset=true")
    assert read.returncode == 0
    assert read.stdout.splitlines() == ["Offset:0\th1:a,h2:b\tk1\thello", "Offset:1\tNO_HEADERS\tk2\tworld",
                                        "Offset:2\tNO_HEADERS\tk3\tnull"]
    assert read.stderr == "Processed a total of 3 messages\n"  # and no client log lines
    assert committed(broker, "console-g") == {("console", 0): 3}
    rest = cohort(broker, "consume", "--topic", "console", "--group", "console-g", "--timeout-ms", "1500")
    assert (rest.stdout, rest.stderr) == ("", "Processed a total of 0 messages\n")
    one = cohort(broker, "consume", "--topic", "console", "--partition", "0", "--offset", "1", "--max-messages", "1")
    assert one.stdout == "world\n"


def test_console_producer_sends_bytes_that_are_not_utf8_as_they_are(broker):
    cohort(broker, "topics", "create", "--topic", "raw", "--partitions", "1")
    sent = subprocess.run([sys.executable, "-m", "cohort", "produce", "--bootstrap-server", broker.bootstrap,
                           "--topic", "raw"], input=b"plain\n\xff\xfe\x00binary\n", capture_output=True, timeout=90)
    assert (sent.returncode, sent.stderr) == (0, b"")
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "raw-reader",
                            "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("raw", 0, 0)])
        values, deadline = [], time.monotonic() + 20
        while len(values) < 2 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                values.append(m.value())
    finally:
        consumer.close()
    assert values == [b"plain", b"\xff\xfe\x00binary"]
    read = subprocess.run([sys.executable, "-m", "cohort", "consume", "--bootstrap-server", broker.bootstrap,
                           "--topic", "raw", "--from-beginning", "--max-messages", "2"], capture_output=True, timeout=90)
    assert read.stdout == b"plain\n\xff\xfe\x00binary\n"


@pytest.fixture
def live_group(broker):
    """A KIP-848 member of group `ops` on `ops-t` (3 partitions, 10 records each, 4 consumed from p0)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(3):
        for _ in range(10):
            producer.produce("ops-t", b"x", partition=p)
    assert producer.flush(20) == 0
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ops", "group.protocol": "consumer",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": "ops-client"})
    consumer.subscribe(["ops-t"])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert len(consumer.assignment()) == 3
    consumer.commit(offsets=[TopicPartition("ops-t", 0, 4), TopicPartition("ops-t", 1, 10)], asynchronous=False)
    yield consumer
    consumer.close()
    admin.delete_consumer_groups(["ops"])["ops"].exception(10)


def test_list_and_describe_a_live_group(broker, live_group):
    assert "ops" in cohort(broker, "groups", "list").stdout.split()
    table = cohort(broker, "groups", "list", "--state", "--type").stdout.splitlines()
    assert table[0].split() == ["GROUP", "TYPE", "STATE"]
    assert ["ops", "Consumer", "Stable"] in [line.split() for line in table]
    assert "ops" not in cohort(broker, "groups", "list", "--state", "Empty").stdout.split()
    assert "ops" not in cohort(broker, "groups", "list", "--type", "classic").stdout.split()
    bad = cohort(broker, "groups", "list", "--state", "Sleepy")
    assert bad.returncode == 2 and "Invalid state list 'Sleepy'" in bad.stderr

    members = cohort(broker, "groups", "describe", "--group", "ops", "--members", "--verbose").stdout.splitlines()
    assert members[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT",
                                  "TARGET-ASSIGNMENT"]
    assert members[1].split()[3:] == ["ops-client", "3", "ops-t(0,1,2)", "ops-t(0,1,2)"]
    state = cohort(broker, "groups", "describe", "--group", "ops", "--state").stdout.splitlines()
    assert state[1].split()[0] == "ops" and state[1].split()[-3:] == ["uniform", "Stable", "1"]
    offsets = json.loads(cohort(broker, "groups", "describe", "--group", "ops", "--output", "json").stdout)
    by_partition = {p["partition"]: (p["current_offset"], p["log_end_offset"], p["lag"]) for p in offsets["partitions"]}
    assert by_partition == {0: (4, 10, 6), 1: (10, 10, 0), 2: (None, 10, None)}
    assert offsets["members"][0]["target_assignment"] == [{"topic": "ops-t", "partition": p} for p in range(3)]

    missing = cohort(broker, "groups", "describe", "--group", "nosuch")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == "cohort groups describe: error: Consumer group 'nosuch' does not exist.\n"

    refused = cohort(broker, "groups", "reset-offsets", "--group", "ops", "--all-topics", "--to-earliest", "--execute")
    assert refused.returncode == 1
    assert ("Assignments can only be reset if the group 'ops' is inactive, but the current state is Stable."
            in refused.stderr)
    assert committed(broker, "ops") == {("ops-t", 0): 4, ("ops-t", 1): 10}


def _join(c, member, epoch, topics=None, owned=None):
    """One ConsumerGroupHeartbeat v1 of group `rec` (kio entities over a raw socket: no client acks for us)."""
    schema = load_request_schema(68, 1)
    parts = None if owned is None else tuple(
        build(nested(schema, "topic_partitions"), topic_id=t, partitions=tuple(ps)) for t, ps in owned.items())
    return c.request(68, 1, build(schema, group_id="rec", member_id=member, member_epoch=epoch, instance_id=None,
                                  rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
                                  subscribed_topic_names=topics, subscribed_topic_regex=None, server_assignor=None,
                                  topic_partitions=parts))


def test_kip848_states_that_librdkafka_cannot_name_are_shown_as_kafka_names_them(broker):
    assert cohort(broker, "topics", "create", "--topic", "rec-t", "--partitions", "4").returncode == 0
    with WireClient(broker.port) as c:
        first = _join(c, "a" * 22, 0, topics=("rec-t",), owned={})
        assert first.error_code == 0
        owned = {tp.topic_id: tuple(tp.partitions) for tp in first.assignment.topic_partitions}
        assert sum(map(len, owned.values())) == 4
        assert _join(c, "a" * 22, first.member_epoch, owned=owned).error_code == 0
        # A second member joins: "a" must give up two partitions and has not yet, so the group reconciles.
        assert _join(c, "b" * 22, 0, topics=("rec-t",), owned={}).error_code == 0

        listed = cohort(broker, "groups", "list", "--state").stdout.splitlines()
        assert ["rec", "Reconciling"] in [line.split() for line in listed]
        only = cohort(broker, "groups", "list", "--state", "Reconciling", "--output", "json")
        assert json.loads(only.stdout) == [{"group": "rec", "type": "consumer", "state": "Reconciling"}]
        assert "rec" not in cohort(broker, "groups", "list", "--state", "Stable,Assigning").stdout.split()
        state = cohort(broker, "groups", "describe", "--group", "rec", "--state").stdout.splitlines()
        assert state[1].split()[-2:] == ["Reconciling", "2"]
        refused = cohort(broker, "groups", "reset-offsets", "--group", "rec", "--all-topics", "--to-earliest",
                         "--execute")
        assert "inactive, but the current state is Reconciling." in refused.stderr
        for member in ("a" * 22, "b" * 22):
            assert _join(c, member, -1).error_code == 0  # leaves


def _new_offsets(result):
    assert result.returncode == 0, result.stderr
    return {(r["topic"], r["partition"]): r["new_offset"] for r in json.loads(result.stdout)}


def test_reset_offsets_scenarios(broker, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(2):
        for i in range(10):
            producer.produce("reset-t", b"x", partition=p, timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(20) == 0
    request = ConsumerGroupTopicPartitions("rs", [TopicPartition("reset-t", 0, 5), TopicPartition("reset-t", 1, 8)])
    admin.alter_consumer_group_offsets([request])["rs"].result(10)
    base = ("groups", "reset-offsets", "--group", "rs", "--output", "json")

    dry = cohort(broker, *base, "--topic", "reset-t", "--to-earliest")
    assert _new_offsets(dry) == {("reset-t", 0): 0, ("reset-t", 1): 0, ("reset-t", 2): 0}
    assert "No action will be performed" in dry.stderr
    assert committed(broker, "rs") == {("reset-t", 0): 5, ("reset-t", 1): 8}  # a dry run changes nothing

    assert _new_offsets(cohort(broker, *base, "--all-topics", "--shift-by", "4", "--dry-run")) == {
        ("reset-t", 0): 9, ("reset-t", 1): 10}  # 12 is clamped to the log end
    assert _new_offsets(cohort(broker, *base, "--topic", "reset-t:0", "--to-datetime",
                               "2023-11-14T22:13:25.000+00:00", "--dry-run")) == {("reset-t", 0): 5}
    assert _new_offsets(cohort(broker, *base, "--topic", "reset-t:1", "--by-duration", "P1D", "--dry-run")) == {
        ("reset-t", 1): 10}  # nothing that recent: the log end
    assert _new_offsets(cohort(broker, *base, "--topic", "reset-t:0,1", "--to-current", "--dry-run")) == {
        ("reset-t", 0): 5, ("reset-t", 1): 8}

    done = cohort(broker, *base, "--topic", "reset-t:0", "--to-offset", "50", "--execute")
    assert _new_offsets(done) == {("reset-t", 0): 10}
    assert "New offset (50) is higher than latest offset for topic partition reset-t-0" in done.stderr
    assert committed(broker, "rs") == {("reset-t", 0): 10, ("reset-t", 1): 8}

    exported = cohort(broker, "groups", "reset-offsets", "--group", "rs", "--all-topics", "--to-offset", "2", "--export")
    assert exported.stdout == "reset-t,0,2\nreset-t,1,2\n"
    plan = tmp_path / "plan.csv"
    plan.write_text(exported.stdout)
    assert _new_offsets(cohort(broker, *base, "--from-file", str(plan), "--execute")) == {
        ("reset-t", 0): 2, ("reset-t", 1): 2}
    assert committed(broker, "rs") == {("reset-t", 0): 2, ("reset-t", 1): 2}

    for argv, message in ((("--all-topics", "--by-duration", "1 day"), "expected an ISO-8601 duration"),
                          (("--all-topics", "--to-datetime", "yesterday"), "expected YYYY-MM-DDTHH:mm:SS.sss"),
                          (("--to-earliest",), "--topic T[:P,...] or --all-topics"),
                          (("--topic", "reset-t:x", "--to-earliest"), "partitions must be integers")):
        bad = cohort(broker, "groups", "reset-offsets", "--group", "rs", *argv)
        assert bad.returncode == 2 and message in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_delete_offsets_and_delete_groups(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(3):
        producer.produce("del-t", b"x", partition=p)
    assert producer.flush(20) == 0
    request = ConsumerGroupTopicPartitions("dg", [TopicPartition("del-t", p, 1) for p in range(3)])
    admin.alter_consumer_group_offsets([request])["dg"].result(10)
    deleted = cohort(broker, "groups", "delete-offsets", "--group", "dg", "--topic", "del-t:1,2")
    assert deleted.returncode == 0, deleted.stderr
    assert [line.split() for line in deleted.stdout.splitlines()] == [
        ["TOPIC", "PARTITION", "STATUS"], ["del-t", "1", "Successful"], ["del-t", "2", "Successful"]]
    assert committed(broker, "dg") == {("del-t", 0): 1}
    both = cohort(broker, "groups", "delete", "--group", "dg", "--group", "never-was")
    assert both.returncode == 1
    assert both.stdout == "Deletion of requested consumer groups ('dg') was successful.\n"
    assert "* Group 'never-was' could not be deleted due to: " in both.stderr
    assert "dg" not in cohort(broker, "groups", "list").stdout.split()


def test_configs_for_topics_groups_and_brokers(broker):
    cohort(broker, "topics", "create", "--topic", "cfg-t", "--partitions", "1")
    altered = cohort(broker, "configs", "alter", "--entity-type", "topics", "--entity-name", "cfg-t",
                     "--add-config", "cleanup.policy=[compact,delete],retention.ms=1000")
    assert (altered.returncode, altered.stdout) == (0, "Completed updating config for topic cfg-t.\n")
    shown = json.loads(cohort(broker, "configs", "describe", "--entity-type", "topics", "--entity-name", "cfg-t",
                              "--output", "json").stdout)
    assert {c["name"]: c["value"] for c in shown} == {"cleanup.policy": "compact,delete", "retention.ms": "1000"}
    cohort(broker, "configs", "alter", "--entity-type", "topics", "--entity-name", "cfg-t", "--delete-config",
           "retention.ms")
    text = cohort(broker, "configs", "describe", "--entity-type", "topics", "--entity-name", "cfg-t").stdout
    assert text == "Dynamic configs for topic cfg-t are:\n  cleanup.policy=compact,delete sensitive=false source=topic\n"

    assert cohort(broker, "configs", "alter", "--entity-type", "groups", "--entity-name", "cfg-g", "--add-config",
                  "consumer.session.timeout.ms=50000").returncode == 0
    assert "consumer.session.timeout.ms=50000 sensitive=false source=group" in cohort(
        broker, "configs", "describe", "--entity-type", "groups", "--entity-name", "cfg-g").stdout
    assert cohort(broker, "configs", "alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
                  "log.cleaner.backoff.ms=20000").returncode == 0
    everything = json.loads(cohort(broker, "configs", "describe", "--entity-type", "brokers", "--entity-name", "1",
                                   "--all", "--output", "json").stdout)
    by_name = {c["name"]: c for c in everything}
    assert by_name["log.cleaner.backoff.ms"]["source"] == "dynamic-broker"
    assert by_name["num.partitions"]["source"] == "static-broker"  # set with -o by the test's broker
    unknown = cohort(broker, "configs", "alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
                     "no.such=1")
    assert (unknown.returncode, unknown.stderr) == (1, "cohort configs alter: error: Unknown broker config 'no.such'\n")


def test_an_unreachable_cluster_is_one_line_and_no_client_logs(broker):
    for argv in (("topics", "list"), ("groups", "list"), ("configs", "describe", "--entity-type", "topics",
                                                           "--entity-name", "x")):
        out = subprocess.run([sys.executable, "-m", "cohort", *argv, "--bootstrap-server", "127.0.0.1:1",
                              "--timeout", "2"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and out.stdout == "", (argv, out)
        assert out.stderr.count("\n") == 1 and "%3|" not in out.stderr, out.stderr
        assert out.stderr.startswith(f"cohort {' '.join(argv[:2])}: error: "), out.stderr
    verbose = subprocess.run([sys.executable, "-m", "cohort", "groups", "list", "--bootstrap-server", "127.0.0.1:1",
                              "--timeout", "2", "--verbose"], capture_output=True, text=True, timeout=60)
    assert verbose.returncode == 1 and "Connection refused" in verbose.stderr  # librdkafka's lines, when asked


def test_command_config_reaches_the_client(broker, tmp_path):
    conf = tmp_path / "client.properties"
    conf.write_text("client.id=from-file\nsocket.timeout.ms=5000\n")
    out = cohort(broker, "topics", "list", "--command-config", str(conf))
    assert out.returncode == 0
    conf.write_text("no.such.client.setting=1\n")
    bad = cohort(broker, "topics", "list", "--command-config", str(conf))
    assert bad.returncode == 2 and "no.such.client.setting" in bad.stderr and bad.stderr.count("\n") == 1
    missing = cohort(broker, "topics", "list", "--command-config", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr

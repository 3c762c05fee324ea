"""`cohort groups describe`: the tables (pure) and a real run against `cohort serve`."""

from __future__ import annotations

import argparse
import json
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from cohort_testing import ServerProcess, ServerThread
from cohort.tooling import groups_cli
import dataclasses

from cohort.tooling.groups_cli import GroupView, Member, member_lags, partition_rows, render

VIEW = GroupView(
    "g", "STABLE", "lag",
    (Member("m-2", "/10.0.0.2", "c2", (("t", 2), ("t", 3))), Member("m-1", "/10.0.0.1", "c1", (("t", 0), ("t", 1)))),
    committed={("t", 0): 5, ("t", 1): 40, ("t", 3): 7, ("u", 0): 3},
    end_offsets={("t", 0): 100, ("t", 1): 40, ("t", 2): 9, ("t", 3): 10, ("u", 0): 4},
)


def test_partition_rows_follow_kafkas_describe():
    assert partition_rows(VIEW) == [
        ("g", "t", "0", "5", "100", "95", "m-1", "/10.0.0.1", "c1"),
        ("g", "t", "1", "40", "40", "0", "m-1", "/10.0.0.1", "c1"),
        ("g", "t", "2", "-", "9", "-", "m-2", "/10.0.0.2", "c2"),  # owned, never committed
        ("g", "t", "3", "7", "10", "3", "m-2", "/10.0.0.2", "c2"),
        ("g", "u", "0", "3", "4", "1", "-", "-", "-"),  # committed, owned by nobody
    ]


def test_member_lag_sums_committed_partitions():
    assert member_lags(VIEW) == {"m-1": 95, "m-2": 3}
    text = render(VIEW, with_lag=True)
    lines = text.splitlines()
    assert lines[0] == "Consumer group 'g' (STABLE, assignor lag, offset reset latest)"
    assert lines[2].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    header = lines.index(next(line for line in lines if line.startswith("GROUP") and "ASSIGNED-LAG" in line))
    assert [line.split() for line in lines[header + 1:header + 3]] == [
        ["g", "m-1", "/10.0.0.1", "c1", "2", "95"], ["g", "m-2", "/10.0.0.2", "c2", "2", "3"]]
    assert lines[-1] == "IMBALANCE (heaviest / mean assigned lag): 1.94"
    assert "ASSIGNED-LAG" not in render(VIEW, with_lag=False)


def test_member_lag_follows_the_groups_reset_policy_like_the_coordinator():
    # earliest: the never-committed t-2 counts its whole log; a commit below the log start resets too
    view = dataclasses.replace(VIEW, reset_earliest=True, start_offsets={("t", 2): 4, ("t", 0): 10})
    assert member_lags(view) == {"m-1": 90 + 0, "m-2": 5 + 3}
    assert partition_rows(view)[2][3:6] == ("-", "9", "-")  # the partition table stays Kafka's


def parse(argv):
    parser = argparse.ArgumentParser()
    groups_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


@pytest.mark.parametrize("argv, message", [
    (["groups", "describe", "--group", " ", "--bootstrap", "127.0.0.1:1"], "--group must not be empty"),
    (["groups", "describe", "--group", "g", "--bootstrap", "127.0.0.1:1", "--timeout", "0"], "--timeout must be positive"),
])
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    args = parse(argv)
    assert args.func(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"cohort groups describe: error: {message}\n"


def test_unreachable_broker_is_a_one_line_error(capsys):
    args = parse(["groups", "describe", "--group", "g", "--bootstrap", "127.0.0.1:1", "--timeout", "1"])
    assert args.func(args) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("cohort groups describe: error: ") and err.count("\n") == 1


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("tooling")
    srv = ServerProcess(base / "data", "group.consumer.heartbeat.interval.ms=300",
                        "group.consumer.min.heartbeat.interval.ms=100",
                        log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"


@pytest.mark.timeout(90)
def test_describe_a_live_group(server, capsys):
    bootstrap = server.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("tool-t", num_partitions=4, replication_factor=1)])["tool-t"].result(10)
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for p in range(4):
        for i in range(10 * (p + 1)):
            producer.produce("tool-t", value=b"x", partition=p)
    assert producer.flush(20) == 0
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "tool-g", "group.protocol": "consumer",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": "tool-c"})
    try:
        consumer.subscribe(["tool-t"])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 4 and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert len(consumer.assignment()) == 4
        consumer.commit(offsets=[ck.TopicPartition("tool-t", 0, 4), ck.TopicPartition("tool-t", 1, 20)],
                        asynchronous=False)
        args = parse(["groups", "describe", "--group", "tool-g", "--bootstrap", bootstrap, "--lag"])
        assert args.func(args) == 0
        out = capsys.readouterr().out
        res = ConfigResource(ConfigResource.Type.GROUP, "tool-g", incremental_configs=[
            ConfigEntry("consumer.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)
        assert args.func(args) == 0
        earliest = capsys.readouterr().out
    finally:
        consumer.close()
    assert "offset reset earliest" in earliest
    (member,) = [line.split() for line in earliest.splitlines() if line.startswith("tool-g ") and len(line.split()) == 6]
    assert member[3:] == ["tool-c", "4", str(6 + 30 + 40)]  # the uncommitted partitions count their whole log
    rows = [line.split() for line in out.splitlines() if line.startswith("tool-g ")]
    parts = {r[2]: r for r in rows if len(r) == 9}
    assert [parts[p][3:6] for p in "0123"] == [["4", "10", "6"], ["20", "20", "0"], ["-", "30", "-"], ["-", "40", "-"]]
    assert {r[8] for r in parts.values()} == {"tool-c"}
    (member,) = [r for r in rows if len(r) == 6]
    assert member[3:] == ["tool-c", "4", "6"]


@pytest.mark.parametrize("argv", [["describe", "--all-groups"], ["describe", "--all-groups", "--state"],
                                  ["describe", "--all-groups", "--output", "json"], ["delete", "--all-groups"]])
def test_all_groups_on_a_broker_without_groups_is_not_an_error(tmp_path, argv, capsys):
    """Kafka's tool prints nothing to describe and exits 0; librdkafka refuses an empty list."""
    with ServerThread(tmp_path / "data") as srv:
        args = parse(["groups", *argv, "--bootstrap", srv.bootstrap, "--timeout", "10"])
        assert args.func(args) == 0
    out, err = capsys.readouterr()
    if "json" in argv:
        assert json.loads(out) == [] and err == ""
    else:
        assert out == "" and err == "No consumer groups.\n"

"""`cohort share-groups` against a live broker with a real share consumer."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer, ShareConsumer

from cohort.cli import main
from cohort_testing import ServerThread


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerThread(str(tmp_path_factory.mktemp("share-cli") / "data"), {"num.partitions": 2}).start()
    yield srv
    srv.stop()


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_describe_reset_delete(server, capsys):
    b = ("--bootstrap-server", server.bootstrap)
    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"sg-{uuid.uuid4().hex[:6]}"
    server.call(lambda: server.server.broker.create_topic(topic, 2))
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(10):
        p.produce(topic, value=b"%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    del p
    # before any member: start both partitions at the earliest offset (the group is created)
    code, out, err = cli(capsys, "share-groups", "reset-offsets", *b, "--group", group, "--topic", topic,
                         "--to-earliest", "--execute")
    assert code == 0, err
    assert [line.split() for line in out.splitlines()[1:]] == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    code, out, _ = cli(capsys, "share-groups", "describe", *b, "--group", group, "--output", "json")
    assert json.loads(out) == [{"group": group, "topic": topic, "partition": 0, "start-offset": 0, "lag": 5},
                               {"group": group, "topic": topic, "partition": 1, "start-offset": 0, "lag": 5}]
    c = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        got, deadline = 0, time.monotonic() + 20
        while got < 10:
            assert time.monotonic() < deadline
            got += len([m for m in c.poll(0.5) or [] if m.error() is None])
        c.commit_sync()
        code, out, _ = cli(capsys, "share-groups", "list", *b, "--state")
        assert [group, "Stable"] in [line.split() for line in out.splitlines()]
        code, out, _ = cli(capsys, "share-groups", "describe", *b, "--group", group, "--members")
        (row,) = [line.split() for line in out.splitlines()[1:]]
        assert row[0] == group and row[4] == "2" and row[6] == f"{topic}:0,1"
        code, out, _ = cli(capsys, "share-groups", "describe", *b, "--group", group, "--state")
        assert out.splitlines()[1].split()[2:] == ["Stable", "1", "1", "1"]
        code, out, _ = cli(capsys, "share-groups", "describe", *b, "--group", group)
        assert [line.split()[3:] for line in out.splitlines()[1:]] == [["5", "0"], ["5", "0"]]
        # not while a member is in the group
        code, _, err = cli(capsys, "share-groups", "reset-offsets", *b, "--group", group, "--all-topics",
                           "--to-earliest", "--execute")
        assert code == 1 and "has active members" in err
        code, out, _ = cli(capsys, "share-groups", "delete", *b, "--group", group)
        assert code == 1 and "NON_EMPTY_GROUP" in out
    finally:
        c.close()
    code, out, err = cli(capsys, "share-groups", "delete-offsets", *b, "--group", group, "--topic", topic)
    assert code == 0 and out.split()[2:] == [topic, "Successful"], err
    code, out, _ = cli(capsys, "share-groups", "delete", *b, "--group", group)
    assert code == 0 and "was successful" in out
    code, out, _ = cli(capsys, "share-groups", "list", *b)
    assert group not in out.split()


def test_usage_errors_are_one_line(server, capsys):
    b = ("--bootstrap-server", server.bootstrap)
    code, _, err = cli(capsys, "share-groups", "describe", *b)
    assert code == 2 and err.strip() == "cohort share-groups describe: error: name the groups with --group, or use --all-groups"
    code, _, err = cli(capsys, "share-groups", "reset-offsets", *b, "--group", "g", "--all-topics", "--to-earliest")
    assert code == 2 and "--dry-run" in err and err.count("\n") == 1
    code, _, err = cli(capsys, "share-groups", "list", *b, "--state", "Bogus")
    assert code == 2 and "expected one of Empty, Stable, Dead" in err


def test_share_metrics(server):
    from prometheus_client import generate_latest

    from cohort.tooling.metrics import registry_for

    topic, group = f"m-{uuid.uuid4().hex[:6]}", f"sm-{uuid.uuid4().hex[:6]}"
    server.call(lambda: server.server.broker.create_topic(topic, 1))
    code = main(["share-groups", "reset-offsets", "--bootstrap-server", server.bootstrap, "--group", group,
                 "--topic", topic, "--to-earliest", "--execute"])
    assert code == 0
    p = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(7):
        p.produce(topic, value=b"x")
    assert p.flush(10) == 0
    del p
    c = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        got, deadline = [], time.monotonic() + 20
        while len(got) < 7:
            assert time.monotonic() < deadline
            got += [m for m in c.poll(0.5) or [] if m.error() is None]
        for m in got[:5]:
            c.acknowledge(m)
        c.commit_sync()
        text = server.call(lambda: generate_latest(registry_for(server.server)).decode())
        labels = f'group="{group}",partition="0",topic="{topic}"'
        assert f"cohort_share_records_acquired{{{labels}}} 2.0" in text
        assert f"cohort_share_records_in_flight{{{labels}}} 2.0" in text  # the first five are done: the start moved
        assert f"cohort_share_lag{{{labels}}} 2.0" in text
        assert 'cohort_share_groups{state="Stable"}' in text
        assert "cohort_share_sessions 1.0" in text
        assert float(text.split('cohort_share_acknowledgements_total{type="accept"} ')[1].split()[0]) >= 5
    finally:
        c.close()

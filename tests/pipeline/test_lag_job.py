"""`cohort pipeline lag` against a live `cohort serve`: Parquet rows, Burrow status, lag snapshots.

The job runs in-process on the suite's Spark session (`run_lag(argv, spark=...)`), twice: once
while the consumer is a member, once after it left, so the second run also shows that a restart
from the checkpoint continues with the next sample and repeats none.
"""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, OffsetSpec

from cohort.broker.lag_snapshot import SnapshotLagProvider, read_snapshot
from cohort.pipeline import burrow, codec, group_samples, layout
from cohort.pipeline.cli import run_lag

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def readings(cluster):
    """Committed, earliest and latest offsets per partition, read with AdminClient."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tps = [ck.TopicPartition(cluster.topic, p) for p in range(cluster.partitions)]
    req = ck.ConsumerGroupTopicPartitions(cluster.group, tps)
    committed = {tp.partition: (tp.offset if tp.offset >= 0 else None)
                 for tp in admin.list_consumer_group_offsets([req])[cluster.group].result(10).topic_partitions}
    ends = {}
    for name, spec in (("start", OffsetSpec.earliest()), ("end", OffsetSpec.latest())):
        for tp, f in admin.list_offsets({tp: spec for tp in tps}).items():
            ends.setdefault(tp.partition, {})[name] = f.result(10).offset
    return committed, ends


def rows(spark, out, table):
    return [r.asDict() for r in spark.read.parquet(str(out / table)).collect()]


@pytest.fixture(scope="module")
def runs(spark, live, tmp_path_factory):
    """Two `lag --once` runs; the readings the test takes itself at each."""
    cluster, consumer = live
    out = tmp_path_factory.mktemp("lag") / "out"
    first_readings = readings(cluster)
    assert run_lag(["--bootstrap", cluster.bootstrap, "--out", str(out), "--once"], spark=spark) == 0
    assignment = sorted(tp.partition for tp in consumer.assignment())
    member_id = consumer.memberid()
    consumer.close()
    second_readings = readings(cluster)
    assert run_lag(["--bootstrap", cluster.bootstrap, "--out", str(out), "--once"], spark=spark) == 0
    return out, first_readings, second_readings, assignment, member_id


def test_partition_rows_match_offset_fetch_and_list_offsets(spark, live, runs):
    cluster, _ = live
    out, (committed, offsets), _, assignment, member_id = runs
    assert assignment == list(range(cluster.partitions))
    mine = sorted((r for r in rows(spark, out, layout.PARTITIONS_TABLE)
                   if r["group_id"] == cluster.group and r["sample_seq"] == 1), key=lambda r: r["partition"])
    assert [r["partition"] for r in mine] == list(range(cluster.partitions))  # the unread topic is not the group's
    assert {r["topic"] for r in mine} == {cluster.topic}
    for r in mine:
        p = r["partition"]
        assert r["committed_offset"] == committed[p]
        assert (r["start_offset"], r["end_offset"]) == (offsets[p]["start"], offsets[p]["end"]) == (0, cluster.produced[p])
        assert r["lag"] == (None if committed[p] is None else cluster.produced[p] - committed[p])
        assert (r["group_state"], r["group_type"]) == ("Stable", "consumer")
        assert (r["member_id"], r["client_id"]) == (member_id, cluster.client_id)
        assert r["group_bucket"] == layout.group_bucket(cluster.group)
    assert mine[0]["lag"] >= 100  # the hot partition is far behind
    members = [r for r in rows(spark, out, layout.MEMBERS_TABLE) if r["group_id"] == cluster.group]
    assert [(m["sample_seq"], m["member_id"], m["client_id"], m["subscribed_topics"]) for m in members] == [
        (1, member_id, cluster.client_id, [cluster.topic])]  # nobody is left at the second sample
    member_lag = [r for r in rows(spark, out, "member_lag") if r["group_id"] == cluster.group]
    assert [(r["sample_seq"], r["member_id"], r["partitions"], r["total_lag"]) for r in member_lag] == [
        (1, member_id, cluster.partitions, sum(r["lag"] or 0 for r in mine))]
    table = spark.read.parquet(str(out / group_samples.TABLE)).where(f"group_id = '{cluster.group}'")
    grouped = sorted(codec.to_pylist(table.drop("date", "group_bucket").toArrow()), key=lambda r: r["sample_seq"])
    assert [(r["sample_seq"], r["members"], r["topics"]) for r in grouped] == [
        (1, [member_id], [cluster.topic]), (2, [], [cluster.topic])]
    first = grouped[0]
    assert (first["partitions"], first["lags"]) == ([r["partition"] for r in mine], [r["lag"] for r in mine])
    assert first["owners"] == [0] * cluster.partitions and first["member_topics"] == [(0, 0)]
    assert grouped[1]["owners"] == [None] * cluster.partitions


def test_restart_continues_with_the_next_sample_and_repeats_none(spark, live, runs):
    cluster, _ = live
    out, _, (committed, _), _, _ = runs
    table = rows(spark, out, layout.PARTITIONS_TABLE)
    keys = [(r["sample_seq"], r["group_id"], r["topic"], r["partition"]) for r in table]
    assert len(keys) == len(set(keys))
    assert sorted({r["sample_seq"] for r in table}) == [1, 2]
    second = [r for r in table if r["group_id"] == cluster.group and r["sample_seq"] == 2]
    assert {r["partition"]: r["committed_offset"] for r in second} == committed
    assert all(r["member_id"] is None and r["group_state"] == "Empty" for r in second)
    assert not (out / "_staging").exists() or not any((out / "_staging").iterdir())


def test_burrow_status_per_partition_and_group(spark, live, runs):
    cluster, _ = live
    out, (first, _), (second, _), _, _ = runs
    status = {(r["sample_seq"], r["partition"]): r for r in rows(spark, out, "status") if r["group_id"] == cluster.group}
    for p in range(cluster.partitions):
        lag = None if first[p] is None else cluster.produced[p] - first[p]
        one, two = status[(1, p)], status[(2, p)]
        assert (one["window_samples"], two["window_samples"]) == (1, 2)
        # one sample: nothing to compare, so OK; then the member left and nothing moved: STOP
        assert one["status"] == (None if lag is None else "OK")
        assert two["status"] == (None if lag is None else "OK" if lag == 0 else "STOP")
    assert status[(2, 0)]["status"] == "STOP"
    groups = {r["sample_seq"]: r for r in rows(spark, out, "group_status") if r["group_id"] == cluster.group}
    assert (groups[1]["status"], groups[2]["status"]) == ("OK", "ERR")
    assert groups[2]["partitions_stop"] >= 1
    assert groups[2]["total_lag"] == sum(cluster.produced[p] - c for p, c in second.items() if c is not None)


def test_lag_snapshot_is_read_by_the_broker_provider(live, runs):
    cluster, _ = live
    out, _, (committed, _), _, _ = runs
    snapshots = out / "snapshots"
    assert sorted(f.name for f in snapshots.iterdir()) == ["lag-00000000000000000001.json", "lag-00000000000000000002.json"]
    snap = read_snapshot(str(snapshots / "lag-00000000000000000002.json"))
    assert snap.sample_seq == 2
    expected = tuple(0 if committed[p] is None else cluster.produced[p] - committed[p] for p in range(cluster.partitions))
    assert snap.lags[(cluster.group, cluster.topic)] == expected
    provider = SnapshotLagProvider(str(snapshots), lambda topic_id: cluster.topic)
    assert provider.refresh() and provider.error is None
    assert provider.snapshot.sample_seq == 2
    assert provider(cluster.group, None, cluster.partitions) == list(expected)


def test_nothing_is_written_outside_out(runs):
    out = runs[0]
    assert sorted(p.name for p in out.iterdir() if p.name != "_staging") == [
        "_checkpoints", "group_samples", "group_status", "member_lag", "members", "partitions", "snapshots", "status"]


@pytest.mark.parametrize("argv, message", [
    (["--bootstrap", "nohost", "--out", "x"], "--bootstrap: expected HOST:PORT"),
    (["--bootstrap", "h:99999", "--out", "x"], "--bootstrap: expected HOST:PORT"),
    (["--bootstrap", "h:1", "--out", "x", "--interval", "0s"], "--interval: expected a positive duration"),
    (["--bootstrap", "h:1", "--out", "x", "--interval", "soon"], "--interval: expected a positive duration"),
    (["--bootstrap", "h:1"], "the following arguments are required: --out"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_lag(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_out_or_snapshot_dir_that_is_a_file_is_refused_before_spark(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    assert run_lag(["--bootstrap", "h:1", "--out", str(afile)]) == 2
    assert run_lag(["--bootstrap", "h:1", "--out", str(tmp_path / "out"), "--snapshot-dir", str(afile)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"cohort pipeline lag: error: --out {afile}: exists and is not a directory",
                   f"cohort pipeline lag: error: --snapshot-dir {afile}: exists and is not a directory"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("committed, lags, owned, expected", [
    ([None, None], [None, None], True, None),
    ([5, 5, 5], [10, 0, 4], True, burrow.OK),          # caught up once in the window
    ([5], [10], True, burrow.OK),                      # one sample: nothing to compare
    ([5, 8, 6], [10, 9, 12], True, burrow.ERR),        # the committed offset went back
    ([5, 5, 5], [10, 12, 15], False, burrow.STOP),     # no progress and nobody owns it
    ([5, 5, 5], [10, 12, 15], True, burrow.STALL),     # no progress by a live member
    ([5, 9, 14], [10, 10, 12], True, burrow.WARN),     # progress, but lag never went down
    ([5, 9, 14], [10, 12, 11], True, burrow.OK),       # lag went down once
    ([None, 5, 9], [None, 10, 11], True, burrow.WARN),  # samples without a commit are skipped
])
def test_burrow_partition_rules(committed, lags, owned, expected):
    assert burrow.partition_status(committed, lags, owned) == expected


def test_burrow_group_status_is_the_worst_with_stop_and_stall_as_err():
    assert burrow.group_status([burrow.OK, None, burrow.WARN]) == burrow.WARN
    assert burrow.group_status([burrow.OK, burrow.STALL]) == burrow.ERR
    assert burrow.group_status([burrow.STOP, burrow.WARN]) == burrow.ERR
    assert burrow.group_status([None]) == burrow.OK


def test_a_cluster_that_does_not_answer_fails_in_one_line_before_spark(tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    assert run_lag(["--bootstrap", f"127.0.0.1:{port}", "--out", str(out), "--once", "--timeout", "1s"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"cohort pipeline lag: failed: 127.0.0.1:{port}: no answer within 1 s") and err.count("\n") == 1, err
    assert not out.exists()


def test_a_replayed_sample_replaces_its_files_instead_of_adding_to_them(tmp_path):
    from cohort.pipeline.lag import _publish

    final = tmp_path / "partitions"
    (final / "date=2026-07-01" / "group_bucket=3").mkdir(parents=True)
    (final / "date=2026-07-01" / "group_bucket=3" / "part-s00000000000000000001-00000.parquet").write_text("sample 1")

    def stage(attempt, files):
        staged = tmp_path / f"staged-{attempt}"
        for n in range(files):
            d = staged / "date=2026-07-01" / f"group_bucket={n}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"part-0000{n}-x.snappy.parquet").write_text(f"attempt {attempt}")
        return staged

    _publish(stage(1, 3), final, 2)  # an attempt that was interrupted before the checkpoint committed
    _publish(stage(2, 2), final, 2)  # its replay
    files = sorted(str(p.relative_to(final)) for p in final.rglob("*.parquet"))
    assert files == ["date=2026-07-01/group_bucket=0/part-s00000000000000000002-00000.parquet",
                     "date=2026-07-01/group_bucket=1/part-s00000000000000000002-00001.parquet",
                     "date=2026-07-01/group_bucket=3/part-s00000000000000000001-00000.parquet"]
    assert {p.read_text() for p in final.rglob("part-s00000000000000000002-*")} == {"attempt 2"}


def test_closed_days_are_compacted_to_one_sorted_file_per_bucket(spark, runs, tmp_path):
    import datetime as dt
    import shutil

    import pyarrow.parquet as pq

    from cohort.pipeline import lag

    out = tmp_path / "out"
    shutil.copytree(runs[0], out, ignore=shutil.ignore_patterns("_checkpoints", "snapshots"))
    (date_dir,) = (out / layout.PARTITIONS_TABLE).glob("date=*")
    day = dt.date.fromisoformat(date_dir.name.split("=")[1])
    tables = sorted(lag.COMPACT_ORDER)
    before = {t: sorted(map(repr, rows(spark, out, t))) for t in tables}
    assert lag.compact_closed_dates(spark, out, day) == []  # the current day is left alone
    # Two samples: two files a bucket where a group has rows in both (the member left before the second).
    scattered = [t for t in tables if lag._scattered(out / t / date_dir.name)]
    assert layout.PARTITIONS_TABLE in scattered and group_samples.TABLE in scattered

    done = lag.compact_closed_dates(spark, out, day + dt.timedelta(days=1))
    assert sorted(table for table, _ in done) == scattered and {d for _, d in done} == {day.isoformat()}
    for table in tables:
        assert sorted(map(repr, rows(spark, out, table))) == before[table]
        order = lag.COMPACT_ORDER[table][0]
        for bucket in (out / table).glob("date=*/group_bucket=*"):
            (only,) = bucket.glob("*.parquet")
            keys = [tuple(r[c] for c in order) for r in pq.read_table(only, columns=list(order)).to_pylist()]
            assert keys == sorted(keys)
    assert not (out / "_staging" / lag.COMPACTING).exists()
    assert lag.compact_closed_dates(spark, out, day + dt.timedelta(days=1)) == []

    # A swap cut short after the old date was moved aside: the next run puts it back.
    aside = out / "_staging" / lag.COMPACTING / "old" / layout.MEMBERS_TABLE / date_dir.name
    aside.parent.mkdir(parents=True)
    (out / layout.MEMBERS_TABLE / date_dir.name).rename(aside)
    lag.recover_compaction(out)
    assert sorted(map(repr, rows(spark, out, layout.MEMBERS_TABLE))) == before[layout.MEMBERS_TABLE]
    assert not (out / "_staging" / lag.COMPACTING).exists()


def test_once_on_a_cluster_without_groups_fails_before_spark(tmp_path, capsys):
    from cohort_testing import ServerThread

    with ServerThread(tmp_path / "data") as srv:
        bootstrap, out = srv.bootstrap, tmp_path / "out"
        started = time.monotonic()
        assert run_lag(["--bootstrap", bootstrap, "--out", str(out), "--once", "--timeout", "5s"]) == 1
        assert time.monotonic() - started < 10  # no JVM was started for it
    err = capsys.readouterr().err
    assert err == f"cohort pipeline lag: failed: no consumer group at {bootstrap}; nothing to sample\n"
    assert not out.exists()

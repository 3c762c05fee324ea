"""The snapshot lag provider (cohort.broker.lag_snapshot) feeding a shard.

It lives here, beside the other lag tests, because it is the shard's `lag_provider`."""

from __future__ import annotations

import json
import os

from cohort.broker.lag_snapshot import SnapshotLagProvider, read_snapshot, snapshot_name, write_snapshot
from cohort.coordinator import CoordinatorConfig

from cg_helpers import BAR, FOO, make_shard

NAMES = {FOO: "foo", BAR: "bar"}


def provider(tmp_path) -> SnapshotLagProvider:
    return SnapshotLagProvider(str(tmp_path), NAMES.get)


def test_newest_snapshot_wins_and_nulls_count_zero(tmp_path):
    write_snapshot(str(tmp_path), 7, "2026-07-01T00:00:00Z", {"g": {"foo": [1, 2, 3]}})
    write_snapshot(str(tmp_path), 12, "2026-07-01T00:00:10Z", {"g": {"foo": [5, None, -3, 9]}})
    p = provider(tmp_path)
    assert p("g", FOO, 4) is None  # nothing loaded before refresh (no I/O in a provider call)
    assert p.refresh() is True and p.snapshot.sample_seq == 12
    assert p("g", FOO, 4) == [5, 0, 0, 9]
    assert p("g", FOO, 6) == [5, 0, 0, 9, 0, 0] and p("g", FOO, 2) == [5, 0]
    assert p("g", BAR, 3) is None and p("other", FOO, 4) is None
    assert p.refresh() is False  # same file: not read again


def test_unknown_topic_id_has_no_lag(tmp_path):
    write_snapshot(str(tmp_path), 1, "t", {"g": {"foo": [1]}})
    p = SnapshotLagProvider(str(tmp_path), lambda topic_id: None)  # e.g. a deleted topic
    p.refresh()
    assert p("g", FOO, 1) is None


def test_bad_newest_file_keeps_the_previous_snapshot(tmp_path):
    write_snapshot(str(tmp_path), 1, "t", {"g": {"foo": [4]}})
    p = provider(tmp_path)
    p.refresh()
    (tmp_path / snapshot_name(2)).write_text("{not json")
    assert p.refresh() is False and "lag-00000000000000000002.json" in p.error
    assert p("g", FOO, 1) == [4]
    (tmp_path / snapshot_name(3)).write_text(json.dumps({"format": "cohort-lag-snapshot/1", "sample_seq": 3,
                                                         "sample_time": "t", "groups": {"g": {"foo": ["x"]}}}))
    assert p.refresh() is False and "must be a list of integers or null" in p.error
    write_snapshot(str(tmp_path), 4, "t", {"g": {"foo": [8]}})
    assert p.refresh() is True and p.error is None and p("g", FOO, 1) == [8]


def test_temporary_and_foreign_files_are_ignored(tmp_path):
    write_snapshot(str(tmp_path), 1, "t", {"g": {"foo": [4]}})
    (tmp_path / (snapshot_name(9) + ".tmp")).write_text("partial")
    (tmp_path / "notes.txt").write_text("x")
    p = provider(tmp_path)
    assert p.refresh() and p.snapshot.sample_seq == 1
    assert sorted(os.listdir(tmp_path)) == [snapshot_name(1), snapshot_name(9) + ".tmp", "notes.txt"]


def test_missing_directory_is_an_error_not_a_crash(tmp_path):
    p = SnapshotLagProvider(str(tmp_path / "nope"), NAMES.get)
    assert p.refresh() is False and "nope" in p.error and p("g", FOO, 1) is None


def test_read_snapshot_round_trip(tmp_path):
    path = write_snapshot(str(tmp_path), 5, "2026-07-01T00:00:50Z", {"g": {"foo": [1, None]}, "h": {}})
    snap = read_snapshot(path)
    assert (snap.sample_seq, snap.sample_time, dict(snap.lags)) == (5, "2026-07-01T00:00:50Z", {("g", "foo"): (1, 0)})


def test_shard_uses_the_snapshot_provider(tmp_path):
    write_snapshot(str(tmp_path), 1, "t", {"g": {"foo": [10, 20, 30, 40, 50, 60]}})
    p = provider(tmp_path)
    p.refresh()
    shard = make_shard(CoordinatorConfig(consumer_assignors=("lag",)), lag_provider=p)
    assert shard.lag_provider("g", FOO, 6) == [10, 20, 30, 40, 50, 60]

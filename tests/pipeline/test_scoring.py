"""Scoring without Spark: hand-built groups whose scores can be worked out on paper."""

from __future__ import annotations

import datetime as dt
import zlib

import numpy as np
import pyarrow as pa
import pytest

from cohort import assignors
from cohort.assignors.api import SubscriptionType
from cohort.pipeline import layout
from cohort.pipeline.fleet import FleetParams, generate
from cohort.pipeline.group_samples import convert_flat_batches, flat_rows, from_flat
from cohort.pipeline.scoring import SCORE_SCHEMA, _ascending_within, _Batch, score_batches

T0 = dt.datetime(2026, 7, 1, tzinfo=dt.timezone.utc)


def samples(rows_p, rows_m):
    """Layout tables from compact tuples.

    rows_p: (group, seq, topic, partition, lag, owner, replica_racks)
    rows_m: (group, seq, member, topics, rack)
    """
    p = pa.table(
        {
            "sample_seq": [r[1] for r in rows_p],
            "sample_time": [T0 + dt.timedelta(seconds=10 * r[1]) for r in rows_p],
            "group_id": [r[0] for r in rows_p],
            "group_state": ["Stable"] * len(rows_p),
            "group_type": ["consumer"] * len(rows_p),
            "topic": [r[2] for r in rows_p],
            "partition": [r[3] for r in rows_p],
            "committed_offset": [None if r[4] is None else 1000 - r[4] for r in rows_p],
            "start_offset": [0] * len(rows_p),
            "end_offset": [1000] * len(rows_p),
            "lag": [r[4] for r in rows_p],
            "member_id": [r[5] for r in rows_p],
            "client_id": [None] * len(rows_p),
            "client_host": [None] * len(rows_p),
            "replica_racks": [list(r[6]) for r in rows_p],
        },
        schema=layout.PARTITION_SCHEMA,
    )
    m = pa.table(
        {
            "sample_seq": [r[1] for r in rows_m],
            "sample_time": [T0 + dt.timedelta(seconds=10 * r[1]) for r in rows_m],
            "group_id": [r[0] for r in rows_m],
            "member_id": [r[2] for r in rows_m],
            "instance_id": [None] * len(rows_m),
            "client_id": [None] * len(rows_m),
            "client_host": [None] * len(rows_m),
            "rack": [r[4] for r in rows_m],
            "subscribed_topics": [list(r[3]) for r in rows_m],
        },
        schema=layout.MEMBER_SCHEMA,
    )
    return p, m


def run(p, m, names, chunk=None, flat=False):
    """Scores of the samples, from group-sample rows (evaluate's main path) or flat rows (its fallback)."""
    rows = flat_rows(p, m) if flat else from_flat(p, m)
    batches = rows.to_batches(max_chunksize=chunk) if chunk else rows.to_batches()
    if flat:
        batches = convert_flat_batches(batches)
    found = [assignors.get(n) if isinstance(n, str) else n for n in names]
    out = pa.Table.from_batches(list(score_batches(batches, found)), schema=SCORE_SCHEMA)
    return sorted(out.to_pylist(), key=lambda r: (r["group_id"], r["sample_seq"], r["assignor"]))


def by(rows, group, seq, assignor):
    (row,) = [r for r in rows if r["group_id"] == group and r["sample_seq"] == seq and r["assignor"] == assignor]
    return row


class AllToFirst:
    """A real (if silly) assignor: every partition to the member with the smallest id."""

    name = "all-to-first"

    def assign(self, spec, topics):
        first = spec.member_ids()[0]
        out = {m: {} for m in spec.members}
        for t in sorted({t for s in spec.members.values() for t in s.subscribed_topic_ids}):
            n = topics.num_partitions(t)
            if n > 0:
                out[first][t] = tuple(range(n))
        return out


def test_range_scores_match_the_hand_computation():
    lags = [100, 100, 1, 1]
    p, m = samples(
        [("g", 0, "t", i, lag, "a", ()) for i, lag in enumerate(lags)],
        [("g", 0, "a", ["t"], None), ("g", 0, "b", ["t"], None)],
    )
    r = by(run(p, m, ["range"]), "g", 0, "range")
    # range: a gets 0-1 (lag 200), b gets 2-3 (lag 2); before, a owned all four
    assert (r["members"], r["partitions"], r["unassigned"], r["total_lag"]) == (2, 4, 0, 202)
    assert (r["max_member_lag"], r["mean_member_lag"]) == (200, 101.0)
    assert (r["max_member_partitions"], r["min_member_partitions"], r["partition_skew"]) == (2, 2, 0)
    assert r["moved"] == 2
    assert r["rack_local_fraction"] is None and r["error"] is None


def test_lag_beats_range_on_a_skewed_group():
    lags = [100, 100, 1, 1]
    p, m = samples(
        [("g", 0, "t", i, lag, "a", ()) for i, lag in enumerate(lags)],
        [("g", 0, "a", ["t"], None), ("g", 0, "b", ["t"], None)],
    )
    rows = run(p, m, ["range", "lag"])
    assert by(rows, "g", 0, "lag")["max_member_lag"] == 101
    assert by(rows, "g", 0, "range")["max_member_lag"] == 200


def test_moves_follow_each_assignors_own_history():
    # sample 0: a, b; sample 1: c joins. range reshuffles ranges, so partitions move.
    parts = [(s, i) for s in (0, 1) for i in range(6)]
    p, m = samples(
        [("g", s, "t", i, 10, "a" if i < 3 else "b", ()) for s, i in parts],
        [("g", 0, "a", ["t"], None), ("g", 0, "b", ["t"], None),
         ("g", 1, "a", ["t"], None), ("g", 1, "b", ["t"], None), ("g", 1, "c", ["t"], None)],
    )
    rows = run(p, m, ["range", AllToFirst()])
    assert by(rows, "g", 0, "range")["moved"] == 0  # range gives a 0-2, b 3-5: what was observed
    # range with three members: a 0-1, b 2-3, c 4-5 -> partitions 2 (a->b), 4 and 5 (b->c) move
    assert by(rows, "g", 1, "range")["moved"] == 3
    assert by(rows, "g", 0, "all-to-first")["moved"] == 3  # b's three partitions go to a
    assert by(rows, "g", 1, "all-to-first")["moved"] == 0
    assert by(rows, "g", 1, "all-to-first")["partition_skew"] == 6


def test_groups_split_across_batches_score_the_same():
    p, m = generate(np.arange(40), FleetParams(samples=3, seed=1))
    whole = run(p, m, ["range", "lag"])
    for chunk in (1, 2, 7, 64):
        assert run(p, m, ["range", "lag"], chunk=chunk) == whole
    assert len(whole) == 40 * 3 * 2


def test_flat_rows_score_the_same_as_group_samples():
    p, m = generate(np.arange(40), FleetParams(samples=3, seed=3))
    whole = run(p, m, ["uniform", "range", "lag"])
    for chunk in (None, 7, 501):
        assert run(p, m, ["uniform", "range", "lag"], chunk=chunk, flat=True) == whole


def test_total_lag_is_the_sum_of_the_samples_lags():
    p, m = generate(np.arange(30), FleetParams(samples=2, seed=5))
    rows = run(p, m, ["uniform"])
    df = p.to_pandas()
    expected = df.fillna({"lag": 0}).groupby(["group_id", "sample_seq"])["lag"].sum()
    for r in rows:
        assert r["total_lag"] == expected[(r["group_id"], r["sample_seq"])]
        assert r["unassigned"] == 0
        assert r["mean_member_lag"] * r["members"] == pytest.approx(r["total_lag"])


def test_rack_locality_fraction():
    p, m = samples(
        [("g", 0, "t", 0, 5, None, ("r1", "r2")), ("g", 0, "t", 1, 5, None, ("r2", "r3")),
         ("g", 0, "t", 2, 5, None, ("r1",)), ("g", 0, "t", 3, 5, None, ("r3",))],
        [("g", 0, "a", ["t"], "r1"), ("g", 0, "b", ["t"], "r2")],
    )
    r = by(run(p, m, [AllToFirst()]), "g", 0, "all-to-first")
    assert r["rack_local_fraction"] == 0.5  # a (r1) owns all four; replicas on r1 for 0 and 2
    seen = Recorder()
    run(p, m, [seen])
    assert seen.replicas == {("t", 0): {"r1", "r2"}, ("t", 1): {"r2", "r3"}, ("t", 2): {"r1"}, ("t", 3): {"r3"}}
    assert seen.racks == {"a": "r1", "b": "r2"}
    assert r["moved"] == 0  # nothing was owned before


def test_members_alike_but_for_their_racks_keep_them_in_every_sample():
    """One subscription and no static ids, racks that differ: each member's spec carries its own rack,
    in the first sample and in later ones, where it also carries the member's current assignment."""
    rows_p = [("g", s, "t", p, 5, None, ("r1",)) for s in (0, 1) for p in range(4)]
    rows_m = [("g", s, member, ["t"], rack) for s in (0, 1) for member, rack in (("a", "r1"), ("b", None), ("c", "r2"))]
    p, m = samples(rows_p, rows_m)
    seen = SampleRecorder()
    run(p, m, [seen])
    assert seen.racks == [{"a": "r1", "b": None, "c": "r2"}] * 2
    assert seen.types == [SubscriptionType.HOMOGENEOUS] * 2
    assert seen.current == [{"a": {}, "b": {}, "c": {}}, {"a": {"t": (0, 1, 2, 3)}, "b": {}, "c": {}}]


class SampleRecorder(AllToFirst):
    """AllToFirst that remembers each call's racks, subscription type and current assignments."""

    name = "sample-recorder"

    def __init__(self):
        self.racks, self.types, self.current = [], [], []

    def assign(self, spec, topics):
        self.racks.append({m: s.rack_id for m, s in spec.members.items()})
        self.types.append(spec.subscription_type)
        self.current.append({m: dict(s.assignment) for m, s in spec.members.items()})
        return super().assign(spec, topics)


def test_unknown_partitions_and_idle_members():
    # partitions 0 and 2 only (1 never sampled); three members for two partitions
    p, m = samples(
        [("g", 0, "t", 0, 7, None, ()), ("g", 0, "t", 2, 9, None, ())],
        [("g", 0, "a", ["t"], None), ("g", 0, "b", ["t"], None), ("g", 0, "c", ["t"], None)],
    )
    r = by(run(p, m, ["range"]), "g", 0, "range")
    assert r["partitions"] == 2 and r["total_lag"] == 16
    assert r["min_member_partitions"] == 0 and r["members"] == 3
    assert r["max_member_lag"] == 9


def test_groups_without_members_are_not_scored():
    p, m = samples(
        [("empty", 0, "t", 0, 7, None, ()), ("g", 0, "t", 0, 1, None, ())],
        [("g", 0, "a", ["t"], None)],
    )
    rows = run(p, m, ["lag"])
    assert [r["group_id"] for r in rows] == ["g"]


def test_null_lag_counts_as_zero():
    p, m = samples(
        [("g", 0, "t", 0, None, None, ()), ("g", 0, "t", 1, 4, None, ())],
        [("g", 0, "a", ["t"], None)],
    )
    r = by(run(p, m, ["lag"]), "g", 0, "lag")
    assert r["total_lag"] == 4 and r["max_member_lag"] == 4


def test_groups_may_arrive_in_any_order():
    # Spark sorts by a hash of the group id first: groups are contiguous but not in id order
    p, m = generate(np.arange(25), FleetParams(samples=2, seed=2))
    rows = flat_rows(p, m)
    order = {g: i for i, g in enumerate(sorted(set(rows["group_id"].to_pylist()), key=lambda g: zlib.crc32(g.encode())))}
    keys = np.array([order[g] for g in rows["group_id"].to_pylist()])
    shuffled = rows.take(np.argsort(keys, kind="stable"))
    found = [assignors.get("lag")]
    got = pa.Table.from_batches(list(score_batches(convert_flat_batches(shuffled.to_batches(max_chunksize=33)), found))).to_pylist()
    want = pa.Table.from_batches(list(score_batches(convert_flat_batches(rows.to_batches()), found))).to_pylist()
    key = lambda r: (r["group_id"], r["sample_seq"])  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
    assert [r["group_id"] for r in got] != [r["group_id"] for r in sorted(got, key=key)]


def test_group_with_members_but_no_partitions():
    p, m = samples([("other", 0, "t", 0, 3, None, ())], [("idle", 0, "a", ["gone"], None)])
    rows = run(p, m, ["uniform"])
    r = by(rows, "idle", 0, "uniform")
    assert (r["members"], r["partitions"], r["total_lag"], r["max_member_lag"], r["moved"]) == (1, 0, 0, 0, 0)
    p, m = samples([], [("idle", 0, "a", ["gone"], None)])
    assert [r["group_id"] for r in run(p, m, ["range"])] == ["idle"]


def test_heterogeneous_subscriptions_and_static_members():
    rows_p = [("g", 0, t, i, 10 * (i + 1), None, ()) for t in ("t1", "t2") for i in range(3)]
    rows_m = [("g", 0, "a", ["t1", "t2"], None), ("g", 0, "b", ["t1"], None)]
    p, m = samples(rows_p, rows_m)
    m = m.set_column(m.schema.get_field_index("instance_id"), "instance_id", pa.array(["i-a", None]))
    out = run(p, m, ["uniform", "range", "lag"])
    for r in out:
        assert r["error"] is None and r["unassigned"] == 0 and r["partitions"] == 6
        assert r["total_lag"] == 2 * (10 + 20 + 30)
        # b cannot take t2, so a owns at least t2's three partitions (lag 60)
        assert r["max_member_lag"] >= 60 and r["max_member_partitions"] >= 3


def test_groups_with_more_topics_and_racks_than_a_bitmask_holds():
    topics = [f"t{i:02d}" for i in range(70)]
    racks = [f"r{i:02d}" for i in range(70)]
    rows_p = [("wide", 0, t, 0, 10 + i, None, (racks[i],)) for i, t in enumerate(topics)]
    rows_m = [("wide", 0, "a", topics, racks[0]), ("wide", 0, "b", topics[:35], racks[1])]
    p, m = samples(rows_p, rows_m)
    r = by(run(p, m, [AllToFirst()]), "wide", 0, "all-to-first")
    # 70 single-partition topics all to a: its rack r00 holds only t00's replica, but with 70 racks
    # in the sample locality is not scored
    assert (r["partitions"], r["unassigned"], r["max_member_partitions"]) == (70, 0, 70)
    assert r["total_lag"] == r["max_member_lag"] == sum(10 + i for i in range(70))
    assert r["rack_local_fraction"] is None
    seen = Recorder()
    run(p, m, [seen])
    assert seen.subscriptions == {"a": frozenset(topics), "b": frozenset(topics[:35])}
    assert seen.racks == {"a": "r00", "b": "r01"}
    assert seen.subscription_type is SubscriptionType.HETEROGENEOUS
    assert seen.replicas == {(t, 0): frozenset({racks[i]}) for i, t in enumerate(topics)}


class Recorder(AllToFirst):
    """AllToFirst that remembers what the spec told it."""

    name = "recorder"

    def assign(self, spec, topics):
        self.subscriptions = {m: s.subscribed_topic_ids for m, s in spec.members.items()}
        self.racks = {m: s.rack_id for m, s in spec.members.items()}
        self.subscription_type = spec.subscription_type
        self.replicas = {(t, p): topics.racks_for_partition(t, p) for s in spec.members.values()
                         for t in s.subscribed_topic_ids for p in range(max(topics.num_partitions(t), 0))}
        return super().assign(spec, topics)


@pytest.mark.parametrize("enabled", [True, False])
def test_cycle_collector_is_off_while_a_batch_is_scored_and_restored_after(monkeypatch, enabled):
    import gc

    from cohort.pipeline import scoring

    seen = []
    real = scoring._score
    monkeypatch.setattr(scoring, "_score", lambda batch, a: (seen.append(gc.isenabled()), real(batch, a))[1])
    p, m = generate(np.arange(3), FleetParams(samples=2))
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        out = list(score_batches(from_flat(p, m).to_batches(max_chunksize=2), [assignors.get("range")]))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen and not any(seen)
    assert sum(b.num_rows for b in out) == 6


class OneGroupAtATime:
    """A built-in assignor with only `assign`: every group sample is assigned on its own. It
    records the current assignments it is given, in order, down to their types and key order."""

    def __init__(self, name):
        self.name = name
        self.assignor = assignors.get(name)
        self.currents = []

    def assign(self, spec, topics):
        if any(s.assignment for s in spec.members.values()):
            self.currents.append([(m, type(s.assignment), [(t, type(p), p) for t, p in s.assignment.items()])
                                  for m, s in spec.members.items()])
        return self.assignor.assign(spec, topics)


class CountingFreshGroups(OneGroupAtATime):
    """The built-in assignor, `fresh_owners` included, counting the groups that one takes."""

    def __init__(self, name):
        super().__init__(name)
        self.fresh_groups = 0

    def fresh_owners(self, groups):
        owner, done = self.assignor.fresh_owners(groups)
        self.fresh_groups += int(done.sum())
        return owner, done


def test_scores_are_the_same_when_fresh_groups_are_assigned_together():
    # A churning fleet (each group's first sample is fresh, later ones start from the fresh
    # result) plus groups the batch must leave to `assign`: a partition missing (which `assign`
    # counts in the topic's partitions), a topic nobody subscribes to, keys that would overflow
    # int64 (`lag`), members with different subscriptions.
    p, m = generate(np.arange(300), FleetParams(samples=3, seed=5))
    huge = 1 << 61  # keys overflow, a member's total lag does not
    hand_p, hand_m = samples(
        [("gap", s, "a", i, 5, None, ()) for s in (0, 1) for i in (0, 2)] + [("gap", s, "b", 0, 7, None, ()) for s in (0, 1)]
        + [("unsubscribed", 0, t, i, i + 1, None, ()) for t in ("a", "b") for i in range(3)]
        + [("overflow", 0, "t", i, huge, None, ()) for i in range(4)]
        + [("mixed", s, t, i, 5 * i + s, None, ()) for s in (0, 1) for t in ("a", "b") for i in range(4)],
        [("gap", s, x, ["a", "b"], None) for s in (0, 1) for x in "xy"]
        + [("unsubscribed", 0, x, ["a"], None) for x in "xy"]
        + [("overflow", 0, x, ["t"], None) for x in "xy"]
        + [("mixed", s, "x", ["a", "b"], None) for s in (0, 1)] + [("mixed", s, "y", ["a"], None) for s in (0, 1)],
    )
    p, m = pa.concat_tables([p, hand_p]), pa.concat_tables([m, hand_m])
    names = ("lag", "range", "uniform")
    batched = [CountingFreshGroups(name) for name in names]
    one_at_a_time = [OneGroupAtATime(name) for name in names]
    got = run(p, m, batched, chunk=97)
    want = run(p, m, one_at_a_time, chunk=97)
    assert got == want
    for mine, theirs in zip(batched, one_at_a_time):
        assert len(mine.currents) > 250 and mine.currents == theirs.currents
    lag, range_, uniform = batched
    # The fleet's first samples but those with static members or mixed subscriptions: all of them
    # for uniform and range (racks included), all but "overflow" for lag.
    assert 250 < uniform.fresh_groups <= 300 + 4
    assert lag.fresh_groups == uniform.fresh_groups - 1 and range_.fresh_groups == uniform.fresh_groups
    assert by(got, "overflow", 0, "lag")["unassigned"] == 0


def test_rows_the_batched_fresh_assignment_takes():
    rows_p = (
        [(g, 0, t, i, i + 1, None, ()) for g in ("plain", "static", "reordered") for t in ("a", "b") for i in range(3)]
        + [("plain", 1, "a", i, 1, None, ()) for i in range(3)]
        + [("gap", 0, "a", i, 1, None, ()) for i in (0, 2)]
        + [("unsubscribed", 0, t, 0, 1, None, ()) for t in ("a", "b")]
        + [("split", 0, "a", 0, 1, None, ())]
        + [("racks", 0, "a", i, 1, None, (f"r{i % 3}",)) for i in range(3)]
        + [("many racks", 0, "a", i, 1, None, (f"r{2 * i:02d}", f"r{2 * i + 1:02d}")) for i in range(32)]
    )
    rows_m = (
        [(g, 0, x, ["a", "b"], None) for g in ("plain", "static", "reordered") for x in "xy"]
        + [("plain", 1, x, ["a"], None) for x in "xy"]
        + [("gap", 0, x, ["a"], None) for x in "xy"]
        + [("unsubscribed", 0, x, ["a"], None) for x in "xy"]
        + [("split", 0, "x", ["a"], None), ("split", 0, "y", ["a", "b"], None)]
        + [("racks", 0, x, ["a"], "r1") for x in "xy"]
        + [("many racks", 0, x, ["a"], "r01") for x in "xy"]
    )
    p, m = samples(rows_p, rows_m)
    m = m.set_column(m.schema.get_field_index("instance_id"), "instance_id",
                     pa.array(["i-1" if g == "static" else None for g in m["group_id"].to_pylist()]))
    table = from_flat(p, m)
    keys = list(zip(table["group_id"].to_pylist(), table["sample_seq"].to_pylist()))

    def fresh(table):
        return {key for key, ok in zip(keys, _Batch(table.combine_chunks().to_batches()[0]).fresh_everyone()) if ok}

    # Only first samples whose members share one subscription covering every topic with partitions,
    # no static ids, every topic's partitions 0..n-1, and racks that fit a bitmask (64 do not).
    assert fresh(table) == {("plain", 0), ("reordered", 0), ("racks", 0)}
    # A row breaking the format's order (members or topics not ascending) is left to `assign`.
    r = keys.index(("reordered", 0))
    for column in ("members", "topics"):
        values = table[column].to_pylist()
        values[r] = values[r][::-1]
        changed = table.set_column(table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type))
        assert fresh(changed) == {("plain", 0), ("racks", 0)}


def test_ascending_within_rows():
    # Rows [a, b], [], [c, a], [c, c], [b]: pairs across rows (b-c, c-b) do not count.
    values = pa.array(["a", "b", "c", "a", "c", "c", "b"])
    offsets = np.array([0, 2, 2, 4, 6, 7])
    assert _ascending_within(values, offsets).tolist() == [True, True, False, False, True]

"""The synthetic fleet generator: deterministic per group, and internally consistent lag samples."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipeline import layout
from cohort.pipeline.fleet import FleetParams, generate

PARAMS = FleetParams(samples=4, partitions=20, seed=3)


def test_rows_do_not_depend_on_how_groups_are_chunked():
    whole_p, whole_m = generate(np.arange(60), PARAMS)
    parts = [generate(np.arange(a, b), PARAMS) for a, b in ((0, 7), (7, 31), (31, 60))]
    assert pa.concat_tables([p for p, _ in parts]).equals(whole_p)
    assert pa.concat_tables([m for _, m in parts]).equals(whole_m)


def test_seed_changes_the_fleet():
    a, _ = generate(np.arange(20), PARAMS)
    b, _ = generate(np.arange(20), FleetParams(samples=4, partitions=20, seed=4))
    assert not a.equals(b)


def test_schemas_are_the_layout():
    partitions, members = generate(np.arange(5), PARAMS)
    assert partitions.schema.equals(layout.PARTITION_SCHEMA)
    assert members.schema.equals(layout.MEMBER_SCHEMA)


def test_partition_rows_are_consistent_lag_samples():
    partitions, _ = generate(np.arange(300), PARAMS)
    df = partitions.to_pandas()
    assert len(df) == 300 * 4 * 20
    assert (df.groupby(["group_id", "sample_seq"]).size() == 20).all()
    committed = df.dropna(subset=["committed_offset"])
    assert (committed["lag"] == committed["end_offset"] - committed["committed_offset"]).all()
    assert (committed["committed_offset"] >= committed["start_offset"]).all()
    never = df[df["committed_offset"].isna()]
    assert len(never) > 0 and never["lag"].isna().all()
    # partitions of a topic are 0..n-1 in every sample
    counts = df.groupby(["group_id", "sample_seq", "topic"])["partition"].agg(["min", "max", "count"])
    assert (counts["min"] == 0).all() and (counts["max"] == counts["count"] - 1).all()
    # offsets only grow from one sample to the next
    ordered = df.sort_values(["group_id", "topic", "partition", "sample_seq"])
    growth = ordered.groupby(["group_id", "topic", "partition"])["end_offset"].diff().dropna()
    assert (growth > 0).all()
    # groups reading the same topic see the same offsets
    same_topic = df[df["sample_seq"] == 0].groupby(["topic", "partition"])["end_offset"].nunique()
    assert (same_topic == 1).all()


def test_owners_and_members_agree_and_membership_churns():
    partitions, members = generate(np.arange(300), PARAMS)
    p = partitions.to_pandas()
    m = members.to_pandas()
    live = set(zip(m["group_id"], m["sample_seq"], m["member_id"]))
    assert all(key in live for key in zip(p["group_id"], p["sample_seq"], p["member_id"]))
    subs = {(g, s, mid): set(t) for g, s, mid, t in zip(m["group_id"], m["sample_seq"], m["member_id"], m["subscribed_topics"])}
    assert all(t in subs[(g, s, mid)] for g, s, mid, t in zip(p["group_id"], p["sample_seq"], p["member_id"], p["topic"]))
    per_sample = m.groupby(["group_id", "sample_seq"])["member_id"].apply(frozenset)
    changes = sum(
        per_sample[(g, s)] != per_sample[(g, s - 1)] for g, s in per_sample.index if s > 0
    )
    assert changes > 0.1 * 300 * 3
    reconciling = p[p["group_state"] != "Stable"].groupby(["group_id", "sample_seq"]).size()
    assert len(reconciling) == changes


def test_fleet_mixes_skewed_even_racks_and_static_members():
    partitions, members = generate(np.arange(400), PARAMS)
    df = partitions.to_pandas().dropna(subset=["lag"])
    spread = df.groupby(["group_id", "sample_seq"])["lag"].agg(lambda s: s.max() / max(s.min(), 1))
    assert (spread > 20).mean() > 0.3  # skewed: a few hot partitions
    assert (spread < 2).mean() > 0.3   # even: within about +-20 %
    racked = pc.list_value_length(partitions["replica_racks"]).to_numpy()
    assert 0.1 < (racked > 0).mean() < 0.6
    assert 0 < pc.sum(pc.is_valid(members["instance_id"])).as_py() < members.num_rows
    assert set(pc.unique(members["rack"].drop_null()).to_pylist()) == {"rack-a", "rack-b", "rack-c"}


def test_bucket_is_crc32_of_the_group_id():
    assert layout.group_bucket("group-0000000") == __import__("zlib").crc32(b"group-0000000") % 64
    assert 0 <= layout.group_bucket("ünïcode-group") < layout.BUCKETS

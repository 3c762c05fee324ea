"""Synthetic consumer-group fleets as Arrow tables in the lag-sample layout, generated with numpy.

Every value is a counter-based hash of (seed, group index, sample, ...), never a stateful RNG, so
a group's rows are identical however the group indices are split into chunks: Spark can generate
a fleet in any number of tasks and get the same bytes.

What a fleet holds:
* groups are `skewed` (a few hot partitions carry most of the lag) or `even` (lags within +-20 %);
* groups consume one or two topics from a shared family (`events-NNN-j`), so several groups read
  the same topic and see the same offsets, as on a real cluster;
* members come and go between samples (replace, join or leave), the group is `Reconciling` (or
  `PreparingRebalance` for classic groups) in a sample where that happens;
* some groups have racks: each member has a rack and each partition two replica racks out of three;
* the partitions' owners are the previous round-robin assignment over the current members;
* a few partitions of even groups have never been committed (committed offset and lag null).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipeline.layout import MEMBER_SCHEMA, PARTITION_SCHEMA

RACKS = pa.array(["rack-a", "rack-b", "rack-c"])
TOPIC_FAMILIES = 1000
DEFAULT_START_US = 1_782_864_000_000_000  # 2026-07-01T00:00:00Z

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class FleetParams:
    """Knobs of a synthetic fleet; the defaults are the benchmark's fleet."""

    samples: int = 3
    partitions: int = 20
    seed: int = 0
    skewed_fraction: float = 0.5
    churn: float = 0.3
    racks_fraction: float = 0.3
    start_us: int = DEFAULT_START_US
    interval_us: int = 10_000_000


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + _GOLD
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _hash(seed: int, *keys) -> np.ndarray:
    """A 64-bit hash of the keys, broadcast together; the fleet's only source of randomness."""
    with np.errstate(over="ignore"):
        h = _splitmix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) + np.zeros(1, np.uint64))
        for key in keys:
            h = _splitmix(h ^ (np.asarray(key).astype(np.uint64) * _GOLD))
    return h


def _uniform(seed: int, *keys) -> np.ndarray:
    """Uniform floats in [0, 1) from the hash of the keys."""
    return (_hash(seed, *keys) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _str(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _concat(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def generate(groups: np.ndarray, params: FleetParams = FleetParams()) -> tuple[pa.Table, pa.Table]:
    """The partition rows and member rows of the given group indices, ordered by group, sample, topic, partition."""
    g = np.asarray(groups, dtype=np.int64)
    n_groups, n_samples, n_parts, seed = len(g), params.samples, params.partitions, params.seed
    family = g % TOPIC_FAMILIES
    two_topics = (_uniform(seed, family, 1) < 0.3) & (n_parts >= 2)
    skewed = _uniform(seed, g, 2) < params.skewed_fraction
    has_racks = _uniform(seed, g, 3) < params.racks_fraction
    classic = _uniform(seed, g, 4) < 0.3
    static = _uniform(seed, g, 5) < 0.1
    base_lag = 10 ** (2 + 3 * _uniform(seed, g, 6))
    first_members = 2 + (_uniform(seed, g, 7) * 7).astype(np.int64)

    # Membership window per sample: members lo..hi-1 (member index k is never reused).
    s_idx = np.arange(n_samples)
    u_churn = _uniform(seed, g[:, None], s_idx[None, :], 8)
    u_churn[:, 0] = 1.0
    c = params.churn
    leave = (u_churn < c * 0.5) | ((u_churn >= c * 0.75) & (u_churn < c))
    join = u_churn < c * 0.75
    hi = first_members[:, None] + np.cumsum(join, axis=1)
    lo = np.minimum(np.cumsum(leave, axis=1), hi - 1)
    changed = u_churn < c
    size = (hi - lo).ravel()

    # ---- member rows: one per (group, sample, k in lo..hi-1)
    gs_group = np.repeat(np.arange(n_groups), n_samples)
    gs_sample = np.tile(s_idx, n_groups)
    m_start = np.concatenate(([0], np.cumsum(size)[:-1]))
    m_gs = np.repeat(np.arange(n_groups * n_samples), size)
    m_k = np.arange(int(size.sum())) - m_start[m_gs] + lo.ravel()[m_gs]
    m_g = gs_group[m_gs]
    group_ids = _concat("group-", pc.utf8_lpad(_str(g), 7, "0"))
    m_group_ids = group_ids.take(pa.array(m_g))
    m_k_str = pc.utf8_lpad(_str(m_k), 3, "0")
    member_ids = _concat(m_group_ids, "-m", m_k_str)
    client_ids = _concat("consumer-", m_group_ids, "-", _str(m_k))
    client_hosts = _concat("/10.", _str(g[m_g] % 250), ".", _str(m_k // 250 % 250), ".", _str(m_k % 250))
    rack_idx = (_hash(seed, g[m_g], m_k, 9) % np.uint64(3)).astype(np.int64)
    member_racks = RACKS.take(pa.array(rack_idx, mask=~has_racks[m_g]))
    instance_ids = pc.if_else(pa.array(static[m_g]), _concat("instance-", _str(m_k)), pa.scalar(None, pa.string()))
    topic_prefix = _concat("events-", pc.utf8_lpad(_str(family), 3, "0"), "-")
    topic0 = _concat(topic_prefix, "0")
    topic1 = _concat(topic_prefix, "1")
    topics = pa.concat_arrays([topic0, topic1])  # topics[g] is group g's first topic, topics[G + g] its second
    n_topics = np.where(two_topics, 2, 1)
    sub_offsets = np.concatenate(([0], np.cumsum(n_topics[m_g])))
    reps = n_topics[m_g]
    sub_pos = np.arange(sub_offsets[-1]) - np.repeat(sub_offsets[:-1], reps)
    sub_values = topics.take(pa.array(np.repeat(m_g, reps) + sub_pos * n_groups))
    subscribed = pa.ListArray.from_arrays(pa.array(sub_offsets, pa.int32()), sub_values)
    sample_times = pa.array(params.start_us + gs_sample * params.interval_us, pa.timestamp("us", tz="UTC"))
    members = pa.table(
        [
            pa.array(gs_sample[m_gs], pa.int64()),
            sample_times.take(pa.array(m_gs)),
            m_group_ids,
            member_ids,
            instance_ids,
            client_ids,
            client_hosts,
            member_racks,
            subscribed,
        ],
        schema=MEMBER_SCHEMA,
    )

    # ---- partition rows: one per (group, sample, q in 0..P-1); q splits into topic j and partition p
    q = np.arange(n_parts)
    half = n_parts // 2
    rows_gs = np.repeat(np.arange(n_groups * n_samples), n_parts)
    rows_g = gs_group[rows_gs]
    rows_s = gs_sample[rows_gs]
    rows_q = np.tile(q, n_groups * n_samples)
    second = two_topics[rows_g] & (rows_q >= half)
    j = second.astype(np.int64)
    p = np.where(second, rows_q - half, rows_q)
    fam = family[rows_g]
    gid = g[rows_g]  # the global group index: hashes must not depend on the chunk

    hot = _uniform(seed, gid, j, p, 10) < 0.15
    u_level = _uniform(seed, gid, j, p, 11)
    factor = np.where(
        skewed[rows_g],
        np.where(hot, 3 + 5 * u_level, 0.05 + 0.1 * u_level),
        0.8 + 0.4 * u_level,
    )
    drift = 0.85 + 0.3 * _uniform(seed, gid, j, p, rows_s, 12)
    lag = np.floor(base_lag[rows_g] * factor * drift).astype(np.int64)
    start_offset = (_hash(seed, fam, j, p, 13) % np.uint64(1_000_000)).astype(np.int64)
    rate = 1_000_000 + (_hash(seed, fam, j, p, 14) % np.uint64(1_000_000)).astype(np.int64)
    end_offset = start_offset + 2_000_000 + rows_s * rate
    never_committed = ~skewed[rows_g] & (_uniform(seed, gid, j, p, 15) < 0.005)
    committed = end_offset - lag

    owner = m_start[rows_gs] + rows_q % size[rows_gs]
    owner_idx = pa.array(owner)
    r = (_hash(seed, fam, j, p, 16) % np.uint64(3)).astype(np.int64)
    racked = has_racks[rows_g]
    rack_counts = np.where(racked, 2, 0)
    rack_offsets = np.concatenate(([0], np.cumsum(rack_counts))).astype(np.int32)
    pair = np.stack([r[racked], (r[racked] + 1) % 3], axis=1).ravel()
    replica_racks = pa.ListArray.from_arrays(pa.array(rack_offsets), RACKS.take(pa.array(pair, pa.int64())))

    state_changed = changed.ravel()[rows_gs]
    states = np.where(state_changed, np.where(classic[rows_g], 1, 2), 0)
    state_names = pa.array(["Stable", "PreparingRebalance", "Reconciling"]).take(pa.array(states))
    type_names = pa.array(["consumer", "classic"]).take(pa.array(classic[rows_g].astype(np.int64)))
    partitions = pa.table(
        [
            pa.array(rows_s, pa.int64()),
            sample_times.take(pa.array(rows_gs)),
            group_ids.take(pa.array(rows_g)),
            state_names,
            type_names,
            topics.take(pa.array(rows_g + j * n_groups)),
            pa.array(p, pa.int32()),
            pa.array(committed, mask=never_committed),
            pa.array(start_offset),
            pa.array(end_offset),
            pa.array(lag, mask=never_committed),
            member_ids.take(owner_idx),
            client_ids.take(owner_idx),
            client_hosts.take(owner_idx),
            replica_racks,
        ],
        schema=PARTITION_SCHEMA,
    )
    return partitions, members

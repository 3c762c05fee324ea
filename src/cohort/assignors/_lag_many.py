"""The lag assignor's fresh assignment of many groups at once, on numpy.

A fresh group (nobody holds a partition) whose members all subscribe to all of its topics gets
the greedy (`_lag_greedy`, `_lag_small._greedy`): per topic, partitions by decreasing lag, k at a
time (k members), to the members with the least (total lag, total partitions, index). Assigning a
million such groups one `assign` call at a time spends most of its time in that greedy's
per-partition Python loop, although every group runs the same rounds. Here all the groups run
together: groups with the same member count advance one round per step, and a step ranks all of
their members with one argsort. The Spark pipeline's `evaluate` uses it for its groups' first
samples; the broker assigns one group at a time and has no use for it.

The owners are `LagAssignor.assign`'s to the last partition: lags are clamped and capped as the
assignor reads them (`_lag_model._lag_vector`), the keys are packed into int64 exactly as in
`_lag_greedy` (a group whose keys could overflow is left to `assign`), and ranking distinct keys
has one answer.
"""

from __future__ import annotations

import numpy as np

from cohort.assignors._lag_model import INT64_MAX


def fresh_owners(member_counts, topic_group, partition_counts, lags) -> tuple[np.ndarray, np.ndarray]:
    """(owner of every partition, whether each group was assigned), in the layout of
    `cohort.assignors.api.FreshGroups`. Groups whose packed keys could overflow int64 are not
    assigned (their owners are -1): `assign` takes them one at a time."""
    k = np.asarray(member_counts, np.int64)
    topic_group = np.asarray(topic_group, np.int64)
    counts = np.asarray(partition_counts, np.int64)
    lag = np.maximum(np.asarray(lags, np.int64), 0)
    owner = np.full(len(lag), -1, np.int64)
    if len(lag) == 0:
        return owner, np.zeros(len(k), bool)
    group = np.repeat(topic_group, counts)  # of each partition
    totals = np.bincount(group, minlength=len(k))
    lag = np.minimum(lag, INT64_MAX // np.maximum(totals, 1)[group])  # as `_lag_vector` caps them
    starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
    sums = np.zeros(len(k), np.int64)
    sums[group[starts]] = np.add.reduceat(lag, starts)  # each at most INT64_MAX
    done = (totals > 0) & (sums < INT64_MAX // (k * (totals + 1)))  # (sum + 1) * base fits
    if done.all():
        owner[:] = _greedy_rounds(k, topic_group, counts, lag, totals)
        return owner, done
    kept_topic = done[topic_group]
    renumber = np.cumsum(done) - 1
    at = done[group]
    owner[at] = _greedy_rounds(k[done], renumber[topic_group[kept_topic]], counts[kept_topic], lag[at], totals[done])
    return owner, done


def _greedy_rounds(k: np.ndarray, topic_group: np.ndarray, counts: np.ndarray, lag: np.ndarray,
                   totals: np.ndarray) -> np.ndarray:
    """Each partition's owner (member index), partitions in input order; see `fresh_owners`."""
    n_topics = len(counts)
    t_start = np.concatenate(([0], np.cumsum(counts)))
    topic = np.repeat(np.arange(n_topics), counts)
    order = _greedy_order(topic, lag)
    group_k = k[topic_group]
    base = k * (totals + 1)  # key = total lag * base + total partitions * k + member index
    ordered_topic = topic[order]
    step = lag[order] * base[topic_group[ordered_topic]] + group_k[ordered_topic]

    # Rounds: a topic's partitions in lag order, k at a time; a group's rounds numbered in order.
    n_rounds = -(-counts // group_k)
    round_topic = np.repeat(np.arange(n_topics), n_rounds)
    first_round = np.concatenate(([0], np.cumsum(n_rounds)))
    within = np.arange(len(round_topic)) - first_round[round_topic]
    round_k = group_k[round_topic]
    round_start = t_start[round_topic] + within * round_k
    round_size = np.minimum(round_k, counts[round_topic] - within * round_k)
    round_group = topic_group[round_topic]
    group_first = np.concatenate(([0], np.cumsum(np.bincount(round_group, minlength=len(k)))))
    round_seq = np.arange(len(round_topic)) - group_first[round_group]

    owner = np.empty(len(topic), np.int64)  # by position in `order`
    row_of = np.empty(len(k), np.int64)  # each group's row in its member count's key matrix
    for size in np.unique(k).tolist():
        in_class = k == size
        row_of[in_class] = np.arange(int(in_class.sum()))
        keys = np.tile(np.arange(size, dtype=np.int64), (int(in_class.sum()), 1))
        mine = np.flatnonzero(in_class[round_group])
        mine = mine[np.argsort(round_seq[mine], kind="stable")]
        seq_bounds = np.flatnonzero(np.diff(round_seq[mine], prepend=-1, append=-1)).tolist()
        cols = np.arange(size)
        for a, b in zip(seq_bounds[:-1], seq_bounds[1:]):
            rounds = mine[a:b]  # one round of each group that has this many rounds
            rows = row_of[round_group[rounds]]
            ranked = np.argsort(keys[rows], axis=1) if size > 1 else np.zeros((len(rows), 1), np.int64)
            where = round_start[rounds][:, None] + cols
            used = cols < round_size[rounds][:, None]
            if used.all():
                keys[rows[:, None], ranked] += step[where]
                owner[where] = ranked
            else:
                r = np.broadcast_to(rows[:, None], used.shape)[used]
                chosen, at = ranked[used], where[used]
                keys[r, chosen] += step[at]
                owner[at] = chosen
    result = np.empty(len(topic), np.int64)
    result[order] = owner
    return result


def _greedy_order(topic: np.ndarray, lag: np.ndarray) -> np.ndarray:
    """Partition positions by topic, then lag descending, then partition id (their input order)."""
    if len(lag) == 0:
        return np.zeros(0, np.int64)
    top = int(lag.max())
    if (int(topic[-1]) + 1) * (top + 1) <= INT64_MAX:  # one packed key, sorted stably: 10x a lexsort
        return np.argsort(topic * (top + 1) + (top - lag), kind="stable")
    return np.lexsort((np.arange(len(lag)), -lag, topic))

"""The uniform assignor's answer for many fresh groups at once, on numpy.

`UniformAssignor.assign` deals a new homogeneous group's partitions out in canonical order (topics
sorted, partitions ascending, one sequence over all topics): the first M - P % M members (by id)
take P // M contiguous partitions each, the last P % M one more (`_uniform_small.assign_new_group`,
and the numpy builder's rules for a group nobody owns anything of). That is arithmetic on each
partition's position in the sequence, so a whole batch of such groups takes a few array
operations instead of one `assign` call each.
"""

from __future__ import annotations

import numpy as np


def new_group_owners(member_counts, topic_group, partition_counts) -> tuple[np.ndarray, np.ndarray]:
    """(owner of every partition, every group assigned), in the layout of `api.FreshGroups`."""
    k = np.asarray(member_counts, np.int64)
    topic_group = np.asarray(topic_group, np.int64)
    counts = np.asarray(partition_counts, np.int64)
    topic = np.repeat(np.arange(len(counts)), counts)
    group = topic_group[topic]
    totals = np.bincount(group, minlength=len(k))
    group_start = np.concatenate(([0], np.cumsum(totals)))
    position = np.arange(len(topic)) - group_start[group]  # in the group's canonical order
    quota, extra = totals // k, totals % k
    shorter = (k - extra) * quota  # partitions of the first M - P % M members
    q, cut = quota[group], shorter[group]
    owner = np.where(position < cut, position // np.maximum(q, 1), (k - extra)[group] + (position - cut) // (q + 1))
    return owner, np.ones(len(k), bool)

"""The range assignor's answer for many groups at once, on numpy, when it is plain ranges.

Without static members and without racks, `RangeAssignor.assign` gives a homogeneous group plain
ranges: per topic, members in id order, the first n % k take n // k + 1 partitions each and the
rest n // k, contiguous from partition 0. That is arithmetic on the partition id, so a whole batch
of such groups takes a few array operations instead of one `assign` call each.
"""

from __future__ import annotations

import numpy as np


def plain_range_owners(member_counts, topic_group, partition_counts, racked) -> tuple[np.ndarray, np.ndarray]:
    """(owner of every partition, whether each group was assigned); groups with racks are not (-1).

    Same layout as `cohort.assignors.api.FreshGroups`.
    """
    k = np.asarray(member_counts, np.int64)
    topic_group = np.asarray(topic_group, np.int64)
    counts = np.asarray(partition_counts, np.int64)
    done = ~np.asarray(racked, bool)
    topic = np.repeat(np.arange(len(counts)), counts)
    pid = np.arange(len(topic)) - np.concatenate(([0], np.cumsum(counts)))[topic]
    group = topic_group[topic]
    n, members = counts[topic], k[group]
    quota, extra = n // members, n % members
    longer = extra * (quota + 1)  # partitions in the first `extra` runs, one longer each
    owner = np.where(pid < longer, pid // (quota + 1), extra + (pid - longer) // np.maximum(quota, 1))
    owner[~done[group]] = -1
    return owner, done

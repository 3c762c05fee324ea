"""The `uniform` server-side assignor (Kafka's default): balance first, then stickiness.

Every member ends up with floor or ceil of its fair share where subscriptions allow, and keeps
as many of its current partitions as that balance permits. Groups whose members all subscribe
to the same topics take the homogeneous builder; the others take the heterogeneous one. Which
one runs follows `spec.subscription_type` (as in Kafka), so a spec must not claim HOMOGENEOUS
for differing subscriptions; `GroupSpec.of` derives the type correctly.

Differences from Kafka, by design: topics the describer does not know are ignored instead of
failing the assignment, and every member appears in the result (with `{}` when it gets nothing).
"""

from __future__ import annotations

import gc

from cohort.assignors._uniform_heterogeneous import assign_heterogeneous
from cohort.assignors._uniform_homogeneous import assign_homogeneous
from cohort.assignors.api import FreshGroups, GroupAssignment, GroupSpec, SubscribedTopicDescriber, SubscriptionType


class UniformAssignor:
    """Balanced, sticky assignment; no rack awareness (as in Kafka)."""

    name = "uniform"

    def assign(self, spec: GroupSpec, topics: SubscribedTopicDescriber) -> GroupAssignment:
        if not spec.members:
            return {}
        # Automatic garbage collection is suspended while the assignment is built: an output of
        # tens of thousands of dicts and tuples triggers many collections, and each older-generation
        # one walks the whole heap (up to half the time of a large assignment). Nothing here creates
        # reference cycles, and collection resumes (and catches up) on return. Inline rather than a
        # context manager, which alone would cost a tenth of a small group's assignment.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            if spec.subscription_type is SubscriptionType.HOMOGENEOUS:
                return assign_homogeneous(spec, topics)
            return assign_heterogeneous(spec, topics)
        finally:
            if paused:
                gc.enable()

    def fresh_owners(self, groups: FreshGroups):
        """`assign`'s owners for many new homogeneous groups at once: the partitions dealt out in
        canonical order (`_uniform_many`)."""
        from cohort.assignors._uniform_many import new_group_owners  # numpy only when asked

        return new_group_owners(groups.member_counts, groups.topic_group, groups.partition_counts)

    def __repr__(self) -> str:
        return "UniformAssignor()"

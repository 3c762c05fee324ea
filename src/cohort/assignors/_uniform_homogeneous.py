"""The uniform assignor for groups whose members all subscribe to the same topics.

Same rules as Kafka's UniformHomogeneousAssignmentBuilder (including the KAFKA-18688 stability
fix), in the canonical order: members by member id, topics by topic id, partitions ascending.

1. Number every partition of the subscribed topics globally (topic order, then partition), so a
   member's current partitions walked in canonical order are simply ascending global numbers.
2. `min_quota = P // M`; `P % M` members may hold one extra partition. Walking members in order,
   each member is offered `min_quota + 1` while extra slots remain, keeps its current partitions
   up to that quota and revokes the rest. A member that cannot fill the extra slot from what it
   already owns hands the slot back, unless every remaining member is needed to use up the extra
   slots; so a member that already holds `min_quota + 1` keeps it and a balanced assignment is a
   fixed point (KAFKA-18688).
3. Unassigned partitions are those nobody owned (ascending) followed by the revoked ones (member
   order, then ascending); they are dealt out in that order to the members still under quota.

Large groups run these rules on numpy arrays (`_uniform_homogeneous_arrays`, imported when
first needed); small groups take the equivalent plain code in `_uniform_small`.

Where the C extension `_uniform_native` is built (at install, when a compiler is there) it does all
of this in one pass for canonical current assignments, which is what the coordinator passes; the
Python builders remain the reference, and handle everything else (input to clean up, no compiler).
"""

from __future__ import annotations

from operator import attrgetter

from cohort.assignors._uniform_common import ints, known_topics, native
from cohort.assignors._uniform_small import SMALL_MEMBERS, SMALL_PARTITIONS, assign_homogeneous_small
from cohort.assignors.api import GroupAssignment, GroupSpec, SubscribedTopicDescriber


def assign_homogeneous(spec: GroupSpec, topics: SubscribedTopicDescriber,
                       vectorised: bool | None = None) -> GroupAssignment:
    """Assign; `vectorised` forces the numpy or the plain path (default: the C builder when it is
    built and the input is canonical, otherwise by group size)."""
    members = spec.members
    if not members:
        return {}
    first = next(iter(members))
    topic_ids, counts, hashes = known_topics(members[first].subscribed_topic_ids, topics)
    tried = False
    if vectorised is None and native is not None and type(members) is dict:
        # The coordinator keeps a group's view in member id order: the C builder reads the ids and
        # current assignments straight from it, unless they are not in order (NotImplemented).
        result = native.assign_homogeneous_members(members, topic_ids, counts, hashes, ints(max(counts, default=0)))
        if result is not NotImplemented:
            if result is not None:
                return result
            tried = True  # not canonical: the Python builders below
    member_ids = sorted(members)
    member_count = len(member_ids)
    if member_ids[0] is not first:  # the spec's first member by id names the subscription
        topic_ids, counts, hashes = known_topics(members[member_ids[0]].subscribed_topic_ids, topics)
    # Members in member id order already: `sorted` returned the same objects in the same order,
    # the comparison is by identity, and no member is looked up.
    if member_ids == list(members):
        currents = list(map(_assignment, members.values()))
    else:
        currents = list(map(_assignment, map(members.__getitem__, member_ids)))
    if vectorised is None and native is not None and not tried:
        result = native.assign_homogeneous(member_ids, currents, topic_ids, counts, hashes, ints(max(counts, default=0)))
        if result is not None:
            return result
    if vectorised is False or (vectorised is None and member_count <= SMALL_MEMBERS
                               and sum(counts) <= SMALL_PARTITIONS):
        return assign_homogeneous_small(member_ids, currents, topic_ids, counts)
    # numpy (0.18 s of CPU to import) only when asked: the C builder and the plain one serve the
    # coordinator's groups, and every `cohort serve` process would pay for it
    from cohort.assignors._uniform_homogeneous_arrays import assign_arrays

    return assign_arrays(member_ids, currents, topic_ids, counts)


_assignment = attrgetter("assignment")

"""Target assignment: build the group spec, call the assignor, diff against the current target.

Only members whose target changed get a `ConsumerGroupTargetAssignmentMember` record; the
`ConsumerGroupTargetAssignmentMetadata` record with the new assignment epoch always follows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from itertools import compress
from operator import and_, attrgetter, is_, not_
from typing import TYPE_CHECKING

from cohort.assignors.api import Assignor, GroupSpec, MemberSubscription, lookup_hashed
from cohort.coordinator.consumer_group import ConsumerGroup
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.metadata import MetadataImage
from cohort.coordinator.records import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from cohort.coordinator.selection import Selection, select

if TYPE_CHECKING:
    from cohort.coordinator.context import GroupContext

LagProvider = Callable[[str, uuid.UUID, int], Sequence[int] | None]


class GroupTopicDescriber:
    """SubscribedTopicDescriber over the metadata image, with lags fetched on demand."""

    __slots__ = ("_image", "_group_id", "_lag_provider", "_lags")

    def __init__(self, image: MetadataImage, group_id: str, lag_provider: LagProvider | None):
        self._image = image
        self._group_id = group_id
        self._lag_provider = lag_provider
        self._lags: dict[uuid.UUID, Sequence[int] | None] = {}

    def num_partitions(self, topic_id: uuid.UUID) -> int:
        topic = self._image.by_id.get(topic_id)
        return -1 if topic is None else topic.num_partitions

    def partition_counts(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        return [-1 if topic is None else topic.num_partitions for topic in map(self._image.by_id.get, topic_ids)]

    def partition_counts_hashed(self, topic_ids: list[uuid.UUID], hashes: list[int]) -> list[int]:
        topics = lookup_hashed(self._image.by_id, topic_ids, hashes)
        return [-1 if topic is None else topic.num_partitions for topic in topics]

    def racks_for_partition(self, topic_id: uuid.UUID, partition: int) -> frozenset[str]:
        topic = self._image.by_id.get(topic_id)
        if topic is None or partition >= len(topic.racks):
            return frozenset()
        return topic.racks[partition]

    def partition_racks(self, topic_id: uuid.UUID) -> Sequence[frozenset[str]]:
        topic = self._image.by_id.get(topic_id)
        return () if topic is None else topic.racks

    def partition_lags(self, topic_id: uuid.UUID) -> Sequence[int] | None:
        if self._lag_provider is None:
            return None
        if topic_id not in self._lags:
            topic = self._image.by_id.get(topic_id)
            self._lags[topic_id] = (None if topic is None
                                    else self._lag_provider(self._group_id, topic_id, topic.num_partitions))
        return self._lags[topic_id]


def compute_target(
    group: ConsumerGroup,
    image: MetadataImage,
    assignor: Assignor,
    group_epoch: int,
    lag_provider: LagProvider | None = None,
    describer: GroupTopicDescriber | None = None,
) -> dict[str, Assignment]:
    """The members whose target assignment changes, with their new target (`describer`: one whose
    lags were already fetched, else one over `image` and `lag_provider`)."""
    members = _member_specs(group, image)
    spec = GroupSpec.of(members)
    if describer is None:
        describer = GroupTopicDescriber(image, group.group_id, lag_provider)
    try:
        result = assignor.assign(spec, describer)
    except Exception as exc:  # an assignor bug must not take the shard down
        raise CoordinatorError(
            Errors.UNKNOWN_SERVER_ERROR,
            f"Failed to compute a new target assignment for epoch {group_epoch}: {exc}",
        ) from exc
    targets = group.target_assignment
    changed: dict[str, Assignment] = {}
    # Assignors hand back the very same mapping for members they did not move: those are
    # skipped in C-level passes, and only the others are looked at one by one.
    member_ids = list(members)
    news = list(map(result.get, member_ids))
    kept = map(and_, map(is_, news, map(_assignment, members.values())), map(targets.__contains__, member_ids))
    for member_id, new in compress(zip(member_ids, news), map(not_, kept)):
        new = EMPTY_ASSIGNMENT if new is None else _normalise(new)
        if new != targets.get(member_id):
            changed[member_id] = new
    group.spec_cache = members
    group.spec_dirty.clear()
    return changed


def _member_specs(group: ConsumerGroup, image: MetadataImage) -> dict[str, MemberSubscription]:
    """The assignor's view of every member.

    The group keeps the last spec and the set of members whose metadata or target changed since
    (replay maintains it), so a large group rebuilds only what changed. A new metadata image or a
    regex resolution invalidates the whole cache.
    """
    if group.spec_image is not image:
        if not _same_topic_ids(group.spec_topic_ids, group, image):
            group.spec_cache = {}
            group.spec_topic_ids = {}
        group.spec_image = image
    cache = group.spec_cache
    if cache:
        members = dict(cache)
        dirty = sorted(group.spec_dirty)
    else:
        members = {}
        dirty = sorted(group.members)
    ids_cache = group.spec_topic_ids
    by_name = image.by_name
    targets = group.target_assignment
    appended = 0
    for member_id in dirty:
        member = group.members.get(member_id)
        if member is None:
            members.pop(member_id, None)
            continue
        appended += member_id not in members
        cache_key = (member.subscribed_topic_names, member.subscribed_topic_regex)
        topic_ids = ids_cache.get(cache_key)
        if topic_ids is None:
            names = group.member_topic_names(member)
            topic_ids = ids_cache[cache_key] = _topic_ids(names, by_name)
        members[member_id] = MemberSubscription(
            topic_ids, member.rack_id, member.instance_id, targets.get(member_id, EMPTY_ASSIGNMENT))
    if cache and appended:
        # Members are kept in member id order: every assignor sorts the member ids, and sorting
        # 10,000 random UUIDs costs about 1.2 ms where sorting them in order (plus a few that
        # joined since, appended at the end) costs about 0.1. Joiners go to the end; once they
        # are more than a sixteenth of the group, the whole view is put back in order.
        group.spec_unsorted += appended
        if group.spec_unsorted * 16 > len(members):
            members = dict(sorted(members.items()))
            group.spec_unsorted = 0
    elif not cache:
        group.spec_unsorted = 0
    return members


def _same_topic_ids(ids_cache: dict, group: ConsumerGroup, image: MetadataImage) -> bool:
    """Whether every subscription the cached specs were built from names the same topic ids in
    ``image``: a new image only invalidates them if it touched a topic this group subscribes
    to (any topic created or deleted anywhere makes a new image)."""
    by_name = image.by_name
    return all(_topic_ids(group.member_topic_names_of(names, regex), by_name) == topic_ids
               for (names, regex), topic_ids in ids_cache.items())


def _topic_ids(names: frozenset[str], by_name: Mapping) -> frozenset:
    """The ids of the topics ``names`` that the image knows."""
    return frozenset(by_name[n].topic_id for n in names if n in by_name)


def warm_specs(group: ConsumerGroup, image: MetadataImage) -> None:
    """Build the assignor's view of every member now (after a load), so that the group's first
    rebalance costs what later ones do instead of rebuilding it for every member."""
    group.spec_cache = _member_specs(group, image)
    group.spec_dirty.clear()


_assignment = attrgetter("assignment")


def _normalise(assignment: Mapping) -> Assignment:
    if not assignment:
        return EMPTY_ASSIGNMENT
    for parts in assignment.values():
        if not parts or type(parts) is not tuple:
            return {t: tuple(sorted(ps)) for t, ps in assignment.items() if ps}
    return assignment


def selection(ctx: GroupContext, group: ConsumerGroup) -> Selection:
    """The group's assignor and whether it runs on a member (selection.py)."""
    return select(group, ctx.state.group_config(group.group_id).assignor, ctx.config.consumer_assignors)


def assignor_name(ctx: GroupContext, group: ConsumerGroup) -> str:
    """The members' most common server-side choice, else a client-side assignor all members
    support, else the group's `consumer.assignor`, else the broker default."""
    return selection(ctx, group).name


def write_target(ctx: GroupContext, gid: str, epoch: int, changed: Mapping[str, Assignment],
                 results: Mapping[str, tuple[int, int, bytes]] | None = None) -> None:
    """The records of a new target assignment: the changed members' (by member id, with what a
    client-side assignor gave each beside its partitions), then its epoch."""
    for member_id in sorted(changed):
        result = (0, 0, b"") if results is None else results.get(member_id, (0, 0, b""))
        ctx.append(ConsumerGroupTargetAssignmentMemberKey(gid, member_id),
                   ConsumerGroupTargetAssignmentMemberValue(changed[member_id], *result))
    ctx.append(ConsumerGroupTargetAssignmentMetadataKey(gid), ConsumerGroupTargetAssignmentMetadataValue(epoch))

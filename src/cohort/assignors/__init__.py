"""Partition assignors: pure functions from a group spec to an assignment, found by name."""

from __future__ import annotations

from cohort.assignors.api import (
    Assignor,
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignorError,
    SubscribedTopicDescriber,
    SubscriptionType,
    TopicDescriber,
    TopicMetadata,
    UnknownAssignorError,
)
from cohort.assignors.registry import available, get, register

__all__ = [
    "Assignor",
    "GroupAssignment",
    "GroupSpec",
    "MemberSubscription",
    "PartitionAssignorError",
    "SubscribedTopicDescriber",
    "SubscriptionType",
    "TopicDescriber",
    "TopicMetadata",
    "UnknownAssignorError",
    "available",
    "get",
    "register",
]

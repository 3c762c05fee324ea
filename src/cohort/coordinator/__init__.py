"""The group coordinator: pure state machines for KIP-848 consumer groups, classic groups, online
migration between them, and their offsets."""

from cohort.coordinator.config import CoordinatorConfig, GroupConfig
from cohort.coordinator.consumer_group import ConsumerGroup, ConsumerGroupMember, GroupState, GroupType
from cohort.coordinator.errors import CoordinatorError, Errors
from cohort.coordinator.metadata import MetadataImage, TopicImage
from cohort.coordinator.records import MemberState, Record, decode, encode
from cohort.coordinator.requests import *  # noqa: F401,F403  (the request/response vocabulary)
from cohort.coordinator.requests import Result
from cohort.coordinator.shard import GroupCoordinatorShard, partition_for

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupMember",
    "CoordinatorConfig",
    "CoordinatorError",
    "Errors",
    "GroupConfig",
    "GroupCoordinatorShard",
    "GroupState",
    "GroupType",
    "MemberState",
    "MetadataImage",
    "Record",
    "Result",
    "TopicImage",
    "decode",
    "encode",
    "partition_for",
]

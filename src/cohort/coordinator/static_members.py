"""The one check every protocol makes of a static member (Kafka's instance-id validation)."""

from __future__ import annotations

from collections.abc import Mapping

from cohort.coordinator.errors import CoordinatorError, Errors


def check_instance_owner(static_members: Mapping[str, str], member_id: str, instance_id: str) -> str:
    """The instance id must be known and owned by `member_id`: UNKNOWN_MEMBER_ID when nobody
    owns it, FENCED_INSTANCE_ID when another member does. Returns the owner's member id."""
    owner_id = static_members.get(instance_id)
    if owner_id is None:
        raise CoordinatorError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if owner_id != member_id:
        raise CoordinatorError(
            Errors.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member {owner_id}.",
        )
    return owner_id

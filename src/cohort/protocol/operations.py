"""Kafka's authorized-operations bitfields (KIP-430): the sum of ``1 << AclOperation`` over the
operations a resource type supports (``AclEntry.supportedOperations``). cohort has no authorizer
yet, so a client that asks is told every supported operation is allowed, as Kafka answers
without one; a client that does not ask gets ``NOT_REQUESTED``."""

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
NOT_REQUESTED = -(2**31)


def bitfield(*operations: int) -> int:
    return sum(1 << op for op in set(operations))


TOPIC_OPS = bitfield(READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS)
GROUP_OPS = bitfield(READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPS = bitfield(CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE)

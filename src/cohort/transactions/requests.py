"""The transaction coordinator's requests and answers, free of any wire format."""

from __future__ import annotations

from dataclasses import dataclass, field

from cohort.transactions.records import TxnState

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class InitProducerId:
    transactional_id: str
    timeout_ms: int
    producer_id: int = -1  # v3+: the id and epoch the producer has (KIP-360), -1 if none
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AddPartitions:
    """AddPartitionsToTxn for one transaction (and AddOffsetsToTxn, which adds the group's
    ``__consumer_offsets`` partition); ``verify_only`` checks without adding (KIP-890)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    verify_only: bool = False


@dataclass(frozen=True, slots=True)
class AddPartitionsResult:
    errors: dict[TopicPartition, int]  # every partition of the request


@dataclass(frozen=True, slots=True)
class EndTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    error: int


@dataclass(frozen=True, slots=True)
class CompleteTxn:
    """Written by the coordinator's host once every marker of a transaction is written."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers a transaction in PrepareCommit / PrepareAbort needs written to its partitions."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class DescribedTxn:
    transactional_id: str
    error: int = 0
    state: TxnState = TxnState.EMPTY
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = 0
    start_ms: int = -1
    partitions: tuple[TopicPartition, ...] = field(default=())

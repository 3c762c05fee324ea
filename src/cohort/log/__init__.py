"""Durable, append-only, segmented logs of record batches (partition data and cohort's own records)."""

from cohort.log.partition import AppendResult, OffsetOutOfRange, PartitionLog

__all__ = ["AppendResult", "OffsetOutOfRange", "PartitionLog"]

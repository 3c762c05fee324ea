"""`cohort transactions`: see and abort transactions, as Kafka's kafka-transactions.sh does.

  list                 every transactional id the coordinators know, with its producer and state
  describe             one transactional id: producer, epoch, state, timeout, start, partitions
  describe-producers   the producers a partition remembers, with the first offset of their open transaction
  find-hanging         transactions open longer than the maximum transaction timeout (plus 5 minutes)
  abort                write an ABORT marker for a hanging transaction on one partition: name it by
                       --start-offset (the producer is found with describe-producers) or by
                       --producer-id and --producer-epoch

Works against any Kafka-compatible cluster (ListTransactions, DescribeTransactions,
DescribeProducers and WriteTxnMarkers, through cohort's own wire client).
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Awaitable, Callable, TypeVar

from cohort.tooling import client, wire_admin
from cohort.tooling.client import ToolError, UsageError, emit, reported

T = TypeVar("T")


def _run(args: argparse.Namespace, fn: Callable[[wire_admin.WireAdmin], Awaitable[T]]) -> T:
    conf = client.client_config(args)
    return wire_admin.run(conf, args.timeout, fn)


@reported("transactions list")
def run_list(args: argparse.Namespace) -> int:
    rows = _run(args, lambda admin: admin.list_transactions(args.state, args.producer_id))
    emit(args, ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


@reported("transactions describe")
def run_describe(args: argparse.Namespace) -> int:
    if not args.transactional_id.strip():
        raise UsageError("--transactional-id must not be empty")
    d = _run(args, lambda admin: admin.describe_transaction(args.transactional_id))
    now = int(time.time() * 1000)
    start = d.start_time_ms
    rows = [(d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
             start if start >= 0 else "None", now - start if start >= 0 else "None",
             ",".join(f"{t}-{p}" for t, p in d.partitions))]
    emit(args, ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
         rows)
    return 0


@reported("transactions describe-producers")
def run_describe_producers(args: argparse.Namespace) -> int:
    producers = _run(args, lambda admin: admin.describe_producers(args.topic, args.partition))
    rows = [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
             p.current_transaction_start_offset if p.current_transaction_start_offset >= 0 else "None")
            for p in producers]
    emit(args, ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                "CurrentTransactionStartOffset"], rows)
    return 0


# Transaction states that hold no open transaction (Kafka's TransactionState).
_CLOSED = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}


@reported("transactions find-hanging")
def run_find_hanging(args: argparse.Namespace) -> int:
    """kafka-transactions.sh's rule: open longer than the maximum timeout plus 5 minutes."""
    threshold_ms = int(args.max_transaction_timeout * 60_000) + 5 * 60_000

    async def find(admin: wire_admin.WireAdmin) -> list:
        listed = await admin.list_transactions([], [])
        hanging = []
        for txn_id in sorted({t[0] for t in listed}):
            d = await admin.describe_transaction(txn_id)
            age = int(time.time() * 1000) - d.start_time_ms
            if d.state not in _CLOSED and d.start_time_ms >= 0 and age >= threshold_ms:
                hanging.append((d.transactional_id, d.coordinator_id, d.producer_id, d.producer_epoch, d.state,
                                age // 60_000, ",".join(f"{t}-{p}" for t, p in d.partitions)))
        return hanging

    emit(args, ["TransactionalId", "Coordinator", "ProducerId", "ProducerEpoch", "TransactionState",
                "DurationMinutes", "TopicPartitions"], _run(args, find))
    return 0


@reported("transactions abort")
def run_abort(args: argparse.Namespace) -> int:
    by_offset = args.start_offset is not None
    by_producer = args.producer_id is not None or args.producer_epoch is not None
    if by_offset == by_producer:
        raise UsageError("name the transaction with --start-offset, or with --producer-id and --producer-epoch")
    if by_producer and (args.producer_id is None or args.producer_epoch is None):
        raise UsageError("--producer-id and --producer-epoch go together")

    async def abort(admin: wire_admin.WireAdmin) -> tuple[int, int]:
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        if by_offset:
            matches = [p for p in await admin.describe_producers(args.topic, args.partition)
                       if p.current_transaction_start_offset == args.start_offset]
            if not matches:
                raise ToolError(f"no open transaction starts at offset {args.start_offset} of "
                                f"{args.topic}-{args.partition}")
            pid, epoch, coordinator_epoch = matches[0].producer_id, matches[0].producer_epoch, matches[0].coordinator_epoch
        await admin.abort_transaction(args.topic, args.partition, pid, epoch, coordinator_epoch)
        return pid, epoch

    pid, epoch = _run(args, abort)
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) on {args.topic}-{args.partition}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    txns = subparsers.add_parser("transactions", help="list, describe and abort transactions (kafka-transactions.sh)",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = txns.add_subparsers(dest="action", required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="transactional ids and their states")
    client.add_connection(p)
    p.add_argument("--state", action="append", default=[], metavar="STATE", help="only this state (repeatable)")
    p.add_argument("--producer-id", action="append", type=int, default=[], metavar="ID", help="only this producer")
    p.set_defaults(func=run_list)
    p = sub.add_parser("describe", help="one transactional id")
    client.add_connection(p)
    p.add_argument("--transactional-id", required=True, metavar="ID")
    p.set_defaults(func=run_describe)
    for name, func, help in (("describe-producers", run_describe_producers, "a partition's producers"),
                             ("abort", run_abort, "abort a hanging transaction on one partition")):
        p = sub.add_parser(name, help=help)
        client.add_connection(p)
        p.add_argument("--topic", required=True, metavar="TOPIC")
        p.add_argument("--partition", required=True, type=int, metavar="N")
        p.set_defaults(func=func)
        if name == "abort":
            p.add_argument("--start-offset", type=int, metavar="OFFSET", help="the transaction's first offset")
            p.add_argument("--producer-id", type=int, metavar="ID")
            p.add_argument("--producer-epoch", type=int, metavar="EPOCH")
            p.add_argument("--coordinator-epoch", type=int, default=-1, metavar="EPOCH")
    p = sub.add_parser("find-hanging", help="transactions open longer than the maximum timeout")
    client.add_connection(p)
    p.add_argument("--max-transaction-timeout", type=float, default=15, metavar="MINUTES",
                   help="the brokers' transaction.max.timeout.ms in minutes (default 15)")
    p.set_defaults(func=run_find_hanging)
    return txns

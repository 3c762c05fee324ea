"""`cohort transactions`: see and abort transactions, as Kafka's kafka-transactions.sh does.

  list                 every transactional id the coordinators know, with its producer and state
  describe             one transactional id: producer, epoch, state, timeout, start, partitions
  describe-producers   the producers a partition remembers, with the first offset of their open transaction
  find-hanging         transactions open longer than the maximum transaction timeout (plus 5 minutes)
  abort                write an ABORT marker for a hanging transaction on one partition: name it by
                       --start-offset (the producer is found with describe-producers) or by
                       --producer-id and --producer-epoch

Works against any Kafka-compatible cluster (ListTransactions, DescribeTransactions,
DescribeProducers and WriteTxnMarkers, through kafka-python's admin client).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from cohort.tooling import client
from cohort.tooling.client import ToolError, UsageError, emit, reported


def _admin(args: argparse.Namespace) -> Any:
    return client.kafka_python_admin(args)


def _call(fn: Any, *a: Any, **kw: Any) -> Any:
    from kafka.errors import KafkaError

    try:
        return fn(*a, **kw)
    except KafkaError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from None


@reported("transactions list")
def run_list(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        listed = _call(admin.list_transactions, state_filters=args.state or None,
                       producer_id_filters=args.producer_id or None)
    finally:
        admin.close()
    rows = sorted((t.transactional_id, node, t.producer_id, t.state.value)
                  for node, txns in listed.items() for t in txns)
    emit(args, ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


@reported("transactions describe")
def run_describe(args: argparse.Namespace) -> int:
    if not args.transactional_id.strip():
        raise UsageError("--transactional-id must not be empty")
    admin = _admin(args)
    try:
        found = _call(admin.describe_transactions, [args.transactional_id])
    finally:
        admin.close()
    d = found[args.transactional_id]
    now = int(time.time() * 1000)
    start = d.transaction_start_time_ms
    rows = [(d.coordinator_id, args.transactional_id, d.producer_id, d.producer_epoch, d.state.value,
             d.transaction_timeout_ms, start if start >= 0 else "None", now - start if start >= 0 else "None",
             ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions)))]
    emit(args, ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
         rows)
    return 0


def _producers(admin: Any, topic: str, partition: int) -> list:
    from kafka.structs import TopicPartition

    states = _call(admin.describe_producers, [TopicPartition(topic, partition)])
    return list(states[TopicPartition(topic, partition)].active_producers)


@reported("transactions describe-producers")
def run_describe_producers(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        producers = _producers(admin, args.topic, args.partition)
    finally:
        admin.close()
    rows = [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
             p.current_transaction_start_offset if p.current_transaction_start_offset >= 0 else "None")
            for p in sorted(producers)]
    emit(args, ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                "CurrentTransactionStartOffset"], rows)
    return 0


@reported("transactions find-hanging")
def run_find_hanging(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        hanging = _call(admin.find_hanging_transactions,
                        max_transaction_timeout_ms=int(args.max_transaction_timeout * 60_000))
    finally:
        admin.close()
    rows = [(h["transactional_id"], h["coordinator_id"], h["producer_id"], h["producer_epoch"], h["state"],
             h["age_ms"] // 60_000, ",".join(f"{tp.topic}-{tp.partition}" for tp in h["topic_partitions"]))
            for h in hanging]
    emit(args, ["TransactionalId", "Coordinator", "ProducerId", "ProducerEpoch", "TransactionState",
                "DurationMinutes", "TopicPartitions"], rows)
    return 0


@reported("transactions abort")
def run_abort(args: argparse.Namespace) -> int:
    from kafka.structs import TopicPartition

    by_offset = args.start_offset is not None
    by_producer = args.producer_id is not None or args.producer_epoch is not None
    if by_offset == by_producer:
        raise UsageError("name the transaction with --start-offset, or with --producer-id and --producer-epoch")
    if by_producer and (args.producer_id is None or args.producer_epoch is None):
        raise UsageError("--producer-id and --producer-epoch go together")
    admin = _admin(args)
    try:
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        if by_offset:
            matches = [p for p in _producers(admin, args.topic, args.partition)
                       if p.current_transaction_start_offset == args.start_offset]
            if not matches:
                raise ToolError(f"no open transaction starts at offset {args.start_offset} of "
                                f"{args.topic}-{args.partition}")
            pid, epoch, coordinator_epoch = matches[0].producer_id, matches[0].producer_epoch, matches[0].coordinator_epoch
        spec = _abort_spec(TopicPartition(args.topic, args.partition), pid, epoch, coordinator_epoch)
        _call(admin.abort_transaction, spec)
    finally:
        admin.close()
    print(f"Aborted the transaction of producer {pid} (epoch {epoch}) on {args.topic}-{args.partition}")
    return 0


def _abort_spec(tp: Any, pid: int, epoch: int, coordinator_epoch: int) -> Any:
    from kafka.admin import AbortTransactionSpec

    return AbortTransactionSpec(tp, pid, epoch, coordinator_epoch)


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

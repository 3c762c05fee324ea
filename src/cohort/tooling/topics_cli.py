"""`cohort topics`: kafka-topics.sh as subcommands.

    cohort topics list     [--exclude-internal]
    cohort topics describe [--topic T ...] [--exclude-internal]
    cohort topics create   --topic T [--partitions N] [--replication-factor 1] [--config K=V ...] [--if-not-exists]
    cohort topics delete   --topic T [...] [--if-exists]
    cohort topics alter    --topic T --partitions N

Each also takes --bootstrap-server, --command-config, --timeout and --output table|json.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cohort.tooling import client
from cohort.tooling.client import ToolError, UsageError, emit, reported, wait
from cohort.tooling.configs_cli import source_name


def _listed(admin: Any, args: argparse.Namespace) -> list[Any]:
    meta = admin.list_topics(timeout=args.timeout)
    topics = [t for name, t in sorted(meta.topics.items())
              if not (args.exclude_internal and name.startswith("__"))]
    return topics


@reported("topics list")
def run_list(args: argparse.Namespace) -> int:
    admin = client.admin(args)
    names = [t.topic for t in _listed(admin, args)]
    if args.output == "json":
        emit(args, [], [], names)
    else:
        for name in names:
            print(name)
    return 0


def _describe(admin: Any, names: list[str], timeout: float) -> list[dict]:
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import ConfigResource

    futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    resources = {n: ConfigResource(ConfigResource.Type.TOPIC, n) for n in names}
    config_futures = admin.describe_configs(list(resources.values()), request_timeout=timeout)
    out = []
    for name in names:
        try:
            desc = wait(admin, futures[name], timeout)
        except KafkaException as exc:
            raise ToolError(f"Topic '{name}': {client.message(exc)}") from None
        entries = wait(admin, config_futures[resources[name]], timeout)
        overrides = {k: e.value for k, e in sorted(entries.items()) if source_name(e.source) == "DYNAMIC_TOPIC_CONFIG"}
        out.append({
            "topic": name, "topic_id": str(desc.topic_id), "internal": desc.is_internal,
            "partition_count": len(desc.partitions),
            "replication_factor": len(desc.partitions[0].replicas) if desc.partitions else 0,
            "configs": overrides,
            "partitions": [{"partition": p.id, "leader": p.leader.id if p.leader else -1,
                            "replicas": [r.id for r in p.replicas], "isr": [r.id for r in p.isr]}
                           for p in sorted(desc.partitions, key=lambda p: p.id)],
        })
    return out


@reported("topics describe")
def run_describe(args: argparse.Namespace) -> int:
    admin = client.admin(args)
    names = args.topic or [t.topic for t in _listed(admin, args)]
    described = _describe(admin, names, args.timeout)
    if args.output == "json":
        emit(args, [], [], described)
        return 0
    for t in described:
        configs = ",".join(f"{k}={v}" for k, v in t["configs"].items())
        print(f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partition_count']}\t"
              f"ReplicationFactor: {t['replication_factor']}\tConfigs: {configs}")
        for p in t["partitions"]:
            print(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                  f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}")
    return 0


def _configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--config {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


@reported("topics create")
def run_create(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    if len(args.topic) != 1:
        raise UsageError("name one topic with --topic")
    name = args.topic[0]
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("--partitions must be at least 1")
    topic = NewTopic(name, num_partitions=args.partitions or -1, replication_factor=args.replication_factor or -1,
                     config=_configs(args.config))
    admin = client.admin(args)
    try:
        wait(admin, admin.create_topics([topic], request_timeout=args.timeout)[name], args.timeout)
    except KafkaException as exc:
        if args.if_not_exists and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return 0
        raise
    print(f"Created topic {name}.")
    return 0


@reported("topics delete")
def run_delete(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaError, KafkaException

    if not args.topic:
        raise UsageError("name a topic with --topic")
    admin = client.admin(args)
    futures = admin.delete_topics(args.topic, request_timeout=args.timeout)
    for name in args.topic:
        try:
            wait(admin, futures[name], args.timeout)
        except KafkaException as exc:
            if args.if_exists and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise ToolError(f"Topic '{name}': {client.message(exc)}") from None
        print(f"Deleted topic {name}.")
    return 0


@reported("topics alter")
def run_alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import NewPartitions

    if len(args.topic) != 1:
        raise UsageError("name one topic with --topic")
    if args.partitions is None:
        raise UsageError("--partitions is required (the new total)")
    name = args.topic[0]
    admin = client.admin(args)
    wait(admin, admin.create_partitions([NewPartitions(name, args.partitions)], request_timeout=args.timeout)[name],
         args.timeout)
    print(f"Topic {name} now has {args.partitions} partitions.", file=sys.stdout)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    topics = subparsers.add_parser("topics", help="list, describe, create, delete and alter topics (kafka-topics.sh)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = topics.add_subparsers(dest="action", required=True, metavar="COMMAND")
    for name, func, help in (("list", run_list, "topic names"), ("describe", run_describe, "partitions and configs"),
                             ("create", run_create, "create a topic"), ("delete", run_delete, "delete topics"),
                             ("alter", run_alter, "add partitions")):
        p = sub.add_parser(name, help=help, description=help)
        client.add_connection(p)
        p.add_argument("--topic", action="append", default=[], metavar="TOPIC")
        p.set_defaults(func=func)
        if name in ("list", "describe"):
            p.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets")
        if name in ("create", "alter"):
            p.add_argument("--partitions", type=int, metavar="N")
        if name == "create":
            p.add_argument("--replication-factor", type=int, metavar="N")
            p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
            p.add_argument("--if-not-exists", action="store_true")
        if name == "delete":
            p.add_argument("--if-exists", action="store_true")
    return topics

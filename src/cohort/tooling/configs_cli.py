"""`cohort configs`: kafka-configs.sh for topics, groups and brokers.

    cohort configs describe --entity-type topics|groups|brokers --entity-name N [--all]
    cohort configs alter    --entity-type topics|groups|brokers --entity-name N
                            [--add-config K=V[,K=V...]] [--delete-config K[,K...]]

`describe` shows the values set on the entity (with `--all`, every value and where it comes from);
`alter` changes them with IncrementalAlterConfigs. A value holding commas goes in brackets, as in
Kafka: `--add-config cleanup.policy=[compact,delete]`. Also takes --bootstrap-server,
--command-config, --timeout and --output table|json.
"""

from __future__ import annotations

import argparse
from typing import Any

from cohort.tooling import client
from cohort.tooling.client import UsageError, emit, reported, wait

SOURCES = {"DYNAMIC_TOPIC_CONFIG": "topic", "DYNAMIC_BROKER_CONFIG": "dynamic-broker",
           "DYNAMIC_DEFAULT_BROKER_CONFIG": "dynamic-default-broker", "STATIC_BROKER_CONFIG": "static-broker",
           "DEFAULT_CONFIG": "default", "GROUP_CONFIG": "group"}
OWN = {"topics": {"DYNAMIC_TOPIC_CONFIG"}, "groups": {"GROUP_CONFIG"},
       "brokers": {"DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG"}}


def source_name(source: Any) -> str:
    """A ConfigEntry's source by name (confluent-kafka hands some back as a bare int)."""
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(source).name if isinstance(source, int) else source.name
    except ValueError:
        return "UNKNOWN_CONFIG"


def _resource(args: argparse.Namespace) -> Any:
    from confluent_kafka.admin import ConfigResource

    kind = {"topics": ConfigResource.Type.TOPIC, "groups": ConfigResource.Type.GROUP,
            "brokers": ConfigResource.Type.BROKER}[args.entity_type]
    if args.entity_default:
        # Kafka addresses the cluster-wide defaults as broker "", which librdkafka refuses to send.
        raise UsageError("--entity-default is not available through librdkafka; set the value on each broker with "
                         "--entity-type brokers --entity-name ID")
    if not args.entity_name:
        raise UsageError("name the entity with --entity-name (or --entity-default for brokers)")
    return ConfigResource(kind, args.entity_name)


def split_assignments(text: str) -> list[tuple[str, str]]:
    """`a=1,b=[x,y]` -> [("a", "1"), ("b", "x,y")] (brackets keep commas, as kafka-configs does)."""
    out, depth, item = [], 0, ""
    for ch in text + ",":
        if ch == "," and depth == 0:
            if item.strip():
                key, sep, value = item.partition("=")
                if not sep or not key.strip():
                    raise UsageError(f"--add-config: expected KEY=VALUE, got {item.strip()!r}")
                value = value.strip()
                if value.startswith("[") and value.endswith("]"):
                    value = value[1:-1]
                out.append((key.strip(), value))
            item = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        item += ch
    return out


@reported("configs describe")
def run_describe(args: argparse.Namespace) -> int:
    resource = _resource(args)
    admin = client.admin(args)
    entries = wait(admin, admin.describe_configs([resource], request_timeout=args.timeout)[resource], args.timeout)
    shown = []
    for name, e in sorted(entries.items()):
        source = source_name(e.source)
        if not args.all and source not in OWN[args.entity_type]:
            continue
        shown.append({"name": name, "value": None if e.is_sensitive else e.value, "sensitive": e.is_sensitive,
                      "read_only": e.is_read_only, "source": SOURCES.get(source, source.lower())})
    what = f"{args.entity_type[:-1]} {args.entity_name}"
    if args.output == "json":
        emit(args, [], [], shown)
        return 0
    print(f"{'All' if args.all else 'Dynamic'} configs for {what} are:")
    for c in shown:
        value = "[hidden]" if c["sensitive"] else c["value"]
        print(f"  {c['name']}={'' if value is None else value} sensitive={str(c['sensitive']).lower()} "
              f"source={c['source']}")
    return 0


@reported("configs alter")
def run_alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    added = [pair for text in args.add_config for pair in split_assignments(text)]
    deleted = [k.strip() for text in args.delete_config for k in text.split(",") if k.strip()]
    if not added and not deleted:
        raise UsageError("give --add-config KEY=VALUE and/or --delete-config KEY")
    both = {k for k, _ in added} & set(deleted)
    if both:
        raise UsageError(f"{', '.join(sorted(both))} is both added and deleted")
    base = _resource(args)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in added]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deleted]
    resource = ConfigResource(base.restype, base.name, incremental_configs=entries)
    admin = client.admin(args)
    wait(admin, admin.incremental_alter_configs([resource], request_timeout=args.timeout)[resource], args.timeout)
    what = f"{args.entity_type[:-1]} {args.entity_name}"
    print(f"Completed updating config for {what}.")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    configs = subparsers.add_parser("configs", help="describe and alter topic, group and broker configs "
                                    "(kafka-configs.sh)", description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = configs.add_subparsers(dest="action", required=True, metavar="COMMAND")
    for name, func in (("describe", run_describe), ("alter", run_alter)):
        p = sub.add_parser(name, help=f"{name} configs")
        client.add_connection(p)
        p.add_argument("--entity-type", required=True, choices=("topics", "groups", "brokers"))
        p.add_argument("--entity-name", metavar="NAME", help="topic, group, or broker id")
        p.add_argument("--entity-default", action="store_true", help="the cluster-wide broker defaults (refused: "
                       "librdkafka cannot address them)")
        if name == "describe":
            p.add_argument("--all", action="store_true", help="every value, defaults included")
        else:
            p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]")
            p.add_argument("--delete-config", action="append", default=[], metavar="K[,K...]")
        p.set_defaults(func=func)
    return configs

"""`cohort groups describe`: Kafka's consumer-group view, plus each member's assigned lag.

    cohort groups describe --group G --bootstrap HOST:PORT [--lag] [--timeout SECONDS]

prints the columns of `kafka-consumer-groups.sh --describe` (GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID), one row per partition the group owns or has
committed. With `--lag`, a second table gives each member's partition count and assigned lag —
the quantity the `lag` assignor balances — and the group's imbalance (heaviest / mean).

It is an ordinary Kafka admin client (confluent-kafka's AdminClient: DescribeConsumerGroups,
ListConsumerGroupOffsets, ListOffsets, DescribeConfigs), so it works against any broker;
ConsumerGroupDescribe itself is unchanged. As in Kafka's tool, a partition without a committed
offset shows `-` for CURRENT-OFFSET and LAG. Its share of the member's assigned lag follows the
coordinator's rule: the group's `consumer.offset.reset` (read with DescribeConfigs; `latest` when
the broker has no such config) — `latest` adds 0, `earliest` the whole log (end - start).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

EXIT_USAGE, EXIT_FAILURE = 2, 1
PARTITION_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                     "CLIENT-ID")
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNED-LAG")


@dataclass(frozen=True)
class Member:
    member_id: str
    host: str
    client_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupView:
    """What the admin APIs returned about one group."""

    group_id: str
    state: str
    assignor: str
    members: tuple[Member, ...]
    committed: Mapping[tuple[str, int], int]  # only partitions with a committed offset
    end_offsets: Mapping[tuple[str, int], int]
    start_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    reset_earliest: bool = False  # the group's consumer.offset.reset


def partition_rows(view: GroupView) -> list[tuple[str, ...]]:
    """Kafka's --describe rows: owned partitions (with their member), then committed-only ones."""
    owner = {tp: m for m in view.members for tp in m.partitions}
    rows = []
    for topic, partition in sorted(owner.keys() | view.committed.keys()):
        tp = (topic, partition)
        current, end = view.committed.get(tp), view.end_offsets.get(tp)
        lag = "-" if current is None or end is None else str(max(end - current, 0))
        m = owner.get(tp)
        rows.append((view.group_id, topic, str(partition), "-" if current is None else str(current),
                     "-" if end is None else str(end), lag,
                     "-" if m is None else m.member_id, "-" if m is None else m.host, "-" if m is None else m.client_id))
    return rows


def partition_lag(view: GroupView, tp: tuple[str, int]) -> int:
    """A partition's lag as the coordinator counts it (reset policy for a missing or deleted commit)."""
    end = view.end_offsets.get(tp)
    if end is None:
        return 0
    start, current = view.start_offsets.get(tp, 0), view.committed.get(tp)
    if current is None or current < start:
        return max(end - start, 0) if view.reset_earliest else 0
    return max(end - current, 0)


def member_lags(view: GroupView) -> dict[str, int]:
    """Each member's assigned lag: the sum of its partitions' lags."""
    return {m.member_id: sum(partition_lag(view, tp) for tp in m.partitions) for m in view.members}


def member_rows(view: GroupView, lags: dict[str, int]) -> list[tuple[str, ...]]:
    """One row per member, with its assigned lag from `lags` (`member_lags`)."""
    return [(view.group_id, m.member_id, m.host, m.client_id, str(len(m.partitions)), str(lags[m.member_id]))
            for m in sorted(view.members, key=lambda m: m.member_id)]


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = [" ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in (columns, *rows)]
    return "\n".join(lines)


def render(view: GroupView, with_lag: bool) -> str:
    out = [f"Consumer group '{view.group_id}' ({view.state}, assignor {view.assignor or '-'}, "
           f"offset reset {'earliest' if view.reset_earliest else 'latest'})", "",
           table(PARTITION_COLUMNS, partition_rows(view))]
    if with_lag:
        from cohort.coordinator.lag import imbalance  # the coordinator's own measure; imported only when asked for

        lags = member_lags(view)
        out += ["", table(MEMBER_COLUMNS, member_rows(view, lags)), "",
                f"IMBALANCE (heaviest / mean assigned lag): {imbalance(lags.values()):.2f}"]
    return "\n".join(out)


class ToolError(Exception):
    """A failure to report on one line (exit status 1)."""


def fetch(bootstrap: str, group_id: str, timeout: float) -> GroupView:
    """Ask the cluster (DescribeConsumerGroups, ListConsumerGroupOffsets, ListOffsets latest)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000)})
    try:
        desc = admin.describe_consumer_groups([group_id], request_timeout=timeout)[group_id].result(timeout)
        committed_tps = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=timeout)[group_id].result(timeout)
        members = tuple(Member(m.member_id, m.host, m.client_id,
                               tuple(sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or []))))
                        for m in desc.members)
        committed = {(tp.topic, tp.partition): tp.offset for tp in committed_tps.topic_partitions or []
                     if tp.offset >= 0}
        wanted = {tp for m in members for tp in m.partitions} | committed.keys()
        ends, starts = {}, {}
        for spec, out in ((OffsetSpec.latest(), ends), (OffsetSpec.earliest(), starts)):
            if wanted:
                futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in sorted(wanted)},
                                             request_timeout=timeout)
                for tp, fut in futures.items():
                    out[(tp.topic, tp.partition)] = fut.result(timeout).offset
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        raise ToolError(getattr(error, "str", lambda: str(error))()) from None
    except TimeoutError:
        raise ToolError(f"no answer from {bootstrap} within {timeout:g} s") from None
    state = getattr(desc.state, "name", str(desc.state))
    return GroupView(group_id, state, desc.partition_assignor or "", members, committed, ends, starts,
                     _offset_reset(admin, group_id, timeout) == "earliest")


def _offset_reset(admin, group_id: str, timeout: float) -> str:
    """The group's consumer.offset.reset; `latest` when the broker does not know group configs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.GROUP, group_id)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
    except (KafkaException, TimeoutError):
        return "latest"
    entry = entries.get("consumer.offset.reset")
    return "latest" if entry is None or entry.value is None else entry.value


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `groups` (with `describe`) on a subparsers object; parsed args carry `func` -> exit code."""
    groups = subparsers.add_parser("groups", help="inspect consumer groups on a running broker",
                                   description="Inspect consumer groups through the Kafka admin APIs.")
    sub = groups.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")
    describe = sub.add_parser("describe", help="a group's partitions, offsets and lag (kafka-consumer-groups --describe)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    describe.add_argument("--group", required=True, help="the consumer group id")
    describe.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="a broker to connect to")
    describe.add_argument("--lag", action="store_true", help="also print each member's assigned lag")
    describe.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="per request (default 10)")
    describe.set_defaults(func=run_describe)
    return groups


def run_describe(args: argparse.Namespace) -> int:
    if not args.group.strip():
        print("cohort groups describe: error: --group must not be empty", file=sys.stderr)
        return EXIT_USAGE
    if args.timeout <= 0:
        print("cohort groups describe: error: --timeout must be positive", file=sys.stderr)
        return EXIT_USAGE
    try:
        view = fetch(args.bootstrap, args.group, args.timeout)
    except ToolError as exc:
        print(f"cohort groups describe: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(render(view, args.lag))
    return 0

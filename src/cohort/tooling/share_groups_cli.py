"""`cohort share-groups`: share groups (KIP-932) as Kafka's kafka-share-groups.sh shows and changes them.

  list             share groups, with --state their states (--state STATE: only those)
  describe         one group (--group) or all (--all-groups): --offsets (the default: each
                   share-partition's start offset and lag), --members, or --state
  reset-offsets    where an empty group starts: --to-earliest, --to-latest or --to-datetime,
                   for --topic T or --all-topics; --dry-run shows it, --execute does it
  delete-offsets   forget the group's state of --topic T (repeatable); the group must be empty
  delete           delete an empty group (--group, repeatable, or --all-groups)

Works against any Kafka 4.1+ cluster (ListGroups, ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups, through cohort's wire client).
"""

from __future__ import annotations

import argparse
import sys
import datetime as dt
from typing import Any, Awaitable, Callable, TypeVar

from cohort.tooling import client, wire_admin
from cohort.tooling.client import ToolError, UsageError, emit, reported

T = TypeVar("T")
STATES = ("Empty", "Stable", "Dead")
EARLIEST, LATEST = -2, -1


def _run(args: argparse.Namespace, fn: Callable[[wire_admin.WireAdmin], Awaitable[T]]) -> T:
    return wire_admin.run(client.client_config(args), args.timeout, fn)


def _groups(args: argparse.Namespace, admin: wire_admin.WireAdmin) -> Awaitable[list[str]]:
    async def named() -> list[str]:
        if args.all_groups:
            return sorted(await admin.share_groups())
        return list(dict.fromkeys(args.group))
    return named()


def _check_group_choice(args: argparse.Namespace) -> None:
    if bool(args.group) == bool(args.all_groups):
        raise UsageError("name the groups with --group, or use --all-groups")
    if any(not g.strip() for g in args.group):
        raise UsageError("--group must not be empty")


@reported("share-groups list")
def run_list(args: argparse.Namespace) -> int:
    wanted = None
    if args.state:
        wanted = {s.strip().lower() for s in args.state.split(",") if s.strip()}
        unknown = wanted - {s.lower() for s in STATES}
        if unknown:
            raise UsageError(f"--state {','.join(sorted(unknown))}: expected one of {', '.join(STATES)}")
    groups = _run(args, lambda admin: admin.share_groups())
    rows = [(g, s) for g, s in sorted(groups.items()) if wanted is None or s.lower() in wanted]
    if args.state is not None or args.output == "json":
        emit(args, ["GROUP", "STATE"], rows)
    else:
        emit(args, ["GROUP"], [(g,) for g, _ in rows])
    return 0


@reported("share-groups describe")
def run_describe(args: argparse.Namespace) -> int:
    _check_group_choice(args)
    views = [v for v in ("offsets", "members", "state") if getattr(args, v)]
    if len(views) > 1:
        raise UsageError("--offsets, --members and --state go one at a time")
    view = views[0] if views else "offsets"

    async def describe(admin: wire_admin.WireAdmin) -> list:
        rows: list = []
        for group in await _groups(args, admin):
            node_id, g = await admin.describe_share_group(group)
            if view == "state":
                rows.append((group, node_id, g.group_state, g.group_epoch, g.assignment_epoch, len(g.members)))
            elif view == "members":
                for m in g.members:
                    assignment = ",".join(f"{tp.topic_name}:{','.join(map(str, tp.partitions))}"
                                          for tp in m.assignment.topic_partitions)
                    count = sum(len(tp.partitions) for tp in m.assignment.topic_partitions)
                    rows.append((group, m.member_id, m.client_host, m.client_id, count, m.member_epoch,
                                 assignment or "-"))
            else:
                offsets = await admin.share_offsets(group)
                if not offsets:
                    rows.append((group, "-", "-", "-", "-"))
                for (topic, partition), (start, lag) in sorted(offsets.items()):
                    rows.append((group, topic, partition, start if start >= 0 else "-", lag if lag >= 0 else "-"))
        return rows

    rows = _run(args, describe)
    if view == "state":
        emit(args, ["GROUP", "COORDINATOR (ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"], rows)
    elif view == "members":
        emit(args, ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"], rows)
    else:
        emit(args, ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], rows)
    return 0


def _timestamp(text: str) -> int:
    """--to-datetime: Kafka's YYYY-MM-DDTHH:mm:SS.sss (local time unless a zone is given)."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


@reported("share-groups reset-offsets")
def run_reset(args: argparse.Namespace) -> int:
    targets = [t for t in ("to_earliest", "to_latest", "to_datetime") if getattr(args, t)]
    if len(targets) != 1:
        raise UsageError("give one of --to-earliest, --to-latest, --to-datetime")
    if args.dry_run == args.execute:
        raise UsageError("give one of --dry-run and --execute")
    if bool(args.topic) == args.all_topics:
        raise UsageError("name the topics with --topic, or use --all-topics")
    timestamp = EARLIEST if args.to_earliest else LATEST if args.to_latest else _timestamp(args.to_datetime)

    async def reset(admin: wire_admin.WireAdmin) -> list:
        try:
            _, g = await admin.describe_share_group(args.group)
        except wire_admin.KafkaError as exc:
            if "GROUP_ID_NOT_FOUND" not in str(exc) or "not a share group" in str(exc):
                raise
            g = None  # a group that does not exist yet may be given its offsets (KAFKA-19662)
        if g is not None and g.members:
            raise ToolError(f"group {args.group} has active members ({len(g.members)}): stop them first")
        if args.all_topics:
            topics = [(t, None) for t in sorted({t for t, _ in await admin.share_offsets(args.group)})]
        else:
            topics = client.topic_partitions(args.topic)
        offsets: dict[tuple[str, int], int] = {}
        for topic, partitions in topics:
            if partitions is None:
                meta = await admin.metadata((topic,))
                (t,) = meta.topics
                if t.error_code:
                    raise wire_admin.KafkaError(t.error_code, f"topic {topic}")
                partitions = sorted(p.partition_index for p in t.partitions)
            found = await admin.list_offsets(topic, partitions, timestamp)
            if timestamp >= 0:  # no record that late: the end
                ends = await admin.list_offsets(topic, partitions, LATEST)
                found = {p: (o if o >= 0 else ends[p]) for p, o in found.items()}
            offsets.update(((topic, p), o) for p, o in found.items())
        errors = await admin.alter_share_offsets(args.group, offsets) if args.execute else {}
        failed = {tp: code for tp, code in errors.items() if code}
        if failed:
            tp, code = next(iter(sorted(failed.items())))
            raise ToolError(f"{wire_admin.error_name(code)} for {tp[0]}-{tp[1]}")
        return [(args.group, t, p, o) for (t, p), o in sorted(offsets.items())]

    emit(args, ["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"], _run(args, reset))
    return 0


@reported("share-groups delete-offsets")
def run_delete_offsets(args: argparse.Namespace) -> int:
    results = _run(args, lambda admin: admin.delete_share_offsets(args.group, list(dict.fromkeys(args.topic))))
    rows = [(t, "Successful" if not code else f"Error: {wire_admin.error_name(code)}") for t, code in results.items()]
    emit(args, ["TOPIC", "STATUS"], rows)
    return 1 if any(results.values()) else 0


@reported("share-groups delete")
def run_delete(args: argparse.Namespace) -> int:
    _check_group_choice(args)

    async def delete(admin: wire_admin.WireAdmin) -> list:
        return [(g, await admin.delete_group(g)) for g in await _groups(args, admin)]

    results = _run(args, delete)
    if not results:
        print("No share groups.", file=sys.stderr)
        return 0
    for group, code in results:
        if code:
            print(f"Deletion of share group '{group}' failed: {wire_admin.error_name(code)}")
        else:
            print(f"Deletion of requested share group '{group}' was successful.")
    return 1 if any(code for _, code in results) else 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    top = subparsers.add_parser("share-groups", help="list, describe, reset and delete share groups "
                                "(kafka-share-groups.sh)", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="action", required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="share groups")
    client.add_connection(p)
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE]",
                   help="show the states; with a value, only groups in those states")
    p.set_defaults(func=run_list)
    p = sub.add_parser("describe", help="a group's offsets, members or state")
    client.add_connection(p)
    p.add_argument("--group", action="append", default=[], metavar="GROUP")
    p.add_argument("--all-groups", action="store_true")
    p.add_argument("--offsets", action="store_true", help="start offset and lag per share-partition (default)")
    p.add_argument("--members", action="store_true", help="members and their assignments")
    p.add_argument("--state", action="store_true", help="state, epochs and member count")
    p.set_defaults(func=run_describe)
    p = sub.add_parser("reset-offsets", help="set where an empty group starts")
    client.add_connection(p)
    p.add_argument("--group", required=True, metavar="GROUP")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:PARTITION,...]")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has state for")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--execute", action="store_true")
    p.set_defaults(func=run_reset)
    p = sub.add_parser("delete-offsets", help="forget a group's state of topics")
    client.add_connection(p)
    p.add_argument("--group", required=True, metavar="GROUP")
    p.add_argument("--topic", action="append", required=True, metavar="TOPIC")
    p.set_defaults(func=run_delete_offsets)
    p = sub.add_parser("delete", help="delete empty groups")
    client.add_connection(p)
    p.add_argument("--group", action="append", default=[], metavar="GROUP")
    p.add_argument("--all-groups", action="store_true")
    p.set_defaults(func=run_delete)
    return top

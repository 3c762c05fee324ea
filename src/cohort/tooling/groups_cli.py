"""`cohort groups`: kafka-consumer-groups.sh as subcommands, with its flags and answers.

    cohort groups list           [--state [S,...]] [--type [T,...]]
    cohort groups describe       --group G | --all-groups  [--offsets | --members [--verbose] | --state] [--lag]
    cohort groups reset-offsets  --group G | --all-groups  --topic T[:P,...] | --all-topics
                                 --to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N
                                 | --to-datetime YYYY-MM-DDTHH:mm:SS.sss | --by-duration PnDTnHnMnS | --from-file CSV
                                 [--dry-run (default) | --execute] [--export]
    cohort groups delete         --group G [--group G2 ...] | --all-groups
    cohort groups delete-offsets --group G --topic T[:P,...]

Each also takes --bootstrap-server, --command-config, --timeout and --output table|json. The
describe offsets view has Kafka's columns (GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
CONSUMER-ID HOST CLIENT-ID); `--lag` adds each member's assigned lag (what the `lag` assignor
balances; a partition without a commit counts by the group's `consumer.offset.reset`) and the
group's imbalance. `--members --verbose` shows each member's current and target assignment.
Offsets are reset only while a group has no members, as Kafka requires.

They are ordinary admin clients (confluent-kafka; through cohort's own wire client the two things
librdkafka cannot do: OffsetDelete, and naming the Assigning and Reconciling states), so they work
against any Kafka-compatible cluster.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cohort.tooling import client
from cohort.tooling.client import ToolError, UsageError, emit, reported, wait

PARTITION_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                     "CLIENT-ID")
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNED-LAG")


@dataclass(frozen=True)
class Member:
    member_id: str
    host: str
    client_id: str
    partitions: tuple[tuple[str, int], ...]
    instance_id: str | None = None
    target: tuple[tuple[str, int], ...] | None = None  # consumer groups only (ConsumerGroupDescribe)


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


table = client.table


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


# --- reading a group ---------------------------------------------------------------------------

# Kafka's spelling of each group state -> librdkafka's name for it (None: librdkafka has none and
# reports the state as UNKNOWN, so it is read from ListGroups through cohort's wire client instead).
STATES = {"Stable": "STABLE", "Empty": "EMPTY", "PreparingRebalance": "PREPARING_REBALANCING",
          "CompletingRebalance": "COMPLETING_REBALANCING", "Assigning": None, "Reconciling": None, "Dead": "DEAD"}
TYPES = ("consumer", "classic")


def state_name(state: Any) -> str:
    """Kafka's spelling of a librdkafka group state; "Unknown" for Assigning and Reconciling."""
    name = getattr(state, "name", str(state))
    return next((k for k, v in STATES.items() if v == name), "Unknown")


def broker_states(args: argparse.Namespace) -> dict[str, str]:
    """group id -> its state as the coordinators spell it (ListGroups v4+, through cohort's wire client)."""
    from cohort.tooling import wire_admin

    return wire_admin.run(client.client_config(args), args.timeout, lambda admin: admin.group_states())


def states_of(args: argparse.Namespace, listed: Mapping[str, Any]) -> dict[str, str]:
    """Kafka's name for each group's state; asks the coordinators only when librdkafka could not name one."""
    states = {gid: state_name(g.state) for gid, g in listed.items()}
    if "Unknown" in states.values():
        named = broker_states(args)
        states = {gid: named.get(gid, s) if s == "Unknown" else s for gid, s in states.items()}
    return states


def _tps(assignment: Any) -> tuple[tuple[str, int], ...]:
    if assignment is None:
        return ()
    return tuple(sorted((tp.topic, tp.partition) for tp in (assignment.topic_partitions or [])))


def describe(admin: Any, group_ids: Sequence[str], timeout: float) -> dict[str, Any]:
    """group id -> ConsumerGroupDescription; ToolError for a group that does not exist."""
    if not group_ids:
        return {}  # librdkafka refuses an empty list with a ValueError
    futures = admin.describe_consumer_groups(list(group_ids), request_timeout=timeout)
    out = {}
    for gid in group_ids:
        desc = wait(admin, futures[gid], timeout)
        if state_name(desc.state) == "Dead":
            raise ToolError(f"Consumer group '{gid}' does not exist.")
        out[gid] = desc
    return out


def committed_offsets(admin: Any, group_id: str, timeout: float) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    result = wait(admin, admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                          request_timeout=timeout)[group_id], timeout)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def log_offsets(admin: Any, tps: Sequence[tuple[str, int]], spec: Any, timeout: float) -> dict[tuple[str, int], int]:
    """ListOffsets for each partition (earliest, latest or a timestamp; -1 when none)."""
    from confluent_kafka import TopicPartition

    if not tps:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in sorted(tps)}, request_timeout=timeout)
    return {(tp.topic, tp.partition): wait(admin, fut, timeout).offset for tp, fut in futures.items()}


def fetch(admin: Any, group_id: str, timeout: float, desc: Any = None, state: str | None = None) -> GroupView:
    """Everything the describe views show about one group (`state` as `states_of` names it)."""
    from confluent_kafka.admin import OffsetSpec

    desc = desc or describe(admin, [group_id], timeout)[group_id]
    members = tuple(Member(m.member_id, m.host, m.client_id, _tps(m.assignment), m.group_instance_id,
                           _tps(m.target_assignment) if getattr(m, "target_assignment", None) is not None else None)
                    for m in desc.members)
    committed = committed_offsets(admin, group_id, timeout)
    wanted = sorted({tp for m in members for tp in m.partitions} | committed.keys())
    ends = log_offsets(admin, wanted, OffsetSpec.latest(), timeout)
    starts = log_offsets(admin, wanted, OffsetSpec.earliest(), timeout)
    return GroupView(group_id, state or state_name(desc.state), desc.partition_assignor or "", members, committed, ends, starts,
                     _offset_reset(admin, group_id, timeout) == "earliest")


def _offset_reset(admin: Any, group_id: str, timeout: float) -> str:
    """The group's consumer.offset.reset; `latest` when the broker does not know group configs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.GROUP, group_id)
    try:
        entries = wait(admin, admin.describe_configs([resource], request_timeout=timeout)[resource], timeout)
    except (KafkaException, ToolError):
        return "latest"
    entry = entries.get("consumer.offset.reset")
    return "latest" if entry is None or entry.value is None else entry.value


def _all_groups(admin: Any, timeout: float) -> list[str]:
    listed = wait(admin, admin.list_consumer_groups(request_timeout=timeout), timeout)
    return sorted(g.group_id for g in listed.valid)


def _group_ids(args: argparse.Namespace, admin: Any) -> list[str]:
    if args.all_groups:
        return _all_groups(admin, args.timeout)
    if not args.group:
        raise UsageError("name a group with --group, or use --all-groups")
    for g in args.group:
        if not g.strip():
            raise UsageError("--group must not be empty")
    return list(dict.fromkeys(args.group))


# --- list --------------------------------------------------------------------------------------


def _parse_filter(text: str | None, allowed: Sequence[str], what: str) -> list[str]:
    if not text:
        return []
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        match = next((a for a in allowed if a.lower() == item.lower()), None)
        if match is None:
            raise UsageError(f"Invalid {what} list '{text}'. Valid {what}s are: {', '.join(allowed)}")
        out.append(match)
    return out


@reported("groups list")
def run_list(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    states = _parse_filter(args.state, list(STATES), "state")
    types = _parse_filter(args.type, TYPES, "type")
    admin = client.admin(args)
    kwargs: dict[str, Any] = {"request_timeout": args.timeout}
    if states and all(STATES[s] for s in states):  # else every group is listed and filtered below
        kwargs["states"] = {getattr(ConsumerGroupState, STATES[s]) for s in states}
    if types:
        kwargs["types"] = {getattr(ConsumerGroupType, t.upper()) for t in types}
    listed = wait(admin, admin.list_consumer_groups(**kwargs), args.timeout)
    if listed.errors:
        raise ToolError(client.message(listed.errors[0]))
    groups = sorted(listed.valid, key=lambda g: g.group_id)
    shown = args.state is not None or args.output == "json"
    state = states_of(args, {g.group_id: g for g in groups}) if shown else {}
    if states:
        groups = [g for g in groups if state[g.group_id] in states]
    columns = ["GROUP"] + (["TYPE"] if args.type is not None else []) + (["STATE"] if args.state is not None else [])
    rows = []
    for g in groups:
        row = [g.group_id]
        if args.type is not None:
            row.append(getattr(g.type, "name", str(g.type)).capitalize())
        if args.state is not None:
            row.append(state[g.group_id])
        rows.append(row)
    if args.output == "json":
        emit(args, columns, rows, [{"group": g.group_id, "type": getattr(g.type, "name", "").lower(),
                                    "state": state[g.group_id]} for g in groups])
    elif args.type is None and args.state is None:
        for g in groups:
            print(g.group_id)
    else:
        emit(args, columns, rows)
    return 0


# --- describe ----------------------------------------------------------------------------------


def _assignment_text(tps: Sequence[tuple[str, int]] | None) -> str:
    """Kafka's --verbose form: topic(0,1), other(2)."""
    if not tps:
        return "-"
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return ", ".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items()))


def _member_table(view: GroupView, verbose: bool) -> tuple[list[str], list[list[str]]]:
    with_instance = any(m.instance_id for m in view.members)
    columns = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + ["HOST", "CLIENT-ID",
                                                                                            "#PARTITIONS"]
    if verbose:
        columns += ["ASSIGNMENT", "TARGET-ASSIGNMENT"]
    rows = []
    for m in sorted(view.members, key=lambda m: m.member_id):
        row = [view.group_id, m.member_id] + ([m.instance_id or "-"] if with_instance else [])
        row += [m.host, m.client_id, str(len(m.partitions))]
        if verbose:
            row += [_assignment_text(m.partitions), "-" if m.target is None else _assignment_text(m.target)]
        rows.append(row)
    return columns, rows


def _view_json(view: GroupView, desc: Any) -> dict:
    lags = member_lags(view)
    pairs = lambda tps: [{"topic": t, "partition": p} for t, p in tps]  # noqa: E731
    return {
        "group": view.group_id, "state": view.state, "type": getattr(desc.type, "name", "").lower(),
        "assignor": view.assignor, "coordinator": {"id": desc.coordinator.id, "host": desc.coordinator.host,
                                                   "port": desc.coordinator.port},
        "offset_reset": "earliest" if view.reset_earliest else "latest",
        "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "host": m.host,
                     "client_id": m.client_id, "assignment": pairs(m.partitions),
                     "target_assignment": None if m.target is None else pairs(m.target),
                     "assigned_lag": lags[m.member_id]} for m in view.members],
        "partitions": [{"topic": r[1], "partition": int(r[2]),
                        "current_offset": None if r[3] == "-" else int(r[3]),
                        "log_end_offset": None if r[4] == "-" else int(r[4]),
                        "lag": None if r[5] == "-" else int(r[5]),
                        "consumer_id": None if r[6] == "-" else r[6]} for r in partition_rows(view)],
    }


@reported("groups describe")
def run_describe(args: argparse.Namespace) -> int:
    admin = client.admin(args)
    ids = _group_ids(args, admin)
    if not ids:  # --all-groups on a broker without groups
        if args.output == "json":
            emit(args, [], [], [])
        else:
            print("No consumer groups.", file=sys.stderr)
        return 0
    descriptions = describe(admin, ids, args.timeout)
    states = states_of(args, descriptions)
    out_json = []
    for gid in ids:
        desc = descriptions[gid]
        if args.view == "state":
            coordinator = f"{desc.coordinator.host}:{desc.coordinator.port} ({desc.coordinator.id})"
            row = [gid, coordinator, desc.partition_assignor or "", states[gid], str(len(desc.members))]
            if args.output == "json":
                out_json.append({"group": gid, "coordinator": coordinator, "assignment_strategy": row[2],
                                 "state": row[3], "members": len(desc.members)})
            else:
                print(table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], [row]))
            continue
        view = fetch(admin, gid, args.timeout, desc, states[gid])
        if args.output == "json":
            out_json.append(_view_json(view, desc))
            continue
        if not view.members:
            print(f"Consumer group '{gid}' has no active members.", file=sys.stderr)
        if args.view == "members":
            print(table(*_member_table(view, args.verbose)))
        else:
            print(render(view, args.lag))
        if gid != ids[-1]:
            print()
    if args.output == "json":
        emit(args, [], [], out_json if args.all_groups or len(ids) > 1 else out_json[0])
    return 0


# --- reset-offsets -----------------------------------------------------------------------------

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration(text: str) -> datetime.timedelta:
    """ISO-8601 durations as Java's Duration.parse reads them (PnDTnHnMn.nS)."""
    m = _DURATION.match(text.strip())
    if m is None or not any(m.groups()) or text.strip().upper().endswith("T"):
        raise UsageError(f"--by-duration {text!r}: expected an ISO-8601 duration such as PT1H30M or P1DT12H")
    days, hours, minutes, seconds = m.groups()
    return datetime.timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0),
                              seconds=float(seconds or 0))


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime (yyyy-MM-ddTHH:mm:SS.sss, optional zone; local time without one) in ms."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss with an optional zone "
                         "(e.g. 2026-01-31T08:00:00.000+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local zone, as Kafka's tool reads a time without one
    return int(moment.timestamp() * 1000)


def _read_plan(path: str, groups: Sequence[str]) -> dict[str, dict[tuple[str, int], int]]:
    """Kafka's CSV: topic,partition,offset (one group) or group,topic,partition,offset."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    plan: dict[str, dict[tuple[str, int], int]] = {}
    for n, row in enumerate(rows, 1):
        try:
            if len(row) == 3:
                if len(groups) != 1:
                    raise UsageError(f"{path}:{n}: a topic,partition,offset plan needs exactly one --group")
                gid, (topic, part, off) = groups[0], row
            elif len(row) == 4:
                gid, topic, part, off = row
            else:
                raise ValueError
            plan.setdefault(gid.strip(), {})[(topic.strip(), int(part))] = int(off)
        except ValueError:
            raise UsageError(f"{path}:{n}: expected topic,partition,offset or group,topic,partition,offset") from None
    return plan


def named_partitions(admin: Any, specs: Sequence[str], timeout: float) -> list[tuple[str, int]]:
    """``--topic t`` (every partition of t) and ``--topic t:0,1`` as (topic, partition) pairs."""
    from confluent_kafka import TopicCollection

    wanted = client.topic_partitions(specs)
    need = [t for t, parts in wanted if parts is None]
    counts = {}
    if need:
        futures = admin.describe_topics(TopicCollection(need), request_timeout=timeout)
        for t in need:
            counts[t] = len(wait(admin, futures[t], timeout).partitions)
    out = set()
    for t, parts in wanted:
        out.update((t, p) for p in (range(counts[t]) if parts is None else parts))
    return sorted(out)


def _partitions_to_reset(args: argparse.Namespace, admin: Any, gid: str) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed_offsets(admin, gid, args.timeout))
    return named_partitions(admin, args.topic, args.timeout)


def _clamp(admin: Any, requested: dict[tuple[str, int], int], timeout: float) -> dict[tuple[str, int], int]:
    """Into [log start, log end], with Kafka's warning for each value moved."""
    from confluent_kafka.admin import OffsetSpec

    starts = log_offsets(admin, list(requested), OffsetSpec.earliest(), timeout)
    ends = log_offsets(admin, list(requested), OffsetSpec.latest(), timeout)
    out = {}
    for (t, p), off in requested.items():
        if off > ends[(t, p)]:
            print(f"WARN: New offset ({off}) is higher than latest offset for topic partition {t}-{p}. "
                  f"Value will be set to {ends[(t, p)]}", file=sys.stderr)
            off = ends[(t, p)]
        elif off < starts[(t, p)]:
            print(f"WARN: New offset ({off}) is lower than earliest offset for topic partition {t}-{p}. "
                  f"Value will be set to {starts[(t, p)]}", file=sys.stderr)
            off = starts[(t, p)]
        out[(t, p)] = off
    return out


def plan_offsets(args: argparse.Namespace, admin: Any, gid: str, tps: list[tuple[str, int]],
                 plan: dict | None) -> dict[tuple[str, int], int]:
    """The new offset of each partition, by the chosen scenario (Kafka's rules)."""
    from confluent_kafka.admin import OffsetSpec

    timeout = args.timeout
    if plan is not None:
        if gid not in plan:
            print(f"Error: No reset plan for group {gid} found", file=sys.stderr)
            return {}
        return _clamp(admin, plan[gid], timeout)
    if args.to_earliest:
        return log_offsets(admin, tps, OffsetSpec.earliest(), timeout)
    if args.to_latest:
        return log_offsets(admin, tps, OffsetSpec.latest(), timeout)
    if args.to_offset is not None:
        return _clamp(admin, {tp: args.to_offset for tp in tps}, timeout)
    if args.to_current:
        current = committed_offsets(admin, gid, timeout)
        missing = [tp for tp in tps if tp not in current]
        ends = log_offsets(admin, missing, OffsetSpec.latest(), timeout)
        return {tp: current[tp] if tp in current else ends[tp] for tp in tps}
    if args.shift_by is not None:
        current = committed_offsets(admin, gid, timeout)
        for t, p in tps:
            if (t, p) not in current:
                raise UsageError(f"Cannot shift offset for partition {t}-{p} since there is no current committed offset")
        return _clamp(admin, {tp: current[tp] + args.shift_by for tp in tps}, timeout)
    if args.to_datetime is not None or args.by_duration is not None:
        if args.to_datetime is not None:
            ts = parse_datetime(args.to_datetime)
        else:
            ts = int((time.time() - parse_duration(args.by_duration).total_seconds()) * 1000)
        found = log_offsets(admin, tps, OffsetSpec.for_timestamp(ts), timeout)
        missing = [tp for tp, off in found.items() if off < 0]  # no record at or after it: the log end
        ends = log_offsets(admin, missing, OffsetSpec.latest(), timeout)
        return {tp: ends[tp] if off < 0 else off for tp, off in found.items()}
    raise UsageError("choose a scenario: --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, "
                     "--to-datetime, --by-duration or --from-file")


@reported("groups reset-offsets")
def run_reset(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    if args.execute and args.dry_run:
        raise UsageError("--dry-run and --execute are exclusive")
    if args.from_file is None and not args.all_topics and not args.topic:
        raise UsageError("name the partitions with --topic T[:P,...] or --all-topics")
    if args.by_duration is not None:
        parse_duration(args.by_duration)  # a bad value is a usage error before anything is asked
    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)
    admin = client.admin(args)
    ids = _group_ids(args, admin)
    plan = _read_plan(args.from_file, ids) if args.from_file else None
    descriptions = describe(admin, ids, args.timeout)
    states = states_of(args, descriptions)
    results: dict[str, dict[tuple[str, int], int]] = {}
    refused = False
    for gid in ids:
        state = states[gid]
        if descriptions[gid].members or state not in ("Empty", "Dead"):
            print(f"Error: Assignments can only be reset if the group '{gid}' is inactive, but the current state is "
                  f"{state}.", file=sys.stderr)
            refused = True
            continue
        tps = sorted(plan[gid]) if plan is not None and gid in plan else (
            [] if plan is not None else _partitions_to_reset(args, admin, gid))
        offsets = plan_offsets(args, admin, gid, tps, plan)
        if args.execute and offsets:
            request = ConsumerGroupTopicPartitions(gid, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
            done = wait(admin, admin.alter_consumer_group_offsets([request], request_timeout=args.timeout)[gid],
                        args.timeout)
            failed = [tp for tp in done.topic_partitions or [] if tp.error is not None]
            if failed:
                raise ToolError(f"resetting {failed[0].topic}-{failed[0].partition} of '{gid}' failed: "
                                f"{failed[0].error.str()}")
        results[gid] = offsets
    if not args.execute and not args.dry_run and not args.export:
        print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset rather "
              "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
              "command and want to keep the current default behavior without prompting.", file=sys.stderr)
    if args.export:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for gid, offsets in results.items():
            for (t, p), o in sorted(offsets.items()):
                writer.writerow([t, p, o] if len(ids) == 1 else [gid, t, p, o])
        sys.stdout.write(buf.getvalue())
    else:
        rows = [[gid, t, p, o] for gid, offsets in results.items() for (t, p), o in sorted(offsets.items())]
        if rows or args.output == "json":
            emit(args, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows,
                 [{"group": g, "topic": t, "partition": p, "new_offset": o} for g, t, p, o in rows])
    return client.EXIT_FAILURE if refused else 0


# --- delete, delete-offsets ----------------------------------------------------------------------


@reported("groups delete")
def run_delete(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    admin = client.admin(args)
    ids = _group_ids(args, admin)
    if not ids:  # --all-groups on a broker without groups (librdkafka refuses an empty list)
        if args.output == "json":
            emit(args, [], [], {"deleted": [], "failed": {}})
        else:
            print("No consumer groups.", file=sys.stderr)
        return 0
    futures = admin.delete_consumer_groups(ids, request_timeout=args.timeout)
    failed = {}
    for gid in ids:
        try:
            wait(admin, futures[gid], args.timeout)
        except KafkaException as exc:
            failed[gid] = client.message(exc)
    deleted = [g for g in ids if g not in failed]
    if args.output == "json":
        emit(args, [], [], {"deleted": deleted, "failed": failed})
    else:
        if deleted:
            print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in deleted)}) was successful.")
        if failed:
            print("Deletion of some consumer groups failed:", file=sys.stderr)
            for gid, why in failed.items():
                print(f"* Group '{gid}' could not be deleted due to: {why}", file=sys.stderr)
    return client.EXIT_FAILURE if failed else 0


@reported("groups delete-offsets")
def run_delete_offsets(args: argparse.Namespace) -> int:
    """OffsetDelete: librdkafka has no such admin call; cohort's wire client sends it."""
    from cohort.tooling import wire_admin

    if not args.topic:
        raise UsageError("name the partitions with --topic T[:P,...]")
    if not args.group or len(args.group) != 1 or not args.group[0].strip():
        raise UsageError("name exactly one group with --group")
    gid = args.group[0]
    confluent = client.admin(args)
    describe(confluent, [gid], args.timeout)  # "does not exist", as Kafka says it
    tps = list(named_partitions(confluent, args.topic, args.timeout))
    codes = wire_admin.run(client.client_config(args), args.timeout, lambda admin: admin.delete_offsets(gid, tps))
    rows, failed = [], 0
    for t, p in tps:
        code = codes.get((t, p), 0)
        failed += code != 0
        rows.append([t, str(p), "Successful" if code == 0 else f"Error: {wire_admin.error_name(code)}"])
    emit(args, ["TOPIC", "PARTITION", "STATUS"], rows)
    return client.EXIT_FAILURE if failed else 0


# --- the parser ----------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `groups` and its subcommands; parsed args carry `func` -> exit code."""
    groups = subparsers.add_parser("groups", help="list, describe, reset and delete consumer groups "
                                   "(kafka-consumer-groups.sh)", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = groups.add_subparsers(dest="action", required=True, metavar="COMMAND")

    def command(name: str, help: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        client.add_connection(p, aliases=("--bootstrap",))  # --bootstrap: this tool's flag before Kafka's
        p.set_defaults(func=func)
        return p

    listing = command("list", "list the groups (kafka-consumer-groups --list)", run_list)
    listing.add_argument("--state", nargs="?", const="", metavar="STATES",
                         help=f"show each group's state; with a value, only groups in those ({', '.join(STATES)})")
    listing.add_argument("--type", nargs="?", const="", metavar="TYPES",
                         help="show each group's type; with a value, only groups of those (consumer, classic)")

    desc = command("describe", "a group's offsets and lag, members or state (--describe)", run_describe)
    target = desc.add_mutually_exclusive_group()
    target.add_argument("--group", action="append", default=[], metavar="GROUP")
    target.add_argument("--all-groups", action="store_true")
    view = desc.add_mutually_exclusive_group()
    view.add_argument("--offsets", dest="view", action="store_const", const="offsets", help="partitions (default)")
    view.add_argument("--members", dest="view", action="store_const", const="members", help="members")
    view.add_argument("--state", dest="view", action="store_const", const="state", help="state and coordinator")
    desc.set_defaults(view="offsets")
    desc.add_argument("--lag", action="store_true", help="with the offsets: each member's assigned lag")

    reset = command("reset-offsets", "move a group's committed offsets (--reset-offsets)", run_reset)
    target = reset.add_mutually_exclusive_group()
    target.add_argument("--group", action="append", default=[], metavar="GROUP")
    target.add_argument("--all-groups", action="store_true")
    reset.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]")
    reset.add_argument("--all-topics", action="store_true", help="every partition the group has committed")
    scenario = reset.add_mutually_exclusive_group()
    scenario.add_argument("--to-earliest", action="store_true")
    scenario.add_argument("--to-latest", action="store_true")
    scenario.add_argument("--to-current", action="store_true")
    scenario.add_argument("--to-offset", type=int, metavar="OFFSET")
    scenario.add_argument("--shift-by", type=int, metavar="N")
    scenario.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    scenario.add_argument("--by-duration", metavar="PnDTnHnMnS")
    scenario.add_argument("--from-file", metavar="CSV", help="a plan as --export writes it")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--export", action="store_true", help="print the plan as CSV (for --from-file)")

    delete = command("delete", "delete groups without members (--delete)", run_delete)
    target = delete.add_mutually_exclusive_group()
    target.add_argument("--group", action="append", default=[], metavar="GROUP")
    target.add_argument("--all-groups", action="store_true")

    delete_offsets = command("delete-offsets", "delete a group's committed offsets (--delete-offsets)",
                             run_delete_offsets)
    delete_offsets.add_argument("--group", action="append", default=[], metavar="GROUP")
    delete_offsets.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]")
    return groups

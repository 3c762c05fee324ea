"""The JSON group spec read by `cohort assign`, and the JSON assignment it prints.

Input (every field but `topics` and `members` optional; see docs/assign.md):

    {"topics":  {"t0": {"partitions": 3, "id": "x", "racks": [["a"], ["b"], ["a", "b"]]}},
     "members": {"C0": {"topics": ["t0"], "instance_id": null, "rack": null,
                        "assignment": {"t0": [0]}}},
     "lag":     {"t0": [100000, 60000, 50000]}}

Topics are identified to the assignor by their `id` when given, else by name, so the canonical
topic order is the order of those identifiers. Validation is strict: a typo in a field name is an
error rather than a silently ignored setting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cohort.assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    TopicDescriber,
    TopicMetadata,
)


class SpecError(ValueError):
    """The group spec is malformed; the message is one line fit for a terminal."""


@dataclass(frozen=True)
class ParsedSpec:
    spec: GroupSpec
    topics: TopicDescriber
    names_by_id: Mapping[Any, str]


_TOP_FIELDS = {"topics", "members", "lag"}
_TOPIC_FIELDS = {"partitions", "id", "racks"}
_MEMBER_FIELDS = {"topics", "instance_id", "rack", "assignment"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise SpecError(f"{what} must be a JSON object")
    return value


def _check_fields(obj: dict, allowed: set[str], what: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise SpecError(f"{what}: unknown field {unknown[0]!r} (expected one of {', '.join(sorted(allowed))})")


def _optional_str(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise SpecError(f"{what} must be a non-empty string or null")
    return value


def _parse_topics(raw: Any, lags: dict) -> tuple[dict[str, Any], dict[Any, TopicMetadata]]:
    topics = _object(raw, "'topics'")
    ids: dict[str, Any] = {}
    metadata: dict[Any, TopicMetadata] = {}
    for name in sorted(topics):
        body = _object(topics[name], f"topic {name!r}")
        _check_fields(body, _TOPIC_FIELDS, f"topic {name!r}")
        count = body.get("partitions")
        if not _is_int(count) or count < 0:
            raise SpecError(f"topic {name!r}: 'partitions' must be a non-negative integer, got {count!r}")
        topic_id = body.get("id", name)
        if not isinstance(topic_id, str) or not topic_id:
            raise SpecError(f"topic {name!r}: 'id' must be a non-empty string")
        if topic_id in metadata:
            raise SpecError(f"topic {name!r}: id {topic_id!r} is used by another topic")
        racks: tuple[frozenset[str], ...] = ()
        if "racks" in body:
            raw_racks = body["racks"]
            if not isinstance(raw_racks, list) or len(raw_racks) != count:
                raise SpecError(f"topic {name!r}: 'racks' must be a list of {count} rack lists, one per partition")
            if not all(isinstance(r, list) and all(isinstance(x, str) for x in r) for r in raw_racks):
                raise SpecError(f"topic {name!r}: every entry of 'racks' must be a list of rack names")
            racks = tuple(frozenset(r) for r in raw_racks)
        topic_lags = None
        if name in lags:
            raw_lag = lags[name]
            if not isinstance(raw_lag, list) or len(raw_lag) != count:
                raise SpecError(f"lag of topic {name!r} must be a list of {count} integers, one per partition")
            if not all(_is_int(x) and x >= 0 for x in raw_lag):
                raise SpecError(f"lag of topic {name!r} must hold non-negative integers")
            topic_lags = tuple(raw_lag)
        ids[name] = topic_id
        metadata[topic_id] = TopicMetadata(count, racks, topic_lags)
    return ids, metadata


def _parse_member(member_id: str, raw: Any, ids: dict[str, Any], counts: dict[Any, int]) -> MemberSubscription:
    what = f"member {member_id!r}"
    body = _object(raw, what)
    _check_fields(body, _MEMBER_FIELDS, what)
    topics = body.get("topics", [])
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise SpecError(f"{what}: 'topics' must be a list of topic names")
    subscribed = frozenset(ids[t] for t in topics if t in ids)
    if not subscribed:
        raise SpecError(f"{what} subscribes to no known topic")
    assignment: dict[Any, tuple[int, ...]] = {}
    raw_assignment = _object(body.get("assignment", {}), f"{what}: 'assignment'")
    for topic, partitions in raw_assignment.items():
        if not isinstance(partitions, list) or not all(_is_int(p) and p >= 0 for p in partitions):
            raise SpecError(f"{what}: assignment of {topic!r} must be a list of non-negative partition numbers")
        if topic not in ids:
            continue
        topic_id = ids[topic]
        beyond = [p for p in partitions if p >= counts[topic_id]]
        if beyond:
            raise SpecError(f"{what}: assignment of {topic!r} names partition {beyond[0]} but {topic!r} has "
                            f"{counts[topic_id]} partitions")
        assignment[topic_id] = tuple(sorted(set(partitions)))
    return MemberSubscription(
        subscribed_topic_ids=subscribed,
        rack_id=_optional_str(body.get("rack"), f"{what}: 'rack'"),
        instance_id=_optional_str(body.get("instance_id"), f"{what}: 'instance_id'"),
        assignment=assignment,
    )


def _check_single_ownership(members: Mapping[str, MemberSubscription], names: Mapping[Any, str]) -> None:
    owners: dict[tuple[Any, int], str] = {}
    for member_id in sorted(members):
        for topic_id, partitions in members[member_id].assignment.items():
            for p in partitions:
                other = owners.setdefault((topic_id, p), member_id)
                if other != member_id:
                    raise SpecError(f"partition {names[topic_id]}-{p} is in the assignment of both "
                                    f"{other!r} and {member_id!r}")


def parse_spec(text: str) -> ParsedSpec:
    """Parse and validate a JSON group spec; raises SpecError with a one-line message."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    doc = _object(doc, "the group spec")
    _check_fields(doc, _TOP_FIELDS, "the group spec")
    if "topics" not in doc or "members" not in doc:
        raise SpecError("the group spec needs both 'topics' and 'members'")
    lags = _object(doc.get("lag", {}), "'lag'")
    unknown_lag = sorted(set(lags) - set(_object(doc["topics"], "'topics'")))
    if unknown_lag:
        raise SpecError(f"'lag' names unknown topic {unknown_lag[0]!r}")
    ids, metadata = _parse_topics(doc["topics"], lags)
    counts = {tid: meta.num_partitions for tid, meta in metadata.items()}
    raw_members = _object(doc["members"], "'members'")
    members = {mid: _parse_member(mid, raw_members[mid], ids, counts) for mid in sorted(raw_members)}
    names_by_id = {tid: name for name, tid in ids.items()}
    _check_single_ownership(members, names_by_id)
    return ParsedSpec(GroupSpec.of(members), TopicDescriber(metadata), names_by_id)


def assignment_to_json(assignment: GroupAssignment, parsed: ParsedSpec) -> dict[str, dict[str, list[int]]]:
    """Members sorted, topics by name, partitions ascending; every member of the spec present."""
    out: dict[str, dict[str, list[int]]] = {}
    for member_id in sorted(parsed.spec.members):
        by_name = {
            parsed.names_by_id[tid]: sorted(partitions)
            for tid, partitions in assignment.get(member_id, {}).items()
            if len(partitions)
        }
        out[member_id] = dict(sorted(by_name.items()))
    return out

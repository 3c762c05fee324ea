"""Who this instance is in its cohort cluster: an instance id of its data dir's own, and the
coordinator node id clients see for it.

Node ids are chosen without configuration, from what the instances already share: the members of
the cohort cluster's group on the upstream (`cohort.upstream.membership`), each of which names
its node id and instance id in its client id. A new instance takes the smallest id from
``FIRST_NODE_ID`` up that no other live instance and no upstream broker uses, and keeps it in
its data dir (``IDENTITY_FILE``), so a restart gets it back. Two instances that start together
may pick the same id; once both are members they see it, and the one with the larger instance
id picks again (`must_yield`). An id set explicitly (``upstream.coordinator.node.id``) is never
re-picked: an automatic one yields to it, and of two instances given the same id, the one that
finds the other already a member (or, joining together, the one with the larger instance id)
refuses to serve (`DuplicateNodeId`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from cohort.security import files

IDENTITY_FILE = "cohort-instance.json"
FIRST_NODE_ID = 1000000  # above any broker id a Kafka-compatible upstream hands out by default
SETTING = "upstream.coordinator.node.id"


class DuplicateNodeId(Exception):
    """Another live instance of the cohort cluster holds this instance's explicit node id."""


@dataclass(frozen=True)
class Identity:
    instance_id: str  # 32 hex digits, made once per data dir
    node_id: int | None  # the node id this data dir last had (None: never had one)


def load(directory: str) -> Identity:
    """The identity kept in ``directory``; a new instance id (not yet saved) if there is none.
    An unreadable file is an OSError naming it (the instance would otherwise change identity)."""
    path = os.path.join(directory, IDENTITY_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        node = raw.get("node_id")
        return Identity(str(uuid.UUID(raw["instance_id"]).hex), int(node) if node is not None else None)
    except FileNotFoundError:
        return Identity(uuid.uuid4().hex, None)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise OSError(f"{path} is not a valid instance identity ({exc}); move it away to start as a new "
                      "instance") from None


def save(directory: str, identity: Identity) -> None:
    data = json.dumps({"version": 1, "instance_id": identity.instance_id, "node_id": identity.node_id}).encode()
    files.replace_atomically(os.path.join(directory, IDENTITY_FILE), data)


def free_node_id(taken: Iterable[int]) -> int:
    """The smallest node id from FIRST_NODE_ID up that is not in ``taken``."""
    used = set(taken)
    node = FIRST_NODE_ID
    while node in used:
        node += 1
    return node


def choose(persisted: int | None, others: Iterable[int], upstream_nodes: Iterable[int]) -> int:
    """An automatic node id: the persisted one unless another live instance or an upstream
    broker has it, else the smallest free one."""
    taken = set(others) | set(upstream_nodes)
    if persisted is not None and persisted not in taken:
        return persisted
    return free_node_id(taken)


def must_yield(me: str, my_id_explicit: bool, other: str, other_explicit: bool) -> bool:
    """Whether instance ``me`` gives up a node id it shares with instance ``other``: an automatic
    id yields to an explicit one; between equals the larger instance id yields."""
    if my_id_explicit != other_explicit:
        return not my_id_explicit
    return me > other

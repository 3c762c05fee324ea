"""ACLs with Kafka's model and the StandardAuthorizer's rules, and their durable store.

A binding is (resource type, resource name, pattern type) plus (principal, host, operation,
permission). An action (principal, host, operation, resource) is decided by the ACLs on the
resource: literal ones with its name, the literal ``*`` ones, and prefixed ones whose name starts
it; a matching DENY wins, then a matching ALLOW (DESCRIBE is implied by READ, WRITE, DELETE and
ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; ALL matches every operation); with no ACL on the
resource at all the answer is ``allow.everyone.if.no.acl.found``. Super users pass everything.

Decisions are cached per (principal, host, operation, type, name) and the cache is dropped on
every ACL change, so the heartbeat path costs a dictionary lookup.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from cohort.config import ConfigError, declare
from cohort.security import files

declare("authorizer.class.name", str, "", "Turns ACLs on: Kafka's `org.apache.kafka.metadata.authorizer.StandardAuthorizer` "
        "(or `cohort`) enforces them at every API as Kafka does; empty: everything is allowed.", group="security")
declare("super.users", str, "", "Principals allowed everything, semicolon-separated (`User:admin;User:ops`).",
        group="security")
declare("allow.everyone.if.no.acl.found", bool, False, "With ACLs on, allow an action on a resource that has no "
        "ACL at all (for any principal).", group="security")

AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer", "cohort")


def enabled(name: str) -> bool:
    """Whether ``authorizer.class.name`` turns ACLs on (ConfigError for an unknown class)."""
    if not name:
        return False
    if name not in AUTHORIZERS:
        raise ConfigError(f"authorizer.class.name: {name!r} is not supported; use {AUTHORIZERS[0]}")
    return True

# Kafka's enums (ResourceType, PatternType, AclOperation, AclPermissionType).
ANY_RESOURCE, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 1, 2, 3, 4, 5, 6, 7
ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ANY_OP, ALL = 1, 2
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
STORE_FILE = "acls.json"

RESOURCE_NAMES = {TOPIC: "TOPIC", GROUP: "GROUP", CLUSTER: "CLUSTER", TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
                  DELEGATION_TOKEN: "DELEGATION_TOKEN", USER: "USER"}
OPERATION_NAMES = {ALL: "ALL", READ: "READ", WRITE: "WRITE", CREATE: "CREATE", DELETE: "DELETE", ALTER: "ALTER",
                   DESCRIBE: "DESCRIBE", CLUSTER_ACTION: "CLUSTER_ACTION", DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS",
                   ALTER_CONFIGS: "ALTER_CONFIGS", IDEMPOTENT_WRITE: "IDEMPOTENT_WRITE", 13: "CREATE_TOKENS",
                   14: "DESCRIBE_TOKENS"}
PATTERN_NAMES = {LITERAL: "LITERAL", PREFIXED: "PREFIXED", MATCH: "MATCH", ANY_PATTERN: "ANY"}
PERMISSION_NAMES = {ALLOW: "ALLOW", DENY: "DENY"}
_IMPLIES_DESCRIBE = {DESCRIBE, READ, WRITE, DELETE, ALTER}
_IMPLIES_DESCRIBE_CONFIGS = {DESCRIBE_CONFIGS, ALTER_CONFIGS}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: None and the ANY codes match everything."""

    resource_type: int = ANY_RESOURCE
    resource_name: str | None = None
    pattern_type: int = ANY_PATTERN
    principal: str | None = None
    host: str | None = None
    operation: int = ANY_OP
    permission: int = ANY_PERMISSION

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ANY_RESOURCE and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == MATCH:
            if self.resource_name is not None and not (
                    (b.pattern_type == LITERAL and b.resource_name in (self.resource_name, WILDCARD))
                    or (b.pattern_type == PREFIXED and self.resource_name.startswith(b.resource_name))):
                return False
        else:
            if self.pattern_type != ANY_PATTERN and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation == ANY_OP or b.operation == self.operation)
                and (self.permission == ANY_PERMISSION or b.permission == self.permission))


def binding_error(b: AclBinding) -> str | None:
    """Why a new ACL is invalid (Kafka's AclControlManager.validateNewAcl), or None."""
    if b.resource_type not in RESOURCE_NAMES:
        return "Invalid resourceType " + str(b.resource_type)
    if b.pattern_type not in (LITERAL, PREFIXED):
        return "Invalid patternType " + str(b.pattern_type)
    if b.operation not in OPERATION_NAMES:
        return "Invalid operation " + str(b.operation)
    if b.permission not in (ALLOW, DENY):
        return "Invalid permissionType " + str(b.permission)
    if not b.resource_name:
        return "Resource name should not be empty"
    if ":" not in b.principal:
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal type from the principal name)"
    return None


class Authorizer:
    """The ACLs in force and the decisions taken from them."""

    def __init__(self, directory: str, super_users: str = "", allow_if_no_acl: bool = False) -> None:
        self.path = os.path.join(directory, STORE_FILE)
        self.super_users = {u.strip() for u in super_users.split(";") if u.strip()}
        self.allow_if_no_acl = allow_if_no_acl
        self._bindings: list[AclBinding] = []
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
            self._bindings = [AclBinding(**b) for b in raw.get("acls", [])]
        except FileNotFoundError:
            pass
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise OSError(f"{self.path} is not a valid ACL file ({exc}); refusing to start") from None
        self._index()

    def _index(self) -> None:
        """Literal ACLs by (type, name) (the ``*`` ones under that name), prefixed ones by type."""
        by_type: dict[int, list[AclBinding]] = {}
        literal: dict[tuple[int, str], list[AclBinding]] = {}
        prefixed: dict[int, list[AclBinding]] = {}
        for b in self._bindings:
            by_type.setdefault(b.resource_type, []).append(b)
            if b.pattern_type == LITERAL:
                literal.setdefault((b.resource_type, b.resource_name), []).append(b)
            else:
                prefixed.setdefault(b.resource_type, []).append(b)
        self._by_type = by_type
        self._literal = literal
        self._prefixed = prefixed
        self._cache: dict[tuple, bool] = {}

    @property
    def bindings(self) -> list[AclBinding]:
        return list(self._bindings)

    # --- decisions ---------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 100_000:
                self._cache.clear()
            found = self._cache[key] = self._decide(principal, host, operation, resource_type, name)
        return found

    def _decide(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        on_resource = self._literal.get((resource_type, name), []) + self._literal.get((resource_type, WILDCARD), []) + [
            b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.resource_name)]
        if not on_resource:
            return self.allow_if_no_acl
        allowed = False
        for b in on_resource:
            if b.principal not in (principal, "User:*") or b.host not in (host, WILDCARD):
                continue
            if b.permission == DENY:
                if b.operation in (operation, ALL):
                    return False
            elif b.operation in (operation, ALL) or (operation == DESCRIBE and b.operation in _IMPLIES_DESCRIBE) or (
                    operation == DESCRIBE_CONFIGS and b.operation in _IMPLIES_DESCRIBE_CONFIGS):
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``operation`` is allowed on *some* resource of the type (Kafka's
        authorizeByResourceType, used for idempotent producers)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        applicable = [b for b in self._by_type.get(resource_type, ())
                      if b.principal in (principal, "User:*") and b.host in (host, WILDCARD) and b.operation in (operation, ALL)]
        if any(b.permission == DENY and b.pattern_type == LITERAL and b.resource_name == WILDCARD for b in applicable):
            return False
        denied = {(b.pattern_type, b.resource_name) for b in applicable if b.permission == DENY}
        return any(b.permission == ALLOW and (b.pattern_type, b.resource_name) not in denied for b in applicable)

    # --- changes (durable before they apply) -------------------------------------------------

    def create(self, new: list[AclBinding]) -> None:
        bindings = self._bindings + [b for b in dict.fromkeys(new) if b not in self._bindings]
        self._save(bindings)

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; returns the matches per filter."""
        matched = [[b for b in self._bindings if f.matches(b)] for f in filters]
        doomed = {b for m in matched for b in m}
        if doomed:
            self._save([b for b in self._bindings if b not in doomed])
        return matched

    def describe(self, f: AclFilter) -> list[AclBinding]:
        return [b for b in self._bindings if f.matches(b)]

    def _save(self, bindings: list[AclBinding]) -> None:
        files.replace_atomically(self.path, json.dumps({"version": 1, "acls": [asdict(b) for b in bindings]}).encode())
        self._bindings = bindings
        self._index()

"""`cohort acls` and `cohort users`: ACLs and SCRAM users over the wire, with kafka-acls.sh's flags.

    cohort acls add    --bootstrap-server H:P --allow-principal User:alice --operation Read --topic orders
    cohort acls list   --bootstrap-server H:P [--topic T | --group G | --cluster | --transactional-id X] [--principal P]
    cohort acls remove --bootstrap-server H:P --allow-principal User:alice --operation Read --topic orders
    cohort users add    --bootstrap-server H:P --user alice [--mechanism SCRAM-SHA-512] [--iterations 8192] --password-file F
    cohort users list   --bootstrap-server H:P [--user alice]
    cohort users remove --bootstrap-server H:P --user alice [--mechanism SCRAM-SHA-512]

They are ordinary Kafka admin clients (confluent-kafka's AdminClient: CreateAcls, DescribeAcls,
DeleteAcls, AlterUserScramCredentials, DescribeUserScramCredentials), so they work against Kafka
too. `--command-config FILE` gives client settings in librdkafka's names (`security.protocol`,
`sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`, ...). A password is read
from a file or stdin, never from the command line, so it does not show in `ps`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cohort.tooling.client import UsageError, add_connection, reported
from cohort.tooling.client import admin as make_admin

OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    acls = subparsers.add_parser("acls", help="add, list or remove ACLs (kafka-acls.sh's flags)")
    acl_sub = acls.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in ("add", "list", "remove"):
        p = acl_sub.add_parser(action, help=f"{action} ACLs")
        add_connection(p, output=False)
        p.add_argument("--topic", action="append", default=[], metavar="NAME")
        p.add_argument("--group", action="append", default=[], metavar="NAME")
        p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
        p.add_argument("--cluster", action="store_true", help="the cluster resource")
        p.add_argument("--resource-pattern-type", default="literal" if action == "add" else "any",
                       choices=("literal", "prefixed", "any", "match"), type=str.lower)
        if action == "list":
            p.add_argument("--principal", metavar="PRINCIPAL", help="only ACLs of this principal")
        else:
            p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
            p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
            p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
            p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
            p.add_argument("--operation", action="append", default=[], metavar="OP", help=", ".join(OPERATIONS))
        p.set_defaults(func=run_acls)
    users = subparsers.add_parser("users", help="add, list or remove SCRAM users")
    user_sub = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in ("add", "list", "remove"):
        p = user_sub.add_parser(action, help=f"{action} SCRAM credentials")
        add_connection(p, output=False)
        p.add_argument("--user", required=action != "list", metavar="NAME")
        if action != "list":
            p.add_argument("--mechanism", default="SCRAM-SHA-512", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
        if action == "add":
            p.add_argument("--iterations", type=int, default=8192)
            p.add_argument("--password-file", required=True, metavar="FILE", help="the password (first line), or - for stdin")
        p.set_defaults(func=run_users)


# --- acls ---------------------------------------------------------------------------------------


def _resources(args: argparse.Namespace, need_one: bool):
    from confluent_kafka.admin import ResourceType

    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.BROKER, "kafka-cluster"))
    if need_one and not out:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    return out


def _operation(name: str):
    from confluent_kafka.admin import AclOperation

    key = name.replace("-", "").replace("_", "").lower()
    for op in OPERATIONS:
        if op.lower() == key:
            return getattr(AclOperation, "".join("_" + c if c.isupper() else c for c in op).lstrip("_").upper())
    raise UsageError(f"unknown operation {name!r}; one of {', '.join(OPERATIONS)}")


def _entries(args: argparse.Namespace):
    from confluent_kafka.admin import AclPermissionType

    if not args.allow_principal and not args.deny_principal:
        raise UsageError("give --allow-principal or --deny-principal")
    for principal in args.allow_principal + args.deny_principal:
        if ":" not in principal:
            raise UsageError(f"principal {principal!r} must look like User:name")
    ops = [_operation(o) for o in args.operation]
    out = []
    for permission, principals, hosts in ((AclPermissionType.ALLOW, args.allow_principal, args.allow_host or ["*"]),
                                          (AclPermissionType.DENY, args.deny_principal, args.deny_host or ["*"])):
        for principal in principals:
            for host in hosts:
                out += [(principal, host, op, permission) for op in ops]
    return out


def _pattern(name: str):
    from confluent_kafka.admin import ResourcePatternType

    return getattr(ResourcePatternType, name.upper())


@reported("acls {action}")
def run_acls(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ResourceType

    admin = make_admin(args)
    if args.action == "add":
        if not args.operation:
            raise UsageError("give at least one --operation")
        if args.resource_pattern_type not in ("literal", "prefixed"):
            raise UsageError("an ACL's --resource-pattern-type is literal or prefixed")
        bindings = [AclBinding(rt, name, _pattern(args.resource_pattern_type), p, h, op, perm)
                    for rt, name in _resources(args, True) for p, h, op, perm in _entries(args)]
        for fut in admin.create_acls(bindings, request_timeout=args.timeout).values():
            fut.result(args.timeout)
        _print_acls(bindings, "Adding ACLs")
    elif args.action == "list":
        filters = [AclBindingFilter(rt, name, _pattern(args.resource_pattern_type), args.principal, None,
                                    AclOperation.ANY, AclPermissionType.ANY) for rt, name in _resources(args, False)]
        if not filters:
            filters = [AclBindingFilter(ResourceType.ANY, None, _pattern(args.resource_pattern_type), args.principal,
                                        None, AclOperation.ANY, AclPermissionType.ANY)]
        found = []
        for f in filters:
            found += admin.describe_acls(f, request_timeout=args.timeout).result(args.timeout)
        _print_acls(found, "Current ACLs")
    else:
        ops = [_operation(o) for o in args.operation] or [AclOperation.ANY]
        filters = []
        for rt, name in _resources(args, True):
            for principal, hosts, permission in (
                    *((p, args.allow_host or [None], AclPermissionType.ALLOW) for p in args.allow_principal),
                    *((p, args.deny_host or [None], AclPermissionType.DENY) for p in args.deny_principal)):
                filters += [AclBindingFilter(rt, name, _pattern(args.resource_pattern_type), principal, h, op, permission)
                            for h in hosts for op in ops]
            if not args.allow_principal and not args.deny_principal:
                filters += [AclBindingFilter(rt, name, _pattern(args.resource_pattern_type), None, None, op,
                                             AclPermissionType.ANY) for op in ops]
        removed = []
        for fut in admin.delete_acls(filters, request_timeout=args.timeout).values():
            removed += fut.result(args.timeout)
        _print_acls(removed, "Removed ACLs")
    return 0


def _print_acls(bindings: Sequence, title: str) -> None:
    by_resource: dict = {}
    for b in bindings:
        by_resource.setdefault((b.restype.name, b.name, b.resource_pattern_type.name), []).append(b)
    for (rtype, name, pattern), entries in sorted(by_resource.items()):
        rtype = "CLUSTER" if rtype == "BROKER" else rtype
        print(f"{title} for resource `ResourcePattern(resourceType={rtype}, name={name}, patternType={pattern})`:")
        for b in entries:
            print(f"\t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                  f"permissionType={b.permission_type.name})")
        print()


# --- users ----------------------------------------------------------------------------------------


@reported("users {action}")
def run_users(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = make_admin(args)
    if args.action == "list":
        users = [args.user] if args.user else None
        result = admin.describe_user_scram_credentials(users, request_timeout=args.timeout)
        described = result.result(args.timeout) if hasattr(result, "result") else {
            u: f.result(args.timeout) for u, f in result.items()}
        for name, d in sorted(described.items()):
            infos = ", ".join(f"{i.mechanism.name.replace('_', '-')} (iterations {i.iterations})"
                              for i in d.scram_credential_infos)
            print(f"{name}: {infos}")
        return 0
    mechanism = getattr(ScramMechanism, args.mechanism.replace("-", "_"))
    if args.action == "add":
        password = _read_password(args.password_file)
        change = UserScramCredentialUpsertion(args.user, ScramCredentialInfo(mechanism, args.iterations), password.encode())
    else:
        change = UserScramCredentialDeletion(args.user, mechanism)
    for fut in admin.alter_user_scram_credentials([change], request_timeout=args.timeout).values():
        fut.result(args.timeout)
    print(f"{'Added' if args.action == 'add' else 'Removed'} {args.mechanism} credentials of {args.user}")
    return 0


def _read_password(path: str) -> str:
    try:
        text = sys.stdin.readline() if path == "-" else open(path, encoding="utf-8").readline()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    password = text.rstrip("\r\n")
    if not password:
        raise UsageError("the password is empty")
    return password

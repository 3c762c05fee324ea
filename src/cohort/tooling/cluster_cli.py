"""cohort cluster: the instances of a cohort cluster in front of an upstream, read where they
keep it, on the upstream itself (so it answers whichever instances are up).

  cohort cluster describe --bootstrap-server UPSTREAM:9092 [--cluster-name NAME]

Lists each instance's coordinator node id, the endpoint clients reach it at, the shards it owns
(partitions of the cluster's groups topic) and whether its node id was set or chosen; shards no
instance owns right now are named after the table. ``--bootstrap-server`` is the upstream's:
cohort's own instances answer group requests themselves and do not see this group.
"""

from __future__ import annotations

import argparse
from typing import Any

from cohort.tooling import client
from cohort.tooling.client import ToolError, emit, reported


def describe(admin: Any, settings: dict[str, Any], cluster: str, topic: str, timeout: float) -> dict:
    """The cohort cluster ``cluster`` as its group on the upstream says now (``admin`` lists the
    topic; the group is read over the wire with the client ``settings``)."""
    from confluent_kafka import KafkaException

    from cohort.upstream.admin import AdminError, GroupAdmin
    from cohort.upstream.membership import membership_group, read_view

    group = membership_group(cluster)
    try:
        view = read_view(GroupAdmin(settings, timeout), group, topic)
        found = admin.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException as exc:
        raise ToolError(client.message(exc)) from None
    except AdminError as exc:
        raise ToolError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a future's timeout
        raise ToolError(str(exc) or f"no answer within {timeout:g} s") from None
    shards = len(found.partitions) if found is not None and found.error is None else 0
    instances = [{"node_id": i.node_id, "endpoint": f"{i.host}:{i.port}", "shards": view.shards_of(i.node_id),
                  "node_id_set": i.explicit, "instance_id": i.instance_id} for i in view.instances]
    return {"cluster": cluster, "group": group, "topic": topic, "shards": shards, "instances": instances,
            "unowned": [s for s in range(shards) if s not in view.owners]}


@reported("cluster {action}")
def run_describe(args: argparse.Namespace) -> int:
    admin = client.admin(args)
    found = describe(admin, client.client_config(args), args.cluster_name, args.groups_topic, args.timeout)
    if not found["instances"] and not found["shards"]:
        raise ToolError(f"no cohort cluster {args.cluster_name} on this upstream (no members in group "
                        f"{found['group']}, no topic {found['topic']})")
    if args.output == "json":
        emit(args, [], [], found)
        return 0
    rows = [(i["node_id"], i["endpoint"], ",".join(map(str, i["shards"])) or "-",
             "set" if i["node_id_set"] else "chosen", i["instance_id"] or "-") for i in found["instances"]]
    emit(args, ["NODE-ID", "ENDPOINT", "SHARDS", "NODE-ID-IS", "INSTANCE"], rows)
    if found["unowned"]:
        print(f"Shards without an owner now: {','.join(map(str, found['unowned']))} (of {found['shards']})")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    top = subparsers.add_parser("cluster", help="the instances of a cohort cluster in front of an upstream",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="action", required=True, metavar="COMMAND")
    p = sub.add_parser("describe", help="instances, node ids, endpoints and shards")
    client.add_connection(p)
    p.add_argument("--cluster-name", default="cohort", metavar="NAME", help="upstream.cluster.name (default cohort)")
    p.add_argument("--groups-topic", default="__cohort_groups", metavar="TOPIC",
                   help="upstream.groups.topic (default __cohort_groups)")
    p.set_defaults(func=run_describe)
    return top

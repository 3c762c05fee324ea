"""Group failover in a cohort cluster: how long a killed instance's groups go unserved.

Starts an upstream (`cohort serve`) and `--instances` cohort instances in front of it with the
defaults: node ids chosen by the instances, 12 shards unless `--shards`, and the membership
session timeout of `--session-ms` (default: the setting's default, 10 s). Each round picks
a group whose shard the next instance owns, commits an offset for it, kills that instance with
SIGKILL, then asks a survivor FindCoordinator and commits to the coordinator it names, every
50 ms, until a commit succeeds. The time from the kill to that commit is the failover; the
issue's target is the session timeout + 2 s. The killed instance is then started again with its
data dir (it gets its node id back) and the next round waits until it owns shards again.

    .venv/bin/python bench/upstream_failover.py [--rounds 3] [--session-ms 10000] [--instances 3] [--shards N]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.index import load_request_schema  # noqa: E402

from cohort.protocol.entities import build, nested  # noqa: E402
from cohort_testing import ServerProcess, WireClient  # noqa: E402

COMMIT = load_request_schema(8, 8)


def find(port: int, group: str) -> tuple[int, int]:
    """(node id, port) FindCoordinator names for ``group``; (-1, -1) while it has no owner."""
    try:
        with WireClient(port, timeout=2) as w:
            found = w.request(10, 3, build(load_request_schema(10, 3), key=group, key_type=0))
    except OSError:
        return -1, -1
    return (found.node_id, found.port) if found.error_code == 0 else (-1, -1)


def own_node(port: int) -> int | None:
    """The node id the instance on ``port`` lists itself under in Metadata (None: not settled)."""
    try:
        with WireClient(port, timeout=5) as w:
            md = w.request(3, 12, build(load_request_schema(3, 12), topics=None, allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False))
    except OSError:
        return None
    return next((b.node_id for b in md.brokers if b.port == port), None)


def commit(port: int, group: str, offset: int) -> int:
    """An admin-style OffsetCommit of ``offset`` on bench-0; its error code (-1: no answer)."""
    part = build(nested(nested(COMMIT, "topics"), "partitions"), partition_index=0, committed_offset=offset,
                 committed_leader_epoch=-1, committed_metadata="")
    body = build(COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                 topics=(build(nested(COMMIT, "topics"), name="bench", partitions=(part,)),))
    try:
        with WireClient(port, timeout=5) as w:
            return w.request(8, 8, body).topics[0].partitions[0].error_code
    except OSError:
        return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=10000)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--shards", type=int, default=0, help="offsets.topic.num.partitions (default: unset, 12)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "up"))
        upstream = ServerProcess(os.path.join(tmp, "up", "data"), "group.initial.rebalance.delay.ms=0",
                                 "group.min.session.timeout.ms=1000", log_path=os.path.join(tmp, "up.log")).start()
        procs: dict[int, ServerProcess] = {}

        def start(name: str) -> int:
            """Start instance ``name`` (its data dir kept across restarts); returns its node id."""
            path = os.path.join(tmp, name)
            os.makedirs(path, exist_ok=True)
            shards = [f"offsets.topic.num.partitions={args.shards}"] if args.shards else []
            proc = ServerProcess(os.path.join(path, "data"), f"upstream.bootstrap.servers={upstream.bootstrap}",
                                 f"upstream.membership.session.timeout.ms={args.session_ms}", *shards,
                                 log_path=os.path.join(path, "server.log")).start()
            deadline = time.monotonic() + 60
            while (node := own_node(proc.port)) is None or node in procs and procs[node] is not proc and \
                    procs[node].proc is not None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"instance {name} did not settle a node id of its own")
                time.sleep(0.2)
            procs[node] = proc
            names[node] = name
            return node

        names: dict[int, str] = {}
        probe = [f"group-{i}" for i in range(100)]

        def spread() -> None:
            deadline = time.monotonic() + 120
            any_port = procs[nodes[0]].port
            while {find(any_port, g)[0] for g in probe} != set(nodes):
                if time.monotonic() > deadline:
                    raise SystemExit("the shards did not spread over every instance")
                time.sleep(0.2)

        try:
            nodes = sorted(start(f"i{i}") for i in range(args.instances))
            admin = AdminClient({"bootstrap.servers": procs[nodes[0]].bootstrap})
            admin.create_topics([NewTopic("bench", 1)])["bench"].result(30)
            spread()
            print(f"load: {args.instances} instances (node ids {nodes}), {args.shards or 12} shards, membership "
                  f"session timeout {args.session_ms} ms; target {args.session_ms / 1000 + 2:.1f} s")
            results = []
            for r in range(args.rounds):
                victim = nodes[r % len(nodes)]
                survivor = procs[next(n for n in nodes if n != victim)].port
                group = next(g for g in probe if find(survivor, g)[0] == victim)
                code = commit(procs[victim].port, group, 1)
                assert code == 0, f"commit to the owner: error {code}"
                procs[victim].proc.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                procs[victim].proc.wait()
                while True:
                    node, port = find(survivor, group)
                    if node not in (-1, victim) and commit(port, group, 2) == 0:
                        break
                    if time.monotonic() - killed > 120:
                        raise SystemExit("the group was not served again within 120 s")
                    time.sleep(0.05)
                took = time.monotonic() - killed
                results.append(took)
                print(f"  round {r + 1}: instance {victim} killed; {group} served again by {node} after {took:.2f} s")
                procs[victim].stop()
                again = start(names[victim])
                assert again == victim, f"restarted with node id {again}, not {victim}"
                spread()
            print(f"failover: best {min(results):.2f} s, worst {max(results):.2f} s "
                  f"(session timeout {args.session_ms / 1000:.1f} s + 2 s = {args.session_ms / 1000 + 2:.1f} s)")
        finally:
            for p in procs.values():
                p.stop()
            upstream.stop()


if __name__ == "__main__":
    main()

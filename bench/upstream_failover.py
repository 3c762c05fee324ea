"""Group failover in a cohort cluster: how long a killed instance's groups go unserved.

Starts an upstream (`cohort serve`) and `--instances` cohort instances in front of it sharing
`--shards` shards (`upstream.membership.session.timeout.ms` = `--session-ms`). Each round picks
a group whose shard the next instance owns, commits an offset for it, kills that instance with
SIGKILL, then asks a survivor FindCoordinator and commits to the coordinator it names, every
50 ms, until a commit succeeds. The time from the kill to that commit is the failover; the
issue's target is the session timeout + 2 s. The killed instance is then started again (empty
data dir) and the next round waits until it owns shards again.

    .venv/bin/python bench/upstream_failover.py [--rounds 3] [--session-ms 6000] [--instances 3]
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
    ap.add_argument("--session-ms", type=int, default=6000)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--shards", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "up"))
        upstream = ServerProcess(os.path.join(tmp, "up", "data"), "group.initial.rebalance.delay.ms=0",
                                 "group.min.session.timeout.ms=1000", log_path=os.path.join(tmp, "up.log")).start()
        procs: dict[int, ServerProcess] = {}
        started = 0

        def start(node: int) -> None:
            nonlocal started
            started += 1
            path = os.path.join(tmp, f"i{started}")
            os.makedirs(path)
            procs[node] = ServerProcess(os.path.join(path, "data"), f"upstream.bootstrap.servers={upstream.bootstrap}",
                                        f"offsets.topic.num.partitions={args.shards}",
                                        f"upstream.coordinator.node.id={node}",
                                        f"upstream.membership.session.timeout.ms={args.session_ms}",
                                        log_path=os.path.join(path, "server.log")).start()

        nodes = [1000001 + i for i in range(args.instances)]
        probe = [f"group-{i}" for i in range(8 * args.shards)]

        def spread() -> None:
            deadline = time.monotonic() + 120
            any_port = procs[nodes[0]].port
            while {find(any_port, g)[0] for g in probe} != set(nodes):
                if time.monotonic() > deadline:
                    raise SystemExit("the shards did not spread over every instance")
                time.sleep(0.2)

        try:
            for n in nodes:
                start(n)
            admin = AdminClient({"bootstrap.servers": procs[nodes[0]].bootstrap})
            admin.create_topics([NewTopic("bench", 1)])["bench"].result(30)
            spread()
            print(f"load: {args.instances} instances, {args.shards} shards, membership session timeout "
                  f"{args.session_ms} ms; target {args.session_ms / 1000 + 2:.1f} s")
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
                start(victim)
                spread()
            print(f"failover: best {min(results):.2f} s, worst {max(results):.2f} s "
                  f"(session timeout {args.session_ms / 1000:.1f} s + 2 s = {args.session_ms / 1000 + 2:.1f} s)")
        finally:
            for p in procs.values():
                p.stop()
            upstream.stop()


if __name__ == "__main__":
    main()

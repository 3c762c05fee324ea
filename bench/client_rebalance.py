"""How long a rebalance takes with a client-side assignor, beside the same group on a server-side one.

Three cohort.client members of a group on a 12-partition topic settle; a fourth joins. The figure
is the time from the joiner's start() until the group is Stable again with every member owning
its target (ConsumerGroupDescribe through the broker's admin API, polled every 10 ms), for a
client-side assignor (`ServerSideAssignor("uniform", name="client-uniform")`, so both runs
compute the same assignment) and for the server-side `uniform`. The heartbeat interval is the
broker's (`--interval`, default 5000 ms, Kafka's default).

    .venv/bin/python bench/client_rebalance.py --rounds 3
"""

from __future__ import annotations

import sys
import argparse
import asyncio
import os
import statistics
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers


async def one_rebalance(bootstrap: str, group: str, client_side: bool) -> float:
    from confluent_kafka.admin import AdminClient

    from cohort.client import Consumer, ServerSideAssignor

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def member(name: str) -> Consumer:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name}
        if client_side:
            c = Consumer(config, assignors=[ServerSideAssignor("uniform", name="client-uniform")])
        else:
            c = Consumer({**config, "group.remote.assignor": "uniform"})
        c.subscribe(["rebalance"])
        return c

    def stable_with(n: int) -> bool:
        desc = admin.describe_consumer_groups([group])[group].result(10)
        return (desc.state.name == "STABLE" and len(desc.members) == n
                and sum(len(m.assignment.topic_partitions) for m in desc.members) == 12)

    members = [member(f"m{i}") for i in range(3)]
    for c in members:
        await c.start()
    while not await asyncio.to_thread(stable_with, 3):
        await asyncio.sleep(0.05)
    joiner = member("joiner")
    start = time.monotonic()
    await joiner.start()
    while not (len(joiner.assignment()) == 3 and await asyncio.to_thread(stable_with, 4)):
        await asyncio.sleep(0.01)
    took = time.monotonic() - start
    for c in members + [joiner]:
        await c.close()
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--interval", type=int, default=5000, help="group.consumer.heartbeat.interval.ms")
    args = p.parse_args()

    from confluent_kafka.admin import AdminClient, NewTopic

    from cohort_testing import ServerProcess

    with tempfile.TemporaryDirectory() as base:
        srv = ServerProcess(os.path.join(base, "data"), f"group.consumer.heartbeat.interval.ms={args.interval}",
                            f"group.consumer.min.heartbeat.interval.ms={min(args.interval, 5000)}",
                            log_path=os.path.join(base, "server.log")).start(timeout=60)
        try:
            bootstrap = f"127.0.0.1:{srv.port}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("rebalance", 12)])["rebalance"].result(30)
            times: dict[str, list[float]] = {"client-side": [], "server-side": []}
            for r in range(args.rounds):
                for kind in times:
                    times[kind].append(asyncio.run(one_rebalance(bootstrap, f"{kind}-{r}", kind == "client-side")))
            print(f"a 4th member joins 3 (12 partitions); heartbeat interval {args.interval} ms; "
                  f"load {os.getloadavg()[0]:.2f}")
            for kind, xs in times.items():
                print(f"{kind:<12} median {statistics.median(xs):.2f} s   ({', '.join(f'{x:.2f}' for x in xs)})")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()

"""One more consumer joins a group of 10 on 900 partitions: how long until every member consumes again?

Kafka's published KIP-848 experiment (10 consumers, 900 partitions, an 11th joins) measured
103 s with the classic protocol against 5 s with the consumer protocol. This runs the same shape
on cohort with confluent-kafka (librdkafka) for `group.protocol=classic` (eager `range` and
`cooperative-sticky`) and `group.protocol=consumer`, with each client's and the broker's default
timings (classic heartbeat 3 s, consumer heartbeat 5 s from the broker), while a producer writes
to every partition. Members simulate processing: after each batch they sleep ``--process-ms``
per message before polling again, the reason classic rebalances stall (every member must come
back to poll before the group can move on).

A member "consumes again" with its first batch after both the join and its own last rebalance
callback; the figure is the latest of those over the 11 members, from the moment the 11th
member subscribes. Run:

    .venv/bin/python bench/rebalance.py                       (all three, 900 partitions)
    .venv/bin/python bench/rebalance.py --only consumer --process-ms 0
    .venv/bin/python bench/rebalance.py --heartbeat-ms 1000     (the same interval for both protocols)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers
from cohort_testing import ServerProcess  # noqa: E402

PROTOCOLS = {
    "classic-range": {"group.protocol": "classic", "partition.assignment.strategy": "range"},
    "classic-cooperative-sticky": {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}


class Member(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str, conf: dict, process_ms: float, batch: int) -> None:
        super().__init__(daemon=True)
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
                                     "enable.auto.commit": True, **conf})
        self.topic = topic
        self.process_s = process_ms / 1000
        self.batch = batch
        self.events: list[float] = []  # rebalance callbacks (assign / revoke / lost)
        self.batches: list[float] = []  # when each non-empty batch was received
        self.owned = 0
        self.halt = threading.Event()

    def _event(self, *_: object) -> None:
        self.events.append(time.monotonic())

    def run(self) -> None:
        c = self.consumer
        c.subscribe([self.topic], on_assign=self._event, on_revoke=self._event, on_lost=self._event)
        while not self.halt.is_set():
            msgs = c.consume(self.batch, 0.1)
            self.owned = len(c.assignment())
            if msgs:
                self.batches.append(time.monotonic())
                if self.process_s:
                    time.sleep(self.process_s * len(msgs))
        c.close()

    def consumed_again(self, since: float) -> float | None:
        start = max([since, *(e for e in self.events if e >= since)])
        return next((b for b in self.batches if b > start), None)


class Producer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        tick = 0.05
        per_tick = max(1, int(self.rate * tick))
        while not self.halt.is_set():
            started = time.monotonic()
            for _ in range(per_tick):
                self.producer.produce(self.topic, b"x", partition=i % self.partitions)
                i += 1
            self.producer.poll(0)
            time.sleep(max(0.0, tick - (time.monotonic() - started)))
        self.producer.flush(10)


def settled(members: list[Member], partitions: int) -> bool:
    return all(m.owned for m in members) and sum(m.owned for m in members) == partitions


def run_one(name: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="cohort-bench-rebalance-") as tmp:
        overrides = []
        if args.heartbeat_ms:
            overrides = [f"group.consumer.heartbeat.interval.ms={args.heartbeat_ms}",
                         f"group.consumer.min.heartbeat.interval.ms={min(args.heartbeat_ms, 5000)}"]
        srv = ServerProcess(os.path.join(tmp, "data"), *overrides, log_path=os.path.join(tmp, "server.log")).start()
        members: list[Member] = []
        producer = None
        try:
            topic, group = "bench", f"bench-{name}"
            admin = AdminClient({"bootstrap.servers": srv.bootstrap})
            new = NewTopic(topic, num_partitions=args.partitions, replication_factor=1)
            admin.create_topics([new])[topic].result(30)
            producer = Producer(srv.bootstrap, topic, args.partitions, args.rate)
            producer.start()
            conf = dict(PROTOCOLS[name])
            if args.heartbeat_ms and conf["group.protocol"] == "classic":
                conf["heartbeat.interval.ms"] = args.heartbeat_ms

            def add() -> Member:
                m = Member(srv.bootstrap, group, topic, conf, args.process_ms, args.batch)
                members.append(m)
                m.start()
                return m

            for _ in range(args.members):
                add()
            deadline = time.monotonic() + args.timeout
            while not (settled(members, args.partitions) and all(m.batches for m in members)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: the first {args.members} members never settled")
                time.sleep(0.1)
            time.sleep(args.warmup)
            t0 = time.monotonic()
            add()
            deadline = t0 + args.timeout
            settled_at = None
            while True:
                now = time.monotonic()
                if now > deadline:
                    raise RuntimeError(f"{name}: no settled group {args.timeout} s after the join")
                if settled(members, args.partitions):
                    settled_at = settled_at or now
                    again = [m.consumed_again(t0) for m in members]
                    quiet = all(not m.events or now - m.events[-1] > 1.0 for m in members)
                    if quiet and all(a is not None for a in again):
                        break
                else:
                    settled_at = None
                time.sleep(0.05)
            again = [m.consumed_again(t0) - t0 for m in members]
            return {"protocol": name, "all_consume_again_s": max(again), "new_member_s": again[-1],
                    "assignment_settled_s": settled_at - t0,
                    "owned": sorted(m.owned for m in members)}
        finally:
            for m in members:
                m.halt.set()
            for m in members:
                m.join(30)
            if producer is not None:
                producer.halt.set()
                producer.join(30)
            srv.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(PROTOCOLS), action="append")
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=900)
    parser.add_argument("--rate", type=int, default=3000, help="messages per second over all partitions")
    parser.add_argument("--process-ms", type=float, default=2.0, help="simulated processing per message")
    parser.add_argument("--batch", type=int, default=100, help="messages per consume() call")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--heartbeat-ms", type=int, default=0, help="one heartbeat interval for both protocols "
                        "(default: each protocol's default, 3 s classic, 5 s consumer)")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    print(f"{args.members} consumers on {args.partitions} partitions, one more joins; producer {args.rate} msg/s; "
          f"processing {args.process_ms} ms/message, batches of {args.batch}; heartbeat "
          f"{args.heartbeat_ms or 'defaults'}; load {os.getloadavg()[0]:.1f}")
    for name in args.only or list(PROTOCOLS):
        r = run_one(name, args)
        print(f"  {name:28s} every member consumes again after {r['all_consume_again_s']:6.2f} s "
              f"(new member {r['new_member_s']:.2f} s; assignment settled {r['assignment_settled_s']:.2f} s; "
              f"partitions per member {r['owned'][0]}-{r['owned'][-1]})", flush=True)


if __name__ == "__main__":
    main()

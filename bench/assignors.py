"""Benchmark the built-in assignors on the shapes of Kafka's `ServerSideAssignorBenchmark` (JMH).

A shape is members x partitions-per-member x topics: total partitions = members * ratio, split
evenly over the topics (as in JMH). Member ids are random, in the form Kafka's clients generate
(22 characters of base64; `--member-ids uuid` for 36-character UUID strings), and topic ids random
`uuid.UUID`s (seeded), as the coordinator passes them; every member gets its own subscription set.
The spec lists members in member id order, as the coordinator hands them over (it keeps its view
of a group in that order, joiners appended until they are a sixteenth of it); `--member-order
random` lists them in the order their ids were drawn instead, as a caller that does not keep
them in order would (the assignors sort the ids either way: only that sort's cost differs).

* homogeneous: every member subscribes to every topic.
* heterogeneous: Kafka's bucketed shape; members and topics are cut into 5 contiguous buckets
  and each bucket's members subscribe to that bucket's topics only (5 disjoint sub-groups).
* full: nobody owns anything yet.
* incremental: assign members - 1 members, then add one member (subscribed like the last
  bucket) and re-assign with the previous result as the current assignment; only that second
  run is timed.
* lag cases give every partition a random lag (the lag assignor reads them, others ignore them).

Each timed run is a single `assign` call on a prebuilt spec (after one warm-up call and a full
garbage collection outside the timing); small groups time 200 calls a run and report one. The
table shows the median and minimum wall-clock time over `--repeat` runs, the median CPU time of
this process, the target where the project sets one (judged on the wall-clock median), and the
load average: the machine is shared, and a busy neighbour inflates the wall-clock median long
before it moves the CPU time or the minimum.

`kafka ms` is Kafka's own assignor on the same shape as issue 24 measured it (compiled from
Apache Kafka's sources, JMH, warm, CPU time) on the machine of that run. It is printed for
reference, not divided into: this shared machine's speed moves 2-3x between days, so only a
side-by-side run gives a ratio.

    python bench/assignors.py                       # every case
    python bench/assignors.py --assignor uniform    # one assignor
    python bench/assignors.py --quick --repeat 3    # small shapes, a smoke test
    python bench/assignors.py --grid                # also the wider JMH grid (slow)
    python bench/assignors.py --case "10000m x 10ppm x 1000t homo incremental"   # one row alone

A case run after another one of the same shape inherits the assignors' caches from it, built
from other (equal) topic id objects; `--case` runs one row alone, as JMH forks a JVM per
benchmark.
"""

from __future__ import annotations

import argparse
import base64
import gc
import os
import random
import statistics
import sys
import time
import uuid
from dataclasses import dataclass

from cohort.assignors import GroupSpec, MemberSubscription, TopicDescriber, TopicMetadata, get

BUCKETS = 5


@dataclass(frozen=True)
class Case:
    assignor: str
    members: int
    ratio: int
    topics: int
    heterogeneous: bool = False
    incremental: bool = False
    lags: bool = False
    target_ms: float | None = None
    kafka_ms: float | None = None  # Kafka's own assignor on this shape (issue 24's table, JMH, CPU time)
    number: int = 1  # calls per timed run (small groups take microseconds)

    @property
    def label(self) -> str:
        kind = "hetero" if self.heterogeneous else "homo"
        mode = "incremental" if self.incremental else "full"
        extra = " +lags" if self.lags else ""
        return f"{self.members}m x {self.ratio}ppm x {self.topics}t {kind} {mode}{extra}"


def default_cases(quick: bool) -> list[Case]:
    if quick:
        return [
            Case("uniform", 1000, 10, 100),
            Case("uniform", 1000, 10, 100, incremental=True),
            Case("uniform", 200, 50, 200, heterogeneous=True),
            Case("uniform", 200, 50, 200, heterogeneous=True, incremental=True),
            Case("range", 1000, 50, 100),
            Case("lag", 1000, 10, 100, lags=True),
        ]
    return [
        Case("uniform", 10_000, 10, 1000, target_ms=25, kafka_ms=1.98),
        Case("uniform", 10_000, 10, 1000, incremental=True, target_ms=25, kafka_ms=1.85),
        Case("uniform", 1000, 50, 1000, heterogeneous=True, target_ms=100, kafka_ms=14.8),
        Case("uniform", 1000, 50, 1000, heterogeneous=True, incremental=True, kafka_ms=13.7),
        Case("range", 10_000, 50, 1000, target_ms=150, kafka_ms=29.0),
        Case("range", 10_000, 50, 1000, incremental=True, kafka_ms=30.3),
        Case("lag", 10_000, 10, 1000, lags=True, target_ms=100),
        Case("uniform", 100, 10, 10, kafka_ms=0.029, number=200),
        Case("uniform", 100, 10, 10, incremental=True, kafka_ms=0.023, number=200),
        Case("range", 100, 10, 10, kafka_ms=0.031, number=200),
    ]


def grid_cases(assignors: list[str]) -> list[Case]:
    """A slice of the JMH grid: members {100, 1000, 10000} x ratio {10, 50} x topics {10, 100, 1000}."""
    cases = []
    for name in assignors:
        for members in (100, 1000, 10_000):
            for ratio in (10, 50):
                for topics in (10, 100, 1000):
                    for heterogeneous in (False, True):
                        for incremental in (False, True):
                            cases.append(Case(name, members, ratio, topics, heterogeneous, incremental,
                                              lags=name == "lag"))
    return cases


def build_topics(case: Case, rng: random.Random) -> tuple[list, TopicDescriber]:
    topic_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(case.topics)]
    per_topic = case.members * case.ratio // case.topics
    metadata = {}
    for topic_id in topic_ids:
        lags = tuple(rng.randrange(1_000_000) for _ in range(per_topic)) if case.lags else None
        metadata[topic_id] = TopicMetadata(per_topic, lags=lags)
    return topic_ids, TopicDescriber(metadata)


def subscriptions(case: Case, topic_ids: list, member_count: int) -> list[list]:
    """The topics of each member index, following Kafka's bucketing for heterogeneous groups."""
    if not case.heterogeneous:
        return [topic_ids] * member_count
    buckets = min(BUCKETS, case.members)
    topics_per_bucket = -(-len(topic_ids) // buckets)
    members_per_bucket = -(-case.members // buckets)
    bucket_topics = [topic_ids[b * topics_per_bucket:(b + 1) * topics_per_bucket] for b in range(buckets)]
    return [bucket_topics[i // members_per_bucket] for i in range(member_count)]  # one list a bucket


MEMBER_ORDER = "coordinator"  # --member-order
MEMBER_IDS = "kafka"  # --member-ids


def member_id(rng: random.Random) -> str:
    """A random member id: Kafka's own form by default (`Uuid.randomUuid().toString()`, 22
    characters of URL-safe base64, as Kafka's clients generate them), or a 36-character UUID."""
    value = uuid.UUID(int=rng.getrandbits(128), version=4)
    if MEMBER_IDS == "uuid":
        return str(value)
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def build_spec(case: Case, assignor) -> tuple[GroupSpec, TopicDescriber]:
    rng = random.Random(848)
    topic_ids, describer = build_topics(case, rng)
    member_ids = [member_id(rng) for _ in range(case.members)]
    topic_lists = subscriptions(case, topic_ids, case.members)
    order = sorted(range(case.members), key=member_ids.__getitem__) if MEMBER_ORDER == "coordinator" else None
    # One frozenset per distinct subscription, shared by its members, as the coordinator's spec
    # (and Kafka's harness, bench/jvm) holds them: ten thousand copies of a 1,000-topic set would
    # put ten million entries in the heap, which a full collection walks (0.1 s), and leave each
    # after-GC call measuring a cache that walk flushed.
    shared: dict[int, frozenset] = {}
    for topics in topic_lists:
        if id(topics) not in shared:
            shared[id(topics)] = frozenset(topics)
    subscribed = [shared[id(topics)] for topics in topic_lists]
    members = {member_ids[i]: MemberSubscription(subscribed[i]) for i in order or range(case.members)}
    if not case.incremental:
        return GroupSpec.of(members), describer
    newcomer = member_ids[-1]
    first = assignor.assign(GroupSpec.of({m: s for m, s in members.items() if m != newcomer}), describer)
    members = {  # built in the spec's order, as the coordinator builds its view
        m: MemberSubscription(s.subscribed_topic_ids, assignment=first.get(m, {}))
        for m, s in members.items() if m != newcomer
    }
    members[newcomer] = MemberSubscription(subscribed[-1])  # a joiner is appended
    return GroupSpec.of(members), describer


CALLS: int | None = None  # --calls


def run_case(case: Case, repeat: int) -> tuple[list[float] | None, list[float], str]:
    """Wall-clock and CPU milliseconds of each timed run, or None and the reason it was skipped."""
    try:
        assignor = get(case.assignor)
    except Exception as exc:  # an assignor still being written must not stop the others
        return None, [], f"skipped: {type(exc).__name__}: {exc}"
    spec, describer = build_spec(case, assignor)
    assignor.assign(spec, describer)
    wall, cpu = time_calls(lambda: assignor.assign(spec, describer), repeat, max(CALLS or case.number, case.number))
    return wall, cpu, ""


def time_calls(call, repeat: int, number: int) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU milliseconds per call of `repeat` runs of `number` back-to-back calls,
    each run after a full garbage collection."""
    wall, cpu = [], []
    for _ in range(repeat):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(number):
            call()
        cpu.append((time.process_time() - start_cpu) * 1000 / number)
        wall.append((time.perf_counter() - start) * 1000 / number)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignor", action="append", choices=["uniform", "range", "lag"],
                        help="only this assignor (repeatable); default: all three")
    parser.add_argument("--quick", action="store_true", help="small shapes, for a smoke test")
    parser.add_argument("--grid", action="store_true", help="also run a slice of the JMH grid")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per case (default 7)")
    parser.add_argument("--member-order", choices=["coordinator", "random"], default="coordinator",
                        help="members in member id order as the coordinator passes them (default), or as drawn")
    parser.add_argument("--member-ids", choices=["kafka", "uuid"], default="kafka",
                        help="Kafka's 22-character base64 member ids (default), or 36-character UUID strings")
    parser.add_argument("--calls", type=int, help="back-to-back calls per timed run, as in a JMH iteration "
                        "(default: 1 after a full garbage collection; 200 for small groups)")
    parser.add_argument("--case", action="append", metavar="TEXT",
                        help="only the rows whose label contains TEXT (repeatable)")
    args = parser.parse_args(argv)
    global MEMBER_ORDER, MEMBER_IDS, CALLS
    MEMBER_ORDER = args.member_order
    MEMBER_IDS = args.member_ids
    CALLS = args.calls
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    names = args.assignor or ["uniform", "range", "lag"]
    cases = [c for c in default_cases(args.quick) if c.assignor in names]
    if args.grid:
        cases += grid_cases(names)
    if args.case:
        cases = [c for c in cases if any(text in c.label for text in args.case)]

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus, repeat {args.repeat}")
    print(f"{'assignor':<8} {'case':<44} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'kafka ms':>9} "
          f"{'target':>7}  result")
    failed = False
    for case in cases:
        timings, cpu, note = run_case(case, args.repeat)
        target = f"{case.target_ms:g}" if case.target_ms else "-"
        if timings is None:
            print(f"{case.assignor:<8} {case.label:<44} {'-':>10} {'-':>8} {'-':>8} {'-':>9} {target:>7}  {note}")
            continue
        median = statistics.median(timings)
        verdict = ""
        if case.target_ms:
            verdict = "ok" if median <= case.target_ms else "OVER TARGET"
            failed |= median > case.target_ms
        kafka = f"{case.kafka_ms:g}" if case.kafka_ms else "-"
        print(f"{case.assignor:<8} {case.label:<44} {median:>10.3f} {min(timings):>8.3f} "
              f"{statistics.median(cpu):>8.3f} {kafka:>9} {target:>7}  {verdict}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

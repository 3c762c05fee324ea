"""Assignor cost on small groups, the shape the Spark pipeline runs a million times.

    python bench/small_groups.py            # members x topics x partitions per topic, us per call

For each shape: a fresh group (no current assignment), a settled one (its own previous result
as the current assignment, same lags), and one where a member has just joined. Member ids are
random UUID strings and topic ids random `uuid.UUID`s, as the coordinator passes them; lags are
random. Figures are the best of --repeat rounds of --number calls, in microseconds per call.
"""

from __future__ import annotations

import argparse
import random
import sys
import timeit
import uuid

from cohort import assignors
from cohort.assignors.api import GroupSpec, MemberSubscription, TopicDescriber, TopicMetadata

SHAPES = ((2, 1, 20), (5, 1, 20), (5, 2, 10), (8, 2, 10))


def cases(members: int, topics: int, partitions: int, seed: int = 848):
    rng = random.Random(seed)
    topic_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(topics)]
    describer = TopicDescriber({
        t: TopicMetadata(partitions, lags=tuple(rng.randrange(1_000_000) for _ in range(partitions))) for t in topic_ids
    })
    member_ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(members)]
    subscription = frozenset(topic_ids)
    return describer, member_ids, subscription


def spec(member_ids, subscription, current=None):
    current = current or {}
    return GroupSpec.of({m: MemberSubscription(subscription, assignment=current.get(m, {})) for m in member_ids})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    print(f"{'assignor':8} {'shape':>12} {'fresh':>8} {'settled':>8} {'joined':>8}   (us per call)")
    for name in ("uniform", "range", "lag"):
        assignor = assignors.get(name)
        for shape in SHAPES:
            describer, member_ids, subscription = cases(*shape)
            fresh = spec(member_ids, subscription)
            settled = spec(member_ids, subscription, assignor.assign(fresh, describer))
            before = assignor.assign(spec(member_ids[:-1], subscription), describer)
            joined = spec(member_ids, subscription, before)
            times = [
                min(timeit.repeat(lambda s=s: assignor.assign(s, describer), number=args.number, repeat=args.repeat))
                / args.number * 1e6
                for s in (fresh, settled, joined)
            ]
            label = "x".join(map(str, shape))
            print(f"{name:8} {label:>12} " + " ".join(f"{t:8.1f}" for t in times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

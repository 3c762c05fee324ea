"""Fuzz `cohort serve` with mutated real-client frames, sampling its memory, then check that data
produced before the run is intact and that a producer and a KIP-848 consumer group still work.

Starts the broker as a subprocess on a free port of 127.0.0.1 with a temporary data directory
(the partition limits are lowered so mutated CreateTopics stay cheap; `--setting` adds more).
Reports frames/s, how frames ended (answered, closed, parked, unanswered), peak and last RSS,
tracebacks in the broker's log, and the checks after the run.

    .venv/bin/python bench/fuzz.py [--frames 1000000] [--seed N] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers
from cohort_fuzzing import fuzz, group_still_works, load_corpus, produce_canary, read_canary  # noqa: E402
from cohort_testing import ServerProcess, rss_mb  # noqa: E402

CORPUS = os.path.join(os.path.dirname(__file__), "..", "tests", "protocol", "corpus", "client-frames.bin")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--answer-timeout", type=float, default=5.0)
    ap.add_argument("--setting", action="append", default=["max.partitions.per.topic=64", "max.broker.partitions=20000"])
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    seeds = load_corpus(CORPUS)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "server.log")
        srv = ServerProcess(os.path.join(tmp, "data"), *args.setting, log_path=log).start()
        try:
            produce_canary(srv.bootstrap)
            peak = [rss_mb(srv.proc.pid)]
            start = time.monotonic()
            last = [start]

            def progress(tally):
                peak[0] = max(peak[0], rss_mb(srv.proc.pid))
                now = time.monotonic()
                if now - last[0] >= 30:
                    last[0] = now
                    print(f"  {tally.frames:>9,} frames, {tally.frames / (now - start):,.0f}/s, RSS {rss_mb(srv.proc.pid):.0f} MB"
                          f" (peak {peak[0]:.0f}), unanswered {tally.unanswered}", flush=True)

            tally = asyncio.run(fuzz("127.0.0.1", srv.port, seeds, seed=seed, frames=args.frames,
                                     connections=args.connections, answer_timeout=args.answer_timeout,
                                     progress=progress))
            took = time.monotonic() - start
            alive = srv.proc.poll() is None
            end_rss = rss_mb(srv.proc.pid) if alive else 0.0
            canary = read_canary(srv.bootstrap) == {b"canary %d" % i for i in range(1000)} if alive else False
            group = group_still_works(srv.bootstrap) if alive else False
        finally:
            code = srv.stop()
        with open(log, errors="replace") as f:
            text = f.read()
        print(f"seed {seed}: {tally.frames:,} frames in {took:.0f} s ({tally.frames / took:,.0f}/s) on "
              f"{tally.connections:,} connections")
        print(f"  answered {tally.answered:,}, closed by the broker {tally.closed:,}, parked {tally.parked:,}, "
              f"unanswered {tally.unanswered}, out of order {tally.misordered}")
        print(f"  broker alive after the run: {alive}; exit code on SIGTERM: {code}; tracebacks in its log: "
              f"{text.count('Traceback')}; RSS peak {peak[0]:.0f} MB, at the end {end_rss:.0f} MB")
        print(f"  canary records intact: {canary}; producer + KIP-848 group afterwards: {group}")
        if tally.hang_samples:
            print("  hang samples:", *tally.hang_samples, sep="\n    ")
        ok = alive and code == 0 and not tally.failures() and "Traceback" not in text and canary and group
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

"""CPU of one `cohort serve` process: start on an empty data dir (HTTP listener off), 2 s idle, SIGTERM.

    python bench/serve_start.py src                                  # this tree
    python bench/serve_start.py /tmp/old/src src --rounds 4         # trees side by side, alternating

Each argument is a `src` directory put first on PYTHONPATH for the child (`git archive REV src`
gives another revision's; copy the built `_uniform_native*.so` beside its assignors so both trees
load the same native code). Reports each tree's CPU per process (user + system, the child's
rusage), sorted. The test suite starts hundreds of these, so their start is part of its CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time


def once(src: str) -> float:
    data = tempfile.mkdtemp(prefix="bench-serve-")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen([sys.executable, "-m", "cohort.server", "serve", "--port", "0", "--data-dir",
                             os.path.join(data, "data"), "-o", "http.listener="],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": src})
    for line in proc.stdout:
        if line.startswith(b"cohort: listening on"):
            break
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    proc.stdout.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", help="src directories")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    runs: dict[str, list[float]] = {t: [] for t in args.trees}
    for _ in range(args.rounds):
        for tree in args.trees:
            runs[tree].append(once(os.path.abspath(tree)))
    for tree, cpu in runs.items():
        print(f"{tree}: " + ", ".join(f"{c:.2f}" for c in sorted(cpu)) + " s of CPU per process")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Instructions one `assign()` call executes, counted by valgrind's callgrind: repeatable on a
shared machine where CPU time is not (the figures of two identical runs differ by well under 1 %).

For each shape of `bench/assignors.py` named, a driver builds the spec, calls the assignor twice
(caches warm), then N more times; the same driver with no further calls is the baseline, and the
difference over N is what one call costs. `--src` measures another tree (e.g. a `git worktree`
of an older commit, its C extension built or copied in) for an A/B:

    .venv/bin/python bench/assignor_instructions.py [--case TEXT]... [--calls N] [--src DIR/src]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

DRIVER = """
import sys
sys.path.insert(0, {bench!r})
import assignors as shapes
case = [c for c in shapes.default_cases(False) if c.label == {label!r} and c.assignor == {assignor!r}][0]
assignor = shapes.get(case.assignor)
spec, describer = shapes.build_spec(case, assignor)
assignor.assign(spec, describer)
assignor.assign(spec, describer)
for _ in range({calls}):
    assignor.assign(spec, describer)
"""


def instructions(src: str | None, case, calls: int) -> int:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.path.abspath(src)
    code = DRIVER.format(bench=HERE, label=case.label, assignor=case.assignor, calls=calls)
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code],
                          env=env, capture_output=True, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def main() -> int:
    sys.path.insert(0, HERE)
    import assignors as shapes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", metavar="TEXT", help="only rows whose label contains TEXT")
    parser.add_argument("--calls", type=int, default=0, help="calls counted (default: 20 for large shapes, 500 for small)")
    parser.add_argument("--src", help="the tree's src directory to measure (default: the installed cohort)")
    args = parser.parse_args()
    cases = [c for c in shapes.default_cases(False) if c.assignor in ("uniform", "range")]
    if args.case:
        cases = [c for c in cases if any(text in c.label for text in args.case)]
    for case in cases:
        calls = args.calls or (500 if case.members * case.ratio <= 1000 else 20)
        per_call = (instructions(args.src, case, calls) - instructions(args.src, case, 0)) / calls
        print(f"{case.assignor:<8} {case.label:<44} {per_call:>14,.0f} instructions per call", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

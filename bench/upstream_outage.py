"""An upstream outage of any length under load: does the instance in front of it survive, how
soon do its groups commit again once the upstream is back, and is any acknowledged commit lost?

One instance in front of an upstream `cohort serve` (offsets mirrored upstream, so the offset
mirror's admin requests are in flight too), a KIP-848 group of two consumers and a classic group
committing every record while a producer writes 50 records/s; the upstream is stopped for each
`--outage` in turn and started again with its data (tests/upstream/upstream_outage.py). The suite
runs 2 s and 40 s; this runs any length, by default 2 s, 40 s and 3 minutes.

    .venv/bin/python bench/upstream_outage.py [--outage 2 --outage 40 --outage 180]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # the test helpers
sys.path.insert(0, os.path.join(HERE, "..", "tests", "upstream"))

from upstream_outage import run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outage", type=float, action="append", metavar="SECONDS", help="repeatable (default 2, 40, 180)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(Path(tmp), args.outage or [2, 40, 180])
    survived = all(r.get("instance_running", True) and not r.get("lost") for r in rows)
    print("survived every outage, no acknowledged commit lost" if survived else "FAILED")
    raise SystemExit(0 if survived and rows[-1].get("instance_exit_status") == 0 else 1)


if __name__ == "__main__":
    main()

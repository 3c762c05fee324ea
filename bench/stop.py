"""How long a broker takes to stop with many partitions, idle and after writes.

    python bench/stop.py                          # 3,000 partitions, 5 rounds
    PYTHONPATH=<other tree>/src python bench/stop.py --partitions 3000   # another tree, same load

Per round: a broker in this process (its own loop thread, `tests/cohort_testing.py`'s
ServerThread) on a fresh data dir creates one topic of --partitions partitions over the wire,
produces one record to --written of them, and is stopped; the stop (closing every log) is timed,
wall and this process's CPU. The data dir is then opened by a second broker, which is stopped
at once: a stop with nothing written since the start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "server"))

from cohort_testing import ServerThread, WireClient  # noqa: E402
from rawreq import create_topics  # noqa: E402


def timed_stop(srv) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    srv.stop()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=3000)
    ap.add_argument("--written", type=int, default=100, help="partitions that get one record each")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    import confluent_kafka as ck

    after_writes, untouched = [], []
    for _ in range(args.rounds):
        base = Path(tempfile.mkdtemp(prefix="bench-stop-"))
        try:
            srv = ServerThread(base / "data").start()
            with WireClient(srv.port, timeout=120) as c:
                assert c.request(19, 7, create_topics(7, ("wide", args.partitions))).topics[0].error_code == 0
            producer = ck.Producer({"bootstrap.servers": srv.bootstrap, "acks": "all"})
            for p in range(args.written):
                producer.produce("wide", b"x", partition=p)
            assert producer.flush(60) == 0
            del producer
            after_writes.append(timed_stop(srv))
            untouched.append(timed_stop(ServerThread(base / "data").start()))
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(f"{args.partitions:,} partitions ({args.written} written), {args.rounds} rounds, median (min):")
    for name, runs in (("stop after the writes", after_writes), ("stop of a restarted, untouched broker", untouched)):
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"  {name}: {statistics.median(walls) * 1e3:,.0f} ms wall ({min(walls) * 1e3:,.0f}), "
              f"{statistics.median(cpus) * 1e3:,.0f} ms CPU ({min(cpus) * 1e3:,.0f})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())

"""`cohort pipeline evaluate` on local[2], on a two-worker standalone cluster and through Spark Connect.

    python bench/pipeline_clusters.py                     # 2,000 groups x 3 samples, 3 rounds
    python bench/pipeline_clusters.py --groups 20000 --rounds 1

One fleet is simulated first (local[2]). Then, round after round, the same `evaluate` job runs
three ways, as users run them, in one process each: `--master local[2]`, `--master spark://...`
(a master and two workers of one core each, `tests/spark_cluster.py`) and `--remote sc://...` (a
Spark Connect server on that cluster, started once and kept: its JVM start is not counted). Per
run: wall time, and CPU of the whole machine from /proc/stat (the job's driver, executors and
Python workers live in different processes), both per group sample. The three must report the
same winner. The order rotates each round so no way always runs on a warmer page cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the cluster launcher the tests use

from spark_cluster import SparkCluster  # noqa: E402

WAYS = ("local[2]", "standalone", "connect")


def machine_cpu() -> float:
    """Seconds of CPU the machine spent (user + nice + system), all cores."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return (int(fields[0]) + int(fields[1]) + int(fields[2])) / os.sysconf("SC_CLK_TCK")


def run(cmd: list[str], env: dict) -> tuple[float, float, str]:
    cpu, wall = machine_cpu(), time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - wall, machine_cpu() - cpu
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ...: {result.stderr[-2000:]}")
    return wall, cpu, result.stdout.strip().splitlines()[-1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=None, help="working directory (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-clusters-"))
    cli = [sys.executable, "-m", "cohort.pipeline.cli"]
    cluster = SparkCluster(work / "cluster", workers=2, cores=1, app_cores=2)
    try:
        cluster.start()
        env = cluster.env()
        local_env = {**env, "SPARK_CONF_DIR": str(ROOT / "tests" / "pipeline" / "spark-conf")}
        fleet = work / "fleet"
        wall, _, line = run([*cli, "simulate", "--groups", str(args.groups), "--samples", str(args.samples),
                             "--out", str(fleet), "--master", "local[2]"], local_env)
        print(f"fleet: {line}", flush=True)
        # The Connect server takes the cluster's two cores while it runs: start it after the
        # standalone runs of each round and stop it before the next, so no way waits for cores.
        rows = {way: [] for way in WAYS}
        for r in range(args.rounds):
            order = WAYS[r % 3:] + WAYS[: r % 3]
            for way in order:
                out = work / f"eval-{way.replace('[2]', '2')}-{r}"  # no glob characters in a path Spark reads back
                if way == "connect":
                    remote = cluster.remote or cluster.start_connect()
                    where, job_env = ["--remote", remote], env
                elif way == "standalone":
                    cluster.stop_connect()
                    where, job_env = ["--master", cluster.master_url], env
                else:
                    where, job_env = ["--master", "local[2]"], local_env
                wall, cpu, line = run([*cli, "evaluate", "--samples", str(fleet), "--out", str(out), *where], job_env)
                rows[way].append((wall, cpu, line.split(" (")[0]))
                print(f"round {r + 1} {way:>10}: {wall:6.1f} s wall, {cpu:6.1f} s CPU: {line}", flush=True)
                shutil.rmtree(out, ignore_errors=True)
        n = args.groups * args.samples
        print(f"\nevaluate of {args.groups:,} groups x {args.samples} samples (uniform, range, lag), "
              f"best of {args.rounds} rounds:")
        print("| way | wall | CPU (machine) | wall per group sample | CPU per group sample |")
        print("|---|---|---|---|---|")
        for way in WAYS:
            wall, cpu, _ = min(rows[way])
            print(f"| {way} | {wall:.1f} s | {cpu:.1f} s | {1e3 * wall / n:.2f} ms | {1e3 * cpu / n:.2f} ms |")
        winners = {way: {line for *_, line in rows[way]} for way in WAYS}
        assert len({frozenset(w) for w in winners.values()}) == 1, winners
    finally:
        cluster.stop()
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

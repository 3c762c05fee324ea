"""cohort's assignors against Apache Kafka's own, side by side in one run, CPU per `assign()` call.

Kafka's `UniformAssignor` and `RangeAssignor` are compiled from a Kafka source tree (with the
classes they reach: `Uuid`, the assignor API, `MemberAssignmentImpl`; slf4j-api from PySpark's
jars) together with `bench/jvm/AssignorBench.java`, which runs them warm in a JVM on the shapes
of `bench/assignors.py`. Both sides use member ids in Kafka's form (22 characters of base64, as
Kafka's clients generate them) and random topic ids.

For every shape, in alternating rounds (JVM, then cohort in this process):
* **steady**: `--calls` back-to-back calls per timed run (`--small-calls` for the 100-member
  shapes), as a JMH iteration calls `assign()`; the JVM warms up for `--warmup` seconds first.
* **after GC**: a full collection (`System.gc()`, `gc.collect()`), then one timed call
  (`--runs` of them a round, `--small-runs` for the 100-member shapes).

Kafka's CPU is given twice: the calling thread's (what the assignor itself costs), and the whole
JVM's per call (its garbage collector's threads included, as cohort's figure includes Python's
collector). The ratio divides cohort's process CPU by the JVM's thread CPU, the stricter of the
two; `/proc` shows the JVM's process figure next to it.

    python bench/kafka_assignors.py --kafka /path/to/kafka                # a source checkout
    python bench/kafka_assignors.py --kafka /work/.mirror/apache+kafka/repo --rev HEAD   # a git dir
    python bench/kafka_assignors.py --kafka ... --case "100m"             # rows whose label has 100m
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import assignors as shapes  # noqa: E402 - bench/assignors.py: the shapes and the spec builder

SOURCE_ROOTS = ("clients/src/main/java", "server-common/src/main/java",
                "group-coordinator/group-coordinator-api/src/main/java", "group-coordinator/src/main/java")


def kafka_sources(kafka: Path, rev: str, work: Path) -> Path:
    """A directory holding SOURCE_ROOTS of Kafka: `kafka` itself, or `rev` extracted from a git dir."""
    if (kafka / SOURCE_ROOTS[0]).is_dir():
        return kafka
    out = work / "src"
    if not out.exists():
        archive = subprocess.run(["git", "--git-dir", str(kafka), "archive", rev, *SOURCE_ROOTS],
                                 capture_output=True, check=True).stdout
        out.mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def slf4j_jar() -> str:
    # Found without importing pyspark: its modules would sit in this process's heap, which every
    # after-GC timing of cohort's calls walks first (about 30,000 more objects).
    spec = importlib.util.find_spec("pyspark")
    places = [] if spec is None else list(spec.submodule_search_locations or ())
    found = [jar for place in places for jar in glob.glob(os.path.join(place, "jars", "slf4j-api-*.jar"))]
    if not found:
        raise SystemExit("kafka_assignors: slf4j-api not found in PySpark's jars (pip install 'cohort[pipeline]')")
    return found[0]


def compile_harness(kafka: Path, rev: str) -> str:
    """The classpath of the compiled harness and Kafka's assignors (cached per source and harness)."""
    harness = HERE / "jvm" / "AssignorBench.java"
    key = hashlib.sha256(f"{kafka.resolve()}:{rev}:".encode() + harness.read_bytes()).hexdigest()[:16]
    work = Path(tempfile.gettempdir()) / f"cohort-kafka-assignors-{key}"
    classes = work / "classes"
    jar = slf4j_jar()
    if not (classes / "AssignorBench.class").exists():
        src = kafka_sources(kafka, rev, work)
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", jar,
                        "-sourcepath", os.pathsep.join(str(src / root) for root in SOURCE_ROOTS), str(harness)],
                       check=True)
    return os.pathsep.join((str(classes), jar))


def run_kafka(classpath: str, case: shapes.Case, calls: int, runs: int, warmup: float) -> dict:
    argv = ["java", "-cp", classpath, "AssignorBench", case.assignor, str(case.members), str(case.ratio),
            str(case.topics), "hetero" if case.heterogeneous else "homo",
            "incremental" if case.incremental else "full", str(calls), str(runs), str(warmup)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_cohort(case: shapes.Case, calls: int, runs: int) -> dict:
    assignor = shapes.get(case.assignor)
    spec, describer = shapes.build_spec(case, assignor)
    for _ in range(3):
        assignor.assign(spec, describer)

    def call():
        assignor.assign(spec, describer)

    return {"steady": shapes.time_calls(call, runs, calls)[1], "after_gc": shapes.time_calls(call, runs, 1)[1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", type=Path, required=True,
                        help="a Kafka source checkout, or a Kafka git dir (with --rev)")
    parser.add_argument("--rev", default="HEAD", help="the revision to extract from a git dir (default HEAD)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating JVM/cohort rounds (default 2)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs per mode and round (default 7)")
    parser.add_argument("--calls", type=int, default=20, help="back-to-back calls per steady run (default 20)")
    parser.add_argument("--small-calls", type=int, default=2000,
                        help="the same for groups of at most 1,000 partitions (default 2000)")
    parser.add_argument("--small-runs", type=int, default=21,
                        help="the same for groups of at most 1,000 partitions, whose after-GC calls are "
                             "single cold calls of tens of microseconds (default 21)")
    parser.add_argument("--warmup", type=float, default=3.0, help="JVM warm-up seconds per shape (default 3)")
    parser.add_argument("--case", action="append", metavar="TEXT", help="only rows whose label contains TEXT")
    args = parser.parse_args(argv)

    classpath = compile_harness(args.kafka, args.rev)
    cases = [c for c in shapes.default_cases(False) if c.assignor in ("uniform", "range")]
    if args.case:
        cases = [c for c in cases if any(text in c.label for text in args.case)]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus; median CPU ms per call")
    print(f"{'assignor':<8} {'case':<40} {'mode':<8} {'kafka thread':>12} {'kafka jvm':>10} {'cohort':>9} "
          f"{'cohort/kafka':>12}")
    for case in cases:
        small = case.members * case.ratio <= 1000
        calls, runs = (args.small_calls, args.small_runs) if small else (args.calls, args.runs)
        kafka = {"steady": [], "after_gc": []}
        kafka_jvm = {"steady": [], "after_gc": []}
        ours = {"steady": [], "after_gc": []}
        for _ in range(args.rounds):
            got = run_kafka(classpath, case, calls, runs, args.warmup)
            mine = run_cohort(case, calls, runs)
            for mode in ("steady", "after_gc"):
                kafka[mode] += got[mode]["thread_cpu_ms"]
                kafka_jvm[mode].append(statistics.fmean(got[mode]["process_cpu_ms"]))
                ours[mode] += mine[mode]
        for mode in ("steady", "after_gc"):
            k, o = statistics.median(kafka[mode]), statistics.median(ours[mode])
            jvm = statistics.median(kafka_jvm[mode])
            # The JVM's process CPU moves in scheduler ticks: over one call (after GC) of a small
            # group it reads 0 or a whole tick, so it is shown only where it is a real figure.
            shown = f"{jvm:>10.4f}" if jvm > 0 else f"{'-':>10}"
            print(f"{case.assignor:<8} {case.label:<40} {mode:<8} {k:>12.4f} {shown} {o:>9.4f} {o / k:>12.2f}",
                  flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`cohort pipeline simulate|evaluate`: argument handling for the Spark jobs, nothing more.

`add_parser(subparsers)` plugs `pipeline` into the `cohort` command; `run_job(name, argv)` is the
entry the job modules use under spark-submit. Bad input prints one line on stderr and exits 2,
before any Spark session starts; a job that fails once running prints one line and exits 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

EXIT_USAGE = 2
EXIT_FAILED = 1


class UsageError(Exception):
    """Bad input: one line on stderr, exit 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def _one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make argparse report bad arguments as one line (no usage dump), exit 2."""

    def error(message: str):
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)

    parser.error = error
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="output directory; nothing is written outside it")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (default local[*]; under spark-submit, spark-submit's choice)")
    p.add_argument("--driver-memory", default="2g", metavar="SIZE", help="driver JVM heap for local runs (default 2g)")


def _configure(pipeline: argparse.ArgumentParser) -> None:
    _one_line_errors(pipeline)
    jobs = pipeline.add_subparsers(dest="job", required=True, metavar="JOB")

    sim = _one_line_errors(jobs.add_parser(
        "simulate",
        help="write synthetic lag samples (skewed and even fleets, member churn, racks)",
        description="Write a synthetic fleet's lag samples in the layout of docs/pipeline.md.",
    ))
    sim.add_argument("--groups", required=True, type=_positive_int, metavar="N", help="number of consumer groups")
    sim.add_argument("--samples", type=_positive_int, default=3, metavar="K", help="samples per group (default 3)")
    sim.add_argument("--seed", type=_int, default=0, metavar="S", help="seed; the same seed gives the same fleet")
    sim.add_argument("--partitions", type=_positive_int, default=20, metavar="P", help="partitions per group (default 20)")
    sim.add_argument("--skewed-fraction", type=_fraction, default=0.5, metavar="F",
                     help="fraction of groups with a few hot partitions (default 0.5)")
    sim.add_argument("--churn", type=_fraction, default=0.3, metavar="F",
                     help="chance per sample that a group's membership changes (default 0.3)")
    _common(sim)
    sim.set_defaults(pipeline_job=_simulate)

    ev = _one_line_errors(jobs.add_parser(
        "evaluate",
        help="run uniform, range and lag on every group and sample and report which serves each best",
        description="Score assignors on lag samples; write Parquet tables and OUT/report.md.",
    ))
    ev.add_argument("--samples", required=True, metavar="DIR", help="a directory of lag samples (docs/pipeline.md)")
    ev.add_argument("--assignors", default="uniform,range,lag", metavar="A,B,...",
                    help="comma-separated assignor names (default uniform,range,lag)")
    ev.add_argument("--shuffle-partitions", type=_positive_int, default=None, metavar="N",
                    help="partitions groups are spread over (default 2 x cores)")
    _common(ev)
    ev.set_defaults(pipeline_job=_evaluate)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `pipeline` (with jobs `simulate` and `evaluate`) on the `cohort` subcommand parsers."""
    pipeline = subparsers.add_parser(
        "pipeline",
        help="Spark jobs over consumer-group lag (simulate, evaluate)",
        description="Spark jobs over consumer-group lag; see docs/pipeline.md.",
    )
    _configure(pipeline)
    pipeline.set_defaults(func=run_parsed)
    return pipeline


def _out_dir(text: str) -> Path:
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {text}: exists and is not a directory")
    return out


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _simulate(args) -> int:
    out = _out_dir(args.out)
    from cohort.pipeline.fleet import FleetParams
    from cohort.pipeline.session import spark_session
    from cohort.pipeline.simulate import write_fleet

    params = FleetParams(samples=args.samples, partitions=args.partitions, seed=args.seed,
                         skewed_fraction=args.skewed_fraction, churn=args.churn)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with spark_session(out, master=args.master, app_name="cohort-pipeline-simulate",
                       driver_memory=args.driver_memory) as spark:
        write_fleet(spark, out, args.groups, params)
    print(f"wrote {args.groups:,} groups x {args.samples} samples x {args.partitions} partitions to {out} "
          f"in {time.perf_counter() - started:.1f} s")
    return 0


def _evaluate(args) -> int:
    from cohort import assignors

    names = [n.strip() for n in args.assignors.split(",") if n.strip()]
    if not names:
        raise UsageError("--assignors: give at least one assignor name")
    if len(set(names)) != len(names):
        raise UsageError(f"--assignors: {args.assignors!r} names an assignor twice")
    for name in names:
        try:
            assignors.get(name)
        except assignors.UnknownAssignorError as e:
            raise UsageError(f"--assignors: {e}") from None
    if _is_local(args.samples):
        samples = Path(args.samples.removeprefix("file://"))
        if not samples.is_dir():
            raise UsageError(f"--samples {args.samples}: no such directory")
        missing = [t for t in ("partitions", "members") if not (samples / t).is_dir()]
        if missing:
            raise UsageError(f"--samples {args.samples}: not a lag-sample directory (no {' or '.join(missing)}/ table)")
    out = _out_dir(args.out)
    if _is_local(args.samples) and out.resolve() == Path(args.samples.removeprefix("file://")).resolve():
        raise UsageError("--out must differ from --samples")
    from cohort.pipeline.evaluate import SamplesError, run
    from cohort.pipeline.session import spark_session

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with spark_session(out, master=args.master, app_name="cohort-pipeline-evaluate",
                       driver_memory=args.driver_memory) as spark:
        try:
            facts = run(spark, args.samples, out, names, args.shuffle_partitions)
        except SamplesError as e:
            raise UsageError(str(e)) from None
    elapsed = time.perf_counter() - started
    if facts["winner"] is None:
        print(f"no group with members in {args.samples}; report: {out / 'report.md'}")
    elif facts["runner_up"] is None:
        print(f"scored {facts['groups']:,} groups with {facts['winner']} in {elapsed:.1f} s; report: {out / 'report.md'}")
    else:
        print(f"{facts['winner']} wins: average max member lag {100 * facts['margin']:.1f} % below "
              f"{facts['runner_up']} over {facts['groups']:,} groups ({elapsed:.1f} s); report: {out / 'report.md'}")
    return 0


def run_parsed(args) -> int:
    """Run the job chosen on the command line; usage errors become one line and exit 2."""
    prog = f"cohort pipeline {args.job}"
    try:
        return args.pipeline_job(args)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as e:
        print(f"{prog}: error: {e.name or e} is not installed (pip install 'cohort[pipeline]')", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # a failed Spark job: one line, not a JVM stack trace
        from cohort.pipeline.session import spark_error_line

        line = spark_error_line(e)
        if line is None:
            raise
        print(f"{prog}: failed: {line}", file=sys.stderr)
        return EXIT_FAILED


def build_parser(prog: str = "cohort pipeline") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Spark jobs over consumer-group lag.")
    _configure(parser)
    return parser


def run_job(job: str, argv: Sequence[str] | None = None) -> int:
    """Entry for `spark-submit .../simulate.py ARGS` and `.../evaluate.py ARGS`: the job's own arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog="cohort pipeline").parse_args([job, *argv])
    return run_parsed(args)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m cohort.pipeline.cli JOB ...`, the same as `cohort pipeline JOB ...`."""
    return run_parsed(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

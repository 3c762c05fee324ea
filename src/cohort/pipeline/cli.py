"""`cohort pipeline simulate|evaluate|lag`: argument handling for the Spark jobs, nothing more.

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


def _bootstrap(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return text


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str) -> float:
    number, unit = text, "s"
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            number, unit = text[: -len(suffix)], suffix
            break
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration such as 10s, 500ms or 1m, got {text!r}")
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
    p.add_argument("--verbose", action="store_true", help="Spark's own log lines, and the full trace of a failure")


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
                    help="tasks groups are spread over (default: 8 per core when the Python workers read "
                         "the group-sample table, 2 per core when Spark shuffles the rows)")
    _common(ev)
    ev.set_defaults(pipeline_job=_evaluate)

    lag = _one_line_errors(jobs.add_parser(
        "lag",
        help="sample a live cluster's consumer-group lag into Parquet, with Burrow status and the broker's lag snapshot",
        description="Structured Streaming from the cohort-lag source into the sample layout (docs/pipeline.md).",
    ))
    lag.add_argument("--bootstrap", required=True, type=_bootstrap, metavar="HOST:PORT", help="any Kafka-compatible broker")
    lag.add_argument("--interval", type=_duration, default=10.0, metavar="DURATION",
                     help="time between samples: 10s (default), 500ms, 1m, or seconds")
    lag.add_argument("--once", action="store_true", help="take one sample and stop (availableNow trigger)")
    lag.add_argument("--window", type=_positive_int, default=10, metavar="N",
                     help="samples per partition that Burrow's rules look at (default 10)")
    lag.add_argument("--snapshot-dir", default=None, metavar="DIR",
                     help="where the cohort-lag-snapshot/1 files go (default OUT/snapshots)")
    lag.add_argument("--timeout", type=_duration, default=15.0, metavar="DURATION",
                     help="how long to wait for the cluster per request (default 15s)")
    _common(lag)
    lag.set_defaults(pipeline_job=_lag)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `pipeline` (with jobs `simulate` and `evaluate`) on the `cohort` subcommand parsers."""
    pipeline = subparsers.add_parser(
        "pipeline",
        help="Spark jobs over consumer-group lag (simulate, evaluate, lag)",
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
                       driver_memory=args.driver_memory, verbose=args.verbose,
                       progress="cohort pipeline simulate") as spark:
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
    from cohort.pipeline.sample_files import local_path

    local = local_path(args.samples)
    if local is not None:
        samples = Path(local)
        if not samples.is_dir():
            raise UsageError(f"--samples {args.samples}: no such directory")
        if not (samples / "partitions").is_dir():
            raise UsageError(f"--samples {args.samples}: not a lag-sample directory (no partitions/ table)")
    out = _out_dir(args.out)
    if local is not None and out.resolve() == Path(local).resolve():
        raise UsageError("--out must differ from --samples")
    from cohort.pipeline.evaluate import SamplesError, run
    from cohort.pipeline.session import spark_session

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with spark_session(out, master=args.master, app_name="cohort-pipeline-evaluate",
                       driver_memory=args.driver_memory, verbose=args.verbose,
                       progress="cohort pipeline evaluate") as spark:
        try:
            facts = run(spark, args.samples, out, names, args.shuffle_partitions)
        except SamplesError as e:
            raise UsageError(str(e)) from None
    elapsed = time.perf_counter() - started
    skipped = f"; {facts['skipped']:,} groups without members skipped" if facts.get("skipped") else ""
    if facts["winner"] is None:
        print(f"no group with members in {args.samples}{skipped}; report: {out / 'report.md'}")
    elif facts.get("tie"):
        print(f"{facts['winner']} and {facts['runner_up']} tie over {facts['groups']:,} groups{skipped} "
              f"({elapsed:.1f} s); report: {out / 'report.md'}")
    elif facts["runner_up"] is None:
        print(f"scored {facts['groups']:,} groups with {facts['winner']}{skipped} in {elapsed:.1f} s; "
              f"report: {out / 'report.md'}")
    else:
        print(f"{facts['winner']} wins: average max member lag {100 * facts['margin']:.1f} % below "
              f"{facts['runner_up']} over {facts['groups']:,} groups{skipped} ({elapsed:.1f} s); "
              f"report: {out / 'report.md'}")
    return 0


def _lag(args, spark=None) -> int:
    out = _out_dir(args.out)
    snapshots = Path(args.snapshot_dir) if args.snapshot_dir else out / "snapshots"
    if snapshots.exists() and not snapshots.is_dir():
        raise UsageError(f"--snapshot-dir {args.snapshot_dir}: exists and is not a directory")
    from cohort.pipeline.lag import run
    from cohort.pipeline.session import spark_session
    from cohort.pipeline.wire import WireError, check, group_count

    check(args.bootstrap, args.timeout)  # a wrong address fails here, in seconds, before Spark starts
    if args.once and group_count(args.bootstrap, args.timeout) == 0:  # so does one sample of nothing
        raise WireError(f"no consumer group at {args.bootstrap}; nothing to sample")
    out.mkdir(parents=True, exist_ok=True)

    def report(facts):
        statuses = ", ".join(f"{g}={s}" for g, s in sorted(facts["status"].items())[:10])
        print(f"sample {facts['seq']}: {facts['groups']} groups, {facts['partitions']} partitions"
              + (f" ({statuses})" if statuses else ""), flush=True)

    def go(session):
        return run(session, args.bootstrap, out, snapshots, interval_s=args.interval, once=args.once,
                   window=args.window, timeout=args.timeout, on_sample=report)

    if spark is not None:
        last = go(spark)
    else:
        with spark_session(out, master=args.master, app_name="cohort-pipeline-lag",
                           driver_memory=args.driver_memory, verbose=args.verbose) as session:
            last = go(session)
    if not last:
        print(f"no consumer group at {args.bootstrap}; nothing written to {out}")
    return 0


def run_lag(argv: Sequence[str], spark=None) -> int:
    """`cohort pipeline lag ARGS` in this process, on `spark` if given (it is left running)."""
    args = build_parser().parse_args(["lag", *argv])
    return run_parsed(args, lambda a: _lag(a, spark))


STOP_WITHIN_S = 3.5  # after SIGTERM or SIGINT, Spark has this long to stop before it is killed
STOPPED = "stopped; tables in --out may be partial"


def _stop_on_signals(prog: str, verbose: bool, out: str | None) -> dict:
    """SIGTERM and SIGINT raise KeyboardInterrupt in the job, whose session then stops (which
    cancels its Spark jobs) and removes its scratch space; a watchdog ends the process if that
    takes too long. (PySpark's own SIGINT handler cancels the jobs over the py4j connection the
    interrupted call is still using, which fails with tracebacks; spark_session keeps this one.)"""
    import logging
    import os
    import signal
    import threading

    caught: dict = {}

    def watchdog(code: int) -> None:
        if caught.get("done"):
            os._exit(code)  # stopped and reported; only the interpreter's exit lingers
        from cohort.pipeline import session

        session.stop_children(1.0)  # Spark took too long: end its JVM, then this process
        if out:
            session.remove_scratch(out)
        print(f"{prog}: {STOPPED}", file=sys.stderr, flush=True)
        os._exit(code)

    def on_signal(signum, frame):
        if caught:
            return  # already stopping
        caught["code"] = 128 + signum
        timer = threading.Timer(STOP_WITHIN_S, watchdog, (caught["code"],))
        timer.daemon = True
        timer.start()
        if not verbose:
            logging.disable(logging.CRITICAL)  # py4j logs the interrupted call's broken connection
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    return caught


def run_parsed(args, job=None) -> int:
    """Run the job chosen on the command line; usage errors become one line and exit 2; SIGTERM
    and SIGINT stop it cleanly (exit 143 or 130)."""
    prog = f"cohort pipeline {args.job}"
    caught = _stop_on_signals(prog, getattr(args, "verbose", False), getattr(args, "out", None))
    try:
        return (job or args.pipeline_job)(args)
    except KeyboardInterrupt:
        from cohort.pipeline import session

        session.stop_children()  # a JVM whose start the signal interrupted
        if getattr(args, "out", None):
            session.remove_scratch(args.out)
        caught["done"] = True
        print(f"{prog}: {STOPPED}", file=sys.stderr)
        return caught.get("code", 130)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as e:
        print(f"{prog}: error: {e.name or e} is not installed (pip install 'cohort[pipeline]')", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # a failed Spark job: one line, not a JVM stack trace
        from cohort.pipeline.session import spark_error_line
        from cohort.pipeline.wire import WireError

        line = str(e) if isinstance(e, WireError) else spark_error_line(e)
        if line is None:
            raise
        if getattr(args, "verbose", False):
            import traceback

            traceback.print_exception(e, file=sys.stderr)
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

"""The pipeline jobs' command-line options, shared by `cohort pipeline` (cli.py) and each job's
own spark-submit entry: the parser, value checks that fail as one line (exit 2), and `UsageError`
for what only a job can check. Imports no job, so every job may use it."""

from __future__ import annotations

import argparse
import sys
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


def _remote(text: str) -> str:
    from cohort.pipeline.session import connect_address

    try:
        connect_address(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make argparse report bad arguments as one line (no usage dump), exit 2."""

    def error(message: str):
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)

    parser.error = error
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="output directory; nothing is written outside it")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, metavar="URL",
                       help="Spark master (default local[*]; under spark-submit, spark-submit's choice)")
    where.add_argument("--remote", default=None, type=_remote, metavar="sc://HOST:PORT",
                       help="run through a Spark Connect server instead of a JVM of this process "
                            "(--out and --samples must be paths the server sees too)")
    p.add_argument("--driver-memory", default="2g", metavar="SIZE", help="driver JVM heap for local runs (default 2g)")
    p.add_argument("--verbose", action="store_true", help="Spark's own log lines, and the full trace of a failure")


def configure(pipeline: argparse.ArgumentParser) -> None:
    """The jobs as subcommands of `pipeline`; each parsed job names itself in `pipeline_job`."""
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
    sim.set_defaults(pipeline_job="simulate")

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
    ev.set_defaults(pipeline_job="evaluate")

    lag = _one_line_errors(jobs.add_parser(
        "lag",
        help="sample a live cluster's consumer-group lag into Parquet, with Burrow status and the broker's lag snapshot",
        description="Structured Streaming from the cohort-lag source into the sample layout (docs/pipeline.md).",
    ))
    lag.add_argument("--bootstrap", required=True, type=_bootstrap, metavar="HOST:PORT", help="any Kafka-compatible broker")
    lag.add_argument("--interval", type=_duration, default=10.0, metavar="DURATION",
                     help="time between samples: 10s (default), 500ms, 1m, or seconds")
    when = lag.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="take one sample and stop (availableNow trigger)")
    when.add_argument("--max-samples", type=_positive_int, default=None, metavar="N",
                      help="stop after N samples (default: sample until stopped)")
    lag.add_argument("--window", type=_positive_int, default=10, metavar="N",
                     help="samples per partition that Burrow's rules look at (default 10)")
    lag.add_argument("--snapshot-dir", default=None, metavar="DIR",
                     help="where the cohort-lag-snapshot/1 files go (default OUT/snapshots)")
    lag.add_argument("--timeout", type=_duration, default=15.0, metavar="DURATION",
                     help="how long to wait for the cluster per request (default 15s)")
    _common(lag)
    lag.set_defaults(pipeline_job="lag")


def build_parser(prog: str = "cohort pipeline") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Spark jobs over consumer-group lag.")
    configure(parser)
    return parser


def out_dir(text: str) -> Path:
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {text}: exists and is not a directory")
    return out

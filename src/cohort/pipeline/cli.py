"""`cohort pipeline simulate|evaluate|lag`: the jobs as subcommands of the `cohort` command.

`add_parser(subparsers)` plugs `pipeline` into the `cohort` command. The options are in
options.py, running a job (one-line errors, clean stops on signals) in runner.py, and each job's
own work in its module (simulate.py, evaluate.py, lag.py), imported only when that job runs so
that `cohort` works without PySpark installed. Bad input prints one line on stderr and exits 2,
before any Spark session starts; a job that fails once running prints one line and exits 1.
The dependencies go one way: this module uses the jobs, the jobs use options and runner.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cohort.pipeline import runner
from cohort.pipeline.options import build_parser, configure

def job(name: str):
    """The job's `run_args(args)`; its module (and PySpark) is imported now, not before."""
    if name == "simulate":
        from cohort.pipeline.simulate import run_args
    elif name == "evaluate":
        from cohort.pipeline.evaluate import run_args
    elif name == "lag":
        from cohort.pipeline.lag import run_args
    else:
        raise ValueError(f"unknown pipeline job {name!r}")
    return run_args


def run_parsed(args: argparse.Namespace) -> int:
    """Run the job chosen on the command line."""
    return runner.run_parsed(args, lambda a: job(a.pipeline_job)(a))


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `pipeline` (with jobs `simulate`, `evaluate` and `lag`) on the `cohort` subcommand parsers."""
    pipeline = subparsers.add_parser(
        "pipeline",
        help="Spark jobs over consumer-group lag (simulate, evaluate, lag)",
        description="Spark jobs over consumer-group lag; see docs/pipeline.md.",
    )
    configure(pipeline)
    pipeline.set_defaults(func=run_parsed)
    return pipeline


def run_job(name: str, argv: Sequence[str] | None = None) -> int:
    """`cohort pipeline NAME ARGS` in this process (ARGS default to this process's arguments)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_parsed(build_parser().parse_args([name, *argv]))


def run_lag(argv: Sequence[str], spark=None) -> int:
    """`cohort pipeline lag ARGS` in this process, on `spark` if given (it is left running)."""
    args = build_parser().parse_args(["lag", *argv])
    return runner.run_parsed(args, lambda a: job("lag")(a, spark))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m cohort.pipeline.cli JOB ...`, the same as `cohort pipeline JOB ...`."""
    return run_parsed(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

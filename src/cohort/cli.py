"""The `cohort` command line: one subcommand per entry point.

Errors in what the user gave (a bad file, an unknown assignor) print one line on stderr and exit 2,
with nothing on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from cohort import __version__
from cohort.pipeline import cli as pipeline_cli
from cohort.server import cli as serve_cli
from cohort.tooling import (cluster_cli, configs_cli, console_cli, groups_cli, security_cli, share_groups_cli,
                            topics_cli, transactions_cli)

EXIT_USAGE = 2


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"cannot read {path}: not UTF-8 text") from None


def _cmd_assign(args: argparse.Namespace) -> int:
    from cohort import assignors
    from cohort.assignors.jsonspec import SpecError, assignment_to_json, parse_spec

    try:
        assignor = assignors.get(args.assignor)
    except assignors.UnknownAssignorError as e:
        raise CliError(str(e)) from None
    try:
        parsed = parse_spec(_read_input(args.file))
    except SpecError as e:
        raise CliError(str(e)) from None
    try:
        result = assignor.assign(parsed.spec, parsed.topics)
    except assignors.PartitionAssignorError as e:
        raise CliError(f"assignor {args.assignor!r} failed: {e}") from None
    json.dump(assignment_to_json(result, parsed), sys.stdout, indent=args.indent)
    sys.stdout.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cohort", description="A Kafka-compatible broker and group coordinator.")
    parser.add_argument("--version", action="version", version=f"cohort {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    assign = sub.add_parser(
        "assign",
        help="run an assignor on a JSON group spec and print the assignment",
        description="Read a JSON group spec (docs/assign.md) and print the assignment as JSON.",
    )
    assign.add_argument("--assignor", required=True, metavar="NAME", help="uniform, range, lag, or a plug-in's name")
    assign.add_argument("--indent", type=int, default=None, metavar="N", help="pretty-print with N spaces")
    assign.add_argument("file", nargs="?", default="-", metavar="FILE", help="the spec file, or - for stdin (default)")
    assign.set_defaults(func=_cmd_assign)

    serve_cli.add_parser(sub)
    pipeline_cli.add_parser(sub)
    groups_cli.add_parser(sub)
    share_groups_cli.add_parser(sub)
    cluster_cli.add_parser(sub)
    topics_cli.add_parser(sub)
    configs_cli.add_parser(sub)
    console_cli.add_parser(sub)
    security_cli.add_parser(sub)
    transactions_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as e:
        print(f"cohort {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130

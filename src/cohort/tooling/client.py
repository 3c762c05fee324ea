"""What every wire tool shares: Kafka's connection flags, client settings, quiet client logs,
one-line errors and table or JSON output.

The tools are ordinary Kafka clients (confluent-kafka, i.e. librdkafka), so they work against any
Kafka-compatible cluster. `--command-config FILE` holds client settings in librdkafka's names
(`security.protocol`, `sasl.mechanism`, `sasl.username`, `ssl.ca.location`, ...). librdkafka's own
log lines go to a Python logger that prints nothing unless `--verbose`.

Exit status: 0 done, 1 the cluster refused or failed (one line on stderr), 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from cohort.librdkafka import client_settings

EXIT_FAILURE, EXIT_USAGE = 1, 2


class UsageError(Exception):
    """What the user typed cannot work (exit 2)."""


class ToolError(Exception):
    """The cluster refused or did not answer (exit 1)."""


def add_connection(p: argparse.ArgumentParser, *, output: bool = True, aliases: Sequence[str] = ()) -> None:
    p.add_argument("--bootstrap-server", *aliases, dest="bootstrap_server", required=True, metavar="HOST:PORT[,...]",
                   help="brokers to connect to")
    p.add_argument("--command-config", metavar="FILE", help="client settings in librdkafka's names (properties)")
    p.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS", help="per request (default 15)")
    if output:
        p.add_argument("--output", choices=("table", "json"), default="table", help="table (default) or json")
    p.add_argument("--verbose", action="store_true", help="also print the client library's log lines")


def _logger(verbose: bool) -> logging.Logger:
    logger = logging.getLogger("cohort.tool.client")
    logger.propagate = False
    logger.handlers[:] = [logging.StreamHandler(sys.stderr) if verbose else logging.NullHandler()]
    logger.setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    return logger


def client_config(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """bootstrap.servers, the --command-config settings, then ``extra``."""
    from cohort.config import ConfigError, read_properties

    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    conf: dict[str, Any] = client_settings({"bootstrap.servers": args.bootstrap_server})
    if args.command_config:
        try:
            with open(args.command_config, encoding="utf-8") as f:
                conf.update((k, v) for k, v, _ in read_properties(f.read(), source=args.command_config))
        except OSError as exc:
            raise UsageError(f"cannot read {args.command_config}: {exc.strerror}") from None
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    conf.update(extra)
    conf["logger"] = _logger(getattr(args, "verbose", False))
    return conf


def admin(args: argparse.Namespace) -> Any:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        return AdminClient(client_config(args, **{"socket.timeout.ms": int(args.timeout * 1000)}))
    except KafkaException as exc:
        raise UsageError(message(exc)) from None


def wait(client: Any, future: Any, timeout: float) -> Any:
    """A future's result, serving the client's log queue meanwhile (so --verbose shows it)."""
    deadline = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > deadline:
            raise ToolError(f"no answer within {timeout:g} s")
        client.poll(0.05)
    return future.result()


def message(exc: Any) -> str:
    """One line from a client exception or error (KafkaException holds a KafkaError)."""
    error = exc if hasattr(exc, "str") else (exc.args[0] if getattr(exc, "args", None) else exc)
    text = error.str() if hasattr(error, "str") else str(error)
    return " ".join(text.split())


def reported(command: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Run a tool: one line on stderr and exit 1 or 2 for what it could not do. ``command``
    names it in messages; ``{action}`` in it is the parsed subcommand."""
    def wrap(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        def run(args: argparse.Namespace) -> int:
            from confluent_kafka import KafkaException

            name = command.format(action=getattr(args, "action", ""))
            try:
                return fn(args)
            except UsageError as exc:
                print(f"cohort {name}: error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            except ToolError as exc:
                print(f"cohort {name}: error: {exc}", file=sys.stderr)
                return EXIT_FAILURE
            except KafkaException as exc:
                print(f"cohort {name}: error: {message(exc)}", file=sys.stderr)
                return EXIT_FAILURE
        return run
    return wrap


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, as Kafka's tools print them."""
    text = [[str(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in text)]) for i, c in enumerate(columns)]
    return "\n".join(" ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in (list(columns), *text))


def emit(args: argparse.Namespace, columns: Sequence[str], rows: Sequence[Sequence[Any]],
         records: Any = None) -> None:
    """Print rows as a table, or as JSON (``records`` if given, else one object per row)."""
    if getattr(args, "output", "table") == "json":
        if records is None:
            records = [dict(zip((c.lower() for c in columns), row)) for row in rows]
        json.dump(records, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(table(columns, rows))


def topic_partitions(specs: Sequence[str]) -> list[tuple[str, list[int] | None]]:
    """``--topic t`` / ``--topic t:0,2`` -> (topic, partitions or None for all)."""
    out = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise UsageError(f"--topic {spec!r}: expected TOPIC or TOPIC:PARTITION[,PARTITION...]")
        if not sep:
            out.append((topic, None))
            continue
        try:
            partitions = sorted({int(p) for p in parts.split(",")})
        except ValueError:
            raise UsageError(f"--topic {spec!r}: partitions must be integers") from None
        if not partitions or partitions[0] < 0:
            raise UsageError(f"--topic {spec!r}: partitions must be integers >= 0")
        out.append((topic, partitions))
    return out



"""``cohort serve``: run a single-node broker until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from cohort.config import Config, ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``serve`` on a subparsers object; the parsed args carry ``func`` -> exit code."""
    p = subparsers.add_parser(
        "serve",
        help="run a Kafka-compatible broker",
        description="Run a single-node Kafka-compatible broker (defaults: 127.0.0.1:9092, data in ./data, "
        "node id 1). Settings are listed in docs/configuration.md.",
    )
    p.add_argument("--host", help="listen address (listener.host, default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (listener.port, default 9092; 0 picks a free port)")
    p.add_argument("--advertised-host", help="host name given to clients (advertised.host)")
    p.add_argument("--data-dir", help="data directory (log.dir, default ./data)")
    p.add_argument("--upstream", metavar="HOST:PORT[,HOST:PORT]",
                   help="serve groups in front of this Kafka-compatible cluster (upstream.bootstrap.servers)")
    p.add_argument("--config", metavar="FILE", help="Kafka-style properties file")
    p.add_argument("-o", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="override one setting (repeatable)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)
    return p


def resolve_config(args: argparse.Namespace) -> Config:
    """File, then KAFKA_* and COHORT_* variables, then -o overrides, then the dedicated flags (which win)."""
    config = Config.load(args.config, args.overrides, os.environ)
    flags = {
        "listener.host": args.host,
        "listener.port": args.port,
        "advertised.host": args.advertised_host,
        "log.dir": args.data_dir,
        "upstream.bootstrap.servers": _upstream(args.upstream),
    }
    resolved = config.replace({k: v for k, v in flags.items() if v is not None})
    resolved.unused = config.unused
    return resolved


def _upstream(value: str | None) -> str | None:
    """--upstream: a comma-separated list of HOST:PORT, checked here so a typo is a one-line error."""
    if value is None:
        return None
    servers = [v.strip() for v in value.split(",") if v.strip()]
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--upstream {value!r}: expected HOST:PORT[,HOST:PORT], got {server!r}")
    if not servers:
        raise ConfigError("--upstream: expected HOST:PORT[,HOST:PORT]")
    return ",".join(servers)


_SECRETS = ("sasl.jaas.config", "ssl.key.password", "ssl.keystore.key")


def _has_secrets(config: Config) -> bool:
    """Whether the settings hold a password or a key (plain or listener-prefixed)."""
    return any(name.endswith(_SECRETS) and config[name] for name in config)


def run(args: argparse.Namespace) -> int:
    try:
        config = resolve_config(args)
    except ConfigError as exc:
        print(f"cohort serve: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if config.unused:
        logging.getLogger("cohort.config").warning(
            "These Kafka settings were supplied but are not used by cohort: %s",
            ", ".join(f"{name} ({where})" for name, where in sorted(config.unused.items())))
    if args.config and _has_secrets(config):
        from cohort.security import files

        files.warn_if_loose(args.config)  # it holds passwords (JAAS users, key passwords)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return runner(serve(config))
    except ConfigError as exc:
        print(f"cohort serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"cohort serve: {exc}", file=sys.stderr)
        return 1


async def _freeze_after_load(server: object) -> None:
    """Once the coordinator has replayed its log, move what is alive into the collector's
    permanent generation. The replayed state is long-lived and mostly acyclic; left in the
    oldest generation, every full collection walks all of it. Measured with 10,000 groups
    committing (bench/metrics_scrape.py): full collections fell from about 270 ms to 45 ms.
    Only this process does it: a library user's process is its own to tune."""
    coordinator = getattr(server, "group_coordinator", None)
    while coordinator is not None and not coordinator.loaded:
        await asyncio.sleep(0.1)
    gc.collect()
    gc.freeze()


async def serve(config: Config) -> int:
    from cohort.server.server import Server

    server = Server(config)
    try:
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        for listener in server.listeners:
            print(f"cohort: listener {listener.name} ({listener.protocol}) on {listener.host or '*'}:"
                  f"{server.ports[listener.name]}", flush=True)
        if server.http is not None:
            print(f"cohort: http on {server.http_address[0] or '*'}:{server.http.port}", flush=True)
        print(f"cohort: listening on {server.host}:{server.port}", flush=True)
        server.spawn(_freeze_after_load(server))
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(server.failed.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        logging.getLogger("cohort.server").info("shutting down")
    finally:
        await server.stop()
    if server.failure is not None:
        print(f"cohort serve: {server.failure}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cohort")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)

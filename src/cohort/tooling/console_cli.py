"""`cohort produce` and `cohort consume`: Kafka's console producer and consumer.

    cohort produce --bootstrap-server H:P --topic T [--property parse.key=true] [--property key.separator=:]
                   [--property parse.headers=true] [--producer-property K=V ...]
    cohort consume --bootstrap-server H:P --topic T [--group G] [--from-beginning] [--max-messages N]
                   [--timeout-ms MS] [--partition P [--offset earliest|latest|N]]
                   [--property print.key=true ...] [--consumer-property K=V ...]

`produce` sends one record per line of stdin. With `parse.key=true` a line is `key<key.separator>value`
(separator: a tab by default); with `parse.headers=true` it starts with headers,
`h1:v1,h2:v2<headers.delimiter>` (a tab by default; `headers.separator` `,` and
`headers.key.separator` `:`); `null.marker` names the text that stands for a null key or value.

`consume` prints each record's value on its own line; `print.key`, `print.headers`,
`print.timestamp`, `print.partition` and `print.offset` add those in front, separated by
`key.separator` (a tab by default). Without `--group` it reads with a fresh group and commits
nothing; with one, it commits as it reads. The group protocol is Kafka's default (classic) unless
`--consumer-property group.protocol=consumer`. It stops after `--max-messages`, after `--timeout-ms`
without a record, or on Ctrl-C, and then says how many records it processed.
"""

from __future__ import annotations

import argparse
import io
import signal
import sys
import time
import uuid
from typing import Any

from cohort.tooling import client
from cohort.tooling.client import ToolError, UsageError, reported

_UNESCAPE = {"\\t": "\t", "\\n": "\n", "\\r": "\r"}


def _properties(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} {item!r}: expected KEY=VALUE")
        for escaped, char in _UNESCAPE.items():
            value = value.replace(escaped, char)
        out[key.strip()] = value
    return out


def _flag(props: dict[str, str], name: str) -> bool:
    return props.get(name, "false").strip().lower() == "true"


def parse_line(line: str, props: dict[str, str]) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """(key, value, headers) of one input line, by the console producer's reader properties."""
    null = props.get("null.marker")
    # stdin is read with surrogateescape, so bytes that are not UTF-8 go out exactly as they came in
    decode = lambda text: None if null is not None and text == null else text.encode("utf-8", "surrogateescape")  # noqa: E731
    headers: list[tuple[str, bytes | None]] = []
    if _flag(props, "parse.headers"):
        delimiter = props.get("headers.delimiter", "\t")
        head, sep, line = line.partition(delimiter)
        if not sep:
            raise UsageError(f"no headers delimiter {delimiter!r} in {head!r}")
        for item in filter(None, head.split(props.get("headers.separator", ","))):
            k, _, v = item.partition(props.get("headers.key.separator", ":"))
            headers.append((k, decode(v)))
    key = None
    if _flag(props, "parse.key"):
        separator = props.get("key.separator", "\t")
        k, sep, line = line.partition(separator)
        if not sep:
            raise UsageError(f"no key separator {separator!r} in {k!r}")
        key = decode(k)
    return key, decode(line), headers


@reported("produce")
def run_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, Producer

    props = _properties(args.property, "--property")
    conf = client.client_config(args, **_properties(args.producer_property, "--producer-property"))
    try:
        producer = Producer(conf)
    except KafkaException as exc:
        raise UsageError(client.message(exc)) from None
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err.str())

    sent = 0
    lines = (io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape", newline="\n")
             if hasattr(sys.stdin, "buffer") else sys.stdin)
    try:
        for n, raw in enumerate(lines, 1):
            line = raw.rstrip("\n").rstrip("\r")
            try:
                key, value, headers = parse_line(line, props)
            except UsageError as exc:
                raise UsageError(f"line {n}: {exc}") from None
            while True:
                try:
                    producer.produce(args.topic, value=value, key=key, headers=headers or None, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)  # the local queue is full: wait for deliveries
            sent += 1
            producer.poll(0)
            if failures:
                break
    finally:
        left = producer.flush(args.timeout)
    if failures:
        raise ToolError(f"a record could not be delivered: {failures[0]}")
    if left:
        raise ToolError(f"{left} records were not delivered within {args.timeout:g} s")
    return 0


def format_record(msg: Any, props: dict[str, str]) -> str:
    """One record as the console consumer prints it."""
    sep = props.get("key.separator", "\t")
    null = props.get("null.literal", "null")
    # surrogateescape: bytes that are not UTF-8 are written back out exactly, as Kafka's formatter does
    text = lambda b: null if b is None else b.decode("utf-8", errors="surrogateescape")  # noqa: E731
    parts = []
    if _flag(props, "print.timestamp"):
        kind, ts = msg.timestamp()
        parts.append(("CreateTime" if kind == 1 else "LogAppendTime" if kind == 2 else "NoTimestamp") + f":{ts}")
    if _flag(props, "print.partition"):
        parts.append(f"Partition:{msg.partition()}")
    if _flag(props, "print.offset"):
        parts.append(f"Offset:{msg.offset()}")
    if _flag(props, "print.headers"):
        headers = msg.headers() or []
        parts.append(props.get("headers.separator", ",").join(f"{k}:{text(v)}" for k, v in headers) or "NO_HEADERS")
    if _flag(props, "print.key"):
        parts.append(text(msg.key()))
    if _flag(props, "print.value") or "print.value" not in props:
        parts.append(text(msg.value()))
    return sep.join(parts)


@reported("consume")
def run_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

    props = _properties(args.property, "--property")
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be at least 1")
    extra = {"group.id": args.group or f"console-consumer-{uuid.uuid4().int % 100000}",
             "enable.auto.commit": bool(args.group),
             "auto.offset.reset": "earliest" if args.from_beginning else "latest"}
    extra.update(_properties(args.consumer_property, "--consumer-property"))
    try:
        consumer = Consumer(client.client_config(args, **extra))
    except KafkaException as exc:
        raise UsageError(client.message(exc)) from None
    stop = False

    def interrupted(*_: Any) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, interrupted)
    count = 0
    try:
        if args.partition is not None:
            offset = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END, None: (
                OFFSET_BEGINNING if args.from_beginning else OFFSET_END)}.get(args.offset)
            if offset is None:
                try:
                    offset = int(args.offset)
                except ValueError:
                    raise UsageError("--offset must be earliest, latest or a number") from None
            consumer.assign([TopicPartition(args.topic, args.partition, offset)])
        else:
            consumer.subscribe([args.topic])
        idle_since = time.monotonic()
        while not stop and (args.max_messages is None or count < args.max_messages):
            msg = consumer.poll(0.2)
            if msg is None:
                if args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    break
                continue
            if msg.error() is not None:
                if msg.error().fatal() or not msg.error().retriable():
                    raise ToolError(msg.error().str())
                continue
            idle_since = time.monotonic()
            line = format_record(msg, props) + props.get("line.separator", "\n")
            if hasattr(sys.stdout, "buffer"):
                sys.stdout.buffer.write(line.encode("utf-8", "surrogateescape"))
            else:
                sys.stdout.write(line)
            sys.stdout.flush()
            count += 1
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        consumer.close()  # commits what was read, with --group
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    produce = subparsers.add_parser("produce", help="send stdin's lines as records (kafka-console-producer)",
                                    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    client.add_connection(produce, output=False)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--property", action="append", default=[], metavar="K=V",
                         help="parse.key, key.separator, parse.headers, headers.delimiter, headers.separator, "
                              "headers.key.separator, null.marker")
    produce.add_argument("--producer-property", action="append", default=[], metavar="K=V",
                         help="a producer setting (librdkafka's names)")
    produce.set_defaults(func=run_produce)

    consume = subparsers.add_parser("consume", help="print a topic's records (kafka-console-consumer)",
                                    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    client.add_connection(consume, output=False)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--group", help="consume in this group and commit (default: a fresh group, no commits)")
    consume.add_argument("--from-beginning", action="store_true", help="start at the earliest offset when there "
                         "is no committed one")
    consume.add_argument("--max-messages", type=int, metavar="N")
    consume.add_argument("--timeout-ms", type=int, metavar="MS", help="stop after this long without a record")
    consume.add_argument("--partition", type=int, metavar="P", help="read one partition, without a group")
    consume.add_argument("--offset", metavar="earliest|latest|N", help="where to start in --partition")
    consume.add_argument("--property", action="append", default=[], metavar="K=V",
                         help="print.key, print.value, print.headers, print.timestamp, print.partition, print.offset, "
                              "key.separator, line.separator, headers.separator, null.literal")
    consume.add_argument("--consumer-property", action="append", default=[], metavar="K=V",
                         help="a consumer setting (librdkafka's names)")
    consume.set_defaults(func=run_consume)

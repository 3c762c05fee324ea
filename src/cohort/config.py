"""The broker's settings: one registry of (name, type, default, doc), Kafka's names where Kafka
has one, loaded from a Kafka-style properties file and ``-o key=value`` overrides.

Other modules declare their own settings with :func:`declare` at import time (the coordinator
does this for ``group.*``); docs/configuration.md is rendered from the registry
(``python -m cohort.config > docs/configuration.md``) and a test keeps the two in sync.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A setting is unknown or has a bad value; the message is one line meant for the user."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: type  # int, float, bool or str
    default: Any
    doc: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] | None = None
    group: str = "broker"
    # Changeable at runtime (IncrementalAlterConfigs on the broker), as in Kafka's
    # DynamicBrokerConfig.AllDynamicConfigs.
    dynamic: bool = False
    # A secret: never logged, and DescribeConfigs shows no value.
    sensitive: bool = False

    def parse(self, raw: str | Any) -> Any:
        """Convert a textual (or already typed) value, enforcing range and choices."""
        if isinstance(raw, str):
            text = raw.strip()
            try:
                if self.type is bool:
                    low = text.lower()
                    if low not in ("true", "false"):
                        raise ValueError
                    value: Any = low == "true"
                elif self.type is int:
                    value = int(text.replace("_", ""))
                elif self.type is float:
                    value = float(text)
                else:
                    value = text
            except ValueError:
                kind = {bool: "true or false", int: "an integer", float: "a number"}[self.type]
                raise ConfigError(f"{self.name}: expected {kind}, got {raw!r}") from None
        else:
            value = raw
            ok = isinstance(value, self.type) and (self.type is bool or not isinstance(value, bool))
            if self.type is float and isinstance(value, int) and not isinstance(value, bool):
                value, ok = float(value), True
            if not ok:
                raise ConfigError(f"{self.name}: expected {self.type.__name__}, got {raw!r}")
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}: must be >= {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{self.name}: must be <= {self.maximum}, got {value}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self.name}: must be one of {', '.join(self.choices)}, got {value!r}")
        return value


REGISTRY: dict[str, Setting] = {}

# Modules that declare settings at import time; rendering the docs and looking up a name not
# declared yet import them, so neither depends on what happened to be imported before.
DECLARING_MODULES: list[str] = ["cohort.server.groups", "cohort.server.limits", "cohort.server.listeners",
                                 "cohort.security.acls"]


def load_declarations() -> None:
    import importlib

    for name in DECLARING_MODULES:
        importlib.import_module(name)


def declare(
    name: str,
    type: type,
    default: Any,
    doc: str,
    *,
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    choices: Iterable[str] | None = None,
    group: str = "broker",
    dynamic: bool = False,
    sensitive: bool = False,
) -> Setting:
    """Register a setting (idempotent for an identical declaration)."""
    setting = Setting(name, type, default, doc, minimum, maximum, tuple(choices) if choices else None, group, dynamic,
                      sensitive)
    existing = REGISTRY.get(name)
    if existing is not None and existing != setting:
        raise ValueError(f"setting {name!r} is already declared differently")
    REGISTRY[name] = setting
    return setting


# --- broker settings --------------------------------------------------------------------------

declare("listener.host", str, "127.0.0.1", "Address the broker listens on (`--host`).", group="server")
declare("listener.port", int, 9092, "TCP port the broker listens on (`--port`); 0 picks a free port.",
        minimum=0, maximum=65535, group="server")
declare("advertised.host", str, "", "Host name given to clients in Metadata and FindCoordinator "
        "(`--advertised-host`); empty means the listen host.", group="server")
declare("advertised.port", int, 0, "Port given to clients in Metadata, FindCoordinator and DescribeCluster "
        "(for a broker reached through a proxy or NAT); 0 means the listen port.", minimum=0, maximum=65535,
        group="server")
declare("node.id", int, 1, "This broker's node id.", minimum=0, group="server")
declare("log.dir", str, "./data", "Directory holding partition logs and topic metadata (`--data-dir`).",
        group="server")
declare("socket.request.max.bytes", int, 104857600, "Largest request frame accepted; a larger one "
        "closes the connection.", minimum=1024, group="server")
declare("queued.max.requests", int, 500, "Requests read ahead on one connection before the server "
        "stops reading from it (responses still leave in order).", minimum=1, group="server")
declare("num.partitions", int, 1, "Partitions of an auto-created topic, and of CreateTopics with "
        "num_partitions=-1.", minimum=1, group="topics")
declare("max.broker.partitions", int, 200000, "Partitions the broker holds in all (KIP-578's name); a "
        "CreateTopics that would pass it gets POLICY_VIOLATION naming this limit.", minimum=1, group="topics")
declare("max.partitions.per.topic", int, 10000, "Partitions one topic may have; a CreateTopics asking for "
        "more gets INVALID_PARTITIONS naming this limit.", minimum=1, group="topics")
declare("auto.create.topics.enable", bool, True, "Create unknown topics (with `num.partitions`) when a "
        "Metadata request allows it.", group="topics")
declare("default.replication.factor", int, 1, "Replication factor reported for topics; cohort is a "
        "single node, so only 1 is accepted.", minimum=1, maximum=1, group="topics")
declare("message.max.bytes", int, 1048588, "Largest record batch a Produce request may carry "
        "(MESSAGE_TOO_LARGE otherwise).", minimum=128, group="topics", dynamic=True)
declare("log.message.timestamp.type", str, "CreateTime", "Default `message.timestamp.type` of topics: "
        "`CreateTime` keeps the producer's timestamps, `LogAppendTime` stamps each batch with the broker's "
        "clock on append.", choices=("CreateTime", "LogAppendTime"), group="topics", dynamic=True)
declare("log.message.timestamp.before.max.ms", int, LONG_MAX, "Default `message.timestamp.before.max.ms`: "
        "a CreateTime record older than this (by the broker's clock) is refused with INVALID_TIMESTAMP.",
        minimum=0, group="topics", dynamic=True)
declare("log.message.timestamp.after.max.ms", int, 3600000, "Default `message.timestamp.after.max.ms`: a "
        "CreateTime record more than this in the future is refused with INVALID_TIMESTAMP.", minimum=0,
        group="topics", dynamic=True)
declare("producer.id.expiration.ms", int, 86400000, "A partition forgets an idempotent producer (its "
        "epoch and last sequences) once its newest batch there is this old; a later batch from it is "
        "then accepted at any sequence.", minimum=1, group="topics", dynamic=True)
declare("producer.id.expiration.check.interval.ms", int, 600000, "How often expired producers are "
        "removed.", minimum=1, group="topics")
declare("log.segment.bytes", int, 1073741824, "Size at which a partition's active segment is rolled.",
        minimum=1024, group="log", dynamic=True)
declare("log.open.files.max", int, 0, "Segment files held open at once across all partitions (each may "
        "hold its log and its index descriptor); the least recently used is closed when another must "
        "open, and reopened on its next use. 0: a quarter of the process's open-file limit "
        "(`ulimit -n`), at least 16.", minimum=0, group="log")
declare("log.index.interval.bytes", int, 4096, "Bytes between offset-index entries.", minimum=1, group="log", dynamic=True)
declare("log.flush.interval.messages", int, LONG_MAX, "fsync a partition log after this many messages "
        "(the default leaves flushing to the OS, as Kafka does). Topic config `flush.messages` "
        "overrides it. The coordinator's log is always fsynced before a response leaves.", minimum=1, group="log", dynamic=True)
declare("offsets.topic.segment.bytes", int, 4194304, "Segment size of the `__consumer_offsets` log. Kept "
        "small (Kafka: 100 MiB) because only closed segments are compacted: the active one is replayed "
        "in full on start, so this bounds the replay beyond the live state (about 45,000 records).",
        minimum=1024, group="log")
declare("log.flush.interval.ms", int, LONG_MAX, "fsync a partition log when this long has passed since "
        "its last fsync and it has unflushed messages (checked every second; the default leaves it "
        "to the OS). Topic config `flush.ms` overrides it.", minimum=0, group="log", dynamic=True)
declare("log.roll.ms", int, 604800000, "Roll a partition's active segment once its first batch is this "
        "old, even if it is not full. Topic config `segment.ms` overrides it.", minimum=1, group="log", dynamic=True)
declare("log.retention.ms", int, 604800000, "Delete a partition's old segments once their newest record "
        "is older than this (-1: no time limit). Topic config `retention.ms` overrides it.",
        minimum=-1, group="log", dynamic=True)
declare("log.retention.bytes", int, -1, "Delete a partition's oldest segments while it is larger than "
        "this (-1: no size limit). Topic config `retention.bytes` overrides it.", minimum=-1, group="log", dynamic=True)
declare("log.retention.check.interval.ms", int, 300000, "How often retention is applied.", minimum=1,
        group="log")
declare("log.cleanup.policy", str, "delete", "Default `cleanup.policy` of topics: `delete` (retention), "
        "`compact` (keep the newest record per key) or both, comma-separated. `__consumer_offsets` is "
        "always `compact`.", choices=("delete", "compact", "compact,delete", "delete,compact"), group="log", dynamic=True)
declare("log.cleaner.enable", bool, True, "Run log compaction for compacted topics and `__consumer_offsets`.",
        group="log")
declare("log.cleaner.backoff.ms", int, 15000, "How often the cleaner looks for logs to compact.",
        minimum=1, group="log", dynamic=True)
declare("log.cleaner.min.cleanable.ratio", float, 0.5, "Compact a log once this share of its closed "
        "segments' bytes was written since its last compaction. Topic config "
        "`min.cleanable.dirty.ratio` overrides it.", minimum=0.0, maximum=1.0, group="log", dynamic=True)
declare("log.cleaner.delete.retention.ms", int, 86400000, "Compaction keeps a tombstone this long "
        "(by its timestamp) so readers see the delete, then drops it. Topic config "
        "`delete.retention.ms` overrides it.", minimum=0, group="log", dynamic=True)
declare("offsets.topic.roll.ms", int, 600000, "Roll the `__consumer_offsets` active segment at this age "
        "so compaction keeps the log, and the replay on start, close to the live state.", minimum=1,
        group="log")
declare("group.coordinator.append.linger.ms", int, 0, "Wait this long before fsyncing the coordinator "
        "log so more appends share one fsync. 0 = adaptive group commit: fsync at once, and appends "
        "that arrive during an fsync share the next one.", minimum=0, group="log")
declare("fetch.max.bytes", int, 57671680, "Upper bound on the bytes one Fetch response carries.",
        minimum=1024, group="topics")


# Where a value comes from, in Kafka's order of precedence (DescribeConfigs' ConfigSource).
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = "dynamic-broker", "dynamic-default", "static", "default"


class Config(Mapping[str, Any]):
    """Resolved settings: defaults < properties file < overrides (the static settings), then
    dynamic values set at runtime, cluster-wide defaults < this broker's (as Kafka's
    DynamicBrokerConfig layers them)."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = {s.name: s.default for s in REGISTRY.values()}
        self._explicit: set[str] = set()
        for name, raw in (values or {}).items():
            self._values[name] = _lookup(name).parse(raw)
            self._explicit.add(name)
        self._dynamic: dict[str, dict[str, Any]] = {DYNAMIC_DEFAULT: {}, DYNAMIC_BROKER: {}}
        self._effective = dict(self._values)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._effective[name]
        except KeyError:
            setting = REGISTRY.get(name)  # declared after this Config was built
            if setting is None:
                raise
            return setting.default

    def for_listener(self, listener: str, name: str, mechanism: str | None = None) -> Any:
        """A setting as one listener sees it: ``listener.name.<listener>.<mechanism>.<name>``,
        then ``listener.name.<listener>.<name>``, then ``name`` (Kafka's override order)."""
        prefix = f"listener.name.{listener.lower()}."
        if mechanism is not None and prefix + mechanism.lower() + "." + name in self._values:
            return self._values[prefix + mechanism.lower() + "." + name]
        if prefix + name in self._values:
            return self._values[prefix + name]
        return self[name]

    def listener_override(self, listener: str, name: str) -> bool:
        """Whether ``name`` is set with the listener's own prefix."""
        return f"listener.name.{listener.lower()}.{name}" in self._values

    def set_dynamic(self, level: str, values: Mapping[str, Any]) -> None:
        """Replace the dynamic values of ``level`` (DYNAMIC_DEFAULT or DYNAMIC_BROKER); each
        must be a dynamic setting with a valid value (ConfigError otherwise, nothing changed)."""
        parsed = {}
        for name, raw in values.items():
            setting = _lookup(name)
            if not setting.dynamic:
                raise ConfigError(f"Cannot update these configs dynamically: Set({name})")
            parsed[name] = setting.parse(raw)
        self._dynamic[level] = parsed
        effective = dict(self._values)
        effective.update(self._dynamic[DYNAMIC_DEFAULT])
        effective.update(self._dynamic[DYNAMIC_BROKER])
        self._effective = effective

    def dynamic(self, level: str) -> dict[str, Any]:
        return dict(self._dynamic[level])

    def layers(self, name: str) -> list[tuple[str, Any]]:
        """(source, value) of every layer that defines ``name``, highest precedence first: what
        DescribeConfigs reports as the value's source and synonyms."""
        out = [(level, self._dynamic[level][name]) for level in (DYNAMIC_BROKER, DYNAMIC_DEFAULT) if name in self._dynamic[level]]
        if name in self._explicit:
            out.append((STATIC, self._values[name]))
        out.append((DEFAULT, _lookup(name).default))
        return out

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def replace(self, values: Mapping[str, Any]) -> "Config":
        """A copy with some settings changed (values typed or textual)."""
        merged = {name: self._values[name] for name in self._explicit}  # the rest are defaults
        merged.update(values)
        return Config(merged)

    @classmethod
    def load(cls, path: str | None = None, overrides: Iterable[str] = ()) -> "Config":
        """Defaults, then ``path`` (properties), then ``key=value`` overrides."""
        values: dict[str, Any] = {}
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
            for name, raw in parse_properties(text, source=path).items():
                values[name] = _lookup(name, path).parse(raw)
        for item in overrides:
            name, sep, raw = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"override {item!r} is not of the form key=value")
            name = name.strip()
            values[name] = _lookup(name, "-o").parse(raw)
        return cls(values)


# Kafka's per-listener (and per-listener, per-mechanism) overrides of a setting.
_LISTENER_PREFIX = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(?:(plain|scram-sha-256|scram-sha-512|oauthbearer)\.)?(.+)$")


def _lookup(name: str, source: str | None = None) -> Setting:
    setting = REGISTRY.get(name)
    if setting is None:
        load_declarations()
        setting = REGISTRY.get(name)
    if setting is None and (m := _LISTENER_PREFIX.match(name)) and m.group(3) in REGISTRY:
        setting = dataclasses.replace(REGISTRY[m.group(3)], name=name)
    if setting is None:
        where = f" (in {source})" if source else ""
        raise ConfigError(f"unknown setting {name!r}{where}; see docs/configuration.md")
    return setting


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse Java-style properties: ``key=value``, ``key: value`` or ``key value``; ``#``/``!``
    comments; a trailing backslash continues the line."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#!":
            continue
        cut = min((line.index(c) for c in "=: \t" if c in line), default=-1)
        if cut <= 0:
            raise ConfigError(f"{source}:{lineno}: expected key=value, got {line!r}")
        rest = line[cut:].lstrip()
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        out[line[:cut]] = rest.strip()
    return out


def render_markdown() -> str:
    """docs/configuration.md, generated from the registry."""
    load_declarations()
    parts = [
        "# Configuration\n",
        "cohort reads settings from built-in defaults, then a Kafka-style properties file "
        "(`cohort serve --config FILE`), then `-o key=value` overrides (repeatable). Names follow "
        "Kafka where Kafka has the setting. The `serve` options `--host`, `--port`, "
        "`--advertised-host` and `--data-dir` set `listener.host`, `listener.port`, "
        "`advertised.host` and `log.dir`. Unknown names and bad values stop the server with a "
        "one-line error.\n",
        "This page is generated: `python -m cohort.config > docs/configuration.md`.\n",
    ]
    groups: dict[str, list[Setting]] = {}
    for s in REGISTRY.values():
        groups.setdefault(s.group, []).append(s)
    for group in sorted(groups):
        parts.append(f"## {group}\n")
        parts.append("| setting | type | default | description |")
        parts.append("|---|---|---|---|")
        for s in sorted(groups[group], key=lambda s: s.name):
            default = str(s.default).lower() if s.type is bool else repr(s.default) if s.type is str else s.default
            doc = s.doc + (" Dynamic: can be changed at runtime." if s.dynamic else "")
            parts.append(f"| `{s.name}` | {s.type.__name__} | `{default}` | {doc} |")
        parts.append("")
    return "\n".join(parts)


if __name__ == "__main__":
    # Run as a script this file is ``__main__``; declaring modules register in ``cohort.config``.
    from cohort.config import render_markdown as _render

    print(_render(), end="")

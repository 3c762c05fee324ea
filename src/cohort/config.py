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

from cohort.kafka_names import KAFKA_BROKER_SETTINGS, KAFKA_DYNAMIC_BROKER_SETTINGS, kafka_dynamic_value_error

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
                                 "cohort.security.acls", "cohort.server.http"]


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
declare("offsets.topic.num.partitions", int, 1, "Shards of the group coordinator: partitions of "
        "`__consumer_offsets`, each with its own log, state and load; a group lives in the one Kafka's hash of its id "
        "picks. Read when the topic is created (as in Kafka): changing it later keeps the existing partition count. In "
        "front of an upstream, unset: 12, or the count of `upstream.groups.topic` if it exists; set to another count "
        "than that topic's, the instance refuses to serve.",
        minimum=1, maximum=1000, group="log")
declare("transaction.state.log.num.partitions", int, 1, "Shards of the transaction coordinator: partitions "
        "of `__transaction_state`; a transactional id lives in the one Kafka's hash of it picks. Read when the "
        "topic is created.", minimum=1, maximum=1000, group="transactions")
declare("share.coordinator.state.topic.num.partitions", int, 1, "Shards of the share coordinator: partitions "
        "of `__share_group_state`, where the state of share groups' partitions is kept; a share-partition lives in "
        "the one Kafka's hash of `group:topic id:partition` picks. Read when the topic is created.", minimum=1,
        maximum=1000, group="share groups")
declare("upstream.bootstrap.servers", str, "", "An existing Kafka-compatible cluster (host:port,...) that keeps "
        "the group coordinator's records in a compacted topic of its own, instead of the local `__consumer_offsets` "
        "log: each shard is a partition of `upstream.groups.topic`, written through a transactional producer per "
        "shard that fences any previous owner. Empty: the local log. Any other `upstream.<name>` is passed to the "
        "upstream client as librdkafka setting `<name>` (for example `upstream.security.protocol`).", group="upstream")
declare("upstream.groups.topic", str, "__cohort_groups", "The upstream topic holding the group coordinator's "
        "records: created compacted with `offsets.topic.num.partitions` partitions if missing; an existing one "
        "decides the number of shards.", group="upstream")
declare("upstream.share.state.topic", str, "__cohort_share_state", "The upstream topic holding the state of share "
        "groups' share-partitions (which records are delivered, acknowledged, how often): created compacted with "
        "as many partitions as `upstream.groups.topic`, partition k kept with group shard k and written through "
        "transactional id `cohort-<upstream.cluster.name>-share-<k>`.", group="upstream")
declare("upstream.groups.replication.factor", int, -1, "Replication factor of `upstream.groups.topic` when "
        "cohort creates it (-1: the upstream's default).", minimum=-1, maximum=32767, group="upstream")
declare("upstream.cluster.name", str, "cohort", "Names this cohort cluster on the upstream: shard k is owned "
        "through transactional id `cohort-<name>-shard-<k>`, so instances sharing a name fence one another.",
        group="upstream")
declare("upstream.request.timeout.ms", int, 30000, "How long one upstream operation (taking ownership of a "
        "shard, reading it, one append) may take before it fails.", minimum=1000, group="upstream")
declare("upstream.forward", bool, True, "With `upstream.bootstrap.servers`: forward every request that is not "
        "a group API to the upstream's brokers, so clients bootstrapped to cohort produce to and fetch from "
        "the upstream (docs/upstream.md). false: topics and data stay on this broker, only the group "
        "coordinator's records go upstream.", group="upstream")
declare("upstream.broker.port.base", int, 0, "The upstream broker with node id N is reached through cohort's "
        "port base + N (the same on every restart and every instance, as clients cache addresses); 0: a free "
        "port each.", minimum=0, maximum=65535, group="upstream")
declare("upstream.coordinator.node.id", int, -1, "The node id clients see for cohort's group coordinator in "
        "front of an upstream. -1: chosen automatically, the smallest from 1000000 up that no other instance of the "
        "cohort cluster and no upstream broker uses, and kept in the data dir for the next start. Set: it must not be "
        "an upstream node id, and an instance whose id another live instance holds refuses to serve.", minimum=-1,
        group="upstream")
declare("upstream.membership", bool, True, "In front of an upstream (`upstream.forward`): the instances of one "
        "cohort cluster (`upstream.cluster.name`) share the group coordinator's shards through a classic consumer "
        "group on the upstream, `cohort-<name>`, whose assignment gives each instance its shards (docs/upstream.md). "
        "false: this instance takes every shard, fencing any other instance of the cluster.", group="upstream")
declare("upstream.membership.session.timeout.ms", int, 10000, "Session timeout of an instance's membership: the "
        "shards of an instance that stops heartbeating move to the others after this long, and an instance cut off "
        "from the upstream stops serving its shards after this long. The upstream's group.min/max.session.timeout.ms "
        "bound it.", minimum=1, group="upstream")
declare("upstream.metadata.refresh.ms", int, 2000, "How often the upstream's brokers and topics are read "
        "again (new topics become subscribable, new brokers get a port).", minimum=100, group="upstream")
declare("upstream.mirror.offsets", bool, False, "In front of an upstream (`upstream.forward`): copy every "
        "group's committed offsets into the upstream's own group offsets (admin commits, about once a second), so "
        "lag tools that read the upstream keep working.", group="upstream")
declare("transaction.max.timeout.ms", int, 900000, "Largest transaction timeout a producer may ask for "
        "(INVALID_TRANSACTION_TIMEOUT otherwise); a transaction open longer than its timeout is aborted and its "
        "producer fenced.", minimum=1, group="transactions")
declare("transactional.id.expiration.ms", int, 604800000, "A transactional id with no transaction in "
        "progress is forgotten once it has not been used for this long.", minimum=1, group="transactions")
declare("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3600000, "How often expired "
        "transactional ids are removed.", minimum=1, group="transactions")
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

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given (file, environment, -o) rather than left at its default."""
        return name in self._explicit

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
            if is_inert_dynamic(name):  # Kafka's, unused here: kept as text, as Kafka stores it
                why = kafka_dynamic_value_error(name, str(raw))
                if why:
                    raise ConfigError(why)
                parsed[name] = str(raw)
                continue
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
        """The dynamic values of ``level``, Kafka's settings that cohort does not use included."""
        return dict(self._dynamic[level])

    def inert_layers(self, name: str) -> list[tuple[str, str]]:
        """(source, text) of the dynamic layers defining one of Kafka's settings that cohort
        accepts and does not use, highest precedence first."""
        return [(level, self._dynamic[level][name]) for level in (DYNAMIC_BROKER, DYNAMIC_DEFAULT)
                if name in self._dynamic[level]]

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
    def load(cls, path: str | None = None, overrides: Iterable[str] = (),
             environ: Mapping[str, str] | None = None) -> "Config":
        """Defaults, then ``path`` (properties), then ``KAFKA_*`` and ``COHORT_*`` variables of
        ``environ``, then ``key=value`` overrides. Kafka settings cohort does not use are kept in
        :attr:`unused` (for one warning); a name neither knows is an error naming its source."""
        layers: list[list[tuple[str, str, str]]] = []
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
            except UnicodeDecodeError:
                raise ConfigError(f"cannot read config file {path}: not UTF-8 text") from None
            layers.append([(k, v, f"{path}:{line}") for k, v, line in read_properties(text, source=path)])
        if environ is not None:
            layers += environment_settings(environ)
        items = []
        for item in overrides:
            name, sep, raw = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"override {item!r} is not of the form key=value")
            items.append((name.strip(), raw, "-o"))
        layers.append(items)
        values: dict[str, Any] = {}
        unused: dict[str, str] = {}
        for layer in layers:
            for name, raw, where in _kafka_synonyms(layer):
                # Kafka's names are tolerated in a properties file, any name in a KAFKA_ variable
                # (images pass every one on); COHORT_ variables and -o must name a setting of cohort's.
                if where.startswith("KAFKA_"):
                    try:
                        setting = _lookup(name, where, unknown_ok=True)
                    except ConfigError:
                        setting = None
                else:
                    setting = _lookup(name, where, unknown_ok=where != "-o" and not where.startswith("COHORT_"))
                if setting is None:
                    unused[name] = where
                    continue
                try:
                    values[name] = setting.parse(raw)
                except ConfigError as exc:
                    raise ConfigError(f"{exc} (in {where})") from None
        config = cls(values)
        config.unused = unused
        return config

    unused: dict[str, str] = {}  # Kafka settings given but not used by cohort -> where


def environment_settings(environ: Mapping[str, str]) -> list[list[tuple[str, str, str]]]:
    """Settings from variables, as container images spell them: ``KAFKA_LOG_RETENTION_MS`` is
    ``log.retention.ms`` (``_`` is ``.``, ``__`` is ``_``, ``___`` is ``-``), then the same with
    ``COHORT_``, which wins. Kafka's launcher variables (``KAFKA_HEAP_OPTS`` ...) are not settings."""
    out = []
    for prefix in ("KAFKA_", "COHORT_"):
        layer = []
        for var in sorted(environ):
            if not var.startswith(prefix) or var in _LAUNCHER_VARIABLES:
                continue
            name = var[len(prefix):].lower().replace("___", "-").replace("__", "\0").replace("_", ".")
            layer.append((name.replace("\0", "_"), environ[var], var))
        out.append(layer)
    return out


# Variables Kafka's scripts and images read themselves (kafka-run-class.sh, the docker image).
_LAUNCHER_VARIABLES = frozenset({
    "KAFKA_HEAP_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_JMX_OPTS", "KAFKA_OPTS",
    "KAFKA_LOG4J_OPTS", "KAFKA_DEBUG", "KAFKA_HOME", "KAFKA_VERSION", "KAFKA_CLUSTER_ID", "KAFKA_LOG_DIR",
    "KAFKA_MODE", "KAFKA_JAVA_OPTS",
})

_TO_MS = {"log.retention.hours": ("log.retention.ms", 3600000), "log.retention.minutes": ("log.retention.ms", 60000),
          "log.roll.hours": ("log.roll.ms", 3600000)}


def _kafka_synonyms(layer: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Kafka's older spellings, within one source: ``broker.id`` is ``node.id``, ``log.dirs`` is
    ``log.dir`` (one directory), ``*.hours`` / ``*.minutes`` are ``*.ms`` unless ``*.ms`` (or, for
    hours, minutes) is given too, as Kafka resolves them."""
    given = {name for name, _, _ in layer}
    out = []
    for name, raw, where in layer:
        if name == "broker.id":
            node = next((r for n, r, _ in layer if n == "node.id"), None)
            if node is not None and node.strip() != raw.strip():
                raise ConfigError(f"broker.id ({raw.strip()}) and node.id ({node.strip()}) differ (in {where})")
            if node is None:
                out.append(("node.id", raw, where))
            continue
        if name == "log.dirs":
            dirs = [d.strip() for d in raw.split(",") if d.strip()]
            if len(dirs) != 1:
                raise ConfigError(f"log.dirs: cohort keeps its data in one directory, got {raw.strip()!r} (in {where})")
            out.append(("log.dir", dirs[0], where))
            continue
        if name in _TO_MS:
            target, factor = _TO_MS[name]
            shadowed = target in given or (name == "log.retention.hours" and "log.retention.minutes" in given)
            if not shadowed:
                try:
                    out.append((target, str(int(raw.strip()) * factor), where))
                except ValueError:
                    raise ConfigError(f"{name}: expected an integer, got {raw!r} (in {where})") from None
            continue
        out.append((name, raw, where))
    return out


# Kafka's per-listener (and per-listener, per-mechanism) overrides of a setting.
_LISTENER_PREFIX = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(?:(plain|scram-sha-256|scram-sha-512|oauthbearer)\.)?(.+)$")


UPSTREAM_CLIENT_PREFIX = "upstream."  # upstream.<librdkafka setting>, passed to the upstream client


def upstream_client_settings(config: "Config") -> dict[str, str]:
    """The upstream client's settings: ``bootstrap.servers`` and every undeclared ``upstream.<name>``."""
    from cohort.librdkafka import client_settings

    out = client_settings({"bootstrap.servers": config["upstream.bootstrap.servers"]})
    for name, value in config.items():
        if name.startswith(UPSTREAM_CLIENT_PREFIX) and name not in REGISTRY:
            out[name[len(UPSTREAM_CLIENT_PREFIX):]] = value
    return out


def is_inert_dynamic(name: str) -> bool:
    """One of Kafka's dynamic broker settings that cohort accepts, keeps and does not use."""
    if name not in KAFKA_DYNAMIC_BROKER_SETTINGS:
        return False
    load_declarations()
    return name not in REGISTRY


def _lookup(name: str, source: str | None = None, unknown_ok: bool = False) -> Setting | None:
    """The setting called ``name``; for a name cohort does not know, None when ``unknown_ok``
    and the name is one of Kafka's broker settings, else ConfigError."""
    setting = REGISTRY.get(name)
    if setting is None:
        load_declarations()
        setting = REGISTRY.get(name)
    if setting is None and (m := _LISTENER_PREFIX.match(name)):
        base = m.group(3)
        if base in REGISTRY:
            setting = dataclasses.replace(REGISTRY[base], name=name)
        elif unknown_ok and base in KAFKA_BROKER_SETTINGS:
            return None
    if setting is None and name.startswith(UPSTREAM_CLIENT_PREFIX) and len(name) > len(UPSTREAM_CLIENT_PREFIX):
        secret = any(word in name for word in ("password", "secret", "token", "key"))
        setting = Setting(name, str, "", "an upstream client setting", group="upstream", sensitive=secret)
    if setting is None:
        if unknown_ok and name in KAFKA_BROKER_SETTINGS:
            return None
        where = f" (in {source})" if source else ""
        raise ConfigError(f"unknown setting {name!r}{where}; see docs/configuration.md")
    return setting


def read_properties(text: str, source: str = "<properties>") -> list[tuple[str, str, int]]:
    """(key, value, line) of each entry of a Java properties text, in order (escapes, ``:`` and
    whitespace separators, continuation lines, comments: javaproperties, which follows
    java.util.Properties)."""
    import io

    import javaproperties

    out, line = [], 1
    try:
        for element in javaproperties.parse(io.StringIO(text)):
            if isinstance(element, javaproperties.KeyValue):
                if not element.key:
                    raise ConfigError(f"{source}:{line}: expected key=value, got {element.source.strip()!r}")
                out.append((element.key, element.value, line))
            line += element.source.count("\n")
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"{source}:{line}: bad \\u escape {exc.escape!r}") from None
    return out


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """A properties text as a dict (the last value of a repeated key wins, as in Java)."""
    return {key: value for key, value, _ in read_properties(text, source)}


def render_markdown() -> str:
    """docs/configuration.md, generated from the registry."""
    load_declarations()
    parts = [
        "# Configuration\n",
        "cohort reads settings from built-in defaults, then a Java properties file "
        "(`cohort serve --config FILE`, Kafka's own `server.properties` included), then `KAFKA_*` and "
        "`COHORT_*` environment variables (`KAFKA_LOG_RETENTION_MS` is `log.retention.ms`), then "
        "`-o key=value` overrides (repeatable); docs/operations.md has the details. Names follow Kafka "
        "where Kafka has the setting, and Kafka's older spellings (`broker.id`, `log.dirs`, "
        "`log.retention.hours`) are read as Kafka reads them. The `serve` options `--host`, `--port`, "
        "`--advertised-host` and `--data-dir` set `listener.host`, `listener.port`, `advertised.host` "
        "and `log.dir`. Unknown names and bad values stop the server with a one-line error naming "
        "their source.\n",
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

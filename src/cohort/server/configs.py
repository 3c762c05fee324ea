"""DescribeConfigs and IncrementalAlterConfigs, dispatched by resource type.

The core serves TOPIC (dynamic, persisted with the topic) and BROKER (every setting with its
source; those Kafka makes dynamic can be changed at runtime, the rest are read-only). Other resource types plug in through ``Server.config_resources``: the group
coordinator adapter registers a provider for GROUP (32) resources, the dynamic group configs.
"""

from __future__ import annotations

import datetime
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Protocol, Sequence

from kio.schema.errors import ErrorCode

from cohort.broker import BrokerError
from cohort.broker import broker as codes
from cohort.broker.topics import TOPIC_CONFIG_BROKER_DEFAULTS, TOPIC_CONFIG_DEFAULTS, topic_config_error
from cohort import config
from cohort.config import REGISTRY, ConfigError, is_inert_dynamic
from cohort.kafka_names import KAFKA_PER_BROKER_SETTINGS, KAFKA_SENSITIVE_SETTINGS, kafka_dynamic_value_error
from cohort.server.limits import parse_overrides
from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, has_field, nested
from cohort.security import acls

if TYPE_CHECKING:
    from cohort.server.api import Host
    from cohort.server.context import RequestContext

TOPIC, BROKER, GROUP = 2, 4, 32
# Kafka's ConfigSource values.
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 4, 5
GROUP_CONFIG = 8
_SOURCES = {config.DYNAMIC_BROKER: DYNAMIC_BROKER_CONFIG, config.DYNAMIC_DEFAULT: DYNAMIC_DEFAULT_BROKER_CONFIG,
            config.STATIC: STATIC_BROKER_CONFIG, config.DEFAULT: DEFAULT_CONFIG}
_LIST_SETTINGS = {"log.cleanup.policy"}  # APPEND / SUBTRACT apply to list-typed configs only
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_ZERO = datetime.timedelta(0)
_INERT_DOC = "One of Kafka's dynamic broker settings: accepted and kept, it changes nothing in cohort."
# The source of a value a resource sets itself: what AlterConfigs' whole set replaces.
_OWN_SOURCES = {TOPIC: {DYNAMIC_TOPIC_CONFIG}, GROUP: {GROUP_CONFIG}}


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    documentation: str | None = None
    # (name, value, source) of every level defining it, highest precedence first
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


class ConfigProvider(Protocol):
    """One resource type's configs. Errors are raised as :class:`BrokerError`."""

    def describe(self, name: str) -> Sequence[ConfigEntry]: ...

    def alter(self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool) -> None | Awaitable[None]:
        """Apply (key, operation, value) changes atomically, or only check them."""


def install(server: "Host") -> None:
    server.config_resources[TOPIC] = TopicConfigs(server)
    server.config_resources[BROKER] = BrokerConfigs(server)
    server.apis.register(32, describe_configs)
    server.apis.register(44, incremental_alter_configs)
    server.apis.register(33, alter_configs)


class TopicConfigs:
    def __init__(self, server: "Host") -> None:
        self.broker = server.broker

    def _topic(self, name: str):
        topic = self.broker.topics.get(name)
        if topic is None:
            raise BrokerError(codes.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return topic

    def describe(self, name: str) -> list[ConfigEntry]:
        """Every topic config with its value and source: the topic's own, else the broker
        setting behind it (dynamic, static or default), else Kafka's default."""
        topic = self._topic(name)
        out = []
        for key, default in sorted(TOPIC_CONFIG_DEFAULTS.items()):
            synonyms = []
            if key in topic.configs:
                synonyms.append((key, topic.configs[key], DYNAMIC_TOPIC_CONFIG))
            setting = TOPIC_CONFIG_BROKER_DEFAULTS.get(key)
            if setting is not None:
                synonyms += [(setting, _text(v), _SOURCES[src]) for src, v in self.broker.config.layers(setting)]
            else:
                synonyms.append((key, default, DEFAULT_CONFIG))
            _, value, source = synonyms[0]
            out.append(ConfigEntry(key, value, source, synonyms=tuple(synonyms)))
        return out

    def alter(self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool) -> None:
        topic = self._topic(name)
        configs = dict(topic.configs)
        for key, op, value in ops:
            if op == SET:
                if value is None:
                    raise BrokerError(codes.INVALID_CONFIG, f"SET of {key} needs a value")
                configs[key] = value
            elif op == DELETE:
                configs.pop(key, None)
            elif op in (APPEND, SUBTRACT):
                if key != "cleanup.policy":
                    raise BrokerError(codes.INVALID_CONFIG, f"{key} is not a list config; APPEND/SUBTRACT do not apply")
                configs[key] = _edit_list(configs.get(key, TOPIC_CONFIG_DEFAULTS[key]), op, value)
            else:
                raise BrokerError(codes.INVALID_REQUEST, f"unknown config operation {op}")
        if validate_only:
            for key, value in configs.items():
                why = topic_config_error(key, value)
                if why:
                    raise BrokerError(codes.INVALID_CONFIG, why)
            return
        self.broker.set_topic_configs(name, configs)


class BrokerConfigs:
    """The broker's settings. Those Kafka lets operators change live are dynamic here too:
    IncrementalAlterConfigs on resource "" sets cluster-wide defaults, on this node's id the
    broker's own; both persist and apply at once. The others are read-only."""

    def __init__(self, server: "Host") -> None:
        self.server = server

    def _check_name(self, name: str) -> None:
        if name not in ("", str(self.server.broker.node_id)):
            raise BrokerError(codes.INVALID_REQUEST, f"no broker {name!r}; this is broker {self.server.broker.node_id}")

    def describe(self, name: str) -> list[ConfigEntry]:
        """This node: every setting with its effective value and source. "": the dynamic
        cluster-wide defaults only (as Kafka describes the default broker resource)."""
        self._check_name(name)
        cfg = self.server.config
        if name == "":
            out = []
            for key, value in sorted(cfg.dynamic(config.DYNAMIC_DEFAULT).items()):
                sensitive = key in KAFKA_SENSITIVE_SETTINGS or (key in REGISTRY and REGISTRY[key].sensitive)
                text = None if sensitive else _text(value)
                out.append(ConfigEntry(key, text, DYNAMIC_DEFAULT_BROKER_CONFIG, sensitive=sensitive,
                                       documentation=REGISTRY[key].doc if key in REGISTRY else _INERT_DOC,
                                       synonyms=((key, text, DYNAMIC_DEFAULT_BROKER_CONFIG),)))
            return out
        out = []
        for key in sorted(REGISTRY):
            setting = REGISTRY[key]
            layers = [(key, None if setting.sensitive else _text(v), _SOURCES[src]) for src, v in cfg.layers(key)]
            out.append(ConfigEntry(key, layers[0][1], layers[0][2], read_only=not setting.dynamic,
                                   sensitive=setting.sensitive, documentation=setting.doc, synonyms=tuple(layers)))
        inert = {key for level in (config.DYNAMIC_BROKER, config.DYNAMIC_DEFAULT) for key in cfg.dynamic(level)
                 if key not in REGISTRY}
        for key in sorted(inert):
            sensitive = key in KAFKA_SENSITIVE_SETTINGS
            layers = [(key, None if sensitive else v, _SOURCES[src]) for src, v in cfg.inert_layers(key)]
            out.append(ConfigEntry(key, layers[0][1], layers[0][2], sensitive=sensitive, documentation=_INERT_DOC,
                                   synonyms=tuple(layers)))
        return sorted(out, key=lambda e: e.name)

    async def alter(self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool) -> None:
        self._check_name(name)
        broker = self.server.broker
        level = config.DYNAMIC_DEFAULT if name == "" else config.DYNAMIC_BROKER
        values = {k: _text(v) for k, v in self.server.config.dynamic(level).items()}
        fixed = sorted(k for k, _, _ in ops if k in REGISTRY and not REGISTRY[k].dynamic)
        if fixed:
            raise BrokerError(codes.INVALID_CONFIG, f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
        per_broker = sorted(k for k, _, _ in ops if name == "" and k in KAFKA_PER_BROKER_SETTINGS)
        if per_broker:
            raise BrokerError(codes.INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id "
                              f"must be specified: Set({', '.join(per_broker)})")
        for key, op, value in ops:
            if key not in REGISTRY and not is_inert_dynamic(key):
                raise BrokerError(codes.INVALID_CONFIG, f"Unknown broker config {key!r}")
            if op == SET:
                if value is None:
                    raise BrokerError(codes.INVALID_REQUEST, f"Null value not supported for : {key}")
                values[key] = value
            elif op == DELETE:
                values.pop(key, None)
            elif op in (APPEND, SUBTRACT):
                if key not in _LIST_SETTINGS:
                    raise BrokerError(codes.INVALID_CONFIG, f"Config value append is not allowed for config key: {key}"
                                      if op == APPEND else f"Config value subtract is not allowed for config key: {key}")
                values[key] = _edit_list(values.get(key, _text(self.server.config[key])), op, value)
            else:
                raise BrokerError(codes.INVALID_REQUEST, f"unknown config operation {op}")
        try:
            for key, text in values.items():
                if key in REGISTRY:
                    REGISTRY[key].parse(text)
                elif why := kafka_dynamic_value_error(key, text):
                    raise ConfigError(why)
            if "max.connections.per.ip.overrides" in values:
                parse_overrides(values["max.connections.per.ip.overrides"])
        except ConfigError as exc:
            raise BrokerError(codes.INVALID_CONFIG, str(exc)) from None
        if not validate_only:
            await broker.set_dynamic_configs(name, values)


_ACL_RESOURCES = {TOPIC: (acls.TOPIC, codes.TOPIC_AUTHORIZATION_FAILED), GROUP: (acls.GROUP, codes.GROUP_AUTHORIZATION_FAILED),
                  BROKER: (acls.CLUSTER, codes.CLUSTER_AUTHORIZATION_FAILED)}


def _authorize(ctx: "RequestContext", operation: int, resource_type: int, name: str) -> None:
    """Kafka's ConfigHelper: topics and groups by name, brokers on the CLUSTER resource."""
    kind, error = _ACL_RESOURCES.get(resource_type, (None, None))
    if kind is None:
        return
    if not ctx.authorize(operation, kind, acls.CLUSTER_NAME if kind == acls.CLUSTER else name):
        raise BrokerError(error, None)


def _edit_list(current: str, op: int, value: str | None) -> str:
    """APPEND or SUBTRACT the comma-separated items of ``value`` to or from a list config."""
    items = [x for x in current.split(",") if x]
    for item in (value or "").split(","):
        if op == APPEND and item and item not in items:
            items.append(item)
        elif op == SUBTRACT and item in items:
            items.remove(item)
    return ",".join(items)


def _text(value: Any) -> str:
    """A setting's value as DescribeConfigs shows it (booleans in Kafka's lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def describe_configs(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    resp = req.codec.response_type
    result_cls = nested(resp, "results")
    entry_cls = nested(result_cls, "configs")
    docs = getattr(body, "include_documentation", False)
    synonyms = getattr(body, "include_synonyms", False)
    synonym_cls = nested(entry_cls, "synonyms") if has_field(entry_cls, "synonyms") else None
    synonyms = synonyms and synonym_cls is not None
    results = []
    for r in body.resources:
        provider = ctx.server.config_resources.get(r.resource_type)
        error, message, entries = ErrorCode.none, None, ()
        try:
            if provider is None:
                raise BrokerError(codes.INVALID_REQUEST, f"resource type {r.resource_type} is not supported")
            _authorize(ctx, acls.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
            found = provider.describe(r.resource_name)
            keys = r.configuration_keys
            entries = tuple(
                build(entry_cls, name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                      is_default=e.source == DEFAULT_CONFIG, is_sensitive=e.sensitive,
                      synonyms=tuple(build(synonym_cls, name=n, value=v, source=src) for n, v, src in e.synonyms)
                      if synonyms else (), config_type=0,
                      documentation=e.documentation if docs else None)
                for e in found if keys is None or e.name in keys
            )
        except BrokerError as exc:
            error, message = ErrorCode(exc.code), exc.message
        results.append(build(result_cls, error_code=error, error_message=message, resource_type=r.resource_type,
                             resource_name=r.resource_name, configs=entries))
    return build(resp, throttle_time=_ZERO, results=tuple(results))


async def incremental_alter_configs(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body

    def ops(r: Any) -> list[tuple[str, int, str | None]]:
        if ctx.server.config_resources.get(r.resource_type) is None:
            raise BrokerError(codes.INVALID_REQUEST, f"resource type {r.resource_type} is not supported")
        _authorize(ctx, acls.ALTER_CONFIGS, r.resource_type, r.resource_name)
        return [(c.name, c.config_operation, c.value) for c in r.configs]

    return await _alter(ctx, req, [(r, ops) for r in body.resources])


async def _alter(ctx: "RequestContext", req: DecodedRequest, resources: list) -> Any:
    """Apply each resource's operations (``ops(resource)`` checks it and lists them; a
    BrokerError from it or from the provider is that resource's answer)."""
    resp = req.codec.response_type
    result_cls = nested(resp, "responses")
    results = []
    for r, ops in resources:
        error, message = ErrorCode.none, None
        try:
            changes = ops(r)
            done = ctx.server.config_resources[r.resource_type].alter(r.resource_name, changes, req.body.validate_only)
            if inspect.isawaitable(done):
                await done
        except BrokerError as exc:
            error, message = ErrorCode(exc.code), exc.message
        results.append(build(result_cls, error_code=error, error_message=message, resource_type=r.resource_type,
                             resource_name=r.resource_name))
    return build(resp, throttle_time=_ZERO, responses=tuple(results))


async def alter_configs(ctx: "RequestContext", req: DecodedRequest) -> Any:
    """AlterConfigs (KIP-133, v0-2): each resource's configs are replaced as a whole set (those
    not named go back to their defaults), with Kafka's checks (ConfigAdminManager.preprocess)
    and then IncrementalAlterConfigs' validation."""
    seen: dict[tuple[int, str], int] = {}
    for r in req.body.resources:
        seen[(r.resource_type, r.resource_name)] = seen.get((r.resource_type, r.resource_name), 0) + 1

    def ops(r: Any) -> list[tuple[str, int, str | None]]:
        if seen[(r.resource_type, r.resource_name)] > 1:
            raise BrokerError(codes.INVALID_REQUEST, "Each resource must appear at most once.")
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            raise BrokerError(codes.INVALID_REQUEST, "Error due to duplicate config keys")
        nulls = [c.name for c in r.configs if c.value is None]
        if nulls:
            raise BrokerError(codes.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
        if ctx.server.config_resources.get(r.resource_type) is None or r.resource_type not in (TOPIC, BROKER, GROUP):
            raise BrokerError(codes.INVALID_REQUEST, f"Unknown resource type {r.resource_type}")
        _authorize(ctx, acls.ALTER_CONFIGS, r.resource_type, r.resource_name)
        return [(c.name, SET, c.value) for c in r.configs] + [
            (key, DELETE, None) for key in sorted(_own_keys(ctx, r.resource_type, r.resource_name) - set(names))]

    return await _alter(ctx, req, [(r, ops) for r in req.body.resources])


def _own_keys(ctx: "RequestContext", resource_type: int, name: str) -> set[str]:
    """The configs a resource sets itself (not inherited): what a whole-set replace removes."""
    if resource_type == BROKER:
        level = config.DYNAMIC_DEFAULT if name == "" else config.DYNAMIC_BROKER
        return set(ctx.server.config.dynamic(level))
    provider = ctx.server.config_resources[resource_type]
    try:
        entries = provider.describe(name)
    except BrokerError:
        return set()  # a group that does not exist yet sets nothing; the alter answers for a topic
    return {e.name for e in entries if e.source in _OWN_SOURCES[resource_type]}

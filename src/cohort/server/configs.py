"""DescribeConfigs and IncrementalAlterConfigs, dispatched by resource type.

The core serves TOPIC (dynamic, persisted with the topic) and BROKER (the static settings,
read-only). Other resource types plug in through ``Server.config_resources``: the group
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
from cohort.config import REGISTRY
from cohort.protocol import DecodedRequest
from cohort.protocol.entities import build, nested

if TYPE_CHECKING:
    from cohort.server.server import RequestContext, Server

TOPIC, BROKER, GROUP = 2, 4, 32
# Kafka's ConfigSource values.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 1, 4, 5, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_ZERO = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    sensitive: bool = False
    documentation: str | None = None


class ConfigProvider(Protocol):
    """One resource type's configs. Errors are raised as :class:`BrokerError`."""

    def describe(self, name: str) -> Sequence[ConfigEntry]: ...

    def alter(self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool) -> None | Awaitable[None]:
        """Apply (key, operation, value) changes atomically, or only check them."""


def install(server: "Server") -> None:
    server.config_resources[TOPIC] = TopicConfigs(server)
    server.config_resources[BROKER] = BrokerConfigs(server)
    server.apis.register(32, describe_configs)
    server.apis.register(44, incremental_alter_configs)


class TopicConfigs:
    def __init__(self, server: "Server") -> None:
        self.broker = server.broker

    def _topic(self, name: str):
        topic = self.broker.topics.get(name)
        if topic is None:
            raise BrokerError(codes.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return topic

    def describe(self, name: str) -> list[ConfigEntry]:
        topic = self._topic(name)
        out = []
        for key, default in sorted(TOPIC_CONFIG_DEFAULTS.items()):
            if key in topic.configs:
                out.append(ConfigEntry(key, topic.configs[key], DYNAMIC_TOPIC_CONFIG))
            elif key in TOPIC_CONFIG_BROKER_DEFAULTS:
                setting = TOPIC_CONFIG_BROKER_DEFAULTS[key]
                out.append(ConfigEntry(key, str(self.broker.config[setting]), STATIC_BROKER_CONFIG))
            else:
                out.append(ConfigEntry(key, default, DEFAULT_CONFIG))
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
                items = [x for x in configs.get(key, TOPIC_CONFIG_DEFAULTS[key]).split(",") if x]
                for item in (value or "").split(","):
                    if op == APPEND and item and item not in items:
                        items.append(item)
                    elif op == SUBTRACT and item in items:
                        items.remove(item)
                configs[key] = ",".join(items)
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
    """The broker's settings, read-only (cohort has no dynamic broker configs)."""

    def __init__(self, server: "Server") -> None:
        self.server = server

    def describe(self, name: str) -> list[ConfigEntry]:
        if name not in ("", str(self.server.broker.node_id)):
            raise BrokerError(codes.INVALID_REQUEST, f"no broker {name!r}; this is broker {self.server.broker.node_id}")
        config = self.server.config
        out = []
        for key in sorted(REGISTRY):
            setting = REGISTRY[key]
            value = config[key]
            text = str(value).lower() if isinstance(value, bool) else str(value)
            source = DEFAULT_CONFIG if value == setting.default else STATIC_BROKER_CONFIG
            out.append(ConfigEntry(key, text, source, read_only=True, documentation=setting.doc))
        return out

    def alter(self, name: str, ops: Sequence[tuple[str, int, str | None]], validate_only: bool) -> None:
        raise BrokerError(codes.INVALID_REQUEST, "broker settings are static in cohort; restart with new values")


def describe_configs(ctx: "RequestContext", req: DecodedRequest) -> Any:
    body = req.body
    resp = req.codec.response_type
    result_cls = nested(resp, "results")
    entry_cls = nested(result_cls, "configs")
    docs = getattr(body, "include_documentation", False)
    results = []
    for r in body.resources:
        provider = ctx.server.config_resources.get(r.resource_type)
        error, message, entries = ErrorCode.none, None, ()
        try:
            if provider is None:
                raise BrokerError(codes.INVALID_REQUEST, f"resource type {r.resource_type} is not supported")
            found = provider.describe(r.resource_name)
            keys = r.configuration_keys
            entries = tuple(
                build(entry_cls, name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                      is_default=e.source == DEFAULT_CONFIG, is_sensitive=e.sensitive, synonyms=(), config_type=0,
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
    resp = req.codec.response_type
    result_cls = nested(resp, "responses")
    results = []
    for r in body.resources:
        provider = ctx.server.config_resources.get(r.resource_type)
        error, message = ErrorCode.none, None
        try:
            if provider is None:
                raise BrokerError(codes.INVALID_REQUEST, f"resource type {r.resource_type} is not supported")
            done = provider.alter(r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs], body.validate_only)
            if inspect.isawaitable(done):
                await done
        except BrokerError as exc:
            error, message = ErrorCode(exc.code), exc.message
        results.append(build(result_cls, error_code=error, error_message=message, resource_type=r.resource_type,
                             resource_name=r.resource_name))
    return build(resp, throttle_time=_ZERO, responses=tuple(results))


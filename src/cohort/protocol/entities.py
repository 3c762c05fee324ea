"""Version-agnostic construction of kio entities, so one handler serves every version.

kio generates one frozen dataclass per (api, version). ``build`` drops keyword arguments the
version lacks; ``nested`` finds the class of a nested field (e.g. the topic entry type of
MetadataResponse v12).
"""

from __future__ import annotations

import datetime
import functools
import typing
import uuid
from dataclasses import MISSING, fields
from types import NoneType, UnionType
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)


@functools.cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def build(cls: type, **kw: Any) -> Any:
    """Instantiate ``cls`` with the arguments it has fields for; the rest are ignored."""
    names = field_names(cls)
    if kw.keys() <= names:  # every argument is a field (the newest versions): no filtering
        return cls(**kw)
    return cls(**{k: v for k, v in kw.items() if k in names})


@functools.cache
def nested(cls: type, name: str) -> type:
    """The entity class of field ``name`` (unwrapping ``tuple[X, ...]`` and ``X | None``)."""
    tp = typing.get_type_hints(cls)[name]
    while True:
        origin = typing.get_origin(tp)
        if origin is tuple:
            tp = typing.get_args(tp)[0]
        elif origin in (UnionType, typing.Union):
            tp = next(a for a in typing.get_args(tp) if a is not NoneType)
        else:
            return tp


_ERROR_CODES = {int(e): e for e in ErrorCode}


def error_code(code: int) -> ErrorCode:
    """kio's ErrorCode for a code (a dict lookup: calling the enum costs a microsecond)."""
    return _ERROR_CODES[code]


def error_name(code: int) -> str:
    """Kafka's name of an error code (UNKNOWN_TOPIC_OR_PARTITION; UNKNOWN_ERROR_<code> for one kio
    does not know)."""
    try:
        return _ERROR_CODES[code].name.upper()
    except KeyError:
        return f"UNKNOWN_ERROR_{code}"


def has_field(cls: type, name: str) -> bool:
    return name in field_names(cls)


_ZERO_BY_TYPE: dict[str, Any] = {
    "bool": False, "uuid": uuid.UUID(int=0), "bytes": b"", "records": b"", "string": "",
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
}


def _empty(cls: type, overrides: dict[str, Any]) -> Any:
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            continue
        kind = classify_field(f)
        if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            values[f.name] = ()
        elif is_optional(f):
            values[f.name] = None
        elif isinstance(kind, EntityField):
            values[f.name] = _empty(kind.type_, {})
        else:
            values[f.name] = _ZERO_BY_TYPE.get(get_schema_field_type(f), 0)
    return cls(**values)


def has_top_level_error(cls: type) -> bool:
    """Whether a response class can carry one error for the whole request."""
    return has_field(cls, "error_code")


def error_response(cls: type, error: ErrorCode, message: str | None = None) -> Any:
    """A response of ``cls`` that carries only ``error`` (and its message where the version has
    one): empty arrays, zero numbers, null where allowed. ``cls`` must have a top-level
    ``error_code`` (:func:`has_top_level_error`)."""
    overrides: dict[str, Any] = {"error_code": error}
    if has_field(cls, "error_message"):
        overrides["error_message"] = message
    return _empty(cls, overrides)

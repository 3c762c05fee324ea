"""Version-agnostic construction of kio entities, so one handler serves every version.

kio generates one frozen dataclass per (api, version). ``build`` drops keyword arguments the
version lacks; ``nested`` finds the class of a nested field (e.g. the topic entry type of
MetadataResponse v12).
"""

from __future__ import annotations

import functools
import typing
from dataclasses import fields
from types import NoneType, UnionType
from typing import Any


@functools.cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def build(cls: type, **kw: Any) -> Any:
    """Instantiate ``cls`` with the arguments it has fields for; the rest are ignored."""
    names = field_names(cls)
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


def has_field(cls: type, name: str) -> bool:
    return name in field_names(cls)

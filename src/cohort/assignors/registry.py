"""Name -> assignor lookup: the built-ins, then third-party ones from the `cohort.assignors` entry points.

Built-ins are imported on first use, so a process that never assigns never pays for numpy.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from cohort.assignors.api import Assignor, UnknownAssignorError

ENTRY_POINT_GROUP = "cohort.assignors"

_BUILTINS = {
    "uniform": "cohort.assignors.uniform:UniformAssignor",
    "range": "cohort.assignors.range:RangeAssignor",
    "lag": "cohort.assignors.lag:LagAssignor",
}

_registered: dict[str, Assignor] = {}
_plugins_loaded = False


def register(assignor: Assignor) -> None:
    """Make an assignor instance available under its `name` (replacing any earlier one)."""
    if not isinstance(getattr(assignor, "name", None), str) or not callable(getattr(assignor, "assign", None)):
        raise TypeError(f"{assignor!r} is not an assignor: it needs a str `name` and an `assign` method")
    _registered[assignor.name] = assignor


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        obj = ep.load()
        register(obj() if isinstance(obj, type) else obj)


def _builtin(name: str) -> Assignor:
    module, _, cls = _BUILTINS[name].partition(":")
    assignor = getattr(importlib.import_module(module), cls)()
    _registered[name] = assignor
    return assignor


def get(name: str) -> Assignor:
    """The assignor registered as `name`; UnknownAssignorError names the ones that exist."""
    if name in _registered:
        return _registered[name]
    if name in _BUILTINS:
        return _builtin(name)
    _load_plugins()
    if name in _registered:
        return _registered[name]
    raise UnknownAssignorError(f"unknown assignor {name!r}; available: {', '.join(available())}")


def available() -> list[str]:
    """Every assignor name that `get` resolves, sorted."""
    _load_plugins()
    return sorted(set(_BUILTINS) | set(_registered))

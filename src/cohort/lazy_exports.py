"""Package names that load their module on first use (PEP 562), so importing a light part of a
package does not import its heavy parts with it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` giving `exports[name]`'s attribute `name`, kept in `namespace` once loaded."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__

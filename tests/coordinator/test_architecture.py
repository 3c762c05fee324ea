"""The coordinator package's seams: the shard is used only from outside, and no module uses another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import cohort.coordinator

PACKAGE = "cohort.coordinator"
ROOT = Path(cohort.coordinator.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text(), str(path)) for path in sorted(ROOT.glob("*.py"))
            if path.stem != "__init__"}


def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> module of the package it stands for, for every import anywhere in `tree`
    (TYPE_CHECKING blocks and function bodies included: a cycle there is still a cycle)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:
                for alias in node.names:
                    out[alias.asname or alias.name] = alias.name
            elif node.module.startswith(PACKAGE + "."):
                target = node.module.split(".")[2]
                for alias in node.names:
                    out.setdefault(f"{target}:{alias.name}", target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    out[alias.asname or alias.name] = alias.name.split(".")[2]
    return out


def test_no_coordinator_module_imports_the_shard():
    """Only the shard's host (the server) uses it; import cycles are tests/test_import_cycles.py's."""
    users = [name for name, tree in _modules().items() if name != "shard" and "shard" in _imports(tree).values()]
    assert users == []


def test_no_module_reaches_into_another_modules_private_names():
    found = []
    for name, tree in _modules().items():
        imports = _imports(tree)
        modules = {local for local, target in imports.items() if ":" not in local}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE + "."):
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{name}:{node.lineno}: {node.value.id}.{node.attr}")
    assert found == []


def test_group_types_write_through_the_context_and_never_see_the_shard():
    for name in ("consumer", "classic", "migration", "offsets", "lag_balance"):
        tree = _modules()[name]
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert "GroupCoordinatorShard" not in names, name
        assert "shard" not in _imports(tree).values(), name
        assert not {"_emit", "_complete", "_deferred", "_completions", "_new_member_id"} & attrs, name

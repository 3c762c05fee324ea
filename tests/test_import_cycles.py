"""Imports go one way: no module of cohort is part of an import cycle. Every import counts, also
those only for type checking or inside a function (the coordinator package, the log, the
pipeline's command line and its jobs, the group coordinator's runtime and wire handlers, and the
server and the API modules it installs were once tangled)."""

from __future__ import annotations

import ast
from pathlib import Path

import cohort

ROOT = Path(cohort.__file__).parent


def _graph() -> dict[str, set[str]]:
    trees = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        trees[name] = ast.parse(path.read_text(), str(path))
    for path in ROOT.rglob("*.c"):  # C extensions (built from these sources) import nothing of cohort
        trees[".".join(path.relative_to(ROOT.parent).with_suffix("").parts)] = ast.Module(body=[], type_ignores=[])

    def resolve(name: str) -> str:
        while name and name not in trees:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, tree in trees.items():
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cohort"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in trees else resolve(node.module))
            elif isinstance(node, ast.Import):
                deps.update(resolve(a.name) for a in node.names if a.name.startswith("cohort"))
        graph[name] = {d for d in deps if d in trees and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_cohort():
    assert _cycles(_graph()) == []

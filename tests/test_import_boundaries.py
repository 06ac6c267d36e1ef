"""The core stays pure: no click/rich outside cli/, no pyspark outside execution/spark.py (C1, C4)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "keygroup_cli"


def _core_modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts
        if "cli" in parts or parts[-1] == "__main__" or rel.as_posix() == "keygroup_cli/execution/spark":
            continue
        names.append(".".join(p for p in parts if p != "__init__"))
    return names


def _loaded_after_import(module: str) -> set[str]:
    code = (
        f"import importlib, sys, json; importlib.import_module({module!r}); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


@pytest.mark.parametrize("module", _core_modules())
def test_core_module_imports_no_ui_or_spark(module):
    loaded = _loaded_after_import(module)
    assert not loaded & {"click", "rich", "pyspark", "py4j"}, module


@pytest.mark.parametrize("command", ["ranges", "key", "plan", "advise", "inspect", "check"])
def test_metadata_commands_never_import_pyspark(command):
    code = (
        f"import sys, importlib; importlib.import_module('keygroup_cli.cli.commands.{command}'); "
        "sys.exit(1 if 'pyspark' in sys.modules or 'py4j' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# -- import cycles -----------------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Yield every import statement that can run: module level, in functions, in try/if, not TYPE_CHECKING."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _runtime_imports(ast.Module(body=[child], type_ignores=[]))
        else:
            yield from _runtime_imports(node)


def _import_graph() -> dict[str, set[str]]:
    """Return module → the keygroup_cli modules it imports at runtime.

    ``from pkg import sub`` resolves to ``pkg.sub`` when ``sub`` is a submodule, else to ``pkg``. An import of
    one's own ancestor package is left out: Python initialises a package before any of its submodules, so
    that edge always exists and a package importing its submodules is not a cycle.
    """
    files = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}

    def existing(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                if target == "keygroup_cli" or target.startswith("keygroup_cli."):
                    resolved = existing(target)
                    if resolved is not None and not (name == resolved or name.startswith(resolved + ".")):
                        graph[name].add(resolved)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return one shortest cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

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
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)

    cycles = []
    for component in components:
        start = min(component)
        paths = {start: [start]}
        queue = [start]
        while queue:
            v = queue.pop(0)
            for w in sorted(graph[v] & component):
                if w == start:
                    cycles.append([*paths[v], start])
                    queue = []
                    break
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    queue.append(w)
    return sorted(cycles)


def test_cycle_finder_sees_function_level_and_submodule_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert "keygroup_cli.cli.plan_render" in _import_graph()["keygroup_cli.cli.rescale_render"]


def test_no_import_cycles_between_keygroup_cli_modules():
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)

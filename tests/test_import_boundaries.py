"""What may import what.

- The core stays pure: no click/rich outside cli/, no pyspark outside the Spark engine and its workers' daemon
  (execution/engines/spark*) (C1, C4).
- No import cycles between kg's modules, function-level imports included.
- Every runtime import keeps to the layers, each a folder, bottom up: core/, storage/, the formats flink/
  snapshot/ ha/ k8s/ (siblings that never import each other), assess/ convert/ planning/, execution/,
  cli/. Inside flink/ and execution/ their parts keep an order too, and other packages import flink/ only
  through its entry module.
"""

from __future__ import annotations

import ast
import json
import os
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
        if (
            "cli" in parts
            or parts[-1] == "__main__"
            or rel.as_posix().startswith("keygroup_cli/execution/engines/spark")
        ):
            continue
        names.append(".".join(p for p in parts if p != "__init__"))
    return names


#: Imported before the fork in which each module is imported: libraries that never import click, rich,
#: pyspark or py4j, so having them loaded already cannot hide one of those (checked in the child).
_PRELOADED = ("numpy", "pyarrow", "pyarrow.parquet", "pyarrow.compute", "pyarrow.fs", "xxhash", "mmh3")
_FORBIDDEN = ("click", "rich", "pyspark", "py4j")

#: One interpreter preloads ``_PRELOADED`` and then forks once per module: each child imports its module
#: into a sys.modules that holds none of kg's modules and none of the forbidden ones, and reports the
#: top-level packages it then holds (a fresh interpreter per module took about a second each).
_FORKING_CHILD = """
import importlib, json, os, sys
for name in PRELOADED:
    importlib.import_module(name)
assert not set(FORBIDDEN) & {m.split('.')[0] for m in sys.modules}, 'a preloaded library imports one'
assert not any(m.startswith('keygroup_cli') for m in sys.modules)
result = {}
for module in json.loads(sys.stdin.read()):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            text = json.dumps(sorted({m.split('.')[0] for m in sys.modules}))
        except BaseException as exc:
            text = json.dumps({'error': repr(exc)})
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    result[module] = json.loads(b''.join(chunks))
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def loaded_after_import() -> dict[str, object]:
    """Return, per core module, the top-level packages loaded after importing it (or its import error)."""
    code = f"PRELOADED = {_PRELOADED!r}\nFORBIDDEN = {_FORBIDDEN!r}\n" + _FORKING_CHILD
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(_core_modules()),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("module", _core_modules())
def test_core_module_imports_no_ui_or_spark(module, loaded_after_import):
    loaded = loaded_after_import[module]
    assert isinstance(loaded, list), (module, loaded)
    assert not set(loaded) & set(_FORBIDDEN), module


@pytest.mark.parametrize("command", ["ranges", "key", "plan", "advise", "inspect", "check"])
def test_metadata_commands_never_import_pyspark(command):
    code = (
        f"import sys, importlib; importlib.import_module('keygroup_cli.cli.commands.{command}'); "
        "sys.exit(1 if 'pyspark' in sys.modules or 'py4j' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "flink" / "2.3" / "heap-files-p3-maxp128-long"


@pytest.mark.parametrize("command", ["check", "inspect"])
def test_metadata_commands_never_import_the_native_kernels(command):
    # KG_NATIVE=1 asks for them; a command that decodes no key group still never imports numba.
    code = (
        "import sys\nfrom keygroup_cli.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\nsys.exit(1 if 'numba' in sys.modules else 0)"
    )
    env = {**os.environ, "KG_NATIVE": "1"}
    result = subprocess.run([sys.executable, "-c", code, command, str(FIXTURE)], capture_output=True, env=env)
    assert result.returncode == 0, result.stderr


# -- import cycles -----------------------------------------------------------------------------------------


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
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


def _files(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def _lazy_table(init: Path) -> dict[str, str]:
    """Return a package ``__init__``'s ``_LAZY`` table (public name → the module that defines it), or {}."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _lazy_names(package: Path = PACKAGE) -> dict[str, dict[str, str]]:
    """Return, per package that loads names lazily (the root, ``flink``), its ``_LAZY`` table."""
    tables = {}
    for init in sorted(package.rglob("__init__.py")):
        table = _lazy_table(init)
        if table:
            tables[_module_name(init, package)] = table
    return tables


def _runtime_edges(package: Path = PACKAGE) -> Iterator[tuple[str, int, str]]:
    """Yield ``(module, line, target)`` for every runtime import of a keygroup_cli module by another.

    ``from pkg import sub`` resolves to ``pkg.sub`` when ``sub`` is a submodule, and a name an entry module
    loads lazily (``from keygroup_cli import rescale``, ``from keygroup_cli.flink import open_savepoint``) to
    the module that defines it; else to ``pkg``. An
    import of one's own ancestor package is left out: Python initialises a package before any of its
    submodules, so that edge always exists and a package importing its submodules is not a cycle.
    """
    files = _files(package)
    lazy = _lazy_names(package)

    def existing(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    def resolve(base: str, alias: str) -> str:
        if f"{base}.{alias}" in files:
            return f"{base}.{alias}"
        if alias in lazy.get(base, {}):
            return lazy[base][alias]
        return base

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
                targets = [resolve(base, a.name) for a in node.names]
            for target in targets:
                if target == "keygroup_cli" or target.startswith("keygroup_cli."):
                    resolved = existing(target)
                    if resolved is not None and not (name == resolved or name.startswith(resolved + ".")):
                        yield name, node.lineno, resolved


def _import_graph() -> dict[str, set[str]]:
    """Return module → the keygroup_cli modules it imports at runtime (see ``_runtime_edges``)."""
    graph: dict[str, set[str]] = {name: set() for name in _files()}
    for name, _, target in _runtime_edges():
        graph[name].add(target)
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


# -- layers ------------------------------------------------------------------------------------------------

#: The package's layers, bottom up: each a folder of the package (the root holds only the lazy public API and
#: ``__main__``, which sit on top). A module may import its own layer and those below, never above; the
#: formats never import each other. ``test_every_folder_is_a_layer`` keeps this list and the folders equal.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("core",)),
    ("storage", ("storage",)),
    ("formats", ("flink", "snapshot", "ha", "k8s")),
    ("planning and assessment", ("assess", "convert", "planning")),
    ("execution", ("execution",)),
    ("cli", ("cli",)),
    ("entry", ("keygroup_cli", "__main__")),
)

#: Inside flink/, bottom up: its subpackages and its two root modules. Its ``__init__`` (the entry module
#: every other package imports) is on top.
FLINK_ORDER = (
    "io",
    "metadata",
    "types",
    "kernels",
    "keyed",
    "operator",
    "layouts",
    "savepoint",
    "download",
    "check",
    "write",
    "data",
)

#: Inside execution/, bottom up.
EXECUTION_ORDER = ("jobs", "engines", "options", "routes", "environment")

#: At most this many modules at the package root.
ROOT_MODULES = 5


def _layer(module: str) -> tuple[int, str] | None:
    """Return ``(rank, package)`` of a keygroup_cli module: its layer, and the top-level part it lives in."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "keygroup_cli"
    for rank, (_, members) in enumerate(LAYERS):
        if top in members:
            return rank, top
    return None


def _inner_rank(module: str, package: str, order: tuple[str, ...]) -> int:
    """Rank of a module inside ``keygroup_cli.<package>`` by ``order``; the package's ``__init__`` is top."""
    parts = module.split(".")
    if len(parts) > 2 and parts[2] in order:
        return order.index(parts[2])
    return len(order)


def _layer_violation(source: str, target: str) -> str | None:
    """Return why ``source`` may not import ``target``, or None if it may."""
    placed, target_placed = _layer(source), _layer(target)
    assert placed is not None and target_placed is not None, (source, target)
    (rank, top), (target_rank, target_top) = placed, target_placed
    if target_rank > rank:
        return f"{LAYERS[rank][0]} imports {LAYERS[target_rank][0]}"
    if rank == target_rank and LAYERS[rank][0] == "formats" and top != target_top:
        return f"format {top}/ imports format {target_top}/"
    for package, order in (("flink", FLINK_ORDER), ("execution", EXECUTION_ORDER)):
        if top == target_top == package:
            here, there = _inner_rank(source, package, order), _inner_rank(target, package, order)
            if there > here:
                inner = (*order, f"{package}/__init__")
                return f"{package}/{inner[here]} imports {package}/{inner[there]}"
    return None


def test_layer_rules_see_upward_sibling_and_inner_imports():
    assert _layer_violation("keygroup_cli.core.keys", "keygroup_cli.execution.routes.rescale") == (
        "core imports execution"
    )
    assert _layer_violation("keygroup_cli.flink.check.verify", "keygroup_cli.snapshot.verify") is not None
    assert _layer_violation("keygroup_cli.ha.model", "keygroup_cli.flink") is not None
    assert (
        _layer_violation("keygroup_cli.flink.io.binary", "keygroup_cli.flink.types.serializers") is not None
    )
    assert _layer_violation("keygroup_cli.flink.types.values", "keygroup_cli.flink.keyed.header") is not None
    assert _layer_violation("keygroup_cli.flink.savepoint", "keygroup_cli.flink.check.verify") is not None
    assert _layer_violation("keygroup_cli.flink.write.regroup", "keygroup_cli.flink.io.paths") is None
    assert (
        _layer_violation("keygroup_cli.execution.engines.local", "keygroup_cli.execution.routes.plan")
        is not None
    )
    assert _layer_violation("keygroup_cli.convert.to_savepoint", "keygroup_cli.snapshot.model") is None
    assert _layer_violation("keygroup_cli.assess.restore", "keygroup_cli.assess.summary") is None
    assert _layer_violation("keygroup_cli.cli.inputs", "keygroup_cli.core.keygroups") is None
    assert _layer_violation("keygroup_cli.cli.inputs", "keygroup_cli") is not None


def test_edges_include_function_level_relative_and_lazy_root_imports(tmp_path: Path) -> None:
    package = tmp_path / "keygroup_cli"
    (package / "flink").mkdir(parents=True)
    (package / "__init__.py").write_text('_LAZY = {"rescale": "keygroup_cli.execution"}\n')
    (package / "execution.py").write_text("")
    (package / "checks.py").write_text("")
    (package / "flink" / "__init__.py").write_text("")
    (package / "flink" / "verify.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from keygroup_cli import rescale\n"
        "if TYPE_CHECKING:\n"
        "    from keygroup_cli.checks import Finding\n"
        "def f():\n"
        "    from ..checks import Finding\n"
        "    from . import verify\n"
    )
    assert sorted(_runtime_edges(package)) == [
        ("keygroup_cli.flink.verify", 2, "keygroup_cli.execution"),
        ("keygroup_cli.flink.verify", 6, "keygroup_cli.checks"),
    ]


def test_every_folder_is_a_layer_and_the_root_stays_small():
    folders = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    placed = sorted(m for _, members in LAYERS for m in members if m not in ("keygroup_cli", "__main__"))
    assert folders == placed, "a folder of the package has no layer, or a layer names no folder"
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES, root


@pytest.mark.parametrize(("package", "order"), [("flink", FLINK_ORDER), ("execution", EXECUTION_ORDER)])
def test_every_part_of_flink_and_execution_has_a_place_in_its_order(package, order):
    parts = sorted(
        p.parent.name if p.name == "__init__.py" else p.stem
        for p in [*(PACKAGE / package).glob("*/__init__.py"), *(PACKAGE / package).glob("*.py")]
        if p.name != "__init__.py" or p.parent != PACKAGE / package
    )
    assert parts == sorted(order)


def test_other_packages_import_flink_through_its_entry_module():
    inside = [
        f"{name}:{node.lineno} imports {node.module}"
        for name, path in _files().items()
        if not name.startswith("keygroup_cli.flink")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("keygroup_cli.flink.")
        or isinstance(node, ast.Import)
        and any(a.name.startswith("keygroup_cli.flink.") for a in node.names)
    ]
    assert not inside, "import keygroup_cli.flink, not its modules:\n" + "\n".join(inside)


def test_flink_entry_module_names_exist_and_type_checkers_see_them():
    init = PACKAGE / "flink" / "__init__.py"
    table = _lazy_table(init)
    typed = {}
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                typed.update({a.name: imp.module for a in imp.names})
    assert typed == table
    import keygroup_cli.flink as flink

    missing = [name for name in table if not hasattr(flink, name)]
    assert not missing, missing


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in _files() if _layer(m) is None)
    assert not unplaced, "modules in no layer (add their folder to LAYERS):\n" + "\n".join(unplaced)


def test_no_import_goes_up_a_layer_or_across_formats():
    bad = [
        f"{source}:{line} -> {target} ({why})"
        for source, line, target in sorted(set(_runtime_edges()))
        if _layer(source) is not None
        and _layer(target) is not None
        and (why := _layer_violation(source, target)) is not None
    ]
    order = " < ".join(name for name, _ in LAYERS)
    assert not bad, f"{len(bad)} imports break the layers ({order}):\n" + "\n".join(bad)

"""Measure how the package is laid out (issue #38's "before and after").

    .venv/bin/python benchmarks/structure.py [PACKAGE_DIR]

Prints, for the tree it is run on:

- modules at the package root;
- the largest top-level folder's share of the package's lines, and the largest folder's counting only the
  modules directly in it;
- imports of ``flink/`` internals from outside ``flink/`` (any import of a ``keygroup_cli.flink.*`` module
  other than the entry module ``keygroup_cli.flink`` itself), and how many internal modules they reach;
- functions over 60 lines, and their share of all functions;
- import cycles between modules, function-level imports included, typing-only ones not (strongly connected
  components);
- ``OnProgress`` definitions.

Nothing here asserts: the figures go into the closing note and docs/architecture.md.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports there never run)."""
    out: list[ast.AST] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                out += [child, *_runtime_nodes(child)]
            continue
        out += [node, *_runtime_nodes(node)]
    return out


def _imports(tree: ast.AST, name: str, is_package: bool) -> list[str]:
    found = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            found += [f"{base}.{a.name}" for a in node.names] + [base]
    return found


def _sccs(graph: dict[str, set[str]]) -> list[set[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    package = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "keygroup_cli"
    files = {_module(p, package): p for p in sorted(package.rglob("*.py"))}
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in files.items()}
    total = sum(lines.values())
    root_modules = list(package.glob("*.py"))
    folders: Counter[str] = Counter()
    for m, n in lines.items():
        parts = m.split(".")
        if len(parts) > 1 and (package / parts[1]).is_dir():
            folders[parts[1]] += n
    big, big_lines = folders.most_common(1)[0]
    leaves: Counter[str] = Counter()
    for m, path in files.items():
        leaves[path.parent.relative_to(package).as_posix()] += lines[m]
    leaf, leaf_lines = leaves.most_common(1)[0]

    graph: dict[str, set[str]] = {m: set() for m in files}
    with_ancestors: dict[str, set[str]] = {m: set() for m in files}
    flink_internal = 0
    internal_targets: set[str] = set()
    functions = long = 0
    on_progress = 0
    for m, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target in _imports(tree, m, path.name == "__init__.py"):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if not target or target == m:
                continue
            with_ancestors[m].add(target)
            if not m.startswith(target + "."):
                graph[m].add(target)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not m.startswith("keygroup_cli.flink"):
                mod = node.module or ""
                if mod.startswith("keygroup_cli.flink."):
                    flink_internal += 1
                    internal_targets.add(mod)
            if isinstance(node, ast.Import) and not m.startswith("keygroup_cli.flink"):
                for a in node.names:
                    if a.name.startswith("keygroup_cli.flink."):
                        flink_internal += 1
                        internal_targets.add(a.name)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions += 1
                if (node.end_lineno or node.lineno) - node.lineno + 1 > 60:
                    long += 1
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.ClassDef)):
                names = (
                    [node.name]
                    if isinstance(node, ast.ClassDef)
                    else [
                        t.id
                        for t in getattr(node, "targets", [getattr(node, "target", None)])
                        if isinstance(t, ast.Name)
                    ]
                )
                on_progress += "OnProgress" in names
    cycles = _sccs(graph)
    print(f"package: {package}  ({len(files)} modules, {total:,} lines)")
    print(f"modules at the root:                      {len(root_modules)}")
    print(f"largest folder:                           {big}/ {big_lines:,} lines, {big_lines / total:.0%}")
    print(f"largest folder, its own modules only:     {leaf}/ {leaf_lines:,} lines, {leaf_lines / total:.0%}")
    print(f"imports of flink/ internals from outside: {flink_internal} ({len(internal_targets)} modules)")
    print(f"functions over 60 lines:                  {long} of {functions} ({long / functions:.1%})")
    print(
        f"import cycles (function-level included):  {len(cycles)}"
        + "".join(f"\n    {' '.join(sorted(c))}" for c in cycles)
    )
    print(f"  ... counting imports of one's own package's __init__: {len(_sccs(with_ancestors))}")
    print(f"OnProgress definitions:                   {on_progress}")


if __name__ == "__main__":
    main()

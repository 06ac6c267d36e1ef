"""The test tree itself: every test module can be collected in one run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique() -> None:
    # tests/ has no __init__.py files, so pytest imports each module by its basename (prepend mode): two
    # test_x.py in different directories stop the whole run at collection, though each runs alone.
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


PACKAGE = TESTS.parent / "keygroup_cli"

#: Folders of tests that follow no package: they cut across it (every command under damage, kill and low
#: memory; a real Spark cluster; real Flink restoring what kg writes).
CROSS_CUTTING = ("reliability", "cluster", "restore")


def _packages() -> list[str]:
    """Return the folders tests mirror: the top-level ones, and those inside flink/ and execution/."""
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        rel = init.parent.relative_to(PACKAGE)
        if rel.parts and (
            len(rel.parts) == 1 or (len(rel.parts) == 2 and rel.parts[0] in ("flink", "execution"))
        ):
            found.append(rel.as_posix())
    return found


def test_tests_mirror_the_package() -> None:
    missing = [p for p in _packages() if not any((TESTS / p).glob("**/test_*.py"))]
    assert not missing, f"packages without a tests folder of their own: {missing}"
    strays = sorted(
        d.name
        for d in TESTS.iterdir()
        if d.is_dir() and any(d.glob("test_*.py")) and d.name not in (*_packages(), *CROSS_CUTTING)
    )
    assert not strays, f"test folders that mirror no package: {strays}"


def _named_by_tests() -> set[str]:
    """Return every keygroup_cli module a test imports or names (``keygroup_cli.x`` in a string)."""
    import ast
    import re

    def lazy_table(init: Path) -> dict[str, str]:
        tree = ast.parse(init.read_text(encoding="utf-8"))
        return next(
            ast.literal_eval(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_LAZY"
        )

    # The entry modules load names lazily: importing one of those names imports the module behind it.
    lazy = {
        "keygroup_cli": lazy_table(PACKAGE / "__init__.py"),
        "keygroup_cli.flink": lazy_table(PACKAGE / "flink" / "__init__.py"),
    }
    named: set[str] = set()
    commands: set[str] = set()
    for path in TESTS.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for dotted in re.findall(r"keygroup_cli(?:\.\w+)+", text):
            parts = dotted.split(".")
            named.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keygroup_cli"):
                named.update(f"{node.module}.{a.name}" for a in node.names)
                table = lazy.get(node.module or "", {})
                named.update(table[a.name] for a in node.names if a.name in table)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and path.parent.name == "cli":
                commands.add(node.value)
        if '"-m", "keygroup_cli"' in text:
            named.add("keygroup_cli.__main__")
    named.update(f"keygroup_cli.cli.commands.{c}" for c in commands)
    return named


def test_every_module_is_imported_or_run_by_a_test() -> None:
    modules = {
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py"
    }
    # A cli/commands module counts when a test under tests/cli runs its command by name.
    missing = sorted(modules - _named_by_tests())
    assert not missing, "modules no test imports or runs:\n" + "\n".join(missing)

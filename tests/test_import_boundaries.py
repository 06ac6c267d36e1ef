"""The core stays pure: no click/rich outside cli/, no pyspark outside execution/spark.py (C1, C4)."""

from __future__ import annotations

import json
import subprocess
import sys
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

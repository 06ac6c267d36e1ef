"""The gate on any input: ``verify_input`` reads either format, ``require_intact`` refuses what verify
rejects.

Damage is made on copies of bundled fixtures; the input handed to the gate is never changed by it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from keygroup_cli.assess.integrity import check_input, require_intact, verify_input
from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.findings import Severity
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
SNAPSHOT = FIXTURES / "snapshots" / "valid"


def _errors(findings) -> list[str]:
    return [f.code for f in findings if f.severity is Severity.ERROR]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("path", [SAVEPOINT, SNAPSHOT], ids=["savepoint", "snapshot"])
def test_an_intact_input_of_either_format_passes(path):
    assert _errors(verify_input(path).findings) == []
    require_intact(path)


@pytest.fixture
def truncated(tmp_path: Path) -> Path:
    copy = tmp_path / "sp"
    shutil.copytree(SAVEPOINT, copy)
    state_files = [p for p in copy.iterdir() if len(p.name) == 36 and p.name.count("-") == 4]  # Flink's UUIDs
    largest = max(state_files, key=lambda p: p.stat().st_size)
    largest.write_bytes(largest.read_bytes()[:-1])
    return copy


def test_a_truncated_state_file_is_refused_with_the_label_and_the_input_is_unchanged(truncated):
    before = _tree(truncated)
    with pytest.raises(InvalidInputError) as refused:
        require_intact(truncated, label="the savepoint")
    assert refused.value.code == "INPUT_FAILS_VERIFY"
    assert str(refused.value).startswith("the savepoint: input fails kg verify: ")
    assert "\n" not in str(refused.value)
    assert _tree(truncated) == before


def test_check_input_stats_the_files_and_deep_adds_what_verify_finds(truncated):
    shallow = check_input(truncated)
    assert _errors(shallow), "a stat sees the short file"
    deep = check_input(truncated, deep=True)
    assert set(shallow) <= set(deep)
    assert len(deep) == len(set(deep)), "no finding twice"
    assert check_input(SAVEPOINT) == [] and _errors(check_input(SAVEPOINT, deep=True)) == []


def test_a_kg_snapshot_gets_no_findings_without_deep_and_verifys_with_it():
    corrupt = FIXTURES / "snapshots" / "corrupt"
    assert check_input(corrupt) == []
    assert _errors(check_input(corrupt, deep=True))
    with pytest.raises(InvalidInputError):
        require_intact(corrupt)


def test_neither_format_is_an_invalid_input(tmp_path):
    (tmp_path / "notes.txt").write_text("not state")
    with pytest.raises(InvalidInputError):
        verify_input(tmp_path)

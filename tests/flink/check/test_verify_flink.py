"""``kg verify`` of a Flink savepoint on its own: what it counts, and what it finds in a damaged copy."""

from __future__ import annotations

import shutil

from keygroup_cli.core.findings import Severity
from keygroup_cli.flink import open_savepoint, verify_flink
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"


def test_an_intact_savepoint_has_no_findings_and_every_block_counts_its_rows():
    deep = verify_flink(SAVEPOINT)
    assert deep.ok and deep.findings == ()
    shallow = verify_flink(SAVEPOINT, blocks=False)
    assert shallow.ok
    # Without blocks only operator-state elements are decoded; the keyed entries come on top of those.
    assert 0 < shallow.rows < deep.rows
    assert shallow.files == deep.files > 0


def test_an_opened_savepoint_is_verified_alike():
    assert verify_flink(open_savepoint(SAVEPOINT)).rows == verify_flink(SAVEPOINT).rows


def test_a_short_state_file_is_an_error_naming_it_with_or_without_blocks(tmp_path):
    copy = tmp_path / "sp"
    shutil.copytree(SAVEPOINT, copy)
    state_files = [p for p in copy.iterdir() if len(p.name) == 36 and p.name.count("-") == 4]
    damaged = max(state_files, key=lambda p: p.stat().st_size)
    damaged.write_bytes(damaged.read_bytes()[:-10])
    for blocks in (True, False):
        report = verify_flink(copy, blocks=blocks)
        errors = [f for f in report.findings if f.severity is Severity.ERROR]
        assert errors and not report.ok
        assert any(damaged.name in f.subject or damaged.name in f.message for f in errors), errors

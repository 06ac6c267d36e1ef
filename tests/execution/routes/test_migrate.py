"""``execution.routes.migrate``: the spine's "once" for an operator migration, and nothing read that is not
copied.

The input's ``_metadata`` is read once; each state file of a kept operator is copied once and a dropped
operator's files never; each operator-state stream is decoded once, in the output (never in the input:
a copy needs no decode); the output ``_metadata`` is encoded once.
"""

from __future__ import annotations

import collections
import shutil
from pathlib import Path

import pytest

from keygroup_cli.execution.routes.migrate import run_migration
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.planning.migration import MigrationRequest, plan_migration
from tests.conftest import FIXTURES
from tests.execution.spine_counter import counting

CASES = ["2.3/uid-heap-canonical-p3", "2.3/uid-rocksdb-native-p3", "1.20/uid-rocksdb-incremental-p3"]
REQUEST = MigrationRequest(renames=(("keyed-long", "keyed-long-v2"),), drops=("keyed-string",))


@pytest.mark.parametrize("case", CASES)
def test_a_migration_reads_metadata_once_and_copies_each_kept_file_once(case, tmp_path, monkeypatch) -> None:
    source = FIXTURES / "flink" / case
    names = frozenset(p.name for p in source.rglob("*") if p.is_file())
    planned = plan_migration(read_flink_metadata(source).metadata, REQUEST)
    streams = sum(
        isinstance(sub.managed_operator_state, OperatorStateHandle)
        for op in planned.metadata.operators
        for sub in op.subtasks
    )
    copies: collections.Counter[str] = collections.Counter()
    copyfile = shutil.copyfile

    def counted_copy(src, dst, *args, **kwargs):
        copies[Path(src).name] += 1
        return copyfile(src, dst, *args, **kwargs)

    with counting(monkeypatch, str(source), names) as counts:
        monkeypatch.setattr(shutil, "copyfile", counted_copy)
        result = run_migration(source, tmp_path / "out", REQUEST)
    monkeypatch.undo()
    assert counts.metadata_reads == 1 and counts.metadata_encodes == 1, counts
    assert not counts.header_reads, counts.header_reads  # no input header is parsed: bytes are copied
    assert sum(counts.operator_decodes.values()) == streams and set(counts.operator_decodes.values()) <= {1}
    assert set(copies.values()) == {1} and sorted(copies) == sorted(f.target for f in planned.files)
    assert result.plan.files == planned.files and (tmp_path / "out" / "_metadata").is_file()

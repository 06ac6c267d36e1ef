"""One savepoint rescale reads each input file once and encodes its output ``_metadata`` once (#21).

For each route of a savepoint rescale (key groups copied as bytes; keys re-hashed; a heap layout rewritten
first), counted in this process on the local engine (``spine_counter``):

- the input ``_metadata`` is read from storage once;
- each input state file's header is read once;
- each input operator-state stream is decoded once;
- the output ``_metadata`` is encoded once.

The object-store variant is ``tests/storage/test_s3_spine_counts.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.metadata.handles import OperatorStateHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.execution.spine_counter import assert_each_once, count_rescale

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "flink"

ROUTES = [
    # (fixture, new parallelism, new maxParallelism): copy as bytes, re-hash.
    ("2.3/rocksdb-canonical-p3-maxp128-string", 4, None),
    ("2.3/rocksdb-canonical-p3-maxp128-string", 4, 1024),
    ("2.3/rocksdb-canonical-snappy-p3-maxp128-long", 2, 256),
    ("2.3/uid-heap-canonical-p3", 4, None),
    ("2.3/uid-heap-canonical-p3", 2, 1024),
    # A heap checkpoint and a RocksDB NATIVE savepoint: rewritten in the canonical layout first.
    ("2.3/heap-checkpoint-p2-maxp128-string", 3, None),
    ("2.3/heap-checkpoint-p2-maxp128-string", 3, 256),
    ("2.3/uid-rocksdb-native-p3", 4, None),
]


def state_files(savepoint: Path) -> tuple[int, int, frozenset[str]]:
    """Return how many state files (keyed and operator) and operator-state streams ``savepoint`` has,
    and the names of its files."""
    metadata = read_flink_metadata(savepoint).metadata
    files: set[str] = set()
    streams = 0
    for op in metadata.operators:
        for sub in op.subtasks:
            for handle in (sub.managed_keyed_state, sub.managed_operator_state):
                if isinstance(handle, KeyGroupsHandle | OperatorStateHandle):
                    files.add(str(getattr(handle.delegate, "relative_path", handle.delegate)))
            streams += isinstance(sub.managed_operator_state, OperatorStateHandle)
    names = frozenset(p.name for p in savepoint.rglob("*") if p.is_file())
    return len(files), streams, names


@pytest.mark.parametrize(("case", "to", "max_parallelism"), ROUTES)
def test_a_savepoint_rescale_reads_each_input_file_once(case, to, max_parallelism, tmp_path, monkeypatch):
    source = FIXTURES / case
    assert source.is_dir(), source
    files, streams, names = state_files(source)
    counts = count_rescale(monkeypatch, str(source), str(tmp_path / "out"), to, max_parallelism, names)
    assert_each_once(counts, state_files=files, operator_streams=streams)
    assert (tmp_path / "out" / "_metadata").is_file()

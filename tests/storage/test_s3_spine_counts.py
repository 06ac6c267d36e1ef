"""A savepoint rescale from an object store reads each input object once, whatever the route (#21).

The same counts as ``tests/execution/routes/test_spine_counts.py``, for a savepoint uploaded to a real
S3-compatible server (moto), rescaled to a local directory and to the object store: the input
``_metadata`` is fetched once, each state file's header once, each operator-state stream decoded once, and
the output ``_metadata`` encoded once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.execution.routes.test_spine_counts import FIXTURES, state_files
from tests.execution.spine_counter import assert_each_once, count_rescale

ROUTES = [
    ("2.3/rocksdb-canonical-p3-maxp128-string", 4, None),
    ("2.3/rocksdb-canonical-p3-maxp128-string", 4, 1024),
    # A heap checkpoint on an object store is downloaded and rewritten in the canonical layout first.
    ("2.3/heap-checkpoint-p2-maxp128-string", 3, 256),
]


@pytest.mark.parametrize("remote_output", [False, True], ids=["to-local", "to-s3"])
@pytest.mark.parametrize(("case", "to", "max_parallelism"), ROUTES)
def test_an_object_store_rescale_reads_each_input_object_once(
    case, to, max_parallelism, remote_output, s3_server: Any, tmp_path: Path, monkeypatch
):
    bucket = s3_server.bucket("kg-spine")
    name = f"{case.replace('/', '-')}-{to}-{max_parallelism}-{remote_output}"
    source = s3_server.upload(FIXTURES / case, f"{bucket}/in/{name}")
    dest = f"{bucket}/out/{name}" if remote_output else str(tmp_path / "out")
    files, streams, names = state_files(FIXTURES / case)
    counts = count_rescale(monkeypatch, source, dest, to, max_parallelism, names)
    assert_each_once(counts, state_files=files, operator_streams=streams)


@pytest.mark.parametrize(
    ("case", "to", "max_parallelism"),
    [
        # Read in place, keyed files written straight to the store (re-hashed keys).
        ("2.3/uid-heap-canonical-p3", 4, 256),
        # A heap checkpoint: downloaded, rewritten canonically; the migration applies to the local copy.
        ("2.3/uid-heap-checkpoint-p3", 2, None),
    ],
)
def test_a_rescale_with_surgery_on_an_object_store_reads_each_input_object_once(
    case, to, max_parallelism, s3_server: Any, tmp_path: Path, monkeypatch
):
    """``kg rescale --rename --drop`` from S3 to S3: one pass, the input's objects read once each."""
    from keygroup_cli.core.keygroups import operator_id_for_uid
    from keygroup_cli.flink.metadata.locate import read_flink_metadata
    from keygroup_cli.planning.migration import MigrationRequest

    bucket = s3_server.bucket("kg-spine-migration")
    name = f"{case.replace('/', '-')}-{to}-{max_parallelism}"
    source = s3_server.upload(FIXTURES / case, f"{bucket}/in/{name}")
    dest = f"{bucket}/out/{name}"
    dropped = operator_id_for_uid("keyed-string")
    migration = MigrationRequest(renames=(("keyed-long", "keyed-long-v2"),), drops=("keyed-string",))
    # A heap checkpoint is downloaded whole (each object once, the dropped operator's with it).
    without = frozenset() if "checkpoint" in case else frozenset({dropped})
    files, _, names = state_files(FIXTURES / case, without)
    _, kept_streams, _ = state_files(FIXTURES / case, frozenset({dropped}))
    counts = count_rescale(monkeypatch, source, dest, to, max_parallelism, names, migration)
    # Only the kept operators' operator-state streams are decoded.
    assert_each_once(counts, state_files=files, operator_streams=kept_streams)
    copy = s3_server.download(dest, tmp_path / "out")
    ids = {op.operator_id for op in read_flink_metadata(copy).metadata.operators}
    assert operator_id_for_uid("keyed-long-v2") in ids and dropped not in ids
    assert ".kg-writer" not in s3_server.keys(dest)

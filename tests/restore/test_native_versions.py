"""Flink 2.0.1's ForSt backend restores kg's NATIVE output of a ForSt savepoint that Flink 2.0.1 wrote (#23).

``fixtures/flink/2.0/uid-forst-native-p3`` is UidJob (fixtures/java/versioned; keyed-string at maxP 10,
keyed-long at maxP 128, stateless operators chained to each) on ``state.backend.type: forst``, a NATIVE
savepoint at p 3. kg rescales it with ``--format native``: keyed-long to p 4 and maxParallelism 256 (keys
re-hashed), and the whole job to p 4 at its maxParallelisms (key groups copied as bytes). Flink 2.0.1 restores
each on ForSt and on RocksDB, by a job that sets maxParallelism and by one that sets none, and every key
must come back with its value, in the key group and on the subtask Flink's lookup gives it
(``harness.assert_uid_job_restored``). ``uid-forst-incremental-p3`` is the same job's second retained
incremental ForSt checkpoint (``shared/`` files by absolute paths): ForSt restores kg's NATIVE rescale of
it (keyed-long to p 4, maxParallelism 256) too. One JVM (marker ``flink``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.execution.routes.rescale import rescale
from tests.restore.harness import (
    UID_NEW_M,
    UID_NEW_P,
    UID_OWN_M,
    UidRestoreRequest,
    assert_uid_job_restored,
    build_versioned_classpath,
    run_uid_restores,
    uid_case,
)

pytestmark = pytest.mark.flink

VERSION = "2.0.1"
CASE = "uid-forst-native-p3"
CHECKPOINT = "uid-forst-incremental-p3"
SAME_P = {"keyed-string": 4, "keyed-long": 4}


def test_flink_2_0_forst_restores_kgs_native_output(tmp_path: Path) -> None:
    source = uid_case(VERSION, CASE)
    rehashed, copied = tmp_path / "long-p4-m256", tmp_path / "p4"
    rescale(source, rehashed, 4, operators=["keyed-long"], new_max_parallelism=256, output_format="native",
            engine="local")  # fmt: skip
    rescale(source, copied, 4, output_format="native", engine="local")
    # A retained incremental ForSt checkpoint of 2.0.1: its shared/ files named by absolute paths that
    # are gone here, found in the job directory it was moved with.
    checkpoint = next(uid_case(VERSION, CHECKPOINT).glob("*/chk-*"))
    from_checkpoint = tmp_path / "checkpoint-long-p4-m256"
    rescale(checkpoint, from_checkpoint, 4, operators=["keyed-long"], new_max_parallelism=256,
            output_format="native", engine="local")  # fmt: skip
    shapes = {rehashed: (UID_NEW_P, UID_NEW_M), copied: (SAME_P, UID_OWN_M)}
    requests = [
        UidRestoreRequest(path, p, m if explicit else {}, backend=backend)
        for path, (p, m) in shapes.items()
        for backend in ("forst", "rocksdb")
        for explicit in (True, False)
    ]
    shapes[from_checkpoint] = (UID_NEW_P, UID_NEW_M)
    requests += [
        UidRestoreRequest(from_checkpoint, UID_NEW_P, UID_NEW_M if explicit else {}, backend="forst")
        for explicit in (True, False)
    ]
    dumps = run_uid_restores(VERSION, requests, tmp_path / "dumps", build_versioned_classpath(VERSION))
    for request, dump in zip(requests, dumps, strict=True):
        _p, m = shapes[request.savepoint]
        assert_uid_job_restored(dump, request.parallelism, m)

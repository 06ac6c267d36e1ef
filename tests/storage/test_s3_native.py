"""``kg rescale --format native`` from S3 to S3: staged locally, uploaded with ``_metadata`` last (#23).

Real Flink restores of the same NATIVE outputs written locally are in tests/restore/test_native.py; here the
object-store route: the output on the store holds one RocksDB database per subtask and every file its
``_metadata`` names.
"""

from __future__ import annotations

from typing import Any

from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.restore.harness import CASES

CASE = "forst-native-p3-maxp128-string"


def test_native_output_on_s3(kg, s3_server: Any, tmp_path) -> None:
    bucket = s3_server.bucket("kg-native")
    source = s3_server.upload(CASES / CASE, f"{bucket}/savepoints/{CASE}")
    target = f"{bucket}/rescaled/native-p4-m256"
    done = kg("rescale", source, "--to", "4", "-m", "256", "--format", "native", "--out", target,
              "--engine", "local", "-q")  # fmt: skip
    assert done.exit_code == 0, done.stderr
    local = s3_server.download(target, tmp_path / "out")
    operators = read_flink_metadata(local).metadata.operators
    keyed = [s.managed_keyed_state for op in operators for s in op.subtasks if s.managed_keyed_state]
    assert len(keyed) == 2 * 4 and all(isinstance(h, IncrementalKeyedHandle) for h in keyed)
    stored = set(s3_server.keys(target))
    for handle in keyed:
        assert isinstance(handle, IncrementalKeyedHandle)
        for file in (handle.metadata, *(f.handle for f in handle.private)):
            assert getattr(file, "relative_path", None) in stored


def test_async_state_on_s3_is_written_native_without_format(kg, s3_server: Any, tmp_path) -> None:
    # #41: without --format, async state (State V2) gets the NATIVE savepoint Flink restores, chosen from
    # the keyed headers read on the store, before the route (a NATIVE output is staged, then uploaded).
    bucket = s3_server.bucket("kg-async")
    source = s3_server.upload(CASES / "async-forst-native-p3", f"{bucket}/savepoints/async")
    target = f"{bucket}/rescaled/async-p4"
    plan = kg("plan", source, "--from", "3", "--to", "4", "--json")
    done = kg("rescale", source, "--from", "3", "--to", "4", "--out", target, "--engine", "local", "--json")
    assert plan.exit_code == done.exit_code == 0, plan.stderr + done.stderr
    for doc in (plan.json(), done.json()):
        assert doc["savepoint_format"] == "native"
        assert doc["savepoint_format_reason"].startswith("operator 'async-keyed' holds state of the async")
    operators = read_flink_metadata(s3_server.download(target, tmp_path / "out")).metadata.operators
    keyed = [s.managed_keyed_state for op in operators for s in op.subtasks if s.managed_keyed_state]
    assert len(keyed) == 4 and all(isinstance(h, IncrementalKeyedHandle) for h in keyed)

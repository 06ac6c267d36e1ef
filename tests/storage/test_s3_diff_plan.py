"""kg diff and kg plan on a Flink savepoint in an S3-compatible store (moto's server on 127.0.0.1).

A remote savepoint is compared as a local one is (downloaded into scratch, decoded, both removed), and
planned from where it is: the plan and the dry run equal those of the same files on local disk, and the
dry run writes nothing at an object-store DEST.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"


@pytest.fixture(scope="module")
def bucket(s3_server: Any) -> str:
    uri = s3_server.bucket("kg-diff-plan")
    s3_server.upload(SAVEPOINT, f"{uri}/savepoints/sp-1")
    return uri


def test_diff_a_remote_savepoint_with_local_inputs(kg, bucket, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("KG_SCRATCH_DIR", str(scratch))
    remote = f"{bucket}/savepoints/sp-1"
    same = kg("diff", remote, SAVEPOINT)
    assert same.exit_code == 0, same.stdout + same.stderr
    assert same.stdout.rstrip().endswith("same logical state")
    args = ("--from", "3", "--to", "4", "-m", "256", "--engine", "local", "-q")
    assert kg("rescale", SAVEPOINT, *args, "--out", tmp_path / "m256").exit_code == 0
    assert kg("diff", "-q", tmp_path / "m256", remote).exit_code == 0
    other = FIXTURES / "flink" / "2.3" / "heap-snappy-files-p4-maxp128-long"
    different = kg("diff", remote, other, "--json")
    assert different.exit_code == 1 and different.json()["input_a"] == remote
    assert list(scratch.iterdir()) == []


def test_plan_and_dry_run_of_a_remote_savepoint(kg, bucket, s3_server):
    remote = f"{bucket}/savepoints/sp-1"
    args = ("--from", "3", "--to", "4", "--json")
    local = kg("plan", SAVEPOINT, *args).json()
    plan = kg("plan", remote, *args)
    assert plan.exit_code == 0, plan.stderr
    assert plan.json() == {**local, "input": remote}
    target = f"{bucket}/out/dry"
    dry = kg("rescale", remote, *args, "--out", target, "--dry-run")
    assert dry.exit_code == 0 and dry.stdout == plan.stdout
    assert s3_server.keys(target) == {}
    s3_server.put(f"{bucket}/out/taken/object", b"x")
    for dest, code in (
        (f"{bucket}/out/taken", "DESTINATION_EXISTS"),
        (f"{remote}/inside", "DESTINATION_INSIDE_INPUT"),
    ):
        refused = kg("rescale", remote, *args, "--out", dest, "--dry-run")
        assert refused.exit_code == 2 and refused.json()["error"]["code"] == code
    assert list(s3_server.keys(f"{bucket}/out/taken")) == ["object"]

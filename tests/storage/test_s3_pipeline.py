"""A savepoint on S3 is rescaled where it is: nothing downloaded, keyed files written straight to DEST.

The read tasks open the savepoint on the store (ranged GETs), the write tasks create the keyed files at the
destination prefix; the driver uploads operator state, decodes every stream of the output on the store,
then writes ``_metadata`` last. The output must be the bytes a local rescale writes, and a failure before
the commit must leave no object at the destination.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.execution.routes import savepoint as savepoint_route
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.storage import remote as remote_storage
from tests.execution.jobs.test_keyed_pipeline import keyed_files

FIXTURES = Path(__file__).parents[2] / "fixtures" / "flink" / "2.3"
CASE = "heap-files-p3-maxp128-long"


@pytest.fixture
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the savepoint was downloaded")

    monkeypatch.setattr(remote_storage, "local_copy", refuse)


def test_rescaled_where_it_is_with_the_bytes_of_a_local_rescale(
    s3_server: Any, no_downloads: None, tmp_path: Path
) -> None:
    bucket = s3_server.bucket("kg-pipeline")
    source = s3_server.upload(FIXTURES / CASE, f"{bucket}/in/{CASE}")
    result = rescale(source, f"{bucket}/out/m1024", 4, new_max_parallelism=1024, engine="local")
    assert result.output == f"{bucket}/out/m1024" and result.keyed_rows
    keys = s3_server.keys(f"{bucket}/out/m1024")
    assert "_metadata" in keys and ".kg-writer" not in keys
    rescale(FIXTURES / CASE, tmp_path / "local", 4, new_max_parallelism=1024, engine="local")
    on_s3 = s3_server.download(f"{bucket}/out/m1024", tmp_path / "from-s3")
    assert keyed_files(on_s3) == keyed_files(tmp_path / "local")


def test_failure_before_the_commit_leaves_no_object(
    s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3_server.bucket("kg-pipeline-fail")
    source = s3_server.upload(FIXTURES / CASE, f"{bucket}/in/{CASE}")
    checked = []

    def failing(snapshot: Any, where: Any) -> None:
        # The keyed files and operator state are on the store by now; _metadata is not.
        checked.append(s3_server.keys(f"{bucket}/out"))
        raise ExecutionError("output verification failed: injected", code="OUTPUT_VERIFICATION_FAILED")

    monkeypatch.setattr(savepoint_route, "require_streams_decode", failing)
    with pytest.raises(ExecutionError, match="injected"):
        rescale(source, f"{bucket}/out", 4, new_max_parallelism=1024, engine="local")
    assert checked and len(checked[0]) > 4 and "_metadata" not in checked[0]
    assert ".kg-writer" in checked[0]
    assert s3_server.keys(f"{bucket}/out") == {}
    assert s3_server.keys(f"{bucket}/in/{CASE}")  # the input is untouched
    monkeypatch.undo()
    again = rescale(source, f"{bucket}/out", 4, new_max_parallelism=1024, engine="local")
    assert again.keyed_rows


@pytest.mark.spark
def test_spark_executors_read_and_write_the_store(s3_server: Any, tmp_path: Path) -> None:
    # A kg process of its own: its JVM and Python workers start with the S3 endpoint in their environment,
    # as executors configured with spark.executorEnv.* would.
    bucket = s3_server.bucket("kg-pipeline-spark")
    source = s3_server.upload(FIXTURES / CASE, f"{bucket}/in/{CASE}")
    env = {**os.environ, **s3_server.env, "KG_SCRATCH_DIR": str(tmp_path / "scratch")}
    (tmp_path / "scratch").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "keygroup_cli", "rescale", source, "--to", "4", "-m", "1024",
         "--out", f"{bucket}/out", "--engine", "spark", "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"engine": "spark"' in done.stdout
    rescale(FIXTURES / CASE, tmp_path / "local", 4, new_max_parallelism=1024, engine="local")
    on_s3 = s3_server.download(f"{bucket}/out", tmp_path / "from-s3")
    assert keyed_files(on_s3) == keyed_files(tmp_path / "local")
    assert list((tmp_path / "scratch").iterdir()) == []  # nothing left, and no keyed file went there

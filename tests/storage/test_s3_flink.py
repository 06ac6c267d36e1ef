"""A savepoint rescaled from S3 to S3 is restored by real Flink 2.3 with every key intact.

The rescaled savepoint is downloaded (Flink in the harness reads local files) and restored at the new
parallelism and maxParallelism; the restore must hold exactly the state the original job wrote
(``harness.assert_restored_like_expected``): every key, value, list, map entry and timer once, in the
key group and on the subtask Flink computes, and all operator state.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.restore.harness import (
    CASES,
    assert_restored_like_expected,
    build_classpath,
    case_json,
    case_key_type,
    case_request,
    run_restores,
)

pytestmark = pytest.mark.flink

CASE = "heap-files-p3-maxp128-long"


def test_flink_restores_a_savepoint_rescaled_s3_to_s3(kg, s3_server: Any, tmp_path) -> None:
    bucket = s3_server.bucket("kg-flink")
    source = s3_server.upload(CASES / CASE, f"{bucket}/savepoints/{CASE}")
    targets = {
        (4, 1024): f"{bucket}/rescaled/p4-m1024",  # re-hashed: a new maxParallelism
        (5, 128): f"{bucket}/rescaled/p5-m128",  # key groups copied as bytes
    }
    requests = []
    for (parallelism, max_parallelism), target in targets.items():
        done = kg("rescale", source, "--from", "3", "--to", str(parallelism), "-m", str(max_parallelism),
                  "--out", target, "--engine", "local")  # fmt: skip
        assert done.exit_code == 0, done.stderr
        local = s3_server.download(target, tmp_path / target.rsplit("/", 1)[1])
        requests.append(case_request(CASE, local, parallelism, max_parallelism))
    dumps = run_restores(requests, tmp_path / "dumps", build_classpath())
    expected = case_json(CASE, "expected-state.json")
    for (parallelism, max_parallelism), dump in zip(targets, dumps, strict=True):
        assert_restored_like_expected(dump, expected, parallelism, max_parallelism, case_key_type(CASE))

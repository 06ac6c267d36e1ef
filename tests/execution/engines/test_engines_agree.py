"""Local and Spark engines write byte-identical snapshots from the same plan."""

from __future__ import annotations

import pytest

from keygroup_cli.execution.engines.local import LocalExecutor
from keygroup_cli.execution.engines.spark import SparkExecutor
from keygroup_cli.execution.routes.rescale import rescale
from keygroup_cli.snapshot.manifest import manifest_to_dict
from tests.execution.snapshots import generate

pytestmark = pytest.mark.spark

CASES = [
    # (source parallelism, source maxP, new parallelism, new maxP)
    (3, 10, 4, None),
    (4, 128, 1, None),
    (3, 128, 7, None),
    (3, 10, 4, 64),
    (4, 128, 3, 1024),
]


@pytest.mark.parametrize(("p", "max_p", "new_p", "new_max"), CASES, ids=lambda v: str(v))
def test_local_and_spark_write_the_same_bytes(spark, tmp_path, p, max_p, new_p, new_max):
    source = generate(tmp_path / "in", ("counter", "string", 900, p, max_p), ("ids", "long", 400, p, max_p))
    local = rescale(source, tmp_path / "local", new_p, new_max_parallelism=new_max, executor=LocalExecutor())
    remote = rescale(
        source, tmp_path / "spark", new_p, new_max_parallelism=new_max, executor=SparkExecutor(session=spark)
    )

    def canonical(result):
        doc = manifest_to_dict(result.manifest)
        doc.pop("created_at")
        doc["origin"].pop("engine")
        return doc

    assert canonical(local) == canonical(remote)
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.parquet"))
    assert files == sorted(p.relative_to(tmp_path / "spark") for p in (tmp_path / "spark").rglob("*.parquet"))
    for f in files:
        assert (tmp_path / "local" / f).read_bytes() == (tmp_path / "spark" / f).read_bytes(), f

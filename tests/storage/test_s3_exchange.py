"""The re-key's exchange through an object store (moto's S3 server), and ``kg clean`` of what a kill left.

Spark's read tasks upload their spill files under a hidden ``.kg-exchange-<id>`` prefix of the output
(``storage.exchange``, ``execution.engines.spill``); write tasks read their stretches back with ranged GETs.
Here a real Flink fixture is re-keyed by Spark through the store and by the local engine, and every keyed
file must be the same bytes; the exchange must be gone afterwards, and it must have gone through the store
(the server's request log shows the uploads and the ranged reads, answered 206).
"""

from __future__ import annotations

import re
import shutil
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.execution.engines.local import LocalExecutor
from keygroup_cli.execution.engines.spark.jobs import SparkExecutor, exchange_mode
from keygroup_cli.execution.jobs.savepoint import plan_keyed_jobs
from keygroup_cli.execution.routes.savepoint import open_input
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.storage.cleanup import clean
from keygroup_cli.storage.exchange import EXCHANGE_PREFIX, new_exchange, stale_exchanges
from keygroup_cli.storage.locations import location
from keygroup_cli.storage.transfer import WRITER_MARK
from keygroup_cli.storage.writer import Writer
from tests.conftest import FIXTURES

FLINK = FIXTURES / "flink" / "2.3"


def _ignore(_stage: str, _done: int, _total: int | None) -> None:
    return None


def _jobs(savepoint: Path, root: str, scratch: Path, new_p: int, new_max: int) -> list[Any]:
    """The keyed jobs of a re-key writing under ``root``, three read tasks a file, fixed file names."""
    view = open_input(
        savepoint, scratch, RescaleRequest(new_p, new_max_parallelism=new_max), _ignore
    ).savepoint
    targets = {op.operator_id: (new_p, new_max) for op in view.metadata.operators}
    jobs = plan_keyed_jobs(view, targets, root, pieces=3)
    return [
        replace(j, writes=tuple(replace(w, name=f"{j.operator_id}-{w.subtask}") for w in j.writes))
        for j in jobs
    ]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "new_p", "new_max"),
    [("heap-files-p3-maxp128-long", 4, 1024), ("rocksdb-canonical-snappy-p2-maxp256-string", 5, 37)],
)
def test_the_object_store_exchange_writes_the_local_engines_bytes(
    s3_server, spark_reaching_s3, tmp_path, name, new_p, new_max
):
    spark = spark_reaching_s3
    bucket = s3_server.bucket("kg-exchange")
    out = f"{bucket}/{name}"
    local_out = tmp_path / "local"
    local_out.mkdir()
    jobs = _jobs(FLINK / name, str(local_out), tmp_path / "scratch-local", new_p, new_max)
    LocalExecutor(batch_rows=500, workers=2).run(jobs, tmp_path / "scratch-local")
    expected = {p.name: p.read_bytes() for p in local_out.iterdir()}

    mark = len(s3_server.log.read_text().splitlines())
    executor = SparkExecutor(session=spark, batch_rows=500, exchange="store")
    jobs = _jobs(FLINK / name, out, tmp_path / "scratch-spark", new_p, new_max)
    assert sum(len(j.reads) for j in jobs) > len(jobs)  # several read tasks a job: their order counts
    assert executor.exchange_for(jobs) == "store"
    executor.run(jobs, tmp_path / "scratch-spark")

    # Only the keyed files are left under the output: the exchange (files and writer mark) is gone.
    keys = s3_server.keys(out)
    assert sorted(keys) == sorted(expected)
    got = s3_server.download(out, tmp_path / "spark")
    assert {p.name: p.read_bytes() for p in got.iterdir()} == expected
    # The parts went up to the store and came back by ranged GETs (HTTP 206), from the hidden prefix.
    # (The server colours lines that are not 200: strip the terminal codes.)
    requests = [re.sub(r"\x1b\[[0-9;]*m", "", r) for r in s3_server.log.read_text().splitlines()[mark:]]
    prefix = re.escape(f"/kg-exchange/{name}/{EXCHANGE_PREFIX}")
    uploads = [r for r in requests if re.search(rf'"(PUT|POST) {prefix}\w+/\S+\.parts', r)]
    reads = [r for r in requests if re.search(rf'"GET {prefix}\w+/\S+\.parts', r)]
    assert uploads and reads
    assert all(r.rstrip().endswith(("206 -", "206")) for r in reads), reads[:3]


def test_the_exchange_follows_the_output_and_the_settings(spark):
    sc = spark.sparkContext
    # The test session's master is local: its scratch directory is shared, unless a directory is named.
    assert exchange_mode(sc, "auto", output="s3://b/out") == "shared"
    assert exchange_mode(sc, "auto", output="s3://b/out", directory="s3://b/x") == "store"
    assert exchange_mode(sc, "store", output="s3://b/out") == "store"
    assert exchange_mode(sc, "shuffle", output="s3://b/out", directory="s3://b/x") == "shuffle"
    with pytest.raises(InvalidArgumentError, match="needs an object-store output") as info:
        exchange_mode(sc, "store", output="/tmp/out")
    assert info.value.code == "EXCHANGE_NEEDS_STORE" and info.value.exit_code == 2


def _dead_pid() -> int:
    """A pid no process has (the highest ones are rarely in use; checked)."""
    pid = 4_194_000
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_kg_clean_removes_an_exchange_whose_writer_is_gone_and_keeps_a_live_ones(s3_server):
    bucket = s3_server.bucket("kg-exchange-clean")
    root = f"{bucket}/scratch"
    orphan = location(root) / f"{EXCHANGE_PREFIX}dead"
    orphan_mark = Writer(socket.gethostname(), _dead_pid(), "1").to_json().encode()
    (orphan / WRITER_MARK).write_bytes(orphan_mark)
    (orphan / "0000-00000-a0-x.parts").write_bytes(b"parts")
    # One of this very process (a run in progress): listed by nobody, removed by nobody.
    live = new_exchange(root)
    (live / "0000-00001-a0-y.parts").write_bytes(b"parts")
    s3_server.put(f"{root}/unrelated", b"not kg's")

    assert [s.where.name for s in stale_exchanges(root)] == [orphan.name]
    assert [s.removable for s in stale_exchanges(root)] == [True]
    assert clean(root, dry_run=True)[0].removed is False and orphan.is_dir()
    left = clean(root)
    assert [(Path(x.path).name, x.writer_gone, x.removed) for x in left] == [(orphan.name, True, True)]
    keys = s3_server.keys(root)
    assert not any(k.startswith(orphan.name) for k in keys)
    assert f"{live.name}/0000-00001-a0-y.parts" in keys and "unrelated" in keys


@pytest.mark.spark
def test_a_failed_rekey_leaves_no_exchange_behind(s3_server, spark_reaching_s3, tmp_path):
    spark = spark_reaching_s3
    # A keyed file with a stretch of zeros in its middle: a read task finds it corrupt, the Spark job
    # fails, and the exchange under the output (writer mark and the other tasks' spill files) is removed.
    from keygroup_cli.core.errors import KgError

    damaged = tmp_path / "damaged"
    shutil.copytree(FLINK / "heap-files-p3-maxp128-long", damaged)
    state_files = [p for p in damaged.iterdir() if p.name != "_metadata" and p.suffix != ".json"]
    biggest = max(state_files, key=lambda p: p.stat().st_size)
    data = bytearray(biggest.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 400] = bytes(400)
    biggest.write_bytes(bytes(data))
    out = f"{s3_server.bucket('kg-exchange-failed')}/out"
    jobs = _jobs(damaged, out, tmp_path / "scratch", 4, 1024)
    executor = SparkExecutor(session=spark, batch_rows=500, exchange="store")
    mark = len(s3_server.log.read_text().splitlines())
    with pytest.raises(KgError) as info:
        executor.run(jobs, tmp_path / "scratch")
    assert info.value.exit_code == 3, info.value  # the read task's verdict on its input
    assert [k for k in s3_server.keys(out) if EXCHANGE_PREFIX in k] == []
    # The exchange had been made (its writer mark went up) and was deleted.
    requests = [re.sub(r"\x1b\[[0-9;]*m", "", r) for r in s3_server.log.read_text().splitlines()[mark:]]
    exchange = re.escape(f"/kg-exchange-failed/out/{EXCHANGE_PREFIX}")
    assert [r for r in requests if re.search(rf'"PUT {exchange}\w+/\.kg-writer', r)]
    assert [r for r in requests if re.search(rf'"DELETE {exchange}\w+/\.kg-writer', r)]


@pytest.mark.spark
def test_a_kg_snapshot_rekeyed_through_an_exchange_directory_on_the_store(
    s3_server, spark_reaching_s3, tmp_path
):
    spark = spark_reaching_s3
    # The row route (a kg snapshot: Arrow IPC rows, not parts) through spark.kg.exchange.dir on the store,
    # its output local: the same files as the local engine's.
    from keygroup_cli.execution.routes.rescale import rescale
    from tests.execution.snapshots import generate

    source = generate(tmp_path / "in", ("counter", "string", 900, 3, 128), ("ids", "long", 400, 3, 128))
    local = rescale(source, tmp_path / "local", 4, new_max_parallelism=1024, engine="local")
    where = f"{s3_server.bucket('kg-exchange-dir')}/shared"
    executor = SparkExecutor(session=spark, exchange_dir=where)
    assert executor.exchange == "store"
    mark = len(s3_server.log.read_text().splitlines())
    rescale(source, tmp_path / "spark", 4, new_max_parallelism=1024, executor=executor)
    files = sorted(p.relative_to(local.output) for p in Path(local.output).rglob("*.parquet"))
    assert files == sorted(p.relative_to(tmp_path / "spark") for p in (tmp_path / "spark").rglob("*.parquet"))
    for f in files:
        assert (Path(local.output) / f).read_bytes() == (tmp_path / "spark" / f).read_bytes(), f
    requests = [re.sub(r"\x1b\[[0-9;]*m", "", r) for r in s3_server.log.read_text().splitlines()[mark:]]
    assert [
        r for r in requests if re.search(rf'"GET /kg-exchange-dir/shared/{EXCHANGE_PREFIX}\w+/\S+\.parts', r)
    ]
    assert s3_server.keys(where) == {}

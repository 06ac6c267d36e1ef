"""A standalone cluster whose executors share no directory rescales an S3 savepoint to S3 (moto's server).

The cluster (``spark_cluster``) gives each worker its own work and local directories. kg itself runs in a
mount namespace of its own whose scratch directory (``KG_SCRATCH_DIR``) is a private tmpfs: the executors,
started by the workers outside it, cannot see a byte of it, so a re-key whose parts went through kg's
scratch directory (the ``shared`` exchange) would fail. With a cluster master and an ``s3://`` output kg
chooses the object-store exchange by itself (``spark.kg.exchange=auto``): the read tasks upload their parts
under a hidden ``.kg-exchange-<id>`` prefix of the output, the write tasks read them back by ranged GETs.

Everything S3 goes through a logging proxy (``tests/cluster/s3_proxy.py``) in front of moto's server;
the executors get the store's endpoint and keys as ``spark.executorEnv.*`` settings, as on a real cluster.

- A re-key (``--max-parallelism 1024``) and a key-group copy (same maxParallelism, done by kg on the
  driver) of ``heap-files-p3-maxp128-long``: the output passes ``kg verify``, equals the local engine's
  output of the same input byte for byte (state files in handle order), ``_metadata`` was the last object
  written, the exchange went up and came back through the store by executors only, with ranged reads, and
  nothing of it is left, in the bucket or on any local disk.
- **An executor killed mid-job**: in a third re-key the proxy kills (SIGKILL) the executor JVM whose read
  task completes the upload of attempt 0 of the first read task's spill file, right after the store has
  it whole and before the task can report success: a deterministic point, not a race (see the proxy's
  docstring). Spark loses the executor, retries the task (attempt 1), and the output is verified and
  identical to the unkilled one; the killed attempt's file is never read (no GET or HEAD of it).
- Real Flink restores the three outputs (marker ``flink``), downloaded first, in one JVM.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.storage.exchange import EXCHANGE_PREFIX
from tests.cluster.conftest import KG, kg_env
from tests.cluster.s3_proxy import Kill, Request, S3Proxy
from tests.cluster.standalone import StandaloneCluster
from tests.cluster.test_cluster_rescale import cluster_args, event_log, run_local, savepoint_view
from tests.storage.conftest import S3Server, _start, _stop

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
SAVEPOINT = "heap-files-p3-maxp128-long"
SAVEPOINT_DIR = ROOT / "fixtures" / "flink" / "2.3" / SAVEPOINT
BUCKET = "kg-cluster"
REKEY = ("--from", "3", "--to", "4", "--max-parallelism", "1024")
COPY = ("--from", "3", "--to", "4")
AWS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
#: The spill file of attempt 0 of read task 0 of the first operator (``spark.tasks.spill_task`` names).
FIRST_ATTEMPT = r"/0000-00000-a0-\w+\.parts"


@dataclass
class Store:
    server: S3Server
    proxy: S3Proxy


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """moto's S3 server and the logging proxy in front of it; the input savepoint in the bucket."""
    proc, endpoint, log = _start(tmp_path_factory.mktemp("moto-cluster"))
    server = S3Server(endpoint, {**AWS, "AWS_ENDPOINT_URL": endpoint}, log)
    proxy = S3Proxy(endpoint)
    try:
        server.bucket(BUCKET)
        server.upload(SAVEPOINT_DIR, f"s3://{BUCKET}/in.sp")
        yield Store(server, proxy)
    finally:
        proxy.close()
        _stop(proc)


@dataclass
class Run:
    name: str
    out: str
    doc: dict[str, Any]
    #: The requests the run sent through the proxy.
    requests: list[Request]
    driver_pid: int
    events: Path
    scratch: Path
    kill: Kill | None = None


def _kg_on_the_cluster(
    cluster: StandaloneCluster, store: Store, root: Path, name: str, args: tuple[str, ...], kill: bool = False
) -> Run:
    """Run ``kg rescale s3://…/in.sp ARGS --out s3://…/NAME`` on the cluster, kg's scratch a private tmpfs."""
    out = f"s3://{BUCKET}/{name}"
    events = root / "events" / name
    scratch = root / "scratch" / name  # what kg sees there is its own tmpfs, not this directory
    scratch.mkdir(parents=True)
    env = {**kg_env(), **AWS, "AWS_ENDPOINT_URL": store.proxy.endpoint, "KG_SCRATCH_DIR": str(scratch)}
    conf = [
        f"spark.executorEnv.{k}={v}" for k, v in {**AWS, "AWS_ENDPOINT_URL": store.proxy.endpoint}.items()
    ]
    options = cluster_args(cluster, events)
    for setting in conf:
        options += ["--conf", setting]
    command = [str(KG), "rescale", f"s3://{BUCKET}/in.sp", *args, "--out", out, "--json", *options]
    private = 'mount -t tmpfs kg-scratch "$0" && exec "$@"'
    armed = (
        store.proxy.arm_kill(re.escape(f"/{BUCKET}/{name}/{EXCHANGE_PREFIX}") + r"\w+" + FIRST_ATTEMPT)
        if kill
        else None
    )
    first = len(store.proxy.requests)
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", private, str(scratch), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
    )
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, f"kg rescale {name} exited {proc.returncode}\n{stdout}\n{stderr[-4000:]}"
    store.proxy.kill = None
    return Run(name, out, json.loads(stdout), store.proxy.requests[first:], proc.pid, events, scratch, armed)


@pytest.fixture(scope="module")
def runs(
    spark_cluster: StandaloneCluster, store: Store, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("cluster-s3")
    return {
        "rekey": _kg_on_the_cluster(spark_cluster, store, root, "rekey", REKEY),
        "copy": _kg_on_the_cluster(spark_cluster, store, root, "copy", COPY),
        "killed": _kg_on_the_cluster(spark_cluster, store, root, "killed", REKEY, kill=True),
    }


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The local engine's outputs of the same input (from its local copy)."""
    root = tmp_path_factory.mktemp("cluster-s3-local")
    out = {}
    for name, args in (("rekey", REKEY), ("copy", COPY)):
        out[name] = root / name
        run_local("rescale", SAVEPOINT_DIR, *args, "--out", out[name], "-q")
    return out


@pytest.fixture(scope="module")
def downloaded(
    runs: dict[str, Run], store: Store, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cluster-s3-downloaded")
    return {name: store.server.download(run.out, root / name) for name, run in runs.items()}


def _kg_verify(store: Store, uri: str) -> subprocess.CompletedProcess[str]:
    env = {**kg_env(), **store.server.env}
    return subprocess.run(
        [str(KG), "verify", uri], capture_output=True, text=True, env=env, timeout=600, check=False
    )


def _under(run: Run, request: Request) -> bool:
    return request.target.split("?")[0].startswith(f"/{BUCKET}/{run.name}/")


def _completed_writes(run: Run) -> list[str]:
    """The objects the run completed under its output, in order (a PUT, or a multipart upload's end).

    Directory markers (empty keys ending in ``/``, which pyarrow puts where a deletion emptied a prefix)
    hold nothing and are left out.
    """
    done = []
    for r in run.requests:
        path = r.target.split("?")[0]
        if not _under(run, r) or path.endswith("/"):
            continue
        if (r.method == "PUT" and "partNumber=" not in r.target) or (
            r.method == "POST" and "uploadId=" in r.target
        ):
            done.append(path.removeprefix(f"/{BUCKET}/{run.name}/"))
    return done


@pytest.mark.parametrize("name", ["rekey", "copy"])
def test_an_s3_savepoint_rescaled_to_s3_on_a_cluster_sharing_no_directory(
    runs: dict[str, Run], local: dict[str, Path], downloaded: dict[str, Path], store: Store, name: str
) -> None:
    run = runs[name]
    assert run.doc["engine"] == ("spark" if name == "rekey" else "local"), run.doc.get("engine_reason")
    # Byte for byte the local engine's savepoint (state files compared in handle order), and kg verify
    # accepts it where it is.
    assert savepoint_view(downloaded[name]) == savepoint_view(local[name])
    verified = _kg_verify(store, run.out)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # _metadata last: no object of the output was completed after it.
    written = _completed_writes(run)
    assert written[-1] == "_metadata" and written.count("_metadata") == 1, written[-5:]
    # Nothing of the exchange or of kg's writer mark is left in the bucket.
    keys = store.server.keys(run.out)
    assert not [k for k in keys if k.startswith(EXCHANGE_PREFIX) or k.endswith(".kg-writer")]
    # kg's scratch directory, as every other process sees it, never held anything.
    assert list(run.scratch.iterdir()) == []


def test_the_rekey_exchanged_its_parts_through_the_store_by_ranged_reads(
    runs: dict[str, Run], spark_cluster: StandaloneCluster
) -> None:
    run = runs["rekey"]
    exchange = re.compile(re.escape(f"/{BUCKET}/rekey/{EXCHANGE_PREFIX}") + r"\w+/\S+\.parts")
    uploads = [r for r in run.requests if r.method in ("PUT", "POST") and exchange.match(r.target)]
    reads = [r for r in run.requests if r.method == "GET" and exchange.match(r.target)]
    assert uploads and reads
    # Only executors touched the spill files, never kg's own process, and every read was a range.
    assert {r.pid for r in uploads + reads}.isdisjoint({run.driver_pid, None})
    assert all(r.range is not None and r.range.startswith("bytes=") for r in reads), reads[:3]
    # The spill files were staged on each worker's own local disk and are gone from there too.
    for worker in spark_cluster.workers:
        assert worker.work_dir is not None
        assert list(worker.work_dir.parent.joinpath("local").rglob("kg-spill-*")) == []


def test_an_executor_killed_mid_job_is_retried_and_the_output_is_the_same(
    runs: dict[str, Run], downloaded: dict[str, Path], store: Store
) -> None:
    run = runs["killed"]
    kill = run.kill
    assert kill is not None and kill.done.is_set(), "the proxy never struck"
    assert kill.executor_pid is not None and kill.worker_pid is not None, kill
    killed = kill.target.split("?")[0]
    assert re.search(FIRST_ATTEMPT, killed)
    # Spark saw the executor die and ran the task again (attempt 1), which completed a file of its own.
    _app, events = event_log(run.events)
    lost = [
        e
        for e in events
        if e["Event"] == "SparkListenerTaskEnd" and e["Task End Reason"]["Reason"] == "ExecutorLostFailure"
    ]
    assert lost, "no task of the killed executor was reported lost"
    assert any(e["Event"] == "SparkListenerExecutorRemoved" for e in events)
    retried = [w for w in _completed_writes(run) if re.search(r"/0000-00000-a[1-9]\d*-\w+\.parts$", w)]
    assert retried, _completed_writes(run)
    # The killed attempt's file was whole in the store, yet never read: no GET of it, and no executor
    # opened it (a reader's open is a HEAD); only kg's own process looked at it, to delete it.
    touched = [r for r in run.requests if r.target.split("?")[0] == killed and r.method != "PUT"]
    assert not [r for r in touched if r.method == "GET"], touched
    assert {r.pid for r in touched if r.method != "POST"} == {run.driver_pid}, touched
    assert "DELETE" in {r.method for r in touched}, touched
    # The output is complete, verified, and the unkilled run's, byte for byte.
    assert savepoint_view(downloaded["killed"]) == savepoint_view(downloaded["rekey"])
    verified = _kg_verify(store, run.out)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    keys = store.server.keys(run.out)
    assert not [k for k in keys if k.startswith(EXCHANGE_PREFIX)]


@pytest.mark.flink
def test_flink_restores_what_the_cluster_wrote_to_s3(
    downloaded: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.restore.harness import (
        assert_restored_like_expected,
        build_classpath,
        case_json,
        case_key_type,
        case_request,
        run_restores,
    )

    cases = [(downloaded[name], 128 if name == "copy" else 1024) for name in ("rekey", "copy", "killed")]
    requests = [case_request(SAVEPOINT, out, 4, max_p) for out, max_p in cases]
    dumps = run_restores(requests, tmp_path_factory.mktemp("cluster-s3-restore"), build_classpath())
    expected = case_json(SAVEPOINT, "expected-state.json")
    for (_out, max_p), dump in zip(cases, dumps, strict=True):
        assert_restored_like_expected(dump, expected, 4, max_p, case_key_type(SAVEPOINT))

"""``kg rescale --master spark://...`` on a real standalone cluster writes what ``--engine local`` writes.

One Spark standalone master with two 1-core workers (``spark_cluster``, tests/cluster/conftest.py). Each
case runs once on the cluster, as the real ``kg`` script in a subprocess whose executors run the venv's
Python (``PYSPARK_PYTHON``) with the decoy ``python3`` first on PATH, and once with ``--engine local``
through kg's CLI in this process (module fixture ``runs``), then:

- a kg snapshot, parallelism 3 -> 4 and maxParallelism 128 -> 1024: every state file byte-identical, and
  the manifests equal but for ``created_at`` and ``origin.engine``;
- the Flink 2.3 savepoint ``heap-files-p3-maxp128-long``, ``--from 3 --to 4`` and ``--from 3 --to 4
  --max-parallelism 1024``: the same ``_metadata`` structure, and every state file it points at has the
  same bytes in handle order (file names are random UUIDs);
- relative paths: two of the cluster runs name SNAPSHOT and --out relative to kg's directory, and the
  executors' work directories hold nothing but their logs afterwards;
- the tasks really ran on the executors: each Spark run's event log shows every task succeeding on an
  executor, executors of both workers running tasks, and the master lists the application FINISHED;
- Flink 2.3 restores both cluster-written savepoints with every key, value, timer and operator-state
  element (marker ``flink``: tests/restore's harness, one JVM).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import run
from keygroup_cli.flink.io.stream_handles import FileHandle, RelativeFileHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.manifest import manifest_to_dict
from tests.cluster.conftest import KgRunner, kg_env
from tests.cluster.standalone import StandaloneCluster
from tests.execution.snapshots import generate

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
SAVEPOINT = "heap-files-p3-maxp128-long"
SAVEPOINT_DIR = ROOT / "fixtures" / "flink" / "2.3" / SAVEPOINT


@dataclass(frozen=True)
class Case:
    """One rescale: kg's arguments besides SNAPSHOT and --out, and whether its input is a savepoint."""

    name: str
    savepoint: bool
    args: tuple[str, ...]
    #: Whether kg runs Spark tasks for it (a savepoint at the same maxParallelism is copied as bytes).
    spark: bool = True
    #: Whether the cluster run names SNAPSHOT and --out relative to kg's working directory.
    relative: bool = False


CASES = [
    Case("snapshot-p3-to-p4", False, ("--to", "4"), relative=True),
    Case("snapshot-maxp128-to-1024", False, ("--to", "4", "--max-parallelism", "1024")),
    Case("savepoint-p3-to-p4", True, ("--from", "3", "--to", "4"), spark=False),
    Case(
        "savepoint-maxp128-to-1024",
        True,
        ("--from", "3", "--to", "4", "--max-parallelism", "1024"),
        relative=True,
    ),
]


def cluster_args(cluster: StandaloneCluster, events: Path) -> list[str]:
    """Return kg's options for a run on ``cluster`` whose Spark event log goes to ``events``.

    ``spark.cores.max`` with a registered-resources ratio of 1 makes the scheduler wait for both
    executors (up to 3 min, not Spark's 30 s: a busy CI machine starts JVMs slowly), so every multi-task
    stage is offered to both workers. The executors' JVM gets the same
    start-up options kg gives the driver (C1 only, serial GC): faster on two cores, no effect on results.
    """
    events.mkdir(parents=True, exist_ok=True)
    conf = {
        "spark.cores.max": "2",
        "spark.scheduler.minRegisteredResourcesRatio": "1",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "180s",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    args = ["--engine", "spark", "--master", cluster.master_url]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return args


@dataclass(frozen=True)
class Run:
    case: Case
    cluster: Path
    local: Path
    cluster_json: dict[str, Any]
    events: Path


def _json(proc: Any, what: str) -> dict[str, Any]:
    assert proc.returncode == 0, (
        f"{what} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    )
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def run_local(*args: str | Path) -> dict[str, Any]:
    """Run ``kg ... --json --engine local`` in this process (no JVM to keep apart); return its JSON."""
    with CliRunner().isolation() as (out, err, _):
        code = run([*map(str, args), "--json", "--engine", "local"])
    assert code == 0, f"kg {' '.join(map(str, args))} --engine local exited {code}: {err.getvalue().decode()}"
    doc: dict[str, Any] = json.loads(out.getvalue())
    return doc


@pytest.fixture(scope="module")
def runs(
    spark_cluster: StandaloneCluster, run_kg: KgRunner, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Run]:
    """Run every case on the cluster (``kg`` subprocess) and with the local engine, once per module.

    Cases marked ``relative`` name their input and output relative to the kg process's directory on the
    cluster: executors work in their own directories, so kg must hand the tasks absolute paths.
    """
    root = tmp_path_factory.mktemp("cluster-rescale")
    generate(
        root / "in.kg", ("counter", "string", 900, 3, 128), ("ids", "long", 400, 3, 128), row_group_rows=200
    )
    shutil.copytree(SAVEPOINT_DIR, root / "in.sp")
    out = {}
    for case in CASES:
        source = Path("in.sp" if case.savepoint else "in.kg")
        events = root / "events" / case.name
        remote = Path(f"{case.name}.cluster")
        cluster_run = run_kg(
            "rescale",
            source if case.relative else root / source,
            *case.args,
            "--out",
            remote if case.relative else root / remote,
            "--json",
            *cluster_args(spark_cluster, events),
            cwd=root,
        )
        doc = _json(cluster_run, f"kg rescale {case.name} on the cluster")
        local = root / f"{case.name}.local"
        run_local("rescale", root / source, *case.args, "--out", local, "-q")
        out[case.name] = Run(case, root / remote, local, doc, events)
    return out


# -- kg snapshots ----------------------------------------------------------------------------------------


def canonical_manifest(path: Path) -> dict[str, Any]:
    """Return a snapshot's manifest without what differs between engines (time of creation, engine)."""
    doc = manifest_to_dict(open_snapshot(path).manifest)
    doc.pop("created_at")
    doc["origin"].pop("engine")
    return doc


def state_files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*.parquet"))}


@pytest.mark.parametrize("case", [c for c in CASES if not c.savepoint], ids=lambda c: c.name)
def test_snapshot_rescaled_on_the_cluster_is_the_local_output(runs: dict[str, Run], case: Case) -> None:
    run = runs[case.name]
    assert run.cluster_json["engine"] == "spark"
    assert canonical_manifest(run.cluster) == canonical_manifest(run.local)
    cluster, local = state_files(run.cluster), state_files(run.local)
    assert sorted(cluster) == sorted(local) and cluster
    for name in local:
        assert cluster[name] == local[name], f"{case.name}: {name} differs"


# -- Flink savepoints ------------------------------------------------------------------------------------

#: Handle fields that name random or run-specific things (UUID file names, handle ids), not state.
RANDOM_FIELDS = {"handle_id", "handle_name", "logical_file_id", "task_owned_dir", "shared_dir"}


def savepoint_view(root: Path) -> Any:
    """Return ``_metadata`` as nested data with every file handle replaced by its file's digest and size.

    Two savepoints with equal views have the same operators, subtasks, key-group ranges, offsets and state
    entries, and the same bytes in every state file, in handle order, whatever the files are called.
    """
    return _view(root, read_flink_metadata(root).metadata)


def _view(root: Path, value: Any) -> Any:
    if isinstance(value, RelativeFileHandle):
        return {"sha256": _digest(root / value.relative_path), "size": value.size}
    if isinstance(value, FileHandle):
        return {"sha256": _digest(Path(urlparse(value.path).path)), "size": value.size}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (f.name for f in dataclasses.fields(value) if f.name not in RANDOM_FIELDS)
        return {"type": type(value).__name__, **{f: _view(root, getattr(value, f)) for f in fields}}
    if isinstance(value, tuple | list):
        return [_view(root, v) for v in value]
    if isinstance(value, bytes):
        return hashlib.sha256(value).hexdigest()
    return value


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("case", [c for c in CASES if c.savepoint], ids=lambda c: c.name)
def test_savepoint_rescaled_on_the_cluster_is_the_local_output(runs: dict[str, Run], case: Case) -> None:
    run = runs[case.name]
    view = savepoint_view(run.cluster)
    assert view == savepoint_view(run.local)
    # Every state file of the new savepoint is one the view compared (none unreferenced, none missing).
    referenced = {p.name for p in run.cluster.iterdir() if p.name != "_metadata"}
    assert len(referenced) == json.dumps(view).count('"sha256"') > 0
    written = read_flink_metadata(run.cluster).metadata
    new_max = 1024 if "--max-parallelism" in case.args else 128
    assert {op.max_parallelism for op in written.operators} == {new_max}
    if not case.spark:
        # Same maxParallelism: kg copies key-group blocks as bytes and starts no Spark application.
        assert run.cluster_json["engine"] == "local", run.cluster_json["engine_reason"]


# -- the work ran on the executors -----------------------------------------------------------------------


def event_log(events: Path) -> tuple[str, list[dict[str, Any]]]:
    """Return the application id and the events of the one Spark application logged in ``events``."""
    logs = sorted(events.glob("app-*"))
    assert len(logs) == 1, f"expected one Spark application's event log in {events}, found {logs}"
    app_id = logs[0].name.removesuffix(".inprogress")
    return app_id, [json.loads(line) for line in logs[0].read_text().splitlines() if line.strip()]


def worker_of_executor(cluster: StandaloneCluster, executor: dict[str, Any]) -> str:
    """Return the name of the worker whose web UI serves an executor's logs (its ``Log Urls``)."""
    urls = executor["Executor Info"]["Log Urls"].values()
    ports = {urlparse(url).port for url in urls}
    names = [w.name for w in cluster.workers if w.webui_port in ports]
    assert len(names) == 1, f"executor {executor['Executor ID']}'s logs {list(urls)} match no single worker"
    return names[0]


@pytest.mark.parametrize("case", [c for c in CASES if c.spark], ids=lambda c: c.name)
def test_tasks_ran_on_executors_of_both_workers(
    runs: dict[str, Run], spark_cluster: StandaloneCluster, case: Case
) -> None:
    run = runs[case.name]
    assert run.cluster_json["engine"] == "spark"
    app_id, events = event_log(run.events)
    workers = {
        e["Executor ID"]: worker_of_executor(spark_cluster, e)
        for e in events
        if e["Event"] == "SparkListenerExecutorAdded"
    }
    tasks = [e for e in events if e["Event"] == "SparkListenerTaskEnd"]
    # kg's worker probe (one task), then its own stages: at least one more task per new subtask.
    assert len(tasks) > 4, f"{app_id}: {len(tasks)} tasks"
    for task in tasks:
        assert task["Task End Reason"]["Reason"] == "Success", task["Task End Reason"]
        assert task["Task Info"]["Executor ID"] in workers, task["Task Info"]
    ran_on = {workers[t["Task Info"]["Executor ID"]] for t in tasks}
    assert ran_on == {w.name for w in spark_cluster.workers}, f"{app_id}: tasks ran only on {ran_on}"
    finished = {a["id"]: a for a in spark_cluster.status()["completedapps"]}
    assert finished[app_id]["state"] == "FINISHED" and finished[app_id]["name"] == "kg rescale"
    # Each worker launched its executor of this application in its own work directory.
    for worker in spark_cluster.workers:
        assert worker.work_dir is not None and (worker.work_dir / app_id).is_dir()


def test_spark_submit_runs_kg_on_the_master_and_conf_it_was_given(
    runs: dict[str, Run], spark_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    """Under spark-submit, without kg's own --master, the rescale runs on spark-submit's cluster.

    spark-submit's ``--master``, ``--name`` and ``--conf`` reach kg's session (kg sets a master only when
    its ``--master`` says so); the output equals the local engine's, tasks ran on both workers, and kg
    stops the session it used, so the event log is complete (no ``.inprogress``).
    """
    from tests.cluster.standalone import spark_home

    case = next(c for c in CASES if c.name == "savepoint-maxp128-to-1024")
    entry = tmp_path / "kg_main.py"
    entry.write_text("import sys\nfrom keygroup_cli.cli import main\nsys.exit(main())\n")
    events = tmp_path / "events"
    options = cluster_args(spark_cluster, events)
    assert options[:4] == ["--engine", "spark", "--master", spark_cluster.master_url]
    out = tmp_path / "submitted.sp"
    env = kg_env()
    proc = subprocess.run(
        [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            spark_cluster.master_url,
            "--name",
            "kg-under-spark-submit",
            *options[4:],
            str(entry),
            "rescale",
            str(runs[case.name].local.parent / "in.sp"),
            *case.args,
            "--out",
            str(out),
            "--json",
            "--engine",
            "spark",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    doc = _json(proc, "spark-submit kg_main.py rescale")
    assert doc["engine"] == "spark"
    assert savepoint_view(out) == savepoint_view(runs[case.name].local)
    logs = sorted(events.glob("app-*"))
    assert len(logs) == 1 and not logs[0].name.endswith(".inprogress"), logs
    app_id, log = event_log(events)
    workers = {
        e["Executor ID"]: worker_of_executor(spark_cluster, e)
        for e in log
        if e["Event"] == "SparkListenerExecutorAdded"
    }
    tasks = [e for e in log if e["Event"] == "SparkListenerTaskEnd"]
    assert {workers[t["Task Info"]["Executor ID"]] for t in tasks} == {w.name for w in spark_cluster.workers}
    finished = {a["id"]: a for a in spark_cluster.status()["completedapps"]}
    assert finished[app_id]["name"] == "kg-under-spark-submit"


def test_executors_wrote_only_where_kg_told_them(
    runs: dict[str, Run], spark_cluster: StandaloneCluster
) -> None:
    # Executors run in their own working directories (the workers' work/app-*/N); the relative cases gave
    # SNAPSHOT and --out relative to kg's directory, so relative paths handed on as given would have been
    # read and written there.
    assert {c.name for c in CASES if c.relative and c.spark} <= set(runs)
    stray = sorted(
        str(p) for w in spark_cluster.workers if w.work_dir for p in w.work_dir.rglob("*") if p.is_file()
    )
    assert [s for s in stray if not s.endswith(("/stderr", "/stdout"))] == []


# -- Flink restores what the cluster wrote -----------------------------------------------------------------


@pytest.mark.flink
def test_flink_restores_the_savepoints_written_on_the_cluster(
    runs: dict[str, Run], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.restore.harness import (
        assert_restored_like_expected,
        build_classpath,
        case_json,
        case_key_type,
        case_request,
        run_restores,
    )

    cases = [
        (runs[c.name].cluster, 1024 if "--max-parallelism" in c.args else 128) for c in CASES if c.savepoint
    ]
    requests = [case_request(SAVEPOINT, out, 4, max_p) for out, max_p in cases]
    dumps = run_restores(requests, tmp_path_factory.mktemp("cluster-restore"), build_classpath())
    expected = case_json(SAVEPOINT, "expected-state.json")
    for (_out, max_p), dump in zip(cases, dumps, strict=True):
        assert_restored_like_expected(dump, expected, 4, max_p, case_key_type(SAVEPOINT))

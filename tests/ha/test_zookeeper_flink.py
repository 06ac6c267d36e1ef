"""kg against a real ZooKeeper and a real Flink 2.3 JobManager with ZooKeeper HA, crashed with Runtime.halt.

Two runs of ``kg.fixtures.HaJob`` (the fixture job, 3 s ZooKeeper session timeout), each on its own
ZooKeeper server:

- ``checkpoints``: a fresh start with a checkpoint every 2 s. While it runs, kg finds the store's highest
  checkpoint and ``kg rescale`` refuses (exit 7); after the halt and the session expiry kg inspects and
  checks the checkpoint the job would resume from. Its keyed state is in the heap checkpoint layout;
  kg rescales it 2 → 3 into a canonical savepoint, and Flink restores that exactly as it restores the
  checkpoint itself at p 3 (every key, value, timer and operator-state element compared).
- ``savepoint``: a deploy from a canonical savepoint that crashed before its first checkpoint: the HA
  store's entry is that savepoint. kg inspects it (kind ``savepoint``), checks it, rescales it 3 → 4
  into a savepoint, and Flink restores that with every key on its subtask.

In both, kg changed nothing in ZooKeeper: the tree and every znode's mzxid are identical before and after.
"Before" is the tree once ZooKeeper has finished with the crash: the JobManager's session expired (its
ephemeral nodes gone) and the leader latch's emptied container swept (``harness.CONTAINER_SWEEP_MS``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ha.harness import (
    HaJobProcess,
    ZooKeeperServer,
    run_kg,
    tree,
    wait_for_session_expiry,
    wait_until_swept,
)
from tests.restore.harness import (
    CASES,
    RestoreRequest,
    assert_restored_like_expected,
    case_json,
    comparable_dump,
    restore_error,
    run_restores,
)

pytestmark = pytest.mark.flink

SESSION_TIMEOUT_MS = 3000
NAMESPACE = "/flink/kg-ha"
SAVEPOINT_CASE = "heap-files-p3-maxp128-string"


def _run(
    tmp: Path, classpath: str, savepoint: Path | None, live_steps: Any, dead_steps: Any
) -> dict[str, Any]:
    """Start ZooKeeper and HaJob, run ``live_steps(uri, zk)``, crash the job, run ``dead_steps(uri)``."""
    server = ZooKeeperServer(tmp / "zookeeper")
    client = server.client()
    job = None
    try:
        job = HaJobProcess(classpath, server.hosts, tmp / "jobmanager", SESSION_TIMEOUT_MS, savepoint)
        uri = f"zk://{server.hosts}{NAMESPACE}"
        result: dict[str, Any] = {"job_id": job.job_id, "live": live_steps(uri, client)}
        halted = time.monotonic()
        job.halt()
        wait_for_session_expiry(client, f"{NAMESPACE}/leader/latch")
        result["expiry_seconds"] = time.monotonic() - halted
        # ZooKeeper's own last change: the latch's container, empty since the expiry, is deleted by the
        # server's sweep (a timer of its own). Only then is the tree at rest, so only kg could change it.
        wait_until_swept(client, f"{NAMESPACE}/leader/latch")
        result["before"] = tree(client, "/flink")
        result["dead"] = dead_steps(uri)
        result["after"] = tree(client, "/flink")
        return result
    finally:
        if job is not None:
            job.halt()
        client.stop()
        client.close()
        server.stop()


def _deployment_yaml(tmp: Path, uri: str) -> Path:
    """Write a FlinkDeployment whose flinkConfiguration names HaJob's ZooKeeper HA store, as HaJob sets it.

    No initialSavepointPath, no FlinkStateSnapshot, no status: the HA store is what kg resolves. The
    cluster id is HaJob's own (``/kg-ha``, with Flink's leading slash), not the deployment's name.
    """
    quorum = uri.removeprefix("zk://").split("/", 1)[0]
    resource = {
        "apiVersion": "flink.apache.org/v1beta1",
        "kind": "FlinkDeployment",
        "metadata": {"name": "ha-job", "namespace": "streaming"},
        "spec": {
            "image": "flink:2.0",
            "flinkVersion": "v2_0",
            "serviceAccount": "flink",
            "flinkConfiguration": {
                "high-availability.type": "zookeeper",
                "high-availability.zookeeper.quorum": quorum,
                "high-availability.zookeeper.path.root": "/flink",
                "high-availability.cluster-id": "/kg-ha",
                "high-availability.storageDir": (tmp / "jobmanager" / "ha").as_uri(),
                "execution.checkpointing.dir": (tmp / "jobmanager" / "checkpoints").as_uri(),
            },
            "job": {
                "jarURI": "local:///opt/flink/usrlib/ha-job.jar",
                "parallelism": 2,
                "upgradeMode": "last-state",
            },
        },
    }
    path = tmp / "deployment.yaml"
    path.write_text(yaml.safe_dump(resource))
    return path


@pytest.fixture(scope="module")
def checkpoints(ha_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("ha-checkpoints")
    deployment = tmp / "deployment.yaml"

    def live(uri: str, zk: Any) -> dict[str, Any]:
        path = f"{NAMESPACE}/jobs/0000000000006b670000000000004841/checkpoints"
        ids_before = sorted(int(c) for c in zk.get_children(path))
        inspect = run_kg("inspect", uri, "--json")
        ids_after = sorted(int(c) for c in zk.get_children(path))
        rescale = run_kg("rescale", uri, "--to", "3", "--out", tmp / "refused", "--engine", "local")
        # The same store named by a FlinkDeployment's flinkConfiguration (no initialSavepointPath, no
        # FlinkStateSnapshot): kg resolves it there too, and refuses to rescale while the leader lives.
        deployment = _deployment_yaml(tmp, uri)
        return {
            "ids_before": ids_before,
            "ids_after": ids_after,
            "inspect": inspect,
            "rescale": rescale,
            "deployment_inspect": run_kg("inspect", deployment, "--json"),
            "deployment_rescale": run_kg(
                "rescale", deployment, "-m", "256", "--out", tmp / "refused-deployment", "--engine", "local"
            ),
        }

    def dead(uri: str) -> dict[str, Any]:
        inspect = run_kg("inspect", uri, "--json")
        rescale = run_kg("rescale", uri, "--to", "3", "--out", tmp / "rescaled", "--engine", "local")
        # Flink's own restore of the checkpoint at p 3 is the reference for kg's rescale of it.
        own = Path(inspect.json()["ha"]["pointer"] + "/_metadata")
        requests = [
            RestoreRequest(tmp / "rescaled", 3, 128, "string", "hashmap"),
            RestoreRequest(own, 3, 128, "string", "hashmap"),
        ]
        kg_dump, own_dump = run_restores(requests, tmp / "restore", ha_classpath)
        return {
            "inspect": inspect,
            "check": run_kg("check", uri, "--job", "0000000000006b670000000000004841", "-p", "3", "--json"),
            "rescale": rescale,
            "kg_dump": kg_dump,
            "own_dump": own_dump,
            "deployment_inspect": run_kg("inspect", deployment, "--json"),
            "deployment_check": run_kg("check", deployment, "--json"),
            "deployment_dry_run": run_kg(
                "rescale", deployment, "-m", "256", "--to", "3", "--out", tmp / "m256", "--dry-run", "--json"
            ),
        }

    result = _run(tmp, ha_classpath, None, live, dead)
    result["dry_run_out"] = tmp / "m256"
    return result


@pytest.fixture(scope="module")
def savepoint(ha_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("ha-savepoint")
    source = tmp / SAVEPOINT_CASE
    shutil.copytree(CASES / SAVEPOINT_CASE, source)
    dest = tmp / "rescaled-p4"

    def live(uri: str, zk: Any) -> dict[str, Any]:
        return {"rescale": run_kg("rescale", uri, "--to", "4", "--out", tmp / "refused", "--engine", "local")}

    def dead(uri: str) -> dict[str, Any]:
        inspect = run_kg("inspect", uri, "--json")
        check = run_kg("check", uri, "-p", "4", "--json")
        rescale = run_kg("rescale", uri, "--to", "4", "--out", dest, "--engine", "local", "--json")
        dumps = run_restores(
            [RestoreRequest(dest, 4, 128, "string", "hashmap")], tmp / "restore", ha_classpath
        )
        return {"inspect": inspect, "check": check, "rescale": rescale, "dump": dumps[0], "dest": dest}

    result = _run(tmp, ha_classpath, source, live, dead)
    result["source"] = source
    return result


def test_live_job_kg_finds_the_highest_checkpoint(checkpoints):
    live = checkpoints["live"]
    assert live["inspect"].exit_code == 0, live["inspect"].stderr
    ha = live["inspect"].json()["ha"]
    # Flink checkpoints every 2 s: kg's id is the highest one listed just before or just after it ran.
    assert ha["checkpoint_id"] >= live["ids_before"][-1]
    assert ha["checkpoint_id"] in live["ids_before"] + live["ids_after"]
    assert ha["checkpoint_ids"][-1] == ha["checkpoint_id"]
    assert ha["kind"] == "checkpoint" and ha["type"] == "Checkpoint" and ha["parsed"] == "javaobj"
    assert ha["layout"] == "2.x"
    assert ha["pointer"].endswith(f"/{checkpoints['job_id']}/chk-{ha['checkpoint_id']}")
    assert ha["live_leader"] is True
    assert ha["leader"]["address"].startswith("pekko://flink/user/rpc/jobmanager")
    assert len(ha["leader"]["session_id"]) == 36
    assert ha["leader"]["entry"] == f"{NAMESPACE}/leader/job-{checkpoints['job_id']}/connection_info"
    reasons = " ".join(ha["live_reasons"])
    assert "leader/latch" in reasons and "connection_info" in reasons and "locked" in reasons
    assert "kg: warning: job" in live["inspect"].stderr and "live leader" in live["inspect"].stderr


def test_live_job_rescale_refuses_naming_the_leader(checkpoints):
    refused = checkpoints["live"]["rescale"]
    assert refused.exit_code == 7, refused.stderr
    assert "pekko://flink/user/rpc/jobmanager" in refused.stderr
    assert "leader session" in refused.stderr
    assert "stop the job with a savepoint" in refused.stderr and "session timeout" in refused.stderr
    assert refused.stderr.count("kg: error:") == 1


def test_session_expiry_is_bounded_by_the_session_timeout(checkpoints, savepoint):
    for run in (checkpoints, savepoint):
        print(f"ephemeral nodes gone {run['expiry_seconds']:.2f} s after Runtime.halt")
        assert run["expiry_seconds"] < SESSION_TIMEOUT_MS / 1000 + 5


def test_after_the_crash_kg_inspects_and_checks_the_resume_checkpoint(checkpoints):
    dead = checkpoints["dead"]
    assert dead["inspect"].exit_code == 0, dead["inspect"].stderr
    doc = dead["inspect"].json()
    ha = doc["ha"]
    assert ha["live_leader"] is False and ha["live_reasons"] == [] and ha["leader"] is None
    assert doc["checkpoint_id"] == ha["checkpoint_id"] == max(ha["checkpoint_ids"])
    assert doc["input"].startswith("zk://")  # as typed; what it resolved to is ha["pointer"]
    assert dead["inspect"].stderr == ""
    keyed = next(op for op in doc["operators"] if op["uid"] == "keyed-state")
    assert keyed["parallelism"] == 2 and keyed["max_parallelism"] == 128
    check = dead["check"]
    assert check.exit_code == 0, check.stdout
    assert check.json()["input"] == doc["input"]


def test_after_the_crash_the_heap_checkpoint_rescales_and_restores_like_flinks_own_rescale(checkpoints):
    # The resume checkpoint is in the HashMap checkpoint layout; kg rescales it 2 -> 3 into a canonical
    # savepoint, and Flink restores that exactly as it restores the checkpoint itself at p 3, key by key.
    dead = checkpoints["dead"]
    assert dead["rescale"].exit_code == 0, dead["rescale"].stderr
    assert restore_error(dead["own_dump"]) is None, restore_error(dead["own_dump"])
    assert restore_error(dead["kg_dump"]) is None, restore_error(dead["kg_dump"])
    keys = dead["own_dump"]["keyedOperators"]["keyed-state"]["keys"]
    assert len(keys) > 0
    assert comparable_dump(dead["kg_dump"]) == comparable_dump(dead["own_dump"])


def test_a_deployment_naming_the_zookeeper_store_resolves_it_and_rescale_refuses_while_live(checkpoints):
    live = checkpoints["live"]
    inspect = live["deployment_inspect"]
    assert inspect.exit_code == 0, inspect.stderr
    doc = inspect.json()
    start, ha = doc["deployment"], doc["ha"]
    assert (start["source"], start["deployment"], start["namespace"]) == (
        "high-availability",
        "ha-job",
        "streaming",
    )
    # The URI kg built from the configuration: quorum, path.root and HaJob's cluster id "/kg-ha".
    assert start["field"].endswith(f"({live['inspect'].json()['input']})")
    assert start["considered"] == [
        "spec.job.initialSavepointPath: not set",
        "FlinkStateSnapshot of ha-job: none in the file",
    ]
    assert start["resolved"] == ha["pointer"] and ha["live_leader"] is True
    assert ha["pointer"].endswith(f"/{checkpoints['job_id']}/chk-{ha['checkpoint_id']}")
    assert ha["checkpoint_id"] >= live["ids_before"][-1]
    assert "live leader" in inspect.stderr
    refused = live["deployment_rescale"]
    assert refused.exit_code == 7, refused.stderr
    assert "pekko://flink/user/rpc/jobmanager" in refused.stderr and refused.stderr.count("kg: error:") == 1
    assert "FlinkDeployment" not in refused.stdout and refused.stdout == ""


def test_after_the_crash_the_deployment_resolves_the_resume_checkpoint_and_checks_it(checkpoints):
    dead = checkpoints["dead"]
    inspect = dead["deployment_inspect"]
    assert inspect.exit_code == 0, inspect.stderr
    doc, own = inspect.json(), dead["inspect"].json()
    # The deployment and the zk:// URI resolve to the same checkpoint, the one the job resumes from.
    assert doc["ha"]["pointer"] == own["ha"]["pointer"] == doc["deployment"]["resolved"]
    assert doc["checkpoint_id"] == own["checkpoint_id"] == max(doc["ha"]["checkpoint_ids"])
    assert doc["ha"]["live_leader"] is False and inspect.stderr == ""
    check = dead["deployment_check"]
    assert check.exit_code == 0, check.stdout + check.stderr
    checked = check.json()
    assert checked["deployment"]["source"] == "high-availability"
    assert checked["deployment"]["parallelism"] == 2
    # The dry run prints the plan and the patch the run would print, pointing at --out.
    dry = dead["deployment_dry_run"]
    assert dry.exit_code == 0, dry.stderr
    patch = dry.json()["patch"]["merge_patch"]
    assert patch["spec"]["job"]["initialSavepointPath"] == str(checkpoints["dry_run_out"])
    assert patch["spec"]["job"]["parallelism"] == 3
    assert patch["spec"]["flinkConfiguration"] == {"pipeline.max-parallelism": "256"}
    assert not checkpoints["dry_run_out"].exists()


def test_savepoint_entry_is_shown_as_the_savepoint_the_job_started_from(savepoint):
    assert savepoint["live"]["rescale"].exit_code == 7
    inspect = savepoint["dead"]["inspect"]
    assert inspect.exit_code == 0, inspect.stderr
    ha = inspect.json()["ha"]
    assert ha["kind"] == "savepoint" and ha["type"] == "Savepoint"
    assert ha["pointer"].rstrip("/") == str(savepoint["source"])
    assert ha["live_leader"] is False


def test_savepoint_entry_rescaled_restores_in_flink_with_every_key(savepoint):
    dead = savepoint["dead"]
    assert dead["check"].exit_code == 0, dead["check"].stdout
    assert dead["rescale"].exit_code == 0, dead["rescale"].stderr
    dump = dead["dump"]
    assert restore_error(dump) is None, restore_error(dump)
    expected = case_json(SAVEPOINT_CASE, "expected-state.json")
    assert_restored_like_expected(dump, expected, 4, 128, "string")


@pytest.mark.parametrize("run_name", ["checkpoints", "savepoint"])
def test_kg_changed_nothing_in_zookeeper(run_name, request):
    run = request.getfixturevalue(run_name)
    assert run["before"] == run["after"]
    assert len(run["before"]) > 10
    # The crashed JobManager's ephemeral nodes are gone; the retained checkpoints are still there.
    assert not any(node.ephemeral_owner for node in run["after"].values())

"""Which state a FlinkDeployment starts from, and the job kg check models (assess/deployment.py)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from keygroup_cli.assess.deployment import deployment_restore_plan, resolve_start
from keygroup_cli.assess.restore import RestorePlan, check_restore
from keygroup_cli.assess.summary import summarize
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.k8s import load_resources
from tests.conftest import FIXTURES, ROOT
from tests.k8s.crd_schema import validate_resource

CEILING = FIXTURES / "k8s" / "autoscaler-ceiling" / "deployment.yaml"
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
CHECKPOINTS = FIXTURES / "flink" / "2.3" / "heap-checkpoint-p2-maxp128-string"
HA_JOB = "0000000000006b670000000000000005"
KEYED_STATE = "826c38023c4272520855c3219fef4f3f"  # uid keyed-state: the head of its chain


def _docs():
    return [d for d in yaml.safe_load_all(CEILING.read_text()) if d]


def _write(tmp_path, docs, name="resources.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_the_newest_completed_snapshot_when_no_initial_savepoint(tmp_path):
    deployment, snapshot = _docs()
    older = copy.deepcopy(snapshot)
    older["metadata"]["name"] = "ceiling-demo-savepoint-0"
    older["status"].update(resultTimestamp="2026-10-01T00:00:00Z", path="/gone/sp-0")
    failed = copy.deepcopy(snapshot)
    failed["metadata"]["name"] = "ceiling-demo-savepoint-2"
    failed["status"].update(state="FAILED", resultTimestamp="2026-12-01T00:00:00Z", path="/gone/sp-2")
    other_job = copy.deepcopy(snapshot)
    other_job["spec"]["jobReference"]["name"] = "another-deployment"
    other_job["status"].update(resultTimestamp="2027-01-01T00:00:00Z", path="/gone/other")
    path = _write(tmp_path, [deployment, older, failed, other_job])
    # The relative status.path is written for fixtures/k8s/autoscaler-ceiling: make it absolute here.
    start = resolve_start(str(CEILING))
    assert (start.source, start.snapshot.name) == ("FlinkStateSnapshot", "ceiling-demo-savepoint-1")
    assert start.pointer == str(SAVEPOINT)
    assert start.field == "FlinkStateSnapshot ceiling-demo-savepoint-1 status.path"
    assert start.considered == ("spec.job.initialSavepointPath: not set",)
    snapshot["status"]["path"] = str(SAVEPOINT)
    path = _write(tmp_path, [deployment, older, snapshot, failed, other_job])
    start = resolve_start(path)
    assert start.snapshot.name == "ceiling-demo-savepoint-1"
    assert "1 older one passed over" in start.reason
    assert start.document()["resolved"] == str(SAVEPOINT)


def test_initial_savepoint_path_wins(tmp_path):
    deployment, snapshot = _docs()
    deployment["spec"]["job"]["initialSavepointPath"] = "sp-relative"
    start = resolve_start(_write(tmp_path, [snapshot, deployment]))
    assert (start.source, start.field) == ("initialSavepointPath", "spec.job.initialSavepointPath")
    assert start.pointer == str(tmp_path / "sp-relative")


def test_then_the_checkpoint_directory_with_the_job_id(tmp_path):
    deployment, _ = _docs()
    config = deployment["spec"]["flinkConfiguration"]
    config["execution.checkpointing.dir"] = str(CHECKPOINTS)
    start = resolve_start(_write(tmp_path, [deployment]))
    assert start.source == "checkpoint-directory" and start.pointer == str(CHECKPOINTS)
    assert "no status.jobStatus.jobId" in start.reason
    # kg reads the job's latest completed chk-N there.
    assert summarize(start.pointer, read_states=False).path.parent.name == "chk-2"
    deployment["status"] = {"jobStatus": {"jobId": HA_JOB, "state": "RUNNING"}}
    del config["execution.checkpointing.dir"]
    config["state"] = {"checkpoints.dir": str(CHECKPOINTS)}  # the older key, nested
    start = resolve_start(_write(tmp_path, [deployment]))
    assert start.pointer == f"{CHECKPOINTS}/{HA_JOB}"
    assert start.field == "spec.flinkConfiguration state.checkpoints.dir"
    assert start.considered[-1] == "high-availability.type: not set"


def test_then_the_kubernetes_ha_store_exported_with_it(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the HA fixture's handles are relative to the checkout's root
    deployment, _ = _docs()
    deployment["metadata"]["name"] = "kg-ha"
    deployment["spec"]["flinkConfiguration"].update(
        {"high-availability.type": "kubernetes", "high-availability.storageDir": "file:///flink-ha"}
    )
    configmap = yaml.safe_load((FIXTURES / "ha" / "2.3" / "kubernetes" / "configmap.yaml").read_text())
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [deployment, configmap]}))
    start = resolve_start(str(path))
    assert start.source == "high-availability" and start.ha is not None
    assert start.pointer == f"fixtures/flink/2.3/heap-checkpoint-p2-maxp128-string/{HA_JOB}/chk-2"
    # Without the ConfigMaps the HA store is passed over, saying how to export them, and the
    # checkpoint directory is next.
    deployment["spec"]["flinkConfiguration"]["execution.checkpointing.dir"] = str(CHECKPOINTS)
    start = resolve_start(_write(tmp_path, [deployment]))
    assert start.source == "checkpoint-directory"
    assert "configmap-type=high-availability" in start.considered[-1]


def test_nothing_to_start_from_is_said_plainly(tmp_path):
    deployment, _ = _docs()
    for key in ("execution.checkpointing.dir",):
        deployment["spec"]["flinkConfiguration"].pop(key)
    with pytest.raises(InvalidArgumentError) as err:
        resolve_start(_write(tmp_path, [deployment]))
    assert err.value.code == "K8S_NO_STATE"
    assert "initialSavepointPath: not set" in err.value.message and "without state" in err.value.message


def test_vertex_overrides_reach_the_chain_head_and_unmapped_ones_are_said(tmp_path):
    deployment, snapshot = _docs()
    unknown = "ffffffffffffffffffffffffffffffff"
    deployment["spec"]["flinkConfiguration"].update(
        {
            "pipeline.max-parallelism": "128",
            "pipeline.jobvertex-parallelism-overrides": f"{KEYED_STATE}:200,{unknown}:4",
        }
    )
    path = _write(tmp_path, [deployment])
    read = load_resources(path).deployment()
    operators = summarize(str(SAVEPOINT), read_states=False).operators
    plan, notes = deployment_restore_plan(read, operators, RestorePlan())
    assert (plan.parallelism, plan.max_parallelism) == (3, 128)
    assert plan.parallelism_for == {KEYED_STATE: 200}
    assert [(n.code, n.severity.name) for n in notes] == [
        ("VERTEX_OVERRIDE", "INFO"),
        ("VERTEX_OVERRIDE_UNMAPPED", "WARNING"),
    ]
    assert "chain headed by keyed-state" in notes[0].message
    assert unknown in notes[1].message and "no operator of the state has that id" in notes[1].message
    # The override is what Flink's restore refuses: keyed-state at 200 > maxParallelism 128.
    findings = check_restore(operators, plan, snapshot="sp")
    refused = [f for f in findings if f.code == "PARALLELISM_EXCEEDS_MAX_PARALLELISM"]
    assert [f.subject for f in refused] == ["keyed-state"]
    # -p on the command line wins over the deployment.
    plan, _ = deployment_restore_plan(
        read, operators, RestorePlan(parallelism=2, parallelism_for={"keyed-state": 5})
    )
    assert plan.parallelism == 2 and plan.parallelism_for == {"keyed-state": 5}


def test_a_zookeeper_ha_store_is_read_at_the_uri_its_configuration_names(tmp_path, monkeypatch):
    from keygroup_cli.core.errors import InvalidInputError
    from tests.ha.harness import free_port

    monkeypatch.setattr("keygroup_cli.ha.zookeeper.CONNECT_TIMEOUT", 1.0)
    deployment, _ = _docs()
    port = free_port()
    deployment["spec"]["flinkConfiguration"].update(
        {
            "high-availability": {
                "type": "zookeeper",
                "zookeeper.quorum": f"127.0.0.1:{port}",
                "zookeeper.path.root": "/flink-prod",
            }
        }
    )
    # No server listens there: the one-line error names the store kg built from the configuration.
    with pytest.raises(InvalidInputError) as err:
        resolve_start(_write(tmp_path, [deployment]))
    assert err.value.code == "HA_STORE_UNREACHABLE"
    assert err.value.message.startswith(
        f"FlinkDeployment streaming/ceiling-demo: high-availability.type zookeeper "
        f"(zk://127.0.0.1:{port}/flink-prod/ceiling-demo): zk://127.0.0.1:{port}: no ZooKeeper server "
    )


def _deployed(deployment, *, mode="savepoint", nonce=1, state="FINISHED", wrapped=True, **job_status):
    """Give ``deployment`` the status the operator writes once it has deployed the spec (upgradeMode ``mode``,
    savepointRedeployNonce ``nonce``) and stopped the job (``status.jobStatus.state``)."""
    spec = copy.deepcopy(deployment["spec"])
    spec["job"].update(upgradeMode=mode, savepointRedeployNonce=nonce)
    reconciled = {"spec": spec, "resource_metadata": {"apiVersion": "flink.apache.org/v1beta1"}}
    deployment["status"] = {
        "jobStatus": {"jobId": HA_JOB, "state": state, **job_status},
        "reconciliationStatus": {
            "state": "DEPLOYED",
            "lastReconciledSpec": json.dumps(reconciled if wrapped else spec),
        },
    }
    assert validate_resource(deployment) == []  # the operator's own CRD: every field as it writes them
    return deployment


def test_the_upgrade_savepoint_the_operator_recorded_wins_over_an_older_initial_savepoint(tmp_path):
    deployment, snapshot = _docs()
    deployment["spec"]["job"].update(initialSavepointPath="/gone/first-savepoint", savepointRedeployNonce=1)
    _deployed(deployment, upgradeSavepointPath=str(SAVEPOINT))
    start = resolve_start(_write(tmp_path, [deployment, snapshot]))
    assert (start.source, start.field) == ("upgradeSavepointPath", "status.jobStatus.upgradeSavepointPath")
    assert start.pointer == str(SAVEPOINT) and start.warnings == ()
    assert start.considered == (
        "spec.job.initialSavepointPath /gone/first-savepoint: passed over, the operator reads it only before "
        "the first deployment and on a savepointRedeployNonce change",
    )
    assert "restores it when the job is resumed or upgraded" in start.reason
    assert summarize(start.pointer, read_states=False).operators  # kg reads what the operator restores
    # A savepointRedeployNonce changed since the operator reconciled: it redeploys from initialSavepointPath.
    deployment["spec"]["job"]["savepointRedeployNonce"] = 2
    start = resolve_start(_write(tmp_path, [deployment, snapshot]))
    assert (start.source, start.pointer) == ("initialSavepointPath", "/gone/first-savepoint")
    assert "savepointRedeployNonce changed (1 -> 2)" in start.reason
    assert start.considered == (
        f"status.jobStatus.upgradeSavepointPath {SAVEPOINT}: passed over, spec.job.savepointRedeployNonce "
        "changed (1 -> 2)",
    )
    # A nonce set to null is ignored by the operator (onNullIgnore): the upgrade savepoint still wins.
    del deployment["spec"]["job"]["savepointRedeployNonce"]
    assert resolve_start(_write(tmp_path, [deployment, snapshot])).source == "upgradeSavepointPath"


def test_before_operator_1_10_the_last_savepoint_location_is_the_upgrade_savepoint(tmp_path):
    deployment, snapshot = _docs()
    deployment["spec"]["job"]["initialSavepointPath"] = "/gone/first-savepoint"
    last = {"location": str(SAVEPOINT), "timeStamp": 1762074849000, "triggerType": "UPGRADE"}
    _deployed(deployment, wrapped=False, savepointInfo={"lastSavepoint": last})
    start = resolve_start(_write(tmp_path, [deployment, snapshot]))
    assert start.source == "upgradeSavepointPath" and start.pointer == str(SAVEPOINT)
    assert start.field == "status.jobStatus.savepointInfo.lastSavepoint.location"
    # Where both are set, the 1.10+ field is the one the operator reads first.
    deployment["status"]["jobStatus"]["upgradeSavepointPath"] = str(CHECKPOINTS / HA_JOB / "chk-2")
    start = resolve_start(_write(tmp_path, [deployment, snapshot]))
    assert start.field == "status.jobStatus.upgradeSavepointPath"


def test_a_last_state_job_resumes_from_ha_not_from_a_recorded_path(tmp_path):
    deployment, snapshot = _docs()
    config = deployment["spec"]["flinkConfiguration"]
    config["execution.checkpointing.dir"] = str(CHECKPOINTS)
    deployment["spec"]["job"]["initialSavepointPath"] = "/gone/first-savepoint"
    _deployed(deployment, mode="last-state", upgradeSavepointPath="KUBERNETES_OPERATOR_LAST_STATE")
    start = resolve_start(_write(tmp_path, [deployment]))
    # The marker is no path; initialSavepointPath is not read after the first deployment.
    assert (start.source, start.pointer) == ("checkpoint-directory", f"{CHECKPOINTS}/{HA_JOB}")
    assert start.considered[:2] == (
        "status.jobStatus.upgradeSavepointPath KUBERNETES_OPERATOR_LAST_STATE: the operator's last-state "
        "marker: the job resumes from its HA metadata",
        "spec.job.initialSavepointPath /gone/first-savepoint: passed over, the operator reads it only before "
        "the first deployment and on a savepointRedeployNonce change",
    )
    # A real path with last-state reconciled: passed over too (the operator restores HA metadata).
    deployment["status"]["jobStatus"]["upgradeSavepointPath"] = str(SAVEPOINT)
    start = resolve_start(_write(tmp_path, [deployment, snapshot]))
    assert start.source == "FlinkStateSnapshot"
    assert "the last reconciled upgradeMode is last-state" in start.considered[0]


def test_before_the_first_deployment_initial_savepoint_path_is_the_start(tmp_path):
    deployment, snapshot = _docs()
    deployment["spec"]["job"]["initialSavepointPath"] = str(SAVEPOINT)
    # The operator records initialSavepointPath as upgradeSavepointPath before the first deployment.
    deployment["status"] = {"jobStatus": {"upgradeSavepointPath": str(SAVEPOINT)}}
    start = resolve_start(_write(tmp_path, [deployment, snapshot]))
    assert (start.source, start.considered) == ("initialSavepointPath", ())


def test_a_running_job_is_said_to_have_moved_past_the_savepoint(tmp_path):
    deployment, _ = _docs()
    _deployed(deployment, state="RUNNING", upgradeSavepointPath=str(SAVEPOINT))
    start = resolve_start(_write(tmp_path, [deployment]))
    assert start.source == "upgradeSavepointPath"
    assert len(start.warnings) == 1 and "status.jobStatus.state is RUNNING" in start.warnings[0]


def test_a_last_reconciled_spec_that_is_no_json_is_one_line(tmp_path):
    deployment, _ = _docs()
    deployment["status"] = {"reconciliationStatus": {"lastReconciledSpec": "{not json"}}
    with pytest.raises(InvalidArgumentError) as err:
        resolve_start(_write(tmp_path, [deployment]))
    assert err.value.code == "K8S_RESOURCE_INVALID"
    assert "status.reconciliationStatus.lastReconciledSpec is not the JSON object" in err.value.message

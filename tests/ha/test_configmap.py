"""Kubernetes HA ConfigMap exports (fixtures/ha/2.3/kubernetes: HaStoreGen, with Flink's classes)."""

from __future__ import annotations

import base64
import json
import shutil
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from keygroup_cli.core.errors import ExitCode
from keygroup_cli.ha import javaser
from tests.conftest import FIXTURES, ROOT
from tests.k8s.crd_schema import validate_resource

K8S = FIXTURES / "ha" / "2.3" / "kubernetes"
CASE = FIXTURES / "flink" / "2.3" / "heap-checkpoint-p2-maxp128-string"
JOB = "0000000000006b670000000000000005"


def _repoint(value: str, old: str, new: str) -> str:
    """Re-point a serialized handle: its URI is one TC_STRING, so patch the string and its length."""
    data = base64.b64decode(value)
    i = data.index(old.encode())
    data = data[: i - 2] + len(new.encode()).to_bytes(2, "big") + new.encode() + data[i + len(old.encode()) :]
    return base64.b64encode(data).decode()


@pytest.fixture
def export(tmp_path, monkeypatch):
    """Write the fixture ConfigMaps, their handles pointing at copies of the storage files (name -> path).

    The CompletedCheckpoints' pointers are relative to the checkout's root, as in the committed fixture: kg
    runs from there, as a user trying the fixture would.
    """
    monkeypatch.chdir(ROOT)
    ha = tmp_path / "ha"
    shutil.copytree(K8S / "ha", ha)

    def write(name: str, extra: list[dict] | None = None):
        cm = yaml.safe_load((K8S / name).read_text())
        for key, value in cm["data"].items():
            if key.startswith("checkpointID-"):
                old = javaser.parse_store_handle(base64.b64decode(value), key).uri
                new = (ha / old.rsplit("/", 1)[1]).as_uri().replace("file:///", "file:/")
                cm["data"][key] = _repoint(value, old, new)
        doc = cm if not extra else {"apiVersion": "v1", "kind": "List", "items": [cm, *extra]}
        out = tmp_path / name
        out.write_text(yaml.safe_dump(doc))
        return out

    return write


def test_committed_export_works_from_the_checkout_root_as_it_is(kg, monkeypatch, tmp_path):
    """Every path kg follows in the fixture is relative to the checkout's root: no machine's path."""
    monkeypatch.chdir(ROOT)
    export = K8S.relative_to(ROOT) / "configmap.yaml"
    result = kg("inspect", export, "--json")
    assert result.exit_code == 0, result.stderr
    ha = result.json()["ha"]
    assert ha["handle"] == "fixtures/ha/2.3/kubernetes/ha/completedCheckpoint-2"
    assert ha["pointer"] == f"fixtures/flink/2.3/heap-checkpoint-p2-maxp128-string/{JOB}/chk-2"
    # The HashMap checkpoint it resumes from rescales (heap layout rewritten to a canonical savepoint).
    out = tmp_path / "p3"
    rescaled = kg("rescale", export, "--from", "2", "--to", "3", "--out", out, "--engine", "local")
    assert rescaled.exit_code == 0, rescaled.stderr
    assert kg("check", out, "-p", "3").exit_code == 0


def _cluster_map(renewed: datetime) -> dict:
    lease = {
        "holderIdentity": "kg-ha-jobmanager-7f9c",
        "leaseDuration": 15.0,
        "acquireTime": "2026-01-01T00:00:00.000000Z",
        "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "leaderTransitions": 0,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kg-ha-cluster-config-map",
            "annotations": {"control-plane.alpha.kubernetes.io/leader": json.dumps(lease)},
        },
        "data": {
            f"org.apache.flink.k8s.leader.job-{JOB}": "5d9c1c9a-2a8f-4d0e-9d3b-1f0c3c1d2e4f,pekko.tcp://flink@10.0.0.7:6123/user/rpc/jobmanager_2"
        },
    }


def test_inspect_configmap_uses_the_highest_entry_not_marked_for_deletion(kg, export):
    result = kg("inspect", export("configmap.yaml"), "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    ha = doc["ha"]
    assert ha["store"] == "kubernetes" and ha["layout"] == "kubernetes" and ha["job_id"] == JOB
    assert ha["entry"] == f"kg-ha-{JOB}-config-map/checkpointID-0000000000000000002"
    assert ha["checkpoint_ids"] == [2] and ha["kind"] == "checkpoint"
    assert ha["pointer"].rstrip("/").endswith(f"heap-checkpoint-p2-maxp128-string/{JOB}/chk-2")
    assert doc["checkpoint_id"] == 2
    assert "checkpointID-0000000000000000003 is marked for deletion" in result.stderr


def test_savepoint_entry_and_text_output(kg, export):
    result = kg("inspect", export("configmap-savepoint.yaml"))
    assert result.exit_code == 0, result.stderr
    assert "savepoint (Savepoint): the savepoint the job was started from" in result.stdout
    assert "HA store" in result.stdout and "Live leader  no" in result.stdout.replace("   ", "  ")


def test_live_lease_refuses_rescale_and_warns_in_check(kg, export, tmp_path):
    path = export("configmap.yaml", [_cluster_map(datetime.now(timezone.utc))])
    refused = kg("rescale", path, "--to", "3", "--out", tmp_path / "out", "--engine", "local")
    assert refused.exit_code == ExitCode.LEADER_LIVE == 7
    assert "pekko.tcp://flink@10.0.0.7:6123/user/rpc/jobmanager_2" in refused.stderr
    assert "5d9c1c9a-2a8f-4d0e-9d3b-1f0c3c1d2e4f" in refused.stderr and "lease" in refused.stderr
    assert not (tmp_path / "out").exists()
    check = kg("check", path, "-p", "3", "--json")
    assert check.exit_code == 0 and "live leader" in check.stderr
    stale = export("configmap.yaml", [_cluster_map(datetime.now(timezone.utc) - timedelta(minutes=5))])
    inspect = kg("inspect", stale, "--json")
    assert inspect.json()["ha"]["live_leader"] is False
    assert inspect.json()["ha"]["leader"]["address"].endswith("jobmanager_2")


def test_job_option_and_usage(kg, export):
    path = export("configmap.yaml")
    assert kg("inspect", path, "--job", JOB, "--json").exit_code == 0
    wrong = kg("inspect", path, "--job", "f" * 32, "--json")
    assert wrong.exit_code == ExitCode.USAGE and wrong.json()["error"]["code"] == "HA_JOB_NOT_FOUND"
    plain = kg("inspect", CASE, "--job", JOB)
    assert plain.exit_code == 2 and "--job applies only" in plain.stderr


def test_migrate_from_the_ha_store_and_refused_while_a_leader_lives(kg, export, tmp_path):
    no_uid = "9887c2fb29a6e66df7039a0be00a90dd"
    done = kg("migrate", export("configmap.yaml"), "--out", tmp_path / "sp", "--drop", no_uid, "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["checkpoint_id"] == 2 and done.json()["changes"][0]["action"] == "drop"
    inspect = kg("inspect", tmp_path / "sp", "--json").json()
    assert inspect["checkpoint_id"] == 2
    assert no_uid not in {op["operator_id"] for op in inspect["operators"]}
    live = export("configmap.yaml", [_cluster_map(datetime.now(timezone.utc))])
    refused = kg("migrate", live, "--out", tmp_path / "out", "--drop", no_uid)
    assert refused.exit_code == ExitCode.LEADER_LIVE and not (tmp_path / "out").exists()


def _deployment() -> dict:
    """A FlinkDeployment with Kubernetes HA, no initialSavepointPath, no FlinkStateSnapshot: kg starts from
    the HA ConfigMaps of its cluster (``kg-ha``, the deployment's name) exported in the same file."""
    deployment = {
        "apiVersion": "flink.apache.org/v1beta1",
        "kind": "FlinkDeployment",
        "metadata": {"name": "kg-ha", "namespace": "streaming"},
        "spec": {
            "image": "flink:2.0",
            "flinkVersion": "v2_0",
            "serviceAccount": "flink",
            "flinkConfiguration": {
                "high-availability.type": "kubernetes",
                "high-availability.storageDir": "s3://flink-ha/kg-ha",
            },
            "job": {
                "jarURI": "local:///opt/flink/usrlib/kg-ha.jar",
                "parallelism": 2,
                "upgradeMode": "last-state",
            },
        },
    }
    assert validate_resource(deployment) == []
    return deployment


def test_a_deployment_with_its_ha_configmaps_resolves_them_and_rescale_waits_for_the_lease(
    kg, export, tmp_path
):
    out = tmp_path / "m256"
    now = datetime.now(timezone.utc)
    live = export("configmap.yaml", [_deployment(), _cluster_map(now)])
    inspect = kg("inspect", live, "--json")
    assert inspect.exit_code == 0, inspect.stderr
    doc = inspect.json()
    assert doc["deployment"]["source"] == "high-availability"
    assert doc["deployment"]["field"] == "high-availability.type kubernetes (ConfigMaps of kg-ha)"
    assert doc["deployment"]["resolved"] == doc["ha"]["pointer"]
    assert doc["ha"]["entry"] == f"kg-ha-{JOB}-config-map/checkpointID-0000000000000000002"
    assert doc["ha"]["live_leader"] is True and "live leader" in inspect.stderr
    refused = kg("rescale", live, "-m", "256", "--out", out, "--engine", "local")
    assert refused.exit_code == ExitCode.LEADER_LIVE == 7
    assert "lease" in refused.stderr and refused.stdout == "" and not out.exists()
    # The dry run only warns; it prints the patch the rescale prints once the lease has expired.
    dry = kg("rescale", live, "-m", "256", "--out", out, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert "live leader" in dry.stderr and not out.exists()
    stale = export("configmap.yaml", [_deployment(), _cluster_map(now - timedelta(minutes=5))])
    check = kg("check", stale, "--json")
    assert check.exit_code == 0, check.stdout + check.stderr
    assert check.json()["deployment"]["parallelism"] == 2
    done = kg("rescale", stale, "-m", "256", "--out", out, "--engine", "local", "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["patch"] == dry.json()["patch"]
    assert done.json()["patch"]["merge_patch"]["spec"] == {
        "job": {"initialSavepointPath": str(out), "savepointRedeployNonce": 1, "parallelism": 2},
        "flinkConfiguration": {"pipeline.max-parallelism": "256"},
    }
    assert kg("check", out, "-p", "2", "-m", "256").exit_code == 0

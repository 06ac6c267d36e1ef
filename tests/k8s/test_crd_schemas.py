"""Every resource and patch kg reads or writes validates against the operator's own CRD schemas.

The CRDs and examples are apache/flink-kubernetes-operator's (fixtures/k8s/README.md: source commit);
the validator (tests/k8s/crd_schema.py) is strict about unknown fields, as ``kubectl apply
--validate=strict``.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from keygroup_cli.k8s import load_resources
from keygroup_cli.k8s.patch import deployment_patch, dump
from tests.conftest import FIXTURES
from tests.k8s.crd_schema import merge_patch, validate_patch, validate_resource

K8S = FIXTURES / "k8s"
RESOURCE_FILES = sorted((K8S / "examples").glob("*.yaml")) + [K8S / "autoscaler-ceiling" / "deployment.yaml"]


def _documents(path):
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _deployments():
    return [(p, d) for p in RESOURCE_FILES for d in _documents(p) if d["kind"] == "FlinkDeployment"]


@pytest.mark.parametrize("path", RESOURCE_FILES, ids=lambda p: p.name)
def test_every_resource_kg_reads_is_valid(path):
    documents = _documents(path)
    assert documents
    for document in documents:
        assert validate_resource(document) == [], document["metadata"]["name"]
    # And kg reads each of them.
    resources = load_resources(str(path))
    assert len(resources.deployments) + len(resources.snapshots) == len(documents)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda d: d["spec"]["job"].__setitem__("parallelism", "2"),
            ".spec.job.parallelism: '2' is not of type integer",
        ),
        (lambda d: d["spec"]["job"].__setitem__("upgradeMode", "restart"), "is not one of"),
        (
            lambda d: d["spec"]["job"].__setitem__("initialSavepointPat", "x"),
            ".spec.job.initialSavepointPat: unknown field",
        ),
        (lambda d: d["spec"]["job"].__setitem__("savepointRedeployNonce", True), "is not of type integer"),
        (lambda d: d.__setitem__("apiVersion", "flink.apache.org/v1"), "apiVersion"),
    ],
)
def test_the_validator_refuses_what_the_api_server_would(change, error):
    (deployment,) = _documents(K8S / "examples" / "basic.yaml")
    broken = copy.deepcopy(deployment)
    change(broken)
    assert any(error in e for e in validate_resource(broken)), validate_resource(broken)


@pytest.mark.parametrize(("path", "deployment"), _deployments(), ids=lambda v: getattr(v, "name", ""))
def test_the_patch_kg_prints_is_valid_and_the_patched_deployment_too(tmp_path, path, deployment):
    source = tmp_path / "deployment.yaml"
    source.write_text(yaml.safe_dump(deployment))
    read = load_resources(str(source)).deployment()
    patch = deployment_patch(
        read, savepoint_path="s3://bkt/sp-m720", max_parallelism=720, parallelism=200, checkpoint_id=7
    )
    merge = patch.merge_patch()
    assert validate_patch(merge, "FlinkDeployment") == []
    patched = merge_patch(deployment, merge)
    assert validate_resource(patched) == []
    # kg reads back exactly what the patch says.
    source.write_text(yaml.safe_dump(patched))
    again = load_resources(str(source)).deployment()
    assert again.initial_savepoint_path == "s3://bkt/sp-m720"
    assert again.savepoint_redeploy_nonce == (read.savepoint_redeploy_nonce or 0) + 1
    assert (again.max_parallelism, again.parallelism) == (720, 200)
    # Both printed forms are the same patch, and the same as kubectl's -p argument.
    assert json.loads(dump(merge, "json")) == merge == yaml.safe_load(dump(merge, "yaml"))
    kubectl = patch.kubectl_command()
    assert json.loads(kubectl[kubectl.index("-p '") + 4 : -1]) == merge


def test_a_nested_max_parallelism_is_patched_where_it_is(tmp_path):
    (deployment,) = _documents(K8S / "examples" / "basic.yaml")
    deployment["spec"]["flinkConfiguration"] = {
        "pipeline": {"max-parallelism": 128},
        "taskmanager.numberOfTaskSlots": "2",
    }
    deployment["spec"]["job"]["savepointRedeployNonce"] = 4
    source = tmp_path / "nested.yaml"
    source.write_text(yaml.safe_dump(deployment))
    patch = deployment_patch(
        load_resources(str(source)).deployment(), savepoint_path="/sp", max_parallelism=600, parallelism=3
    )
    merge = patch.merge_patch()
    assert merge["spec"]["flinkConfiguration"] == {"pipeline": {"max-parallelism": "600"}}
    assert merge["spec"]["job"]["savepointRedeployNonce"] == 5
    patched = merge_patch(deployment, merge)
    assert validate_resource(patched) == []
    source.write_text(yaml.safe_dump(patched))
    assert load_resources(str(source)).deployment().max_parallelism == 600  # not set twice


def test_the_state_snapshot_kg_writes_is_valid_and_read_back(tmp_path):
    source = K8S / "autoscaler-ceiling" / "deployment.yaml"
    deployment = load_resources(str(source)).deployment()
    patch = deployment_patch(
        deployment,
        savepoint_path="s3://bkt/sp",
        max_parallelism=600,
        parallelism=3,
        checkpoint_id=1,
        format_type="NATIVE",
    )
    resource = patch.snapshot_resource()
    assert validate_resource(resource) == []
    assert resource["metadata"] == {"name": "ceiling-demo-kg-m600-p3-1", "namespace": "streaming"}
    written = tmp_path / "snapshot.yaml"
    written.write_text(dump(resource, "yaml"))
    (snapshot,) = load_resources(str(written)).snapshots_of(deployment)
    assert snapshot.completed and snapshot.path == "s3://bkt/sp" and snapshot.format_type == "NATIVE"

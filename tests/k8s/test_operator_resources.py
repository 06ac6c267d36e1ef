"""Reading the Flink Kubernetes Operator's resources (keygroup_cli/k8s/resources.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from keygroup_cli.core.errors import ExitCode, InvalidArgumentError, MissingDependencyError
from keygroup_cli.k8s import is_operator_file, load_resources, resolve_path
from keygroup_cli.k8s.resources import flatten_configuration, parse_vertex_overrides
from tests.conftest import FIXTURES

EXAMPLES = FIXTURES / "k8s" / "examples"
CEILING = FIXTURES / "k8s" / "autoscaler-ceiling" / "deployment.yaml"


def test_reads_the_operators_own_examples():
    resources = load_resources(str(EXAMPLES / "job-from-savepoint.yaml"))
    deployment = resources.deployment()
    assert deployment.name == "example-deployment"
    assert deployment.initial_savepoint_path == "file:///flink-data/savepoints/savepoint-45305c-d867504446e0"
    assert deployment.parallelism == 2 and deployment.parallelism_source == "spec.job.parallelism"
    assert deployment.upgrade_mode == "savepoint"
    # Nested flinkConfiguration maps are Flink's dotted keys, as the operator flattens them.
    assert deployment.configuration["state.checkpoints.dir"] == "file:///flink-data/checkpoints"
    assert deployment.config_paths["state.checkpoints.dir"] == ("state", "checkpoints.dir")
    (snapshot,) = resources.snapshots
    assert (snapshot.kind, snapshot.already_exists, snapshot.path_field) == (
        "savepoint",
        True,
        "spec.savepoint.path",
    )
    assert snapshot.completed  # alreadyExists without a status yet: the operator marks it COMPLETED at once


def test_autoscaling_example_flattens_nested_maps_and_scalars():
    deployment = load_resources(str(EXAMPLES / "autoscaling.yaml")).deployment()
    assert deployment.configuration["job.autoscaler.enabled"] == "true"
    assert deployment.configuration["job.autoscaler.target.utilization.boundary"] == "0.1"
    assert deployment.max_parallelism == 24
    assert deployment.configuration["high-availability.type"] == "kubernetes"


def test_a_checkpoint_snapshot_without_status_is_not_completed():
    (snapshot,) = load_resources(str(EXAMPLES / "checkpoint.yaml")).snapshots
    assert snapshot.kind == "checkpoint" and snapshot.job_name == "example-deployment"
    assert not snapshot.completed and snapshot.path is None


def test_list_json_and_multi_document_yaml_read_alike(tmp_path):
    docs = [d for d in yaml.safe_load_all(CEILING.read_text()) if d]
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    as_yaml_list = tmp_path / "list.yaml"
    as_yaml_list.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": docs}))
    read = [load_resources(str(p)) for p in (CEILING, as_list, as_yaml_list)]
    first = read[0].deployment()
    for r in read[1:]:
        d = r.deployment()
        assert (d.name, d.namespace, d.parallelism, d.configuration) == (
            first.name,
            first.namespace,
            first.parallelism,
            first.configuration,
        )
    for r in read:
        (snapshot,) = r.snapshots_of(r.deployment())
        assert snapshot.state == "COMPLETED" and snapshot.time == "2026-11-02T09:14:09Z"
        assert snapshot.path == "../../flink/2.3/heap-files-p3-maxp128-long"
    assert all(is_operator_file(str(p)) for p in (CEILING, as_list, as_yaml_list))


def test_relative_paths_resolve_against_the_files_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_path("../../flink/2.3/x", str(CEILING)) == str(FIXTURES / "flink" / "2.3" / "x")
    assert resolve_path("/abs/sp", str(CEILING)) == "/abs/sp"
    assert resolve_path("s3://bkt/sp", str(CEILING)) == "s3://bkt/sp"
    assert resolve_path("file:///flink-data/sp", str(CEILING)) == "file:///flink-data/sp"


def test_vertex_overrides_parse_flinks_map_format():
    assert parse_vertex_overrides(
        "826C38023C4272520855C3219FEF4F3F:12, 0deda8214bb86ca899ac64bff9a17164:4", "d"
    ) == {
        "826c38023c4272520855c3219fef4f3f": 12,
        "0deda8214bb86ca899ac64bff9a17164": 4,
    }
    for bad in ("826c:12", "826c38023c4272520855c3219fef4f3f:0", "826c38023c4272520855c3219fef4f3f=3"):
        with pytest.raises(InvalidArgumentError) as err:
            parse_vertex_overrides(bad, "d")
        assert err.value.code == "K8S_OVERRIDES_INVALID"


def test_a_key_set_flat_and_nested_is_refused():
    with pytest.raises(InvalidArgumentError, match="sets pipeline.max-parallelism twice"):
        flatten_configuration({"pipeline.max-parallelism": 1, "pipeline": {"max-parallelism": 2}}, "d")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: FlinkDeployment\nspec: [\n", "not valid YAML or JSON"),
        ('{"kind": "ConfigMap", "apiVersion": "v1"}', "no FlinkDeployment or FlinkStateSnapshot"),
        (
            "apiVersion: flink.apache.org/v1beta1\nkind: FlinkDeployment\nmetadata: {name: x}\n"
            "spec: {job: {parallelism: many}}\n",
            "spec.job.parallelism 'many' is not an integer",
        ),
        (
            "apiVersion: flink.apache.org/v1beta1\nkind: FlinkDeployment\nmetadata: {name: x}\n"
            "spec: {flinkConfiguration: [a, b]}\n",
            "spec.flinkConfiguration is a list, not a map",
        ),
    ],
)
def test_bad_files_are_one_line_usage_errors(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InvalidArgumentError, match=message) as err:
        load_resources(str(path))
    assert err.value.code == "K8S_RESOURCE_INVALID" and "\n" not in err.value.message


def test_several_deployments_need_a_name(tmp_path):
    doc = yaml.safe_load((EXAMPLES / "basic.yaml").read_text())
    other = {**doc, "metadata": {"name": "other"}}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([doc, other]))
    resources = load_resources(str(path))
    with pytest.raises(InvalidArgumentError) as err:
        resources.deployment()
    assert err.value.code == "K8S_DEPLOYMENT_AMBIGUOUS"
    assert resources.deployment("other").name == "other"


def test_only_operator_files_are_recognised(tmp_path):
    cm = FIXTURES / "ha" / "2.3" / "kubernetes" / "configmap.yaml"
    assert not is_operator_file(str(cm))
    assert not is_operator_file(str(FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"))
    assert not is_operator_file(str(Path(tmp_path) / "missing.yaml"))


def test_yaml_without_pyyaml_is_exit_6_and_json_needs_none(tmp_path, monkeypatch):
    docs = [d for d in yaml.safe_load_all(CEILING.read_text()) if d]
    as_json = tmp_path / "export.json"
    as_json.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    monkeypatch.setitem(sys.modules, "yaml", None)  # what an install without the [k8s] extra has
    with pytest.raises(MissingDependencyError) as err:
        load_resources(str(CEILING))
    assert err.value.code == "K8S_EXTRA_MISSING" and err.value.exit_code == ExitCode.MISSING_DEPENDENCY
    assert "[k8s]" in err.value.message and "-o json" in err.value.message
    assert load_resources(str(as_json)).deployment().name == "ceiling-demo"

"""kg inspect/check/plan/rescale on a Flink Kubernetes Operator FlinkDeployment (issue #42).

On the bundled how-to fixture (fixtures/k8s/autoscaler-ceiling): a deployment whose last savepoint is at
maxParallelism 128, with the autoscaler allowed up to 200.
"""

from __future__ import annotations

import json
import subprocess

import yaml

from keygroup_cli.cli.k8s_render import rescale_command
from keygroup_cli.core.errors import ExitCode
from tests.conftest import FIXTURES
from tests.k8s.crd_schema import merge_patch, validate_patch, validate_resource

CEILING = FIXTURES / "k8s" / "autoscaler-ceiling" / "deployment.yaml"
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
KEYED_STATE = "826c38023c4272520855c3219fef4f3f"


def _docs():
    return [d for d in yaml.safe_load_all(CEILING.read_text()) if d]


def test_inspect_names_the_state_and_why(kg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the relative status.path resolves against the file, not the cwd
    result = kg("inspect", CEILING, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["deployment"]["source"] == "FlinkStateSnapshot"
    assert doc["deployment"]["field"] == "FlinkStateSnapshot ceiling-demo-savepoint-1 status.path"
    assert doc["deployment"]["resolved"] == str(SAVEPOINT)
    assert doc["deployment"]["parallelism"] == 3 and doc["deployment"]["max_parallelism"] is None
    assert {op["max_parallelism"] for op in doc["operators"]} == {128}
    text = kg("inspect", CEILING)
    assert "Starts from" in text.stdout and "the newest COMPLETED FlinkStateSnapshot" in text.stdout


def test_check_models_the_deployments_parallelism_overrides_and_max(kg, tmp_path):
    deployment, snapshot = _docs()
    snapshot["status"]["path"] = str(SAVEPOINT)
    deployment["spec"]["flinkConfiguration"]["pipeline.jobvertex-parallelism-overrides"] = (
        f"{KEYED_STATE}:200,ffffffffffffffffffffffffffffffff:2"
    )
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump_all([deployment, snapshot]))
    result = kg("check", path, "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED
    codes = [(f["code"], f["subject"]) for f in result.json()["findings"]]
    assert ("PARALLELISM_EXCEEDS_MAX_PARALLELISM", "keyed-state") in codes
    assert ("VERTEX_OVERRIDE", "keyed-state") in codes
    assert ("VERTEX_OVERRIDE_UNMAPPED", "ffffffffffffffffffffffffffffffff") in codes
    # pipeline.max-parallelism 600 against state at 128: Flink's mismatch refusal, for every operator.
    deployment["spec"]["flinkConfiguration"].pop("pipeline.jobvertex-parallelism-overrides")
    deployment["spec"]["flinkConfiguration"]["pipeline.max-parallelism"] = 600
    path.write_text(yaml.safe_dump_all([deployment, snapshot]))
    result = kg("check", path, "--json")
    assert result.exit_code == ExitCode.CHECK_FAILED
    assert {f["code"] for f in result.json()["findings"]} == {"MAX_PARALLELISM_MISMATCH"}
    # The fixture as it is restores (p 3, the state's maxParallelism adopted).
    ok = kg("check", CEILING)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert "checked at parallelism 3" in ok.stdout


def test_plan_judges_the_autoscalers_ceiling(kg):
    result = kg("plan", CEILING, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    auto = doc["autoscaler"]
    assert (auto["target"], auto["max_parallelism"], auto["allowed"]) == (200, 128, False)
    assert doc["target_from"] == "job.autoscaler.vertex.max-parallelism"
    assert auto["proposal"]["max_parallelism"] == 600 and auto["proposal"]["ceiling"] == 200
    assert doc["rescale_command"].endswith("--max-parallelism 600 --out URI")
    from keygroup_cli.planning.autoscaler import autoscaler_plan

    assert rescale_command("my deployment.yaml", autoscaler_plan(64, 128)) is None
    assert rescale_command("my deployment.yaml", autoscaler_plan(200, 128)) == (
        "kg rescale 'my deployment.yaml' --max-parallelism 600 --out URI"
    )
    assert kg("plan", CEILING, "--autoscaler-max", "64", "--json").json()["autoscaler"]["allowed"] is True
    assert kg("plan", CEILING, "--to", "96", "--json").json()["autoscaler"]["target"] == 96
    text = kg("plan", CEILING)
    assert "NO: maxParallelism 128 does not allow parallelism 200" in text.stdout
    assert "Proposed: maxParallelism 600" in text.stdout


def test_plan_and_rescale_still_need_to_without_a_deployment(kg, tmp_path):
    result = kg("plan", SAVEPOINT)
    assert result.exit_code == ExitCode.USAGE and "Missing option '--to'" in result.stderr
    result = kg("plan", SAVEPOINT, "--to", "4", "--autoscaler-max", "8")
    assert (
        result.exit_code == ExitCode.USAGE
        and "--autoscaler-max applies to a FlinkDeployment" in result.stderr
    )
    result = kg("rescale", SAVEPOINT, "--out", tmp_path / "x")
    assert result.exit_code == ExitCode.USAGE and "Missing option '--to'" in result.stderr
    result = kg("rescale", SAVEPOINT, "--to", "4", "--out", tmp_path / "x", "--output", "patch")
    assert result.exit_code == ExitCode.USAGE and "need a FlinkDeployment" in result.stderr
    assert not (tmp_path / "x").exists()


def test_rescale_writes_the_savepoint_and_prints_a_valid_patch(kg, tmp_path):
    out = tmp_path / "sp-m600"
    result = kg("rescale", CEILING, "-m", "600", "--out", out, "--engine", "local", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    patch = doc["patch"]["merge_patch"]
    assert patch == {
        "spec": {
            "job": {"initialSavepointPath": str(out), "savepointRedeployNonce": 1, "parallelism": 3},
            "flinkConfiguration": {"pipeline.max-parallelism": "600"},
        }
    }
    assert validate_patch(patch, "FlinkDeployment") == []
    deployment, _ = _docs()
    patched = merge_patch(deployment, patch)
    assert validate_resource(patched) == []
    assert validate_resource(doc["patch"]["state_snapshot"]) == []
    # The patched deployment passes kg check against the savepoint kg wrote: pipeline.max-parallelism
    # 600 is the state's now, and the autoscaler may reach 200.
    patched_file = tmp_path / "patched.yaml"
    patched_file.write_text(yaml.safe_dump(patched))
    check = kg("check", patched_file, "--json")
    assert check.exit_code == 0, check.stdout
    assert check.json()["deployment"]["source"] == "initialSavepointPath"
    plan = kg("plan", patched_file, "--json").json()["autoscaler"]
    assert plan["allowed"] and plan["max_parallelism"] == 600 and plan["state_max_parallelism"] == 600
    check = kg("check", patched_file, "-p", "200")
    assert check.exit_code == 0, check.stdout


def test_output_patch_is_only_the_merge_patch_kubectl_takes(kg, tmp_path):
    result = kg(
        "rescale",
        CEILING,
        "-m",
        "720",
        "--to",
        "24",
        "--out",
        tmp_path / "a",
        "--engine",
        "local",
        "--output",
        "patch",
    )
    assert result.exit_code == 0, result.stderr
    patch = json.loads(result.stdout)
    assert patch["spec"]["job"]["parallelism"] == 24
    assert patch["spec"]["flinkConfiguration"]["pipeline.max-parallelism"] == "720"
    result = kg(
        "rescale",
        CEILING,
        "-m",
        "720",
        "--out",
        tmp_path / "b",
        "--engine",
        "local",
        "--output",
        "patch",
        "--patch-format",
        "yaml",
    )
    assert yaml.safe_load(result.stdout)["spec"]["job"]["initialSavepointPath"] == str(tmp_path / "b")
    result = kg(
        "rescale", CEILING, "-m", "720", "--out", tmp_path / "c", "--engine", "local", "--output", "snapshot"
    )
    snapshot = json.loads(result.stdout)
    assert validate_resource(snapshot) == [] and snapshot["spec"]["savepoint"]["alreadyExists"] is True


def test_kg_as_installed_reads_a_json_list_from_kubectl(tmp_path):
    """``kubectl get flinkdeployment,flinkstatesnapshot -o json``: a List, read by the kg process itself."""
    deployment, snapshot = _docs()
    snapshot["status"]["path"] = str(SAVEPOINT)
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [deployment, snapshot]}))
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "keygroup_cli", "inspect", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deployment"]["resolved"] == str(SAVEPOINT)


def test_bad_resources_are_one_line_errors(kg, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: flink.apache.org/v1beta1\nkind: FlinkDeployment\nmetadata: {name: x}\n"
        "spec: {job: {parallelism: many}}\n"
    )
    result = kg("check", path)
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.count("\n") == 1 and "spec.job.parallelism 'many' is not an integer" in result.stderr
    deployment, _ = _docs()
    deployment["spec"]["flinkConfiguration"].pop("execution.checkpointing.dir")
    path.write_text(yaml.safe_dump(deployment))
    result = kg("inspect", path, "--json")
    assert result.exit_code == ExitCode.USAGE and result.json()["error"]["code"] == "K8S_NO_STATE"


def test_dry_run_prints_the_patch_the_run_prints_and_writes_nothing(kg, tmp_path):
    out = tmp_path / "sp-m720-p24"
    args = ("rescale", CEILING, "-m", "720", "--to", "24", "--out", out, "--engine", "local")
    dry = kg(*args, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert not out.exists()
    planned = dry.json()
    assert planned["command"] == "plan"
    assert {op["to_max_parallelism"] for op in planned["operators"] if op["has_state"]} == {720}
    only_patch = kg(*args, "--dry-run", "--output", "patch")
    only_snapshot = kg(*args, "--dry-run", "--output", "snapshot", "--patch-format", "yaml")
    text = kg(*args, "--dry-run")
    assert not out.exists()
    done = kg(*args, "--json")
    assert done.exit_code == 0, done.stderr
    # Every field, the FlinkStateSnapshot's name (with the checkpoint id the rescale keeps) and format
    # included: the dry run's patch is the run's.
    assert planned["patch"] == done.json()["patch"]
    assert planned["patch"]["merge_patch"]["spec"]["job"]["initialSavepointPath"] == str(out)
    assert json.loads(only_patch.stdout) == done.json()["patch"]["merge_patch"]
    assert yaml.safe_load(only_snapshot.stdout) == done.json()["patch"]["state_snapshot"]
    assert "Patch for FlinkDeployment" in text.stdout and str(out) in text.stdout
    assert "kubectl patch flinkdeployment ceiling-demo" in text.stdout
    # With the savepoint written, the same dry run is refused as the rescale is: DEST exists.
    again = kg(*args, "--dry-run", "--output", "patch")
    assert again.exit_code == ExitCode.USAGE and again.stdout == ""

"""Lift the autoscaler's ceiling, proven in real Flink 2.3 (issue #42; marker ``flink``).

The bundled FlinkDeployment (fixtures/k8s/autoscaler-ceiling) starts from a real savepoint at
maxParallelism 128, so Flink refuses any parallelism above 128. ``kg rescale deployment.yaml -m 720 --to P
--output patch`` writes a savepoint at maxParallelism 720 and prints the merge patch; the test applies the
patch to the deployment (RFC 7386, as ``kubectl patch --type merge``) and restores what the patched
deployment names, at the parallelism and maxParallelism it names, in real Flink: once in a job that sets no
maxParallelism (Flink adopts the state's 720) and once in a job that sets it (``pipeline.max-parallelism``
720). Both restores must hold exactly the savepoint's state (expected-state.json), every key on the subtask
Flink's key-group math gives it at (P, 720). P is 200, the autoscaler's default ceiling
(``job.autoscaler.vertex.max-parallelism``): a MiniCluster of 200 subtasks per operator ran on this
2-core machine (README of tests/restore).
"""

from __future__ import annotations

import json

import pytest
import yaml

from keygroup_cli.core.errors import ExitCode
from tests.conftest import FIXTURES
from tests.k8s.crd_schema import merge_patch, validate_resource
from tests.restore.conftest import RestoreRunner
from tests.restore.harness import RestoreRequest, assert_restored_like_expected, case_json, restore_error

pytestmark = pytest.mark.flink

DEPLOYMENT = FIXTURES / "k8s" / "autoscaler-ceiling" / "deployment.yaml"
CASE = "heap-files-p3-maxp128-long"
#: The parallelism the rescaled savepoint is restored at (the autoscaler's default ceiling).
PARALLELISM = 200
MAX_PARALLELISM = 720


def test_a_rescaled_savepoint_restores_where_the_patch_points(
    kg, tmp_path, restore_savepoints: RestoreRunner
):
    # Before: the state's maxParallelism 128 is the ceiling; kg plan says so and proposes one N divides.
    plan = kg("plan", DEPLOYMENT, "--autoscaler-max", str(PARALLELISM), "--json")
    assert plan.exit_code == 0, plan.stderr
    assert plan.json()["autoscaler"]["allowed"] is False
    out = tmp_path / "sp-m720"
    result = kg(
        "rescale",
        DEPLOYMENT,
        "-m",
        str(MAX_PARALLELISM),
        "--to",
        str(PARALLELISM),
        "--out",
        out,
        "--engine",
        "local",
        "--output",
        "patch",
    )
    assert result.exit_code == 0, result.stderr
    deployment, _ = [d for d in yaml.safe_load_all(DEPLOYMENT.read_text()) if d]
    patched = merge_patch(deployment, json.loads(result.stdout))
    assert validate_resource(patched) == []
    job, config = patched["spec"]["job"], patched["spec"]["flinkConfiguration"]
    savepoint, p, max_p = (
        job["initialSavepointPath"],
        job["parallelism"],
        int(config["pipeline.max-parallelism"]),
    )
    assert (savepoint, p, max_p) == (str(out), PARALLELISM, MAX_PARALLELISM)
    assert job["savepointRedeployNonce"] == 1
    patched_file = tmp_path / "patched.yaml"
    patched_file.write_text(yaml.safe_dump(patched))
    check = kg("check", patched_file)
    assert check.exit_code == 0, check.stdout + check.stderr

    original = FIXTURES / "flink" / "2.3" / CASE
    requests = [
        RestoreRequest(savepoint, p, 0, "long", "hashmap", timeout_seconds=600),  # the job sets none
        RestoreRequest(
            savepoint, p, max_p, "long", "hashmap", timeout_seconds=600
        ),  # pipeline.max-parallelism
        RestoreRequest(original, p, 0, "long", "hashmap"),  # the ceiling: refused
    ]
    dumps = restore_savepoints(requests)
    expected = case_json(CASE, "expected-state.json")
    for dump in dumps[:2]:
        assert_restored_like_expected(dump, expected, p, max_p, "long")
    refused = restore_error(dumps[2]) or ""
    assert (
        "The maximum parallelism (128) of the restored state is lower than the configured parallelism (200)"
        in refused
    )
    # kg check said so before Flink did.
    before = kg("check", DEPLOYMENT, "-p", str(PARALLELISM))
    assert (
        before.exit_code == ExitCode.CHECK_FAILED
        and "PARALLELISM_EXCEEDS_MAX_PARALLELISM"
        in kg("check", DEPLOYMENT, "-p", str(PARALLELISM), "--json").stdout
    )

"""kg rescale: results, refusals that write nothing, and crashes that leave nothing behind."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from keygroup_cli.execution.jobs import snapshot as tasks
from keygroup_cli.snapshot import open_snapshot
from tests.execution.snapshots import generate, keyed_rows, tree_digest

FLINK_23 = Path(__file__).parents[2] / "fixtures" / "flink" / "2.3"


@pytest.fixture
def source(tmp_path):
    return generate(tmp_path / "in", ("counter", "string", 600, 3, 10), ("blob", "binary", 200, 2, 128))


def test_from_selects_the_operators_at_that_parallelism(kg, source, tmp_path):
    # `--from 3 --to 4` on a job whose other operator runs at 2: the operators at 3 move, the others stay.
    result = kg(
        "rescale",
        source,
        "--from",
        "3",
        "--to",
        "4",
        "--out",
        tmp_path / "out",
        "--engine",
        "local",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    ops = {op["uid"]: op for op in result.json()["operators"]}
    assert (ops["counter"]["rescaled"], ops["counter"]["to_parallelism"]) == (True, 4)
    assert (ops["blob"]["rescaled"], ops["blob"]["to_parallelism"]) == (False, 2)


def _leftovers(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir() if p.name != "in")


def test_rescale_local_json(kg, source, tmp_path):
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "local", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    # Without --from every operator goes to 4: blob (at 2, beside counter at 3) is named, once committed.
    (warning,) = doc["warnings"]
    assert "'blob' at 2" in warning and "--from 3 rescales only the operators at 3" in warning
    assert result.stderr == f"kg: warning: {warning}\n"
    assert doc["command"] == "rescale" and doc["engine"] == "local"
    assert doc["output"] == str(tmp_path / "out")
    counter = next(op for op in doc["operators"] if op["uid"] == "counter")
    assert (counter["from_parallelism"], counter["to_parallelism"]) == (3, 4)
    assert [s["subtask"] for s in counter["subtasks"]] == [0, 1, 2, 3]
    assert sum(s["keyed_rows"] for s in counter["subtasks"]) == counter["keyed_rows"]
    manifest = open_snapshot(tmp_path / "out").manifest
    assert manifest.origin["kind"] == "rescale"
    assert [f.rows for f in manifest.operator("counter").keyed_files] == [
        s["keyed_rows"] for s in counter["subtasks"]
    ]
    assert doc["moved_rows"] == sum(op["moved_rows"] for op in doc["operators"]) > 0


def test_rescale_text_summary(kg, source, tmp_path):
    result = kg("rescale", source, "--to", "2", "--out", tmp_path / "out", "--engine", "local")
    assert result.exit_code == 0, result.stderr
    assert "keyed rows moved; engine local" in result.stdout
    assert f"wrote kg snapshot {tmp_path / 'out'}\n" in result.stdout


@pytest.mark.spark
def test_rescale_spark_engine_is_quiet_and_equal_to_local(kg, spark, source, tmp_path):
    spark_run = kg("rescale", source, "--to", "4", "--out", tmp_path / "s", "--json", "--engine", "spark")
    assert spark_run.exit_code == 0, spark_run.stderr
    assert spark_run.json()["engine"] == "spark"
    local_run = kg("rescale", source, "--to", "4", "--out", tmp_path / "l", "--engine", "local", "--json")
    assert local_run.exit_code == 0
    # Spark adds nothing to stderr: both engines print only kg's own warning (the snapshot's operators
    # run at 3 and 2 and no --from was given).
    assert spark_run.stderr == local_run.stderr
    assert spark_run.stderr.count("\n") == 1
    assert spark_run.stderr.startswith("kg: warning: without --from or --operator every operator is rescaled")
    spark_files = sorted((tmp_path / "s").rglob("*.parquet"))
    local_files = sorted((tmp_path / "l").rglob("*.parquet"))
    assert [p.relative_to(tmp_path / "s") for p in spark_files] == [
        p.relative_to(tmp_path / "l") for p in local_files
    ]
    for a, b in zip(spark_files, local_files, strict=True):
        assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--to", "11"],
            2,
            "kg: error: --to 11 is above the state's maxParallelism 10: Maximum parallelism must not be "
            "smaller than parallelism. (pass -m 128 to change maxParallelism as well, or --to 10 or less)\n",
        ),
        (
            ["--to", "0"],
            2,
            "kg: error: --to 0: Operator parallelism not within bounds: 0 (Flink allows a parallelism of 1 "
            "to 32768)\n",
        ),
        (["--to", "4", "--from", "5"], 2, "--from 5 does not match operator 'counter'"),
        (
            ["--to", "4", "--from", "2", "--operator", "counter"],
            2,
            "--from 2 does not match operator 'counter'",
        ),
        (["--to", "4", "--operator", "nope"], 2, "no operator 'nope' in the snapshot"),
        (["--to", "4", "-m", "64"], 4, "operator 'blob' has binary keys"),
        (["--to", "4", "-m", "32769"], 2, "Operator parallelism not within bounds: 32769"),
    ],
)
def test_refusals_write_nothing(kg, source, tmp_path, args, code, message):
    before = tree_digest(source)
    result = kg("rescale", source, "--out", tmp_path / "out", "--engine", "local", *args)
    assert result.exit_code == code
    assert result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert _leftovers(tmp_path) == []
    assert tree_digest(source) == before


def test_existing_destination_is_refused(kg, source, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "local", "--json")
    assert result.exit_code == 2
    assert result.json()["error"]["code"] == "DESTINATION_EXISTS"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


def test_corrupt_input_is_refused_with_exit_3(kg, source, tmp_path):
    victim = source / open_snapshot(source).manifest.operator("counter").keyed_files[1].path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "local")
    assert result.exit_code == 3
    assert (
        result.stderr.startswith("kg: error: ") and "xxh64" in result.stderr and victim.name in result.stderr
    )
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("failure", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_a_crash_mid_way_leaves_no_destination_and_a_rerun_succeeds(
    kg, source, tmp_path, monkeypatch, failure
):
    before = tree_digest(source)
    real = tasks.write_operator_state

    def crash(*args, **kwargs):
        raise failure

    monkeypatch.setattr(tasks, "write_operator_state", crash)
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "local")
    assert result.exit_code == (130 if isinstance(failure, KeyboardInterrupt) else 70)
    assert _leftovers(tmp_path) == []
    assert tree_digest(source) == before
    monkeypatch.setattr(tasks, "write_operator_state", real)
    again = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "local")
    assert again.exit_code == 0, again.stderr
    assert keyed_rows(tmp_path / "out", "counter").equals(keyed_rows(source, "counter"))


def test_output_verification_failure_commits_nothing(kg, source, tmp_path, monkeypatch):
    from keygroup_cli.execution.routes import snapshot as rescale_module

    real = rescale_module.build_manifest

    def lying(snapshot, plan, result):
        manifest = real(snapshot, plan, result)
        op = manifest.operators[0]
        files = (replace(op.keyed_files[0], xxh64="0" * 16), *op.keyed_files[1:])
        return replace(manifest, operators=(replace(op, keyed_files=files), *manifest.operators[1:]))

    monkeypatch.setattr(rescale_module, "build_manifest", lying)
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "local")
    assert result.exit_code == 5
    assert result.stderr.startswith("kg: error: output verification failed: ")
    assert _leftovers(tmp_path) == []


def test_missing_java_is_exit_6_and_one_line(kg, source, tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    # As in a fresh process: no session, no running SparkContext (the test run's shared one is hidden).
    monkeypatch.setattr("pyspark.sql.SparkSession.getActiveSession", classmethod(lambda cls: None))
    monkeypatch.setattr("pyspark.SparkContext._active_spark_context", None)
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "spark")
    assert result.exit_code == 6
    assert result.stderr.count("\n") == 1 and "JAVA_HOME=" in result.stderr and "Java 17" in result.stderr
    assert not (tmp_path / "out").exists()


def test_input_is_never_modified(kg, source, tmp_path):
    before = tree_digest(source)
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    assert kg("rescale", source, "--to", "5", "--out", tmp_path / "out", "--engine", "local").exit_code == 0
    assert (
        kg(
            "rescale",
            source,
            "--to",
            "5",
            "-m",
            "64",
            "--operator",
            "counter",
            "--out",
            tmp_path / "o2",
            "--engine",
            "local",
        ).exit_code
        == 0
    )
    assert tree_digest(source) == before == tree_digest(copy)


@pytest.mark.parametrize(
    "args", [["--to", "4"], ["--to", "7", "-m", "64", "--operator", "counter"], ["--to", "1"]]
)
def test_rescaled_output_verifies_and_diffs_equal_to_the_input(kg, source, tmp_path, args):
    out = tmp_path / "out"
    assert kg("rescale", source, "--out", out, "--engine", "local", *args).exit_code == 0
    verify = kg("verify", out)
    assert verify.exit_code == 0, verify.stdout + verify.stderr
    diff = kg("diff", source, out, "--json")
    assert diff.exit_code == 0, diff.stdout
    assert all(op["same"] for op in diff.json()["operators"])


def test_max_parallelism_change_keeps_operators_without_keyed_state(kg, tmp_path):
    # A converted real savepoint has operator-state-only operators; their (empty) key groups are
    # renumbered too, which the output check must accept.
    from tests.conftest import FIXTURES

    converted = tmp_path / "converted"
    source = FIXTURES / "flink" / "2.3" / "heap-inline-p3-maxp10-string"
    assert kg("convert", str(source), "--out", str(converted), "-q").exit_code == 0
    out = tmp_path / "rescaled"
    result = kg(
        "rescale",
        str(converted),
        "--to",
        "4",
        "--max-parallelism",
        "64",
        "--out",
        str(out),
        "--engine",
        "local",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert kg("verify", str(out)).exit_code == 0
    assert kg("diff", str(converted), str(out)).exit_code == 0
    doc = kg("inspect", str(out), "--json").json()
    assert {op["max_parallelism"] for op in doc["operators"]} == {64}


def test_spark_in_a_fresh_process_keeps_stdout_and_stderr_clean(source, tmp_path):
    # Spark started by kg runs its own JVM: its console output must go to kg's log, not to our streams.
    import json
    import subprocess
    import sys

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "keygroup_cli",
            "rescale",
            str(source),
            "--to",
            "4",
            "--out",
            str(tmp_path / "o"),
            "--json",
            "--engine",
            "spark",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["engine"] == "spark"  # exactly one JSON document
    assert "WARN" not in run.stderr and "log4j" not in run.stderr.lower() and "Exception" not in run.stderr


def test_wall_seconds_include_the_input_check(kg, source, tmp_path, monkeypatch):
    # The JSON's wall_seconds is what the user waited: the check of the input before the rescale counts.
    import time

    import keygroup_cli.execution.routes.rescale as router

    real = router.require_intact

    def slow(*args, **kwargs):
        time.sleep(1.5)
        return real(*args, **kwargs)

    # The gate runs inside rescale() (for every caller), before the route.
    monkeypatch.setattr(router, "require_intact", slow)
    result = kg("rescale", source, "--to", "4", "--out", tmp_path / "out", "--engine", "local", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["wall_seconds"] >= 1.5


def test_workers_from_the_option_or_the_environment_give_the_same_savepoint(kg, tmp_path, monkeypatch):
    savepoint = FLINK_23 / "heap-files-p3-maxp128-long"
    outs = []
    for label, args, env in (("one", ["--workers", "1"], None), ("three", [], "3")):
        if env is None:
            monkeypatch.delenv("KG_WORKERS", raising=False)
        else:
            monkeypatch.setenv("KG_WORKERS", env)
        out = tmp_path / label
        result = kg("rescale", savepoint, "--to", "4", "-m", "512", "--out", out, "--engine", "local", *args)
        assert result.exit_code == 0, result.stderr
        outs.append(out)
    keyed = [sorted(p.read_bytes() for p in out.iterdir() if p.name != "_metadata") for out in outs]
    assert keyed[0] == keyed[1] and len(keyed[0]) >= 4
    monkeypatch.setenv("KG_WORKERS", "none")
    result = kg("rescale", savepoint, "--to", "4", "--out", tmp_path / "bad", "--engine", "local")
    assert result.exit_code == 2 and "KG_WORKERS" in result.stderr and not (tmp_path / "bad").exists()
    monkeypatch.delenv("KG_WORKERS")
    result = kg("rescale", savepoint, "--to", "4", "--out", tmp_path / "bad", "--workers", "0")
    assert result.exit_code == 2 and "0 is not in the range x>=1" in result.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize(("soft", "hard", "code"), [(64, 4096, 0), (200, 200, 5)])
def test_a_re_key_under_a_low_open_file_limit_raises_it_or_says_why_in_one_line(tmp_path, soft, hard, code):
    # macOS shells allow 256 open files by default; four re-key workers may keep 4 x 256 spill files open
    # (this small savepoint fills fewer: a soft limit of 64 is too low for it).
    import os
    import resource
    import subprocess
    import sys

    from tests.conftest import FIXTURES

    out = tmp_path / "out"
    args = ["rescale", FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long", "--from", "3", "--to", "4"]
    args += ["-m", "1024", "--engine", "local", "--out", out]
    run = subprocess.run(
        [sys.executable, "-m", "keygroup_cli", *map(str, args)],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        env={**os.environ, "KG_WORKERS": "4"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == code, run.stderr
    if code:
        assert run.stderr.strip().startswith("kg: error: this rescale keeps 256 spill files open")
        assert "ulimit -n" in run.stderr and len(run.stderr.strip().splitlines()) == 1
        assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []
    else:
        check = subprocess.run(
            [sys.executable, "-m", "keygroup_cli", "check", str(out), "-p", "4", "-m", "1024"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert check.returncode == 0, check.stdout

"""``kg doctor``: Python, kg, Java, extras and a verdict per capability; no JVM unless ``--spark``."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.execution import environment
from keygroup_cli.execution.environment import Java, SparkProbe

Kg = Callable[..., Any]

#: The real subprocess.run: the autouse fixture makes any process kg doctor starts fail the test.
RUN = subprocess.run

CAPABILITIES = ["core", "local", "spark", "ha", "rocksdb", "rocksdb-merge", "native", "flink-tests"]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No KG_* or Spark variables from the machine running the tests, and no java -version."""
    for name in [*environment.ENVIRONMENT, *(k for k in __import__("os").environ if k.startswith("KG_"))]:
        if name not in ("COLUMNS", "NO_COLOR", "JAVA_HOME"):
            monkeypatch.delenv(name, raising=False)

    def no_jvm(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"kg doctor ran a process: {args}")

    monkeypatch.setattr(environment.subprocess, "run", no_jvm)


def _java_home(tmp_path: Path, version: str, vendor: str = "Eclipse Adoptium") -> Path:
    home = tmp_path / f"jdk-{version}"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\nexit 0\n")
    java.chmod(0o755)
    (home / "release").write_text(f'IMPLEMENTOR="{vendor}"\nJAVA_VERSION="{version}"\nOS_NAME="Linux"\n')
    return home


def _capabilities(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["capabilities"]}


def test_json_document(kg: Kg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_java_home(tmp_path, "17.0.12")))
    result = kg("doctor", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc = result.json()
    assert doc["schema_version"] == 3 and doc["command"] == "doctor" and doc["ok"] is True
    assert "error" not in doc
    assert doc["python"] == {
        "executable": sys.executable,
        "version": ".".join(map(str, sys.version_info[:3])),
        "implementation": "CPython",
    }
    assert doc["kg"]["version"] == "0.1.0"
    assert doc["kg"]["location"] == str(Path(environment.keygroup_cli.__file__).resolve().parent)
    assert doc["kg"]["install"] in ("site-packages", "editable", "source checkout (not installed)")
    assert doc["java"] == {
        "launcher": str(tmp_path / "jdk-17.0.12" / "bin" / "java"),
        "java_home": str(tmp_path / "jdk-17.0.12"),
        "home": str(tmp_path / "jdk-17.0.12"),
        "version": "17.0.12",
        "major": 17,
        "vendor": "Eclipse Adoptium",
        "version_line": None,
        "problem": None,
    }
    packages = {p["name"]: p for p in doc["packages"]}
    assert packages["pyarrow"]["group"] == "core" and packages["pyarrow"]["status"] == "ok"
    assert packages["pyspark"]["group"] == "spark" and packages["rocksdict"]["group"] == "rocksdb"
    assert [c["name"] for c in doc["capabilities"]] == CAPABILITIES
    found = _capabilities(doc)
    assert found["core"]["status"] == "ok" and found["local"]["status"] == "ok"
    assert doc["spark"] is None
    assert doc["environment"] == {
        "JAVA_HOME": str(tmp_path / "jdk-17.0.12"),
        "NO_COLOR": "1",
        "COLUMNS": "120",
    }


def test_no_jvm_and_no_pyspark_without_spark() -> None:
    code = (
        "import sys; from keygroup_cli.cli import run; code = run(['doctor', '--json']); "
        "sys.stderr.write(str(sorted(m for m in ('pyspark', 'py4j') if m in sys.modules))); sys.exit(code)"
    )
    done = RUN([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "[]"


def test_spark_is_ready_with_pyspark_and_java_17(
    kg: Kg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_java_home(tmp_path, "21.0.4")))
    monkeypatch.setattr(
        environment, "_pyspark", lambda version: environment.Package("pyspark", None, "spark", "4.0.1")
    )
    spark = _capabilities(kg("doctor", "--json").json())["spark"]
    assert spark == {
        "name": "spark",
        "enables": "rescale --engine spark",
        "status": "ready",
        "detail": "pyspark 4.0.1, Java 21.0.4; not started (--spark starts it)",
        "fix": None,
    }
    assert kg("doctor", "--require", "spark").exit_code == 0


def test_an_old_java_fails_what_asks_for_spark(
    kg: Kg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_java_home(tmp_path, "1.8.0_392")))
    monkeypatch.setattr(
        environment, "_pyspark", lambda version: environment.Package("pyspark", None, "spark", "4.0.1")
    )
    relaxed = kg("doctor", "--json")
    assert relaxed.exit_code == 0  # nobody asked for Spark
    assert _capabilities(relaxed.json())["spark"]["status"] == "broken"
    result = kg("doctor", "--require", "spark", "--json")
    assert result.exit_code == 6
    doc = result.json()
    assert doc["ok"] is False
    java = tmp_path / "jdk-1.8.0_392" / "bin" / "java"
    message = f"spark: Java 1.8.0_392 at {java} is older than 17 ({environment.INSTALL_JAVA})"
    assert doc["error"] == {"code": "JAVA_TOO_OLD", "message": message}
    assert result.stderr == f"kg: error: {message}\n"


def test_missing_extras_are_reported_and_fail_only_when_required(
    kg: Kg, monkeypatch: pytest.MonkeyPatch
) -> None:
    packages = [
        ("kg-no-such-binding", "kg_no_such_binding", group) if name == "rocksdict" else (name, module, group)
        for name, module, group in environment.PACKAGES
    ]
    monkeypatch.setattr(environment, "PACKAGES", tuple(packages))
    doc = kg("doctor", "--json").json()
    assert doc["ok"] is True
    rocksdb = _capabilities(doc)["rocksdb"]
    assert rocksdb["status"] == "missing"
    assert rocksdb["detail"] == "kg-no-such-binding is not installed"
    assert rocksdb["fix"] == environment.INSTALL["rocksdb"]
    assert rocksdb["fix"].startswith(
        "pip install -e '.[rocksdb]' in kg's checkout, or the kg wheel with [rocksdb]"
    )
    assert _capabilities(doc)["rocksdb-merge"]["status"] == "missing"
    required = kg("doctor", "--require", "ha", "--require", "rocksdb")
    assert required.exit_code == 6
    assert required.stderr == (
        f"kg: error: rocksdb: kg-no-such-binding is not installed ({environment.INSTALL['rocksdb']})\n"
    )
    assert "FAILED: rocksdb (exit 6)" in required.stdout
    assert kg("doctor", "--require", "rocksdb", "--json").json()["error"]["code"] == "ROCKSDB_BINDING_MISSING"


def test_a_broken_core_dependency_is_exit_6(kg: Kg, monkeypatch: pytest.MonkeyPatch) -> None:
    packages = [("pyarrow", "kg_no_such_module", "core"), *environment.PACKAGES]
    monkeypatch.setattr(environment, "PACKAGES", tuple(packages))
    result = kg("doctor", "--json")
    assert result.exit_code == 6
    doc = result.json()
    assert doc["error"]["code"] == "CORE_DEPENDENCY_BROKEN"
    core = _capabilities(doc)["core"]
    assert core["status"] == "broken"
    assert (
        core["detail"].startswith("pyarrow ")
        and "ModuleNotFoundError: No module named 'kg_no_such_module'" in core["detail"]
    )


def test_java_home_without_java(kg: Kg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    doc = kg("doctor", "--json").json()
    assert doc["java"]["problem"] == f"JAVA_HOME={tmp_path} has no executable bin/java"
    assert _capabilities(doc)["flink-tests"]["status"] in ("broken", "missing")
    result = kg("doctor", "--require", "flink-tests", "--json")
    if _capabilities(doc)["flink-tests"]["status"] == "broken":
        assert result.json()["error"]["code"] == "JAVA_HOME_BROKEN"


def test_no_java_at_all(kg: Kg, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    doc = kg("doctor", "--json").json()
    assert doc["java"]["launcher"] is None
    assert doc["java"]["problem"] == "no java on PATH and JAVA_HOME is not set"


def test_environment_variables_that_change_behaviour(kg: Kg, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_TABLE", "plain")
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    monkeypatch.setenv("KG_TABEL", "tsv")
    doc = kg("doctor", "--json").json()
    assert {k: v for k, v in doc["environment"].items() if k not in ("JAVA_HOME", "NO_COLOR", "COLUMNS")} == {
        "KG_TABLE": "plain",
        "PYSPARK_PYTHON": "/opt/py/bin/python",
        "KG_TABEL": "tsv",
    }
    text = kg("doctor", "--table", "tsv").stdout.splitlines()
    assert "KG_TABLE\tplain  (default of --table)" in text
    assert "KG_TABEL\ttsv  (not a variable kg reads)" in text


def test_text_report(kg: Kg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_java_home(tmp_path, "17.0.12")))
    result = kg("doctor", "--table", "plain")
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split(maxsplit=1) == ["Python", f"{sys.version.split()[0]} (CPython) {sys.executable}"]
    assert lines[2] == f"Java       17.0.12 (Eclipse Adoptium) {tmp_path}/jdk-17.0.12/bin/java"
    assert lines[3] == f"JAVA_HOME  {tmp_path}/jdk-17.0.12"
    assert "Packages" in lines and "Capabilities" in lines
    table = lines[lines.index("Capabilities") + 1 :]
    assert table[0].split() == ["capability", "status", "detail"]
    assert [row.split()[:2] for row in table[1:3]] == [["core", "ok"], ["local", "ok"]]
    assert lines[-1] == "OK: kg's core works; " + lines[-1].split("; ")[1]


def test_spark_probe_failure_is_exit_6(kg: Kg, monkeypatch: pytest.MonkeyPatch) -> None:
    failed = SparkProbe(False, 1.5, code="SPARK_GATEWAY_FAILED", message="Spark's Java gateway did not start")
    seen: list[str | None] = []

    def probe(master: str | None) -> tuple[SparkProbe, Java]:
        seen.append(master)
        return failed, environment.find_java()

    monkeypatch.setattr(environment, "probe_spark", probe)
    result = kg("doctor", "--spark", "--master", "spark://host:7077", "--json")
    assert seen == ["spark://host:7077"]
    assert result.exit_code == 6
    doc = result.json()
    assert doc["spark"] == {
        "ok": False,
        "version": None,
        "master": None,
        "seconds": 1.5,
        "code": "SPARK_GATEWAY_FAILED",
        "message": "Spark's Java gateway did not start",
    }
    assert doc["error"] == {
        "code": "SPARK_GATEWAY_FAILED",
        "message": "spark: Spark's Java gateway did not start",
    }


def test_spark_probe_runs_the_engines_own_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from keygroup_cli.core.errors import MissingDependencyError
    from keygroup_cli.execution import engines as execution

    asked: list[Any] = []

    def get_executor(name: str, **options: Any) -> Any:
        asked.append((name, options))
        raise MissingDependencyError("pyspark is not installed: pip install ...", code="PYSPARK_MISSING")

    monkeypatch.setattr(execution, "get_executor", get_executor)
    monkeypatch.setattr(environment, "java_version_line", lambda java: java)
    probe, _java = environment.probe_spark("local[2]")
    assert asked == [("spark", {"master": "local[2]"})]
    assert (probe.ok, probe.code, probe.message) == (
        False,
        "PYSPARK_MISSING",
        "pyspark is not installed: pip install ...",
    )


@pytest.mark.spark
def test_spark_starts(kg: Kg, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # a real java -version, a real session
    result = kg("doctor", "--spark", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["spark"]["ok"] is True and doc["spark"]["version"]
    assert doc["java"]["version_line"].startswith(("openjdk version", "java version"))
    assert _capabilities(doc)["spark"]["status"] == "ok"


def test_exit_codes_md_lists_every_code_of_doctor_and_completion() -> None:
    # The codes kg doctor can put in "error", read from the module that decides them, and completion's.
    root = Path(__file__).resolve().parents[2]
    source = (root / "keygroup_cli" / "execution" / "environment.py").read_text()
    codes = set(re.findall(r'"([A-Z][A-Z0-9_]+_(?:MISSING|BROKEN|OLD))"', source)) | {
        "SPARK_GATEWAY_FAILED",
        "SPARK_WORKER_FAILED",
        "UNKNOWN_SHELL",
    }
    assert len(codes) >= 13
    page = (root / "docs" / "reference" / "exit-codes.md").read_text()
    assert sorted(c for c in codes if f"`{c}`" not in page) == []

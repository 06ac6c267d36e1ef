"""execution.environment: Java found as Spark finds it, versions without a JVM, variables kg reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.execution import environment
from keygroup_cli.execution.environment import Java, Package


@pytest.mark.parametrize(
    ("version", "major"),
    [("17.0.15", 17), ("1.8.0_392", 8), ("21", 21), ("11.0.2+9", 11), (None, None), ("weird", None)],
)
def test_java_major(version: str | None, major: int | None) -> None:
    assert Java("/bin/java", None, "/", version).major == major


def _launcher(path: Path) -> Path:
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_java_on_path_is_resolved_to_its_home_and_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "jvm" / "jdk-17"
    _launcher(home / "bin" / "java")
    (home / "release").write_text(
        'IMPLEMENTOR="Debian"\nJAVA_VERSION="17.0.15"\nMODULES="java.base java.se"\n'
    )
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").symlink_to(home / "bin" / "java")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    java = environment.find_java()
    assert java == Java(str(tmp_path / "bin" / "java"), None, str(home), "17.0.15", vendor="Debian")


def test_a_jdk_8_jre_launcher_reads_the_jdks_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jdk = tmp_path / "jdk8"
    _launcher(jdk / "jre" / "bin" / "java")
    (jdk / "release").write_text('JAVA_VERSION="1.8.0_392"\n')
    monkeypatch.setenv("JAVA_HOME", str(jdk / "jre"))
    java = environment.find_java()
    assert (java.version, java.major, java.problem) == ("1.8.0_392", 8, None)


def test_no_release_file_leaves_the_version_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _launcher(tmp_path / "j" / "bin" / "java")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "j"))
    java = environment.find_java()
    assert java.version is None and java.problem is None
    spark = environment._spark(Package("pyspark", None, "spark", "4.0.1"), java, None)
    assert (spark.status, spark.detail) == (
        "ready",
        "pyspark 4.0.1, Java (version unknown); not started (--spark starts it)",
    )


def test_java_version_line_reads_the_first_line(tmp_path: Path) -> None:
    java = _launcher(tmp_path / "j" / "bin" / "java")
    java.write_text("#!/bin/sh\necho 'openjdk version \"21.0.4\" 2024-07-16' >&2\necho second >&2\n")
    found = environment.java_version_line(Java(str(java), None, str(tmp_path / "j"), None))
    assert (found.version_line, found.version, found.major) == (
        'openjdk version "21.0.4" 2024-07-16',
        "21.0.4",
        21,
    )
    java.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    broken = environment.java_version_line(Java(str(java), None, None, "21"))
    assert (broken.code, broken.problem) == ("JAVA_BROKEN", f"{java} -version exited 3")


def test_environment_lists_what_kg_reads_and_unknown_kg_variables() -> None:
    found = environment._environment(
        {"PYSPARK_PYTHON": "/p", "HOME": "/h", "KG_ENIGNE": "local", "KG_ENGINE": "x"}
    )
    assert found == (
        ("KG_ENGINE", "x", "default of kg rescale --engine"),
        (
            "PYSPARK_PYTHON",
            "/p",
            "the Python of Spark's workers (default in local mode: kg's own interpreter)",
        ),
        ("KG_ENIGNE", "local", "not a variable kg reads"),
    )


def test_every_kg_variable_of_an_option_is_known() -> None:
    from tests.test_docs import _options

    for options in _options().values():
        for option in options:
            if option.envvar:
                assert option.envvar in environment.ENVIRONMENT, option.envvar


def test_a_package_that_is_missing_or_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    assert environment._package("kg-no-such-dist", "kg_no_such_module", "ha").status == "missing"
    broken = environment._package("pyarrow", "kg_no_such_module", "core")
    assert (
        broken.status == "broken"
        and broken.error == "ModuleNotFoundError: No module named 'kg_no_such_module'"
    )
    # Importable without metadata (a system or vendored copy): usable.
    assert environment._package("kg-no-such-dist", "json", "core") == Package(
        "kg-no-such-dist", "json", "core", "unknown"
    )

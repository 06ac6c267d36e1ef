"""``spark.daemon``: which of Spark's zips on the workers' path are copies of an installed package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from keygroup_cli.execution.engines.spark.daemon import installed_copy, prefer_installed


def _site(root: Path, *, packages: tuple[str, ...] = ("pyspark", "py4j")) -> tuple[str, str, str]:
    lib = root / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    for package in packages:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").write_text("")
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        (lib / name).write_bytes(b"PK")
    return str(root), str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")


def test_a_pip_installs_zips_give_way_to_its_packages(tmp_path: Path) -> None:
    site, spark_zip, py4j_zip = _site(tmp_path / "site-packages")
    path = [spark_zip, py4j_zip, "/work/kg", site]
    assert installed_copy(spark_zip, path) and installed_copy(py4j_zip, path)
    assert prefer_installed(path) == ["/work/kg", site]


def test_zips_stay_when_their_package_is_not_on_the_path_or_not_installed(tmp_path: Path) -> None:
    site, spark_zip, py4j_zip = _site(tmp_path / "site-packages", packages=("pyspark",))
    # The package directory is not on the path: importing pyspark needs the zip.
    assert prefer_installed([spark_zip, py4j_zip, "/elsewhere"]) == [spark_zip, py4j_zip, "/elsewhere"]
    # py4j is not installed beside pyspark: its zip stays, pyspark's goes.
    assert prefer_installed([spark_zip, py4j_zip, site]) == [py4j_zip, site]


def test_a_spark_distributions_zips_stay(tmp_path: Path) -> None:
    # SPARK_HOME/python/lib/pyspark.zip of a distribution: no installed package around it.
    lib = tmp_path / "spark-4.0.0-bin" / "python" / "lib"
    lib.mkdir(parents=True)
    (lib / "pyspark.zip").write_bytes(b"PK")
    path = [str(lib / "pyspark.zip"), str(tmp_path)]
    assert prefer_installed(path) == path
    assert not installed_copy("/opt/other.zip", ["/opt"])


def test_importing_the_daemon_loads_nothing_heavy_and_starts_no_thread() -> None:
    # Every Spark Python worker imports the daemon module: the packages above it (execution, engines, the
    # Spark engine's entry) must not pull in pyarrow, numpy or pyspark, nor start a thread before the fork.
    probe = (
        "import sys, threading\n"
        "import keygroup_cli.execution.engines.spark.daemon\n"
        "heavy = [m for m in ('pyarrow', 'numpy', 'pyspark', 'py4j', 'keygroup_cli.execution.jobs.model')"
        " if m in sys.modules]\n"
        "print(heavy, threading.active_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] 1"

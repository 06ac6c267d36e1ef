"""What kg runs on: Python, kg's own install, Java, pyspark, the optional extras, and what each enables.

``diagnose()`` reads versions from package metadata and from the Java installation's ``release`` file, and
imports the modules kg imports from each extra (a broken binary wheel shows here, not mid-rescale). It
starts no JVM and never imports pyspark, so it takes a fraction of a second. ``probe_spark()`` starts the
Spark engine exactly as ``kg rescale --engine spark`` does (``execution.get_executor("spark")``: a
SparkSession, then one tiny task per core that imports kg in Spark's Python workers) and runs
``java -version``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import keygroup_cli
from keygroup_cli.core.errors import KgError

#: Spark (pyspark 4) and kg's Spark engine need at least this Java.
MIN_JAVA = 17

#: What installs each optional part of kg (the extras of pyproject.toml). kg is on no package index: an
#: extra comes from kg's checkout or its wheel (docs/how-to/install.md#extras).
_EXTRA = (
    "pip install -e '.[{0}]' in kg's checkout, or the kg wheel with [{0}] (docs/how-to/install.md#extras)"
)
INSTALL = {
    "core": "reinstall kg: pip install --force-reinstall -e . in kg's checkout, or its wheel "
    "(docs/how-to/install.md)",
    "spark": _EXTRA.format("spark"),
    "ha": _EXTRA.format("ha"),
    "rocksdb": _EXTRA.format("rocksdb"),
    "rocksdb-merge": _EXTRA.format("rocksdb-merge") + "; aimrocks has wheels for CPython <= 3.12",
    "native": _EXTRA.format("native") + " (optional: KG_NATIVE=0 runs the same code in pure Python)",
    "test": _EXTRA.format("test") + "; apache-flink-libraries==2.3.0",
}
INSTALL_JAVA = (
    "install Java 17 or newer (e.g. apt-get install openjdk-17-jre-headless) or point JAVA_HOME at one"
)

#: (distribution, module kg imports, group). Modules None are not imported: pyspark only ever is in
#: the Spark engine, ``execution/engines/spark/`` (C1), apache-flink-libraries is a bundle of jars for the
#: test suite, and numba (about half a second to import) is imported only where a block is decoded
#: (flink/kernels/native.py).
PACKAGES: tuple[tuple[str, str | None, str], ...] = (
    ("click", "click", "core"),
    ("rich", "rich", "core"),
    ("pyarrow", "pyarrow", "core"),
    ("numpy", "numpy", "core"),
    ("xxhash", "xxhash", "core"),
    ("mmh3", "mmh3", "core"),
    ("google-crc32c", "google_crc32c", "core"),
    ("cramjam", "cramjam", "core"),
    ("pyspark", None, "spark"),
    ("kazoo", "kazoo.client", "ha"),
    ("javaobj-py3", "javaobj.v2", "ha"),
    ("pyyaml", "yaml", "ha"),
    ("rocksdict", "rocksdict", "rocksdb"),
    ("aimrocks", "aimrocks", "rocksdb-merge"),
    ("numba", None, "native"),
    ("apache-flink-libraries", None, "test"),
)

#: Environment variables that change what kg does, and how.
ENVIRONMENT: dict[str, str] = {
    "KG_JSON": "default of --json",
    "KG_QUIET": "default of --quiet",
    "KG_DEBUG": "default of --debug",
    "KG_TABLE": "default of --table",
    "KG_ENGINE": "default of kg rescale --engine",
    "KG_MASTER": "default of kg rescale --master (and kg doctor --master)",
    "KG_CACHE_DIR": "kg's cache: Spark's CDS archive, logs of failed Spark runs, numba's compile cache",
    "KG_NATIVE": "0: pure Python; 1: the [native] extra's kernels; auto (default): them after 32 MiB",
    "KG_PROGRESS": "off: no line per stage on stderr when it is not a terminal (bars are unchanged)",
    "KG_WORKERS": "default of kg rescale --workers (threads of the local re-key and key-group copy)",
    "KG_SPARK_CDS": "0: no class-data-sharing archive of Spark's classes",
    "KG_SCRATCH_DIR": "where object-store inputs are downloaded and remote outputs staged",
    "KG_STATE_ROOTS": "more directories or object-store prefixes an input's state files may lead to",
    "PYSPARK_PYTHON": "the Python of Spark's workers (default in local mode: kg's own interpreter)",
    "PYSPARK_SUBMIT_ARGS": "arguments pyspark passes to spark-submit when it starts the JVM",
    "PYSPARK_GATEWAY_PORT": "set by spark-submit: kg uses that JVM and its --master",
    "SPARK_HOME": "the Spark installation pyspark starts (a different version breaks the gateway)",
    "SPARK_MASTER": "a Spark master: kg rescale's default engine is then spark (as with --master)",
    "SPARK_LOCAL_DIRS": "where Spark tasks spill (the first directory)",
    "JAVA_HOME": "the Java Spark starts (else java on PATH)",
    "AWS_ENDPOINT_URL": "an S3-compatible store (MinIO, Ceph)",
    "NO_COLOR": "no colours",
    "COLUMNS": "width of the text output",
    "SOURCE_DATE_EPOCH": "kg generate: the manifest's created_at",
    "MALLOC_TRIM_THRESHOLD_": "glibc: set (or MALLOC_MMAP_THRESHOLD_, MALLOC_ARENA_MAX, GLIBC_TUNABLES): "
    "kg leaves the allocator as it is",
}


@dataclass(frozen=True, slots=True)
class Package:
    """One distribution kg uses: its version (None: not installed) and whether its module imports."""

    name: str
    module: str | None
    group: str
    version: str | None
    error: str | None = None

    @property
    def status(self) -> str:
        """Return ``ok``, ``missing`` (not installed) or ``broken`` (installed, its import fails)."""
        if self.version is None:
            return "missing"
        return "broken" if self.error else "ok"


@dataclass(frozen=True, slots=True)
class Java:
    """The Java Spark would start: ``JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH."""

    launcher: str | None
    java_home: str | None
    home: str | None
    version: str | None
    vendor: str | None = None
    version_line: str | None = None
    problem: str | None = None
    code: str | None = None

    @property
    def major(self) -> int | None:
        """Return the feature release (8 for ``1.8.0_392``, 17 for ``17.0.15``), None when unknown."""
        found = re.match(r"(?:1\.)?(\d+)", self.version or "")
        return int(found.group(1)) if found else None


@dataclass(frozen=True, slots=True)
class Capability:
    """What kg can do here, with what was found and what fixes it.

    ``status`` is ``ok``, ``ready`` (Spark: all it needs is there, not started), ``missing`` or ``broken``.
    """

    name: str
    enables: str
    status: str
    detail: str
    fix: str | None = None
    code: str | None = None

    @property
    def works(self) -> bool:
        """Return whether the capability can be used (``ok`` or ``ready``)."""
        return self.status in ("ok", "ready")


@dataclass(frozen=True, slots=True)
class SparkProbe:
    """A Spark engine kg started (``ok``), or the one-line error it stopped at."""

    ok: bool
    seconds: float
    version: str | None = None
    master: str | None = None
    code: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Everything ``kg doctor`` reports."""

    python_executable: str
    python_version: str
    python_implementation: str
    kg_version: str
    kg_location: str
    kg_install: str
    kg_source: str | None
    java: Java
    packages: tuple[Package, ...]
    environment: tuple[tuple[str, str, str], ...]
    capabilities: tuple[Capability, ...]
    spark: SparkProbe | None = None

    def capability(self, name: str) -> Capability:
        """Return the capability called ``name``."""
        return next(c for c in self.capabilities if c.name == name)

    def problems(self, required: Iterable[str] = ()) -> tuple[Capability, ...]:
        """Return the capabilities that fail kg doctor: the core, ``required`` ones, a Spark probe's."""
        asked = {"core", *required, *(("spark",) if self.spark is not None else ())}
        return tuple(c for c in self.capabilities if c.name in asked and not c.works)


CAPABILITIES = ("core", "local", "spark", "ha", "rocksdb", "rocksdb-merge", "native", "flink-tests")


def diagnose(spark: SparkProbe | None = None, java: Java | None = None) -> Diagnosis:
    """Return what kg runs on and what it can do, without starting a JVM.

    Args:
        spark: The result of ``probe_spark``, which then decides the ``spark`` capability.
        java: The Java found (``find_java()`` when None).
    """
    java = java or find_java()
    packages = tuple(_package(name, module, group) for name, module, group in PACKAGES)
    location, install, source = _kg_install()
    return Diagnosis(
        python_executable=sys.executable,
        python_version=platform.python_version(),
        python_implementation=platform.python_implementation(),
        kg_version=keygroup_cli.__version__,
        kg_location=location,
        kg_install=install,
        kg_source=source,
        java=java,
        packages=packages,
        environment=_environment(os.environ),
        capabilities=_capabilities(packages, java, spark),
        spark=spark,
    )


def probe_spark(master: str | None = None) -> tuple[SparkProbe, Java]:
    """Start the Spark engine as ``kg rescale --engine spark`` does; return how it went and the Java.

    The session stays up until kg exits (as a rescale's does). Only kg's errors are caught: they are the
    engine's one-line answers (``PYSPARK_MISSING``, ``JAVA_MISSING``, ``SPARK_GATEWAY_FAILED``,
    ``SPARK_WORKER_FAILED``...); anything else is a bug.
    """
    java = java_version_line(find_java())
    start = time.monotonic()
    try:
        # Deferred: the engine's module loads pyarrow and the executors; pyspark only inside it.
        from keygroup_cli.execution.engines import get_executor

        executor = get_executor("spark", master=master)
    except KgError as exc:
        return SparkProbe(False, time.monotonic() - start, code=exc.code, message=exc.message), java
    context = executor.context  # type: ignore[attr-defined]
    seconds = time.monotonic() - start
    return SparkProbe(True, seconds, version=str(context.version), master=str(context.master)), java


def find_java() -> Java:
    """Return the Java Spark would start and its version, as ``engines.spark.require_java`` finds it.

    The version is read from the installation's ``release`` file (``JAVA_VERSION="17.0.15"``): no JVM.
    """
    java_home = os.environ.get("JAVA_HOME") or None
    if java_home:
        launcher = Path(java_home) / "bin" / "java"
        if not (launcher.is_file() and os.access(launcher, os.X_OK)):
            return Java(
                None,
                java_home,
                None,
                None,
                problem=f"JAVA_HOME={java_home} has no executable bin/java",
                code="JAVA_HOME_BROKEN",
            )
    else:
        found = shutil.which("java")
        if found is None:
            return Java(
                None,
                None,
                None,
                None,
                problem="no java on PATH and JAVA_HOME is not set",
                code="JAVA_MISSING",
            )
        launcher = Path(found)
    home = launcher.resolve().parent.parent
    release = _release(home) or _release(home.parent)  # a JDK 8's jre/bin/java: the JDK's release
    return Java(
        str(launcher),
        java_home,
        str(home),
        release.get("JAVA_VERSION"),
        vendor=release.get("IMPLEMENTOR"),
    )


def java_version_line(java: Java, timeout: float = 30) -> Java:
    """Return ``java`` with the first line of ``java -version`` (this starts a JVM, briefly)."""
    if java.launcher is None:
        return java
    try:
        done = subprocess.run(
            [java.launcher, "-version"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return replace(java, problem=f"{java.launcher} -version failed: {exc}", code="JAVA_BROKEN")
    line = next((x.strip() for x in (done.stderr + done.stdout).splitlines() if x.strip()), "")
    if done.returncode != 0:
        return replace(
            java,
            version_line=line or None,
            problem=f"{java.launcher} -version exited {done.returncode}",
            code="JAVA_BROKEN",
        )
    version = java.version
    said = re.search(r'version "([^"]+)"', line)
    if said:
        version = said.group(1)
    return replace(java, version_line=line, version=version)


def _release(home: Path) -> dict[str, str]:
    try:
        text = (home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return {k: v.strip().strip('"') for k, _, v in (line.partition("=") for line in text.splitlines()) if v}


def _package(name: str, module: str | None, group: str) -> Package:
    try:
        version: str | None = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if name == "pyspark":
        return _pyspark(version)
    if module is None:
        return Package(name, module, group, version)
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure to import is what the doctor reports
        if version is None:
            return Package(name, module, group, None)
        first = (str(exc).splitlines() or [""])[0][:200]
        return Package(name, module, group, version, f"{type(exc).__name__}: {first}")
    # Importable without package metadata (a vendored or system copy): usable all the same.
    return Package(name, module, group, version or "unknown")


def _pyspark(version: str | None) -> Package:
    """Return pyspark as ``execution.spark_installed`` sees it (found, never imported: C1)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None:
        error = None if version is None else "installed, but Python cannot find the pyspark module"
        return Package("pyspark", None, "spark", version, error)
    if version is None and spec.origin:
        # Spark's own python/ directory on PYTHONPATH has no package metadata: its version.py says.
        text = ""
        with contextlib.suppress(OSError):
            text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
        said = re.search(r"__version__[^=]*=\s*[\"']([^\"']+)", text)
        version = said.group(1) if said else "unknown"
    return Package("pyspark", None, "spark", version or "unknown")


def _kg_install() -> tuple[str, str, str | None]:
    """Return kg's package directory, how it is installed (site-packages, editable, checkout), its source."""
    location = Path(keygroup_cli.__file__).resolve().parent
    source = None
    editable = False
    for dist in importlib.metadata.distributions(name="keygroup-cli"):
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            continue
        if direct.get("dir_info", {}).get("editable"):
            editable, source = True, direct.get("url")
    site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    if any(location.is_relative_to(s) for s in site):
        return str(location), "site-packages", None
    return str(location), "editable" if editable else "source checkout (not installed)", source


def _environment(environ: Mapping[str, str]) -> tuple[tuple[str, str, str], ...]:
    """Return (name, value, meaning) of every variable kg reads that is set, and of any other ``KG_*``."""
    known = [(k, environ[k], what) for k, what in ENVIRONMENT.items() if k in environ]
    unknown = [
        (k, v, "not a variable kg reads")
        for k, v in sorted(environ.items())
        if k.startswith("KG_") and k not in ENVIRONMENT
    ]
    return tuple(known + unknown)


def _capabilities(
    packages: tuple[Package, ...], java: Java, spark: SparkProbe | None
) -> tuple[Capability, ...]:
    by_group: dict[str, list[Package]] = {}
    for p in packages:
        by_group.setdefault(p.group, []).append(p)

    def extra(name: str, group: str, enables: str, code: str, needs: tuple[str, ...] = ()) -> Capability:
        wanted = [p for g in (*needs, group) for p in by_group[g]]
        bad = [p for p in wanted if p.status != "ok"]
        if not bad:
            return Capability(name, enables, "ok", ", ".join(f"{p.name} {p.version}" for p in wanted))
        status = "broken" if any(p.status == "broken" for p in bad) else "missing"
        return Capability(name, enables, status, "; ".join(_why(p) for p in bad), INSTALL[group], code)

    core = extra(
        "core", "core", "inspect, check, verify, ranges, key, plan, advise, diff", "CORE_DEPENDENCY_BROKEN"
    )
    local = replace(core, name="local", enables="rescale --engine local, convert, generate")
    if core.works:
        core = replace(core, detail=f"{len(by_group['core'])} packages import")
        local = replace(local, detail="pyarrow, no JVM")
    return (
        core,
        local,
        _spark(by_group["spark"][0], java, spark),
        extra("ha", "ha", "zk:// and HA ConfigMap exports as PATH", "HA_EXTRA_MISSING"),
        extra(
            "rocksdb",
            "rocksdb",
            "RocksDB NATIVE savepoints, incremental checkpoints",
            "ROCKSDB_BINDING_MISSING",
        ),
        extra(
            "rocksdb-merge",
            "rocksdb-merge",
            "RocksDB list state held as merge operands",
            "ROCKSDB_MERGE_MISSING",
            needs=("rocksdb",),
        ),
        extra(
            "native",
            "native",
            "native kernels for decoding and re-keying key-group blocks (KG_NATIVE)",
            "NATIVE_KERNELS_MISSING",
        ),
        _flink_tests(by_group["test"][0], java),
    )


def _why(p: Package) -> str:
    return f"{p.name} is not installed" if p.status == "missing" else f"{p.name} {p.version}: {p.error}"


def _java_problem(java: Java) -> tuple[str, str, str] | None:
    """Return (status, detail, code) when ``java`` cannot run Spark, else None."""
    if java.problem:
        return (
            "missing" if java.code == "JAVA_MISSING" else "broken",
            java.problem,
            java.code or "JAVA_BROKEN",
        )
    if java.major is not None and java.major < MIN_JAVA:
        return "broken", f"Java {java.version} at {java.launcher} is older than {MIN_JAVA}", "JAVA_TOO_OLD"
    return None


def _describe_java(java: Java) -> str:
    return f"Java {java.version or '(version unknown)'}"


def _spark(pyspark: Package, java: Java, probe: SparkProbe | None) -> Capability:
    enables = "rescale --engine spark"
    if probe is not None and probe.ok:
        detail = (
            f"Spark {probe.version} started in {probe.seconds:.1f} s ({probe.master}); its workers import kg"
        )
        return Capability("spark", enables, "ok", detail)
    if probe is not None:
        return Capability(
            "spark",
            enables,
            "broken" if pyspark.version else "missing",
            probe.message or "",
            None,
            probe.code,
        )
    if pyspark.status != "ok":
        return Capability(
            "spark", enables, pyspark.status, _why(pyspark), INSTALL["spark"], "PYSPARK_MISSING"
        )
    problem = _java_problem(java)
    if problem is not None:
        status, detail, code = problem
        return Capability("spark", enables, status, detail, INSTALL_JAVA, code)
    detail = f"pyspark {pyspark.version}, {_describe_java(java)}; not started (--spark starts it)"
    return Capability("spark", enables, "ready", detail)


def _flink_tests(libraries: Package, java: Java) -> Capability:
    enables = "tests/restore: restores in real Flink 2.3"
    if libraries.status != "ok":
        return Capability(
            "flink-tests", enables, "missing", _why(libraries), INSTALL["test"], "FLINK_LIBRARIES_MISSING"
        )
    problem = _java_problem(java)
    if problem is not None:
        status, detail, code = problem
        return Capability("flink-tests", enables, status, detail, INSTALL_JAVA, code)
    return Capability(
        "flink-tests", enables, "ok", f"apache-flink-libraries {libraries.version}, {_describe_java(java)}"
    )


__all__ = [
    "CAPABILITIES",
    "Capability",
    "Diagnosis",
    "Java",
    "Package",
    "SparkProbe",
    "diagnose",
    "find_java",
    "java_version_line",
    "probe_spark",
]

"""The JVM the Spark engine starts: finding Java, its class-data-sharing archive, its console log.

Without ``--verbose`` the JVM's console output goes to a log file under ``$KG_CACHE_DIR/logs``, removed at
exit unless the run failed (``keep_console_log``); a gateway that does not start is reported from it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import time
from datetime import datetime
from pathlib import Path

from keygroup_cli.core.cache import cache_directory
from keygroup_cli.core.errors import MissingDependencyError

INSTALL_JAVA = "install Java 17 or newer (e.g. apt-get install openjdk-17-jre-headless) or use --engine local"


log = logging.getLogger("keygroup_cli")


#: Console logs of earlier sessions kept in the cache directory (only those of failed runs are kept).
KEPT_LOGS = 5


_console_logs: dict[str, Path | bool] = {}


def new_console_log() -> Path:
    """Return this run's Spark console log under the cache directory; it is removed at exit unless kept.

    Logs of failed runs (``keep_console_log``) stay, the newest ``KEPT_LOGS`` of them.
    """
    directory = cache_directory() / "logs"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for old in sorted(directory.glob("spark-*.log"), key=lambda f: f.stat().st_mtime)[:-KEPT_LOGS]:
            old.unlink(missing_ok=True)
    except OSError:
        directory = Path(os.environ.get("TMPDIR", "/tmp"))
    path = directory / f"spark-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    if not _console_logs:
        atexit.register(_remove_console_log)
    _console_logs.update(path=path, keep=False)
    return path


def keep_console_log() -> Path | None:
    """Keep this run's Spark console log after exit (a failure's message points at it); return it."""
    path = _console_logs.get("path")
    _console_logs["keep"] = True
    return path if isinstance(path, Path) else None


def _remove_console_log() -> None:
    path = _console_logs.get("path")
    if isinstance(path, Path) and not _console_logs.get("keep"):
        with contextlib.suppress(OSError):
            path.unlink()


def require_java() -> None:
    """Raise ``MissingDependencyError`` unless a ``java`` launcher can be found the way Spark looks for it."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        launcher = Path(java_home) / "bin" / "java"
        if not (launcher.is_file() and os.access(launcher, os.X_OK)):
            raise MissingDependencyError(
                f"JAVA_HOME={java_home} has no executable bin/java; point JAVA_HOME at a Java 17+ "
                f"installation or unset it ({INSTALL_JAVA})",
                code="JAVA_HOME_BROKEN",
            )
        return
    if shutil.which("java") is None:
        raise MissingDependencyError(
            f"no java on PATH and JAVA_HOME is not set: --engine spark needs Java; {INSTALL_JAVA}",
            code="JAVA_MISSING",
        )


def class_data_sharing_option() -> str:
    """Return the JVM option that maps kg's class-data-sharing archive of Spark's classes, or creates it.

    Loading Spark's classes is about half of a session's start. The first session kg starts writes an
    archive of them when its JVM exits (``-XX:ArchiveClassesAtExit``); later ones map it
    (``-XX:SharedArchiveFile``), which starts the driver about 2 s sooner on two cores. The archive lives
    in ``$KG_CACHE_DIR`` (default ``~/.cache/kg``), one per pyspark version and Java installation (and
    ``ARCHIVE_REVISION``), and is published only once its writer has finished and only if that session ran
    a Spark job (``class_archive_complete``): an archive of a session that stopped early (a failed start,
    Ctrl-C) holds too few of the classes a job loads and would be mapped by every later run (one such
    archive held 5,500 of the 9,800 classes a run loads; a whole one 7,800, the rest being generated
    lambda classes). ``*.<pid>.partial`` is renamed once process ``pid`` is gone, its ``*.<pid>.ran`` marker
    exists and the file has not changed for 30 s; a finished partial without the marker is removed. A JVM
    that cannot use an archive (classpath changed) ignores it. ``KG_SPARK_CDS=0`` turns this off; any
    problem with the cache directory does too (returns "").
    The first run that writes the archive says so on kg's logger (a notice on stderr), once per archive.
    """
    if os.environ.get("KG_SPARK_CDS", "1") == "0":
        return ""
    import pyspark

    cache = cache_directory()
    java = (
        Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        if os.environ.get("JAVA_HOME")
        else shutil.which("java")
    )
    identity = f"{pyspark.__version__}|{Path(java).resolve() if java else ''}|{ARCHIVE_REVISION}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    final = cache / f"spark-{key}.jsa"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for partial in cache.glob(f"spark-{key}.*.partial"):
            pid = int(partial.suffixes[-2].lstrip("."))
            if _finished(pid, partial):
                ran = partial.with_suffix(".ran")
                if ran.exists():
                    os.replace(partial, final)
                else:
                    partial.unlink()  # a session that ran no job: too few classes to be worth mapping
                ran.unlink(missing_ok=True)
        for ran in cache.glob(f"spark-{key}.*.ran"):
            # A mark whose JVM wrote no archive (the session ran without one, or was killed): dropped.
            if not ran.with_suffix(".partial").exists() and _finished(int(ran.suffixes[-2][1:]), ran):
                ran.unlink()
    except (OSError, ValueError):
        return ""
    if final.is_file():
        return f"-XX:SharedArchiveFile={final}"
    announced = cache / f"spark-{key}.announced"
    if not announced.exists():
        # Written once per pyspark version and Java: say so (once), since it takes room in the cache.
        with contextlib.suppress(OSError):
            announced.touch()
        log.info(
            "writing a one-time archive of Spark's classes (about 110 MB) to %s when this run ends, so "
            "later runs start Spark about 2 s sooner; KG_SPARK_CDS=0 turns this off",
            cache,
        )
    partial = cache / f"spark-{key}.{os.getpid()}.partial"
    _archive["writing"] = partial
    return f"-XX:ArchiveClassesAtExit={partial}"


#: Bumped when what a session loads changes enough that archives written before should be replaced.
ARCHIVE_REVISION = "2"


_archive: dict[str, Path] = {}


def class_archive_complete() -> None:
    """Mark the archive this process's JVM writes at exit as worth publishing: its session ran a job.

    Called when a session kg started stops after running at least one Spark job; without the mark the
    archive is removed rather than published (``class_data_sharing_option``).
    """
    partial = _archive.get("writing")
    if partial is not None:
        with contextlib.suppress(OSError):
            partial.with_suffix(".ran").touch()


#: Seconds a finished writer's archive must stay unchanged before it is published.
_SETTLED_SECONDS = 30


def _finished(pid: int, partial: Path) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
        return False  # the writer (or its JVM, dumping at exit) may still be at work
    except ProcessLookupError:
        pass
    except PermissionError:
        return False
    return time.time() - partial.stat().st_mtime > _SETTLED_SECONDS


#: What Spark's launch scripts read that would change the driver JVM's command: with any of them set,
#: kg leaves the launch to ``bin/spark-submit`` (``direct_launch``).
LAUNCH_ENVIRONMENT = (
    "PYSPARK_SUBMIT_ARGS",
    "PYSPARK_GATEWAY_PORT",
    "SPARK_SUBMIT_OPTS",
    "SPARK_DIST_CLASSPATH",
    "SPARK_PREPEND_CLASSES",
    "SPARK_DRIVER_MEMORY",
    "SPARK_CLASSPATH",
    "SPARK_LAUNCHER_OPTS",
    "HADOOP_CONF_DIR",
    "YARN_CONF_DIR",
    "SPARK_TESTING",
)
#: Settings Spark's launcher turns into the driver JVM's own options (besides ``extraJavaOptions``).
LAUNCH_SETTINGS = (
    "spark.driver.memory",
    "spark.driver.extraClassPath",
    "spark.driver.extraLibraryPath",
    "spark.driver.defaultJavaOptions",
    "spark.submit.deployMode",
    "spark.jars",
    "spark.jars.packages",
    "spark.jars.repositories",
    "spark.jars.ivy",
    "spark.files",
    "spark.submit.pyFiles",
)
#: The line ``bin/spark-class`` prints, with ``SPARK_PRINT_LAUNCH_COMMAND``, before it starts the JVM.
_COMMAND_LINE = "Spark Command: "
_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
_DEFAULT_DRIVER_MEMORY = "-Xmx1g"


def spark_home() -> Path:
    """Return the Spark installation pyspark launches from (``SPARK_HOME``, else pyspark's package)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _launch_record() -> Path:
    import pyspark

    java = os.environ.get("JAVA_HOME") or shutil.which("java") or ""
    identity = f"{pyspark.__version__}|{spark_home()}|{Path(java).resolve() if java else ''}"
    return cache_directory() / f"spark-launch-{hashlib.sha256(identity.encode()).hexdigest()[:16]}.json"


def direct_launch(settings: dict[str, str]) -> bool:
    """Return whether kg may start the driver JVM itself, as ``bin/spark-submit`` would start it.

    ``bin/spark-submit`` costs a shell, a Python interpreter (``find_spark_home.py``, for a pip install),
    ``ps``, and a JVM of its own (Spark's launcher, which prints the driver's command): 0.3 s of CPU and
    0.5-1 s of wall on two loaded cores, before the driver JVM starts at all. Where nothing the launcher
    reads is set (``LAUNCH_ENVIRONMENT``, ``LAUNCH_SETTINGS``, ``spark-env.sh``, ``spark-defaults.conf``),
    its command is the one it printed for an earlier session of the same pyspark, Spark home and Java
    (``learn_launch``, kept in ``$KG_CACHE_DIR``) with this session's ``--conf`` settings: kg starts that.
    ``KG_SPARK_DIRECT=0`` turns this off.
    """
    if os.environ.get("KG_SPARK_DIRECT", "1") == "0":
        return False
    if any(os.environ.get(name) for name in LAUNCH_ENVIRONMENT):
        return False
    if any(key in settings for key in LAUNCH_SETTINGS):
        return False
    try:
        home = spark_home()
    except Exception:  # noqa: BLE001 - pyspark's search failed: spark-submit reports it
        return False
    conf_dir = Path(os.environ.get("SPARK_CONF_DIR") or home / "conf")
    return not (conf_dir / "spark-env.sh").exists() and not (conf_dir / "spark-defaults.conf").exists()


def launch_command(settings: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """Return the driver JVM's command and environment for ``settings``, or None (not learnt yet).

    The command is what Spark's launcher printed for an earlier session (``learn_launch``): its Java, its
    classpath and its module options, with this session's driver options and ``--conf`` settings. The
    environment is what Spark's scripts export to the JVM (``SPARK_HOME``, ``SPARK_CONF_DIR``,
    ``SPARK_ENV_LOADED``, ``PYTHONHASHSEED=0``, the last needed by PySpark's workers).
    """
    try:
        record = json.loads(_launch_record().read_text())
        java, classpath, options = record["java"], record["classpath"], list(record["options"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not Path(java).is_file() and shutil.which(java) is None:
        return None
    home = spark_home()
    command = [java, "-cp", classpath, _DEFAULT_DRIVER_MEMORY]
    command += shlex.split(settings.get("spark.driver.extraJavaOptions", ""))
    command += [*options, _SUBMIT_CLASS]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    command.append("pyspark-shell")
    environment = dict(os.environ)
    environment.update(
        SPARK_HOME=str(home),
        SPARK_CONF_DIR=os.environ.get("SPARK_CONF_DIR") or str(home / "conf"),
        SPARK_ENV_LOADED="1",
        PYTHONHASHSEED="0",
    )
    return command, environment


def learn_launch(console_log: Path, settings: dict[str, str]) -> None:
    """Keep the driver command ``bin/spark-class`` printed into ``console_log``, for ``launch_command``.

    The printed line joins the arguments with spaces: it is kept only if it parses back unambiguously
    (the Java, ``-cp`` and the classpath, the default heap, this session's driver options, then only
    JVM options up to ``SparkSubmit``), else nothing is kept and the next session learns again.
    """
    try:
        lines = console_log.read_text(errors="replace").splitlines()
        line = next((ln for ln in lines if ln.startswith(_COMMAND_LINE)), "")
    except OSError:
        return
    words = line[len(_COMMAND_LINE) :].split(" ")
    if _SUBMIT_CLASS not in words or len(words) < 4 or words[1] != "-cp":
        return
    java, classpath, jvm = words[0], words[2], words[3 : words.index(_SUBMIT_CLASS)]
    ours = settings.get("spark.driver.extraJavaOptions", "").split()
    if jvm[:1] != [_DEFAULT_DRIVER_MEMORY] or jvm[1 : 1 + len(ours)] != ours:
        return
    options = jvm[1 + len(ours) :]
    if not all(o.startswith("-") for o in options):
        return
    record = _launch_record()
    partial = record.with_name(f"{record.name}.{os.getpid()}")
    with contextlib.suppress(OSError):
        partial.write_text(json.dumps({"java": java, "classpath": classpath, "options": options}))
        os.replace(partial, record)


#: Spark's own log4j configuration (in ``spark-common-utils``), which Spark loads when log4j found none.
SPARK_LOG4J_DEFAULTS = "org/apache/spark/log4j2-defaults.properties"
#: Where a log4j configuration of the user's would come from: files in the conf directory (on the driver's
#: classpath), the environment, options every JVM reads.
_LOG4J_FILES = ("log4j2-test.*", "log4j2.*", "log4j2-*.*")
_LOG4J_ENVIRONMENT = ("LOG4J_CONFIGURATION_FILE", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")


def logging_option(settings: dict[str, str]) -> str:
    """Return the JVM option that names Spark's default log4j configuration up front, or "".

    Without a configuration of its own, log4j looks for one on the classpath (``log4j2-test`` and
    ``log4j2`` in five formats each), starts with its default configuration, and Spark then configures it
    a second time from ``SPARK_LOG4J_DEFAULTS`` ("Using Spark's default log4j profile", printed twice).
    Named up front, log4j is configured once, from the same file: the same console lines, about 0.15 s
    less of the session's CPU on two cores (0.1-0.25 s of the JVM's start to its gateway). Only where
    nothing else could configure log4j: kg starts the JVM as ``direct_launch`` allows (no
    ``spark-defaults.conf``, ``spark-env.sh``, extra classpath, ``SPARK_SUBMIT_OPTS``), the conf directory
    holds no log4j2 file, and neither ``LOG4J_CONFIGURATION_FILE`` nor ``JAVA_TOOL_OPTIONS``,
    ``JDK_JAVA_OPTIONS`` or ``_JAVA_OPTIONS`` is set.
    """
    if not direct_launch(settings) or any(os.environ.get(name) for name in _LOG4J_ENVIRONMENT):
        return ""
    conf_dir = Path(os.environ.get("SPARK_CONF_DIR") or spark_home() / "conf")
    try:
        if any(next(conf_dir.glob(pattern), None) for pattern in _LOG4J_FILES):
            return ""
    except OSError:
        return ""
    return f"-Dlog4j2.configurationFile=classpath:{SPARK_LOG4J_DEFAULTS}"


def forget_launch() -> None:
    """Drop the learnt driver command (a direct start failed: the next session asks spark-submit again)."""
    with contextlib.suppress(OSError):
        _launch_record().unlink()


def gateway_message(exc: Exception, console_log: Path) -> str:
    """Return the one line that says why Spark's Java gateway did not start (a too-old Java, say)."""
    details = ""
    with contextlib.suppress(OSError):
        details = console_log.read_text(errors="replace")
    if "UnsupportedClassVersionError" in details:
        return f"Spark needs a newer Java than the one found: {INSTALL_JAVA} (details: {console_log})"
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return (
        f"Spark's Java gateway did not start ({type(exc).__name__}: {first}); "
        f"check the Java installation: {INSTALL_JAVA} (details: {console_log})"
    )


__all__ = [
    "INSTALL_JAVA",
    "KEPT_LOGS",
    "LAUNCH_ENVIRONMENT",
    "LAUNCH_SETTINGS",
    "direct_launch",
    "forget_launch",
    "launch_command",
    "learn_launch",
    "logging_option",
    "spark_home",
    "ARCHIVE_REVISION",
    "cache_directory",
    "require_java",
    "class_archive_complete",
    "class_data_sharing_option",
    "gateway_message",
    "keep_console_log",
    "new_console_log",
]

"""The JVM the Spark engine starts: finding Java, its class-data-sharing archive, its console log.

Without ``--verbose`` the JVM's console output goes to a log file under ``$KG_CACHE_DIR/logs``, removed at
exit unless the run failed (``keep_console_log``); a gateway that does not start is reported from it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
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
    in ``$KG_CACHE_DIR`` (default ``~/.cache/kg``), one per pyspark version and Java installation, and is
    published only once its writer has finished: ``*.<pid>.partial`` is renamed once process ``pid`` is
    gone and the file has not changed for 30 s. A JVM that cannot use an archive (classpath changed) ignores
    it. ``KG_SPARK_CDS=0`` turns this off; any problem with the cache directory does too (returns "").
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
    identity = f"{pyspark.__version__}|{Path(java).resolve() if java else ''}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    final = cache / f"spark-{key}.jsa"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for partial in cache.glob(f"spark-{key}.*.partial"):
            pid = int(partial.suffixes[-2].lstrip("."))
            if _finished(pid, partial):
                os.replace(partial, final)
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
    return f"-XX:ArchiveClassesAtExit={cache / f'spark-{key}.{os.getpid()}.partial'}"


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
    "cache_directory",
    "require_java",
    "class_data_sharing_option",
    "gateway_message",
    "keep_console_log",
    "new_console_log",
]

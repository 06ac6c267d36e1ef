"""Spark's Python daemon, importing pyspark from its installed package rather than from Spark's zip of it.

Spark puts ``SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on its Python workers' path. Python
keeps no bytecode cache for modules imported from a zip, so every daemon compiles pyspark's modules again:
about 1.5 s of each session's first task on two cores, paid again by every executor.

When that zip lies inside an installed pyspark package (a pip install: ``<site>/pyspark/python/lib/``) and
that package's directory ``<site>`` is on the path too, the zip and the package are the same release. The
daemon then drops the zips from its path, imports pyspark from the package, bytecode cache included, and
runs pyspark's own daemon. Any other layout (a Spark distribution, a zip from elsewhere) keeps Spark's
path untouched. Forked workers inherit the path.

kg starts its embedded sessions with ``spark.python.daemon.module`` set to this module (see
``execution.engines.spark.session``). Importing it imports nothing of kg's but the packages above it (whose
``__init__`` modules load their names lazily or only type them) and ``core.allocator`` (standard library
only), so the daemon starts no threads before it forks its workers, and it sets the allocator's thresholds
(``core.allocator.keep_freed_memory``) that the workers inherit.
"""

from __future__ import annotations

import os
import sys

from keygroup_cli.core.allocator import keep_freed_memory


def installed_copy(entry: str, path: list[str]) -> bool:
    """Return whether path entry ``entry`` is Spark's zip of a package installed beside it on ``path``.

    ``<site>/pyspark/python/lib/pyspark.zip`` is such a zip when ``<site>/pyspark/__init__.py`` exists and
    ``<site>`` is itself on ``path``; likewise ``py4j-*-src.zip`` with ``<site>/py4j/__init__.py``.
    """
    name = os.path.basename(entry)
    if name == "pyspark.zip":
        package = "pyspark"
    elif name.startswith("py4j-") and name.endswith("-src.zip"):
        package = "py4j"
    else:
        return False
    lib = os.path.dirname(os.path.abspath(entry))
    site = os.path.dirname(os.path.dirname(os.path.dirname(lib)))
    if os.path.join(site, "pyspark", "python", "lib") != lib:
        return False
    on_path = {os.path.abspath(p) for p in path if p and p != entry}
    return site in on_path and os.path.isfile(os.path.join(site, package, "__init__.py"))


def prefer_installed(path: list[str]) -> list[str]:
    """Return ``path`` without the zips that ``installed_copy`` finds (the same list if there are none)."""
    return [entry for entry in path if not installed_copy(entry, path)]


def main() -> None:
    """Run pyspark's daemon, pyspark imported from its installed package where ``installed_copy`` allows."""
    sys.path[:] = prefer_installed(sys.path)
    # Set before the fork: every worker reuses the buffers it frees (``keygroup_cli.core.allocator``).
    keep_freed_memory()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()

"""How a rescale runs, apart from what it does (``planning.request.RescaleRequest``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keygroup_cli.execution.engines import ENGINES, EngineChoice, Executor, unknown_engine_error


@dataclass(frozen=True)
class EngineOptions:
    """The engine a rescale runs on: chosen by name, or given ready."""

    #: ``spark``, ``local``, or None: Spark where pyspark is installed, else local.
    engine: str | EngineChoice | None = None
    #: Spark master URL (default: an embedded ``local[*]``); ``spark`` only.
    master: str | None = None
    #: An existing ``SparkSession`` to run on (notebooks, PySpark jobs); ``spark`` only.
    spark: Any = None
    #: Spark settings for a session kg starts (e.g. ``spark.pyspark.python``).
    spark_conf: Mapping[str, str] | None = None
    #: Let Spark's own logging through.
    verbose: bool = False
    #: A ready executor (overrides ``engine``, ``master``, ``spark``).
    executor: Executor | None = None
    #: Threads of the local engine and of the key-group copy (None:
    #: ``keygroup_cli.core.workers.worker_count``).
    workers: int | None = None

    def __post_init__(self) -> None:
        # Refused here, not when an engine is first needed: a rescale that copies key groups as bytes on the
        # driver runs no engine, and must not accept a name it would refuse on another input.
        if isinstance(self.engine, str) and self.engine not in (*ENGINES, "auto"):
            raise unknown_engine_error(self.engine)


__all__ = ["EngineOptions"]

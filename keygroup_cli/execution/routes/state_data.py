"""Keyed state as data on either engine: ``kg.read_state`` and the reader ``kg export`` runs with.

The local engine decodes in this process (``flink.data.tables``); the Spark engine's tasks decode the
keyed files (``execution.engines.spark.state_reader`` / ``state_dataframe``), one task per file.
"""

from __future__ import annotations

import os
from typing import Any

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.flink import BatchReader, Savepoint, state_batches
from keygroup_cli.flink import state_table as read_local

#: The engines state is read with; unlike a rescale, local is the default (no JVM for a look at state).
STATE_ENGINES = ("local", "spark")


def read_state(
    path: str | os.PathLike[str] | Savepoint,
    operator: str,
    state: str,
    *,
    engine: str = "local",
    spark: Any = None,
    master: str | None = None,
) -> Any:
    """Return one keyed state of ``operator`` as a typed ``pyarrow.Table``, or as a Spark DataFrame.

    With ``engine="spark"`` the DataFrame has the same columns and is read by Spark tasks straight away
    (no files in between).

    Args:
        path: The savepoint (or checkpoint) directory, its ``_metadata``, or an opened ``Savepoint``.
        operator: Its uid or operator id.
        state: The state's name.
        engine: ``local`` (default) or ``spark``.
        spark: The SparkSession to use (default: the active one, else one kg starts).
        master: The Spark master of a session kg starts (default: embedded ``local[*]``).

    Raises:
        InvalidArgumentError: No such operator or state, or an unknown engine.
        UnsupportedFormatError: The operator holds no keyed state, or a layout kg reads only locally.
        MissingDependencyError: ``spark``: pyspark or Java is missing.
    """
    _require_engine(engine)
    if engine == "local":
        return read_local(path, operator, state)
    from keygroup_cli.execution.engines.spark import spark_session, state_dataframe

    source = path.metadata_path if isinstance(path, Savepoint) else path
    return state_dataframe(spark or spark_session(master), str(source), operator, state)


def state_reader(engine: str = "local", spark: Any = None, master: str | None = None) -> BatchReader:
    """Return what decodes an operator's typed batches on ``engine`` (``kg export --engine``).

    Raises:
        InvalidArgumentError: An unknown engine.
        MissingDependencyError: ``spark``: pyspark or Java is missing.
    """
    _require_engine(engine)
    if engine == "local":
        return state_batches
    from keygroup_cli.execution.engines.spark import spark_context
    from keygroup_cli.execution.engines.spark import state_reader as spark_reader

    # The context alone: decoding needs no DataFrame, and a session costs Spark SQL's start.
    return spark_reader(spark.sparkContext if spark is not None else spark_context(master))


def _require_engine(engine: str) -> None:
    if engine not in STATE_ENGINES:
        raise InvalidArgumentError(
            f"unknown engine {engine!r}; expected one of {', '.join(STATE_ENGINES)}", code="UNKNOWN_ENGINE"
        )


__all__ = ["STATE_ENGINES", "read_state", "state_reader"]

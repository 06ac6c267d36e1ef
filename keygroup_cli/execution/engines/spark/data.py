"""Keyed state as data on Spark: ``kg export --engine spark`` and ``kg.read_state(engine="spark")``.

One Spark task per keyed file decodes it (``tasks.state_task``, ``tasks.state_rows``); the driver only
opens the savepoint and plans.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.execution.engines.spark.errors import spark_failures
from keygroup_cli.execution.engines.spark.tasks import state_rows, state_task
from keygroup_cli.flink import BatchReader, Savepoint, find_operator, keyed_file_count, typed_states

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession


def state_reader(sc: SparkContext) -> BatchReader:
    """Return a ``state_tables.BatchReader`` whose Spark tasks decode an operator's keyed files.

    One task per keyed file decodes it (``state_batches``) and emits its typed batches as Arrow IPC; the
    driver takes them partition by partition, in file order (``toLocalIterator``), so what it writes is
    what the local engine writes, with the decoding spread over the executors and memory bounded by one
    file's batches.
    """

    def read(
        savepoint: Savepoint, operator: str, states: frozenset[str] | None, on_progress: OnProgress | None
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        op_id = find_operator(savepoint, operator).operator_id
        count = keyed_file_count(savepoint, operator)
        wanted = None if states is None else sorted(states)
        task = functools.partial(state_task, _metadata_file(savepoint), op_id, wanted)
        done = 0
        with spark_failures(sc):
            rdd = sc.parallelize(range(count), max(1, count)).flatMap(task)
            for index, name, data in rdd.toLocalIterator(prefetchPartitions=False):
                if on_progress is not None and index > done:
                    done = index
                    on_progress("export", done, count)
                for batch in pa.ipc.open_stream(data).read_all().to_batches():
                    yield name, batch
        if on_progress is not None:
            on_progress("export", count, count)

    return read


def _metadata_file(savepoint: Savepoint) -> str:
    """Return the ``_metadata`` tasks open: a canonical rewrite (``canonical_view``) has none until written.

    The rewrite is a scratch directory of kg's own; its ``_metadata`` names the rewritten keyed files and,
    by absolute paths, the original's other files.
    """
    from keygroup_cli.flink import write_metadata

    path = str(savepoint.metadata_path)
    if not os.path.exists(path):
        Path(path).write_bytes(write_metadata(savepoint.metadata))
    return path


def state_dataframe(session: SparkSession, source: str | os.PathLike[str], operator: str, state: str) -> Any:
    """Return one keyed state as a Spark DataFrame, read by Spark tasks (one per keyed file), no files.

    The columns are ``read_state``'s; Spark holds timestamps in microseconds, so a finer one (a SQL
    ``TIMESTAMP(9)`` field, say) is truncated to them. A NATIVE savepoint or a checkpoint's own layout is
    rewritten as key groups first, into a scratch directory kept until this process exits (the DataFrame
    reads it whenever it is computed).

    Raises:
        InvalidArgumentError: No such operator or state.
        UnsupportedFormatError: The operator holds no keyed state, or a layout kg reads only locally.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    from keygroup_cli.flink import canonical_view, needs_canonical_view, open_savepoint

    savepoint = open_savepoint(source)
    if needs_canonical_view(savepoint):
        scratch = tempfile.mkdtemp(prefix="kg-state-")
        atexit.register(shutil.rmtree, scratch, True)
        view = canonical_view(savepoint, Path(scratch) / "canonical")
        savepoint = open_savepoint(_metadata_file(Savepoint.rewritten(view, savepoint)), contained=False)
    typed = next((t for t in typed_states(savepoint, operator) if t.name == state), None)
    if typed is None:
        known = ", ".join(t.name for t in typed_states(savepoint, operator))
        raise InvalidArgumentError(
            f"operator {operator!r} has no state {state!r} (states: {known})", code="STATE_NOT_FOUND"
        )
    target = _spark_arrow_schema(typed.schema)
    op_id = find_operator(savepoint, operator).operator_id
    count = keyed_file_count(savepoint, operator)
    rows = functools.partial(
        state_rows, _metadata_file(savepoint), op_id, state, target.serialize().to_pybytes()
    )
    # Rows, not Arrow batches: mapInArrow would need pandas, which kg does not install.
    rdd = session.sparkContext.parallelize(range(count), max(1, count)).flatMap(rows)
    return session.createDataFrame(rdd, from_arrow_schema(target), verifySchema=False)


def _spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with every timestamp in microseconds (Spark's unit), however deep."""

    def conform(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", t.tz)
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(conform(f.type)) for f in t])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(t.value_field.with_type(conform(t.value_type)))
        if pa.types.is_map(t):
            return pa.map_(conform(t.key_type), conform(t.item_type))
        return t

    return pa.schema([f.with_type(conform(f.type)) for f in schema])


__all__ = [
    "state_dataframe",
    "state_reader",
]

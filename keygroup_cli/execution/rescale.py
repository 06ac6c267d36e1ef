"""``kg rescale``'s entry point: choose the route for what the input and the output are.

- a kg snapshot on a local file system: ``execution.snapshot_rescale``;
- a Flink savepoint or checkpoint: ``execution.savepoint`` (a savepoint comes out), reading a canonical
  savepoint where it is and writing where DEST is, local or on an object store;
- anything else on an object store: ``_rescale_remote`` below, a download around one of those two.

Each route validates before it writes, stages its output, verifies it and commits it atomically.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from keygroup_cli.convert.inputs import readable
from keygroup_cli.errors import InvalidArgumentError
from keygroup_cli.execution import EngineChoice, Executor, OnProgress
from keygroup_cli.execution.options import EngineOptions
from keygroup_cli.execution.savepoint import rescale_savepoint
from keygroup_cli.execution.snapshot_rescale import (
    RescaleResult,
    build_manifest,
    rescale_snapshot,
    verify_input,
    verify_output,
)
from keygroup_cli.flink.layouts.heap import needs_canonical_view
from keygroup_cli.flink.savepoint import Savepoint, try_open_savepoint
from keygroup_cli.integrity import require_intact
from keygroup_cli.migration import MigrationRequest, apply_changes, refuse_kg_snapshot
from keygroup_cli.rescale_request import RescaleRequest
from keygroup_cli.snapshot.model import Snapshot
from keygroup_cli.storage import is_remote
from keygroup_cli.storage.remote import remote_output
from keygroup_cli.storage.staging import refuse_existing, refuse_inside_input


def rescale(
    source: Path | str | Snapshot,
    dest: Path | str,
    new_parallelism: int,
    *,
    from_parallelism: int | None = None,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    output_format: str = "canonical",
    surgery: MigrationRequest | None = None,
    engine: str | EngineChoice | None = None,
    master: str | None = None,
    spark: Any = None,
    spark_conf: Mapping[str, str] | None = None,
    verbose: bool = False,
    on_progress: OnProgress | None = None,
    executor: Executor | None = None,
    workers: int | None = None,
) -> RescaleResult:
    """Rescale ``source`` to ``new_parallelism`` and commit the result at ``dest``, by the route that fits.

    A kg snapshot gives a kg snapshot (``snapshot_rescale.rescale_snapshot``); a Flink savepoint or
    checkpoint gives a canonical savepoint (``savepoint.rescale_savepoint``); either may be on an object
    store, in or out.

    Args:
        source: The input snapshot (a directory, its ``_manifest.json``, or an opened ``Snapshot``), or a
            Flink savepoint directory.
        dest: Where the new snapshot is committed; must not exist.
        new_parallelism: The new parallelism of the selected operators.
        from_parallelism: If given, the parallelism every selected operator must have now.
        operators: uids or operator ids to rescale (default: all); the others are copied unchanged.
        new_max_parallelism: Change maxParallelism too (keys are re-hashed, SQL jobs' row keys too;
            refused for binary keys).
        output_format: ``"canonical"``, or ``"native"`` (a savepoint's keyed state as RocksDB databases).
        surgery: Operator surgery (rename, assign a uid, drop) applied in the same pass, as ``kg migrate``
            plans it; a Flink savepoint or checkpoint only. ``operators`` may name an operator by its uid
            before or after it.
        engine: ``spark``, ``local``, or None: Spark where pyspark is installed, else local
            (``execution.choose_engine``).
        master: Spark master URL (default: an embedded ``local[*]``); ``spark`` only.
        spark: An existing ``SparkSession`` to run on (notebooks, PySpark jobs); ``spark`` only.
        spark_conf: Spark settings for a session kg starts (e.g. ``spark.pyspark.python``).
        verbose: Let Spark's own logging through.
        on_progress: ``on_progress(stage, completed, total)`` callback.
        executor: A ready executor (overrides ``engine``, ``master``, ``spark``).
        workers: Threads of the local engine's byte route and of the key-group copy (default:
            ``$KG_WORKERS``, else the machine's cores, at most 4; ``keygroup_cli.workers``).

    Raises:
        InvalidArgumentError: Bad arguments or DEST exists (nothing written).
        InvalidSnapshotError: The input is invalid or a file fails its checksum (nothing written).
        UnsupportedFormatError: A maxParallelism change for binary keys (nothing written).
        MissingDependencyError: Spark/Java missing or broken (nothing written).
        ExecutionError: Writing or verifying failed (nothing committed).
    """
    request = RescaleRequest.of(
        new_parallelism,
        from_parallelism=from_parallelism,
        operators=operators,
        new_max_parallelism=new_max_parallelism,
        output_format=output_format,
        surgery=surgery,
    )
    options = EngineOptions(engine, master, spark, spark_conf, verbose, executor, workers)
    return run_rescale(source, dest, request, options, on_progress)


def run_rescale(
    source: Path | str | Snapshot,
    dest: Path | str,
    request: RescaleRequest,
    options: EngineOptions | None = None,
    on_progress: OnProgress | None = None,
) -> RescaleResult:
    """``rescale`` with its arguments as values: open the input once, gate it, and take its route.

    The input's gate runs here or in the route on the opened input, for every caller: kg never rescales
    what ``kg verify`` rejects.
    """
    options = options or EngineOptions()
    label = str(source.path) if isinstance(source, Snapshot) else str(source)
    # Tasks may run elsewhere (Spark executors work in their own directories): local paths go absolute.
    if not is_remote(dest):
        dest = Path(dest).absolute()
    if isinstance(source, Snapshot):
        refuse_kg_snapshot(request.surgery, label)
        require_savepoint_for(request.output_format, "the input")
        require_intact(source.path, on_progress=on_progress)
        return _snapshot_route(source, dest, request, options, on_progress)
    if not is_remote(source):
        source = Path(source).absolute()
    refuse_inside_input(source, dest)
    savepoint = try_open_savepoint(source)  # _metadata read once, here
    if savepoint is not None and request.surgery is not None:
        # Refused before anything is downloaded or staged; the route applies it to this opened savepoint.
        apply_changes(savepoint.metadata, request.surgery)
    native_upload = request.output_format == "native" and is_remote(dest)  # staged locally, then uploaded
    if savepoint is None:
        refuse_kg_snapshot(request.surgery, label)
        require_savepoint_for(request.output_format, label)
    if (
        savepoint is not None
        and (not is_remote(source) or not needs_canonical_view(savepoint))
        and not native_upload
    ):
        # Local or on an object store: read where it is, keyed files written where DEST is. The route
        # runs the input's gate on this opened savepoint.
        return rescale_savepoint(savepoint, dest, request, options, on_progress, label=label)
    if is_remote(source) or is_remote(dest):
        return _rescale_remote(source, dest, request, options, on_progress, savepoint, label)
    require_intact(source, on_progress=on_progress, label=label)
    return _snapshot_route(source, dest, request, options, on_progress)


def require_savepoint_for(output_format: str, label: str) -> None:
    """Refuse ``--format native`` for a kg snapshot input (``label`` names it): its rescale is a kg snapshot.

    Raises:
        InvalidArgumentError: ``output_format`` is ``native``.
    """
    if output_format == "native":
        raise InvalidArgumentError(
            f"--format native writes a Flink savepoint; {label} is a kg snapshot (kg rescale writes a kg "
            "snapshot of it; kg convert turns that into a savepoint)"
        )


def _rescale_remote(
    source: Path | str,
    dest: Path | str,
    request: RescaleRequest,
    options: EngineOptions,
    on_progress: OnProgress | None,
    savepoint: Savepoint | None,
    label: str,
) -> RescaleResult:
    """Rescale where the input or the output is on an object store (``keygroup_cli.storage.remote``).

    A DEST prefix that holds any object is refused before anything is read. The input is downloaded into
    a scratch directory (a rescale reads every byte anyway) and rescaled there as a local one: validated,
    executed, verified and committed into a local staging directory; that is uploaded with its metadata
    file (``_metadata`` or ``_manifest.json``) last, so the target is a savepoint or snapshot only once
    complete. Scratch copies are removed whatever happens. A savepoint's ``_metadata`` is not fetched
    again: the download writes the bytes ``savepoint`` was opened from.
    """
    started = time.monotonic()
    report = on_progress or _ignore
    if not is_remote(dest):
        refuse_existing(Path(dest))  # before the download, not after it
    commit_file = "_metadata" if savepoint is not None else "_manifest.json"
    with contextlib.ExitStack() as stack:
        if is_remote(dest):
            local_dest: Path | str = stack.enter_context(remote_output(str(dest), commit_file, report))
        else:
            local_dest = dest
        local_source = Path(stack.enter_context(readable(source, on_progress=report, opened=savepoint)))
        if savepoint is not None:
            copy = try_open_savepoint(local_source)
            assert copy is not None
            result = rescale_savepoint(copy, local_dest, request, options, on_progress, label=label)
        else:
            require_intact(local_source, on_progress=on_progress, label=label)
            result = _snapshot_route(local_source, local_dest, request, options, on_progress)
    return replace(result, output=dest, wall_seconds=time.monotonic() - started)


def _snapshot_route(
    source: Path | str | Snapshot,
    dest: Path | str,
    request: RescaleRequest,
    options: EngineOptions,
    on_progress: OnProgress | None,
) -> RescaleResult:
    return rescale_snapshot(
        source,
        dest,
        request.new_parallelism,
        from_parallelism=request.from_parallelism,
        operators=request.operators,
        new_max_parallelism=request.new_max_parallelism,
        engine=options.engine,
        master=options.master,
        spark=options.spark,
        spark_conf=options.spark_conf,
        verbose=options.verbose,
        on_progress=on_progress,
        executor=options.executor,
    )


def _ignore(_stage: str, _completed: int, _total: int | None) -> None:
    return None


__all__ = [
    "RescaleResult",
    "build_manifest",
    "require_savepoint_for",
    "rescale",
    "run_rescale",
    "verify_input",
    "verify_output",
]

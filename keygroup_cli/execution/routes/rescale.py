"""``kg rescale``'s entry point: plan the rescale (``execution.routes.plan``), then run the plan by its route.

- a kg snapshot on a local file system: ``execution.routes.snapshot``;
- a Flink savepoint or checkpoint: ``execution.routes.savepoint`` (a savepoint comes out), reading a canonical
  savepoint where it is and writing where DEST is, local or on an object store;
- anything else on an object store: ``_rescale_remote`` below, a download around one of those two.

The route and the plan are chosen and made by ``execution.routes.plan``, what ``kg plan`` and ``--dry-run``
print. Each route validates before it writes, stages its output, verifies it and commits it atomically.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from keygroup_cli.assess.integrity import require_intact
from keygroup_cli.convert.inputs import readable
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.execution.engines import EngineChoice, Executor
from keygroup_cli.execution.options import EngineOptions
from keygroup_cli.execution.routes.plan import (
    DOWNLOAD,
    IN_PLACE,
    SNAPSHOT,
    RescaleInput,
    open_rescale_input,
    plan_input,
    require_savepoint_for,
)
from keygroup_cli.execution.routes.savepoint import (
    EngineRunner,
    OpenedInput,
    execute_savepoint_plan,
    savepoint_output,
)
from keygroup_cli.execution.routes.snapshot import (
    RescaleResult,
    build_manifest,
    execute_snapshot_plan,
    require_input_files_intact,
    require_output_intact,
)
from keygroup_cli.flink import try_open_savepoint
from keygroup_cli.planning.migration import MigrationRequest
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.snapshot.model import Snapshot
from keygroup_cli.storage import is_remote
from keygroup_cli.storage.remote import remote_output
from keygroup_cli.storage.staging import require_absent


def rescale(
    source: Path | str | Snapshot,
    dest: Path | str,
    new_parallelism: int,
    *,
    from_parallelism: int | None = None,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    output_format: str | None = None,
    migration: MigrationRequest | None = None,
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

    A kg snapshot gives a kg snapshot (``snapshot_rescale.execute_snapshot_plan``); a Flink savepoint or
    checkpoint gives a savepoint (``savepoint.execute_savepoint_plan``); either may be on an object store,
    in or out. The plan executed is the one ``plan()`` returns for the same arguments (``result.plan``).

    Args:
        source: The input snapshot (a directory, its ``_manifest.json``, or an opened ``Snapshot``), or a
            Flink savepoint directory.
        dest: Where the new snapshot is committed; must not exist.
        new_parallelism: The new parallelism of the selected operators.
        from_parallelism: If given, the parallelism every selected operator must have now.
        operators: uids or operator ids to rescale (default: all); the others are copied unchanged.
        new_max_parallelism: Change maxParallelism too (keys are re-hashed, SQL jobs' row keys too;
            refused for binary keys).
        output_format: ``"canonical"``, or ``"native"`` (a savepoint's keyed state as RocksDB databases);
            None: canonical, or native where only a NATIVE savepoint restores the state (the async state
            API's; ``result.savepoint_format_reason`` says so).
        migration: Operator migration (rename, assign a uid, drop) applied in the same pass, as ``kg migrate``
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
            ``$KG_WORKERS``, else the machine's cores, at most 4; ``keygroup_cli.core.workers``).

    Raises:
        InvalidArgumentError: Bad arguments or DEST exists (nothing written).
        InvalidInputError: The input is invalid or a file fails its checksum (nothing written).
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
        migration=migration,
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
    """``rescale`` with its arguments as values: open the input once, gate it, plan it, execute the plan.

    The route and the plan are ``execution.routes.plan``'s, the functions ``kg plan`` and ``--dry-run`` print
    (``open_rescale_input``, then ``plan_input`` on what the route reads); the result's ``plan`` is the one
    executed. The input's gate runs in them for every caller (a kg snapshot's, which reads every file,
    here): kg never rescales what ``kg verify`` rejects.
    """
    options = options or EngineOptions()
    # Tasks may run elsewhere (Spark executors work in their own directories): local paths go absolute.
    if not is_remote(dest):
        dest = Path(dest).absolute()
    rescale_input = open_rescale_input(source, request, dest)
    if rescale_input.route == IN_PLACE:
        # Local or on an object store: read where it is, keyed files written where DEST is.
        return _savepoint_route(rescale_input, dest, request, options, on_progress)
    if rescale_input.route == DOWNLOAD:
        return _rescale_remote(rescale_input, dest, request, options, on_progress)
    gated = rescale_input.source
    if isinstance(gated, Snapshot):
        require_intact(gated.path, on_progress=on_progress)
    else:
        require_intact(gated, on_progress=on_progress, label=rescale_input.label)
    return _snapshot_route(rescale_input, dest, request, options, on_progress)


def _savepoint_route(
    rescale_input: RescaleInput,
    dest: Path | str,
    request: RescaleRequest,
    options: EngineOptions,
    on_progress: OnProgress | None,
) -> RescaleResult:
    """Check DEST, open and plan the savepoint (its engine starting meanwhile), then execute the plan."""
    started = time.monotonic()
    report = on_progress or no_progress
    engines: list[EngineRunner] = []

    def start_engine(opened: OpenedInput) -> None:
        # The engine (a JVM for Spark) starts while operator state is decoded and planned.
        native = rescale_input.output_format == "native"
        engines.append(EngineRunner.start(opened, options, report, native_output=native))

    with savepoint_output(dest, rescale_input.output_format or "canonical") as output:
        planned = plan_input(
            rescale_input, request, on_progress=report, scratch=output.scratch, on_opened=start_engine
        )
        assert planned.opened is not None and planned.savepoint is not None
        result = execute_savepoint_plan(
            planned.opened, planned.savepoint, planned.request, engines[0], output, report, started
        )
    return replace(result, savepoint_format_reason=planned.format_reason)


def _rescale_remote(
    rescale_input: RescaleInput,
    dest: Path | str,
    request: RescaleRequest,
    options: EngineOptions,
    on_progress: OnProgress | None,
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
    report = on_progress or no_progress
    savepoint, label = rescale_input.savepoint, rescale_input.label
    if not is_remote(dest):
        require_absent(Path(dest))  # before the download, not after it
    commit_file = "_metadata" if savepoint is not None else "_manifest.json"
    with contextlib.ExitStack() as stack:
        if is_remote(dest):
            local_dest: Path | str = stack.enter_context(remote_output(str(dest), commit_file, report))
        else:
            local_dest = dest
        source = rescale_input.source
        assert not isinstance(source, Snapshot)
        local_source = Path(stack.enter_context(readable(source, on_progress=report, opened=savepoint)))
        if savepoint is not None:
            copy = try_open_savepoint(local_source)
            assert copy is not None
            local = replace(rescale_input, source=local_source, savepoint=copy, route=IN_PLACE)
            result = _savepoint_route(local, local_dest, request, options, on_progress)
        else:
            require_intact(local_source, on_progress=on_progress, label=label)
            local = RescaleInput(local_source, label, None, SNAPSHOT)
            result = _snapshot_route(local, local_dest, request, options, on_progress)
    return replace(result, output=dest, wall_seconds=time.monotonic() - started)


def _snapshot_route(
    rescale_input: RescaleInput,
    dest: Path | str,
    request: RescaleRequest,
    options: EngineOptions,
    on_progress: OnProgress | None,
) -> RescaleResult:
    """Check DEST, plan the kg snapshot's rescale (``plan_input``) and execute that plan."""
    started = time.monotonic()
    require_absent(Path(dest))
    planned = plan_input(rescale_input, request)
    assert planned.snapshot is not None
    return execute_snapshot_plan(planned.snapshot, planned.plan, dest, options, on_progress, started=started)


__all__ = [
    "RescaleResult",
    "build_manifest",
    "require_savepoint_for",
    "rescale",
    "run_rescale",
    "require_input_files_intact",
    "require_output_intact",
]

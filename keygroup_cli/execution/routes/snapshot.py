"""Rescale a local kg snapshot end to end: validate, plan, execute in a staging directory, verify, commit.

Order of events (each step can refuse; nothing is written before step 4):

1. DEST must not exist; the input snapshot must open and its manifest be valid;
2. ``plan_rescale`` validates the request (bounds, ``--from``, operators, binary keys);
3. every input file is verified against its manifest entry (size, xxh64) while the engine starts in a
   background thread (a missing Java surfaces here, as ``MissingDependencyError``);
4. the engine writes the state files into a staging directory beside DEST;
5. what was written is verified (sizes and checksums re-read from disk, rows per key group against the
   input's, operator-state rows against the plan), the manifest is written last, and the staging
   directory is renamed to DEST.

Any failure (Ctrl-C included) removes the staging directory: DEST stays absent, the input untouched.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keygroup_cli import __version__
from keygroup_cli.core.errors import ExecutionError
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.execution.engines import (
    EngineChoice,
    ExecutionResult,
    Executor,
    PendingExecutor,
    WrittenOperator,
    choose_engine,
)
from keygroup_cli.execution.jobs import snapshot as tasks
from keygroup_cli.execution.jobs.model import MIN_READ_TASK_BYTES
from keygroup_cli.execution.options import EngineOptions
from keygroup_cli.planning.plan import OperatorPlan, RescalePlan
from keygroup_cli.snapshot.checksums import file_digest, require_file_intact
from keygroup_cli.snapshot.manifest import write_manifest
from keygroup_cli.snapshot.model import (
    KeyedFile,
    Manifest,
    Operator,
    OperatorFile,
    Snapshot,
    StateDescriptor,
)
from keygroup_cli.storage.staging import staged_directory

if TYPE_CHECKING:
    from keygroup_cli.flink import CheckpointMetadata


@dataclass(frozen=True, slots=True)
class SavepointRescaleResult:
    """What a savepoint rescale wrote: the new savepoint's ``_metadata`` and what its streams hold."""

    #: The savepoint or checkpoint rescaled, and the new savepoint (a local path or an object-store URI).
    input: str
    output: str
    #: Operators in the new ``_metadata`` (all of them, with state or not).
    operators: int
    #: Keyed-state files written, and the entries they hold (0 where key groups were copied as bytes).
    keyed_files: int
    keyed_rows: int
    #: Operator-state streams written, and their elements.
    operator_files: int
    operator_rows: int
    #: Bytes of the state files written.
    bytes: int
    #: Whether operator state was written snappy-compressed (None: no stream written).
    compressed: bool | None
    #: The new savepoint's ``_metadata``, as sealed.
    metadata: CheckpointMetadata


@dataclass(frozen=True, slots=True)
class RescaleResult:
    """What a rescale did: the plan, the committed manifest, where, with which engine and why, how long."""

    plan: RescalePlan
    manifest: Manifest
    #: Where the result was committed: a local path, or the URI of an object-store prefix.
    output: Path | str
    engine: str
    wall_seconds: float
    #: Why ``engine`` ran: "default engine", "--engine spark", "key groups copied as bytes; no JVM needed"...
    engine_reason: str = ""
    #: For a Flink savepoint input: what was written at ``output`` (``manifest`` is kg's view of it).
    savepoint: SavepointRescaleResult | None = None
    #: For a savepoint rescale, the keyed files written per operator: bytes per new subtask. With the same
    #: maxParallelism key groups are copied as bytes (rows not decoded, so not counted).
    regrouped: Mapping[str, tuple[int, ...]] | None = None
    #: For a savepoint rescale with a new maxParallelism: keyed entries per new subtask, per operator.
    keyed_rows: Mapping[str, tuple[int, ...]] | None = None
    #: For a Flink savepoint written: ``"canonical"`` or ``"native"`` (``--format``); None for a kg snapshot.
    savepoint_format: str | None = None
    #: Why kg chose ``savepoint_format`` itself (no ``--format`` given: native for state of the async state
    #: API, which Flink restores only from a NATIVE savepoint), else None.
    savepoint_format_reason: str | None = None

    def operator(self, operator_id: str) -> Operator:
        """Return the new manifest entry of ``operator_id``."""
        op = self.manifest.operator(operator_id)
        assert op is not None
        return op


def execute_snapshot_plan(
    snapshot: Snapshot,
    plan: RescalePlan,
    dest: Path | str,
    options: EngineOptions,
    on_progress: OnProgress | None = None,
    *,
    started: float | None = None,
) -> RescaleResult:
    """Execute ``plan``, made from the opened kg ``snapshot``, and commit the result at ``dest`` (absent).

    The engine starts while every input file is checked against its manifest entry; it writes the state
    files into a staging directory beside DEST, what it wrote is verified, the manifest written last and
    the staging directory renamed to DEST. ``started`` (``time.monotonic()``) is when the rescale began.

    Raises:
        InvalidInputError: A file fails its checksum (nothing written).
        MissingDependencyError: Spark/Java missing or broken (nothing written).
        ExecutionError: Writing or verifying failed (nothing committed).
    """
    started = time.monotonic() if started is None else started
    report = on_progress or no_progress
    dest = Path(dest)
    engine = options.engine
    if options.executor is None:
        executor, reason = _start_engine(
            engine, snapshot, report, options.master, options.spark, options.verbose, options.spark_conf
        )
    else:
        executor = options.executor
        require_input_files_intact(snapshot, report)
        reason = engine.reason if isinstance(engine, EngineChoice) else "executor given by the caller"
    with staged_directory(dest) as staging:
        result = execute(executor, plan, snapshot, staging, report)
        manifest = build_manifest(snapshot.manifest, plan, result)
        require_output_intact(staging, snapshot, plan, manifest, report)
        write_manifest(staging, manifest)
    return RescaleResult(plan, manifest, dest, executor.name, time.monotonic() - started, reason)


def _start_engine(
    engine: str | EngineChoice | None,
    snapshot: Snapshot,
    report: OnProgress,
    master: str | None,
    spark: Any,
    verbose: bool,
    spark_conf: Mapping[str, str] | None,
) -> tuple[Executor, str]:
    """Start the engine in the background while the input is verified; return it and why it runs."""
    choice = choose_engine(engine, master=master, spark_conf=spark_conf, session=spark)
    pending = PendingExecutor.claim(
        choice.name, report, master=master, session=spark, verbose=verbose, config=spark_conf
    )
    require_input_files_intact(snapshot, report)
    return pending.result(), choice.reason


def execute(
    executor: Executor, plan: RescalePlan, snapshot: Snapshot, staging: Path, report: OnProgress
) -> ExecutionResult:
    """Write every state file of the rescaled ``snapshot`` into ``staging``; return their manifest entries.

    The engine runs the plan's jobs (``tasks.plan_snapshot_jobs``: keyed state, and the operators left as
    they are); operator state, small, is redistributed here (``tasks.write_operator_state``).
    """
    jobs = tasks.plan_snapshot_jobs(
        plan, snapshot, staging, pieces=executor.read_pieces(), min_piece_bytes=MIN_READ_TASK_BYTES
    )
    keyed = executor.run(jobs, staging, report)
    written = []
    for op_plan in plan.operators:
        op = snapshot.manifest.operator(op_plan.operator_id)
        assert op is not None, "the plan was made from this snapshot"
        if not op_plan.rescaled:
            written.append(WrittenOperator(op.operator_id, op.keyed_files, op.operator_files))
            continue
        keyed_files = op.keyed_files
        if op_plan.keyed_mode != "copy":
            new = keyed.get(op.operator_id, [])
            keyed_files = tuple(f.keyed_file for f in new if f.keyed_file is not None)
        operator_files = tasks.write_operator_state(snapshot, op, op_plan, staging)
        written.append(WrittenOperator(op.operator_id, keyed_files, operator_files))
    return ExecutionResult(executor.name, tuple(written))


def require_input_files_intact(snapshot: Snapshot, report: OnProgress) -> None:
    """Check every input file against its manifest entry (size, xxh64) before anything is read."""
    files = _all_files(snapshot.manifest)
    report("verify input", 0, len(files))
    for i, f in enumerate(files, 1):
        require_file_intact(snapshot.path, f)
        report("verify input", i, len(files))


def build_manifest(source: Manifest, plan: RescalePlan, result: ExecutionResult) -> Manifest:
    """Return the manifest of the rescaled ``source``; ``origin`` records what was done to which input."""
    operators = rescaled_manifest_operators(source.operators, plan, result)
    origin = rescale_origin(source.snapshot_id, source.origin, result.engine, plan)
    return replace(
        source,
        created_by=f"kg {__version__}",
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        origin=origin,
        operators=tuple(operators),
    )


def rescale_origin(
    input_id: int, input_origin: Mapping[str, Any], engine: str, plan: RescalePlan
) -> dict[str, Any]:
    """Return the ``origin`` of a rescaled manifest: the input, the engine, each operator's change."""
    return {
        "kind": "rescale",
        "input_snapshot_id": input_id,
        "input_origin": dict(input_origin),
        "engine": engine,
        "operators": [
            {
                "uid": p.uid,
                "operator_id": p.operator_id,
                "old_parallelism": p.old_parallelism,
                "new_parallelism": p.new_parallelism,
                "old_max_parallelism": p.old_max_parallelism,
                "new_max_parallelism": p.new_max_parallelism,
            }
            for p in plan.rescaled
        ],
    }


def rescaled_manifest_operators(
    source: Sequence[Operator], plan: RescalePlan, result: ExecutionResult
) -> tuple[Operator, ...]:
    """Return the operators of the rescaled ``source``: the plan's parallelism, the files written."""
    by_id = {op.operator_id: op for op in source}
    operators = []
    for op_plan in plan.operators:
        old = by_id[op_plan.operator_id]
        written = result.operator(op_plan.operator_id)
        states = old.states
        if op_plan.operator_state is not None and not op_plan.operator_state.unchanged:
            states = tuple(_mark_replicated(s) for s in old.states)
        operators.append(
            replace(
                old,
                states=states,
                parallelism=op_plan.new_parallelism,
                max_parallelism=op_plan.new_max_parallelism,
                keyed_files=tuple(sorted(written.keyed_files, key=lambda f: f.subtask)),
                operator_files=tuple(sorted(written.operator_files, key=lambda f: f.subtask)),
            )
        )
    return tuple(operators)


def _mark_replicated(state: StateDescriptor) -> StateDescriptor:
    """Mark a redistributed union state: every new subtask now holds the same complete list."""
    if state.kind != "operator-union" or state.replicated:
        return state
    return replace(state, extensions={**state.extensions, "replicated": True})


def require_output_intact(
    directory: Path, source: Snapshot, plan: RescalePlan, manifest: Manifest, report: OnProgress
) -> None:
    """Check what the engine wrote before committing it.

    Every file is re-read from disk (size and xxh64 against what the writer recorded); Parquet footers
    must hold the recorded row counts; rows per key group must equal the input's (same maxParallelism)
    or add up to the input's total (re-hash); operator-state rows must match the plan.

    Raises:
        ExecutionError: Anything differs (``OUTPUT_VERIFICATION_FAILED``).
    """
    import pyarrow.parquet as pq

    files = _all_files(manifest)
    report("verify output", 0, len(files))
    for i, f in enumerate(files, 1):
        size, digest = file_digest(directory / f.path)
        if (size, digest) != (f.bytes, f.xxh64):
            _fail(f"{f.path}: {size} bytes, xxh64 {digest} on disk; the writer recorded {f.bytes}, {f.xxh64}")
        footer_rows = pq.ParquetFile(directory / f.path).metadata.num_rows
        if footer_rows != f.rows:
            _fail(f"{f.path}: the Parquet footer holds {footer_rows} rows; the writer recorded {f.rows}")
        report("verify output", i, len(files))
    require_row_counts_match(source.manifest.operators, plan, manifest.operators)


def require_row_counts_match(
    source: Sequence[Operator], plan: RescalePlan, rescaled: Sequence[Operator]
) -> None:
    """Check the rows the ``rescaled`` operators record against ``source``'s and the plan.

    Raises:
        ExecutionError: They differ (``OUTPUT_VERIFICATION_FAILED``).
    """
    by_id = {op.operator_id: op for op in source}
    for op_plan, new in zip(plan.operators, rescaled, strict=True):
        old = by_id[op_plan.operator_id]
        _require_keyed_counts_match(op_plan, old, new)
        _require_operator_counts_match(op_plan, old, new)


def _require_keyed_counts_match(plan: OperatorPlan, old: Operator, new: Operator) -> None:
    # Under a maxParallelism change key groups are renumbered (and operators without keyed state are not
    # in "rehash" mode), so only the totals are comparable.
    if plan.keyed_mode == "rehash" or new.max_parallelism != old.max_parallelism:
        if new.keyed_rows != old.keyed_rows:
            _fail(f"operator {plan.label!r}: {new.keyed_rows} keyed rows written, {old.keyed_rows} read")
        return
    expected = _rows_per_key_group(old.keyed_files, old.max_parallelism)
    if _rows_per_key_group(new.keyed_files, new.max_parallelism) != expected:
        _fail(f"operator {plan.label!r}: rows per key group differ from the input's")


def _rows_per_key_group(files: Sequence[KeyedFile], max_parallelism: int) -> list[int]:
    rows = [0] * max_parallelism
    for f in files:
        rows[f.key_group_start : f.key_group_end + 1] = f.key_group_rows
    return rows


def _require_operator_counts_match(plan: OperatorPlan, old: Operator, new: Operator) -> None:
    expected: Sequence[int]
    if plan.operator_state is None:
        # Not rescaled (same parallelism), or no operator state at all (all zeros).
        expected = _rows_per_subtask(old.operator_files, new.parallelism)
    else:
        expected = plan.operator_state.new_counts
    if _rows_per_subtask(new.operator_files, new.parallelism) != list(expected):
        _fail(f"operator {plan.label!r}: operator-state rows per subtask differ from the plan")


def _rows_per_subtask(files: Sequence[OperatorFile], parallelism: int) -> list[int]:
    rows = [0] * parallelism
    for f in files:
        rows[f.subtask] = f.rows
    return rows


def _all_files(manifest: Manifest) -> list[KeyedFile | OperatorFile]:
    files: list[KeyedFile | OperatorFile] = []
    for op in manifest.operators:
        files.extend(op.keyed_files)
        files.extend(op.operator_files)
    return files


def _fail(message: str) -> None:
    raise ExecutionError(f"output verification failed: {message}", code="OUTPUT_VERIFICATION_FAILED")


__all__ = [
    "RescaleResult",
    "SavepointRescaleResult",
    "build_manifest",
    "require_row_counts_match",
    "execute",
    "execute_snapshot_plan",
    "rescale_origin",
    "rescaled_manifest_operators",
    "require_input_files_intact",
    "require_output_intact",
]

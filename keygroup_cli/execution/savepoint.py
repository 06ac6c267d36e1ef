"""Rescale a Flink savepoint directly into a new savepoint: validate, convert, rescale, write back.

``kg rescale SAVEPOINT --to Q [--max-parallelism M2] --out NEW_SAVEPOINT`` is the kg-snapshot rescale with
a conversion on each side, so every guarantee of ``keygroup_cli.execution.rescale`` holds here as well:

1. **Validate first, from ``_metadata`` alone** (``preflight``): DEST absent, a canonical savepoint
   (NATIVE and incremental are refused), the operators named exist, ``--from`` matches, Q and M2 within
   Flink's bounds, no maxParallelism change for keys kg cannot re-hash. A refusal writes nothing.
2. Decode the savepoint into a kg snapshot in a scratch directory beside DEST (``savepoint_to_snapshot``).
3. Rescale it with the chosen engine (Spark by default), which verifies its input and output.
4. Write the canonical savepoint (``snapshot_to_savepoint``): staged beside DEST, checked (``_metadata``
   re-read, key-group ranges, file sizes and offsets, entry counts), committed by one atomic rename.

The scratch directory is removed whatever happens, so a failure at any step, Ctrl-C included, leaves DEST
absent and the input savepoint untouched.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from keygroup_cli.execution import (
    EngineChoice,
    Executor,
    OnProgress,
    PendingExecutor,
    choose_engine,
    get_executor,
)
from keygroup_cli.execution.rescale import RescaleResult, rescale
from keygroup_cli.flink import FlinkSnapshot, read_flink_metadata
from keygroup_cli.flink.convert import (
    check_convertible,
    check_destination,
    key_types,
    savepoint_to_snapshot,
    snapshot_to_savepoint,
)
from keygroup_cli.flink.heap_layout import canonical_view, needs_canonical_view
from keygroup_cli.flink.regroup import (
    RegroupedFile,
    keyed_handles,
    regroup_keyed_state,
    shared_keyed_header,
)
from keygroup_cli.planning import operator_target, select_operators, validate_operator_request
from keygroup_cli.snapshot.staging import scratch_directory


def preflight(
    savepoint: FlinkSnapshot,
    new_parallelism: int,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    *,
    expected_parallelism: int | None = None,
) -> None:
    """Refuse a savepoint rescale that cannot succeed, reading only ``_metadata`` and keyed headers.

    Raises:
        UnsupportedFormatError: Not a canonical savepoint, or a maxParallelism change of binary keys.
        InvalidArgumentError: An unknown operator, ``--from`` mismatch, or bounds violated.
    """
    check_convertible(savepoint)
    all_operators = savepoint.metadata.operators
    with_state = {op.operator_id for op in all_operators if any(s.has_state for s in op.subtasks)}
    selected = select_operators(all_operators, operators, expected_parallelism, with_state)
    types = key_types(savepoint)
    for op in all_operators:
        target = operator_target(op, selected, operators, new_parallelism, new_max_parallelism)
        if target is not None:
            validate_operator_request(
                op,
                types.get(op.operator_id),
                target,
                new_max_parallelism,
                expected_parallelism if op.operator_id in selected else None,
            )


def rescale_savepoint(
    source: Path | str,
    dest: Path | str,
    new_parallelism: int,
    *,
    from_parallelism: int | None = None,
    operators: Sequence[str] | None = None,
    new_max_parallelism: int | None = None,
    compression: bool | None = None,
    engine: str | EngineChoice | None = None,
    master: str | None = None,
    spark: Any = None,
    spark_conf: Mapping[str, str] | None = None,
    verbose: bool = False,
    on_progress: OnProgress | None = None,
    executor: Executor | None = None,
) -> RescaleResult:
    """Rescale the canonical Flink savepoint ``source`` and commit a new savepoint at ``dest``.

    Arguments are those of ``keygroup_cli.execution.rescale.rescale``, plus ``compression`` (snappy for the
    new state files; None keeps what the source used). The result's ``manifest`` describes the rescaled
    state (kg's view of it) and ``savepoint`` what was written.

    Raises:
        InvalidArgumentError: Bad arguments or DEST exists (nothing written).
        UnsupportedFormatError: Not a canonical savepoint, or a maxParallelism change of binary keys.
        InvalidSnapshotError: Missing or corrupt state files (nothing committed).
        MissingDependencyError: Spark/Java missing or broken (nothing committed).
        ExecutionError: Writing or verifying failed (nothing committed).
    """
    started = time.monotonic()
    report = on_progress or _ignore
    dest = Path(dest)
    check_destination(dest)
    with scratch_directory(dest) as scratch:
        savepoint = read_flink_metadata(source)
        if needs_canonical_view(savepoint):
            # A HashMap checkpoint or NATIVE HashMap savepoint: its key groups are rewritten in the
            # canonical layout first, and the rest of the rescale reads that view.
            savepoint = canonical_view(savepoint, scratch / "canonical")
            source = scratch / "canonical"
        preflight(
            savepoint,
            new_parallelism,
            operators,
            new_max_parallelism,
            expected_parallelism=from_parallelism,
        )
        headers = _regroupable(savepoint, new_max_parallelism)
        choice = None
        if executor is None and headers is not None:
            # Key groups are copied as bytes by kg itself, and operator state is small and redistributed
            # on the driver by either engine: starting a JVM would only add seconds.
            executor = get_executor("local")
            choice = EngineChoice(
                "local", "key groups copied as bytes (same maxParallelism): no Spark needed"
            )
        elif executor is None:
            choice = choose_engine(engine)
            # The engine (a JVM for Spark) starts while the savepoint is decoded.
            pending = PendingExecutor(
                choice.name, report, master=master, session=spark, verbose=verbose, config=spark_conf
            )
        decoded = scratch / "input.kg"
        rescaled = scratch / "rescaled.kg"
        savepoint_to_snapshot(
            source, decoded, keyed=headers is None, on_progress=_stage(report, "read savepoint")
        )
        if executor is None:
            executor = pending.result()
        result = rescale(
            decoded,
            rescaled,
            new_parallelism,
            from_parallelism=from_parallelism,
            operators=operators,
            new_max_parallelism=new_max_parallelism,
            engine=choice if choice is not None else engine,
            master=master,
            spark=spark,
            verbose=verbose,
            on_progress=report,
            executor=executor,
        )
        regroup = None
        copied: dict[str, tuple[int, ...]] = {}
        if headers is not None:
            targets = {p.operator_id: p.new_parallelism for p in result.plan.operators}

            def regroup(staging: Path) -> dict[str, list[RegroupedFile]]:
                return _regroup_all(savepoint, headers, targets, staging, copied, report)

        written = snapshot_to_savepoint(
            rescaled,
            dest,
            compression=None if headers is not None else compression,
            on_progress=_stage(report, "write savepoint"),
            regroup=regroup,
        )
    return replace(
        result,
        output=dest,
        savepoint=written,
        regrouped=copied or None,
        wall_seconds=time.monotonic() - started,
    )


def _regroup_all(
    savepoint: FlinkSnapshot,
    headers: dict[str, bytes],
    targets: dict[str, int],
    staging: Path,
    copied: dict[str, tuple[int, ...]],
    report: OnProgress,
) -> dict[str, list[RegroupedFile]]:
    """Copy every keyed operator's key groups into its new subtasks' files; record bytes in ``copied``."""
    by_id = {op.operator_id: op for op in savepoint.metadata.operators}
    files = {}
    for done, (op_id, header) in enumerate(headers.items(), 1):
        files[op_id] = regroup_keyed_state(savepoint, by_id[op_id], header, targets[op_id], staging)
        copied[op_id] = tuple(f.size for f in files[op_id])
        report("copy key groups", done, len(headers))
    return files


def _regroupable(savepoint: FlinkSnapshot, new_max_parallelism: int | None) -> dict[str, bytes] | None:
    """Return the shared keyed header of every keyed operator if key groups can be copied as bytes.

    That needs the same maxParallelism (key groups keep their numbers) and, per operator, one header for
    all subtasks (state ids in the blocks index it). Otherwise (None) the keyed state is decoded.
    """
    headers = {}
    for op in savepoint.metadata.operators:
        if not keyed_handles(op):
            continue
        if new_max_parallelism not in (None, op.max_parallelism):
            return None
        header = shared_keyed_header(savepoint, op)
        if header is None:
            return None
        headers[op.operator_id] = header
    return headers


def _stage(report: OnProgress, name: str) -> OnProgress:
    def renamed(_stage: str, completed: int, total: int | None) -> None:
        report(name, completed, total)

    return renamed


def _ignore(_stage: str, _completed: int, _total: int | None) -> None:
    return None


__all__ = ["preflight", "rescale_savepoint"]

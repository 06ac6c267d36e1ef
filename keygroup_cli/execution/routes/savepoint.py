"""Rescale a Flink savepoint straight into a new savepoint: plan on the driver, tasks, commit.

``kg rescale SAVEPOINT --to Q [--max-parallelism M2] --out NEW_SAVEPOINT``:

1. **Validate first, from ``_metadata`` and the keyed headers alone** (``require_rescalable``): DEST absent, a
   canonical savepoint (or a layout kg rewrites as one), the operators named exist, ``--from`` matches, Q
   and M2 within Flink's bounds, no maxParallelism change for keys kg cannot re-hash. A refusal writes
   nothing. The plan is ``execution.routes.savepoint_plan.plan_savepoint``'s, made through
   ``execution.routes.plan`` (what ``kg plan`` prints); this module opens the input (``open_input``) and
   executes the plan (``execute_savepoint_plan``).
2. **Operator state** (small) is decoded into memory on the driver when the savepoint is opened
   (``convert.operator_tables``), planned on the savepoint's own handles and streams
   (``planning.savepoint``), redistributed there as Flink does (``operator_state``), and encoded into the
   new savepoint's operator-state streams at the commit under the header bytes read when it was opened. No
   kg snapshot, manifest or kg operator model is made on the way; the result is a ``SavepointRescaleResult``.
3. **Keyed state** never passes through a kg snapshot. With the same maxParallelism the key groups' blocks
   are copied as bytes (``flink.write.regroup``), after every block of the input passed ``kg verify``'s check.
   With a new one, the engine runs the tasks of ``execution.jobs.savepoint``: read tasks decode key-group
   ranges of the old files into Arrow batches (as strictly as ``kg verify``) and re-key them, a shuffle
   groups them by new subtask, write tasks encode each new subtask's file straight into the staged
   savepoint. On Spark both run on the executors. ``--format native`` always runs the engine's tasks: each
   new subtask's write task builds its RocksDB database (at the same maxParallelism without a shuffle).
4. **The commit** (``flink.write.rescaled.write_rescaled``, then ``flink.write.commit.seal_savepoint``): the
   driver describes ``_metadata`` from the opened input, the plan and the write tasks' handles, encodes it
   once, checks it (key-group ranges, file sizes and offsets, every operator stream decodes; keyed blocks were
   checked as they were encoded or before they were copied), and renames the staging directory to DEST.

Scratch and staging are removed whatever happens, so a failure at any step, Ctrl-C included, leaves DEST
absent and the input savepoint untouched.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keygroup_cli import __version__
from keygroup_cli.assess.integrity import require_intact
from keygroup_cli.convert.from_savepoint import (
    require_convertible,
    require_destination_absent,
    require_no_channel_state,
)
from keygroup_cli.core.errors import InvalidArgumentError, KgError, UnsupportedFormatError
from keygroup_cli.core.progress import OnProgress, staged
from keygroup_cli.core.workers import worker_count
from keygroup_cli.execution.engines import (
    Executor,
    PendingExecutor,
    choose_engine,
    expect_rekey,
    get_executor,
)
from keygroup_cli.execution.jobs.model import MIN_READ_TASK_BYTES, KeyedJob
from keygroup_cli.execution.jobs.savepoint import plan_keyed_jobs
from keygroup_cli.execution.options import EngineOptions
from keygroup_cli.execution.routes.snapshot import RescaleResult, SavepointRescaleResult, rescale_origin
from keygroup_cli.flink import (
    CheckpointMetadata,
    FlinkCheckpoint,
    KeyedStateHeader,
    OperatorStateHandle,
    RegroupedFile,
    RelativeFileHandle,
    RescaledOperator,
    Savepoint,
    SealedSavepoint,
    WrittenState,
    as_native,
    canonical_view,
    kernels_expected,
    needs_canonical_view,
    open_savepoint,
    regroup_keyed_state,
    require_streams_decode,
    seal_savepoint,
    shared_keyed_header,
    write_raw_timers,
    write_rescaled,
)
from keygroup_cli.planning.migration import OperatorChange, apply_migration
from keygroup_cli.planning.plan import checked_new_max_parallelism, operator_target, select_operators
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.snapshot.model import Manifest, Operator, OperatorFile, StateDescriptor
from keygroup_cli.storage import transfer
from keygroup_cli.storage.locations import Location, is_remote, location
from keygroup_cli.storage.remote import scratch_root
from keygroup_cli.storage.staging import scratch_directory, staged_directory

if TYPE_CHECKING:
    from keygroup_cli.execution.routes.savepoint_plan import SavepointPlan

METADATA = "_metadata"


def require_rescalable(
    savepoint: FlinkCheckpoint, request: RescaleRequest, *, types: Mapping[str, str] | None = None
) -> None:
    """Refuse ``request`` on a savepoint if it cannot succeed, reading only ``_metadata`` and keyed headers.

    ``types`` are the operators' key types by id when the caller read them already (the dry-run reads
    them from a heap or RocksDB layout's own headers, ``execution.routes.savepoint_plan``); by default they
    are read from ``savepoint``'s canonical keyed headers.

    Raises:
        UnsupportedFormatError: Not a canonical savepoint, or a maxParallelism change of binary keys.
        InvalidArgumentError: An unknown operator, ``--from`` mismatch, or bounds violated.
    """
    require_convertible(savepoint, raw_keyed=True)  # timers in raw keyed state: flink.write.raw_timers
    all_operators = savepoint.metadata.operators
    with_state = set(Savepoint.of(savepoint).with_state)
    operators, new_max_parallelism = request.operators, request.new_max_parallelism
    selected = select_operators(
        all_operators, operators, request.from_parallelism, with_state, new_max_parallelism
    )
    if types is None:
        types = Savepoint.of(savepoint).key_types
    for op in all_operators:
        target = operator_target(op, selected, operators, request.new_parallelism, new_max_parallelism)
        if target is not None:
            checked_new_max_parallelism(
                op,
                types.get(op.operator_id),
                target,
                new_max_parallelism,
                request.from_parallelism if op.operator_id in selected else None,
            )


@dataclass(frozen=True, slots=True)
class OpenedInput:
    """A savepoint rescale's input, opened once and past its gate."""

    #: What the user named.
    origin: Savepoint
    #: What is read: ``origin``, or the canonical rewrite of a heap or RocksDB layout.
    savepoint: Savepoint
    #: Each keyed operator's shared header when key groups are copied as bytes, else None (re-hashed).
    copy_headers: dict[str, bytes] | None
    #: How the input is named in messages (a copied block that fails the check names it so).
    label: str = ""
    #: The operator migration applied to ``origin`` (``planning.migration.apply_migration``): what the plan
    #: reports.
    changes: tuple[OperatorChange, ...] = ()
    #: ``--operator`` as it names operators after the migration (None: every operator).
    operators: tuple[str, ...] | None = None


def open_input(
    source: Path | str | Savepoint,
    scratch: Path,
    request: RescaleRequest,
    report: OnProgress,
    label: str | None = None,
    *,
    copy: bool = True,
) -> OpenedInput:
    """Open the input once and refuse it if ``kg verify`` would (the gate runs here, inside the library).

    The request's operator migration (``--rename``, ``--assign-uid``, ``--drop``) is applied to the opened
    savepoint first, in memory (``planning.migration.apply_migration``): what follows reads, plans and writes
    the operators as the migration leaves them, from the same files, in the same pass. ``copy=False``: never
    copy key groups as bytes (``--format native``: the engine's tasks write every subtask), so
    ``copy_headers`` is None.

    No key-group block is read here: the read tasks decode every block as strictly as ``kg verify`` does,
    and key groups copied as bytes are checked as ``kg verify`` checks them in the pass that copies them
    (``flink.write.regroup``). A heap or RocksDB layout is rewritten in the canonical layout in ``scratch``
    and read from there.

    Raises:
        InvalidInputError: ``INPUT_FAILS_VERIFY``, or the input cannot be read.
        UnsupportedFormatError: A format kg does not read, or channel state at a parallelism change.
        InvalidArgumentError: A change the migration refuses (``planning.migration.apply_changes``); nothing
        read
            beyond ``_metadata``.
    """
    origin = source if isinstance(source, Savepoint) else open_savepoint(source)
    migrated = apply_migration(origin, request.migration, request.operators)
    origin = migrated.savepoint
    new_max_parallelism = request.new_max_parallelism
    changes, operators = migrated.changes, migrated.operators
    canonical = not needs_canonical_view(origin)
    headers = _copyable(origin, new_max_parallelism) if canonical and copy else None
    verify = staged(report, "verify input")
    # A layout kg rewrites has its headers checked in the rewrite (below), so each is read once.
    require_intact(origin, blocks=False, label=label, on_progress=verify, layout_headers=canonical)
    require_no_channel_state(origin)  # before a heap checkpoint's rewrite, naming the input
    name = label or str(origin.directory)
    if canonical:
        return OpenedInput(origin, origin, headers, name, changes, operators)
    # A HashMap checkpoint or NATIVE HashMap savepoint: its key groups are rewritten in the canonical
    # layout first, and the rest of the rescale reads that view.
    try:
        view = Savepoint.rewritten(canonical_view(origin, scratch / "canonical"), origin)
    except KgError:
        # The rewrite refused the layout: where the reason is a class kg verify rejects, the gate says so
        # (its headers are read a second time only on this path, which writes nothing).
        require_intact(origin, blocks=False, label=label, on_progress=verify)
        raise
    headers = _regroupable(view, new_max_parallelism) if copy else None
    # The view's keyed headers are the original's serializer snapshots: checked as the gate checks a
    # canonical input's, whether its key groups are then copied or re-hashed (no block read here).
    require_intact(view, blocks=False, label=label, on_progress=verify)
    return OpenedInput(origin, view, headers, name, changes, operators)


def _copyable(savepoint: Savepoint, new_max_parallelism: int | None) -> dict[str, bytes] | None:
    """``_regroupable``, or None where a keyed header does not parse (the gate then says why)."""
    try:
        return _regroupable(savepoint, new_max_parallelism)
    except KgError:
        return None


@dataclass(frozen=True)
class SavepointOutput:
    """Where a savepoint rescale writes: DEST (checked), its object-store location if any, and scratch."""

    dest: Path | str
    #: DEST on an object store, else None (a local DEST is staged beside itself and renamed into place).
    remote: Location | None
    #: Removed whatever happens: beside a local DEST (like its staging), else in ``$KG_SCRATCH_DIR``.
    scratch: Path


@contextlib.contextmanager
def savepoint_output(dest: Path | str, output_format: str = "canonical") -> Iterator[SavepointOutput]:
    """Check DEST (absent, or an object-store prefix holding no object); yield it with a scratch directory.

    Raises:
        InvalidArgumentError: DEST exists or holds objects, or ``--format native`` to an object store
            (``execution.routes.rescale`` stages a NATIVE output locally, then uploads it).
    """
    remote = location(str(dest)) if is_remote(dest) else None
    if remote is not None:
        if output_format == "native":
            raise InvalidArgumentError(
                "--format native writes into a local staging directory, not to an object store"
            )
        transfer.require_empty(remote, METADATA)
    else:
        require_destination_absent(dest)
    with _scratch(dest) as scratch:
        yield SavepointOutput(str(dest) if remote is not None else Path(dest), remote, scratch)


def execute_savepoint_plan(
    opened: OpenedInput,
    planned: SavepointPlan,
    request: RescaleRequest,
    engine: EngineRunner,
    output: SavepointOutput,
    report: OnProgress,
    started: float,
) -> RescaleResult:
    """Execute the plan of an opened savepoint: key groups copied or the engine's tasks, then the commit.

    ``planned`` is ``execution.routes.savepoint_plan.plan_savepoint``'s, made on ``opened`` (the same value
    ``kg plan`` prints). The keyed tasks are compiled here, for ``engine`` and into the staging directory
    once it exists (``_Keyed.write``); then the writer describes, ``flink.write.commit`` seals, and the rename
    or the upload publishes (``_commit``). The result's ``manifest`` describes the rescaled state (kg's view
    of it) and ``savepoint`` what was written.

    Raises:
        InvalidInputError: Missing or corrupt state files (nothing committed).
        MissingDependencyError: Spark/Java missing or broken (nothing committed).
        ExecutionError: Writing or verifying failed (nothing committed).
    """
    remote_dest = str(output.dest) if output.remote is not None else None
    keyed = _Keyed(opened, planned, remote_dest, output.remote, request.compression)
    written, sealed = _commit(planned, keyed, engine, output.dest, output.remote, output.scratch, report)
    return RescaleResult(
        planned.plan,
        _described(opened, planned, engine.executor().name, sealed.metadata),
        output.dest,
        engine.executor().name,
        time.monotonic() - started,
        engine.reason,
        savepoint=_written(opened, output.dest, written, sealed, keyed),
        regrouped=keyed.sizes or None,
        keyed_rows=keyed.rows or None,
        savepoint_format=request.output_format,
    )


def require_no_v2_state_in_canonical(headers: Mapping[str, KeyedStateHeader], where: str) -> None:
    """Refuse a canonical output of state written through the async state API (``KEY_VALUE_V2``).

    ``headers``: one keyed header per operator, by its label. No Flink 2.3 backend restores such state
    from a canonical savepoint: the HashMap backend refuses the type ("Unexpected state type:
    KEY_VALUE_V2"), RocksDB fails casting its v2 meta info, and ForSt restores only NATIVE savepoints.
    ``--format native`` is what such a job restores.

    Raises:
        UnsupportedFormatError: ``FLINK_V2_STATE_CANONICAL``.
    """
    for label, header in headers.items():
        v2 = sorted(s.name for s in header.states or () if s.backend_type_name == "KEY_VALUE_V2")
        if v2:
            raise UnsupportedFormatError(
                f"{where}: operator {label!r} holds state of the async state API (KEY_VALUE_V2: "
                f"{', '.join(v2)}), which no Flink backend restores from a canonical savepoint; pass "
                "--format native",
                code="FLINK_V2_STATE_CANONICAL",
            )


def keyed_headers(savepoint: Savepoint) -> dict[str, KeyedStateHeader]:
    """Return the first keyed header of every keyed operator of a canonical savepoint, by its label.

    Only for messages: operators sharing a label keep one entry.
    """
    by_id = {op.operator_id: op for op in savepoint.metadata.operators}
    return {
        by_id[op_id].label: streams[0].header for op_id, streams in savepoint.keyed_streams.items() if streams
    }


def _commit(
    planned: SavepointPlan,
    keyed: _Keyed,
    runner: EngineRunner,
    dest: Path | str,
    remote: Location | None,
    scratch: Path,
    report: OnProgress,
) -> tuple[WrittenState, SealedSavepoint]:
    """Stage, write, seal and publish: rename a local DEST into place, or upload with ``_metadata`` last.

    Anything that fails leaves DEST as it was: staging is removed, keyed files written on the store
    are deleted.
    """
    staged = scratch / "savepoint" if remote is not None else Path(dest)
    try:
        with staged_directory(staged) as staging:
            keyed.write(runner.executor(), staging, scratch, report, runner.workers)
            raw_keyed = write_raw_timers(planned.raw_timers, staging)
            written = write_rescaled(
                keyed.opened.savepoint,
                rescaled_savepoint_operators(planned),
                keyed.files,
                staging,
                raw_keyed=raw_keyed,
                # Copied key groups keep their bytes; the encoder's choice applies to what it encodes.
                compression=keyed.compression,
                keyed_root=keyed.keyed_root,
                on_progress=report,
            )
            if planned.native:
                written = replace(written, metadata=as_native(written.metadata))
            # An upload checks the operator streams where they will be, beside the keyed files.
            sealed = seal_savepoint(
                staging, written.metadata, keyed_root=keyed.keyed_root, check_streams=remote is None
            )
        if remote is not None:
            _upload(staged, remote, keyed.names, report, sealed.metadata)
    except BaseException:
        if remote is not None and keyed.keyed_root is not None and keyed.names:
            transfer.remove_written(remote, keyed.names)
        raise
    return written, sealed


@dataclass
class EngineRunner:
    """The engine a rescale runs on, started while operator state is decoded."""

    ready: Executor | None
    pending: PendingExecutor | None
    reason: str
    #: Threads of kg's own key-group copy (``keygroup_cli.core.workers``).
    workers: int = 1

    @classmethod
    def start(
        cls, opened: OpenedInput, options: EngineOptions, report: OnProgress, *, native_output: bool = False
    ) -> EngineRunner:
        """Start the engine for ``opened``: kg's own copy of key groups as bytes, or one in the background.

        A JVM for Spark starts while the plan is made (``EngineRunner.executor`` waits for it).
        ``native_output``: the keyed state is written as RocksDB databases (``--format native``).
        """
        workers = worker_count(options.workers)
        if options.executor is not None:
            return cls(options.executor, None, "executor given by the caller", workers)
        if opened.copy_headers is not None:
            # Key groups are copied as bytes by kg itself, and operator state is small and redistributed
            # on the driver by either engine: starting a JVM would only add seconds.
            reason = "key groups copied as bytes (same maxParallelism): no Spark needed"
            return cls(get_executor("local", workers=workers), None, reason, workers)
        keyed = opened.savepoint.keyed_streams.values()
        rekey_bytes = sum(stream.handle.size for streams in keyed for stream in streams)
        native_kernels = kernels_expected()
        choice = choose_engine(
            options.engine,
            master=options.master,
            spark_conf=options.spark_conf,
            session=options.spark,
            rekey_bytes=rekey_bytes,
            native_kernels=native_kernels,
            native_output=native_output,
        )
        expect_rekey(choice.name, rekey_bytes, native_kernels)
        # The engine (a JVM for Spark) starts while operator state is decoded.
        pending = PendingExecutor.claim(
            choice.name,
            report,
            master=options.master,
            session=options.spark,
            verbose=options.verbose,
            config=options.spark_conf,
            workers=workers,
        )
        return cls(None, pending, choice.reason, workers)

    def executor(self) -> Executor:
        """Return the engine, waiting for it to be ready (a missing Java surfaces here)."""
        if self.ready is None:
            assert self.pending is not None
            self.ready = self.pending.result()
        return self.ready


@dataclass
class _Keyed:
    """The keyed half of a savepoint rescale: planned before staging, its tasks compiled and run into it."""

    opened: OpenedInput
    planned: SavepointPlan
    #: An object-store DEST, where the engine's write tasks put the keyed files (None: local staging).
    remote_dest: str | None
    remote: Location | None
    #: Snappy for what is encoded; None keeps the input's (copied key groups keep their bytes anyway).
    compression: bool | None
    files: dict[str, list[RegroupedFile]] = field(default_factory=dict)
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    rows: dict[str, tuple[int, ...]] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)

    @property
    def keyed_root(self) -> str | None:
        """Where write tasks put the keyed files when not in the staging directory (an object-store DEST)."""
        return None if self.opened.copy_headers is not None else self.remote_dest

    def write(
        self, executor: Executor, staging: Path, scratch: Path, report: OnProgress, workers: int
    ) -> None:
        """Copy the key groups as bytes (``workers`` threads), or run the engine's tasks; keep the files."""
        if self.opened.copy_headers is not None:
            headers, targets = self.opened.copy_headers, self.planned.targets
            self.files = _regroup_all(self.opened, headers, targets, staging, self.sizes, report, workers)
            return
        jobs = self.jobs(self.keyed_root or str(staging), executor.read_pieces())
        self.names.extend(w.name for job in jobs for w in job.writes)
        if self.remote is not None and self.keyed_root is not None:
            transfer.mark_writer(self.remote)
        written = executor.run(jobs, scratch, report)
        for op_id, op_files in written.items():
            self.files[op_id] = [
                RegroupedFile(f.subtask, f.handle, f.size, f.key_groups_with_data) for f in op_files
            ]
            self.sizes[op_id] = tuple(f.size for f in op_files)
            self.rows[op_id] = tuple(f.rows for f in op_files)

    def jobs(self, root: str, pieces: int) -> list[KeyedJob[Any]]:
        """Return the engine's keyed tasks of the plan, writing under ``root``, ``pieces`` read tasks a file.

        On an object store, write tasks put the keyed files straight at DEST (under kg's writer mark);
        everything else is staged locally and uploaded after them, ``_metadata`` last. NATIVE write tasks
        build each new subtask's database in the staging directory.
        """
        savepoint = self.opened.savepoint
        return plan_keyed_jobs(
            savepoint,
            self.planned.targets,
            root,
            compression=self.compression,
            pieces=pieces,
            native_checkpoint=savepoint.metadata.checkpoint_id if self.planned.native else None,
            min_piece_bytes=MIN_READ_TASK_BYTES,
        )


def _written(
    opened: OpenedInput, dest: Path | str, written: WrittenState, sealed: SealedSavepoint, keyed: _Keyed
) -> SavepointRescaleResult:
    """Return what the rescale wrote at ``dest``: the sealed ``_metadata`` and what its streams hold."""
    return SavepointRescaleResult(
        str(opened.origin.directory),
        str(dest),
        len(sealed.metadata.operators),
        written.keyed_files,
        sum(map(sum, keyed.rows.values())),
        written.operator_files,
        written.operator_rows,
        written.bytes,
        written.compressed,
        sealed.metadata,
    )


def rescaled_savepoint_operators(planned: SavepointPlan) -> list[RescaledOperator]:
    """Return every operator of the new savepoint as the plan leaves it, for ``flink.write.rescaled``."""
    return list(planned.operators)


def _described(
    opened: OpenedInput, planned: SavepointPlan, engine: str, metadata: CheckpointMetadata
) -> Manifest:
    """Describe what was committed in kg's model (``RescaleResult.manifest``), after the commit.

    Only a description for callers of ``rescale()``: nothing on the rescale's path reads it. Operator-state
    entries carry the bytes of their stream in the savepoint.
    """
    sizes = {
        (op.operator_id, sub.index): sub.managed_operator_state.delegate.size
        for op in metadata.operators
        for sub in op.subtasks
        if isinstance(sub.managed_operator_state, OperatorStateHandle)
        and isinstance(sub.managed_operator_state.delegate, RelativeFileHandle)
    }
    by_id = {op.operator_id: op for op in opened.savepoint.metadata.operators}
    operators = []
    for new in planned.operators:
        old = by_id[new.operator_id]
        held = planned.operator_state.get(new.operator_id)
        states = tuple(
            StateDescriptor(s.name, s.kind, {"replicated": True} if s.name in new.replicated else {})
            for s in (held.states if held is not None else ())
        )
        files = tuple(
            OperatorFile(
                subtask,
                f"{new.operator_id}/operator-{subtask:05d}",
                table.num_rows,
                sizes.get((new.operator_id, subtask), table.nbytes),
                "",
            )
            for subtask, table in sorted(new.tables.items())
        )
        operators.append(
            Operator(
                uid=old.uid,
                operator_id=old.operator_id,
                name=old.name,
                parallelism=new.parallelism,
                max_parallelism=new.max_parallelism,
                key_type=None,
                states=states,
                operator_files=files,
            )
        )
    origin = opened.origin
    kind = "flink-savepoint" if origin.is_savepoint else "flink-checkpoint"
    source = {"kind": kind, "path": str(origin.directory), "metadata_version": origin.metadata.version}
    return Manifest(
        snapshot_id=metadata.checkpoint_id,
        created_by=f"kg {__version__}",
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        origin=rescale_origin(metadata.checkpoint_id, source, engine, planned.plan),
        operators=tuple(operators),
    )


def _upload(
    staged: Path, remote: Location, written_there: list[str], report: OnProgress, metadata: CheckpointMetadata
) -> None:
    """Upload the staged savepoint beside the keyed files already at ``remote``; ``_metadata`` last.

    Before ``_metadata`` is written every operator-state stream of the output is decoded where it now is
    (``flink.write.commit.require_streams_decode``); the keyed files' blocks were checked by the write tasks
    as they encoded them, their sizes by ``flink.write.commit.seal_savepoint``. ``metadata`` is what was
    sealed: nothing is read back.
    """

    def check() -> None:
        require_streams_decode(FlinkCheckpoint(remote / METADATA, metadata), remote)

    transfer.commit_upload(
        staged, remote, METADATA, report, written_elsewhere=written_there, before_commit=check
    )


@contextlib.contextmanager
def _scratch(dest: Path | str) -> Iterator[Path]:
    """Yield a scratch directory: beside a local DEST (removed like its staging), else in $KG_SCRATCH_DIR."""
    if not is_remote(dest):
        with scratch_directory(Path(dest)) as scratch:
            yield scratch
        return
    scratch = Path(tempfile.mkdtemp(prefix="kg-rescale-", dir=scratch_root()))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _regroup_all(
    opened: OpenedInput,
    headers: dict[str, bytes],
    targets: dict[str, tuple[int, int]],
    staging: Path,
    copied: dict[str, tuple[int, ...]],
    report: OnProgress,
    workers: int,
) -> dict[str, list[RegroupedFile]]:
    """Copy every keyed operator's key groups into its new subtasks' files; record bytes in ``copied``.

    Each block is checked as ``kg verify`` checks it in the pass that copies it (the gate read none).
    """
    savepoint = opened.savepoint
    by_id = {op.operator_id: op for op in savepoint.metadata.operators}
    files = {}
    for done, (op_id, header) in enumerate(headers.items(), 1):
        new_parallelism = targets[op_id][0]
        files[op_id] = regroup_keyed_state(
            savepoint, by_id[op_id], header, new_parallelism, staging, check=opened.label, workers=workers
        )
        copied[op_id] = tuple(f.size for f in files[op_id])
        report("copy key groups", done, len(headers))
    return files


def _regroupable(savepoint: Savepoint, new_max_parallelism: int | None) -> dict[str, bytes] | None:
    """Return the shared keyed header of every keyed operator if key groups can be copied as bytes.

    That needs the same maxParallelism (key groups keep their numbers) and, per operator, one header for
    all subtasks (state ids in the blocks index it). Otherwise (None) the keyed state is decoded.
    """
    headers = {}
    for op in savepoint.metadata.operators:
        if op.operator_id not in savepoint.keyed_streams:
            continue
        if new_max_parallelism not in (None, op.max_parallelism):
            return None
        header = shared_keyed_header(savepoint, op)
        if header is None:
            return None
        headers[op.operator_id] = header
    return headers


__all__ = [
    "EngineRunner",
    "OpenedInput",
    "SavepointOutput",
    "execute_savepoint_plan",
    "open_input",
    "require_rescalable",
    "savepoint_output",
]

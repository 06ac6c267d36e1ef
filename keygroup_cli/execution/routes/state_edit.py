"""``kg write``, ``kg compact`` and ``transform``: change keyed state, then commit a new savepoint.

One spine, as ``kg rescale`` of a savepoint runs it (``execution.routes.savepoint``):

1. **Open once, gate.** ``savepoint.open_input`` opens the input and refuses what ``kg verify`` rejects
   (exit 3, nothing written): every file's size, range, offsets and header, every operator-state stream;
   the key-group blocks are checked as they are read (the edited operator's by its read tasks, the others'
   as they are copied). A heap or RocksDB layout is read through its canonical rewrite.
2. **Plan on the driver.** The data becomes a ``flink.write.edit.KeyedEdit`` (``planning.state_edit``):
   every row encoded with the state's own serializers and placed in its key group; a type kg cannot encode
   is refused per column (exit 4) before anything is read. The plan (``StateEditPlan``) names the
   operators, states and keyed files rewritten; ``--dry-run`` runs the tasks' read half and prints rows per
   key group written, deleted and kept, which the run reproduces.
3. **Tasks.** One task per keyed file of an edited operator: decode its key groups (strictly), apply its
   part of the edit, encode the new file (same subtask, same key-group range, the operator's header). When
   the file's header is the one written, the key groups the edit leaves alone are copied as bytes and a
   TTL expiry or a write of a value state is done on the entries' bytes (``flink.write.edit_copy``). The
   other operators' key groups are copied as bytes, each block checked. Operator state, coordinator and
   master state, the checkpoint id and the properties are the input's.
4. **Staged, verified, atomic commit.** Everything is written in a staging directory beside DEST;
   ``_metadata`` is encoded, checked against the files (``flink.write.commit.seal_savepoint``) and written
   last, then the directory is renamed to DEST. A failure or Ctrl-C at any point leaves DEST absent.

The local engine runs the tasks in this process. With ``engine="spark"`` (or a new maxParallelism) the
edit runs as the engine's jobs instead (``execution.jobs.state_edit``): read tasks carrying their slice of
the edit (it pickles), a shuffle where keys move, one write task per subtask; Spark runs them on its
executors. ``transform`` with ``engine="spark"`` runs the user's function inside those read tasks
(``plan_transform_job``), so the state never passes through the driver.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.findings import fails_verify_error
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.progress import OnProgress, no_progress, staged
from keygroup_cli.core.schema import KEY_ARROW_TYPES
from keygroup_cli.execution.engines import Executor, get_executor
from keygroup_cli.execution.jobs.model import MIN_READ_TASK_BYTES
from keygroup_cli.execution.jobs.state_edit import (
    Transform,
    TransformedKeyedFile,
    TransformFn,
    apply_fn,
    plan_edit_job,
    plan_transform_job,
)
from keygroup_cli.execution.routes.savepoint import METADATA, OpenedInput, open_input, savepoint_output
from keygroup_cli.execution.routes.savepoint_plan import SavepointPlan, plan_savepoint
from keygroup_cli.flink import (
    CompactRule,
    EditCounts,
    FlinkCheckpoint,
    KeyedEdit,
    KeyedReadTask,
    KeyedStream,
    KeyedWriteTask,
    OperatorState,
    RegroupedFile,
    Savepoint,
    StateCodecs,
    copies_key_groups,
    edit_copying,
    edited_batches,
    find_operator,
    open_savepoint,
    read_keyed_task,
    regroup_keyed_state,
    require_streams_decode,
    seal_savepoint,
    shared_keyed_header,
    state_batches,
    state_codecs,
    state_schema,
    write_keyed_task,
    write_raw_timers,
    write_rescaled,
)
from keygroup_cli.planning.key_predicate import compile_predicate
from keygroup_cli.planning.request import RescaleRequest
from keygroup_cli.planning.state_edit import (
    CompactRequest,
    KeyGroupChange,
    OperatorEdit,
    StateEditPlan,
    WriteRequest,
    edit_in_range,
    read_data,
    require_encodable,
    write_edit,
)
from keygroup_cli.storage import transfer
from keygroup_cli.storage.locations import is_remote, location
from keygroup_cli.storage.remote import scratch_root
from keygroup_cli.storage.staging import staged_directory

#: The progress stage of the edit tasks.
STAGE = "rewrite keyed state"


@dataclass(frozen=True, slots=True)
class EditTask:
    """One keyed file of an edited operator: read it, apply its part of the edit, write the new file."""

    operator_id: str
    label: str
    read: KeyedReadTask
    write: KeyedWriteTask
    edit: KeyedEdit
    state_names: tuple[str, ...]
    key_type: str


@dataclass(frozen=True)
class StateEditResult:
    """What a write, compaction or transform did (or, with ``dry_run``, would do)."""

    plan: StateEditPlan
    out: str
    dry_run: bool
    #: Bytes of each edited operator's keyed files, before and after, by operator label.
    keyed_bytes_before: dict[str, int] = field(default_factory=dict)
    keyed_bytes_after: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def bytes_saved(self) -> dict[str, int]:
        """Return the keyed bytes each edited operator lost (negative: grew); empty for a dry run."""
        return {k: v - self.keyed_bytes_after.get(k, v) for k, v in self.keyed_bytes_before.items()}


def _chosen_streams(savepoint: Savepoint, op: OperatorState) -> tuple[list[KeyedStream], KeyedStream]:
    """Return ``op``'s keyed files in key-group order and the one whose header declares every state.

    Raises:
        UnsupportedFormatError: The operator holds no keyed state (``NO_KEYED_STATE``).
    """
    streams = sorted(savepoint.keyed_streams.get(op.operator_id, ()), key=lambda s: s.handle.key_group_start)
    if not streams:
        raise UnsupportedFormatError(f"operator {op.label!r} holds no keyed state", code="NO_KEYED_STATE")
    needed = {state.name for s in streams for state in s.layout.states}
    for s in streams:
        if needed <= {state.name for state in s.layout.states}:
            return streams, s
    return streams, streams[0]


def _codecs(streams: Sequence[KeyedStream]) -> dict[str, StateCodecs]:
    """Return the decoders of every state any keyed file of an operator declares."""
    codecs: dict[str, StateCodecs] = {}
    for stream in streams:
        for name, c in state_codecs(stream).items():
            codecs.setdefault(name, c)
    return codecs


def _require_states(op: OperatorState, codecs: dict[str, StateCodecs], states: Iterable[str]) -> None:
    """Refuse a state the operator does not have (``STATE_NOT_FOUND``, exit 2)."""
    for name in states:
        if name not in codecs:
            raise InvalidArgumentError(
                f"operator {op.label!r} has no state {name!r} (states: {', '.join(sorted(codecs))})",
                code="STATE_NOT_FOUND",
            )


def plan_write(opened: OpenedInput, request: WriteRequest, now_ms: int | None = None) -> StateEditPlan:
    """Plan ``kg write`` on the opened savepoint: the data encoded and placed (``planning.state_edit``).

    Raises:
        InvalidArgumentError: No such operator or state, data not in the export's shape, a bad value.
        UnsupportedFormatError: A column kg cannot encode (``TYPE_NOT_ENCODABLE``), no keyed state.
    """
    savepoint = opened.savepoint
    op = find_operator(savepoint, request.operator)
    streams, chosen = _chosen_streams(savepoint, op)
    codecs = _codecs(streams)
    _require_states(op, codecs, [request.state])
    codec = codecs[request.state]
    schema = state_schema(codec)
    key_type = chosen.layout.codec.key_type
    edit = write_edit(request, codec, chosen.layout.codec, key_type, op.max_parallelism, schema, now_ms)
    operator = OperatorEdit(
        *(op.operator_id, op.label, op.parallelism, op.max_parallelism, (request.state,), edit, len(streams)),
        uid=op.uid,
        name=op.name,
    )
    return StateEditPlan(
        "write", opened.label, savepoint.metadata.checkpoint_id, (operator,), mode=request.mode
    )


def plan_compact(opened: OpenedInput, request: CompactRequest, base: Path | None = None) -> StateEditPlan:
    """Plan ``kg compact``: the rule applied to the states named of every keyed operator named.

    ``--keep-where``/``--drop-where`` is compiled per operator, for its key's decoded type; ``base``
    resolves a relative ``IN FILE`` path.

    Raises:
        InvalidArgumentError: No such operator or state, a predicate that does not parse or fit the key.
    """
    savepoint = opened.savepoint
    if request.operators:
        ops = [find_operator(savepoint, label) for label in request.operators]
    else:
        ops = [op for op in savepoint.metadata.operators if savepoint.keyed_streams.get(op.operator_id)]
    operators = []
    for op in ops:
        streams, chosen = _chosen_streams(savepoint, op)
        codecs = _codecs(streams)
        states = tuple(request.states) if request.states else tuple(sorted(codecs))
        if request.operators or request.states:
            missing = [s for s in states if s not in codecs]
            if missing and (request.operators or len(ops) == 1):
                _require_states(op, codecs, missing)
            states = tuple(s for s in states if s in codecs)
        if not states:
            continue
        rule = request.rule
        if request.where is not None:
            key_codec = codecs[states[0]].key
            key_arrow = key_codec.arrow_type() if not key_codec.reason else pa.binary()
            key_type = chosen.layout.codec.key_type
            arrow = (
                KEY_ARROW_TYPES[key_type] if key_type in ("string", "long", "int", "boolean") else key_arrow
            )
            rule = replace(rule, key_filter=compile_predicate(request.where, arrow, base))
        edit = KeyedEdit(frozenset(states), rule=rule)
        operators.append(
            OperatorEdit(
                *(op.operator_id, op.label, op.parallelism, op.max_parallelism, states, edit, len(streams)),
                uid=op.uid,
                name=op.name,
            )
        )
    if request.states and not operators:
        raise InvalidArgumentError(
            f"no keyed operator has state(s) {', '.join(request.states)}", code="STATE_NOT_FOUND"
        )
    return StateEditPlan("compact", opened.label, savepoint.metadata.checkpoint_id, tuple(operators))


def edit_tasks(opened: OpenedInput, plan: StateEditPlan, output_root: str) -> list[EditTask]:
    """Return one task per keyed file of every edited operator, writing under ``output_root``."""
    savepoint = opened.savepoint
    by_id = {op.operator_id: op for op in savepoint.metadata.operators}
    tasks = []
    for operator in plan.operators:
        op = by_id[operator.operator_id]
        streams, chosen = _chosen_streams(savepoint, op)
        names = tuple(s.name for s in chosen.layout.states)
        for index, stream in enumerate(streams):
            handle = stream.handle
            span = KeyGroupRange(handle.key_group_start, handle.key_group_end)
            read = KeyedReadTask(
                str(savepoint.directory),
                handle,
                op.max_parallelism,
                span,
                index,
                handle.size,
                stream.raw_header,
            )
            write = KeyedWriteTask(
                output_root,
                str(uuid.uuid4()),
                stream.subtask,
                chosen.raw_header,
                op.max_parallelism,
                span,
                chosen.header.compressed,
            )
            edit = edit_in_range(operator.edit, span)
            tasks.append(
                EditTask(op.operator_id, op.label, read, write, edit, names, chosen.layout.codec.key_type)
            )
    return tasks


def run_edit_task(
    task: EditTask, codecs: dict[str, StateCodecs], counts: EditCounts, *, write: bool = True
) -> RegroupedFile | None:
    """Run one task: the file's rows edited, then encoded into the new file (``write``) or only counted.

    Key groups the edit leaves alone are copied as bytes (``flink.write.edit_copy``) when the file's
    header is the one written; otherwise every block is decoded and encoded again.

    Raises:
        InvalidInputError: A block ``kg verify`` rejects, or a key stored in the wrong key group.
    """
    if copies_key_groups(task.read, task.write):
        written_fast = edit_copying(
            task.read, task.write, task.edit, codecs, task.key_type, task.state_names, counts, output=write
        )
        if written_fast is None:
            return None
        return RegroupedFile(
            written_fast.subtask, written_fast.handle, written_fast.size, written_fast.key_groups_with_data
        )
    rows = edited_batches(
        read_keyed_task(task.read, task.state_names),
        task.edit,
        codecs,
        task.key_type,
        task.state_names,
        counts,
    )
    if not write:
        for _ in rows:
            pass
        return None
    written = write_keyed_task(task.write, rows)
    return RegroupedFile(written.subtask, written.handle, written.size, written.key_groups_with_data)


def _with_changes(plan: StateEditPlan, counts: dict[str, EditCounts]) -> StateEditPlan:
    """Return ``plan`` with the rows per key group its tasks counted (only key groups touched)."""
    labels = {op.operator_id: op.label for op in plan.operators}
    changes = []
    removed_bytes, rows_before = {}, {}
    for op_id, c in counts.items():
        label = labels[op_id]
        for (state, _group), n in c.before.items():
            rows_before[(label, state)] = rows_before.get((label, state), 0) + n
        for state, group in sorted(set(c.removed) | set(c.inserted)):
            written, deleted = c.inserted.get((state, group), 0), c.removed.get((state, group), 0)
            if not written and not deleted:
                continue
            changes.append(
                KeyGroupChange(label, state, group, c.before.get((state, group), 0), written, deleted)
            )
        for state, n in c.removed_bytes.items():
            removed_bytes[(label, state)] = n
    return replace(plan, changes=tuple(changes), removed_bytes=removed_bytes, rows_before=rows_before)


def _run_tasks(
    opened: OpenedInput, tasks: list[EditTask], report: OnProgress, *, write: bool
) -> tuple[dict[str, list[RegroupedFile]], dict[str, EditCounts]]:
    """Run every task in this process; return the files written and the counts, by operator id."""
    by_id = {op.operator_id: op for op in opened.savepoint.metadata.operators}
    codecs = {
        op_id: _codecs(_chosen_streams(opened.savepoint, by_id[op_id])[0])
        for op_id in {t.operator_id for t in tasks}
    }
    files: dict[str, list[RegroupedFile]] = {}
    counts: dict[str, EditCounts] = {op_id: EditCounts() for op_id in codecs}
    total = sum(t.read.bytes for t in tasks)
    done = 0
    for task in tasks:
        try:
            file = run_edit_task(task, codecs[task.operator_id], counts[task.operator_id], write=write)
        except InvalidInputError as exc:
            # A block read strictly that kg verify rejects: said as the gate says it, nothing committed.
            if exc.code == "INPUT_FAILS_VERIFY" or exc.code.startswith("DATA_"):
                raise
            raise fails_verify_error(opened.label, exc) from None
        if file is not None:
            files.setdefault(task.operator_id, []).append(file)
        done += task.read.bytes
        report(STAGE if write else "count (dry run)", done, total)
    return files, counts


def _rescale_request(
    plan: StateEditPlan, opened: OpenedInput, new_max_parallelism: int | None
) -> RescaleRequest:
    """Return the request the savepoint writer is given: every operator kept but the edited one's maxP.

    A new maxParallelism is checked against Flink's bounds and the keys kg can re-hash by the plan.
    """
    first = plan.operators[0] if plan.operators else None
    if first is None:
        ops = opened.savepoint.metadata.operators
        return RescaleRequest(ops[0].parallelism, operators=(ops[0].operator_id,))
    return RescaleRequest(
        first.parallelism, operators=(first.operator_id,), new_max_parallelism=new_max_parallelism
    )


def _run_jobs(
    opened: OpenedInput, executor: Executor, jobs: list[Any], scratch: Path, report: OnProgress
) -> dict[str, list[Any]]:
    """Run ``jobs`` on ``executor``; a block a task rejects is the input failing ``kg verify`` (exit 3).

    Raises:
        InvalidInputError: ``INPUT_FAILS_VERIFY``.
    """
    try:
        return executor.run(jobs, scratch, report)
    except InvalidInputError as exc:
        if exc.code == "INPUT_FAILS_VERIFY":
            raise
        raise fails_verify_error(opened.label, exc) from None


def _engine_files(
    opened: OpenedInput,
    plan: StateEditPlan,
    staging: Path,
    scratch: Path,
    engine: EngineChoice,
    report: OnProgress,
) -> tuple[dict[str, list[RegroupedFile]], dict[str, EditCounts]]:
    """Run the edit as the engine's jobs (a shuffle when maxParallelism changes); count in a read pass first.

    Raises:
        InvalidInputError: A block ``kg verify`` rejects (``INPUT_FAILS_VERIFY``).
        MissingDependencyError: Spark or Java missing (``--engine spark``).
    """
    _none, counts = _run_tasks(opened, edit_tasks(opened, plan, str(scratch)), report, write=False)
    savepoint = opened.savepoint
    by_id = {op.operator_id: op for op in savepoint.metadata.operators}
    jobs = []
    for operator in plan.operators:
        op = by_id[operator.operator_id]
        streams, chosen = _chosen_streams(savepoint, op)
        new_max = engine.new_max_parallelism or op.max_parallelism
        jobs.append(
            plan_edit_job(
                op,
                streams,
                chosen,
                operator.edit,
                str(savepoint.directory),
                str(staging),
                new_max,
                edit_in_range,
            )
        )
    written = _run_jobs(opened, get_executor(engine.name, **engine.options), jobs, scratch, report)
    files = {
        op_id: [RegroupedFile(f.subtask, f.handle, f.size, f.key_groups_with_data) for f in op_files]
        for op_id, op_files in written.items()
    }
    return files, counts


@dataclass(frozen=True)
class TransformRequest:
    """``transform`` run as an engine's jobs: ``fn`` on the state's batches inside the read tasks."""

    state: str
    fn: TransformFn
    ttl_timestamp: int | None = None
    #: "Now" for TTL entries without a last-access time (ms since the epoch).
    now_ms: int = 0


@dataclass(frozen=True)
class EngineChoice:
    """How the edit runs: kg's own loop (``local``, same maxParallelism), or an engine's jobs."""

    name: str = "local"
    new_max_parallelism: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    #: A transform whose function the jobs' read tasks run (the plan's edit then only names the state).
    transform: TransformRequest | None = None

    @property
    def jobs(self) -> bool:
        """Return whether the engine's jobs run the edit (Spark, a maxParallelism change, a transform)."""
        return self.name != "local" or self.new_max_parallelism is not None or self.transform is not None


def _transform_files(
    opened: OpenedInput,
    plan: StateEditPlan,
    staging: Path,
    scratch: Path,
    engine: EngineChoice,
    report: OnProgress,
) -> tuple[dict[str, list[RegroupedFile]], dict[str, EditCounts]]:
    """Run a transform as the engine's job: ``fn`` in its read tasks, a shuffle by key group, write tasks.

    Counts: the rows of the state each write task wrote, per key group (nothing is read on the driver).

    Raises:
        InvalidInputError: A block ``kg verify`` rejects (``INPUT_FAILS_VERIFY``).
        ExecutionError: ``fn`` raised (``TRANSFORM_FN_FAILED``).
        InvalidArgumentError, UnsupportedFormatError: What ``fn`` returned cannot be encoded.
        MissingDependencyError: Spark or Java missing (``engine="spark"``).
    """
    request = engine.transform
    assert request is not None and len(plan.operators) == 1
    savepoint = opened.savepoint
    operator = plan.operators[0]
    op = next(o for o in savepoint.metadata.operators if o.operator_id == operator.operator_id)
    streams, chosen = _chosen_streams(savepoint, op)
    # The state's serializers are those of the first file that declares it, as ``_codecs`` takes them.
    declaring = next(s for s in streams if request.state in state_codecs(s))
    transform = Transform(
        op.label,
        request.state,
        request.fn,
        declaring.raw_header,
        chosen.layout.codec,
        op.max_parallelism,
        request.ttl_timestamp,
        request.now_ms,
    )
    executor = get_executor(engine.name, **engine.options)
    job = plan_transform_job(
        *(op, streams, chosen, transform, str(savepoint.directory), str(staging)),
        pieces=executor.read_pieces(),
        min_piece_bytes=MIN_READ_TASK_BYTES,
    )
    written = _run_jobs(opened, executor, [job], scratch, report)
    counts = EditCounts()
    files = []
    for f in written.get(op.operator_id, []):
        files.append(RegroupedFile(f.subtask, f.handle, f.size, f.key_groups_with_data))
        if isinstance(f, TransformedKeyedFile):
            for group, n in f.state_rows:
                counts.inserted[(request.state, group)] = n
    return {op.operator_id: files}, {op.operator_id: counts}


def _commit(
    opened: OpenedInput,
    planned: SavepointPlan,
    plan: StateEditPlan,
    dest: Path,
    scratch: Path,
    engine: EngineChoice,
    report: OnProgress,
) -> tuple[dict[str, EditCounts], dict[str, int]]:
    """Stage the new savepoint beside ``dest``, seal it (``_metadata`` last) and rename it into place."""
    savepoint = opened.savepoint
    edited = {op.operator_id for op in plan.operators}
    with staged_directory(dest) as staging:
        if engine.transform is not None:
            files, counts = _transform_files(opened, plan, staging, scratch, engine, report)
        elif engine.jobs:
            files, counts = _engine_files(opened, plan, staging, scratch, engine, report)
        else:
            files, counts = _run_tasks(opened, edit_tasks(opened, plan, str(staging)), report, write=True)
        sizes = {op_id: sum(f.size for f in fs) for op_id, fs in files.items()}
        for op in savepoint.metadata.operators:
            if op.operator_id in edited or not savepoint.keyed_streams.get(op.operator_id):
                continue
            header = shared_keyed_header(savepoint, op)
            if header is None:
                raise UnsupportedFormatError(
                    f"operator {op.label!r}: its keyed files' headers differ; kg copies key groups of an "
                    "operator whose files share one header",
                    code="FLINK_HEADERS_DIFFER",
                )
            files[op.operator_id] = regroup_keyed_state(
                savepoint, op, header, op.parallelism, staging, check=opened.label
            )
        raw_keyed = write_raw_timers(planned.raw_timers, staging)
        written = write_rescaled(
            savepoint, list(planned.operators), files, staging, raw_keyed=raw_keyed, on_progress=report
        )
        seal_savepoint(staging, written.metadata)
    return counts, sizes


def _keyed_bytes(savepoint: Savepoint, plan: StateEditPlan) -> dict[str, int]:
    """Return the bytes of each edited operator's keyed files in the input, by label."""
    out = {}
    for op in plan.operators:
        out[op.label] = sum(s.handle.size for s in savepoint.keyed_streams.get(op.operator_id, ()))
    return out


def execute(
    source: str | Path | Savepoint,
    out: str | Path,
    make_plan: Callable[[OpenedInput], StateEditPlan],
    *,
    dry_run: bool = False,
    on_progress: OnProgress | None = None,
    engine: EngineChoice | None = None,
) -> StateEditResult:
    """Open ``source``, gate it, plan with ``make_plan``, then count (dry run) or run and commit at ``out``.

    ``engine``: kg's own loop by default; an engine's jobs for Spark or a new maxParallelism.

    Raises:
        InvalidArgumentError: ``out`` exists or is on an object store, or what the plan refuses.
        InvalidInputError: The input fails ``kg verify`` (``INPUT_FAILS_VERIFY``); nothing written.
        UnsupportedFormatError: What kg cannot read or encode.
        ExecutionError: The output does not verify; nothing committed.
    """
    started = time.monotonic()
    report = on_progress or no_progress
    if is_remote(str(out)):
        return _execute_to_store(source, str(out), make_plan, dry_run, report, engine)
    dest = Path(out)
    with savepoint_output(dest) as output:
        label = str(source.directory) if isinstance(source, Savepoint) else str(source)
        opened = open_input(source, output.scratch, RescaleRequest(1), staged(report, "verify input"), label)
        plan = make_plan(opened)
        before = _keyed_bytes(opened.savepoint, plan)
        if dry_run and engine is not None and engine.transform is not None:
            # What the jobs would run, without running fn (see ``transform``).
            return StateEditResult(plan, str(out), True, before, {}, time.monotonic() - started)
        if dry_run:
            _files, counts = _run_tasks(
                opened, edit_tasks(opened, plan, str(output.scratch)), report, write=False
            )
            return StateEditResult(
                _with_changes(plan, counts), str(out), True, before, {}, time.monotonic() - started
            )
        choice = engine or EngineChoice()
        # The writer's plan: Flink's bounds, and the keys kg can re-hash, checked before anything is staged.
        planned = plan_savepoint(opened, _rescale_request(plan, opened, choice.new_max_parallelism))
        counts, sizes = _commit(opened, planned, plan, dest, output.scratch, choice, report)
    after = {op.label: sizes.get(op.operator_id, 0) for op in plan.operators}
    return StateEditResult(
        _with_changes(plan, counts), str(out), False, before, after, time.monotonic() - started
    )


def _execute_to_store(
    source: str | Path | Savepoint,
    out: str,
    make_plan: Callable[[OpenedInput], StateEditPlan],
    dry_run: bool,
    report: OnProgress,
    engine: EngineChoice | None,
) -> StateEditResult:
    """``execute`` to an object store: staged and verified on local disk, then uploaded, ``_metadata`` last.

    DEST must hold no object. The upload decodes every operator-state stream where it now is before it
    writes ``_metadata``; on any failure (Ctrl-C included) what it wrote is deleted (``kg clean`` removes
    what a kill leaves).
    """
    remote = location(out)
    transfer.require_empty(remote, METADATA)
    scratch = Path(tempfile.mkdtemp(prefix="kg-edit-", dir=scratch_root()))
    try:
        staged_out = scratch / "out"
        result = execute(source, staged_out, make_plan, dry_run=dry_run, on_progress=report, engine=engine)
        if not dry_run:
            metadata = open_savepoint(staged_out).metadata

            def check() -> None:
                require_streams_decode(FlinkCheckpoint(remote / METADATA, metadata), remote)

            transfer.commit_upload(staged_out, remote, METADATA, report, before_commit=check)
        return replace(result, out=out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _spark_options(engine: str, master: str | None, spark: Any) -> dict[str, Any]:
    """Return the Spark executor's options (a master URL, a session) for ``engine``."""
    if engine != "spark":
        return {}
    return {k: v for k, v in (("master", master), ("session", spark)) if v is not None}


def _data_table(data: pa.Table | str | Any) -> pa.Table:
    """Return ``write_state``'s data as an Arrow table (a Spark DataFrame through its ``toArrow()``).

    Raises:
        InvalidArgumentError: Data of another kind (``DATA_UNREADABLE``).
    """
    if isinstance(data, (str, Path)):
        return read_data(str(data))
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    to_arrow = getattr(data, "toArrow", None)  # pyspark.sql.DataFrame (Spark 4); pyspark is not imported
    if callable(to_arrow):
        table = to_arrow()
        if isinstance(table, pa.Table):
            return table
    raise InvalidArgumentError(
        f"data of type {type(data).__name__} is not an Arrow table, a Parquet/Arrow file or a Spark "
        "DataFrame",
        code="DATA_UNREADABLE",
    )


def write_state(
    savepoint: str | Path | Savepoint,
    out: str | Path,
    operator: str,
    state: str,
    mode: str,
    data: pa.Table | str | Any,
    *,
    ttl_timestamp: int | None = None,
    new_max_parallelism: int | None = None,
    engine: str = "local",
    master: str | None = None,
    spark: Any = None,
    dry_run: bool = False,
    on_progress: OnProgress | None = None,
) -> StateEditResult:
    """Change keyed state ``state`` of ``operator`` from ``data``.

    ``data``: an Arrow table, a Parquet or Arrow file (a path or an object-store URI), or a Spark DataFrame
    (collected to Arrow on the driver with its ``toArrow()``), each in ``kg export``'s shape.

    ``mode``: ``upsert``, ``delete`` or ``replace`` (``planning.state_edit``). The new savepoint at ``out``
    keeps the checkpoint id; every other state and operator is the input's. ``new_max_parallelism``
    rescales the operator's maxParallelism in the same pass (every key re-hashed); ``engine="spark"`` runs
    the tasks on Spark (``master``: its master URL; ``spark``: a SparkSession to use).

    Raises:
        See ``execute``.
    """
    table = _data_table(data)
    request = WriteRequest(operator, state, mode, table, ttl_timestamp)
    options = _spark_options(engine, master, spark)
    return execute(
        savepoint,
        out,
        lambda opened: plan_write(opened, request),
        dry_run=dry_run,
        on_progress=on_progress,
        engine=EngineChoice(engine, new_max_parallelism, options),
    )


def compact_state(
    savepoint: str | Path | Savepoint,
    out: str | Path,
    *,
    operators: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    ttl_ms: int | None = None,
    now_ms: int | None = None,
    where: str | None = None,
    keep_where: bool = False,
    timers_before: int | None = None,
    engine: str = "local",
    master: str | None = None,
    spark: Any = None,
    dry_run: bool = False,
    on_progress: OnProgress | None = None,
) -> StateEditResult:
    """Drop entries by rule: TTL expired at ``now_ms`` under ``ttl_ms``, keys by ``where``, early timers.

    ``where`` drops the entries of the keys it selects, or with ``keep_where`` keeps only those.
    ``engine="spark"`` runs the tasks on Spark (``master``, ``spark`` as for ``write_state``).

    Raises:
        InvalidArgumentError: No rule given, or what ``execute`` refuses.
    """
    if ttl_ms is None and where is None and timers_before is None:
        raise InvalidArgumentError(
            "nothing to compact: give --expired-ttl, --keep-where/--drop-where or --timers-before",
            code="NO_RULE",
        )
    now = int(time.time() * 1000) if now_ms is None else now_ms
    rule = CompactRule(timers_before, ttl_ms, now if ttl_ms is not None else None, None, keep_where)
    request = CompactRequest(
        rule, tuple(operators) if operators else None, tuple(states) if states else None, where
    )
    return execute(
        savepoint,
        out,
        lambda opened: plan_compact(opened, request, Path.cwd()),
        dry_run=dry_run,
        on_progress=on_progress,
        engine=EngineChoice(engine, None, _spark_options(engine, master, spark)),
    )


def _transformed_state(opened: OpenedInput, operator: str, state: str) -> tuple[OperatorState, StateCodecs]:
    """Return the operator and the codecs of the state a transform rewrites, refused before ``fn`` runs.

    Raises:
        InvalidArgumentError: No such operator or state.
        UnsupportedFormatError: No keyed state, or a column of the state kg cannot encode
            (``TYPE_NOT_ENCODABLE``, exit 4).
    """
    op = find_operator(opened.savepoint, operator)
    streams, _chosen = _chosen_streams(opened.savepoint, op)
    codecs = _codecs(streams)
    _require_states(op, codecs, [state])
    require_encodable(codecs[state], state_schema(codecs[state]).names, "replace")
    return op, codecs[state]


def plan_transform(opened: OpenedInput, operator: str, state: str) -> StateEditPlan:
    """Plan a transform run as the engine's jobs: ``state`` of ``operator`` replaced by what ``fn`` makes.

    Nothing is read and ``fn`` is not called: the rows come from the jobs' read tasks.

    Raises:
        See ``_transformed_state``.
    """
    op, _codec = _transformed_state(opened, operator, state)
    streams, _chosen = _chosen_streams(opened.savepoint, op)
    edit = KeyedEdit(frozenset({state}), replace=True)
    operator_edit = OperatorEdit(
        *(op.operator_id, op.label, op.parallelism, op.max_parallelism, (state,), edit, len(streams)),
        uid=op.uid,
        name=op.name,
    )
    checkpoint = opened.savepoint.metadata.checkpoint_id
    return StateEditPlan("transform", opened.label, checkpoint, (operator_edit,), mode="replace")


def transform(
    savepoint: str | Path | Savepoint,
    out: str | Path,
    operator: str,
    state: str,
    fn: TransformFn,
    *,
    ttl_timestamp: int | None = None,
    engine: str = "local",
    master: str | None = None,
    spark: Any = None,
    dry_run: bool = False,
    on_progress: OnProgress | None = None,
) -> StateEditResult:
    """Rewrite one keyed state through ``fn``: the state becomes what ``fn`` makes of its export batches.

    ``fn`` is called once per batch of the state in ``kg export``'s schema (``key_group``, ``key``, ...)
    and returns a batch or table in the same shape (rows may be dropped, changed or added; ``key_group`` is
    recomputed from the key, so a changed key lands where Flink looks for it; None drops the batch). The
    result replaces the state: every row is encoded with the state's own serializers, as
    ``kg write --mode replace`` encodes its data. The operator's other states and the other operators are
    the input's; the checkpoint id is kept.

    Engines (the same options as ``write_state``): ``engine="local"`` calls ``fn`` in this process over every
    batch and writes the collected result (the state's output is held in memory: fine for small state);
    ``engine="spark"`` (``master``, ``spark``) calls ``fn`` inside the read tasks on Spark's executors, each
    decoding its key-group range, applying ``fn``, encoding the rows and sending them, by key group, through
    Spark's shuffle to the write tasks: the state never passes through the driver. ``fn`` is pickled by
    Spark's cloudpickle (a lambda or a closure works); it must not depend on how rows are cut into batches
    (the engines cut them differently), and then both engines write byte-identical keyed files.

    ``dry_run``: the input is gated and the operator, the state and its serializers checked (what kg cannot
    encode is refused, exit 4), nothing is written. With ``engine="local"`` ``fn`` runs over the state and
    the plan counts the rows per key group it would write; with ``engine="spark"`` ``fn`` is not called
    (that is the run's work, on the executors) and the plan holds no counts.

    Counts: the local engine's plan counts the rows per key group before and written; the Spark engine's
    counts those its write tasks wrote (the rows before are not counted: that would take a pass over the
    state on the driver).

    Raises:
        ExecutionError: ``fn`` raised (``TRANSFORM_FN_FAILED``, exit 5), in one line (its exception's type and
            first line), on either engine; nothing written.
        InvalidArgumentError: ``fn`` returned something else than Arrow data (``TRANSFORM_RESULT``), columns
            not the export's, a value that does not fit its type (``ValueNotEncodable``), or two rows for one
            entry (exit 2); nothing written.
        UnsupportedFormatError: A column of the state kg cannot encode (``NotEncodable``, exit 4).
        See ``execute`` for the rest.
    """
    if engine != "local":
        request = TransformRequest(state, fn, ttl_timestamp, int(time.time() * 1000))
        return execute(
            savepoint,
            out,
            lambda opened: plan_transform(opened, operator, state),
            dry_run=dry_run,
            on_progress=on_progress,
            engine=EngineChoice(engine, None, _spark_options(engine, master, spark), request),
        )

    def make(opened: OpenedInput) -> StateEditPlan:
        _op, codec = _transformed_state(opened, operator, state)
        outputs = []
        for name, batch in state_batches(opened.savepoint, operator, frozenset({state}), label=opened.label):
            if name != state:
                continue
            result = apply_fn(fn, batch)
            if result is not None:
                outputs.append(result)
        schema = state_schema(codec)
        data = pa.concat_tables(outputs, promote_options="permissive") if outputs else schema.empty_table()
        plan = plan_write(opened, WriteRequest(operator, state, "replace", data, ttl_timestamp))
        return replace(plan, command="transform")

    return execute(savepoint, out, make, dry_run=dry_run, on_progress=on_progress)


__all__ = [
    "EditTask",
    "EngineChoice",
    "StateEditResult",
    "TransformRequest",
    "compact_state",
    "edit_tasks",
    "execute",
    "plan_compact",
    "plan_transform",
    "plan_write",
    "run_edit_task",
    "transform",
    "write_state",
]

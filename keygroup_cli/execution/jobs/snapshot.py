"""The kg-snapshot route compiled into the task model of ``execution.jobs.model``, and its operator state.

``plan_snapshot_jobs`` turns a ``RescalePlan`` of a kg snapshot into the jobs an engine runs:

- an operator that is not rescaled, or whose keyed files stay as they are, is a ``CopyJob``;
- a parallelism change is a *narrow* ``KeyedJob``: a new subtask's key-group range is a contiguous union
  of pieces of old files, in old-subtask order, so each write task streams its pieces (row groups
  outside a piece are skipped) straight into its file: no sort and no shuffle;
- a maxParallelism change is a ``KeyedJob`` with a shuffle: every key gets a new key group (Java
  ``hashCode`` → murmur → ``% maxP'``) in its read task, and rows meet their new subtask's write task
  bucket by bucket (``pipeline.route`` / ``pipeline.write``).

``ParquetKeyedRead`` and ``ParquetKeyedWrite`` are the kg Parquet read and write tasks;
``write_keyed_file`` makes the bytes a pure function of the rows, whatever the chunking, which is what
lets the local and Spark engines produce identical files. Operator state (small) is redistributed on the
driver by ``write_operator_state`` (``redistribute_operator_tables`` also serves a savepoint's).
"""

from __future__ import annotations

import posixpath
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.javahash import hash_codes
from keygroup_cli.core.keygroups import KeyGroupRange, even_runs
from keygroup_cli.execution.jobs.model import CopyJob, Job, KeyedJob, Rows, rekeyed
from keygroup_cli.planning.plan import OperatorPlan, RescalePlan
from keygroup_cli.planning.redistribution import ElementRun
from keygroup_cli.snapshot.model import KeyedFile, Operator, OperatorFile, Snapshot
from keygroup_cli.snapshot.parquet import (
    conform_keyed,
    iter_keyed_batches,
    read_operator_file,
    write_keyed_file,
    write_operator_file,
)


def operator_dir(op: Operator) -> str:
    """Return the directory (relative to the snapshot) the operator's files live in, kept on rescale."""
    paths = [f.path for f in op.keyed_files] + [f.path for f in op.operator_files]
    return posixpath.dirname(paths[0]) if paths else op.operator_id


def keyed_state_names(op: Operator) -> list[str]:
    """Return the keyed state names in manifest order: the ``state`` dictionary of written files."""
    return [s.name for s in op.states if s.is_keyed]


def keyed_path(op: Operator, subtask: int) -> str:
    """Return the relative path of new subtask ``subtask``'s keyed file."""
    return f"{operator_dir(op)}/keyed-{subtask:05d}.parquet"


def operator_path(op: Operator, subtask: int) -> str:
    """Return the relative path of new subtask ``subtask``'s operator-state file."""
    return f"{operator_dir(op)}/operator-{subtask:05d}.parquet"


def copy_files(source: Snapshot, target: Path, files: Iterable[KeyedFile | OperatorFile]) -> None:
    """Copy files byte for byte (their manifest entries stay valid as they are)."""
    for f in files:
        destination = target / f.path
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.resolve(f.path), destination)


# -- Read and write tasks ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParquetKeyedRead:
    """Read one keyed file of a kg snapshot: all of it, the rows of some key groups, or some row groups."""

    source: Snapshot
    file: KeyedFile
    #: Only the rows of these key groups (row groups outside are skipped without being read).
    key_groups: KeyGroupRange | None = None
    #: Only these row groups (contiguous, ascending).
    row_groups: tuple[int, ...] | None = None
    #: The rows the task reads (progress).
    weight: int = 0

    def read(self, job: KeyedJob[Any], batch_rows: int) -> Iterator[Rows]:
        """Yield the rows; under a new maxParallelism conformed to the keyed schema and re-keyed.

        Raises:
            InvalidInputError: The file cannot be read.
        """
        for batch in self._batches(batch_rows):
            if not job.rehash:
                yield batch  # the writer conforms rows as they come
                continue
            table = conform_keyed(batch, job.key_type, job.state_names)
            yield rekeyed(table, hash_codes(table.column("key"), job.key_type), job.new_max_parallelism)

    def _batches(self, batch_rows: int) -> Iterator[pa.RecordBatch]:
        if self.row_groups is None:
            yield from iter_keyed_batches(
                self.source, self.file, key_groups=self.key_groups, batch_rows=batch_rows
            )
            return
        path = self.source.resolve(self.file.path)
        try:
            pf = pq.ParquetFile(path, pre_buffer=False)
            yield from pf.iter_batches(batch_size=batch_rows, row_groups=list(self.row_groups))
        except (OSError, pa.ArrowException) as exc:
            raise InvalidInputError(f"{path}: cannot read: {exc}", code="FILE_UNREADABLE") from None


@dataclass(frozen=True, slots=True)
class WrittenParquetFile:
    """What a kg write task wrote: the manifest entry of the file, or None for a subtask without rows."""

    subtask: int
    rows: int
    keyed_file: KeyedFile | None


@dataclass(frozen=True, slots=True)
class ParquetKeyedWrite:
    """Write one new subtask's keyed file ``root/name`` of a kg snapshot."""

    root: str
    name: str
    subtask: int
    key_groups: KeyGroupRange
    key_type: str
    state_names: tuple[str, ...]

    def write(self, rows: Iterable[Rows]) -> WrittenParquetFile:
        """Write ``rows`` (ascending by key group); a subtask without rows has no keyed file.

        Raises:
            InvalidInputError: Rows outside the range or unsorted.
        """
        path = Path(self.root) / self.name
        path.parent.mkdir(parents=True, exist_ok=True)
        written = write_keyed_file(
            path, rows, key_type=self.key_type, key_groups=self.key_groups, state_names=self.state_names
        ).keyed_file(self.subtask, self.name, self.key_groups)
        if written.rows == 0:
            path.unlink()
            return WrittenParquetFile(self.subtask, 0, None)
        return WrittenParquetFile(self.subtask, written.rows, written)


# -- Compiling a plan ----------------------------------------------------------------------------------------


def plan_snapshot_jobs(
    plan: RescalePlan, source: Snapshot, target: Path, *, pieces: int = 1, min_piece_bytes: int = 0
) -> list[Job[WrittenParquetFile]]:
    """Return the jobs that write every keyed file of the rescaled ``source`` into ``target``.

    Operator state is not in them (see ``write_operator_state``), except that an operator left as it is
    is copied whole. ``pieces`` above 1 cuts each re-hashed file into up to that many read tasks of
    contiguous row groups, each of at least ``min_piece_bytes`` of row groups (uncompressed) where given:
    a task costs its engine a fixed start, worth paying only for enough rows.
    """
    jobs: list[Job[WrittenParquetFile]] = []
    for op_plan in plan.operators:
        op = source.manifest.operator(op_plan.operator_id)
        assert op is not None, "the plan was made from this snapshot"
        if not op_plan.rescaled:
            jobs.append(_copy_job(source, target, op, (*op.keyed_files, *op.operator_files)))
        elif op_plan.keyed_mode == "copy":
            rows = op_plan.keyed_rows or 0  # a kg snapshot's plan always counts its rows
            jobs.append(_copy_job(source, target, op, op.keyed_files, _stage(op_plan), rows))
        elif op_plan.keyed_mode == "move":
            jobs.append(_narrow_job(source, target, op, op_plan))
        elif op_plan.keyed_mode == "rehash":
            jobs.append(_rehash_job(source, target, op, op_plan, pieces, min_piece_bytes))
    return jobs


def _stage(plan: OperatorPlan) -> str:
    return f"{plan.label}: keyed rows"


def _copy_job(
    source: Snapshot,
    target: Path,
    op: Operator,
    files: Iterable[KeyedFile | OperatorFile],
    stage: str | None = None,
    rows: int = 0,
) -> CopyJob:
    copies = tuple((str(source.resolve(f.path)), str(target / f.path)) for f in files)
    return CopyJob(op.operator_id, copies, stage, rows)


def _job(
    target: Path,
    op: Operator,
    plan: OperatorPlan,
    reads: list[ParquetKeyedRead],
    feeds: tuple[tuple[int, ...], ...] | None = None,
) -> KeyedJob[WrittenParquetFile]:
    assert op.key_type is not None, "an operator with keyed files has a key type (manifest validation)"
    states = tuple(keyed_state_names(op))
    writes = tuple(
        ParquetKeyedWrite(str(target), keyed_path(op, j), j, rng, op.key_type, states)
        for j, rng in enumerate(plan.new_ranges)
    )
    return KeyedJob(
        op.operator_id,
        plan.label,
        op.key_type,
        states,
        plan.old_max_parallelism,
        plan.new_max_parallelism,
        plan.new_parallelism,
        tuple(reads),
        writes,
        _stage(plan),
        feeds,
    )


def _narrow_job(
    source: Snapshot, target: Path, op: Operator, plan: OperatorPlan
) -> KeyedJob[WrittenParquetFile]:
    """Return a parallelism change: each new subtask reads its pieces of the old files, in key-group order."""
    assert plan.key_groups is not None, "a plan that keeps maxParallelism has a key-group plan"
    old_files = {f.subtask: f for f in op.keyed_files}
    reads: list[ParquetKeyedRead] = []
    feeds = []
    for j in range(plan.new_parallelism):
        mine = []
        for run in plan.key_groups.runs:
            old = old_files.get(run.from_subtask)
            if run.to_subtask == j and old is not None:
                piece = KeyGroupRange(run.start, run.end)
                rows = old.key_group_rows[
                    piece.start - old.key_group_start : piece.end - old.key_group_start + 1
                ]
                mine.append(len(reads))
                reads.append(ParquetKeyedRead(source, old, key_groups=piece, weight=sum(rows)))
        feeds.append(tuple(mine))
    return _job(target, op, plan, reads, tuple(feeds))


def _rehash_job(
    source: Snapshot, target: Path, op: Operator, plan: OperatorPlan, pieces: int, min_bytes: int
) -> KeyedJob[WrittenParquetFile]:
    """Return a maxParallelism change: read tasks by old file (or run of row groups), old-subtask order."""
    reads = []
    for old in sorted(op.keyed_files, key=lambda f: f.subtask):
        if pieces <= 1:
            reads.append(ParquetKeyedRead(source, old, weight=old.rows))
            continue
        meta = pq.ParquetFile(source.resolve(old.path)).metadata
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
        for run in even_runs([g.total_byte_size for g in groups], pieces, min_bytes):
            rows = sum(groups[i].num_rows for i in run)
            reads.append(ParquetKeyedRead(source, old, row_groups=tuple(run), weight=rows))
    return _job(target, op, plan, reads)


# -- Operator state ------------------------------------------------------------------------------------------


def write_operator_state(
    source: Snapshot, op: Operator, plan: OperatorPlan, target: Path
) -> tuple[OperatorFile, ...]:
    """Write (or copy, when unchanged) the operator-state files of the new subtasks."""
    state_plan = plan.operator_state
    if state_plan is None:
        return ()
    if state_plan.unchanged:
        copy_files(source, target, op.operator_files)
        return op.operator_files
    old: dict[int, pa.Table] = {f.subtask: read_operator_file(source, f) for f in op.operator_files}
    written = []
    for new_subtask, table in redistribute_operator_tables(old, plan).items():
        relative = operator_path(op, new_subtask)
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        written.append(write_operator_file(target / relative, table).operator_file(new_subtask, relative))
    return tuple(written)


def redistribute_operator_tables(old: Mapping[int, pa.Table], plan: OperatorPlan) -> dict[int, pa.Table]:
    """Apply ``plan.operator_state`` to the old subtasks' rows: the rows of each new subtask that has any.

    Each run of the plan moves ``count`` elements of one state from an old subtask's positions to a new
    one's; rows keep their bytes, positions are shifted to the new subtask's.
    """
    state_plan = plan.operator_state
    assert state_plan is not None
    tables = {}
    for new_subtask in range(plan.new_parallelism):
        pieces = [_moved_elements(old[run.from_subtask], run) for run in state_plan.runs_for(new_subtask)]
        if pieces:
            tables[new_subtask] = pa.concat_tables(pieces, promote_options="permissive")
    return tables


def _moved_elements(table: pa.Table, run: ElementRun) -> pa.Table:
    """Return the rows ``run`` moves, by position, with positions shifted to the new subtask's."""
    states = pc.cast(table.column("state"), pa.string())
    mask = pc.and_(
        pc.equal(states, run.state),
        pc.and_(
            pc.greater_equal(table.column("position"), run.from_position),
            pc.less(table.column("position"), run.from_position + run.count),
        ),
    )
    rows = table.filter(mask).select(["state", "position", "entry_key", "value"])
    rows = rows.take(pc.sort_indices(rows, [("position", "ascending")]))
    shift = run.to_position - run.from_position
    positions = pc.add(rows.column("position"), pa.scalar(shift, pa.int32())).cast(pa.int32())
    rows = rows.set_column(1, "position", positions)
    return rows.set_column(0, "state", pc.cast(rows.column("state"), pa.string()))


__all__ = [
    "ParquetKeyedRead",
    "ParquetKeyedWrite",
    "WrittenParquetFile",
    "copy_files",
    "keyed_path",
    "keyed_state_names",
    "operator_dir",
    "operator_path",
    "plan_snapshot_jobs",
    "redistribute_operator_tables",
    "write_operator_state",
]

"""The units of work both engines run, so that both write the very same bytes.

- ``write_moved_subtask``: one new subtask's keyed file when only the parallelism changes. Its key-group
  range is a contiguous union of pieces of old files, in old-subtask order, so the pieces are streamed
  (row groups outside a piece are skipped) straight into the writer: no sort and no shuffle.
- ``rehash_batch`` / ``split_by_bucket`` / ``write_rehashed_subtask``: with a new maxParallelism every
  key gets a new key group (Java ``hashCode`` → murmur → ``% maxP'``). Rows are routed to *buckets*
  (contiguous ranges of new key groups) and each new subtask is written bucket by bucket, each bucket
  stably sorted by key group, so memory is bounded by one bucket, not by the snapshot.
- ``write_operator_state``: applies an ``OperatorStatePlan`` (operator state is small; read whole).

Row order is deterministic: within a key group rows keep their input order (old files in subtask order,
rows in file order). ``write_keyed_file`` makes the bytes a pure function of the rows, whatever the
chunking, which is what lets the local and Spark engines produce identical files.
"""

from __future__ import annotations

import posixpath
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.javahash import hash_codes
from keygroup_cli.keygroups import KeyGroupRange, key_groups_for_hashes, operator_indexes_for_key_groups
from keygroup_cli.planning import OperatorPlan
from keygroup_cli.snapshot.model import KeyedFile, Operator, OperatorFile, Snapshot
from keygroup_cli.snapshot.parquet import (
    DEFAULT_BATCH_ROWS,
    conform_keyed,
    iter_keyed_batches,
    read_operator_file,
    write_keyed_file,
    write_operator_file,
)

#: Called with the number of input rows just consumed (drives progress bars).
OnRows = Callable[[int], None]

#: Upper bound of re-hash buckets: memory per bucket is about snapshot size / this.
MAX_BUCKETS = 256


def _ignore(_rows: int) -> None:
    return None


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


def _finish_keyed(target: Path, relative: str, written: KeyedFile) -> KeyedFile | None:
    # The contract: a subtask without keyed rows has no keyed file.
    if written.rows == 0:
        (target / relative).unlink()
        return None
    return written


# -- Parallelism change: move key groups -------------------------------------------------------------------


def moved_pieces(plan: OperatorPlan, new_subtask: int) -> list[tuple[int, KeyGroupRange]]:
    """Return ``(old subtask, key groups)`` pieces that make up a new subtask, in key-group order."""
    assert plan.key_groups is not None, "only for plans that keep maxParallelism"
    return [
        (run.from_subtask, KeyGroupRange(run.start, run.end))
        for run in plan.key_groups.runs
        if run.to_subtask == new_subtask
    ]


def write_moved_subtask(
    source: Snapshot,
    op: Operator,
    plan: OperatorPlan,
    new_subtask: int,
    target: Path,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    on_rows: OnRows = _ignore,
) -> KeyedFile | None:
    """Write new subtask ``new_subtask``'s keyed file from the pieces of the old files; None if empty."""
    old_files = {f.subtask: f for f in op.keyed_files}

    def batches() -> Iterator[pa.RecordBatch]:
        for old_subtask, key_groups in moved_pieces(plan, new_subtask):
            old = old_files.get(old_subtask)
            if old is None:
                continue
            for batch in iter_keyed_batches(source, old, key_groups=key_groups, batch_rows=batch_rows):
                on_rows(batch.num_rows)
                yield batch

    relative = keyed_path(op, new_subtask)
    key_groups = plan.new_ranges[new_subtask]
    (target / relative).parent.mkdir(parents=True, exist_ok=True)
    written = write_keyed_file(
        target / relative,
        batches(),
        key_type=_key_type(op),
        key_groups=key_groups,
        state_names=keyed_state_names(op),
    ).keyed_file(new_subtask, relative, key_groups)
    return _finish_keyed(target, relative, written)


def _key_type(op: Operator) -> str:
    assert op.key_type is not None, "an operator with keyed files has a key type (manifest validation)"
    return op.key_type


# -- maxParallelism change: re-hash every key ---------------------------------------------------------------


def bucket_count(new_max_parallelism: int) -> int:
    """Return how many re-hash buckets (contiguous key-group ranges) a maxParallelism is cut into."""
    return min(new_max_parallelism, MAX_BUCKETS)


def bucket_of(key_groups: npt.NDArray[np.int32] | int, new_max_parallelism: int) -> npt.NDArray[np.int64]:
    """Return the bucket of every key group (``kg * buckets // maxP'``: contiguous, ascending)."""
    kg = np.asarray(key_groups, dtype=np.int64)
    return kg * bucket_count(new_max_parallelism) // new_max_parallelism


def buckets_for(key_groups: KeyGroupRange, new_max_parallelism: int) -> range:
    """Return the buckets that hold some key group of ``key_groups``, ascending."""
    first = int(bucket_of(key_groups.start, new_max_parallelism))
    last = int(bucket_of(key_groups.end, new_max_parallelism))
    return range(first, last + 1)


def rehash_batch(
    batch: pa.RecordBatch | pa.Table, op: Operator, plan: OperatorPlan
) -> tuple[pa.Table, npt.NDArray[np.int64]]:
    """Return the batch conformed to the keyed schema with re-hashed ``key_group``, and each row's bucket."""
    table = conform_keyed(batch, _key_type(op), keyed_state_names(op))
    codes = hash_codes(table.column("key"), _key_type(op))
    groups = key_groups_for_hashes(codes, plan.new_max_parallelism)
    table = table.set_column(0, table.schema.field(0), pa.array(groups, type=pa.int32()))
    return table, bucket_of(groups, plan.new_max_parallelism)


def split_by_bucket(table: pa.Table, buckets: npt.NDArray[np.int64]) -> Iterator[tuple[int, pa.Table]]:
    """Yield ``(bucket, rows)`` for every bucket present, ascending, keeping row order within each."""
    if table.num_rows == 0:
        return
    order = np.argsort(buckets, kind="stable")
    ordered = table.take(pa.array(order))
    sorted_buckets = buckets[order]
    present = np.unique(sorted_buckets)
    bounds = np.searchsorted(sorted_buckets, np.append(present, present[-1] + 1), side="left")
    for i, bucket in enumerate(present.tolist()):
        yield int(bucket), ordered.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))


def sort_bucket(table: pa.Table, key_groups: KeyGroupRange) -> pa.Table:
    """Return the rows of one bucket that fall in ``key_groups``, stably sorted by key group."""
    kg = np.asarray(table.column("key_group").to_numpy(), dtype=np.int32)
    keep = np.flatnonzero((kg >= key_groups.start) & (kg <= key_groups.end))
    order = keep[np.argsort(kg[keep], kind="stable")]
    return table.take(pa.array(order))


def write_rehashed_subtask(
    op: Operator,
    plan: OperatorPlan,
    new_subtask: int,
    target: Path,
    buckets: Iterable[pa.Table],
) -> KeyedFile | None:
    """Write a new subtask's keyed file from its buckets (ascending, each holding rows in input order)."""
    key_groups = plan.new_ranges[new_subtask]
    relative = keyed_path(op, new_subtask)
    (target / relative).parent.mkdir(parents=True, exist_ok=True)
    written = write_keyed_file(
        target / relative,
        (sort_bucket(b, key_groups) for b in buckets),
        key_type=_key_type(op),
        key_groups=key_groups,
        state_names=keyed_state_names(op),
    ).keyed_file(new_subtask, relative, key_groups)
    return _finish_keyed(target, relative, written)


def new_subtasks_of(key_groups: npt.NDArray[np.int32], plan: OperatorPlan) -> npt.NDArray[np.int32]:
    """Return the new subtask of every (new) key group."""
    return operator_indexes_for_key_groups(key_groups, plan.new_max_parallelism, plan.new_parallelism)


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
    columns = ("state", "position", "entry_key", "value")
    tables = {}
    for new_subtask in range(plan.new_parallelism):
        pieces = []
        for run in state_plan.runs_for(new_subtask):
            table = old[run.from_subtask]
            states = pc.cast(table.column("state"), pa.string())
            mask = pc.and_(
                pc.equal(states, run.state),
                pc.and_(
                    pc.greater_equal(table.column("position"), run.from_position),
                    pc.less(table.column("position"), run.from_position + run.count),
                ),
            )
            rows = table.filter(mask).select(list(columns))
            rows = rows.take(pc.sort_indices(rows, [("position", "ascending")]))
            shift = run.to_position - run.from_position
            positions = pc.add(rows.column("position"), pa.scalar(shift, pa.int32())).cast(pa.int32())
            rows = rows.set_column(1, "position", positions)
            pieces.append(rows.set_column(0, "state", pc.cast(rows.column("state"), pa.string())))
        if pieces:
            tables[new_subtask] = pa.concat_tables(pieces, promote_options="permissive")
    return tables

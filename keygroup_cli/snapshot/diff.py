"""Compare the logical state of two kg snapshots, whatever their parallelism and maxParallelism.

Either snapshot is local or on an object store. ``kg diff`` takes Flink savepoints and retained
checkpoints too: ``convert.inputs.diff_inputs`` decodes them into kg snapshots first (``from_savepoint``,
which decodes and checks every entry), so both sides are compared through the same Arrow rows here.

Operators are matched by operator id. An operator that holds no state (no keyed row and no operator-state
element) on either side never makes two inputs differ, also when only one side lists it: a savepoint lists
every operator of the job, a kg snapshot may leave the stateless ones out. What "the same state" means for
the others, per kind:

- **keyed** (value, list, map, timer): the multiset of rows ``(state, key, namespace, user_key, value,
  timestamp)``; key groups, files and row order are layout, not state.
- **operator-split**: the multiset of elements ``(state, value)`` over all subtasks; positions and which
  subtask holds an element are layout (a rescale deals elements out anew).
- **operator-union**: the set of distinct elements ``(state, value)``; after a rescale every subtask holds
  every element, so copies are layout.
- **operator-broadcast**: the set of distinct per-subtask maps ``{entry_key: value}``; Flink gives new
  subtask ``i`` the map of old subtask ``i % p``, which keeps that set whenever the parallelism grows.
  Counts for broadcast state are maps, not rows.

The key group a row is stored under is layout too: it follows from the key and the maxParallelism, so two
inputs at different maxParallelism hold the same logical state when their rows are equal.

Rows are compared with Arrow hash aggregation (no Python loop over rows). When both snapshots have the
same maxParallelism the keyed rows are compared one key-group range at a time (a key's rows all share
one key group), which bounds memory by the biggest subtask; a row stored in another key group than its
counterpart then counts as different (with equal maxParallelism the key decides the key group).
Otherwise each operator is compared whole, in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.schema import keyed_schema
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.download import readable_snapshot
from keygroup_cli.snapshot.model import KEYED_KINDS, Operator, Snapshot
from keygroup_cli.snapshot.parquet import iter_keyed_batches, read_operator_file

KEYED_COMPARED = ("state", "key", "namespace", "user_key", "value", "timestamp")


@dataclass(frozen=True, slots=True)
class StateDiff:
    """How one state differs: rows (maps, for broadcast state) only in A and only in B."""

    state: str
    kind: str
    rows_a: int
    rows_b: int
    only_in_a: int
    only_in_b: int

    @property
    def same(self) -> bool:
        """Return whether the state is logically equal in A and B."""
        return self.only_in_a == 0 and self.only_in_b == 0


@dataclass(frozen=True, slots=True)
class OperatorDiff:
    """One operator's comparison; ``presence`` is ``both``, ``only_in_a`` or ``only_in_b``.

    ``holds_state`` is False when neither side has a keyed row or an operator-state element for it: such
    an operator is the same whatever its presence, kinds or layout.
    """

    label: str
    operator_id: str
    presence: str
    states: tuple[StateDiff, ...]
    notes: tuple[str, ...] = ()
    comparable: bool = True
    holds_state: bool = True
    #: The operator's uid and name (in A, else in B), for display.
    uid: str | None = None
    name: str | None = None

    @property
    def same(self) -> bool:
        """Return whether the operator's state is logically equal in A and B."""
        if not self.holds_state:
            return True
        return self.presence == "both" and self.comparable and all(s.same for s in self.states)


@dataclass(frozen=True, slots=True)
class SnapshotDiff:
    """The comparison of two snapshots, operator by operator."""

    a: str
    b: str
    operators: tuple[OperatorDiff, ...]

    @property
    def same(self) -> bool:
        """Return whether both snapshots hold the same logical state."""
        return all(op.same for op in self.operators)


def diff_snapshots(
    a: str | os.PathLike[str], b: str | os.PathLike[str], *, on_progress: OnProgress | None = None
) -> SnapshotDiff:
    """Compare the logical state of the kg snapshots ``a`` and ``b`` (local, or on an object store).

    Raises:
        InvalidInputError: Either snapshot cannot be opened or read.
        UnsupportedFormatError: An unknown ``format_version``.
    """
    with (
        readable_snapshot(a, on_progress=on_progress) as local_a,
        readable_snapshot(b, on_progress=on_progress) as local_b,
    ):
        result = _diff(open_snapshot(local_a), open_snapshot(local_b), on_progress)
    return replace(result, a=result.a if local_a == a else str(a), b=result.b if local_b == b else str(b))


def _holds_state(op: Operator | None) -> bool:
    """Return whether an operator has any keyed row or operator-state element (None: not listed)."""
    return op is not None and (op.keyed_rows > 0 or any(f.rows for f in op.operator_files))


def _diff(snap_a: Snapshot, snap_b: Snapshot, on_progress: OnProgress | None) -> SnapshotDiff:
    ids = list(
        dict.fromkeys([op.operator_id for op in snap_a.manifest.operators + snap_b.manifest.operators])
    )
    results = []
    for done, operator_id in enumerate(ids, start=1):
        op_a = next((o for o in snap_a.manifest.operators if o.operator_id == operator_id), None)
        op_b = next((o for o in snap_b.manifest.operators if o.operator_id == operator_id), None)
        holds_state = _holds_state(op_a) or _holds_state(op_b)
        if op_a is None or op_b is None:
            present = op_a or op_b
            assert present is not None
            presence = "only_in_a" if op_b is None else "only_in_b"
            results.append(
                OperatorDiff(
                    present.label,
                    operator_id,
                    presence,
                    (),
                    holds_state=holds_state,
                    uid=present.uid,
                    name=present.name,
                )
            )
        elif not holds_state:
            # Nothing to compare: kinds, key types and layout of an operator without state are no state.
            results.append(
                OperatorDiff(
                    op_a.label, operator_id, "both", (), holds_state=False, uid=op_a.uid, name=op_a.name
                )
            )
        else:
            results.append(_diff_operator(snap_a, op_a, snap_b, op_b))
        if on_progress is not None:
            on_progress("diff", done, len(ids))
    return SnapshotDiff(str(snap_a.path), str(snap_b.path), tuple(results))


def _diff_operator(snap_a: Snapshot, op_a: Operator, snap_b: Snapshot, op_b: Operator) -> OperatorDiff:
    notes = []
    if op_a.parallelism != op_b.parallelism:
        notes.append(f"parallelism {op_a.parallelism} -> {op_b.parallelism}")
    if op_a.max_parallelism != op_b.max_parallelism:
        notes.append(f"maxParallelism {op_a.max_parallelism} -> {op_b.max_parallelism}")
    kinds_a = {s.name: s.kind for s in op_a.states}
    kinds_b = {s.name: s.kind for s in op_b.states}
    comparable = True
    for name in sorted(kinds_a.keys() & kinds_b.keys()):
        if kinds_a[name] != kinds_b[name]:
            notes.append(f"state {name!r} is {kinds_a[name]} in A but {kinds_b[name]} in B")
            comparable = False
    has_keyed = any(k in KEYED_KINDS for k in (*kinds_a.values(), *kinds_b.values()))
    if has_keyed and op_a.key_type != op_b.key_type and op_a.keyed_files and op_b.keyed_files:
        notes.append(f"key type {op_a.key_type} in A but {op_b.key_type} in B")
        comparable = False
    kind_of = {**kinds_b, **kinds_a}
    states: dict[str, StateDiff] = {}
    if comparable:
        states.update(_diff_keyed(snap_a, op_a, snap_b, op_b, kind_of))
        states.update(_diff_operator_state(snap_a, op_a, snap_b, op_b, kind_of))
    else:
        # Rows of another key type or state kind never equal one another: every row is on its side only.
        count_a, count_b = _rows_by_state(snap_a, op_a), _rows_by_state(snap_b, op_b)
        for name in kind_of:
            a, b = count_a.get(name, 0), count_b.get(name, 0)
            states[name] = StateDiff(name, kind_of[name], a, b, a, b)
    for name, kind in kind_of.items():
        states.setdefault(name, StateDiff(name, kind, 0, 0, 0, 0))
    ordered = tuple(states[name] for name in kind_of)
    return OperatorDiff(
        op_a.label, op_a.operator_id, "both", ordered, tuple(notes), comparable, uid=op_a.uid, name=op_a.name
    )


def _rows_by_state(snapshot: Snapshot, op: Operator) -> dict[str, int]:
    """Return the rows of each state of ``op``, keyed and operator state."""
    counts: dict[str, int] = {}
    for table in (_keyed_table(snapshot, op, None), _operator_rows(snapshot, op)):
        if table.num_rows:
            for row in table.group_by("state", use_threads=False).aggregate([("state", "count")]).to_pylist():
                counts[row["state"]] = counts.get(row["state"], 0) + int(row["state_count"])
    return counts


# -- Multisets with Arrow ----------------------------------------------------------------------------------


def _multiset_counts(a: pa.Table, b: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Return per state the row counts of A and B and the rows only in A / only in B, as multisets."""
    tagged = []
    for table, flag in ((a, 1), (b, 0)):
        n = table.num_rows
        tagged.append(
            table.select(list(columns))
            .append_column("_a", pa.array(np.full(n, flag, dtype=np.int64)))
            .append_column("_b", pa.array(np.full(n, 1 - flag, dtype=np.int64)))
        )
    both = pa.concat_tables(tagged)
    grouped = both.group_by(list(columns), use_threads=False).aggregate([("_a", "sum"), ("_b", "sum")])
    count_a, count_b = grouped.column("_a_sum"), grouped.column("_b_sum")
    delta = pc.subtract(count_a, count_b)
    per_row = pa.table(
        {
            "state": grouped.column("state"),
            "rows_a": count_a,
            "rows_b": count_b,
            "only_a": pc.max_element_wise(delta, 0),
            "only_b": pc.max_element_wise(pc.negate(delta), 0),
        }
    )
    return per_row.group_by("state", use_threads=False).aggregate(
        [("rows_a", "sum"), ("rows_b", "sum"), ("only_a", "sum"), ("only_b", "sum")]
    )


def _accumulate(totals: dict[str, list[int]], counts: pa.Table) -> None:
    for row in counts.to_pylist():
        t = totals.setdefault(row["state"], [0, 0, 0, 0])
        for i, column in enumerate(("rows_a_sum", "rows_b_sum", "only_a_sum", "only_b_sum")):
            t[i] += int(row[column])


def _keyed_table(snapshot: Snapshot, op: Operator, key_groups: KeyGroupRange | None) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    for f in op.keyed_files:
        if key_groups is not None and f.key_groups.intersection(key_groups).size == 0:
            continue
        batches.extend(iter_keyed_batches(snapshot, f, list(KEYED_COMPARED), key_groups=key_groups))
    return _normalise(batches, op)


def _normalise(batches: list[pa.RecordBatch], op: Operator) -> pa.Table:
    schema = keyed_schema(op.key_type or "binary")
    target = pa.schema(
        [schema.field(c).with_type(pa.string()) if c == "state" else schema.field(c) for c in KEYED_COMPARED]
    )
    tables = [
        pa.Table.from_batches([batch])
        .set_column(0, "state", batch.column("state").cast(pa.string()))
        .cast(target)
        for batch in batches
    ]
    return pa.concat_tables(tables) if tables else target.empty_table()


def _key_group_buckets(op_a: Operator, op_b: Operator) -> Iterator[KeyGroupRange | None]:
    if op_a.max_parallelism != op_b.max_parallelism:
        yield None
        return
    ranges = sorted({f.key_groups for f in (*op_a.keyed_files, *op_b.keyed_files)}, key=lambda r: r.start)
    # Cut at every file boundary of either side, so each bucket reads at most one file per snapshot.
    cuts = sorted({r.start for r in ranges} | {r.end + 1 for r in ranges})
    for start, end in zip(cuts, cuts[1:], strict=False):
        yield KeyGroupRange(start, end - 1)


def _diff_keyed(
    snap_a: Snapshot, op_a: Operator, snap_b: Snapshot, op_b: Operator, kind_of: dict[str, str]
) -> dict[str, StateDiff]:
    totals: dict[str, list[int]] = {}
    for bucket in _key_group_buckets(op_a, op_b):
        a, b = _keyed_table(snap_a, op_a, bucket), _keyed_table(snap_b, op_b, bucket)
        if a.num_rows or b.num_rows:
            _accumulate(totals, _multiset_counts(a, b, KEYED_COMPARED))
    return {name: StateDiff(name, kind_of.get(name, "?"), *t) for name, t in totals.items()}


def _operator_rows(snapshot: Snapshot, op: Operator) -> pa.Table:
    tables = []
    for f in op.operator_files:
        t = read_operator_file(snapshot, f, ["state", "entry_key", "value"])
        t = t.set_column(0, "state", t.column("state").cast(pa.string()))
        tables.append(t.append_column("subtask", pa.array([f.subtask] * t.num_rows, pa.int32())))
    schema = pa.schema(
        [("state", pa.string()), ("entry_key", pa.binary()), ("value", pa.binary()), ("subtask", pa.int32())]
    )
    return pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()


def _diff_operator_state(
    snap_a: Snapshot, op_a: Operator, snap_b: Snapshot, op_b: Operator, kind_of: dict[str, str]
) -> dict[str, StateDiff]:
    rows_a, rows_b = _operator_rows(snap_a, op_a), _operator_rows(snap_b, op_b)
    result: dict[str, StateDiff] = {}
    names = sorted(set(rows_a.column("state").to_pylist()) | set(rows_b.column("state").to_pylist()))
    for name in names:
        kind = kind_of.get(name, "?")
        a = rows_a.filter(pc.equal(rows_a.column("state"), name))
        b = rows_b.filter(pc.equal(rows_b.column("state"), name))
        if kind == "operator-broadcast":
            maps_a, maps_b = _maps(a), _maps(b)
            result[name] = StateDiff(
                name, kind, len(maps_a), len(maps_b), len(maps_a - maps_b), len(maps_b - maps_a)
            )
            continue
        columns = ["state", "entry_key", "value"]
        if kind == "operator-union":
            a = a.group_by(columns, use_threads=False).aggregate([])
            b = b.group_by(columns, use_threads=False).aggregate([])
        totals: dict[str, list[int]] = {}
        _accumulate(totals, _multiset_counts(a, b, columns))
        result[name] = StateDiff(name, kind, *totals.get(name, [0, 0, 0, 0]))
    return result


def _maps(rows: pa.Table) -> set[frozenset[tuple[bytes | None, bytes]]]:
    by_subtask: dict[int, set[tuple[bytes | None, bytes]]] = {}
    for row in rows.select(["subtask", "entry_key", "value"]).to_pylist():
        by_subtask.setdefault(row["subtask"], set()).add((row["entry_key"], row["value"]))
    return {frozenset(entries) for entries in by_subtask.values()}


__all__ = ["KEYED_COMPARED", "OperatorDiff", "SnapshotDiff", "StateDiff", "diff_snapshots"]

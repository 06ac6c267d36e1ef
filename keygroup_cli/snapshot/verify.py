"""Deep verification of a kg snapshot: every file, every row, against the manifest and Flink's key-group math.

``verify_snapshot`` opens the snapshot (a structurally broken manifest raises, as everywhere) and then
returns one ``Finding`` per problem it finds, never raising for bad data: files present with the recorded
size and xxh64, the contract schema, every row's key group inside its file's range and equal to
``murmurHash(key.hashCode()) % maxParallelism`` (except for ``binary`` keys), rows sorted by key group,
per-key-group counts, state names and the columns each state kind needs, operator-state positions
``0..n-1``, and no files the manifest does not name. Keyed files are streamed batch by batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.core.findings import Finding, Severity, VerifyReport
from keygroup_cli.core.javahash import HASHABLE_KEY_TYPES, hash_codes
from keygroup_cli.core.keygroups import key_groups_for_hashes, operator_id_for_uid
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.schema import KEY_ARROW_TYPES, OPERATOR_SCHEMA
from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.checksums import require_file_intact
from keygroup_cli.snapshot.download import readable_snapshot
from keygroup_cli.snapshot.model import KeyedFile, Operator, OperatorFile, Snapshot

BATCH_ROWS = 1 << 17


def verify_snapshot(path: Path | str, *, on_progress: OnProgress | None = None) -> VerifyReport:
    """Verify the kg snapshot at ``path`` deeply and return the findings.

    Raises:
        InvalidInputError: The snapshot cannot be opened (no or structurally invalid manifest).
        UnsupportedFormatError: Its ``format_version`` is unknown.
    """
    with readable_snapshot(path, on_progress=on_progress) as local:
        report = _verify(open_snapshot(local), on_progress)
    return report if local == path else replace(report, snapshot=str(path))


def _verify(snapshot: Snapshot, on_progress: OnProgress | None) -> VerifyReport:
    findings: list[Finding] = []
    total = sum(len(op.files) for op in snapshot.manifest.operators)
    done = rows = 0
    for op in snapshot.manifest.operators:
        if op.uid is not None and operator_id_for_uid(op.uid) != op.operator_id:
            findings.append(
                Finding(
                    "OPERATOR_ID_NOT_UID_HASH",
                    Severity.WARNING,
                    op.label,
                    f"operator {op.uid!r} has id {op.operator_id}, but Flink's id for that uid is "
                    f"{operator_id_for_uid(op.uid)}",
                )
            )
        for keyed in op.keyed_files:
            if _check_digest(snapshot, keyed, findings):
                rows += _check_keyed(snapshot, op, keyed, findings)
            done += 1
            if on_progress is not None:
                on_progress("verify", done, total)
        replicas: dict[str, dict[int, list[tuple[int, bytes]]]] = {}
        for operator_file in op.operator_files:
            if _check_digest(snapshot, operator_file, findings):
                rows += _check_operator_file(snapshot, op, operator_file, findings, replicas)
            done += 1
            if on_progress is not None:
                on_progress("verify", done, total)
        findings.extend(_replica_findings(op, replicas))
    findings.extend(_extra_files(snapshot))
    return VerifyReport(str(snapshot.path), total, rows, tuple(findings))


def _error(code: str, subject: str, message: str) -> Finding:
    return Finding(code, Severity.ERROR, subject, f"{subject}: {message}")


_DIGEST_CODES = {"FILE_MISSING": "FILE_MISSING", "SIZE_MISMATCH": "FILE_SIZE_MISMATCH"}


def _check_digest(snapshot: Snapshot, entry: KeyedFile | OperatorFile, findings: list[Finding]) -> bool:
    """Record a finding unless the file matches its size and xxh64; return whether its rows are worth reading.

    A file whose bytes differ from what the manifest recorded is not read further: its rows are not the
    ones the manifest describes, and reporting them would only add noise to the one finding that matters.
    """
    try:
        require_file_intact(snapshot.path, entry)
    except InvalidInputError as exc:
        code = _DIGEST_CODES.get(exc.code, "FILE_CHECKSUM_MISMATCH")
        detail = exc.message.split(": ", 1)[-1]
        findings.append(_error(code, entry.path, detail))
        return False
    return True


def _open(
    snapshot: Snapshot, entry: KeyedFile | OperatorFile, findings: list[Finding]
) -> pq.ParquetFile | None:
    try:
        return pq.ParquetFile(snapshot.resolve(entry.path))
    except (OSError, pa.ArrowException) as exc:
        findings.append(_error("FILE_UNREADABLE", entry.path, f"not a readable Parquet file ({exc})"))
        return None


def _is_string_state(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type)))


def _schema_problems(schema: pa.Schema, expected: dict[str, pa.DataType]) -> list[str]:
    problems = []
    for name, wanted in expected.items():
        if name not in schema.names:
            problems.append(f"no column {name!r}")
            continue
        got = schema.field(name).type
        ok = _is_string_state(got) if name == "state" else got == wanted
        if not ok:
            problems.append(f"column {name!r} is {got}, expected {wanted}")
    return problems


@dataclass
class _Tally:
    """Counts one kind of violation in a file and remembers the first example."""

    count: int = 0
    example: str = ""

    def add(self, count: int, example: Callable[[], str]) -> None:
        if count and not self.count:
            self.example = example()
        self.count += count


@dataclass
class _KeyedScan:
    tallies: dict[str, _Tally] = field(default_factory=dict)

    def tally(self, code: str) -> _Tally:
        return self.tallies.setdefault(code, _Tally())


def _check_keyed(snapshot: Snapshot, op: Operator, entry: KeyedFile, findings: list[Finding]) -> int:
    pf = _open(snapshot, entry, findings)
    if pf is None:
        return 0
    key_type = op.key_type or "binary"
    expected = {
        "key_group": pa.int32(),
        "state": pa.string(),
        "key": KEY_ARROW_TYPES[key_type],
        "namespace": pa.binary(),
        "user_key": pa.binary(),
        "value": pa.binary(),
        "timestamp": pa.int64(),
    }
    problems = _schema_problems(pf.schema_arrow, expected)
    if problems:
        findings.append(_error("FILE_SCHEMA_MISMATCH", entry.path, "; ".join(problems)))
        return 0
    keyed_states = [s for s in op.states if s.is_keyed]
    names = pa.array([s.name for s in keyed_states], pa.string())
    kind_of = np.array([s.kind for s in keyed_states] + ["?"], dtype=object)
    scan = _KeyedScan()
    start, end = entry.key_group_start, entry.key_group_end
    counts = np.zeros(entry.key_group_end - entry.key_group_start + 1, dtype=np.int64)
    rows = 0
    previous = -1
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=list(expected)):
            rows += batch.num_rows
            kg = np.asarray(batch.column("key_group").fill_null(-1).to_numpy(), dtype=np.int64)
            _scan_key_groups(scan, batch, kg, previous, start, end, counts)
            if kg.size:
                previous = int(kg[-1])
            if key_type in HASHABLE_KEY_TYPES and batch.column("key").null_count == 0:
                _scan_key_hashes(scan, batch, kg, key_type, op.max_parallelism)
            _scan_states(scan, batch, names, kind_of)
    except (OSError, pa.ArrowException) as exc:
        findings.append(_error("FILE_UNREADABLE", entry.path, f"cannot read rows ({exc})"))
        return rows
    for code, tally in scan.tallies.items():
        if tally.count:
            findings.append(_error(code, entry.path, f"{tally.count} row(s); first: {tally.example}"))
    if rows != entry.rows:
        findings.append(
            _error("FILE_ROW_COUNT_MISMATCH", entry.path, f"{rows} rows, manifest says {entry.rows}")
        )
    recorded = np.asarray(entry.key_group_rows, dtype=np.int64)
    if not np.array_equal(counts, recorded):
        j = int(np.flatnonzero(counts != recorded)[0])
        findings.append(
            _error(
                "KEY_GROUP_COUNTS_MISMATCH",
                entry.path,
                f"key group {start + j} has {counts[j]} rows, manifest's key_group_rows says {recorded[j]}",
            )
        )
    return rows


def _scan_key_groups(
    scan: _KeyedScan,
    batch: pa.RecordBatch,
    kg: npt.NDArray[np.int64],
    previous: int,
    start: int,
    end: int,
    counts: npt.NDArray[np.int64],
) -> None:
    nulls = sum(batch.column(c).null_count for c in ("key_group", "state", "key", "namespace"))
    scan.tally("NULL_IN_REQUIRED_COLUMN").add(nulls, lambda: "in key_group, state, key or namespace")
    outside = (kg < start) | (kg > end)
    scan.tally("KEY_GROUP_OUT_OF_RANGE").add(
        int(outside.sum()), lambda: f"key group {int(kg[outside][0])} not in [{start}, {end}]"
    )
    inside = kg[~outside]
    counts += np.bincount(inside - start, minlength=counts.size)
    if kg.size:
        steps = np.concatenate([[previous], kg])
        down = np.flatnonzero(np.diff(steps) < 0)
        scan.tally("KEY_GROUPS_UNSORTED").add(
            int(down.size), lambda: f"key group {int(steps[down[0] + 1])} after {int(steps[down[0]])}"
        )


def _scan_key_hashes(
    scan: _KeyedScan, batch: pa.RecordBatch, kg: npt.NDArray[np.int64], key_type: str, max_parallelism: int
) -> None:
    expected = key_groups_for_hashes(hash_codes(batch.column("key"), key_type), max_parallelism)
    wrong = np.flatnonzero(expected != kg)
    scan.tally("KEY_GROUP_WRONG_FOR_KEY").add(
        int(wrong.size),
        lambda: (
            f"key {batch.column('key')[int(wrong[0])].as_py()!r} stored in key group {int(kg[wrong[0]])}, "
            f"Flink assigns {int(expected[wrong[0]])}"
        ),
    )


def _scan_states(
    scan: _KeyedScan, batch: pa.RecordBatch, names: pa.Array, kind_of: npt.NDArray[np.object_]
) -> None:
    state = batch.column("state")
    if pa.types.is_dictionary(state.type):
        state = state.dictionary_decode()
    index = pc.index_in(state, value_set=names)
    undeclared = index.is_null().to_numpy(zero_copy_only=False) & state.is_valid().to_numpy(
        zero_copy_only=False
    )
    scan.tally("STATE_UNDECLARED").add(
        int(undeclared.sum()),
        lambda: f"state {state[int(np.flatnonzero(undeclared)[0])].as_py()!r} is not a declared keyed state",
    )
    kinds = kind_of[np.asarray(index.fill_null(len(names)).to_numpy(), dtype=np.int64)]
    present = {
        c: batch.column(c).is_valid().to_numpy(zero_copy_only=False)
        for c in ("user_key", "value", "timestamp")
    }
    is_map, is_timer = kinds == "map", kinds == "timer"
    is_plain = (kinds == "value") | (kinds == "list")
    bad = (
        # A null map value (Flink MapState.put(k, null), kept by RocksDB) is a null ``value``.
        (is_map & ~(present["user_key"] & ~present["timestamp"]))
        | (is_timer & ~(present["timestamp"] & ~present["user_key"] & ~present["value"]))
        | (is_plain & ~(present["value"] & ~present["user_key"] & ~present["timestamp"]))
    )
    scan.tally("STATE_ROW_SHAPE").add(
        int(bad.sum()), lambda: _shape_example(state, kinds, np.flatnonzero(bad)[0])
    )


def _shape_example(state: pa.Array, kinds: npt.NDArray[np.object_], row: int) -> str:
    need = {
        "map": "user_key (value null only for a null map value), no timestamp",
        "timer": "timestamp only (no user_key, no value)",
        "value": "value only",
        "list": "value only",
    }
    return f"state {state[int(row)].as_py()!r} ({kinds[row]}) needs {need[str(kinds[row])]}"


def _check_operator_file(
    snapshot: Snapshot,
    op: Operator,
    entry: OperatorFile,
    findings: list[Finding],
    replicas: dict[str, dict[int, list[tuple[int, bytes]]]],
) -> int:
    """Check one operator-state file; collect the lists of replicated union states into ``replicas``."""
    pf = _open(snapshot, entry, findings)
    if pf is None:
        return 0
    problems = _schema_problems(pf.schema_arrow, {f.name: f.type for f in OPERATOR_SCHEMA})
    if problems:
        findings.append(_error("FILE_SCHEMA_MISMATCH", entry.path, "; ".join(problems)))
        return 0
    try:
        table = pf.read(columns=[f.name for f in OPERATOR_SCHEMA])
    except (OSError, pa.ArrowException) as exc:
        findings.append(_error("FILE_UNREADABLE", entry.path, f"cannot read rows ({exc})"))
        return 0
    if table.num_rows != entry.rows:
        findings.append(
            _error(
                "FILE_ROW_COUNT_MISMATCH", entry.path, f"{table.num_rows} rows, manifest says {entry.rows}"
            )
        )
    nulls = sum(table.column(c).null_count for c in ("state", "position", "value"))
    if nulls:
        findings.append(
            _error("NULL_IN_REQUIRED_COLUMN", entry.path, f"{nulls} null(s) in state, position or value")
        )
    states = table.column("state").cast(pa.string()).to_pylist()
    positions = table.column("position").to_pylist()
    by_state = _positions_by_state(op, entry, table, states, positions, findings)
    replicated = {st.name for st in op.states if st.replicated}
    if replicated & by_state.keys():
        values = table.column("value").to_pylist()
        for name, position, value in zip(states, positions, values, strict=True):
            if name in replicated:
                replicas.setdefault(name, {}).setdefault(entry.subtask, []).append((position, value))
    for name, got in by_state.items():
        if sorted(p for p in got if p is not None) != list(range(len(got))):
            findings.append(
                _error(
                    "OPERATOR_STATE_POSITIONS",
                    entry.path,
                    f"state {name!r} positions are not 0..{len(got) - 1}",
                )
            )
    return int(table.num_rows)


def _positions_by_state(
    op: Operator,
    entry: OperatorFile,
    table: pa.Table,
    states: list[str],
    positions: list[int],
    findings: list[Finding],
) -> dict[str, list[int]]:
    """Return the positions of each declared state's rows; add a finding for undeclared or misshapen rows."""
    kinds = {s.name: s.kind for s in op.states if not s.is_keyed}
    has_entry_key = table.column("entry_key").is_valid().to_pylist()
    by_state: dict[str, list[int]] = {}
    for name, position, keyed in zip(states, positions, has_entry_key, strict=True):
        if name not in kinds:
            findings.append(
                _error("STATE_UNDECLARED", entry.path, f"state {name!r} is not a declared operator state")
            )
            kinds[name] = "?"  # report each unknown name once
            continue
        if kinds[name] != "?" and keyed != (kinds[name] == "operator-broadcast"):
            findings.append(
                _error(
                    "STATE_ROW_SHAPE",
                    entry.path,
                    f"state {name!r} ({kinds[name]}): entry_key must be set exactly for broadcast state",
                )
            )
            kinds[name] = "?"
        by_state.setdefault(name, []).append(position)
    return by_state


def _replica_findings(op: Operator, replicas: dict[str, dict[int, list[tuple[int, bytes]]]]) -> list[Finding]:
    """A replicated union state must hold the very same list on every subtask that has it."""
    findings = []
    for name, lists in replicas.items():
        copies = {subtask: sorted(rows, key=lambda r: r[0]) for subtask, rows in sorted(lists.items())}
        first, reference = next(iter(copies.items()))
        differing = [subtask for subtask, rows in copies.items() if rows != reference]
        if differing:
            findings.append(
                _error(
                    "UNION_REPLICAS_DIFFER",
                    op.label,
                    f"union state {name!r} is marked replicated, but subtask(s) "
                    f"{', '.join(map(str, differing))} hold a different list than subtask {first}",
                )
            )
    return findings


def _extra_files(snapshot: Snapshot) -> Iterable[Finding]:
    named = {os.path.normpath(f.path) for op in snapshot.manifest.operators for f in op.files}
    directories = sorted({os.path.dirname(p) for p in named} - {""})
    for directory in directories:
        full = snapshot.path / directory
        if not full.is_dir():
            continue
        for entry in sorted(full.iterdir()):
            relative = os.path.normpath(os.path.join(directory, entry.name))
            if relative not in named:
                yield _error("FILE_EXTRA", relative, "not named in the manifest")


__all__ = ["verify_snapshot"]

"""Helpers shared by the execution and rescale tests: generate snapshots and read them back."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from keygroup_cli.snapshot import open_snapshot
from keygroup_cli.snapshot.synthetic import SyntheticOperator, generate_snapshot

ROW_COLUMNS = ["state", "key", "namespace", "user_key", "value", "timestamp"]


def generate(
    path: Path, *operators: tuple[str, str, int, int, int], seed: int = 7, row_group_rows: int = 500
) -> Path:
    """Generate a snapshot of ``(uid, key_type, keys, parallelism, max_parallelism)`` operators.

    Small row groups by default, so that readers must skip and split row groups.
    """
    generate_snapshot(
        path, [SyntheticOperator(*spec) for spec in operators], seed=seed, row_group_rows=row_group_rows
    )
    return path


def keyed_rows(path: Path, uid: str, *, with_key_group: bool = True) -> pa.Table:
    """Return every keyed row of an operator, decoded and sorted canonically (for multiset comparison)."""
    snapshot = open_snapshot(path)
    op = snapshot.manifest.operator(uid)
    assert op is not None
    tables = [pq.read_table(snapshot.resolve(f.path)) for f in op.keyed_files]
    table = pa.concat_tables(tables)
    table = table.set_column(1, "state", table.column("state").cast(pa.string()))
    columns = (["key_group"] if with_key_group else []) + ROW_COLUMNS
    table = table.select(columns)
    return table.sort_by([(c, "ascending") for c in columns])


def operator_rows(path: Path, uid: str) -> dict[int, list[tuple[str, int, bytes | None, bytes]]]:
    """Return each subtask's operator-state rows in file order."""
    snapshot = open_snapshot(path)
    op = snapshot.manifest.operator(uid)
    assert op is not None
    out = {}
    for f in op.operator_files:
        t = pq.read_table(snapshot.resolve(f.path))
        out[f.subtask] = list(
            zip(
                t.column("state").cast(pa.string()).to_pylist(),
                t.column("position").to_pylist(),
                t.column("entry_key").to_pylist(),
                t.column("value").to_pylist(),
                strict=True,
            )
        )
    return out


def tree_digest(path: Path) -> dict[str, str]:
    """Return sha256 of every file under ``path`` (to prove a directory was not modified)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }

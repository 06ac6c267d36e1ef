"""Reading and writing kg state files: one Parquet file per (operator, subtask), in ``rows``' Arrow schemas.

Keyed files are written sorted by ``key_group`` with row groups cut at key-group boundaries (at most
``DEFAULT_ROW_GROUP_ROWS`` rows each; only a single key group larger than that is split), so a reader can
select key groups through row-group statistics. Output is a pure function of the logical rows: the
``state`` dictionary is canonicalised and row groups are rebuilt contiguously, so identical rows give
byte-identical files whatever the input chunking. Compression is Snappy: the fastest codec every Parquet
reader (pyarrow, pandas, DuckDB, Spark) supports; state values are mostly incompressible, so zstd's
better ratio buys little for its extra CPU on a rescale.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.core.schema import KEYED_COLUMNS, OPERATOR_SCHEMA, STATE_TYPE, keyed_schema
from keygroup_cli.snapshot.checksums import file_digest
from keygroup_cli.snapshot.model import KeyedFile, OperatorFile, Snapshot

COMPRESSION = "snappy"
DEFAULT_ROW_GROUP_ROWS = 1 << 20
DEFAULT_BATCH_ROWS = 1 << 16


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """What a writer learned about a file it wrote: the facts the manifest records."""

    rows: int
    bytes: int
    xxh64: str
    key_group_rows: tuple[int, ...] = ()

    def keyed_file(self, subtask: int, path: str, key_groups: KeyGroupRange) -> KeyedFile:
        """Return the manifest entry of this file as subtask ``subtask``'s keyed file at ``path``."""
        return KeyedFile(
            subtask=subtask,
            key_group_start=key_groups.start,
            key_group_end=key_groups.end,
            path=path,
            rows=self.rows,
            bytes=self.bytes,
            xxh64=self.xxh64,
            key_group_rows=self.key_group_rows,
        )

    def operator_file(self, subtask: int, path: str) -> OperatorFile:
        """Return the manifest entry of this file as subtask ``subtask``'s operator file at ``path``."""
        return OperatorFile(subtask=subtask, path=path, rows=self.rows, bytes=self.bytes, xxh64=self.xxh64)


KeyedData: TypeAlias = pa.Table | pa.RecordBatch | Iterable[pa.Table | pa.RecordBatch]


# -- Conforming input to the contract schema ---------------------------------------------------------------


def conform_keyed(
    data: pa.Table | pa.RecordBatch, key_type: str, state_names: Sequence[str] | None = None
) -> pa.Table:
    """Return ``data`` in the keyed schema: contract columns first (missing nullable ones as nulls), cast.

    The ``state`` column becomes a dictionary over exactly ``state_names`` in that order (or the sorted
    distinct names when None), whatever dictionary the input had. Extra columns are kept after the
    contract columns (the format allows additive nullable columns).

    Raises:
        InvalidArgumentError: A required column is missing or holds nulls, or a state is not in
            ``state_names``.
    """
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    schema = keyed_schema(key_type)
    if state_names is None:
        state_names = _distinct_states(table)
    columns: list[pa.ChunkedArray] = []
    for f in schema:
        if f.name not in table.column_names:
            if not f.nullable:
                raise InvalidArgumentError(f"keyed data has no {f.name!r} column", code="COLUMN_MISSING")
            columns.append(pa.chunked_array([pa.nulls(table.num_rows, f.type)]))
            continue
        column = table.column(f.name)
        if column.null_count and not f.nullable:
            raise InvalidArgumentError(f"keyed column {f.name!r} holds nulls", code="NULL_IN_REQUIRED_COLUMN")
        if f.name == "state":
            column = _canonical_states(column, state_names)
        elif column.type != f.type:
            column = column.cast(f.type)
        columns.append(column)
    extras = [n for n in table.column_names if n not in KEYED_COLUMNS]
    fields = list(schema) + [table.schema.field(n) for n in extras]
    return pa.Table.from_arrays(columns + [table.column(n) for n in extras], schema=pa.schema(fields))


def _distinct_states(table: pa.Table) -> list[str]:
    if "state" not in table.column_names:
        return []
    return sorted(str(v) for v in pc.unique(_state_strings(table.column("state"))).to_pylist())


def _state_strings(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_dictionary(column.type):
        return pa.chunked_array([c.dictionary_decode() for c in column.chunks], type=column.type.value_type)
    return column


def _canonical_states(column: pa.ChunkedArray, names: Sequence[str]) -> pa.ChunkedArray:
    dictionary = pa.array(list(names), type=pa.string())
    chunks = []
    for chunk in column.chunks:
        if pa.types.is_dictionary(chunk.type):
            # Remap the (small) dictionary, then gather: no per-row string hashing.
            mapping = pc.index_in(chunk.dictionary.cast(pa.string()), value_set=dictionary)
            indices = pc.take(mapping, chunk.indices)
        else:
            indices = pc.index_in(chunk.cast(pa.string()), value_set=dictionary)
        if indices.null_count:
            unknown = pc.filter(_state_strings(pa.chunked_array([chunk])), pc.is_null(indices)).to_pylist()[
                :3
            ]
            raise InvalidArgumentError(
                f"state(s) {unknown} are not among the operator's states {list(names)}", code="STATE_UNKNOWN"
            )
        chunks.append(pa.DictionaryArray.from_arrays(indices.cast(pa.int32()), dictionary))
    return pa.chunked_array(chunks, type=STATE_TYPE)


# -- Writing -----------------------------------------------------------------------------------------------


def _writer(
    path: Path, schema: pa.Schema, dictionary_columns: list[str], statistics: list[str]
) -> pq.ParquetWriter:
    return pq.ParquetWriter(
        path,
        schema,
        compression=COMPRESSION,
        use_dictionary=dictionary_columns,
        write_statistics=statistics,
        # Keep the Arrow schema (dictionary type, non-null flags) so pyarrow reads the files back exactly.
        store_schema=True,
    )


def _keyed_parts(
    data: KeyedData, key_type: str, state_names: Sequence[str] | None
) -> tuple[Iterable[pa.Table | pa.RecordBatch], bool, Sequence[str]]:
    """Return the parts to write, whether they are conformed already, and the state names.

    One table or batch is conformed and sorted by key group here (stably); an iterable is taken as it comes.

    Raises:
        InvalidArgumentError: Streamed data without ``state_names``.
    """
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if state_names is None:
            state_names = _distinct_states(table)
        table = conform_keyed(table, key_type, state_names)
        kg = _key_group_numpy(table)
        if kg.size > 1 and bool(np.any(kg[1:] < kg[:-1])):
            table = table.take(pc.sort_indices(table, [("key_group", "ascending")]))
        return [table], True, state_names
    if state_names is None:
        raise InvalidArgumentError("streamed keyed data needs state_names", code="STATE_NAMES_REQUIRED")
    return data, False, state_names


def _check_chunk(path: Path, kg: np.ndarray, key_groups: KeyGroupRange, last_group: int) -> int:
    """Refuse a chunk with a key group outside the file's range or out of order; return its last one.

    Raises:
        InvalidInputError: ``KEY_GROUP_OUT_OF_RANGE`` or ``ROWS_NOT_SORTED``.
    """
    if int(kg.min()) < key_groups.start or int(kg.max()) > key_groups.end:
        bad = int(kg[(kg < key_groups.start) | (kg > key_groups.end)][0])
        raise InvalidInputError(
            f"{path}: a row has key group {bad}, outside the file's range "
            f"[{key_groups.start}, {key_groups.end}]",
            code="KEY_GROUP_OUT_OF_RANGE",
        )
    if int(kg[0]) < last_group or bool(np.any(kg[1:] < kg[:-1])):
        raise InvalidInputError(f"{path}: streamed rows are not sorted by key_group", code="ROWS_NOT_SORTED")
    return int(kg[-1])


class _KeyedWriter:
    """A keyed file's Parquet writer: row groups of ``row_group_rows`` at most, cut between key groups."""

    def __init__(self, path: Path, row_group_rows: int) -> None:
        self.path = path
        self.row_group_rows = row_group_rows
        self.writer: pq.ParquetWriter | None = None
        self.pending: list[pa.Table] = []
        self.pending_rows = 0

    def add(self, chunk: pa.Table) -> None:
        if self.writer is None:
            self.writer = _writer(self.path, chunk.schema, ["state", "key", "namespace"], ["key_group"])
        self.pending.append(chunk)
        self.pending_rows += chunk.num_rows
        while self.pending_rows >= self.row_group_rows:
            block = pa.concat_tables(self.pending)
            cut = _row_group_cut(_key_group_numpy(block), self.row_group_rows)
            self.writer.write_table(block.slice(0, cut).combine_chunks(), row_group_size=cut)
            rest = block.slice(cut)
            self.pending, self.pending_rows = [rest], rest.num_rows

    def close(self, empty: pa.Table) -> None:
        """Write what is pending (or ``empty``, for a file without rows) and close the file."""
        if self.writer is None:
            self.writer = _writer(self.path, empty.schema, ["state", "key", "namespace"], ["key_group"])
            self.writer.write_table(empty)
        elif self.pending_rows:
            block = pa.concat_tables(self.pending).combine_chunks()
            self.writer.write_table(block, row_group_size=block.num_rows)
        self.writer.close()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.path.unlink(missing_ok=True)


def write_keyed_file(
    path: Path | str,
    data: KeyedData,
    *,
    key_type: str,
    key_groups: KeyGroupRange,
    state_names: Sequence[str] | None = None,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
) -> WrittenFile:
    """Write one subtask's keyed state to ``path``; return its rows, size, xxh64 and per-key-group counts.

    Args:
        path: The file to create (its directory must exist).
        data: One table/batch (sorted here by ``key_group`` if it is not, stably), or an iterable of
            tables/batches already in ascending ``key_group`` order across all of them (streamed).
        key_type: The operator's key type.
        key_groups: The file's key-group range; every row must lie in it.
        state_names: The operator's keyed state names, the ``state`` dictionary. Required for streamed input.
        row_group_rows: Upper bound of rows per row group.

    Raises:
        InvalidInputError: A row's key group is outside ``key_groups``, or streamed input is unsorted.
        InvalidArgumentError: The data does not fit the schema.
    """
    path = Path(path)
    parts, conformed, state_names = _keyed_parts(data, key_type, state_names)
    counts = np.zeros(key_groups.size, dtype=np.int64)
    out = _KeyedWriter(path, row_group_rows)
    last_group = -1
    try:
        for part in parts:
            chunk = part if conformed else conform_keyed(part, key_type, state_names)
            if chunk.num_rows == 0:
                continue
            kg = _key_group_numpy(chunk)
            last_group = _check_chunk(path, kg, key_groups, last_group)
            counts += np.bincount(kg - key_groups.start, minlength=key_groups.size)
            out.add(chunk)
        out.close(conform_keyed(keyed_schema(key_type).empty_table(), key_type, state_names))
    except BaseException:
        out.abort()
        raise
    size, digest = file_digest(path)
    return WrittenFile(
        rows=int(counts.sum()), bytes=size, xxh64=digest, key_group_rows=tuple(int(c) for c in counts)
    )


def _key_group_numpy(table: pa.Table) -> npt.NDArray[np.int64]:
    column = table.column("key_group")
    return np.asarray(column.to_numpy(), dtype=np.int64)


def _row_group_cut(kg: npt.NDArray[np.int64], limit: int) -> int:
    """Return how many leading rows form the next row group: up to ``limit``, ending at a key-group boundary.

    Only when a single key group alone exceeds ``limit`` is it split, at ``limit`` rows.
    """
    if kg.size <= limit:
        return int(kg.size)
    # First row of the key group that straddles the limit: the cut that keeps that group whole.
    cut = int(np.searchsorted(kg, kg[limit], side="left"))
    return cut if cut > 0 else limit


def conform_operator(data: pa.Table | pa.RecordBatch) -> pa.Table:
    """Return operator-state rows in ``OPERATOR_SCHEMA`` (one chunk), as ``write_operator_file`` stores them.

    Raises:
        InvalidArgumentError: The data does not fit ``OPERATOR_SCHEMA`` or holds nulls in required columns.
    """
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    columns = []
    for f in OPERATOR_SCHEMA:
        if f.name not in table.column_names:
            if not f.nullable:
                raise InvalidArgumentError(f"operator data has no {f.name!r} column", code="COLUMN_MISSING")
            columns.append(pa.chunked_array([pa.nulls(table.num_rows, f.type)]))
            continue
        column = table.column(f.name)
        if pa.types.is_dictionary(column.type):
            column = _state_strings(column)
        if column.null_count and not f.nullable:
            raise InvalidArgumentError(
                f"operator column {f.name!r} holds nulls", code="NULL_IN_REQUIRED_COLUMN"
            )
        columns.append(column.cast(f.type) if column.type != f.type else column)
    return pa.Table.from_arrays(columns, schema=OPERATOR_SCHEMA).combine_chunks()


def write_operator_file(path: Path | str, data: pa.Table | pa.RecordBatch) -> WrittenFile:
    """Write one subtask's operator state to ``path`` (rows kept in the given order).

    Raises:
        InvalidArgumentError: The data does not fit ``OPERATOR_SCHEMA`` or holds nulls in required columns.
    """
    path = Path(path)
    conformed = conform_operator(data)
    try:
        with _writer(path, OPERATOR_SCHEMA, ["state"], []) as writer:
            writer.write_table(conformed, row_group_size=max(1, conformed.num_rows))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    size, digest = file_digest(path)
    return WrittenFile(rows=conformed.num_rows, bytes=size, xxh64=digest)


# -- Reading -----------------------------------------------------------------------------------------------


def _open(path: Path, *, pre_buffer: bool = True) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path, pre_buffer=pre_buffer)
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: file is missing", code="FILE_MISSING") from None
    except (OSError, ValueError, pa.ArrowException) as exc:
        # pyarrow raises OSError for most corrupt footers and UnicodeDecodeError (a ValueError) for a
        # column name that is not UTF-8.
        raise InvalidInputError(
            f"{path}: not a readable Parquet file: {exc}", code="FILE_UNREADABLE"
        ) from None


def read_keyed_file(
    snapshot: Snapshot, keyed_file: KeyedFile, columns: Sequence[str] | None = None
) -> pa.Table:
    """Read a whole keyed file (or some of its columns) into memory."""
    return _read_table(snapshot.resolve(keyed_file.path), columns)


def iter_keyed_batches(
    snapshot: Snapshot,
    keyed_file: KeyedFile,
    columns: Sequence[str] | None = None,
    *,
    key_groups: KeyGroupRange | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Stream a keyed file as record batches, optionally only the rows of ``key_groups``.

    Row groups whose ``key_group`` statistics lie outside ``key_groups`` are skipped without being read.
    """
    path = snapshot.resolve(keyed_file.path)
    # No pre-buffering: pyarrow would load every selected row group up front, making a streamed read's
    # memory grow with the file instead of staying at one row group.
    pf = _open(path, pre_buffer=False)
    wanted = list(columns) if columns is not None else None
    read_columns = wanted
    row_groups = list(range(pf.metadata.num_row_groups))
    if key_groups is not None:
        row_groups = [i for i in row_groups if _row_group_may_hold(pf, i, key_groups)]
        if wanted is not None and "key_group" not in wanted:
            read_columns = ["key_group", *wanted]
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, row_groups=row_groups, columns=read_columns):
            if key_groups is not None:
                kg = batch.column("key_group")
                mask = pc.and_(pc.greater_equal(kg, key_groups.start), pc.less_equal(kg, key_groups.end))
                batch = batch.filter(mask)
                if wanted is not None:
                    batch = batch.select(wanted)
                if batch.num_rows == 0:
                    continue
            yield batch
    except (OSError, pa.ArrowException) as exc:
        # pyarrow raises OSError (not an ArrowException) for corrupt pages, e.g. bad snappy data.
        raise InvalidInputError(f"{path}: cannot read: {exc}", code="FILE_UNREADABLE") from None


def _row_group_may_hold(pf: pq.ParquetFile, index: int, key_groups: KeyGroupRange) -> bool:
    column = pf.metadata.row_group(index).column(pf.schema_arrow.get_field_index("key_group"))
    stats = column.statistics
    if stats is None or not stats.has_min_max:
        return True
    return bool(stats.max >= key_groups.start and stats.min <= key_groups.end)


def read_operator_file(
    snapshot: Snapshot, operator_file: OperatorFile, columns: Sequence[str] | None = None
) -> pa.Table:
    """Read one subtask's operator state file into memory (operator state is small)."""
    return _read_table(snapshot.resolve(operator_file.path), columns)


def _read_table(path: Path, columns: Sequence[str] | None) -> pa.Table:
    try:
        return _open(path).read(columns=list(columns) if columns is not None else None)
    except (OSError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{path}: cannot read: {exc}", code="FILE_UNREADABLE") from None


def iter_operator_batches(
    snapshot: Snapshot,
    operator_file: OperatorFile,
    columns: Sequence[str] | None = None,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Stream one subtask's operator state file as record batches."""
    path = snapshot.resolve(operator_file.path)
    pf = _open(path)
    try:
        yield from pf.iter_batches(
            batch_size=batch_rows, columns=list(columns) if columns is not None else None
        )
    except (OSError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{path}: cannot read: {exc}", code="FILE_UNREADABLE") from None


__all__ = [
    "COMPRESSION",
    "DEFAULT_ROW_GROUP_ROWS",
    "WrittenFile",
    "conform_keyed",
    "conform_operator",
    "iter_keyed_batches",
    "iter_operator_batches",
    "read_keyed_file",
    "read_operator_file",
    "write_keyed_file",
    "write_operator_file",
]

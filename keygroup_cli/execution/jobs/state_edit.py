"""``kg write`` and ``kg compact`` compiled into the task model of ``execution.jobs.model``.

One ``KeyedJob`` per edited operator: its read tasks are ``FlinkEditedRead``s, key-group ranges of the old
keyed files that carry their part of the edit (``flink.write.edit.KeyedEdit``, sliced to the range) and
yield the edited rows; under a new maxParallelism they re-key them (Java ``hashCode`` → murmur →
``% maxP'``) and the engine shuffles them to the new subtasks. Its write tasks are ``FlinkKeyedWrite``s, one
per new subtask. An edit pickles, so the Spark engine runs these tasks on its executors as the local engine
runs them here: a write can go with a rescale of maxParallelism in the same pass, on either engine.

``transform`` with an engine's jobs (``plan_transform_job``): each read task (``FlinkTransformRead``)
decodes its key-group range, turns the transformed state's rows into ``kg export``'s batches
(``flink.data.tables.typed_batch``, what ``state_batches`` yields), calls the user's function on each
(``apply_fn``), encodes what it returns with the state's own serializers (``planning.state_edit.write_edit``,
as ``kg write --mode replace`` does) and gives every row the key group of its key; the other states' rows pass
untouched. A changed key may land in another subtask's key group, so the job always shuffles by key group
(maxParallelism unchanged). Each write task (``FlinkTransformWrite``) puts a key group's rows of the other
states first, then the transformed state's in input order (read task, batch, row), which is what the
driver-side transform writes, so both make the same bytes; it refuses two rows for one entry and counts the
rows it wrote per key group (``TransformedKeyedFile``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa

from keygroup_cli.core.errors import (
    ExecutionError,
    InvalidArgumentError,
    KgError,
)
from keygroup_cli.core.javahash import hash_codes
from keygroup_cli.core.keygroups import KeyGroupRange, key_group_range_for_operator_index
from keygroup_cli.core.schema import keyed_schema
from keygroup_cli.execution.jobs.model import KeyedJob, ReadTask, Rows, rekeyed
from keygroup_cli.execution.jobs.savepoint import STAGE, FlinkKeyedRead, FlinkKeyedWrite
from keygroup_cli.flink import (
    KeyedEdit,
    KeyedReadTask,
    KeyedStream,
    OperatorState,
    StateCodecs,
    WrittenKeyedFile,
    edited_batches,
    header_codecs,
    read_keyed_task,
    read_tasks,
    state_schema,
    typed_batch,
    write_keyed_task,
)
from keygroup_cli.planning.state_edit import WriteRequest, write_edit

#: What ``transform`` calls on each batch of the state in ``kg export``'s schema.
TransformFn = Callable[[pa.RecordBatch], "pa.RecordBatch | pa.Table | None"]


def _task_fields(task: KeyedReadTask) -> dict[str, Any]:
    """Return ``task``'s fields by name: a read task of this module is the same task with one more."""
    return {f.name: getattr(task, f.name) for f in fields(task)}


@dataclass(frozen=True, slots=True)
class FlinkEditedRead(FlinkKeyedRead):
    """A key-group range of one keyed file with its part of an edit: yields the edited rows."""

    edit: KeyedEdit | None = None

    @classmethod
    def edited(cls, task: KeyedReadTask, edit: KeyedEdit) -> FlinkEditedRead:
        """Return ``task`` carrying ``edit`` (already sliced to the task's key groups)."""
        return cls(**_task_fields(task), edit=edit)

    def read(self, job: KeyedJob[Any], batch_rows: int) -> Iterator[Rows]:
        """Yield the range's rows, edited, with their new key group under a new maxParallelism.

        Raises:
            InvalidInputError: A block ``kg verify`` rejects, or a key stored in the wrong key group.
        """
        rows: Iterator[Any] = read_keyed_task(self, job.state_names, batch_rows)
        if self.edit is not None:
            assert self.header is not None
            codecs = header_codecs(self.header, f"{self.root}/{self.handle.delegate}")
            rows = edited_batches(rows, self.edit, codecs, job.key_type, job.state_names)
        for table in rows:
            if job.rehash:
                table = rekeyed(table, hash_codes(table.column("key"), job.key_type), job.new_max_parallelism)
            yield table


def plan_edit_job(
    op: OperatorState,
    streams: list[KeyedStream],
    chosen: KeyedStream,
    edit: KeyedEdit,
    root: str,
    output_root: str,
    new_max_parallelism: int,
    slice_edit: Any,
    *,
    pieces: int = 1,
    min_piece_bytes: int = 0,
) -> KeyedJob[WrittenKeyedFile]:
    """Return the job that rewrites ``op``'s keyed files with ``edit``, at ``new_max_parallelism``.

    ``streams`` are the operator's keyed files in key-group order, ``chosen`` the one whose header declares
    every state (the new files carry it); ``slice_edit(edit, key_groups)`` cuts the edit to a read task's
    range (``flink.write.edit.edit_in_range``). The job keeps the operator's parallelism.
    """
    reads = []
    for index, stream in enumerate(streams):
        for task in read_tasks(
            root, stream.handle, op.max_parallelism, index, pieces, stream.raw_header, min_piece_bytes
        ):
            span = KeyGroupRange(task.key_groups.start, task.key_groups.end)
            reads.append(FlinkEditedRead.edited(task, slice_edit(edit, span)))
    names = tuple(s.name for s in chosen.layout.states)
    writes = [
        FlinkKeyedWrite(
            output_root,
            str(uuid.uuid4()),
            j,
            chosen.raw_header,
            new_max_parallelism,
            key_group_range_for_operator_index(new_max_parallelism, op.parallelism, j),
            chosen.header.compressed,
        )
        for j in range(op.parallelism)
    ]
    return KeyedJob(
        op.operator_id,
        op.label,
        chosen.layout.codec.key_type,
        names,
        op.max_parallelism,
        new_max_parallelism,
        op.parallelism,
        tuple(reads),
        tuple(writes),
        STAGE,
    )


@dataclass(frozen=True)
class Transform:
    """What a transform's read tasks need: the function and the state's serializers (pickled with the job).

    ``fn`` goes to Spark's executors pickled by Spark's cloudpickle, so a lambda or a closure works.
    """

    #: The operator's label, as errors name it.
    operator: str
    state: str
    fn: TransformFn
    #: The raw header (``KeyedBackendSerializationProxy``) of the first keyed file that declares the state:
    #: its serializers decode and encode the state's rows (``StateCodecs`` do not pickle; a task builds them).
    header: bytes
    #: The layout's key codec (``KeyedLayout.codec``): how a key is written into the composite key.
    key_codec: Any
    max_parallelism: int
    #: The last-access time every written TTL entry gets; None: the row's, else ``now_ms``.
    ttl_timestamp: int | None
    #: "Now" for TTL entries without a last-access time: decided once, on the driver.
    now_ms: int

    def codecs(self) -> StateCodecs:
        """Return the state's serializers, from ``header``.

        Raises:
            InvalidInputError: The header does not parse.
        """
        return header_codecs(self.header, f"operator {self.operator!r}")[self.state]

    def encoded(self, data: pa.Table, key_type: str, codecs: StateCodecs) -> pa.Table:
        """Return ``data`` (what ``fn`` returned) encoded as ``kg write --mode replace`` encodes its data.

        kg's keyed rows with ``state`` as text, each in its key's key group, stably sorted by key group.

        Raises:
            InvalidArgumentError: Columns not the export's, a value that does not fit its type
                (``ValueNotEncodable``), two rows for one entry.
            UnsupportedFormatError: A column kg cannot encode (``NotEncodable``, ``TYPE_NOT_ENCODABLE``).
        """
        request = WriteRequest(self.operator, self.state, "replace", data, self.ttl_timestamp)
        schema = state_schema(codecs)
        edit = write_edit(
            request, codecs, self.key_codec, key_type, self.max_parallelism, schema, self.now_ms
        )
        assert edit.inserts is not None
        return edit.inserts


def apply_fn(fn: TransformFn, batch: pa.RecordBatch) -> pa.Table | None:
    """Return what ``fn`` makes of ``batch`` as a table (None: it dropped the batch).

    Raises:
        ExecutionError: ``fn`` raised (``TRANSFORM_FN_FAILED``, exit 5), said in one line: its exception's
            type and first line. A kg error it raised passes as it is.
        InvalidArgumentError: ``fn`` returned something else than Arrow data (``TRANSFORM_RESULT``).
    """
    try:
        result = fn(batch)
    except KgError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's function may raise anything
        lines = str(exc).strip().splitlines()
        said = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise ExecutionError(f"transform: fn raised {said[:300]}", code="TRANSFORM_FN_FAILED") from exc
    if result is None:
        return None
    if isinstance(result, pa.RecordBatch):
        return pa.Table.from_batches([result])
    if isinstance(result, pa.Table):
        return result
    raise InvalidArgumentError(
        f"transform: fn returned {type(result).__name__}, not a pyarrow RecordBatch or Table",
        code="TRANSFORM_RESULT",
    )


def _state_ids(table: pa.Table) -> np.ndarray:
    """Return each row's index into the ``state`` dictionary (the job's ``state_names``)."""
    state = table.column("state").combine_chunks()
    return np.asarray(state.indices.to_numpy(zero_copy_only=False), dtype=np.int32)


def _keyed_rows(inserts: pa.Table, schema: pa.Schema, state_names: tuple[str, ...], state: str) -> pa.Table:
    """Return encoded rows of ``state`` in the read rows' schema (``state`` a dictionary over the names)."""
    n = inserts.num_rows
    ids = pa.array(np.full(n, state_names.index(state), dtype=np.int32))
    names = pa.DictionaryArray.from_arrays(ids, pa.array(state_names, type=pa.string()))
    columns: list[Any] = []
    for f in schema:
        if f.name == "state":
            columns.append(names)
        elif f.name in inserts.column_names:
            columns.append(inserts.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


@dataclass(frozen=True, slots=True)
class FlinkTransformRead(FlinkKeyedRead):
    """A key-group range of one keyed file whose rows of one state go through ``transform.fn``."""

    transform: Transform | None = None

    @classmethod
    def transforming(cls, task: KeyedReadTask, transform: Transform) -> FlinkTransformRead:
        """Return ``task`` running ``transform``."""
        return cls(**_task_fields(task), transform=transform)

    def read(self, job: KeyedJob[Any], batch_rows: int) -> Iterator[Rows]:
        """Yield the other states' rows as read, and what ``fn`` makes of the state's, each in its key group.

        Raises:
            InvalidInputError: A block ``kg verify`` rejects, or a key stored in the wrong key group.
            ExecutionError: ``fn`` raised (``TRANSFORM_FN_FAILED``).
            InvalidArgumentError, UnsupportedFormatError: What ``fn`` returned cannot be encoded
                (``Transform.encoded``).
        """
        t = self.transform
        assert t is not None
        schema = keyed_schema(job.key_type)
        codecs = t.codecs()
        export = state_schema(codecs)
        target = job.state_names.index(t.state)
        for batch in read_keyed_task(self, job.state_names, batch_rows):
            table = pa.Table.from_batches([batch]).cast(schema)
            mine = _state_ids(table) == target
            if not bool(mine.any()):
                yield table
                continue
            if not bool(mine.all()):
                yield table.filter(pa.array(~mine))
            rows = table.filter(pa.array(mine)).combine_chunks().to_batches()[0]
            result = apply_fn(t.fn, typed_batch(codecs, export, rows))
            if result is None:
                continue
            encoded = t.encoded(result, job.key_type, codecs)
            if encoded.num_rows:
                yield _keyed_rows(encoded, schema, job.state_names, t.state)


@dataclass(frozen=True, slots=True)
class TransformedKeyedFile(WrittenKeyedFile):
    """A keyed file a transform wrote, with the transformed state's rows it holds per key group."""

    #: ``(key group, rows)`` of the transformed state, ascending.
    state_rows: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class FlinkTransformWrite(FlinkKeyedWrite):
    """One subtask's keyed file of a transform: each key group's other states first, then the state's rows.

    That order (the other states' rows as read, then the transformed state's in input order) is the one
    the driver-side transform writes (``edited_batches``: kept rows, then inserted rows), so the bytes are
    the same whichever engine ran ``fn``.
    """

    #: The operator's states, as the rows' ``state`` dictionary holds them.
    state_names: tuple[str, ...] = ()
    #: The transformed state.
    state: str = ""

    def write(self, rows: Iterable[Rows]) -> TransformedKeyedFile:
        """Encode ``rows`` (whole key groups per batch, ascending) into ``root/name``; describe the file.

        Raises:
            InvalidArgumentError: Two rows for one entry of the state (``DATA_DUPLICATE_ENTRY``).
            InvalidInputError: Rows outside the range, unsorted, or of a state the header lacks.
        """
        target = self.state_names.index(self.state)
        counted: dict[int, int] = {}

        def ordered() -> Iterator[pa.Table]:
            for part in rows:
                table = pa.Table.from_batches([part]) if isinstance(part, pa.RecordBatch) else part
                if table.num_rows == 0:
                    continue
                groups = np.asarray(table.column("key_group").to_numpy(), dtype=np.int64)
                mine = _state_ids(table) == target
                order = np.lexsort((mine, groups))  # stable: by key group, the state's rows last
                table, mine, groups = table.take(pa.array(order)), mine[order], groups[order]
                if bool(mine.any()):
                    _require_one_row_per_entry(table.filter(pa.array(mine)), self.state)
                    found, n = np.unique(groups[mine], return_counts=True)
                    for g, c in zip(found.tolist(), n.tolist(), strict=True):
                        counted[g] = counted.get(g, 0) + c
                yield table

        written = write_keyed_task(self, ordered())
        described = {f.name: getattr(written, f.name) for f in fields(written)}
        return TransformedKeyedFile(**described, state_rows=tuple(sorted(counted.items())))


def _require_one_row_per_entry(table: pa.Table, state: str) -> None:
    """Refuse two rows of ``state`` for one entry (key, namespace, user key, timer timestamp).

    A transform's function runs batch by batch, in tasks: rows it makes for one entry in different batches
    meet only here.
    """
    identity = ["key", "namespace", "user_key", "timestamp"]
    counted = table.select(identity).group_by(identity, use_threads=False).aggregate([([], "count_all")])
    many = np.asarray(counted.column("count_all").to_numpy()) > 1
    if bool(many.any()):
        first = int(np.argmax(many))
        n, key = counted.column("count_all")[first].as_py(), counted.column("key")[first].as_py()
        raise InvalidArgumentError(
            f"transform: fn returned {n} rows for one entry of state {state!r} (key {key!r}); a state "
            "holds one row per entry",
            code="DATA_DUPLICATE_ENTRY",
        )


def plan_transform_job(
    op: OperatorState,
    streams: list[KeyedStream],
    chosen: KeyedStream,
    transform: Transform,
    root: str,
    output_root: str,
    *,
    pieces: int = 1,
    min_piece_bytes: int = 0,
) -> KeyedJob[TransformedKeyedFile]:
    """Return the job that rewrites ``op``'s keyed files with ``transform`` run in its read tasks.

    The job keeps parallelism and maxParallelism, and shuffles by key group (``fn`` may move a key to
    another subtask's key group). ``pieces`` and ``min_piece_bytes`` cut each file into read tasks
    (``jobs.savepoint.plan_keyed_jobs``).
    """
    reads: list[ReadTask] = [
        FlinkTransformRead.transforming(task, transform)
        for index, stream in enumerate(streams)
        for task in read_tasks(
            root, stream.handle, op.max_parallelism, index, pieces, stream.raw_header, min_piece_bytes
        )
    ]
    names = tuple(s.name for s in chosen.layout.states)
    writes = [
        FlinkTransformWrite(
            output_root,
            str(uuid.uuid4()),
            j,
            chosen.raw_header,
            op.max_parallelism,
            key_group_range_for_operator_index(op.max_parallelism, op.parallelism, j),
            chosen.header.compressed,
            names,
            transform.state,
        )
        for j in range(op.parallelism)
    ]
    return KeyedJob(
        op.operator_id,
        op.label,
        chosen.layout.codec.key_type,
        names,
        op.max_parallelism,
        op.max_parallelism,
        op.parallelism,
        tuple(reads),
        tuple(writes),
        STAGE,
    )


__all__ = [
    "FlinkEditedRead",
    "FlinkTransformRead",
    "FlinkTransformWrite",
    "Transform",
    "TransformFn",
    "TransformedKeyedFile",
    "apply_fn",
    "plan_edit_job",
    "plan_transform_job",
]

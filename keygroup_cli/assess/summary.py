"""A format-neutral summary of a snapshot's operators, for ``kg inspect`` and ``kg check``.

``summarize(path)`` accepts a Flink savepoint / checkpoint (anything ``flink.find_metadata`` accepts) or a
kg snapshot directory (one with ``_manifest.json``) and returns the same frozen view of both: operators
with identity, parallelism, maxParallelism, whether they have state, their states, and per-subtask
key-group ranges and sizes. The checks in ``assess/restore.py`` judge this view, so they work on either
format.

For Flink input only ``_metadata`` is needed; with ``read_states=True`` the header of each state file is
read too (one bounded read per file, never the whole file) to list state names, kinds and serializers.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keygroup_cli.core.errors import InvalidInputError, KgError, UnsupportedFormatError
from keygroup_cli.flink import (
    SAVEPOINT_KEY_GROUPS_HANDLE,
    ByteStreamHandle,
    CheckpointMetadata,
    FileHandle,
    IncrementalKeyedHandle,
    KeyedHandle,
    KeyedStateHeader,
    KeyGroupsHandle,
    OperatorState,
    OperatorStateHandle,
    PrefixCache,
    RelativeFileHandle,
    SegmentFileHandle,
    SerializerSnapshot,
    StateMetaInfo,
    StreamHandle,
    SubtaskState,
    local_path,
    offsets_finding,
    open_savepoint,
    operator_header_end,
    read_keyed_header,
    read_operator_header,
    read_stream_prefix,
    require_states_declared,
    stream_size,
)
from keygroup_cli.storage import is_remote, location
from keygroup_cli.storage.locations import Location
from keygroup_cli.storage.transfer import in_flight

if TYPE_CHECKING:
    from keygroup_cli.flink import FlinkCheckpoint
    from keygroup_cli.snapshot.model import Operator

#: Largest header prefix kg reads from one state file (headers are a few KiB; this bounds corrupt offsets).
MAX_HEADER_BYTES = 16 * 1024 * 1024

ProgressCallback = Callable[[str, int, int], None]


def operator_label(uid: str | None, name: str | None, operator_id: str) -> str:
    """Return how kg shows an operator, in every command's text and JSON: its uid, else its name, else its id.

    The one rule: ``kg inspect``, ``kg check``, ``kg plan``, ``kg rescale``, ``kg diff``, ``kg get`` and
    ``kg export`` name an operator by this. Its 32-hex id is always beside it in JSON (``operator_id``).
    """
    return uid or name or operator_id


def count_operators(operators: Iterable[Any], with_state: Callable[[Any], bool]) -> tuple[int, int]:
    """Return ``(all operators, those with state)``: how every command counts operators.

    ``with_state`` says whether one operator holds state (``OperatorSummary.has_state``, a plan's
    ``has_state``): any keyed or operator state handle, even one whose state has no element.
    """
    listed = list(operators)
    return len(listed), sum(1 for op in listed if with_state(op))


@dataclass(frozen=True, slots=True)
class StateSummary:
    """A named state: kind (value/list/map/…, timer, operator-split/union/broadcast) and serializer."""

    name: str
    kind: str
    serializer: str | None = None
    known_serializer: bool = True
    #: Elements of an operator list state, summed over subtasks (None for keyed and broadcast state).
    elements: int | None = None
    #: The state's serializer snapshots by role (``VALUE_SERIALIZER``, ``NAMESPACE_SERIALIZER``, …) as its
    #: header records them (Flink only; empty for kg snapshots).
    serializers: tuple[tuple[str, SerializerSnapshot], ...] = ()


@dataclass(frozen=True, slots=True)
class SubtaskSummary:
    """One subtask: its keyed key-group range (None without keyed state) and state sizes."""

    subtask: int
    key_group_start: int | None
    key_group_end: int | None
    keyed_bytes: int
    operator_state_bytes: int
    files: int = 0
    rows: int | None = None
    non_empty_key_groups: int | None = None
    finished: bool = False


@dataclass(frozen=True, slots=True)
class OperatorSummary:
    """One operator, format-neutral: what the checks and ``kg inspect`` need."""

    uid: str | None
    operator_id: str
    name: str | None
    parallelism: int
    max_parallelism: int
    has_state: bool
    has_keyed_state: bool
    states: tuple[StateSummary, ...] | None
    subtasks: tuple[SubtaskSummary, ...]
    key_serializer: str | None = None
    #: The key serializer's snapshot as a keyed header records it (Flink only).
    key_serializer_snapshot: SerializerSnapshot | None = None
    files: int = 0
    coordinator_state_bytes: int = 0
    handle_kind: str | None = None
    #: Rows per key group over the operator's whole key-group range (kg snapshots only).
    key_group_rows: tuple[int, ...] | None = None
    #: The key group ``key_group_rows[0]`` counts.
    key_group_rows_start: int = 0
    fully_finished: bool = False
    #: In-flight data of an unaligned checkpoint (Flink only): recorded bytes of the input-channel and of
    #: the result-subpartition handles over all subtasks, and the number of those handles.
    input_channel_bytes: int = 0
    result_subpartition_bytes: int = 0
    channel_state_handles: int = 0

    @property
    def has_channel_state(self) -> bool:
        """Return whether any subtask holds channel state (Flink restores it; kg never rewrites it)."""
        return self.channel_state_handles > 0

    @property
    def label(self) -> str:
        """Return how every command shows this operator: :func:`operator_label`."""
        return operator_label(self.uid, self.name, self.operator_id)

    @property
    def keyed_bytes(self) -> int:
        """Return the keyed-state bytes over all subtasks."""
        return sum(s.keyed_bytes for s in self.subtasks)

    @property
    def operator_state_bytes(self) -> int:
        """Return the operator-state bytes over all subtasks."""
        return sum(s.operator_state_bytes for s in self.subtasks)


@dataclass(frozen=True, slots=True)
class InputSummary:
    """A snapshot as ``kg inspect`` shows it."""

    format: str
    path: Path | Location
    checkpoint_id: int | None
    operators: tuple[OperatorSummary, ...]
    metadata_version: int | None = None
    snapshot_type: str | None = None
    format_type: str | None = None
    warnings: tuple[str, ...] = ()
    #: The opened savepoint this summary was made from (None for a kg snapshot): a command that reads more
    #: of it (``kg check``'s state-file gate) works on the same object, reading nothing twice.
    savepoint: Any = field(default=None, compare=False, repr=False)


def is_kg_snapshot(path: str | os.PathLike[str]) -> bool:
    """Return whether ``path`` is a kg snapshot directory or its manifest (local or on an object store)."""
    if is_remote(path):
        # Deferred here and below: a kg snapshot's modules load pyarrow, which a savepoint's inspect and
        # check never do (tests/cli/test_inspect.py).
        from keygroup_cli.snapshot.download import is_snapshot_at

        return is_snapshot_at(location(path))
    p = Path(path)
    return (p / "_manifest.json").is_file() or (p.is_file() and p.name == "_manifest.json")


def summarize(
    path: str | os.PathLike[str], *, read_states: bool = True, on_progress: ProgressCallback | None = None
) -> InputSummary:
    """Summarise a Flink savepoint / checkpoint or a kg snapshot.

    Args:
        path: A savepoint or checkpoint path, or a kg snapshot directory.
        read_states: Read state-file headers (Flink) to list states; ``kg check`` does not need them.
        on_progress: Called as ``(stage, done, total)`` while state files are read.

    Raises:
        InvalidInputError: Missing, truncated or corrupt input.
        UnsupportedFormatError: A format version kg does not read.
    """
    if is_kg_snapshot(path):
        from keygroup_cli.snapshot.download import readable_snapshot

        # On an object store only the manifest is fetched: it holds everything a summary shows.
        with readable_snapshot(path, everything=False) as local:
            summary = _summarize_kg(Path(local))
        return summary if local == path else replace(summary, path=_location(path))
    return _summarize_flink(path, read_states, on_progress)


def _location(path: str | os.PathLike[str]) -> Location:
    return location(path)


# -- Flink -------------------------------------------------------------------------------------------------


def _summarize_flink(
    path: str | os.PathLike[str], read_states: bool, on_progress: ProgressCallback | None
) -> InputSummary:
    return _summarize_flink_checkpoint(open_savepoint(path), read_states, on_progress)


def _summarize_flink_checkpoint(
    snapshot: FlinkCheckpoint, read_states: bool, on_progress: ProgressCallback | None
) -> InputSummary:
    metadata = snapshot.metadata
    warnings: list[str] = []
    total = sum(len(o.subtasks) for o in metadata.operators) if read_states else 0
    done = itertools.count(1)

    def tick() -> None:
        step = next(done)
        if on_progress is not None and read_states:
            on_progress("reading state headers", step, total)

    # Prefixes of state files read once for this summary (fetched concurrently first on an object store).
    cache: PrefixCache | None = None
    if read_states:
        cache = {}
        _prefetch_headers(metadata, snapshot.directory, cache)
    operators = tuple(
        _summarize_flink_operator(op, snapshot.directory, cache, warnings, tick) for op in metadata.operators
    )
    props = metadata.properties
    return InputSummary(
        format="flink-savepoint" if snapshot.is_savepoint else "flink-checkpoint",
        path=snapshot.metadata_path,
        checkpoint_id=metadata.checkpoint_id,
        operators=operators,
        metadata_version=metadata.version,
        snapshot_type=None if props is None else props.type_name,
        format_type=None if props is None else props.format_type,
        warnings=tuple(dict.fromkeys(warnings)),
        savepoint=snapshot,
    )


def _summarize_flink_operator(
    op: OperatorState,
    directory: Path | Location,
    cache: PrefixCache | None,
    warnings: list[str],
    tick: Callable[[], None],
) -> OperatorSummary:
    """Summarise one operator of ``_metadata``; with a header ``cache``, list its states from the headers.

    A state file kg reads only from local disk adds a warning instead of its states; ``tick`` runs after
    each subtask.
    """
    files: set[str] = set()
    subtasks = []
    states: dict[str, StateSummary] = {}
    key_serializer: SerializerSnapshot | None = None
    handle_kinds = set()
    for sub in op.subtasks:
        sub_files = _files_of(sub, directory)
        files |= sub_files
        subtasks.append(_summarize_flink_subtask(sub, len(sub_files)))
        if sub.managed_keyed_state is not None:
            handle_kinds.add(_handle_kind(sub.managed_keyed_state))
        if cache is not None and sub.has_state:
            try:
                found_key = _collect_states(sub, directory, states, cache)
            except UnsupportedFormatError as exc:
                if exc.code != "REMOTE_STATE_FILE":
                    raise
                warnings.append(exc.message)
                found_key = None
            key_serializer = key_serializer or found_key
        tick()
    return OperatorSummary(
        uid=op.uid,
        operator_id=op.operator_id,
        name=op.name,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        has_state=op.has_state,
        has_keyed_state=op.has_keyed_state,
        states=tuple(states.values()) if cache is not None else None,
        subtasks=tuple(subtasks),
        key_serializer=None if key_serializer is None else key_serializer.serializer_name,
        key_serializer_snapshot=key_serializer,
        files=len(files),
        coordinator_state_bytes=0 if op.coordinator_state is None else op.coordinator_state.size,
        handle_kind=", ".join(sorted(handle_kinds)) or None,
        fully_finished=op.fully_finished,
        input_channel_bytes=sum(c.size for sub in op.subtasks for c in sub.input_channel_state),
        result_subpartition_bytes=sum(c.size for sub in op.subtasks for c in sub.result_subpartition_state),
        channel_state_handles=sum(
            len(sub.input_channel_state) + len(sub.result_subpartition_state) for sub in op.subtasks
        ),
    )


def _summarize_flink_subtask(sub: SubtaskState, files: int) -> SubtaskSummary:
    """Summarise one subtask: its keyed key-group range and non-empty key groups, and its state sizes."""
    keyed = sub.managed_keyed_state
    start = end = non_empty = None
    if keyed is not None:
        start, end = keyed.key_group_start, keyed.key_group_end
        if isinstance(keyed, KeyGroupsHandle):
            non_empty = sum(1 for o in keyed.offsets if o)
    return SubtaskSummary(
        sub.index,
        start,
        end,
        sub.keyed_bytes,
        sub.operator_state_bytes,
        files,
        non_empty_key_groups=non_empty,
        finished=sub.finished,
    )


def _handle_kind(handle: object) -> str:
    if isinstance(handle, KeyGroupsHandle):
        return "canonical" if handle.tag == SAVEPOINT_KEY_GROUPS_HANDLE else "heap-checkpoint"
    if isinstance(handle, IncrementalKeyedHandle):
        return "rocksdb-native"
    return "changelog"


def _files_of(sub: object, directory: Path | Location) -> set[str]:
    """Return the distinct files a subtask's handles point at (inline state counts as none)."""
    assert isinstance(sub, SubtaskState)
    streams: list[StreamHandle | None] = []
    for op_handle in (sub.managed_operator_state, sub.raw_operator_state):
        if op_handle is not None:
            streams.append(op_handle.delegate)
    for keyed in (sub.managed_keyed_state, sub.raw_keyed_state):
        if isinstance(keyed, KeyGroupsHandle):
            streams.append(keyed.delegate)
        elif isinstance(keyed, IncrementalKeyedHandle):
            streams.append(keyed.metadata)
            streams.extend(f.handle for f in keyed.shared + keyed.private)
    streams.extend(c.delegate for c in (*sub.input_channel_state, *sub.result_subpartition_state))
    names = set()
    for stream in streams:
        if isinstance(stream, RelativeFileHandle):
            names.add(str(directory / stream.relative_path))
        elif isinstance(stream, (FileHandle, SegmentFileHandle)):
            names.add(stream.path)
    return names


def _prefetch_headers(metadata: object, directory: Path | Location, cache: PrefixCache) -> None:
    """On an object store, fetch every subtask's state-file headers concurrently into ``cache``.

    Round trips dominate there; the summary then reads the same prefixes, in order, from ``cache``, so
    its result is the sequential one. Failures are left for that
    sequential pass to report. Local: nothing to do.
    """
    if not isinstance(directory, Location) or directory.is_local:
        return
    assert isinstance(metadata, CheckpointMetadata)
    subtasks = [sub for op in metadata.operators for sub in op.subtasks if sub.has_state]

    def read(sub: object) -> None:
        with contextlib.suppress(KgError):
            _collect_states(sub, directory, {}, cache)

    for _ in in_flight(read, subtasks, ordered=False):
        pass


def _collect_states(
    sub: object, directory: Path | Location, states: dict[str, StateSummary], cache: PrefixCache
) -> SerializerSnapshot | None:
    """Add the states named in a subtask's state-file headers to ``states``; return the key serializer."""
    assert isinstance(sub, SubtaskState)
    key_serializer = None
    header = _keyed_header(sub.managed_keyed_state, directory, cache)
    if header is not None:
        key_serializer = header.key_serializer
        for info in header.states or ():
            if info.name not in states:
                value = info.serializer("VALUE_SERIALIZER")
                states[info.name] = StateSummary(
                    info.name,
                    info.kind,
                    None if value is None else value.serializer_name,
                    value is None or value.known,
                    serializers=info.serializers,
                )
    for op_handle in (sub.managed_operator_state, sub.raw_operator_state):
        if op_handle is not None:
            _collect_operator_states(op_handle, directory, states, cache)
    return key_serializer


def _keyed_header(
    keyed: KeyedHandle | None, directory: Path | Location, cache: PrefixCache
) -> KeyedStateHeader | None:
    """Read the keyed-state header of a canonical file or of a RocksDB metadata file; None for others."""
    if isinstance(keyed, KeyGroupsHandle) and keyed.delegate is not None:
        source = _describe(keyed.delegate, directory)
        _require_offsets_inside(keyed, source)
        first = min((o for o in keyed.offsets if o > 0), default=keyed.size)
        data = read_stream_prefix(keyed.delegate, directory, min(first, MAX_HEADER_BYTES), cache)
        return read_keyed_header(data, source, first if first <= MAX_HEADER_BYTES else None)
    if isinstance(keyed, IncrementalKeyedHandle) and keyed.metadata is not None:
        # The RocksDB metadata file is exactly one KeyedBackendSerializationProxy.
        size = min(stream_size(keyed.metadata), MAX_HEADER_BYTES)
        data = read_stream_prefix(keyed.metadata, directory, size, cache)
        return read_keyed_header(data, _describe(keyed.metadata, directory), len(data))
    return None


def _collect_operator_states(
    op_handle: OperatorStateHandle,
    directory: Path | Location,
    states: dict[str, StateSummary],
    cache: PrefixCache,
) -> None:
    """Add one operator-state handle's states to ``states``, summing list states' elements over subtasks."""
    infos = _operator_state_infos(op_handle, directory, cache)
    for entry in op_handle.states:
        kind = ("operator-split", "operator-union", "operator-broadcast")[entry.mode]
        meta = infos.get(entry.name)
        value = None if meta is None else meta.serializer("VALUE_SERIALIZER")
        previous = states.get(entry.name)
        elements = None if entry.mode == 2 else len(entry.offsets)
        if previous is not None and previous.elements is not None and elements is not None:
            elements += previous.elements
        states[entry.name] = StateSummary(
            entry.name,
            kind,
            (previous.serializer if previous else None) or (None if value is None else value.serializer_name),
            value is None or value.known,
            elements,
            (previous.serializers if previous else ()) or (() if meta is None else meta.serializers),
        )


def _operator_state_infos(
    op_handle: OperatorStateHandle, directory: Path | Location, cache: PrefixCache
) -> dict[str, StateMetaInfo]:
    """Read an operator-state file's header; return its states by name (none for an empty handle)."""
    if op_handle.delegate is None:
        return {}
    # Before the size decides whether a header is read: a negative recorded size skipped it.
    _require_offsets_inside(op_handle, _describe(op_handle.delegate, directory))
    if op_handle.size <= 0:
        return {}
    offsets = [o for e in op_handle.states for o in e.offsets]
    # Read through the first bytes of the last element: a broadcast state's map size sits there.
    wanted = max(offsets) + 4 if offsets else op_handle.size
    limit = min(op_handle.size, wanted, MAX_HEADER_BYTES)
    data = read_stream_prefix(op_handle.delegate, directory, limit, cache)
    end = operator_header_end(data, offsets, op_handle.size) if limit == wanted else None
    op_header = read_operator_header(data, _describe(op_handle.delegate, directory), end)
    if end is not None:
        # Names and modes must be the header's: a rescale redistributes by the mode in _metadata.
        require_states_declared(op_handle, op_header, _describe(op_handle.delegate, directory))
    return {i.name: i for i in (op_header.states or ()) + (op_header.broadcast_states or ())}


def _require_offsets_inside(handle: Any, source: str) -> None:
    """Refuse a key-group or element offset outside the size its handle records (it sizes the reads here).

    Raises:
        InvalidInputError: ``FLINK_KEY_GROUP_OFFSETS`` or ``FLINK_OPERATOR_STATE_CORRUPT``, worded as
            ``kg check`` and ``kg verify`` word them.
    """
    outside = offsets_finding(handle, handle.size, source, source)
    if outside is not None:
        raise InvalidInputError(outside.message, code=outside.code)


def _describe(handle: object, directory: Path | Location) -> str:
    if isinstance(handle, ByteStreamHandle):
        return f"{directory / '_metadata'} (inline state {handle.handle_name or ''})".replace(" )", ")")
    try:
        path = local_path(handle, directory)  # type: ignore[arg-type]
    except KgError:
        path = None
    return str(path) if path is not None else str(handle)


# -- kg snapshots ------------------------------------------------------------------------------------------


def _summarize_kg(path: Path) -> InputSummary:
    from keygroup_cli.snapshot import open_snapshot

    snapshot = open_snapshot(path)
    manifest = snapshot.manifest
    operators = []
    for op in manifest.operators:
        subtasks = _kg_subtasks(op)
        key_group_rows: tuple[int, ...] | None = None
        ordered_files = sorted(op.keyed_files, key=lambda f: f.key_group_start)
        if ordered_files:
            key_group_rows = tuple(r for kf in ordered_files for r in kf.key_group_rows)
        operators.append(
            OperatorSummary(
                uid=op.uid,
                operator_id=op.operator_id,
                name=op.name,
                parallelism=op.parallelism,
                max_parallelism=op.max_parallelism,
                has_state=bool(op.keyed_files or op.operator_files),
                has_keyed_state=bool(op.keyed_files),
                states=tuple(StateSummary(s.name, s.kind) for s in op.states),
                subtasks=subtasks,
                key_serializer=op.key_type,
                files=len(op.keyed_files) + len(op.operator_files),
                key_group_rows=key_group_rows,
                key_group_rows_start=ordered_files[0].key_group_start if ordered_files else 0,
            )
        )
    origin = manifest.origin
    return InputSummary(
        format="kg-snapshot",
        path=snapshot.path,
        checkpoint_id=manifest.snapshot_id,
        operators=tuple(operators),
        snapshot_type=str(origin.get("format")) if origin.get("format") else None,
    )


def _kg_subtasks(op: Operator) -> tuple[SubtaskSummary, ...]:
    """Return each subtask of a kg snapshot's operator as its manifest records it: files, bytes, rows."""
    by_subtask: dict[int, dict[str, int | None]] = {}
    for kf in op.keyed_files:
        entry = by_subtask.setdefault(kf.subtask, _empty_entry())
        entry["start"], entry["end"] = kf.key_group_start, kf.key_group_end
        entry["keyed_bytes"] = (entry["keyed_bytes"] or 0) + kf.bytes
        entry["rows"] = (entry["rows"] or 0) + kf.rows
        entry["files"] = (entry["files"] or 0) + 1
        entry["non_empty"] = (entry["non_empty"] or 0) + sum(1 for r in kf.key_group_rows if r)
    for of in op.operator_files:
        entry = by_subtask.setdefault(of.subtask, _empty_entry())
        entry["operator_bytes"] = (entry["operator_bytes"] or 0) + of.bytes
        entry["rows"] = (entry["rows"] or 0) + of.rows
        entry["files"] = (entry["files"] or 0) + 1
    return tuple(
        SubtaskSummary(
            subtask=i,
            key_group_start=by_subtask.get(i, {}).get("start"),
            key_group_end=by_subtask.get(i, {}).get("end"),
            keyed_bytes=by_subtask.get(i, {}).get("keyed_bytes") or 0,
            operator_state_bytes=by_subtask.get(i, {}).get("operator_bytes") or 0,
            files=by_subtask.get(i, {}).get("files") or 0,
            rows=by_subtask.get(i, {}).get("rows") or 0,
            non_empty_key_groups=by_subtask.get(i, {}).get("non_empty"),
        )
        for i in range(op.parallelism)
    )


def _empty_entry() -> dict[str, int | None]:
    return {
        "start": None,
        "end": None,
        "keyed_bytes": 0,
        "operator_bytes": 0,
        "rows": 0,
        "files": 0,
        "non_empty": None,
    }


@dataclass(frozen=True, slots=True)
class KeyGroupHistogram:
    """Rows per key group: min / median / max and the hottest key groups."""

    key_groups: int
    min_rows: int
    median_rows: float
    max_rows: int
    hottest: tuple[tuple[int, int], ...]


def key_group_histogram(operator: OperatorSummary, top: int = 5) -> KeyGroupHistogram | None:
    """Return the per-key-group row histogram of an operator, if its rows per key group are known."""
    rows = operator.key_group_rows
    if not rows:
        return None
    ordered = sorted(rows)
    n = len(ordered)
    median = float(ordered[n // 2]) if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    first = operator.key_group_rows_start
    hottest = sorted(enumerate(rows, start=first), key=lambda kv: (-kv[1], kv[0]))[:top]
    return KeyGroupHistogram(n, ordered[0], median, ordered[-1], tuple((kg, r) for kg, r in hottest if r > 0))


def summary_document(summary: InputSummary, typed: str | None = None) -> dict[str, Any]:
    """Return the ``kg inspect --json`` document (without ``schema_version`` / ``command``).

    ``typed`` is the input as the user typed it (``input``); by default the path that was read.
    """
    operators = []
    for op in summary.operators:
        document: dict[str, Any] = {
            "uid": op.uid,
            "name": op.name,
            "operator_id": op.operator_id,
            "parallelism": op.parallelism,
            "max_parallelism": op.max_parallelism,
            "has_state": op.has_state,
            "has_keyed_state": op.has_keyed_state,
            "keyed_file_bytes": op.keyed_bytes,
            "operator_state_bytes": op.operator_state_bytes,
            "files": op.files,
            "key_serializer": op.key_serializer,
            "handle_kind": op.handle_kind,
            "coordinator_state_bytes": op.coordinator_state_bytes,
            "fully_finished": op.fully_finished,
            "input_channel_bytes": op.input_channel_bytes,
            "result_subpartition_bytes": op.result_subpartition_bytes,
            "states_known": op.states is not None,
            "states": [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "serializer": s.serializer,
                    "serializer_known": s.known_serializer,
                    "elements": s.elements,
                }
                for s in op.states or ()
            ],
            "subtasks": [_subtask_document(t, summary.format) for t in op.subtasks],
        }
        histogram = key_group_histogram(op)
        if histogram is not None:
            document["rows"] = sum(op.key_group_rows or ())
            document["key_group_histogram"] = {
                "key_groups": histogram.key_groups,
                "min_rows": histogram.min_rows,
                "median_rows": histogram.median_rows,
                "max_rows": histogram.max_rows,
                "hottest": [{"key_group": kg, "rows": rows} for kg, rows in histogram.hottest],
            }
        operators.append(document)
    return {
        "input": str(summary.path) if typed is None else typed,
        "input_format": summary.format,
        "checkpoint_id": summary.checkpoint_id,
        "metadata_version": summary.metadata_version,
        "snapshot_type": summary.snapshot_type,
        "format_type": summary.format_type,
        "warnings": list(summary.warnings),
        "operators": operators,
    }


def _subtask_document(subtask: SubtaskSummary, fmt: str) -> dict[str, Any]:
    document: dict[str, Any] = {
        "subtask": subtask.subtask,
        "key_group_start": subtask.key_group_start,
        "key_group_end": subtask.key_group_end,
        "keyed_file_bytes": subtask.keyed_bytes,
        "operator_state_bytes": subtask.operator_state_bytes,
        "files": subtask.files,
        "non_empty_key_groups": subtask.non_empty_key_groups,
        "finished": subtask.finished,
    }
    if fmt == "kg-snapshot":
        document["rows"] = subtask.rows
    return document

"""Read and write ``_manifest.json``, the commit point of a kg snapshot, with format-version dispatch.

``parse_manifest`` turns JSON into the frozen model of ``model.py`` and validates its structure (bounds,
key-group ranges, counts, identifiers, paths); ``write_manifest`` serialises the model and commits it by
atomic rename. Unknown additive fields are kept in ``extensions`` and written back unchanged, so an
older kg never strips what a newer one added. An unknown ``format_version`` is refused, never guessed.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.core.javahash import KEY_TYPES
from keygroup_cli.core.keygroups import (
    UPPER_BOUND_MAX_PARALLELISM,
    key_group_range_for_operator_index,
    require_parallelism_in_bounds,
)
from keygroup_cli.snapshot.model import (
    FORMAT_NAME,
    FORMAT_VERSION,
    KEYED_KINDS,
    MANIFEST_NAME,
    OPERATOR_KINDS,
    STATE_KINDS,
    KeyedFile,
    Manifest,
    Operator,
    OperatorFile,
    StateDescriptor,
)
from keygroup_cli.storage.containment import contain, input_roots
from keygroup_cli.storage.staging import fsync_directory

_OPERATOR_ID = re.compile(r"^[0-9a-f]{32}$")
_XXH64 = re.compile(r"^[0-9a-f]{16}$")

_MANIFEST_FIELDS = (
    "format",
    "format_version",
    "snapshot_id",
    "created_by",
    "created_at",
    "origin",
    "operators",
)
_OPERATOR_FIELDS = (
    "uid",
    "operator_id",
    "name",
    "parallelism",
    "max_parallelism",
    "key_type",
    "states",
    "keyed_files",
    "operator_files",
)
_STATE_FIELDS = ("name", "kind")
_KEYED_FILE_FIELDS = (
    "subtask",
    "key_group_start",
    "key_group_end",
    "path",
    "rows",
    "bytes",
    "xxh64",
    "key_group_rows",
)
_OPERATOR_FILE_FIELDS = ("subtask", "path", "rows", "bytes", "xxh64")


# -- Reading -----------------------------------------------------------------------------------------------


def read_manifest(path: Path | str) -> Manifest:
    """Read and validate the manifest file at ``path``.

    Raises:
        InvalidInputError: The file is unreadable, not JSON, or structurally invalid.
        UnsupportedFormatError: Its ``format_version`` is not one kg reads.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: manifest not found", code="MANIFEST_MISSING") from None
    except OSError as exc:
        raise InvalidInputError(
            f"{path}: cannot read manifest: {exc.strerror}", code="MANIFEST_UNREADABLE"
        ) from None
    return parse_manifest(raw, source=str(path))


def parse_manifest(raw: bytes | str, *, source: str = MANIFEST_NAME) -> Manifest:
    """Parse manifest JSON text into a validated ``Manifest``; ``source`` names the file in errors."""
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad JSON, bad UTF-8 and an integer of more than 4,300 digits; RecursionError
        # arrays or objects nested thousands deep.
        raise InvalidInputError(f"{source}: not valid JSON: {exc}", code="MANIFEST_JSON_INVALID") from None
    return manifest_from_dict(document, source=source)


def manifest_from_dict(document: Any, *, source: str = MANIFEST_NAME) -> Manifest:
    """Build a validated ``Manifest`` from decoded JSON, dispatching on ``format_version``."""
    if not isinstance(document, dict):
        raise InvalidInputError(
            f"{source}: the manifest must be a JSON object", code="MANIFEST_FIELD_INVALID"
        )
    if "format" not in document:
        raise InvalidInputError(
            f'{source}: not a kg snapshot manifest (no "format" field)', code="MANIFEST_FIELD_MISSING"
        )
    if document["format"] != FORMAT_NAME:
        raise InvalidInputError(
            f'{source}: "format" is {document["format"]!r}, expected {FORMAT_NAME!r}',
            code="NOT_A_KG_SNAPSHOT",
        )
    version = document.get("format_version")
    parser = _PARSERS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
    if parser is None:
        supported = ", ".join(str(v) for v in sorted(_PARSERS))
        raise UnsupportedFormatError(
            f"{source}: unsupported kg snapshot format_version {version!r} (this kg reads {supported})",
            code="UNSUPPORTED_FORMAT_VERSION",
        )
    manifest = parser(document, source)
    require_valid_manifest(manifest, source=source)
    return manifest


def _parse_v1(document: dict[str, Any], source: str) -> Manifest:
    ctx = _Fields(document, source)
    operators = tuple(
        _parse_operator(item, f"{source}: operators[{i}]") for i, item in enumerate(ctx.f_list("operators"))
    )
    return Manifest(
        snapshot_id=ctx.f_int("snapshot_id"),
        created_by=ctx.f_str("created_by"),
        created_at=ctx.f_str("created_at"),
        origin=ctx.f_object("origin"),
        operators=operators,
        format_version=1,
        extensions=ctx.f_extras(_MANIFEST_FIELDS),
    )


def _parse_operator(item: Any, where: str) -> Operator:
    ctx = _Fields(item, where)
    label = ctx.f_optional_str("uid") or ctx.f_str("operator_id")
    where = f"{where} ({label})"
    ctx = _Fields(item, where)
    return Operator(
        uid=ctx.f_optional_str("uid"),
        operator_id=ctx.f_str("operator_id"),
        name=ctx.f_optional_str("name"),
        parallelism=ctx.f_int("parallelism"),
        max_parallelism=ctx.f_int("max_parallelism"),
        key_type=ctx.f_optional_str("key_type"),
        states=tuple(_parse_state(s, f"{where} states[{i}]") for i, s in enumerate(ctx.f_list("states"))),
        keyed_files=tuple(
            _parse_keyed_file(f, f"{where} keyed_files[{i}]")
            for i, f in enumerate(ctx.f_list("keyed_files", default=[]))
        ),
        operator_files=tuple(
            _parse_operator_file(f, f"{where} operator_files[{i}]")
            for i, f in enumerate(ctx.f_list("operator_files", default=[]))
        ),
        extensions=ctx.f_extras(_OPERATOR_FIELDS),
    )


def _parse_state(item: Any, where: str) -> StateDescriptor:
    ctx = _Fields(item, where)
    return StateDescriptor(
        name=ctx.f_str("name"), kind=ctx.f_str("kind"), extensions=ctx.f_extras(_STATE_FIELDS)
    )


def _parse_keyed_file(item: Any, where: str) -> KeyedFile:
    ctx = _Fields(item, where)
    counts = ctx.f_list("key_group_rows")
    if not all(_is_int(c) and c >= 0 for c in counts):
        raise InvalidInputError(
            f"{where}: key_group_rows must be a list of non-negative 64-bit integers",
            code="MANIFEST_FIELD_INVALID",
        )
    return KeyedFile(
        subtask=ctx.f_int("subtask"),
        key_group_start=ctx.f_int("key_group_start"),
        key_group_end=ctx.f_int("key_group_end"),
        path=ctx.f_str("path"),
        rows=ctx.f_int("rows"),
        bytes=ctx.f_int("bytes"),
        xxh64=ctx.f_str("xxh64"),
        key_group_rows=tuple(counts),
        extensions=ctx.f_extras(_KEYED_FILE_FIELDS),
    )


def _parse_operator_file(item: Any, where: str) -> OperatorFile:
    ctx = _Fields(item, where)
    return OperatorFile(
        subtask=ctx.f_int("subtask"),
        path=ctx.f_str("path"),
        rows=ctx.f_int("rows"),
        bytes=ctx.f_int("bytes"),
        xxh64=ctx.f_str("xxh64"),
        extensions=ctx.f_extras(_OPERATOR_FILE_FIELDS),
    )


_PARSERS: dict[int, Callable[[dict[str, Any], str], Manifest]] = {1: _parse_v1}


#: Every manifest integer is a signed 64-bit value (Parquet's and Arrow's int64): JSON has no bound, and
#: a count beyond it would overflow when a reader puts it into an int64 array.
_INT64 = range(-(2**63), 2**63)


def _is_int(value: Any) -> bool:
    # JSON true/false decode to bool, which is an int subclass in Python; neither is a count.
    return isinstance(value, int) and not isinstance(value, bool) and value in _INT64


class _Fields:
    """Typed access to one JSON object's fields, raising one-line errors that name where they are."""

    def __init__(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise InvalidInputError(f"{where}: expected a JSON object", code="MANIFEST_FIELD_INVALID")
        self.item = item
        self.where = where

    def _get(self, name: str) -> Any:
        if name not in self.item:
            raise InvalidInputError(f"{self.where}: missing field {name!r}", code="MANIFEST_FIELD_MISSING")
        return self.item[name]

    def _invalid(self, name: str, expected: str) -> InvalidInputError:
        return InvalidInputError(
            f"{self.where}: field {name!r} must be {expected}, got {self.item[name]!r}",
            code="MANIFEST_FIELD_INVALID",
        )

    def f_int(self, name: str) -> int:
        value = self._get(name)
        if not _is_int(value):
            raise self._invalid(name, "a 64-bit integer")
        return int(value)

    def f_str(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise self._invalid(name, "a string")
        return value

    def f_optional_str(self, name: str) -> str | None:
        value = self.item.get(name)
        if value is not None and not isinstance(value, str):
            raise self._invalid(name, "a string or null")
        return value

    def f_object(self, name: str) -> dict[str, Any]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise self._invalid(name, "a JSON object")
        return value

    def f_list(self, name: str, default: list[Any] | None = None) -> list[Any]:
        if default is not None and name not in self.item:
            return default
        value = self._get(name)
        if not isinstance(value, list):
            raise self._invalid(name, "a list")
        return value

    def f_extras(self, known: Sequence[str]) -> dict[str, Any]:
        return {k: v for k, v in self.item.items() if k not in known}


# -- Structural validation ---------------------------------------------------------------------------------


def require_valid_manifest(manifest: Manifest, *, source: str = MANIFEST_NAME) -> None:
    """Raise ``InvalidInputError`` naming the first structural problem of ``manifest``.

    Checks what can be checked without reading data files: identifiers, parallelism bounds, that each
    keyed file covers exactly Flink's key-group range for its subtask
    (``computeKeyGroupRangeForOperatorIndex``) and that ranges are disjoint, per-key-group counts, known
    state kinds and key types, and that every path stays inside the snapshot directory.
    """
    seen_ids: set[str] = set()
    seen_uids: set[str] = set()
    seen_paths: set[str] = set()
    for op in manifest.operators:
        where = f"{source}: operator {op.label!r}"
        if not _OPERATOR_ID.match(op.operator_id):
            raise InvalidInputError(
                f"{where}: operator_id {op.operator_id!r} is not 32 lowercase hex characters",
                code="OPERATOR_ID_INVALID",
            )
        if op.operator_id in seen_ids or (op.uid is not None and op.uid in seen_uids):
            raise InvalidInputError(f"{where}: listed twice", code="OPERATOR_DUPLICATE")
        seen_ids.add(op.operator_id)
        if op.uid is not None:
            seen_uids.add(op.uid)
        _require_valid_operator(op, where, seen_paths)


def _require_valid_operator(op: Operator, where: str, seen_paths: set[str]) -> None:
    try:
        require_parallelism_in_bounds(op.max_parallelism, op.parallelism)
    except InvalidArgumentError:
        raise InvalidInputError(
            f"{where}: parallelism {op.parallelism} and max_parallelism {op.max_parallelism} violate "
            f"1 <= parallelism <= max_parallelism <= {UPPER_BOUND_MAX_PARALLELISM}",
            code="PARALLELISM_INVALID",
        ) from None
    _require_valid_states(op, where)
    has_keyed = any(s.kind in KEYED_KINDS for s in op.states)
    if op.key_type is not None and op.key_type not in KEY_TYPES:
        raise InvalidInputError(
            f"{where}: unknown key_type {op.key_type!r} (expected one of {', '.join(KEY_TYPES)})",
            code="KEY_TYPE_UNKNOWN",
        )
    if (has_keyed or op.keyed_files) and op.key_type is None:
        raise InvalidInputError(f"{where}: has keyed state but no key_type", code="MANIFEST_FIELD_MISSING")
    if op.keyed_files and not has_keyed:
        raise InvalidInputError(f"{where}: has keyed files but declares no keyed state", code="STATE_MISSING")
    if op.operator_files and not any(s.kind in OPERATOR_KINDS for s in op.states):
        raise InvalidInputError(
            f"{where}: has operator files but declares no operator state", code="STATE_MISSING"
        )
    _require_valid_keyed_files(op, where)
    for kind, files in (("keyed", op.keyed_files), ("operator", op.operator_files)):
        subtasks: set[int] = set()
        for f in files:
            _require_valid_file(
                f, kind, op.parallelism, f"{where} {kind} file {f.path!r}", subtasks, seen_paths
            )


def _require_valid_states(op: Operator, where: str) -> None:
    names: set[str] = set()
    for state in op.states:
        if state.kind not in STATE_KINDS:
            raise InvalidInputError(
                f"{where}: state {state.name!r} has unknown kind {state.kind!r} (expected one of "
                f"{', '.join(STATE_KINDS)})",
                code="STATE_KIND_UNKNOWN",
            )
        if state.name in names:
            raise InvalidInputError(f"{where}: state {state.name!r} listed twice", code="STATE_DUPLICATE")
        marker = state.extensions.get("replicated")
        if marker is not None and (not isinstance(marker, bool) or state.kind != "operator-union"):
            raise InvalidInputError(
                f"{where}: state {state.name!r}: 'replicated' must be a boolean on an operator-union state",
                code="MANIFEST_FIELD_INVALID",
            )
        names.add(state.name)


def _require_valid_file(
    f: KeyedFile | OperatorFile,
    kind: str,
    parallelism: int,
    file_where: str,
    subtasks: set[int],
    seen_paths: set[str],
) -> None:
    if not 0 <= f.subtask < parallelism:
        raise InvalidInputError(
            f"{file_where}: subtask {f.subtask} is outside 0..{parallelism - 1}", code="SUBTASK_OUT_OF_RANGE"
        )
    if f.subtask in subtasks:
        raise InvalidInputError(
            f"{file_where}: a second {kind} file for subtask {f.subtask}", code="SUBTASK_DUPLICATE"
        )
    subtasks.add(f.subtask)
    checked_relative_path(f.path, where=file_where)
    normalised = posixpath.normpath(f.path)
    if normalised in seen_paths:
        raise InvalidInputError(f"{file_where}: path named twice in the manifest", code="PATH_DUPLICATE")
    seen_paths.add(normalised)
    if f.rows < 0 or f.bytes < 0:
        raise InvalidInputError(f"{file_where}: negative rows or bytes", code="MANIFEST_FIELD_INVALID")
    if not _XXH64.match(f.xxh64):
        raise InvalidInputError(
            f"{file_where}: xxh64 {f.xxh64!r} is not 16 lowercase hex characters",
            code="MANIFEST_FIELD_INVALID",
        )


def _require_valid_keyed_files(op: Operator, where: str) -> None:
    ordered = sorted(op.keyed_files, key=lambda f: (f.key_group_start, f.key_group_end))
    for previous, current in zip(ordered, ordered[1:], strict=False):
        if current.key_group_start <= previous.key_group_end:
            raise InvalidInputError(
                f"{where}: keyed files {previous.path!r} [{previous.key_group_start}, "
                f"{previous.key_group_end}] and {current.path!r} [{current.key_group_start}, "
                f"{current.key_group_end}] overlap",
                code="KEY_GROUP_RANGES_OVERLAP",
            )
    for f in op.keyed_files:
        file_where = f"{where} keyed file {f.path!r}"
        if 0 <= f.subtask < op.parallelism:
            expected = key_group_range_for_operator_index(op.max_parallelism, op.parallelism, f.subtask)
            if (f.key_group_start, f.key_group_end) != (expected.start, expected.end):
                raise InvalidInputError(
                    f"{file_where}: covers key groups [{f.key_group_start}, {f.key_group_end}] but subtask "
                    f"{f.subtask} of parallelism {op.parallelism} (maxParallelism {op.max_parallelism}) owns "
                    f"[{expected.start}, {expected.end}]",
                    code="KEY_GROUP_RANGE_MISMATCH",
                )
        size = f.key_group_end - f.key_group_start + 1
        if len(f.key_group_rows) != size:
            raise InvalidInputError(
                f"{file_where}: key_group_rows has {len(f.key_group_rows)} entries for {size} key groups",
                code="KEY_GROUP_ROWS_INVALID",
            )
        if sum(f.key_group_rows) != f.rows:
            raise InvalidInputError(
                f"{file_where}: key_group_rows sum to {sum(f.key_group_rows)} but rows is {f.rows}",
                code="KEY_GROUP_ROWS_INVALID",
            )


def checked_relative_path(path: str, *, where: str) -> str:
    """Return ``path`` normalised, or raise unless it is relative and stays inside the snapshot directory."""
    if not path or path.startswith("/") or re.match(r"^[A-Za-z]:", path) or "\\" in path or "\0" in path:
        raise InvalidInputError(
            f"{where}: path must be relative with '/' separators, got {path!r}", code="PATH_ESCAPES_SNAPSHOT"
        )
    normalised = posixpath.normpath(path)
    if normalised == ".." or normalised.startswith("../") or normalised in (".", MANIFEST_NAME):
        raise InvalidInputError(
            f"{where}: path {path!r} leaves the snapshot directory", code="PATH_ESCAPES_SNAPSHOT"
        )
    return normalised


def require_paths_inside(directory: Path, manifest: Manifest, *, source: str) -> None:
    """Raise unless every file path, after resolving symlinks, stays inside the snapshot's roots.

    The roots are ``directory`` and those named in ``KG_STATE_ROOTS`` (``storage.containment``); a file
    that is a link leading elsewhere is refused with ``STATE_FILE_OUTSIDE``.
    """
    roots = input_roots(directory)
    for op in manifest.operators:
        files: list[KeyedFile | OperatorFile] = [*op.keyed_files, *op.operator_files]
        for f in files:
            contain(f.path, directory, relative=True, roots=roots)


# -- Writing -----------------------------------------------------------------------------------------------


def manifest_to_dict(manifest: Manifest) -> dict[str, Any]:
    """Return the JSON document of ``manifest``: known fields in contract order, then extensions."""
    return {
        "format": FORMAT_NAME,
        "format_version": manifest.format_version,
        "snapshot_id": manifest.snapshot_id,
        "created_by": manifest.created_by,
        "created_at": manifest.created_at,
        "origin": dict(manifest.origin),
        "operators": [_operator_to_dict(op) for op in manifest.operators],
        **_extras(manifest.extensions, _MANIFEST_FIELDS),
    }


def _operator_to_dict(op: Operator) -> dict[str, Any]:
    return {
        "uid": op.uid,
        "operator_id": op.operator_id,
        "name": op.name,
        "parallelism": op.parallelism,
        "max_parallelism": op.max_parallelism,
        "key_type": op.key_type,
        "states": [
            {"name": s.name, "kind": s.kind, **_extras(s.extensions, _STATE_FIELDS)} for s in op.states
        ],
        "keyed_files": [
            {
                "subtask": f.subtask,
                "key_group_start": f.key_group_start,
                "key_group_end": f.key_group_end,
                "path": f.path,
                "rows": f.rows,
                "bytes": f.bytes,
                "xxh64": f.xxh64,
                "key_group_rows": list(f.key_group_rows),
                **_extras(f.extensions, _KEYED_FILE_FIELDS),
            }
            for f in op.keyed_files
        ],
        "operator_files": [
            {
                "subtask": f.subtask,
                "path": f.path,
                "rows": f.rows,
                "bytes": f.bytes,
                "xxh64": f.xxh64,
                **_extras(f.extensions, _OPERATOR_FILE_FIELDS),
            }
            for f in op.operator_files
        ],
        **_extras(op.extensions, _OPERATOR_FIELDS),
    }


def _extras(extensions: Mapping[str, Any], known: Sequence[str]) -> dict[str, Any]:
    # An extension can never override a contract field: the model's value wins.
    return {k: v for k, v in extensions.items() if k not in known}


def dumps_manifest(manifest: Manifest) -> bytes:
    """Return the canonical UTF-8 bytes of the manifest (2-space indent, trailing newline)."""
    text = json.dumps(manifest_to_dict(manifest), indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def write_manifest(directory: Path | str, manifest: Manifest) -> Path:
    """Validate ``manifest`` and commit it as ``directory/_manifest.json``.

    The JSON goes to a temporary file in the same directory, is fsynced, and is renamed over
    ``_manifest.json``: readers see either no manifest or the complete one, never a torn write.
    """
    directory = Path(directory)
    require_valid_manifest(manifest, source=str(directory / MANIFEST_NAME))
    data = dumps_manifest(manifest)
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        target = directory / MANIFEST_NAME
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_directory(directory)
    return target


__all__ = [
    "FORMAT_VERSION",
    "require_paths_inside",
    "checked_relative_path",
    "dumps_manifest",
    "manifest_from_dict",
    "manifest_to_dict",
    "parse_manifest",
    "read_manifest",
    "require_valid_manifest",
    "write_manifest",
]

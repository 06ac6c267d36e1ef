"""Where keys land: parse keys of a Java type in bulk and compute hash code, key group and subtask.

Everything is vectorised over Arrow/numpy arrays, so a million keys from a file take well under a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.javahash import hash_codes, parse_key
from keygroup_cli.core.keygroups import (
    key_groups_for_hashes,
    operator_indexes_for_key_groups,
    require_parallelism_in_bounds,
)

_ARROW_TYPES = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "boolean": pa.bool_()}


@dataclass(frozen=True, slots=True)
class KeyLocations:
    """Hash code, key group and (with a parallelism) owning subtask of each key, in input order."""

    keys: pa.Array
    key_type: str
    max_parallelism: int
    parallelism: int | None
    hash_codes: npt.NDArray[np.int32]
    key_groups: npt.NDArray[np.int32]
    subtasks: npt.NDArray[np.int32] | None


def split_lines(data: bytes) -> list[bytes]:
    r"""Split a keys file into lines: ``\n`` or ``\r\n`` separated, a final newline ends the last key."""
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if data.find(b"\r") >= 0:
        lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    return lines


def parse_keys(texts: Sequence[str | bytes], key_type: str, *, source: str = "argument") -> pa.Array:
    """Parse keys given as text (command-line arguments or UTF-8 lines) into an Arrow array of the type.

    Raises:
        InvalidArgumentError: A key is not valid UTF-8 or not a value of ``key_type``; the message names
            the first offending key and its position (line number for files).
    """
    raw = pa.array(texts, type=pa.binary() if texts and isinstance(texts[0], bytes) else pa.string())
    try:
        strings = raw.cast(pa.string()) if pa.types.is_binary(raw.type) else raw
    except pa.ArrowInvalid:
        position = next(i for i, t in enumerate(texts) if not _is_utf8(t))
        raise InvalidArgumentError(
            f"{_where(source, position)} is not valid UTF-8", code="KEY_PARSE_ERROR"
        ) from None
    if key_type == "string":
        return strings
    if key_type == "boolean":
        lowered = pc.utf8_lower(pc.utf8_trim_whitespace(strings))
        valid = pc.is_in(lowered, value_set=pa.array(["true", "false"]))
        if not pc.all(valid).as_py():
            position = int(np.flatnonzero(~valid.to_numpy(zero_copy_only=False))[0])
            raise InvalidArgumentError(
                f"{_where(source, position)} is not a boolean key (true/false): {texts[position]!r}",
                code="KEY_PARSE_ERROR",
            )
        return pc.equal(lowered, "true")
    if key_type not in _ARROW_TYPES:
        raise InvalidArgumentError(f"Unknown key type {key_type!r}", code="UNKNOWN_KEY_TYPE")
    try:
        return pc.utf8_trim_whitespace(strings).cast(_ARROW_TYPES[key_type])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        for position, text in enumerate(strings.to_pylist()):
            try:
                parse_key(text, key_type)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(
                    f"{_where(source, position)}: {exc.message}", code="KEY_PARSE_ERROR"
                ) from None
        raise  # pragma: no cover - Arrow refused a value Python accepts


def _is_utf8(text: str | bytes) -> bool:
    if isinstance(text, str):
        return True
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _where(source: str, position: int) -> str:
    return f"{source} line {position + 1}" if source != "argument" else f"key #{position + 1}"


def locate_keys(
    keys: pa.Array, key_type: str, max_parallelism: int, parallelism: int | None = None
) -> KeyLocations:
    """Compute the Java hash code, key group and (optionally) subtask of every key."""
    require_parallelism_in_bounds(max_parallelism, parallelism or 1)
    codes = hash_codes(keys, key_type)
    groups = key_groups_for_hashes(codes, max_parallelism)
    subtasks = (
        None if parallelism is None else operator_indexes_for_key_groups(groups, max_parallelism, parallelism)
    )
    return KeyLocations(keys, key_type, max_parallelism, parallelism, codes, groups, subtasks)

r"""Deterministic synthetic kg snapshots with every state kind, vectorised with numpy and pyarrow.

What is generated depends only on the seed, the operator's uid, key type, number of keys and value
size: parallelism and maxParallelism only decide where rows go. So two snapshots generated with the
same seed at different parallelisms hold the same logical state (``kg diff`` says so), which makes
them ground truth for rescale tests.

Per key (keyed states of every operator):

- ``count`` (value) and ``events`` (list): one row each, VoidNamespace (``b"\x00"``).
- ``seen`` (map): 1-4 rows with distinct 8-byte big-endian user keys.
- ``window-contents`` (value): 0-2 rows (half the keys have none), each in a window namespace
  (16 bytes: window start and end as big-endian longs, as Flink's ``TimeWindow.Serializer`` writes them).
- ``_timer_state/event_window-timers`` (timer): one timer per window, at ``end - 1``, in its namespace.
- ``_timer_state/event_user-timers`` (timer): about half of the keys, VoidNamespace.

Per operator: ``buffer`` (operator-split) elements dealt out in contiguous runs as Flink's round-robin
repartitioner would; ``offsets`` (operator-union) elements likewise; ``rules`` (operator-broadcast)
the same map on every subtask. Values are random bytes of ``value_bytes`` (default 24).
Keys: ``string`` keys are ``user-<n>``, ``long``/``int`` keys are distinct pseudo-random numbers,
``boolean`` keys are ``false``/``true`` (at most 2), ``binary`` keys are 16 random bytes whose key group
is made up (binary keys cannot be hashed like Flink would).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from keygroup_cli import __version__
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.javahash import PRIMITIVE_KEY_TYPES, hash_codes
from keygroup_cli.core.keygroups import (
    default_max_parallelism,
    key_groups_for_hashes,
    operator_id_for_uid,
    require_parallelism_in_bounds,
    subtask_ranges,
)
from keygroup_cli.core.progress import OnProgress
from keygroup_cli.core.schema import keyed_schema
from keygroup_cli.snapshot.model import Manifest, Operator, StateDescriptor
from keygroup_cli.snapshot.parquet import DEFAULT_ROW_GROUP_ROWS
from keygroup_cli.snapshot.writer import SnapshotWriter, snapshot_writer

#: Key types ``kg generate`` makes keys of.
GENERATED_KEY_TYPES = (*PRIMITIVE_KEY_TYPES, "binary")


VOID_NAMESPACE = b"\x00"
WINDOW_SIZE_MS = 60_000
# 2026-01-01T00:00:00Z: a plausible event-time origin for windows and timers.
TIME_BASE_MS = 1_767_225_600_000
DEFAULT_VALUE_BYTES = 24

KEYED_STATES = (
    StateDescriptor("count", "value"),
    StateDescriptor("events", "list"),
    StateDescriptor("seen", "map"),
    StateDescriptor("window-contents", "value"),
    StateDescriptor("_timer_state/event_user-timers", "timer"),
    StateDescriptor("_timer_state/event_window-timers", "timer"),
)
OPERATOR_STATES = (
    StateDescriptor("buffer", "operator-split"),
    StateDescriptor("offsets", "operator-union"),
    StateDescriptor("rules", "operator-broadcast"),
)
_KEYED_NAMES = [s.name for s in KEYED_STATES]
_STATE_CODE = {name: i for i, name in enumerate(_KEYED_NAMES)}

_SPLIT_ELEMENTS = 10
_UNION_ELEMENTS = 3
_BROADCAST_ENTRIES = 4


@dataclass(frozen=True, slots=True)
class SyntheticOperator:
    """One operator to generate: uid, key type, number of distinct keys, parallelism and maxParallelism."""

    uid: str
    key_type: str
    keys: int
    parallelism: int
    max_parallelism: int

    def require_valid(self) -> None:
        """Raise ``InvalidArgumentError`` unless the operator can be generated."""
        if not self.uid:
            raise InvalidArgumentError("operator uid must not be empty", code="INVALID_OPERATOR_SPEC")
        if self.key_type not in GENERATED_KEY_TYPES:
            raise InvalidArgumentError(
                f"operator {self.uid!r}: unknown key type {self.key_type!r} (expected one of "
                f"{', '.join(GENERATED_KEY_TYPES)})",
                code="UNKNOWN_KEY_TYPE",
            )
        require_parallelism_in_bounds(self.max_parallelism, self.parallelism)
        limit = {"boolean": 2, "int": 1 << 32}.get(self.key_type, 1 << 62)
        if not 0 <= self.keys <= limit:
            raise InvalidArgumentError(
                f"operator {self.uid!r}: {self.keys} keys of type {self.key_type} (must be 0..{limit})",
                code="INVALID_OPERATOR_SPEC",
            )


def parse_operator_spec(
    text: str,
    *,
    key_type: str = "string",
    keys: int = 1000,
    parallelism: int = 1,
    max_parallelism: int | None = None,
) -> SyntheticOperator:
    """Parse ``UID[:KEY_TYPE[:KEYS[:PARALLELISM[:MAX_PARALLELISM]]]]``; empty fields take the defaults.

    ``max_parallelism`` defaults to Flink's default for the parallelism (``computeDefaultMaxParallelism``).

    Raises:
        InvalidArgumentError: A field is not a number, or the resulting operator is invalid.
    """
    fields = text.split(":")
    if len(fields) > 5:
        raise InvalidArgumentError(
            f"operator spec {text!r} has {len(fields)} fields; expected UID[:TYPE[:KEYS[:P[:MAXP]]]]",
            code="INVALID_OPERATOR_SPEC",
        )
    fields += [""] * (5 - len(fields))
    uid, type_text, keys_text, p_text, max_text = fields

    def number(value: str, default: int | None, what: str) -> int | None:
        if not value:
            return default
        try:
            return int(value)
        except ValueError:
            raise InvalidArgumentError(
                f"operator spec {text!r}: {what} {value!r} is not an integer", code="INVALID_OPERATOR_SPEC"
            ) from None

    p = number(p_text, parallelism, "parallelism")
    assert p is not None
    max_p = number(max_text, max_parallelism, "max parallelism")
    spec = SyntheticOperator(
        uid=uid,
        key_type=type_text or key_type,
        keys=number(keys_text, keys, "keys") or 0,
        parallelism=p,
        max_parallelism=max_p if max_p is not None else default_max_parallelism(max(p, 1)),
    )
    spec.require_valid()
    return spec


def generate_snapshot(
    dest: Path | str,
    operators: Sequence[SyntheticOperator],
    *,
    seed: int = 0,
    value_bytes: int = DEFAULT_VALUE_BYTES,
    snapshot_id: int = 1,
    created_at: str | None = None,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    on_progress: OnProgress | None = None,
) -> Manifest:
    """Generate a kg snapshot at ``dest`` (staged, committed by atomic rename) and return its manifest.

    Raises:
        InvalidArgumentError: Bad operator specs, duplicate uids, a negative seed, or ``dest`` exists.
    """
    _require_generatable(operators, seed, value_bytes)
    created_at = created_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    total = sum(op.parallelism for op in operators)
    done = 0

    def written_subtask() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress("generate", done, total)

    with snapshot_writer(dest, row_group_rows=row_group_rows) as writer:
        entries = [
            _write_operator(writer, spec, seed=seed, value_bytes=value_bytes, written=written_subtask)
            for spec in operators
        ]
        manifest = Manifest(
            snapshot_id=snapshot_id,
            created_by=f"kg {__version__}",
            created_at=created_at,
            origin={"kind": "generated", "seed": seed, "value_bytes": value_bytes},
            operators=tuple(entries),
        )
        writer.commit(manifest)
    return manifest


def _require_generatable(operators: Sequence[SyntheticOperator], seed: int, value_bytes: int) -> None:
    """Refuse a generate request kg cannot honour.

    Raises:
        InvalidArgumentError: No operator, bad operator specs, duplicate uids, a negative seed or value size.
    """
    if not operators:
        raise InvalidArgumentError("give at least one operator", code="INVALID_OPERATOR_SPEC")
    if seed < 0:
        raise InvalidArgumentError(f"seed must be >= 0, got {seed}", code="INVALID_SEED")
    if value_bytes < 1:
        raise InvalidArgumentError(
            f"value size must be >= 1 byte, got {value_bytes}", code="INVALID_VALUE_SIZE"
        )
    for op in operators:
        op.require_valid()
    uids = [op.uid for op in operators]
    if len(set(uids)) != len(uids):
        raise InvalidArgumentError(f"operator uids must be unique: {uids}", code="INVALID_OPERATOR_SPEC")


def _write_operator(
    writer: SnapshotWriter,
    spec: SyntheticOperator,
    *,
    seed: int,
    value_bytes: int,
    written: Callable[[], None],
) -> Operator:
    """Write one operator's keyed and operator-state files, subtask by subtask; return its manifest entry."""
    operator_id = operator_id_for_uid(spec.uid)
    directory = writer.operator_dir(spec.uid, operator_id)
    rows = synthetic_keyed_rows(spec, seed=seed, value_bytes=value_bytes)
    keyed_files = []
    operator_files = []
    ranges = subtask_ranges(spec.max_parallelism, spec.parallelism)
    kg = rows.column("key_group").to_numpy()
    bounds = np.searchsorted(kg, [r.start for r in ranges] + [spec.max_parallelism], side="left")
    operator_rows = synthetic_operator_rows(spec, seed=seed, value_bytes=value_bytes)
    for subtask, key_groups in enumerate(ranges):
        lo, hi = int(bounds[subtask]), int(bounds[subtask + 1])
        if hi > lo:
            keyed_files.append(
                writer.write_keyed(
                    directory,
                    subtask,
                    rows.slice(lo, hi - lo),
                    key_type=spec.key_type,
                    key_groups=key_groups,
                    state_names=_KEYED_NAMES,
                )
            )
        operator_files.append(writer.write_operator(directory, subtask, operator_rows[subtask]))
        written()
    return Operator(
        uid=spec.uid,
        operator_id=operator_id,
        name=spec.uid,
        parallelism=spec.parallelism,
        max_parallelism=spec.max_parallelism,
        key_type=spec.key_type,
        states=KEYED_STATES + OPERATOR_STATES,
        keyed_files=tuple(keyed_files),
        operator_files=tuple(operator_files),
    )


# -- Keyed rows --------------------------------------------------------------------------------------------


def _rng(seed: int, uid: str, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(uid.encode("utf-8")), stream])


def _splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    # SplitMix64's finaliser: a bijection on 64-bit words, so distinct inputs give distinct keys.
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        result: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(31))
    return result


def _fmix32(x: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    # MurmurHash3's fmix32: a bijection on 32-bit words.
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x85EBCA6B)
        x = x ^ (x >> np.uint32(13))
        x = x * np.uint32(0xC2B2AE35)
        result: npt.NDArray[np.uint32] = x ^ (x >> np.uint32(16))
    return result


def synthetic_keys(spec: SyntheticOperator, seed: int) -> tuple[pa.Array, npt.NDArray[np.int32]]:
    """Return the operator's distinct keys (Arrow, in the key type) and each key's key group."""
    n = spec.keys
    salt = np.uint64((seed << 32) ^ zlib.crc32(spec.uid.encode("utf-8")))
    with np.errstate(over="ignore"):
        mixed = _splitmix64(np.arange(n, dtype=np.uint64) + salt)
    if spec.key_type == "string":
        digits = pa.array(mixed >> np.uint64(12)).cast(pa.string())
        keys: pa.Array = pc.binary_join_element_wise("user-", digits, "")
    elif spec.key_type == "long":
        keys = pa.array(mixed.view(np.int64))
    elif spec.key_type == "int":
        with np.errstate(over="ignore"):
            base = np.arange(n, dtype=np.uint64).astype(np.uint32) + np.uint32(int(salt) & 0xFFFFFFFF)
        keys = pa.array(_fmix32(base).view(np.int32))
    elif spec.key_type == "boolean":
        keys = pa.array([False, True][:n], pa.bool_())
    else:
        second = _splitmix64(mixed)
        data = np.stack([mixed, second], axis=1).astype(">u8").tobytes()
        keys = _binary(np.full(n, 16, dtype=np.int64), data)
        # Opaque keys have no Java hashCode; any deterministic spread will do.
        codes = (mixed & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)
        return keys, key_groups_for_hashes(codes, spec.max_parallelism)
    return keys, key_groups_for_keys(keys, spec.key_type, spec.max_parallelism)


def key_groups_for_keys(keys: pa.Array, key_type: str, max_parallelism: int) -> npt.NDArray[np.int32]:
    """Return Flink's key group of every key: ``murmurHash(key.hashCode()) % maxParallelism``, vectorised."""
    return key_groups_for_hashes(hash_codes(keys, key_type), max_parallelism)


def _binary(
    widths: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8] | bytes,
    valid: npt.NDArray[np.bool_] | None = None,
) -> pa.Array:
    """Return a binary array from per-row widths and the concatenated bytes; ``valid`` marks non-nulls."""
    n = widths.size
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(widths, out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets.astype(np.int32).tobytes()), pa.py_buffer(bytes(data))]
    if valid is None:
        return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=0)
    buffers[0] = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=int(n - np.count_nonzero(valid)))


def _counter_bytes(counters: npt.NDArray[np.uint64], width: int, salt: int) -> npt.NDArray[np.uint8]:
    """Return ``width`` pseudo-random bytes per counter: a pure function of (counter, salt)."""
    words = -(-width // 8)
    with np.errstate(over="ignore"):
        inputs = counters[:, None] * np.uint64(words) + np.arange(words, dtype=np.uint64) + np.uint64(salt)
    mixed = _splitmix64(inputs.ravel()).view(np.uint8).reshape(counters.size, words * 8)
    return np.ascontiguousarray(mixed[:, :width])


def synthetic_keyed_rows(
    spec: SyntheticOperator, *, seed: int, value_bytes: int = DEFAULT_VALUE_BYTES
) -> pa.Table:
    """Return all keyed rows of the operator in the keyed schema, sorted by key group (then key, state).

    Rows are laid out directly in sorted order (a counting sort by key): each row's content is a pure
    function of its key and its place among that key's rows, never of its position in the file, so it
    does not change with parallelism or maxParallelism.
    """
    keys, key_group_of_key = synthetic_keys(spec, seed)
    n = spec.keys
    rng = _rng(seed, spec.uid, 0)
    map_entries = rng.integers(1, 5, n)
    windows = np.maximum(rng.integers(0, 4, n) - 1, 0)
    has_timer = rng.random(n) < 0.5
    timer_at = TIME_BASE_MS + rng.integers(0, 3_600_000, n)
    one = np.ones(n, dtype=np.int64)
    # Rows per key of each keyed state, in KEYED_STATES order.
    per_key = [one, one, map_entries, windows, has_timer.astype(np.int64), windows]
    row_key, row_state, row_ordinal = _sorted_rows(per_key, key_group_of_key)
    total = row_key.size

    window_code, window_timer_code = (
        _STATE_CODE["window-contents"],
        _STATE_CODE["_timer_state/event_window-timers"],
    )
    user_timer_code, map_code = _STATE_CODE["_timer_state/event_user-timers"], _STATE_CODE["seen"]
    in_window = (row_state == window_code) | (row_state == window_timer_code)
    is_timer = (row_state == user_timer_code) | (row_state == window_timer_code)
    is_map = row_state == map_code

    ns_widths, ns_data = _namespaces(in_window, row_ordinal)

    timestamps = np.zeros(total, dtype=np.int64)
    timestamps[row_state == user_timer_code] = timer_at[row_key[row_state == user_timer_code]]
    timestamps[row_state == window_timer_code] = (
        TIME_BASE_MS + row_ordinal[row_state == window_timer_code] * WINDOW_SIZE_MS + WINDOW_SIZE_MS - 1
    )

    # A value's bytes depend on (key, state, ordinal) only: a counter that no layout change moves.
    has_value = ~is_timer
    logical_id = (row_key * len(KEYED_STATES) + row_state) * 8 + row_ordinal  # ordinals stay below 8
    value_data = _counter_bytes(
        logical_id[has_value].astype(np.uint64), value_bytes, int(rng.integers(0, 2**62))
    )

    return pa.table(
        {
            "key_group": pa.array(key_group_of_key[row_key], pa.int32()),
            "state": pa.DictionaryArray.from_arrays(row_state, pa.array(_KEYED_NAMES)),
            "key": keys.take(pa.array(row_key)),
            "namespace": _binary(ns_widths, ns_data),
            "user_key": _binary(np.where(is_map, 8, 0), row_ordinal[is_map].astype(">i8").tobytes(), is_map),
            "value": _binary(np.where(has_value, value_bytes, 0), value_data, has_value),
            "timestamp": pa.array(timestamps, pa.int64(), mask=~is_timer),
        },
        schema=keyed_schema(spec.key_type),
    )


def _sorted_rows(
    per_key: list[npt.NDArray[np.int64]], key_group_of_key: npt.NDArray[np.int32]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """Return every output row's key, state code and ordinal within (key, state), in the file's order.

    ``per_key[code]`` is each key's number of rows of state ``code``. Keys go by key group (stable), each
    key's rows by state: a counting sort, with a stable scatter per state.
    """
    n = key_group_of_key.size
    counts = np.stack(per_key)  # (states, keys)
    rows_per_key = counts.sum(axis=0)
    key_order = np.argsort(key_group_of_key, kind="stable")
    key_start = np.zeros(n, dtype=np.int64)
    key_start[key_order] = np.cumsum(rows_per_key[key_order]) - rows_per_key[key_order]
    state_start = key_start + np.cumsum(counts, axis=0) - counts  # (states, keys): first row of each block
    total = int(rows_per_key.sum())
    row_key = np.empty(total, dtype=np.int64)
    row_state = np.empty(total, dtype=np.int32)
    row_ordinal = np.empty(total, dtype=np.int64)
    for code, count in enumerate(per_key):
        key_of = np.repeat(np.arange(n, dtype=np.int64), count)
        ordinal = np.arange(key_of.size, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        position = state_start[code][key_of] + ordinal
        row_key[position] = key_of
        row_state[position] = code
        row_ordinal[position] = ordinal
    return row_key, row_state, row_ordinal


def _namespaces(
    in_window: npt.NDArray[np.bool_], row_ordinal: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """Return each row's namespace width and the namespaces' bytes: a window's 16, else VoidNamespace's 1."""
    window_start = TIME_BASE_MS + row_ordinal[in_window] * WINDOW_SIZE_MS
    ns_widths = np.where(in_window, 16, 1).astype(np.int64)
    ns_offsets = np.cumsum(ns_widths) - ns_widths
    ns_data = np.zeros(int(ns_widths.sum()), dtype=np.uint8)  # VoidNamespace is the single byte 0
    window_bytes = (
        np.stack([window_start, window_start + WINDOW_SIZE_MS], axis=1).astype(">i8").view(np.uint8)
    )
    ns_data[ns_offsets[in_window][:, None] + np.arange(16)] = window_bytes.reshape(-1, 16)
    return ns_widths, ns_data


# -- Operator rows -----------------------------------------------------------------------------------------


def synthetic_operator_rows(
    spec: SyntheticOperator, *, seed: int, value_bytes: int = DEFAULT_VALUE_BYTES
) -> list[pa.Table]:
    """Return each subtask's operator-state rows (split and union dealt out, broadcast copied)."""
    rng = _rng(seed, spec.uid, 1)
    split = [rng.bytes(value_bytes) for _ in range(_SPLIT_ELEMENTS)]
    union = [rng.bytes(value_bytes) for _ in range(_UNION_ELEMENTS)]
    rules = [(f"rule-{i}".encode(), rng.bytes(value_bytes)) for i in range(_BROADCAST_ENTRIES)]
    p = spec.parallelism
    tables = []
    for subtask in range(p):
        states: list[str] = []
        positions: list[int] = []
        entry_keys: list[bytes | None] = []
        values: list[bytes] = []
        for name, elements in (("buffer", split), ("offsets", union)):
            mine = _contiguous_share(elements, p, subtask)
            states += [name] * len(mine)
            positions += list(range(len(mine)))
            entry_keys += [None] * len(mine)
            values += mine
        states += ["rules"] * len(rules)
        positions += list(range(len(rules)))
        entry_keys += [k for k, _ in rules]
        values += [v for _, v in rules]
        tables.append(
            pa.table(
                {
                    "state": pa.array(states, pa.string()),
                    "position": pa.array(positions, pa.int32()),
                    "entry_key": pa.array(entry_keys, pa.binary()),
                    "value": pa.array(values, pa.binary()),
                }
            )
        )
    return tables


def _contiguous_share(elements: list[bytes], parallelism: int, subtask: int) -> list[bytes]:
    # RoundRobinOperatorStateRepartitioner: base = total / p each, the first total % p take one extra.
    base, extra = divmod(len(elements), parallelism)
    start = subtask * base + min(subtask, extra)
    return elements[start : start + base + (1 if subtask < extra else 0)]


__all__ = [
    "DEFAULT_VALUE_BYTES",
    "GENERATED_KEY_TYPES",
    "KEYED_STATES",
    "OPERATOR_STATES",
    "SyntheticOperator",
    "generate_snapshot",
    "key_groups_for_keys",
    "parse_operator_spec",
    "synthetic_keyed_rows",
    "synthetic_keys",
    "synthetic_operator_rows",
]

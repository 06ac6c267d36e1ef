"""Bytes per key group of every keyed operator, and which parallelisms spread those bytes evenly.

For ``kg inspect --key-groups``. Format-neutral: a Flink savepoint / checkpoint is sized from its
``_metadata`` key-group offsets and the sizes of its state files (``flink.key_group_bytes``, exact bytes as
stored, compressed if the snapshot is); a kg snapshot from its manifest's rows per key group, with each
file's bytes shared out in proportion to rows (``planning`` does the same for ``kg plan``), so those bytes
are estimates. Neither reads state data.

Key-group counts say a parallelism that divides maxParallelism is even; real state is rarely spread evenly
over key groups, so the byte skew of a parallelism (hottest subtask's bytes over the mean) can differ a lot
from its key-group-count skew. ``advise_parallelism`` weighted by bytes gives the former.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keygroup_cli.assess.summary import operator_label
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.keygroups import skew, subtask_ranges
from keygroup_cli.flink import FlinkCheckpoint
from keygroup_cli.planning.plan import advise_parallelism, key_group_owners, key_group_weights
from keygroup_cli.storage.locations import Location

#: Upper end of the default parallelism range: at least this many candidates, or 4x the current one.
DEFAULT_MAX_CANDIDATES = 32
#: How many of the largest key groups the report names.
DEFAULT_TOP = 5
#: ``KeyGroupSizes.source`` values: exact block sizes from offsets, or the manifest's pro-rata estimate.
SOURCES = ("key-group-offsets", "manifest-estimate")


@dataclass(frozen=True, slots=True)
class SubtaskBytes:
    """One subtask at the current parallelism: its key-group range and the bytes it holds."""

    subtask: int
    key_group_start: int
    key_group_end: int
    #: Bytes of the subtask's key groups.
    bytes: int
    #: Bytes of the subtask's keyed state files as stored (key-group blocks plus headers).
    stored_bytes: int

    @property
    def key_groups(self) -> int:
        """Return the number of key groups the subtask owns."""
        return self.key_group_end - self.key_group_start + 1


@dataclass(frozen=True, slots=True)
class ParallelismBytes:
    """How evenly one parallelism spreads the operator's bytes, next to how evenly it spreads key groups."""

    parallelism: int
    byte_skew: float
    key_group_skew: float
    max_bytes: int
    min_bytes: int
    mean_bytes: float


@dataclass(frozen=True, slots=True)
class KeyGroupSizes:
    """One keyed operator: bytes per key group, per current subtask, and the byte-weighted advice.

    When ``unavailable_code`` is set (RocksDB NATIVE state has no offsets) only identity and the reason
    are filled in.
    """

    uid: str | None
    operator_id: str
    name: str | None
    parallelism: int
    max_parallelism: int
    #: One of ``SOURCES``, or None when unavailable.
    source: str | None
    #: Bytes per key group, index = key group (length maxParallelism).
    bytes: tuple[int, ...] = ()
    #: Current owning subtask per key group.
    owners: tuple[int, ...] = ()
    subtasks: tuple[SubtaskBytes, ...] = ()
    #: Every parallelism of the requested range, ascending.
    advice: tuple[ParallelismBytes, ...] = ()
    unavailable_code: str | None = None
    unavailable_reason: str | None = None

    @property
    def label(self) -> str:
        """Return how every command shows this operator (``assess.summary.operator_label``)."""
        return operator_label(self.uid, self.name, self.operator_id)

    @property
    def available(self) -> bool:
        """Return whether the per-key-group sizes are known."""
        return self.unavailable_code is None

    @property
    def total_bytes(self) -> int:
        """Return the bytes of all key groups."""
        return sum(self.bytes)

    @property
    def stored_bytes(self) -> int:
        """Return the bytes of all keyed state files (key groups plus headers)."""
        return sum(s.stored_bytes for s in self.subtasks)

    @property
    def non_empty_key_groups(self) -> int:
        """Return the number of key groups holding any bytes."""
        return sum(1 for b in self.bytes if b)

    @property
    def min_bytes(self) -> int:
        """Return the smallest key group's bytes."""
        return min(self.bytes, default=0)

    @property
    def max_bytes(self) -> int:
        """Return the largest key group's bytes."""
        return max(self.bytes, default=0)

    @property
    def median_bytes(self) -> float:
        """Return the median bytes of a key group."""
        ordered = sorted(self.bytes)
        n = len(ordered)
        if n == 0:
            return 0.0
        return float(ordered[n // 2]) if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2

    @property
    def skew(self) -> float:
        """Return max/mean bytes over the current subtasks, as the state holds them."""
        return skew([s.bytes for s in self.subtasks])

    @property
    def key_group_skew(self) -> float:
        """Return max/mean key groups over the current subtasks."""
        return skew([s.key_groups for s in self.subtasks])

    def hottest(self, top: int = DEFAULT_TOP) -> tuple[tuple[int, int, int], ...]:
        """Return ``(key_group, bytes, subtask)`` of the ``top`` largest non-empty key groups."""
        ranked = sorted(range(len(self.bytes)), key=lambda kg: (-self.bytes[kg], kg))[:top]
        return tuple((kg, self.bytes[kg], self.owners[kg]) for kg in ranked if self.bytes[kg] > 0)

    def best(self, top: int = DEFAULT_TOP) -> tuple[ParallelismBytes, ...]:
        """Return the ``top`` parallelisms of the range with the lowest byte skew (ties: the smaller)."""
        return tuple(sorted(self.advice, key=lambda a: (a.byte_skew, a.parallelism))[:top])

    @property
    def suggested(self) -> int:
        """Return the parallelism of the range with the lowest byte skew (the first of ``best``).

        The current parallelism when the range is empty (sizes unavailable).
        """
        best = self.best(1)
        return best[0].parallelism if best else self.parallelism

    def subtask_bytes(self, parallelism: int) -> tuple[int, ...]:
        """Return the bytes each subtask would hold at ``parallelism`` (see ``subtask_loads``)."""
        return subtask_loads(self.bytes, parallelism)


def subtask_loads(key_group_bytes: Sequence[int], parallelism: int) -> tuple[int, ...]:
    """Return the bytes each of ``parallelism`` subtasks holds when it owns Flink's range of key groups.

    ``key_group_bytes`` has one entry per key group (its length is maxParallelism); subtask ``i`` owns
    ``subtask_ranges(maxParallelism, parallelism)[i]``, as ``KeyGroupRangeAssignment`` assigns them.
    """
    return tuple(
        sum(key_group_bytes[r.start : r.end + 1]) for r in subtask_ranges(len(key_group_bytes), parallelism)
    )


@dataclass(frozen=True, slots=True)
class KeyGroupBin:
    """Contiguous key groups drawn as one bar: ``[start, end]`` (inclusive), their bytes and largest one."""

    start: int
    end: int
    bytes: int
    max_bytes: int


def key_group_bins(key_group_bytes: Sequence[int], bins: int) -> tuple[KeyGroupBin, ...]:
    """Return at most ``bins`` bars over the key groups: one per key group when they fit, else runs.

    Runs are contiguous and as even as Flink's subtask ranges (their sizes differ by at most one), so
    every key group is in exactly one bar and a bar's bytes are the sum of its key groups'.
    """
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    count = min(bins, len(key_group_bytes))
    out = []
    for r in subtask_ranges(len(key_group_bytes), count) if count else ():
        part = key_group_bytes[r.start : r.end + 1]
        out.append(KeyGroupBin(r.start, r.end, sum(part), max(part)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class KeyGroupSizesReport:
    """Key-group sizes of every keyed operator of a snapshot, in file / manifest order."""

    format: str
    path: Path | Location
    operators: tuple[KeyGroupSizes, ...]
    warnings: tuple[str, ...] = ()

    @property
    def available(self) -> tuple[KeyGroupSizes, ...]:
        """Return the operators whose sizes are known."""
        return tuple(op for op in self.operators if op.available)


def parallelism_range(
    max_parallelism: int, parallelism: int, minimum: int | None = None, maximum: int | None = None
) -> tuple[int, int]:
    """Return the parallelisms to judge: ``[minimum, maximum]`` clipped to maxParallelism.

    The default range is 2 (1 spreads any load evenly, so it says nothing) up to
    ``max(4 * parallelism, DEFAULT_MAX_CANDIDATES)``, within maxParallelism.

    Raises:
        InvalidArgumentError: ``minimum`` below 1, above ``maximum`` or above maxParallelism.
    """
    lo = (2 if max_parallelism > 1 else 1) if minimum is None else minimum
    hi = max(4 * parallelism, DEFAULT_MAX_CANDIDATES) if maximum is None else maximum
    if lo < 1:
        raise InvalidArgumentError(f"--min must be at least 1, got {lo}", code="INVALID_OPTION")
    if lo > hi:
        raise InvalidArgumentError(f"--min {lo} is above --max {hi}", code="INVALID_OPTION")
    if lo > max_parallelism:
        raise InvalidArgumentError(
            f"--min {lo} is above maxParallelism {max_parallelism}: no parallelism in range",
            code="INVALID_OPTION",
        )
    return lo, min(hi, max_parallelism)


def key_group_sizes(
    path: str | os.PathLike[str] | FlinkCheckpoint,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> KeyGroupSizesReport:
    """Size every key group of every keyed operator of a savepoint, checkpoint or kg snapshot.

    Args:
        path: Anything ``assess.summary.summarize`` accepts, or a savepoint opened already
            (``open_savepoint``, ``Summary.savepoint``): its ``_metadata`` is not read again.
        minimum: Smallest parallelism judged (default 2, see ``parallelism_range``).
        maximum: Largest parallelism judged (default ``max(4p, 32)``), clipped to each maxParallelism.

    Raises:
        InvalidInputError: Missing or corrupt input, a missing state file.
        UnsupportedFormatError: A format version kg does not read.
        InvalidArgumentError: A bad ``minimum`` / ``maximum``.
    """
    from keygroup_cli.assess.summary import is_kg_snapshot

    if isinstance(path, FlinkCheckpoint):
        return _from_flink(path, minimum, maximum)
    if is_kg_snapshot(path):
        from keygroup_cli.snapshot.download import readable_snapshot

        with readable_snapshot(path, everything=False) as local:
            return _from_kg(Path(local), minimum, maximum)
    return _from_flink(path, minimum, maximum)


def _from_flink(
    path: str | os.PathLike[str] | FlinkCheckpoint, minimum: int | None, maximum: int | None
) -> KeyGroupSizesReport:
    from keygroup_cli.flink import open_savepoint, operator_key_group_bytes

    snapshot = path if isinstance(path, FlinkCheckpoint) else open_savepoint(path)
    operators = []
    warnings: list[str] = []
    for op in snapshot.metadata.operators:
        if not any(s.managed_keyed_state is not None for s in op.subtasks):
            continue
        measured = operator_key_group_bytes(op, snapshot.directory)
        warnings.extend(measured.warnings)
        if not measured.available:
            operators.append(
                KeyGroupSizes(
                    op.uid,
                    op.operator_id,
                    op.name,
                    op.parallelism,
                    op.max_parallelism,
                    None,
                    unavailable_code=measured.unavailable_code,
                    unavailable_reason=measured.unavailable_reason,
                )
            )
            continue
        sizes = [0] * op.max_parallelism
        owners = key_group_owners(op.max_parallelism, op.parallelism)
        ranges: dict[int, tuple[int, int]] = {}
        stored: dict[int, int] = {}
        for handle in measured.handles:
            sizes[handle.key_group_start : handle.key_group_end + 1] = handle.bytes
            owners[handle.key_group_start : handle.key_group_end + 1] = [handle.subtask] * len(handle.bytes)
            ranges[handle.subtask] = (handle.key_group_start, handle.key_group_end)
            stored[handle.subtask] = stored.get(handle.subtask, 0) + handle.stream_bytes
        operators.append(
            _sized(
                (op.uid, op.operator_id, op.name),
                op.parallelism,
                op.max_parallelism,
                "key-group-offsets",
                sizes,
                owners,
                ranges,
                stored,
                minimum,
                maximum,
            )
        )
    fmt = "flink-savepoint" if snapshot.is_savepoint else "flink-checkpoint"
    return KeyGroupSizesReport(fmt, snapshot.metadata_path, tuple(operators), tuple(dict.fromkeys(warnings)))


def _from_kg(path: Path, minimum: int | None, maximum: int | None) -> KeyGroupSizesReport:
    from keygroup_cli.snapshot import open_snapshot

    snapshot = open_snapshot(path)
    operators = []
    for op in snapshot.manifest.operators:
        if not op.keyed_files:
            continue
        # Bytes per key group: each file's bytes shared out in proportion to its rows per key group.
        _rows, sizes = key_group_weights(op)
        owners = key_group_owners(op.max_parallelism, op.parallelism)
        ranges: dict[int, tuple[int, int]] = {}
        stored: dict[int, int] = {}
        for f in op.keyed_files:
            owners[f.key_group_start : f.key_group_end + 1] = [f.subtask] * (
                f.key_group_end - f.key_group_start + 1
            )
            ranges[f.subtask] = (f.key_group_start, f.key_group_end)
            stored[f.subtask] = stored.get(f.subtask, 0) + f.bytes
        operators.append(
            _sized(
                (op.uid, op.operator_id, op.name),
                op.parallelism,
                op.max_parallelism,
                "manifest-estimate",
                sizes,
                owners,
                ranges,
                stored,
                minimum,
                maximum,
            )
        )
    return KeyGroupSizesReport("kg-snapshot", snapshot.path, tuple(operators))


def _sized(
    identity: tuple[str | None, str, str | None],
    parallelism: int,
    max_parallelism: int,
    source: str,
    sizes: list[int],
    owners: list[int],
    ranges: dict[int, tuple[int, int]],
    stored: dict[int, int],
    minimum: int | None,
    maximum: int | None,
) -> KeyGroupSizes:
    uid, operator_id, name = identity
    computed = subtask_ranges(max_parallelism, parallelism)
    per_subtask = [0] * parallelism
    for kg, owner in enumerate(owners):
        if owner < parallelism:
            per_subtask[owner] += sizes[kg]
    subtasks = tuple(
        SubtaskBytes(
            i,
            *ranges.get(i, (computed[i].start, computed[i].end)),
            bytes=per_subtask[i],
            stored_bytes=stored.get(i, 0),
        )
        for i in range(parallelism)
    )
    lo, hi = parallelism_range(max_parallelism, parallelism, minimum, maximum)
    return KeyGroupSizes(
        uid,
        operator_id,
        name,
        parallelism,
        max_parallelism,
        source,
        tuple(sizes),
        tuple(owners),
        subtasks,
        _judge(max_parallelism, lo, hi, sizes),
    )


def _judge(max_parallelism: int, lo: int, hi: int, sizes: list[int]) -> tuple[ParallelismBytes, ...]:
    by_bytes = advise_parallelism(max_parallelism, lo, hi, key_group_weights=sizes)
    by_count = advise_parallelism(max_parallelism, lo, hi)
    return tuple(
        ParallelismBytes(b.parallelism, b.skew, c.skew, b.max_load, b.min_load, b.mean_load)
        for b, c in zip(by_bytes, by_count, strict=True)
    )


def key_group_sizes_document(sizes: KeyGroupSizes, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """Return the ``key_group_sizes`` object of one operator in ``kg inspect --key-groups --json``."""
    if not sizes.available:
        return {
            "available": False,
            "unavailable_code": sizes.unavailable_code,
            "unavailable_reason": sizes.unavailable_reason,
        }
    return {
        "available": True,
        "source": sizes.source,
        "key_groups": len(sizes.bytes),
        "non_empty_key_groups": sizes.non_empty_key_groups,
        "key_group_bytes": sizes.total_bytes,
        "keyed_file_bytes": sizes.stored_bytes,
        "min_bytes": sizes.min_bytes,
        "median_bytes": sizes.median_bytes,
        "max_bytes": sizes.max_bytes,
        "bytes": list(sizes.bytes),
        "hottest": [{"key_group": kg, "bytes": b, "subtask": s} for kg, b, s in sizes.hottest(top)],
        "subtasks": [
            {
                "subtask": s.subtask,
                "key_group_start": s.key_group_start,
                "key_group_end": s.key_group_end,
                "key_group_bytes": s.bytes,
                "keyed_file_bytes": s.stored_bytes,
            }
            for s in sizes.subtasks
        ],
        "byte_skew": round(sizes.skew, 6),
        "key_group_skew": round(sizes.key_group_skew, 6),
        "advice": {
            "min": sizes.advice[0].parallelism,
            "max": sizes.advice[-1].parallelism,
            "best": [a.parallelism for a in sizes.best(top)],
            "parallelisms": [_advice_document(a) for a in sizes.advice],
        },
    }


def _advice_document(advice: ParallelismBytes) -> dict[str, Any]:
    return {
        "parallelism": advice.parallelism,
        "byte_skew": round(advice.byte_skew, 6),
        "key_group_skew": round(advice.key_group_skew, 6),
        "max_bytes": advice.max_bytes,
        "min_bytes": advice.min_bytes,
        "mean_bytes": round(advice.mean_bytes, 3),
    }

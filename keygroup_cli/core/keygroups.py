"""Flink's key-group math, bit for bit, in scalar and vectorised (numpy) form.

Mirrors ``org.apache.flink.runtime.state.KeyGroupRangeAssignment`` and ``org.apache.flink.util.MathUtils``
(Flink 2.3). Key types are not known here: callers pass Java ``hashCode()`` values, which
``keygroup_cli.core.javahash`` computes per key type.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import mmh3
import numpy as np
import numpy.typing as npt

from keygroup_cli.core.errors import InvalidArgumentError

#: ``KeyGroupRangeAssignment.DEFAULT_LOWER_BOUND_MAX_PARALLELISM``.
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
#: ``Transformation.UPPER_BOUND_MAX_PARALLELISM`` (inclusive).
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_INT_MIN = -(2**31)


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """An inclusive range of key groups, ``[start, end]``; ``end == start - 1`` is the empty range."""

    start: int
    end: int

    @property
    def size(self) -> int:
        """Return the number of key groups in the range."""
        return max(0, self.end - self.start + 1)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        """Return the overlap of two ranges (``KeyGroupRange.getIntersection``), possibly empty."""
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange(0, -1)


def murmur_hash(code: int) -> int:
    """Return Flink's non-negative ``MathUtils.murmurHash(int)`` of a Java int.

    One MurmurHash3_x86_32 block over the 4 little-endian bytes of ``code`` with seed 0, then Flink's fold:
    negative results are negated, and ``Integer.MIN_VALUE`` becomes 0.
    """
    h: int = mmh3.hash(struct.pack("<i", to_int32(code)), 0, signed=True)
    if h >= 0:
        return h
    return -h if h != _INT_MIN else 0


def key_group_for_hash(hash_code: int, max_parallelism: int) -> int:
    """Return the key group of a key with the given Java ``hashCode()``.

    Matches ``KeyGroupRangeAssignment.computeKeyGroupForKeyHash``.
    """
    return murmur_hash(hash_code) % max_parallelism


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """Return the subtask that owns a key group; ``computeOperatorIndexForKeyGroup``."""
    return key_group * parallelism // max_parallelism


def require_parallelism_in_bounds(max_parallelism: int, parallelism: int) -> None:
    """Raise ``InvalidArgumentError`` unless ``1 <= parallelism <= max_parallelism <= 32768``.

    Same checks, order and messages as ``computeKeyGroupRangeForOperatorIndex``: first
    ``checkParallelismPreconditions`` on the parallelism, then on the maxParallelism, then their order.
    """
    for value in (parallelism, max_parallelism):
        if not 0 < value <= UPPER_BOUND_MAX_PARALLELISM:
            raise InvalidArgumentError(
                f"Operator parallelism not within bounds: {value}", code="PARALLELISM_OUT_OF_BOUNDS"
            )
    if max_parallelism < parallelism:
        raise InvalidArgumentError(
            "Maximum parallelism must not be smaller than parallelism.",
            code="PARALLELISM_EXCEEDS_MAX_PARALLELISM",
        )


def explain_bounds(
    max_parallelism: int,
    parallelism: int,
    *,
    parallelism_option: str = "--parallelism",
    max_option: str = "--max-parallelism",
    max_given: bool = True,
    can_change_max: bool = False,
) -> InvalidArgumentError | None:
    """Return ``require_parallelism_in_bounds``'s error with the option, the value, the bound and the fix.

    Flink's sentence stays as it is (``require_parallelism_in_bounds`` is pinned to Flink's own messages); the
    rest says which option broke which bound and what to pass instead. None when both are in bounds.

    Args:
        max_parallelism: The maxParallelism in force (given with ``max_option``, or the state's).
        parallelism: The parallelism given with ``parallelism_option``.
        parallelism_option: How the user spelled the parallelism (``--to``, ``--parallelism``).
        max_option: How the user spells the maxParallelism.
        max_given: False when ``max_parallelism`` is the state's, not an option's.
        can_change_max: The command can change maxParallelism (``kg rescale``): suggest doing so.
    """
    try:
        require_parallelism_in_bounds(max_parallelism, parallelism)
    except InvalidArgumentError as exc:
        bound = f"1 to {UPPER_BOUND_MAX_PARALLELISM}"
        if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            where = f"{parallelism_option} {parallelism}"
            fix = f"Flink allows a parallelism of {bound}"
        elif not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            where = f"{max_option} {max_parallelism}" if max_given else f"maxParallelism {max_parallelism}"
            fix = f"Flink allows a maxParallelism of {bound}"
        else:
            suggest = max(DEFAULT_LOWER_BOUND_MAX_PARALLELISM, _round_up_to_power_of_two(parallelism))
            state = (
                f"{max_option} {max_parallelism}"
                if max_given
                else f"the state's maxParallelism {max_parallelism}"
            )
            where = f"{parallelism_option} {parallelism} is above {state}"
            lower = f"{parallelism_option} {max_parallelism} or less"
            if can_change_max and not max_given:
                fix = f"pass {max_option} {suggest} to change maxParallelism as well, or {lower}"
            else:
                fix = f"choose {max_option} {suggest} or more, or {lower}"
        return InvalidArgumentError(f"{where}: {exc.message} ({fix})", code=exc.code)
    return None


def key_group_range_for_operator_index(max_parallelism: int, parallelism: int, index: int) -> KeyGroupRange:
    """Return the key groups subtask ``index`` of ``parallelism`` owns.

    Matches ``KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex``.
    """
    require_parallelism_in_bounds(max_parallelism, parallelism)
    # Flink does not bound the index above (index p yields a range past maxP); a negative index fails in
    # the KeyGroupRange constructor. Callers that take an index from users check it themselves.
    if index < 0:
        raise InvalidArgumentError(
            f"Operator index must not be negative: {index}", code="OPERATOR_INDEX_OUT_OF_BOUNDS"
        )
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def subtask_ranges(max_parallelism: int, parallelism: int) -> tuple[KeyGroupRange, ...]:
    """Return the key-group range of every subtask, in subtask order (``createKeyGroupPartitions``)."""
    require_parallelism_in_bounds(max_parallelism, parallelism)
    return tuple(
        key_group_range_for_operator_index(max_parallelism, parallelism, i) for i in range(parallelism)
    )


def _round_up_to_power_of_two(x: int) -> int:
    # MathUtils.roundUpToPowerOfTwo: bit-smear of x - 1 over 32 bits, plus one.
    x = (x - 1) & 0xFFFFFFFF
    for shift in (1, 2, 4, 8, 16):
        x |= x >> shift
    return (x + 1) & 0xFFFFFFFF


def default_max_parallelism(parallelism: int) -> int:
    """Return the maxParallelism Flink picks when none is configured.

    Matches ``KeyGroupRangeAssignment.computeDefaultMaxParallelism``:
    ``min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768)``.
    """
    if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise InvalidArgumentError(
            f"Operator parallelism not within bounds: {parallelism}", code="PARALLELISM_OUT_OF_BOUNDS"
        )
    rounded = _round_up_to_power_of_two(parallelism + parallelism // 2)
    return min(max(rounded, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def key_group_prefix_bytes(max_parallelism: int) -> int:
    """Return how many bytes prefix a serialized key (``computeRequiredBytesInKeyGroupPrefix``)."""
    return 2 if max_parallelism > DEFAULT_LOWER_BOUND_MAX_PARALLELISM else 1


def key_group_counts(max_parallelism: int, parallelism: int) -> list[int]:
    """Return how many key groups each subtask owns."""
    return [r.size for r in subtask_ranges(max_parallelism, parallelism)]


def skew(loads: Sequence[float]) -> float:
    """Return the hottest subtask's load divided by the mean load (1.0 is perfectly even)."""
    total = float(sum(loads))
    if not loads or total == 0.0:
        return 1.0
    return max(loads) / (total / len(loads))


def even_runs(sizes: Sequence[int], pieces: int, min_size: int = 0) -> list[range]:
    """Cut consecutive items of ``sizes`` into at most ``pieces`` runs of similar total size, in order.

    With ``min_size``, into no more runs than there are ``min_size`` in all (an engine's task has a fixed
    cost, worth paying only for enough bytes). A run ends once it holds its share of the total; every
    item is in exactly one run. One item, or none, is one run.
    """
    total = sum(sizes)
    cuts = min(pieces, max(1, total // min_size)) if min_size > 0 else pieces
    if cuts <= 1 or len(sizes) <= 1:
        return [range(len(sizes))]
    share = total / cuts
    runs: list[range] = []
    first, acc = 0, 0
    for i, size in enumerate(sizes):
        acc += size
        if i == len(sizes) - 1 or (acc >= share and len(runs) < cuts - 1):
            runs.append(range(first, i + 1))
            first, acc = i + 1, 0
    return runs


def to_int32(value: int) -> int:
    """Return ``value`` wrapped to a Java int, as Java's 32-bit arithmetic would leave it."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


# -- Vectorised forms: the same functions over numpy arrays of Java int hash codes. ------------------------

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl32(x: npt.NDArray[np.uint32], r: int) -> npt.NDArray[np.uint32]:
    return np.asarray((x << np.uint32(r)) | (x >> np.uint32(32 - r)), dtype=np.uint32)


def murmur_hash_array(codes: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Return ``murmur_hash`` of every Java int in ``codes``, vectorised ``MathUtils.murmurHash``."""
    k = np.asarray(codes).astype(np.int32, copy=False).view(np.uint32)
    with np.errstate(over="ignore"):
        k = k * _C1
        k = _rotl32(k, 15)
        k = k * _C2
        h = _rotl32(k, 13)
        h = h * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(4)
        # fmix32, as MathUtils.bitMix.
        h ^= h >> np.uint32(16)
        h = h * np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h = h * np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
        signed = h.view(np.int32)
        # Negation of INT_MIN wraps to INT_MIN in numpy; Flink maps it to 0 instead.
        result = np.where(signed >= 0, signed, -signed)
        result[signed == np.int32(_INT_MIN)] = 0
    return np.asarray(result, dtype=np.int32)


def key_groups_for_hashes(codes: npt.ArrayLike, max_parallelism: int) -> npt.NDArray[np.int32]:
    """Return the key group of every hash code (vectorised ``key_group_for_hash``)."""
    return key_groups_for_murmurs(murmur_hash_array(codes), max_parallelism)


def key_groups_for_murmurs(murmurs: npt.NDArray[np.int32], max_parallelism: int) -> npt.NDArray[np.int32]:
    """Return the key group of every ``murmur_hash_array`` result: one murmur serves two maxParallelisms."""
    return np.asarray(murmurs % np.int32(max_parallelism), dtype=np.int32)


def operator_indexes_for_key_groups(
    key_groups: npt.ArrayLike, max_parallelism: int, parallelism: int
) -> npt.NDArray[np.int32]:
    """Return the owning subtask of every key group (vectorised ``operator_index_for_key_group``)."""
    kg = np.asarray(key_groups).astype(np.int64, copy=False)
    return (kg * parallelism // max_parallelism).astype(np.int32, copy=False)


def operator_id_for_uid(uid: str) -> str:
    """Return the 32-hex OperatorID Flink derives from an operator's ``uid``.

    Matches ``StreamGraphHasherV2`` for a user-specified uid: Guava ``murmur3_128(0)`` over the uid's
    UTF-8 bytes, both 64-bit halves little-endian, h1 first; the hex of those 16 bytes is the id.
    """
    digest: bytes = mmh3.hash_bytes(uid.encode("utf-8"), 0, x64arch=True)
    return digest.hex()


def names_operator(label: str, uid: str | None, operator_id: str) -> bool:
    """Return whether ``label`` (a uid or a 32-hex OperatorID) names the operator ``(uid, operator_id)``.

    A uid matches by name where the metadata records one (``_metadata`` V5+, kg snapshots of them) and by
    its hash (``operator_id_for_uid``) where it does not: Flink 1.x metadata (V3, V4) stores no uids, only
    the OperatorIDs Flink derived from them, so ``keyed-long`` names the operator ``9ffc9079…``.
    """
    if label == uid or label.lower() == operator_id:
        return True
    return uid is None and operator_id_for_uid(label) == operator_id


#: Fewest hex characters of an operator id prefix that names an operator (as ``git`` takes a hash's).
MIN_ID_PREFIX = 4

_HEX = frozenset("0123456789abcdef")


class NamedOperator(Protocol):
    """What naming an operator reads of it: a kg ``Operator`` or a Flink ``OperatorState``."""

    @property
    def uid(self) -> str | None: ...  # noqa: D102
    @property
    def operator_id(self) -> str: ...  # noqa: D102
    @property
    def name(self) -> str | None: ...  # noqa: D102


_Op = TypeVar("_Op", bound=NamedOperator)


def find_named_operator(label: str, operators: Sequence[_Op]) -> _Op | None:
    """Return the operator ``label`` names in ``operators``, or None if it names none.

    In this order: its uid or full 32-hex id (``names_operator``, a uid's hash too where the metadata records
    no uids); else its name; else a prefix of its id of at least ``MIN_ID_PREFIX`` hex digits (the
    shortened ids text output prints, as ``git`` takes a hash's). A name or prefix must name one operator.

    Raises:
        InvalidArgumentError: ``OPERATOR_AMBIGUOUS``: a name or an id prefix several operators share (the
            message lists them).
    """
    exact = next((op for op in operators if names_operator(label, op.uid, op.operator_id)), None)
    if exact is not None:
        return exact
    by_name = [op for op in operators if op.name is not None and op.name == label]
    what = "name"
    prefix = label.lower()
    if not by_name and len(prefix) >= MIN_ID_PREFIX and set(prefix) <= _HEX:
        by_name = [op for op in operators if op.operator_id.startswith(prefix)]
        what = "id prefix"
    if len(by_name) > 1:
        listed = ", ".join(f"{op.operator_id} ({op.uid or op.name or 'no uid'})" for op in by_name)
        raise InvalidArgumentError(
            f"operator {label!r} is ambiguous: the {what} of {len(by_name)} operators: {listed}; give its "
            "uid or more of its id",
            code="OPERATOR_AMBIGUOUS",
        )
    return by_name[0] if by_name else None

"""Redistribute operator (non-keyed) state over a new parallelism, as Flink does on restore.

A pure port of ``RoundRobinOperatorStateRepartitioner.repartitionState`` over element counts: given how
many elements each old subtask holds of each state, it says which old ``(subtask, state, position)`` runs go
to which new subtask and position. Nothing here reads files; executors apply the returned plan.

Semantics (flink-savepoint-format.md section 4.2):

- ``operator-split``: per state name, the elements of all old subtasks are concatenated in old-subtask
  order and dealt out as contiguous runs: ``total // p'`` each, one extra for the first ``total % p'``
  subtasks *of the round*. The round of the first name starts at subtask 0; each following name starts
  where the previous name's extra elements ran out (``repartitionSplitState``'s ``startParallelOp``), and
  names are visited in Java ``HashMap`` iteration order.
- ``operator-union``: every new subtask receives every element of every old subtask. A union state marked
  ``replicated`` (what ``kg rescale`` writes, see ``StateDescriptor.replicated``) counts once: its first
  copy is the state, so rescaling a rescaled snapshot does not multiply it.
- ``operator-broadcast``: new subtask ``i`` receives the entries of the ``i % n``-th old subtask that
  reported the state (``n`` is normally the old parallelism).
- Same parallelism: if no union state holds elements and no broadcast state is only partly reported, the
  operator state stays exactly as it is (``unchanged``). Otherwise union state is dealt out as above, and a
  partly reported broadcast state is added to each subtask's own copy (a subtask that had a copy and is
  given another one keeps both, exactly as Flink's merge of handles does).

kg cannot tell a broadcast state that is registered but empty on a subtask from one the subtask never
reported (both have no rows), so "reported" means "has at least one entry".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from keygroup_cli.core.javahash import string_hash_code

SPLIT = "operator-split"
UNION = "operator-union"
BROADCAST = "operator-broadcast"


class NamedState(Protocol):
    """What the redistribution reads of a state.

    A kg ``StateDescriptor``, or a savepoint's ``OperatorStateName``.
    """

    @property
    def name(self) -> str: ...  # noqa: D102
    @property
    def kind(self) -> str: ...  # noqa: D102
    @property
    def is_keyed(self) -> bool: ...  # noqa: D102
    @property
    def replicated(self) -> bool: ...  # noqa: D102


@dataclass(frozen=True, slots=True)
class OperatorStateName:
    """One operator state as a savepoint's handles and headers name it: its name and its kind (mode)."""

    name: str
    #: ``SPLIT``, ``UNION`` or ``BROADCAST`` (``flink.KIND_BY_MODE`` of the handle's mode).
    kind: str

    @property
    def is_keyed(self) -> bool:
        """Operator state is never keyed."""
        return False

    @property
    def replicated(self) -> bool:
        """A savepoint's union state is one list per subtask, never a replicated copy (kg snapshots only)."""
        return False


#: ``count(old_subtask, state_name) -> number of elements``.
_Count = Callable[[int, str], int]


@dataclass(frozen=True, slots=True)
class ElementRun:
    """A contiguous run of one state's elements, copied from an old subtask to a new subtask.

    Old positions ``from_position .. from_position + count - 1`` of ``from_subtask`` become new positions
    ``to_position ..`` of ``to_subtask``.
    """

    state: str
    from_subtask: int
    from_position: int
    to_subtask: int
    to_position: int
    count: int


@dataclass(frozen=True, slots=True)
class OperatorStatePlan:
    """Where every operator-state element of one operator goes.

    ``runs`` is ordered by new subtask, then by the state's order in the manifest, then by new position:
    the row order of the new ``operator-NNNNN.parquet`` files. When ``unchanged`` is true the old files are
    kept as they are and ``runs`` maps every element onto itself.
    """

    old_parallelism: int
    new_parallelism: int
    unchanged: bool
    runs: tuple[ElementRun, ...]

    def runs_for(self, to_subtask: int) -> tuple[ElementRun, ...]:
        """Return the runs that make up new subtask ``to_subtask``'s operator state, in row order."""
        return tuple(r for r in self.runs if r.to_subtask == to_subtask)

    @property
    def new_counts(self) -> tuple[int, ...]:
        """Return the number of elements (rows) of every new subtask."""
        counts = [0] * self.new_parallelism
        for run in self.runs:
            counts[run.to_subtask] += run.count
        return tuple(counts)

    @property
    def moved_elements(self) -> int:
        """Return how many elements land on a different subtask index or position than before."""
        return sum(
            r.count for r in self.runs if (r.from_subtask, r.from_position) != (r.to_subtask, r.to_position)
        )


def java_hashmap_order(names: Sequence[str]) -> list[str]:
    """Return ``names`` in the iteration order of a ``java.util.HashMap`` they were put into in this order.

    Mirrors ``HashMap.hash`` (``h ^ (h >>> 16)`` of ``String.hashCode``), the default capacity of 16 that
    doubles whenever the size exceeds 0.75 of it, and bucket chains kept in insertion order (resizes split
    chains without reordering). Buckets holding 8 or more colliding names (tree bins) are not modelled.
    """
    unique = list(dict.fromkeys(names))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = string_hash_code(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return [name for _, _, name in sorted((bucket(n), i, n) for i, n in enumerate(unique))]


def redistribute_operator_state(
    states: Sequence[NamedState],
    counts: Sequence[Mapping[str, int]],
    new_parallelism: int,
) -> OperatorStatePlan:
    """Plan the redistribution of one operator's operator state to ``new_parallelism`` subtasks.

    Args:
        states: The operator's states in manifest order (keyed states are ignored).
        counts: One mapping per old subtask (so ``len(counts)`` is the old parallelism): state name →
            number of elements that subtask holds (missing names count as 0).
        new_parallelism: The new number of subtasks (at least 1).

    Returns:
        The plan; see ``OperatorStatePlan``.
    """
    if new_parallelism < 1:
        raise ValueError("new_parallelism must be at least 1")
    old_parallelism = len(counts)
    if old_parallelism < 1:
        raise ValueError("counts must have one entry per old subtask")
    op_states = [s for s in states if not s.is_keyed]
    order = {s.name: i for i, s in enumerate(op_states)}
    count = _element_counter(op_states, counts)
    if new_parallelism == old_parallelism:
        unchanged, runs = _runs_in_place(op_states, count, old_parallelism)
    else:
        unchanged = False
        runs = _rescaled_runs(op_states, count, old_parallelism, new_parallelism)
    runs.sort(key=lambda r: (r.to_subtask, order[r.state], r.to_position))
    return OperatorStatePlan(old_parallelism, new_parallelism, unchanged, tuple(runs))


def _element_counter(op_states: Sequence[NamedState], counts: Sequence[Mapping[str, int]]) -> _Count:
    """Return the elements each old subtask holds of each state, a replicated union state's counted once."""
    # A replicated union state holds one complete list on every subtask: only the first copy is state.
    first_copy = {
        s.name: min((i for i in range(len(counts)) if counts[i].get(s.name, 0)), default=0)
        for s in op_states
        if s.replicated
    }

    def count(subtask: int, name: str) -> int:
        if name in first_copy and subtask != first_copy[name]:
            return 0
        return int(counts[subtask].get(name, 0))

    return count


def _reporters(name: str, count: _Count, old_parallelism: int) -> list[int]:
    """Return the old subtasks that hold elements of state ``name``."""
    return [i for i in range(old_parallelism) if count(i, name) > 0]


def _runs_in_place(
    op_states: Sequence[NamedState], count: _Count, parallelism: int
) -> tuple[bool, list[ElementRun]]:
    """Plan operator state restored at its own parallelism; return whether it stays as it is, and the runs.

    Union state is dealt out as on any rescale; a broadcast state some subtasks did not report is given to
    them; the rest stays where it is.
    """
    partly_broadcast = {
        s.name
        for s in op_states
        if s.kind == BROADCAST and 0 < len(_reporters(s.name, count, parallelism)) < parallelism
    }
    has_union = any(count(i, s.name) for s in op_states if s.kind == UNION for i in range(parallelism))
    runs: list[ElementRun] = []
    for state in op_states:
        if state.kind == UNION:
            runs.extend(_union_runs(state.name, count, parallelism, parallelism))
        elif state.kind == BROADCAST and state.name in partly_broadcast:
            runs.extend(_identity_runs(state.name, count, parallelism))
            runs.extend(_added_broadcast_copies(state.name, count, parallelism))
        else:
            # Split state, and fully reported broadcast state, stay where they are.
            runs.extend(_identity_runs(state.name, count, parallelism))
    return not has_union and not partly_broadcast, runs


def _added_broadcast_copies(name: str, count: _Count, parallelism: int) -> list[ElementRun]:
    """Return the broadcast copies a subtask receives on top of its own, at the same parallelism."""
    # initMergeMapList keeps each subtask's own handle, then repartitionBroadcastState adds
    # the chosen copy in another handle: a subtask may end up with two copies (as in Flink).
    runs = []
    for run in _broadcast_runs(name, count, _reporters(name, count, parallelism), parallelism):
        if run.from_subtask != run.to_subtask:
            own = count(run.to_subtask, name)
            runs.append(ElementRun(name, run.from_subtask, 0, run.to_subtask, own, run.count))
    return runs


def _rescaled_runs(
    op_states: Sequence[NamedState], count: _Count, old_parallelism: int, new_parallelism: int
) -> list[ElementRun]:
    """Plan operator state restored at a new parallelism: split, union and broadcast states dealt out."""
    split_names = [s.name for s in op_states if s.kind == SPLIT]
    runs = _split_runs(split_names, count, old_parallelism, new_parallelism)
    for state in op_states:
        if state.kind == UNION:
            runs.extend(_union_runs(state.name, count, old_parallelism, new_parallelism))
        elif state.kind == BROADCAST:
            runs.extend(
                _broadcast_runs(
                    state.name, count, _reporters(state.name, count, old_parallelism), new_parallelism
                )
            )
    return runs


def _identity_runs(name: str, count: _Count, old_parallelism: int) -> list[ElementRun]:
    return [ElementRun(name, i, 0, i, 0, count(i, name)) for i in range(old_parallelism) if count(i, name)]


def _union_runs(name: str, count: _Count, old_parallelism: int, new_parallelism: int) -> list[ElementRun]:
    # repartitionUnionState: every new subtask gets every old partition, old subtasks in order.
    runs = []
    for target in range(new_parallelism):
        position = 0
        for source in range(old_parallelism):
            n = count(source, name)
            if n:
                runs.append(ElementRun(name, source, 0, target, position, n))
                position += n
    return runs


def _broadcast_runs(name: str, count: _Count, sources: list[int], new_parallelism: int) -> list[ElementRun]:
    # repartitionBroadcastState: new subtask i takes the (i % previousParallelism)-th reported copy.
    if not sources:
        return []
    runs = []
    for target in range(new_parallelism):
        source = sources[target % len(sources)]
        runs.append(ElementRun(name, source, 0, target, 0, count(source, name)))
    return runs


def _split_runs(
    names: Sequence[str], count: _Count, old_parallelism: int, new_parallelism: int
) -> list[ElementRun]:
    """Port of ``RoundRobinOperatorStateRepartitioner.repartitionSplitState``."""
    runs: list[ElementRun] = []
    start_parallel_op = 0
    for name in java_hashmap_order(names):
        sizes = [count(i, name) for i in range(old_parallelism)]
        total = sum(sizes)
        base, remainder = divmod(total, new_parallelism)
        # The concatenated partitions, consumed front to back: (old subtask, next position in it).
        source, position = 0, 0
        new_start = start_parallel_op
        for i in range(new_parallelism):
            target = (i + start_parallel_op) % new_parallelism
            take = base
            if remainder > 0:
                take += 1
                remainder -= 1
            elif remainder == 0:
                # Out of odd partitions: the next name's round starts at this subtask, for balance.
                new_start = target
                remainder -= 1
            to_position = 0
            while take > 0:
                while position >= sizes[source]:
                    source, position = source + 1, 0
                n = min(take, sizes[source] - position)
                runs.append(ElementRun(name, source, position, target, to_position, n))
                position, to_position, take = position + n, to_position + n, take - n
        start_parallel_op = new_start
    return runs

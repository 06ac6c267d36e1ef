"""Finished operators (FLIP-147) in savepoints kg writes: each operator keeps the finished state Flink reads.

Flink records finished tasks in a checkpoint in two ways
(``DefaultCheckpointPlan.fulfillFinishedTaskStatus``). When every task of a job vertex has finished, each of
its operators becomes a ``FullyFinishedOperatorState`` (no subtask states and no coordinator state;
``_metadata`` stores -1 subtask states). When some tasks of a vertex have finished, each of their operators
gets a ``FinishedOperatorSubtaskState`` (no state; the subtask index is stored as ``-index - 1``) beside the
others' states.

At restore (``CheckpointCoordinator.restoreSavepoint``),
``VertexFinishedStateChecker.validateOperatorsFinishedState`` classifies every job vertex from its operators'
states: fully finished, partially finished (any finished subtask) or all running. It refuses a vertex whose
operators differ, a fully finished vertex behind one that is not, and a partially finished vertex behind one
that is not fully finished over an ALL_TO_ALL edge, or all running over a POINTWISE edge. Parallelism plays
no part in it. ``StateAssignmentOperation.assignStates`` then deploys every subtask of a fully finished
vertex (``TaskStateAssignment.isFullyFinished``) as ``TaskStateSnapshot.FINISHED_ON_RESTORE``, at whatever
parallelism the new job gives it: its operators never run again, and it is neither repartitioned nor checked
against its maxParallelism (``assignAttemptState`` runs only for ``hasNonFinishedState``). A partially
finished vertex is repartitioned like any other, and every new subtask runs
(``assignNonFinishedStateToTask``); the finished ones add no state. Its markers matter only to the checker.

So kg keeps every operator's class at any parallelism and maxParallelism. A fully finished operator stays
``FullyFinishedOperatorState``. A partially finished one keeps a finished marker on a new subtask that gets
none of its state. Flink then restores kg's output as it restores its own rescale of the input, and refuses
the same jobs. kg refuses a partially finished operator whose every new subtask would get state
(``FINISHED_SUBTASK_NOT_KEPT``), since no marker can stand there without dropping state.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.keygroups import key_group_range_for_operator_index
from keygroup_cli.flink.io.stream_handles import KeyGroupsHandle
from keygroup_cli.flink.metadata.reader import OperatorState

#: Error code: a partially finished operator whose every new subtask would get state.
FINISHED_SUBTASK_NOT_KEPT = "FINISHED_SUBTASK_NOT_KEPT"


def finished_before(extension: Mapping[str, Any]) -> tuple[int, ...]:
    """Return the finished subtasks an operator's ``flink`` extension records (none if fully finished)."""
    if extension.get("fully_finished"):
        return ()
    return tuple(sorted(int(i) for i in extension.get("finished_subtasks", ())))


def finished_markers(
    label: str,
    finished: Collection[int],
    receives_state: Sequence[bool],
    *,
    max_parallelism: int | None = None,
) -> tuple[int, ...]:
    """Return the new subtasks of an operator to write as finished (``FinishedOperatorSubtaskState``).

    Flink restarts every subtask of a partially finished operator, a finished one with no state, so a marker
    may stand on any new subtask that gets none of the operator's state. The input's finished subtasks
    keep theirs where they still exist without state (at an unchanged layout: all of them). Where none does,
    the lowest new subtask without state gets one, which keeps the operator partially finished for
    ``VertexFinishedStateChecker``.

    Args:
        label: The operator's uid or id, for the message.
        finished: The input's finished subtasks (empty: the operator was not partially finished).
        receives_state: One flag per new subtask: whether it gets any keyed or operator state.
        max_parallelism: The new maxParallelism, for the message.

    Raises:
        InvalidArgumentError: ``FINISHED_SUBTASK_NOT_KEPT``: every new subtask gets state.
    """
    if not finished:
        return ()
    free = [i for i, has_state in enumerate(receives_state) if not has_state]
    kept = tuple(i for i in sorted(set(finished)) if i in free)
    if kept:
        return kept
    if free:
        return (free[0],)
    new_p = len(receives_state)
    at = f"parallelism {new_p}" + (f" and maxParallelism {max_parallelism}" if max_parallelism else "")
    raise InvalidArgumentError(
        f"operator {label!r} is partially finished (subtasks {sorted(set(finished))} finished) and at {at} "
        "every subtask would get some of its state; Flink keeps it partially finished through a finished "
        "subtask, which holds no state (VertexFinishedStateChecker accepts or refuses the job by that), so "
        "kg cannot write it as Flink's own rescale restores it: choose a parallelism at which a subtask "
        "gets none of its state, or restore the savepoint in Flink first and rescale a savepoint taken then",
        code=FINISHED_SUBTASK_NOT_KEPT,
    )


def keyed_receivers(op: OperatorState, parallelism: int, max_parallelism: int) -> list[bool]:
    """Return, per new subtask, whether it would get any of ``op``'s keyed data.

    Canonical key-group offsets are 0 for a key group without data. At a new maxParallelism every key moves
    to a new key group, which only decoding tells, so then any data counts for every new subtask.
    """
    handles = [h for s in op.subtasks for h in (s.managed_keyed_state, s.raw_keyed_state) if h is not None]
    if not handles:
        return [False] * parallelism
    if max_parallelism != op.max_parallelism or not all(isinstance(h, KeyGroupsHandle) for h in handles):
        return [True] * parallelism
    groups = {
        h.key_group_start + j
        for h in handles
        if isinstance(h, KeyGroupsHandle)
        for j, offset in enumerate(h.offsets)
        if offset
    }
    receives = []
    for index in range(parallelism):
        r = key_group_range_for_operator_index(max_parallelism, parallelism, index)
        receives.append(any(r.start <= g <= r.end for g in groups))
    return receives


def require_finished_kept(
    operators: Iterable[OperatorState],
    targets: Mapping[str, tuple[int, int]],
    operator_rows: Mapping[str, Mapping[int, int]],
) -> None:
    """Refuse a savepoint rescale that would have to drop a partially finished operator's last marker.

    Called before anything is written, with the savepoint's operators, their new (parallelism,
    maxParallelism) by id, and the operator-state rows each new subtask gets (by id, then subtask).

    Raises:
        InvalidArgumentError: ``FINISHED_SUBTASK_NOT_KEPT`` (see ``finished_markers``).
    """
    for op in operators:
        finished = [s.index for s in op.subtasks if s.finished]
        if op.fully_finished or not finished or op.operator_id not in targets:
            continue
        new_p, new_max = targets[op.operator_id]
        rows = operator_rows.get(op.operator_id, {})
        keyed = keyed_receivers(op, new_p, new_max)
        receives = [keyed[i] or rows.get(i, 0) > 0 for i in range(new_p)]
        finished_markers(op.label, finished, receives, max_parallelism=new_max)


__all__ = [
    "FINISHED_SUBTASK_NOT_KEPT",
    "finished_before",
    "finished_markers",
    "keyed_receivers",
    "require_finished_kept",
]

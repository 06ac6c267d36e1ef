"""Match a savepoint's stateful operators that a new job lacks to the job's uids that match nothing.

``kg check --job-uids FILE`` knows the new job's operators only by their uids (or 32-hex ids). Flink maps
state to an operator by OperatorID = murmur3_128(uid) (``core.keygroups.operator_id_for_uid``), so a changed
uid, or a uid given to an operator that had none, leaves the state unmapped. ``suggest_migration`` pairs
each unmapped stateful operator with a candidate among the job's unmatched uids, and writes the
``kg migrate`` command that restores the mapping:

- an operator whose ``_metadata`` (V5+) records its uid is paired with the most similar unmatched uid
  (``--rename OLD=NEW``);
- an operator known only by its id (a uid-less operator in V5+, any operator in V3/V4, which record no
  uids) has no name to compare: it is paired by elimination, when it is the only one left and one uid is
  left (``--assign-uid ID=NEW`` for a uid-less V5+ operator, ``--rename ID=NEW`` otherwise).

Flink itself needs nothing else: ids are all it compares. What a uid list cannot carry are the new job's
state names and serializers, which would tell two unmapped keyed operators apart. ``kg check --against
NEW`` takes them from a savepoint (or retained checkpoint) of the new job version: each unmapped stateful
operator is then paired with the one operator of the new job, absent from the old savepoint, whose state
names, kinds and serializer classes (and key serializer) equal its own (``state_signature``). Two or more
such operators, or one claimed by two old operators, is ambiguity: reported (``OPERATOR_STATE_AMBIGUOUS``),
never guessed; a pair is ``OPERATOR_STATE_CANDIDATE``. Candidates are suggestions for a person to confirm:
a uid left unmatched may also belong to a new, stateless operator.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.core.keygroups import operator_id_for_uid

if TYPE_CHECKING:
    from keygroup_cli.assess.summary import OperatorSummary

_HEX_ID = re.compile(r"^[0-9a-fA-F]{32}$")
#: Below this ``difflib`` ratio two uids are not taken for one renamed operator.
SIMILAR = 0.6


@dataclass(frozen=True, slots=True)
class Candidate:
    """One unmapped stateful operator, and the new uid it is paired with (or None)."""

    operator_id: str
    uid: str | None
    new_uid: str | None
    #: ``--rename`` or ``--assign-uid`` (None without a candidate).
    option: str | None
    reason: str
    #: With ``--against``: the ids of the new job's operators whose state equals this one's (one: the
    #: candidate's, several: ambiguous; empty: none, or matched by uid alone).
    state_matches: tuple[str, ...] = ()
    #: With ``--against``: more than one new operator fits, or the one that fits fits another too.
    ambiguous: bool = False

    @property
    def argument(self) -> str | None:
        """Return the option's value (``OLD=NEW``), or None without a candidate."""
        if self.new_uid is None:
            return None
        old = self.uid if self.option == "--rename" and self.uid else self.operator_id
        return f"{old}={self.new_uid}"


@dataclass(frozen=True, slots=True)
class MigrationSuggestion:
    """Every unmapped stateful operator with its candidate, and the command that restores the mapping."""

    candidates: tuple[Candidate, ...]
    #: ``kg migrate PATH --out PATH-migrated ...``, or None when no operator has a candidate.
    command: str | None

    def lines(self) -> list[str]:
        """Return one line per unmapped operator (its candidate and why, or why none), then the command."""
        out = []
        for c in self.candidates:
            label = c.uid or c.operator_id
            if c.new_uid is None and c.state_matches:
                out.append(f"{label}: {c.reason}")  # ambiguous, or a match kg cannot name
            elif c.new_uid is None:
                out.append(
                    f"{label}: no candidate among the new job's uids ({c.reason}); if its state is not "
                    f"needed any more: --drop {label}"
                )
            else:
                out.append(f"{label}: candidate {c.new_uid!r} ({c.reason}): {c.option} {c.argument}")
        if self.command:
            out.append(f"Restore the mapping: {self.command}")
        return out

    def findings(self) -> list[Finding]:
        """Return the findings of the state matching (``--against``): a candidate, or ambiguity."""
        found = []
        for c in self.candidates:
            label = c.uid or c.operator_id
            if c.ambiguous:
                found.append(Finding("OPERATOR_STATE_AMBIGUOUS", Severity.WARNING, label, c.reason))
            elif c.state_matches:
                found.append(
                    Finding(
                        "OPERATOR_STATE_CANDIDATE",
                        Severity.INFO,
                        label,
                        f"{c.reason}: {c.option} {c.argument}" if c.argument else c.reason,
                    )
                )
        return found

    def document(self) -> dict[str, object]:
        """Return the ``migrate`` part of ``kg check --json``."""
        return {
            "command": self.command,
            "candidates": [
                {
                    "operator_id": c.operator_id,
                    "uid": c.uid,
                    "new_uid": c.new_uid,
                    "option": c.option,
                    "argument": c.argument,
                    "reason": c.reason,
                    "state_matches": list(c.state_matches),
                    "ambiguous": c.ambiguous,
                }
                for c in self.candidates
            ],
        }


def state_signature(op: OperatorSummary) -> tuple[object, ...] | None:
    """Return what ``--against`` compares: key serializer, and each state's name, kind and serializer.

    None when the operator's states are unknown or it has none (nothing to tell operators apart by).
    """
    if not op.states:
        return None
    states = sorted((s.name, s.kind, s.serializer or "") for s in op.states)
    return (op.key_serializer, tuple(states))


def suggest_migration(
    operators: Sequence[OperatorSummary],
    job_uids: Sequence[str],
    path: str,
    *,
    uids_recorded: bool,
    job_operators: Sequence[OperatorSummary] | None = None,
) -> MigrationSuggestion | None:
    """Pair the stateful operators ``job_uids`` does not name with its unmatched uids (see the module).

    Args:
        operators: The savepoint's operators.
        job_uids: The new job's uids and 32-hex ids (``--job-uids``, or those of ``job_operators``).
        path: The savepoint, as the command names it.
        uids_recorded: Whether the metadata records uids (V5+): an operator without one then had none.
        job_operators: The new job's operators with their states (``--against``): candidates are then
            the operators whose state signature equals, and only those.

    Returns:
        None when every stateful operator is mapped.
    """
    job_ids = {u.lower() if _HEX_ID.match(u) else operator_id_for_uid(u) for u in job_uids}
    known = {op.operator_id for op in operators} | {op.uid for op in operators if op.uid}
    named = job_ids | set(job_uids)
    unmapped = [op for op in operators if op.has_state and not ({op.operator_id, op.uid} & named)]
    if not unmapped:
        return None
    free = [
        u for u in dict.fromkeys(job_uids)
        if not _HEX_ID.match(u) and u not in known and operator_id_for_uid(u) not in known
    ]  # fmt: skip
    if job_operators is not None:
        return _by_state(unmapped, operators, job_operators, job_uids, path, uids_recorded)
    pairs: dict[str, tuple[str, str]] = {}
    # Operators whose uid is recorded: the most similar uid first, best pairs taken first.
    scored = sorted(
        (
            (difflib.SequenceMatcher(None, op.uid, u).ratio(), op.operator_id, u)
            for op in unmapped
            if op.uid
            for u in free
        ),
        reverse=True,
    )
    for ratio, op_id, u in scored:
        if ratio >= SIMILAR and op_id not in pairs and u in free:
            pairs[op_id] = (u, f"uids {ratio:.0%} alike")
            free.remove(u)
    rest = [op for op in unmapped if op.operator_id not in pairs]
    if len(rest) == 1 and len(free) == 1:
        pairs[rest[0].operator_id] = (free[0], "the only unmapped operator and the only unmatched uid")
    candidates = tuple(_candidate(op, pairs.get(op.operator_id), uids_recorded, free) for op in unmapped)
    return _suggestion(candidates, path)


def _suggestion(candidates: tuple[Candidate, ...], path: str) -> MigrationSuggestion:
    arguments = [f"{c.option} {shlex.quote(c.argument)}" for c in candidates if c.argument and c.option]
    command = None
    if arguments:
        dest = shlex.quote(path.rstrip("/") + "-migrated")
        command = " ".join(["kg migrate", shlex.quote(path), "--out", dest, *arguments])
    return MigrationSuggestion(candidates, command)


def _by_state(
    unmapped: Sequence[OperatorSummary],
    operators: Sequence[OperatorSummary],
    job_operators: Sequence[OperatorSummary],
    job_uids: Sequence[str],
    path: str,
    uids_recorded: bool,
) -> MigrationSuggestion:
    """Pair each unmapped operator with the one new operator whose state signature equals its own."""
    old_ids = {op.operator_id for op in operators}
    new = [j for j in job_operators if j.operator_id not in old_ids and state_signature(j) is not None]
    matches = {
        op.operator_id: tuple(j for j in new if state_signature(j) == state_signature(op)) for op in unmapped
    }
    claims: dict[str, int] = {}
    for found in matches.values():
        for j in found:
            claims[j.operator_id] = claims.get(j.operator_id, 0) + 1
    candidates = []
    for op in unmapped:
        found = matches[op.operator_id]
        ids = tuple(j.operator_id for j in found)
        states = _states(op)
        if not found:
            reason = (
                f"no operator of the new job that the savepoint lacks has its state ({states})"
                if states
                else "its states are unknown"
            )
            candidates.append(Candidate(op.operator_id, op.uid, None, None, reason))
        elif len(found) > 1 or claims[found[0].operator_id] > 1:
            others = sorted({_name(j, job_uids) for j in found})
            reason = (
                f"ambiguous: the state ({states}) is that of {', '.join(others)} in the new job"
                + ("" if len(found) > 1 else ", which another unmapped operator has too")
                + "; kg does not choose"
            )
            candidates.append(Candidate(op.operator_id, op.uid, None, None, reason, ids, ambiguous=True))
        else:
            j = found[0]
            uid = _uid_of(j, job_uids)
            if uid is None:
                reason = (
                    f"its state ({states}) is that of the new job's operator {j.operator_id}, which has no "
                    "uid kg can name: set .uid() on it (or list it in --job-uids)"
                )
                candidates.append(Candidate(op.operator_id, op.uid, None, None, reason, ids))
                continue
            reason = f"state names and serializers equal ({states})"
            option = "--assign-uid" if uids_recorded and op.uid is None else "--rename"
            candidates.append(Candidate(op.operator_id, op.uid, uid, option, reason, ids))
    return _suggestion(tuple(candidates), path)


def _states(op: OperatorSummary) -> str:
    """Return the states of ``op`` in a few words: each one but timers by name and serializer."""
    states = op.states or ()
    named = [f"{s.name}: {s.serializer or s.kind}" for s in states if s.kind != "timer"]
    timers = sum(s.kind == "timer" for s in states)
    if timers:
        named.append(f"{timers} timer state{'s' if timers > 1 else ''}")
    return ", ".join(named)


def _uid_of(op: OperatorSummary, job_uids: Sequence[str]) -> str | None:
    """Return the uid of a new job's operator: recorded (V5+), or a listed uid whose hash is its id."""
    if op.uid:
        return op.uid
    return next(
        (u for u in job_uids if not _HEX_ID.match(u) and operator_id_for_uid(u) == op.operator_id), None
    )


def _name(op: OperatorSummary, job_uids: Sequence[str]) -> str:
    uid = _uid_of(op, job_uids)
    return repr(uid) if uid else op.operator_id


def _candidate(
    op: OperatorSummary, pair: tuple[str, str] | None, uids_recorded: bool, free: list[str]
) -> Candidate:
    if pair is None:
        if not free:
            reason = "no unmatched uid is left"
        elif op.uid:
            reason = f"{len(free)} unmatched uids, none similar to {op.uid!r}"
        else:
            reason = (
                f"{len(free)} unmatched uids; an operator known by its id alone is paired only by elimination"
            )
        return Candidate(op.operator_id, op.uid, None, None, reason)
    new_uid, reason = pair
    option = "--assign-uid" if uids_recorded and op.uid is None else "--rename"
    return Candidate(op.operator_id, op.uid, new_uid, option, reason)


__all__ = ["Candidate", "MigrationSuggestion", "state_signature", "suggest_migration"]

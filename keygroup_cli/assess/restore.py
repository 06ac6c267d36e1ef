"""The restore checks of ``kg check``: would Flink restore this input into the new job, and how evenly?

They return ``Finding`` records (``keygroup_cli.core.findings``); they never raise for what they find and
never print.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from keygroup_cli.core.findings import Finding, Severity
from keygroup_cli.core.keygroups import default_max_parallelism, names_operator, operator_id_for_uid

if TYPE_CHECKING:
    from keygroup_cli.assess.summary import OperatorSummary


# -- restore checks (kg check) -----------------------------------------------------------------------------

#: ``KeyGroupRangeAssignment.DEFAULT_LOWER_BOUND_MAX_PARALLELISM``: Flink's maxParallelism for p <= 85.
DEFAULT_MAX_PARALLELISM = 128
#: Hottest subtask's key-group count over the mean above which UNEVEN_KEY_GROUPS is reported.
UNEVEN_KEY_GROUPS_THRESHOLD = 1.25
#: Share of maxParallelism from which a defaulted maxParallelism of 128 counts as "approaching".
TRAP_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """What the new deployment looks like, for ``check_restore``.

    Per-operator maps are keyed by uid or operator id (hex). An operator without an entry keeps the
    global value, or its current parallelism / the state's maxParallelism when there is none.
    """

    parallelism: int | None = None
    parallelism_for: Mapping[str, int] = field(default_factory=dict)
    max_parallelism: int | None = None
    max_parallelism_for: Mapping[str, int] = field(default_factory=dict)
    job_uids: Collection[str] | None = None
    allow_non_restored_state: bool = False


def _lookup(values: Mapping[str, int], op: OperatorSummary) -> int | None:
    for key, value in values.items():
        if names_operator(key, op.uid, op.operator_id):
            return value
    return None


def _named_by(plan: RestorePlan, op: OperatorSummary) -> str | None:
    """Return the uid an option or ``job_uids`` gives an operator whose metadata records none."""
    names = [*plan.parallelism_for, *plan.max_parallelism_for, *(plan.job_uids or ())]
    return next((n for n in names if operator_id_for_uid(n) == op.operator_id), None)


def check_restore(
    operators: Sequence[OperatorSummary],
    plan: RestorePlan,
    *,
    snapshot: str,
) -> list[Finding]:
    """Judge whether a snapshot's state restores into the planned job, as Flink's restore would.

    Mirrors the checks of ``Checkpoints.loadAndValidateCheckpoint`` (max parallelism mismatch, for every
    operator in ``_metadata`` that the new job has, stateless ones included; missing operator, for those
    with state) and ``StateAssignmentOperation.checkParallelismPreconditions`` (parallelism above the
    state's maxParallelism, for every operator of a job vertex that has state). A stateless operator is
    held to the latter only if it may share a vertex with state: Flink records the vertex's parallelism
    and maxParallelism for every operator of a chain, so a stateless operator whose pair no operator with
    state has is in a vertex without state, which Flink does not check. Options name operators by uid
    (by its hash where the metadata records no uids) or id.

    An operator with no explicit maxParallelism (``-m`` neither for all nor for it) models a job that
    sets none: Flink then adopts the state's maxParallelism, but only if every operator chained with it
    has a state in the savepoint. ``assignStates`` gives a missing one an empty state at Flink's default
    for the new parallelism, and ``checkParallelismPreconditions`` moves the vertex to each state's
    maxParallelism in turn, so the last one decides the key groups (only keyed state has key groups:
    operator state is redistributed round-robin whatever the vertex's maxParallelism, and its bound is
    ``PARALLELISM_EXCEEDS_MAX_PARALLELISM``). ``_metadata`` records no chains: where
    the state's maxParallelism is not that default, the verdict needs the new job's operators
    (``job_uids``), ``MAX_PARALLELISM_NOT_ADOPTED`` if it has any the savepoint lacks, else
    ``MAX_PARALLELISM_ADOPTION_UNVERIFIED`` (a warning that names the input that settles it). Two more
    warnings add what Flink does not check: uneven key-group shares and the default-maxParallelism trap.

    Args:
        operators: The snapshot's operators (``assess.summary.OperatorSummary``; Flink or kg format).
        plan: The new job's parallelism, maxParallelism and uids.
        snapshot: The snapshot's path, quoted in Flink's messages.
    """
    findings = _options_naming_nothing(operators, plan)
    job_ids = _job_operator_ids(plan.job_uids) if plan.job_uids is not None else None
    lacking = _job_operators_lacking(plan.job_uids, operators) if plan.job_uids is not None else None
    with_state = {(op.parallelism, op.max_parallelism) for op in operators if op.has_state}
    for op in operators:
        label = op.label if op.uid else _named_by(plan, op) or op.label
        if job_ids is not None and not ({op.operator_id, op.uid} & job_ids):
            findings.extend(_not_in_job(op, label, plan, snapshot))
        else:
            findings.extend(_check_operator(op, label, plan, with_state, lacking))
    findings.extend(check_channel_state(operators, plan))
    return findings


def _options_naming_nothing(operators: Sequence[OperatorSummary], plan: RestorePlan) -> list[Finding]:
    """Note each per-operator option whose uid or id names no operator of the snapshot (it is ignored)."""
    return [
        Finding(
            "OPTION_OPERATOR_NOT_IN_SNAPSHOT",
            Severity.INFO,
            key,
            f"no operator with uid or id {key!r} in the snapshot; its option is ignored",
        )
        for key in sorted(set(plan.parallelism_for) | set(plan.max_parallelism_for))
        if not any(names_operator(key, op.uid, op.operator_id) for op in operators)
    ]


def _not_in_job(op: OperatorSummary, label: str, plan: RestorePlan, snapshot: str) -> list[Finding]:
    """Judge the state of an operator the new job lacks: refused, or skipped (allow_non_restored_state)."""
    if not op.has_state:
        # Flink skips an unmatched operator without state ("Skipping empty savepoint state").
        return []
    if plan.allow_non_restored_state:
        return [
            Finding(
                "OPERATOR_NOT_IN_JOB",
                Severity.WARNING,
                label,
                f"the state of operator {op.operator_id} will be skipped (--allow-non-restored-state)",
            )
        ]
    return [
        Finding(
            "OPERATOR_NOT_IN_JOB",
            Severity.ERROR,
            label,
            f"Failed to rollback to checkpoint/savepoint {snapshot}. Cannot map "
            f"checkpoint/savepoint state for operator {op.operator_id} to the new program, "
            "because the operator is not "
            "available in the new program. If you want to allow to skip this, you can set the "
            "--allowNonRestoredState option on the CLI.",
        )
    ]


def _check_operator(
    op: OperatorSummary,
    label: str,
    plan: RestorePlan,
    with_state: set[tuple[int, int]],
    lacking: list[str] | None,
) -> list[Finding]:
    """Judge one operator the new job has: its maxParallelism, its parallelism bound, its key groups.

    ``with_state`` holds the (parallelism, maxParallelism) pairs of the operators with state: a stateless
    operator with one of them may share their job vertex, and is held to its bound.
    """
    state_max = op.max_parallelism
    new_p = _lookup(plan.parallelism_for, op) or plan.parallelism or op.parallelism
    explicit_max = _lookup(plan.max_parallelism_for, op) or plan.max_parallelism
    findings = []
    if explicit_max is not None and explicit_max != state_max:
        findings.append(
            Finding(
                "MAX_PARALLELISM_MISMATCH",
                Severity.ERROR,
                label,
                "Failed to rollback to checkpoint/savepoint Checkpoint Metadata. Max parallelism "
                "mismatch between checkpoint/savepoint state and new program. Cannot map operator "
                f"{op.operator_id} with max parallelism {state_max} to new program with max "
                f"parallelism {explicit_max}. This indicates that the program has been changed in a "
                "non-compatible way after the checkpoint/savepoint.",
            )
        )
    if new_p > state_max and (op.has_state or (op.parallelism, state_max) in with_state):
        findings.append(
            Finding(
                "PARALLELISM_EXCEEDS_MAX_PARALLELISM",
                Severity.ERROR,
                label,
                f"The state for task {op.operator_id} can not be restored. The maximum parallelism "
                f"({state_max}) of the restored state is lower than the configured parallelism "
                f"({new_p}). Please reduce the parallelism of the task to be lower or equal to the "
                "maximum parallelism.",
            )
        )
        return findings
    if op.has_keyed_state:
        if explicit_max is None:
            findings.extend(_adoption(op, label, new_p, lacking))
        findings.extend(_keyed_warnings(op, label, new_p, explicit_max))
    return findings


def check_channel_state(operators: Sequence[OperatorSummary], plan: RestorePlan) -> list[Finding]:
    """Warn where an unaligned checkpoint's in-flight data meets a parallelism change.

    Flink (2.3, ``StateAssignmentOperation.reDistributeInputChannelStates`` /
    ``reDistributeResultSubpartitionStates``) restores channel state at any parallelism of an unchanged
    job: it maps each exchange's buffers through the new job's ``SubtaskStateMapper`` (keyBy, rebalance,
    shuffle, global and custom partitioners). It refuses only a changed job: an exchange that holds
    in-flight data and is now forward or rescale (``UNSUPPORTED``, when either side's parallelism
    changes) or now chained (at any parallelism). ``_metadata`` records neither partitioners nor chains,
    so kg cannot tell: one WARNING per operator holding channel state when the plan changes any
    operator's parallelism (a neighbour's change moves its buffers too); nothing at the old parallelism.
    Pinned to real Flink by ``tests/restore/test_channel_state.py``.
    """
    if not any(o.has_channel_state for o in operators):
        return []
    changed = {
        o.label: (o.parallelism, new_p)
        for o in operators
        if (new_p := _lookup(plan.parallelism_for, o) or plan.parallelism or o.parallelism) != o.parallelism
    }
    if not changed:
        return []
    moves = ", ".join(f"{label} {old} -> {new}" for label, (old, new) in list(changed.items())[:5])
    moves += f" and {len(changed) - 5} more" if len(changed) > 5 else ""
    refusals = (
        'refuses an exchange holding it that is now forward or rescale ("Cannot rescale the given '
        'pointwise partitioner. Did you change the partitioner to forward or rescale?") or now chained '
        '("Cannot recover from unaligned checkpoint when topology changes, such that data exchanges with '
        "persisted data are now chained.\"); kg cannot see partitioners or chains: keep the job's exchanges "
        "as they were, or restore at the old parallelism and take a savepoint first"
    )
    return [
        Finding(
            "CHANNEL_STATE_RESCALE",
            Severity.WARNING,
            op.label,
            f"holds in-flight data of an unaligned checkpoint (input channels {op.input_channel_bytes} "
            f"bytes, result subpartitions {op.result_subpartition_bytes} bytes) and the plan changes "
            f"parallelism ({moves}): Flink redistributes it through the new job's partitioners, and "
            + refusals,
        )
        for op in operators
        if op.has_channel_state
    ]


def _adoption(op: OperatorSummary, label: str, new_p: int, lacking: list[str] | None) -> list[Finding]:
    """Judge a job that sets no maxParallelism: does Flink adopt the state's for this operator's task?"""
    state_max = op.max_parallelism
    default = default_max_parallelism(new_p)
    if state_max == default or lacking == []:
        return []
    fix = (
        f"set maxParallelism {state_max} in the job (setMaxParallelism or pipeline.max-parallelism) "
        f"and check with -m {state_max}"
    )
    if lacking is None:
        return [
            Finding(
                "MAX_PARALLELISM_ADOPTION_UNVERIFIED",
                Severity.WARNING,
                label,
                f"a job that sets no maxParallelism restores this state (maxParallelism {state_max}) only if "
                "every operator chained with it is in the savepoint: Flink gives any other one its default "
                f"{default} at parallelism {new_p}, and the task then gets the wrong key groups or is "
                "refused; "
                "kg cannot see chains: pass --job-uids FILE with every operator of the new job to settle "
                f"it, or {fix}",
            )
        ]
    shown = ", ".join(lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
    return [
        Finding(
            "MAX_PARALLELISM_NOT_ADOPTED",
            Severity.ERROR,
            label,
            f"the new job has operators with no state in the savepoint ({shown}); a job that sets no "
            f"maxParallelism gives them its default {default} at parallelism {new_p}, and one chained with "
            f"this operator (state at maxParallelism {state_max}) makes Flink restore the task with the "
            f"wrong key groups or refuse it; {fix}",
        )
    ]


def _job_operators_lacking(uids: Collection[str], operators: Sequence[OperatorSummary]) -> list[str]:
    """Return the new job's uids (or ids) that name no operator of the savepoint, in the given order."""
    return [u for u in uids if not any(names_operator(u, op.uid, op.operator_id) for op in operators)]


def _keyed_warnings(op: OperatorSummary, label: str, new_p: int, explicit_max: int | None) -> list[Finding]:
    findings = []
    max_p = op.max_parallelism
    # Flink's ranges (computeKeyGroupRangeForOperatorIndex) differ in size by at most one key group, so
    # the hottest subtask owns ceil(maxP / p) key groups against a mean of maxP / p.
    hottest = -(-max_p // new_p)
    skew = hottest * new_p / max_p
    if skew >= UNEVEN_KEY_GROUPS_THRESHOLD:
        findings.append(
            Finding(
                "UNEVEN_KEY_GROUPS",
                Severity.WARNING,
                label,
                f"at parallelism {new_p} with maxParallelism {max_p} the busiest subtask owns {hottest} "
                f"key groups, {skew:.2f}x the mean of {max_p / new_p:.2f}; pick a parallelism that divides "
                f"{max_p} (or is much smaller than it) for an even spread",
            )
        )
    if max_p == DEFAULT_MAX_PARALLELISM and explicit_max is None and new_p >= max_p * TRAP_SHARE:
        findings.append(
            Finding(
                "DEFAULT_MAX_PARALLELISM_TRAP",
                Severity.WARNING,
                label,
                f"the state's maxParallelism is 128, Flink's default for parallelism up to 85; at "
                f"parallelism {new_p} the operator can never scale past 128 subtasks, and changing it later "
                "means rewriting the state. Set maxParallelism explicitly (setMaxParallelism or "
                "pipeline.max-parallelism) while the state is still small",
            )
        )
    return findings


def _job_operator_ids(uids: Collection[str]) -> set[str | None]:
    """Return the new job's uids plus the OperatorIDs they hash to (and 32-hex ids given as-is)."""
    ids: set[str | None] = set()
    for uid in uids:
        ids.add(uid)
        ids.add(operator_id_for_uid(uid))
        if len(uid) == 32 and all(c in "0123456789abcdefABCDEF" for c in uid):
            ids.add(uid.lower())
    return ids


# -- fix hints (kg check's text) ---------------------------------------------------------------------------

_EXCEEDS = re.compile(
    r"maximum parallelism \((\d+)\) of the restored state is lower than the configured parallelism \((\d+)\)"
)
_MISMATCH = re.compile(r"with max parallelism (\d+) to new program with max parallelism (\d+)")


def fix_hint(finding: Finding, snapshot: str) -> str | None:
    """Return what to do about a finding whose message is one of Flink's refusals, or None.

    The same fix ``kg rescale`` names for a parallelism above the state's maxParallelism (``pass -m 256``,
    ``core.keygroups.explain_bounds``): rewrite the state at a maxParallelism the new parallelism fits,
    or deploy at the state's maxParallelism or less. ``snapshot`` is the input as the user typed it.
    """
    if finding.code == "PARALLELISM_EXCEEDS_MAX_PARALLELISM" and (m := _EXCEEDS.search(finding.message)):
        state_max, new_p = int(m[1]), int(m[2])
        suggest = max(DEFAULT_MAX_PARALLELISM, 1 << (new_p - 1).bit_length())
        return (
            f"kg rescale {snapshot} --to {new_p} -m {suggest} --out NEW/ writes state that restores at "
            f"parallelism {new_p} (then set maxParallelism {suggest} in the job), or deploy at "
            f"-p {state_max} or less"
        )
    if finding.code == "MAX_PARALLELISM_MISMATCH" and (m := _MISMATCH.search(finding.message)):
        state_max, new_max = int(m[1]), int(m[2])
        return (
            f"set maxParallelism {state_max} in the job again, or rewrite the state for {new_max}: "
            f"kg rescale {snapshot} --to P -m {new_max} --out NEW/"
        )
    return None

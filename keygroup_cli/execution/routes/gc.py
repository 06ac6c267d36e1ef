"""``kg gc``'s route: plan what is orphaned, judge whether a job may write there, re-plan, delete.

A dry run is the plan alone. ``delete`` judges the job's liveness (``assess.orphans.judge_liveness``;
``force`` overrides it), then plans again, reading every ``_metadata`` anew right before deleting (a
checkpoint may have completed meanwhile), and deletes only what both plans found deletable with the same
size and mtime: files first, then the directories that left empty (``storage.sweep.remove_files``, which
re-checks each file and follows no link). ``shared/`` and ``taskowned/`` themselves stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from keygroup_cli.assess.orphans import (
    SWEPT_FOLDERS,
    GcPlan,
    Liveness,
    judge_liveness,
    plan_gc,
    require_not_live,
)
from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.storage.sweep import Removal, StoredFile, remove_files


@dataclass(frozen=True, slots=True)
class GcResult:
    """The plan shown (the second one when deleting), how liveness was judged, and what was removed."""

    plan: GcPlan
    liveness: Liveness | None
    removal: Removal | None


def collect_garbage(
    path: str,
    savepoints: Sequence[str] = (),
    *,
    delete: bool = False,
    older_than: float | None = None,
    force: bool = False,
    ha: str | None = None,
    on_progress: OnProgress = no_progress,
) -> GcResult:
    """Plan ``kg gc`` for ``path`` and, with ``delete``, remove the orphans nothing holds.

    Raises:
        LeaderLiveError: ``delete`` while a job may write there, without ``force`` (exit 7).
        InvalidArgumentError: ``ha`` for a directory not named by its job id (exit 2).
        InvalidInputError, UnsupportedFormatError, InvalidArgumentError: from ``plan_gc`` (3, 4, 2).
    """
    plan = plan_gc(path, savepoints, older_than=older_than, force=force, on_progress=on_progress)
    if ha is not None and plan.job_id is None:
        raise InvalidArgumentError(
            f"--ha: {plan.directory} is not named by a job id (32 hex digits), so kg cannot tell which job "
            "of the HA store writes there; name the job directory <checkpoints>/<job id>",
            code="GC_JOB_UNKNOWN",
        )
    liveness = judge_liveness(plan, ha=ha, older_than=older_than) if (delete or ha) else None
    if not delete:
        return GcResult(plan, liveness, None)
    assert liveness is not None
    if not force:
        require_not_live(liveness)
    again = plan_gc(path, savepoints, older_than=older_than, force=force, on_progress=on_progress)
    first = {(o.path, o.size, o.mtime) for o in plan.deletable}
    chosen = [o.stored() for o in again.deletable if (o.path, o.size, o.mtime) in first]
    done = [0]

    def removed(_file: StoredFile) -> None:
        done[0] += 1
        on_progress("delete", done[0], len(chosen))

    on_progress("delete", 0, len(chosen))
    removal = remove_files(
        again.root,
        chosen,
        directories=again.directories,
        keep=lambda rel: rel in SWEPT_FOLDERS,
        on_removed=removed,
    )
    return GcResult(again, liveness, removal)


__all__ = ["GcResult", "collect_garbage"]

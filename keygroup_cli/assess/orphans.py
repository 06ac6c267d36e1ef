"""What ``kg gc`` may delete from a Flink job's checkpoint directory: the files nothing retained names.

A job's checkpoint directory (``<state.checkpoints.dir>/<job id>/``) holds ``chk-N/`` (one per checkpoint:
its ``_metadata`` and exclusive files), ``shared/`` (RocksDB's incremental SST files, used by several
checkpoints) and ``taskowned/`` (file-merging and task-owned state). Flink deletes what a subsumed
checkpoint alone used, but a crash between an upload and its ``_metadata``, an aborted checkpoint or a
lost notification leaves files that nothing references, forever (FLINK-38909, FLINK-30461).

``plan_gc`` lists every file under ``shared/``, ``taskowned/`` and ``chk-*``, then reads every retained
checkpoint's ``_metadata`` (each ``chk-N`` that has one), any other ``_metadata`` under the directory, and
every savepoint or checkpoint given with ``savepoints``, and resolves each file reference in them
(relative or absolute, RocksDB shared, private and metadata files, changelog files, file-merging segments:
``flink.state_references``) through ``storage.containment``, as every reader of kg does. A listed file is:

- referenced: a reference resolves to it; never deleted;
- held by name: it has the name of a file some reference names outside this directory, or names here
  where no file is (never guessed away);
- skipped: a symbolic link or a special file (never followed, never deleted), or a ``_metadata``;
- orphaned: anything else. A ``chk-N`` without ``_metadata`` is orphaned as a whole, except the newest
  ``chk-N`` when no completed one is newer: it may be in progress, and is deleted only with ``force``.

An orphan is held when it is younger than ``older_than`` seconds. A ``_metadata`` kg cannot read, or a
handle it does not know, raises: nothing is decided on a guess. ``judge_liveness`` says whether a job may
still write into the directory (its HA store's leader, else how recently a file under it was written).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from keygroup_cli.core.errors import (
    InvalidArgumentError,
    InvalidInputError,
    LeaderLiveError,
    UnsupportedFormatError,
)
from keygroup_cli.core.progress import OnProgress, no_progress
from keygroup_cli.flink import open_savepoint, state_references
from keygroup_cli.storage.containment import OUTSIDE_CODE, Roots, contain, input_roots
from keygroup_cli.storage.locations import Location, is_remote, location
from keygroup_cli.storage.sweep import FILE, StoredFile, list_tree

METADATA = "_metadata"
#: The folders of a job directory besides ``chk-N`` that kg gc sweeps; themselves never removed.
SWEPT_FOLDERS = ("shared", "taskowned")
CHECKPOINT = re.compile(r"chk-(\d+)")
JOB_ID = re.compile(r"[0-9a-fA-F]{32}")
#: Without an HA store to ask, a job counts as possibly live while a file under its directory was written
#: within this many seconds (or within ``older_than``, if longer).
QUIET_SECONDS = 3600.0

Directory = Path | Location


@dataclass(frozen=True, slots=True)
class Orphan:
    """A file no retained checkpoint and no given savepoint references.

    Attributes:
        path: Relative to the job directory (``shared/4dec…``, ``chk-7/2f1c…``).
        size: Bytes.
        mtime: Last modification (seconds since the epoch).
        reason: Why it is orphaned.
        hold: Why it is not deleted now (too young, a checkpoint that may be in progress), or None.
    """

    path: str
    size: int
    mtime: float
    reason: str
    hold: str | None = None

    def stored(self) -> StoredFile:
        """Return the listing entry the deletion re-checks (same size and mtime, still a file)."""
        return StoredFile(self.path, self.size, self.mtime, FILE)


@dataclass(frozen=True, slots=True)
class GcPlan:
    """What ``kg gc`` found in one job's checkpoint directory, and what it may delete.

    Attributes:
        directory: The job directory, as a path or URI.
        job_id: Its name when that is a Flink job id (32 hex digits), else None.
        checkpoints: The retained checkpoints (``chk-N`` with ``_metadata``), ascending.
        incomplete: The ``chk-N`` without ``_metadata``, ascending.
        in_progress: The newest of those when no completed checkpoint is newer (deleted only with force).
        savepoints: The other ``_metadata`` files read: any under the directory besides ``chk-N/_metadata``,
            and those of the given savepoints and checkpoints.
        referenced_files, referenced_bytes: Listed files some reference resolves to.
        orphans: Every orphaned file, with ``hold`` set where it is not deleted now.
        skipped: ``(path, why)`` of entries never touched (links, special files, name matches).
        outside: References that lead outside every place they may (kg reads none of them): a file of
            their name in the directory is held, never guessed away.
        missing: References that resolve into the directory but name no file there (a file of that name
            elsewhere in it is held, never guessed away).
        directories: Incomplete ``chk-N`` folders removed (when empty) after their files.
        newest_change: The latest mtime of a file under the directory (``dstl/`` too), or None. Folders
            do not count: kg gc's own deletions change theirs.
    """

    directory: str
    job_id: str | None
    checkpoints: tuple[int, ...]
    incomplete: tuple[int, ...]
    in_progress: int | None
    savepoints: tuple[str, ...]
    referenced_files: int
    referenced_bytes: int
    orphans: tuple[Orphan, ...]
    skipped: tuple[tuple[str, str], ...]
    outside: tuple[str, ...]
    missing: tuple[str, ...]
    directories: tuple[str, ...]
    newest_change: float | None
    root: Directory = field(repr=False, compare=False, default=Path("."))

    @property
    def deletable(self) -> tuple[Orphan, ...]:
        """Return the orphans nothing holds."""
        return tuple(o for o in self.orphans if o.hold is None)

    @property
    def orphan_bytes(self) -> int:
        """Return the bytes of every orphan."""
        return sum(o.size for o in self.orphans)

    @property
    def deletable_bytes(self) -> int:
        """Return the bytes of the orphans nothing holds."""
        return sum(o.size for o in self.deletable)


@dataclass(frozen=True, slots=True)
class Liveness:
    """Whether a job may still write into the directory, and how kg judged it.

    Attributes:
        method: ``"ha"`` (the job's HA store was read) or ``"quiet"`` (how long nothing changed).
        live: True when a job may write there now.
        reason: One sentence.
    """

    method: str
    live: bool
    reason: str


def job_directory(path: str) -> tuple[Directory, str | None]:
    """Return the job's checkpoint directory ``path`` names, and its job id if its name is one.

    ``path`` is the job directory (``<checkpoints>/<job id>``, holding ``chk-N``, ``shared/``,
    ``taskowned/``) or the checkpoint base directory above it, when that holds exactly one job.

    Raises:
        InvalidInputError: No such directory, or none of a Flink job (exit 3).
        InvalidArgumentError: One checkpoint or a savepoint was named, or a base directory of several
            jobs (exit 2).
    """
    p: Directory = location(path) if is_remote(path) else Path(path)
    if not p.is_dir():
        raise InvalidInputError(f"{path}: no such directory", code="SNAPSHOT_NOT_FOUND")
    if CHECKPOINT.fullmatch(p.name):
        raise InvalidArgumentError(
            f"{path} is one checkpoint; name its job directory ({p.parent}): kg gc weighs every checkpoint "
            "there before it deletes anything",
            code="GC_NOT_A_JOB_DIRECTORY",
        )
    if (p / METADATA).is_file():
        raise InvalidArgumentError(
            f"{path} is a savepoint, not a job's checkpoint directory; give it with --savepoint to keep "
            "the files it names",
            code="GC_NOT_A_JOB_DIRECTORY",
        )
    if _is_job(_subdirs(p)):
        return p, p.name if JOB_ID.fullmatch(p.name) else None
    jobs = [c for c in _subdirs(p) if JOB_ID.fullmatch(c.name) and _is_job(_subdirs(c))]
    if len(jobs) == 1:
        return jobs[0], jobs[0].name
    if jobs:
        names = ", ".join(sorted(j.name for j in jobs))
        raise InvalidArgumentError(
            f"{path} holds the checkpoints of {len(jobs)} jobs ({names}); name one: {path}/<job id>",
            code="GC_SEVERAL_JOBS",
        )
    raise InvalidInputError(
        f"{path}: not a Flink job's checkpoint directory (no chk-N, shared/ or taskowned/ in it, nor in "
        "one <job id>/ below it)",
        code="GC_NOT_A_CHECKPOINT_DIRECTORY",
    )


def plan_gc(
    path: str,
    savepoints: Sequence[str] = (),
    *,
    older_than: float | None = None,
    force: bool = False,
    now: float | None = None,
    on_progress: OnProgress = no_progress,
) -> GcPlan:
    """Find the orphaned files of the job's checkpoint directory ``path`` (see the module docstring).

    Args:
        path: The job directory, or the checkpoint base directory of one job (``job_directory``).
        savepoints: Savepoints or checkpoints whose references are kept too (a savepoint, a ``chk-N``, a
            ``_metadata`` file, or another job's directory: every retained checkpoint in it).
        older_than: Hold orphans modified less than this many seconds ago (None: hold none for age).
        force: Also delete the newest ``chk-N`` without ``_metadata`` (it may be in progress).
        now: The time ages are measured against (default: now).
        on_progress: Told of each ``_metadata`` read (stage ``read _metadata``).

    Raises:
        InvalidInputError: A ``_metadata`` that cannot be read or is corrupt, a reference that is no
            file name, no such directory (exit 3).
        UnsupportedFormatError: A ``_metadata`` version or state handle kg does not know (exit 4).
        InvalidArgumentError: ``path`` names no job directory (exit 2).
    """
    now = time.time() if now is None else now
    root, job_id = job_directory(path)
    # Files first, then _metadata: a checkpoint completing in between names files the listing holds.
    everything = list_tree(root, lambda _name: True)
    listed = [f for f in everything if _swept(f.path.split("/", 1)[0])]
    for f in listed:
        if f.kind != FILE and "/" not in f.path and CHECKPOINT.fullmatch(f.path):
            raise InvalidInputError(
                f"{root}/{f.path} is a symbolic link: kg gc follows no link, so it cannot tell what that "
                "checkpoint references; replace the link by the directory or remove it",
                code="GC_LINKED_CHECKPOINT",
            )
    numbers = {int(m.group(1)) for f in listed if (m := CHECKPOINT.fullmatch(f.path.split("/", 1)[0]))}
    if not (isinstance(root, Location) and root.local_path is None):  # an empty chk-N (none on a store)
        numbers |= {int(m.group(1)) for c in _subdirs(root) if (m := CHECKPOINT.fullmatch(c.name))}
    completed = sorted(n for n in numbers if (root / f"chk-{n}" / METADATA).is_file())
    incomplete = sorted(numbers - set(completed))
    newest = max(completed, default=-1)
    in_progress = incomplete[-1] if incomplete and incomplete[-1] > newest else None

    refs = _References(root)
    # Any other _metadata under the directory (a savepoint written into it, a copied checkpoint) counts too.
    given = [
        root / f.path
        for f in everything
        if f.kind == FILE
        and f.path.rsplit("/", 1)[-1] == METADATA
        and not (CHECKPOINT.fullmatch(f.path.split("/", 1)[0]) and f.path.count("/") == 1)
    ]
    given += [f for sp in savepoints for f in _metadata_files(sp)]
    total = len(completed) + len(given)
    for i, n in enumerate(completed):
        on_progress("read _metadata", i, total)
        refs.add(root / f"chk-{n}" / METADATA, _job_roots(root))
    for i, metadata_file in enumerate(given, len(completed)):
        on_progress("read _metadata", i, total)
        refs.add(metadata_file, None)
    on_progress("read _metadata", total, total)
    read = [str(f) for f in given]

    orphans: list[Orphan] = []
    skipped: list[tuple[str, str]] = []
    referenced = [0, 0]
    present = {refs.key(root, f.path) for f in everything}
    missing_keys = sorted(k for k in refs.keys if k not in present)
    held = dict(refs.names)  # names a reference leads to outside, or to no file here: never guessed away
    for k in missing_keys:
        held.setdefault(
            k.rsplit("/", 1)[-1], f"{root}/{k[len(refs.prefix) :]}, missing, in {refs.sources[k]}"
        )
    for f in listed:
        key = refs.key(root, f.path)
        top, _, rest = f.path.partition("/")
        name = f.path.rsplit("/", 1)[-1]
        if f.kind != FILE:
            what = "a symbolic link" if f.kind == "link" else "not a regular file"
            skipped.append((f.path, f"{what}: never followed or deleted"))
        elif name == METADATA:
            if rest != METADATA:
                skipped.append((f.path, "a _metadata file: never deleted"))
        elif key in refs.keys:
            referenced[0] += 1
            referenced[1] += f.size
        elif name in held:
            skipped.append((f.path, f"has the name of a file a reference names elsewhere ({held[name]})"))
        else:
            orphans.append(_orphan(f, top, completed, in_progress, older_than, force, now))
    missing = [f"{root}/{k[len(refs.prefix) :]}" for k in missing_keys]
    directories = tuple(f"chk-{n}" for n in incomplete if n != in_progress or force)
    return GcPlan(
        directory=str(root),
        job_id=job_id,
        checkpoints=tuple(completed),
        incomplete=tuple(incomplete),
        in_progress=in_progress,
        savepoints=tuple(read),
        referenced_files=referenced[0],
        referenced_bytes=referenced[1],
        orphans=tuple(orphans),
        skipped=tuple(skipped),
        outside=tuple(sorted(refs.outside)),
        missing=tuple(missing),
        directories=directories,
        newest_change=max((f.mtime for f in everything), default=None),
        root=root,
    )


def judge_liveness(
    plan: GcPlan, *, ha: str | None = None, older_than: float | None = None, now: float | None = None
) -> Liveness:
    """Judge whether a job may still write into the plan's directory.

    With ``ha`` (``zk://…`` or an exported HA ConfigMap) its store says whether a JobManager leads the job
    (``keygroup_cli.ha``). Without, kg cannot see the job: it counts as possibly live while a file under
    the directory was written within ``max(older_than, QUIET_SECONDS)`` seconds (a running job writes a
    checkpoint at least once per interval; one that checkpoints less often needs a longer ``older_than``).

    Raises:
        InvalidArgumentError, InvalidInputError, MissingDependencyError: from reading the HA store.
    """
    if ha is not None:
        from keygroup_cli.ha import resolve

        resolution = resolve(ha, plan.job_id)
        if resolution.live_leader:
            reason = (
                f"job {resolution.job_id} has a live leader in its HA store, {resolution.leader_text()}: "
                + "; ".join(resolution.live_reasons)
            )
            return Liveness("ha", True, reason)
        return Liveness(
            "ha", False, f"no live leader for job {resolution.job_id} in {resolution.store} ({ha})"
        )
    now = time.time() if now is None else now
    quiet = max(older_than or 0.0, QUIET_SECONDS)
    if plan.newest_change is None:
        return Liveness("quiet", False, "no file under the directory")
    age = max(0.0, now - plan.newest_change)
    if age < quiet:
        return Liveness(
            "quiet",
            True,
            f"a file under {plan.directory} was written {duration_text(age)} ago, within "
            f"{duration_text(quiet)}, and no HA store was given (--ha) to tell whether its job still runs",
        )
    return Liveness("quiet", False, f"no file under the directory was written for {duration_text(age)}")


def require_not_live(liveness: Liveness) -> None:
    """Refuse to delete while a job may write (exit 7); ``--force`` callers skip this.

    Raises:
        LeaderLiveError: ``HA_LEADER_LIVE`` (the HA store names a live leader) or ``JOB_MAY_BE_LIVE``.
    """
    if not liveness.live:
        return
    if liveness.method == "ha":
        raise LeaderLiveError(
            f"{liveness.reason}; it may write a checkpoint at any moment, so kg gc deletes nothing: stop the "
            "job, or wait for its lease or session to expire (--force deletes anyway)",
            code="HA_LEADER_LIVE",
        )
    raise LeaderLiveError(
        f"{liveness.reason}; kg gc deletes nothing while a job may still write there: give its HA store "
        "(--ha zk://… or a ConfigMap export), wait, or use --force if no job writes there",
        code="JOB_MAY_BE_LIVE",
    )


def parse_duration(text: str) -> float:
    """Return the seconds of ``0``, ``90s``, ``30m``, ``12h``, ``7d`` or ``2w`` (also ``1h30m``).

    Raises:
        InvalidArgumentError: Anything else (exit 2).
    """
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    cleaned = text.strip().lower()
    if cleaned == "0":
        return 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise InvalidArgumentError(
            f"--older-than {text!r}: not a duration (0, 90s, 30m, 12h, 7d, 2w, 1h30m)",
            code="INVALID_DURATION",
        )
    return float(sum(float(n) * units[u] for n, u in parts))


def duration_text(seconds: float) -> str:
    """Return ``seconds`` as a short duration (``45s``, ``12m``, ``3.5h``, ``2.0d``)."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


# -- internals ---------------------------------------------------------------------------------------------


def _swept(name: str) -> bool:
    return name in SWEPT_FOLDERS or CHECKPOINT.fullmatch(name) is not None


def _is_job(children: Iterable[Directory]) -> bool:
    return any(_swept(c.name) for c in children)


def _subdirs(p: Directory) -> list[Directory]:
    if isinstance(p, Location):
        return [c for c in p.iterdir() if c.is_dir()]
    try:
        return [c for c in p.iterdir() if c.is_dir() and not c.is_symlink()]
    except OSError:
        return []


def _job_roots(root: Directory) -> Roots:
    """Where a retained checkpoint's references may lead and still be this directory's: all of it."""
    return input_roots(root)


def _metadata_files(given: str) -> list[Directory]:
    """Return the ``_metadata`` files of a ``--savepoint`` value (every retained one of a job directory).

    Raises:
        InvalidInputError: Nothing there (exit 3).
    """
    p: Directory = location(given) if is_remote(given) else Path(given)
    if p.is_dir() and not (p / METADATA).is_file() and _is_job(_subdirs(p)):
        found = sorted(
            (int(m.group(1)), c / METADATA)
            for c in _subdirs(p)
            if (m := CHECKPOINT.fullmatch(c.name)) and (c / METADATA).is_file()
        )
        if found:
            return [f for _n, f in found]
    return [open_savepoint(given, contained=False).metadata_path]


def _orphan(
    f: StoredFile,
    top: str,
    completed: Sequence[int],
    in_progress: int | None,
    older_than: float | None,
    force: bool,
    now: float,
) -> Orphan:
    match = CHECKPOINT.fullmatch(top)
    number = int(match.group(1)) if match else None
    if number is None:
        reason = "no retained checkpoint or given savepoint names it"
    elif number in completed:
        reason = f"in {top}, whose _metadata does not name it"
    else:
        reason = f"{top} has no _metadata (an aborted or incomplete checkpoint)"
    hold = None
    if number is not None and number == in_progress and not force:
        hold = f"{top} is the newest checkpoint and has no _metadata yet: it may be in progress (--force)"
    elif older_than is not None and now - f.mtime < older_than:
        hold = (
            f"modified {duration_text(max(0.0, now - f.mtime))} ago, younger than {duration_text(older_than)}"
        )
    return Orphan(f.path, f.size, f.mtime, reason, hold)


class _References:
    """Every file reference of the ``_metadata`` files read, resolved: keys inside, names of the rest."""

    def __init__(self, root: Directory) -> None:
        self.root = root
        self.prefix = self._root_key(root) + "/"
        self.keys: set[str] = set()
        self.sources: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.outside: set[str] = set()
        self._gc_roots = input_roots(root)

    def add(self, metadata_file: Directory, roots: Roots | None) -> None:
        """Read one ``_metadata`` and resolve every reference in it.

        Raises:
            InvalidInputError, UnsupportedFormatError: As ``open_savepoint`` and ``state_references``.
        """
        savepoint = open_savepoint(metadata_file, contained=False)
        directory = savepoint.metadata_path.parent
        if roots is None:  # a given savepoint: its own roots, and this job directory
            own = input_roots(directory)
            roots = Roots(own.local + self._gc_roots.local, own.remote + self._gc_roots.remote)
        for reference, relative in state_references(savepoint.metadata):
            self._resolve(reference, relative, directory, roots, str(metadata_file))

    def _resolve(
        self, reference: str, relative: bool, directory: Directory, roots: Roots, source: str
    ) -> None:
        name = reference.rstrip("/").rsplit("/", 1)[-1]
        try:
            target = contain(reference, directory, relative=relative, roots=roots)
        except InvalidInputError as exc:
            if exc.code != OUTSIDE_CODE:
                raise  # not a file name: a damaged _metadata, nothing is decided on it
            target = None
        except UnsupportedFormatError:
            target = None  # a file system kg does not know, or a local path named on an object store
        if target is not None:
            key = self._key_of(target)
            if key.startswith(self.prefix):
                self.keys.add(key)
                self.sources.setdefault(key, source)
                return
            local = target.local_path if isinstance(target, Location) else target
            if local is None or os.path.lexists(local):
                return  # a file of a given savepoint's own (or one KG_STATE_ROOTS allows): not kg gc's
            # Named outside, where no file is: a copy of it here may be what a user restores.
        self.outside.add(reference)
        self.names.setdefault(name, f"{reference} in {source}")

    def key(self, root: Directory, rel: str) -> str:
        return self.prefix + rel

    @staticmethod
    def _root_key(root: Directory) -> str:
        if isinstance(root, Location) and root.local_path is None:
            return "remote:" + root.path.rstrip("/")
        local = root.local_path if isinstance(root, Location) else root
        assert local is not None
        return os.path.realpath(local)

    @staticmethod
    def _key_of(place: Directory) -> str:
        if isinstance(place, Location) and place.local_path is None:
            return "remote:" + place.path.rstrip("/")
        local = place.local_path if isinstance(place, Location) else place
        assert local is not None
        text = os.fspath(local)
        head, tail = os.path.split(text.rstrip(os.sep))
        return os.path.join(os.path.realpath(head or "."), tail) if tail else os.path.realpath(text)


__all__ = [
    "QUIET_SECONDS",
    "SWEPT_FOLDERS",
    "GcPlan",
    "Liveness",
    "Orphan",
    "duration_text",
    "judge_liveness",
    "job_directory",
    "parse_duration",
    "plan_gc",
    "require_not_live",
]

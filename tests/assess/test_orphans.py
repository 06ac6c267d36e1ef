"""kg gc's decision (``assess.orphans``) on crafted copies of real Flink 2.3 checkpoint directories.

The RocksDB incremental checkpoint ``uid-rocksdb-incremental-p3`` (``chk-3`` plus ``shared/`` SST files
named by absolute paths of the generator's temp directory, found beside it as every kg reader finds them)
is copied to a temp directory, and orphans are made: stray files, aborted and in-progress checkpoints, a
dropped ``_metadata``, links. The fixtures themselves are never modified.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import pytest

from keygroup_cli.assess.orphans import (
    QUIET_SECONDS,
    job_directory,
    judge_liveness,
    parse_duration,
    plan_gc,
)
from keygroup_cli.core.errors import InvalidArgumentError, InvalidInputError, UnsupportedFormatError
from keygroup_cli.flink import FileHandle, IncrementalKeyedHandle, state_references
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.flink.metadata.writer import write_metadata
from tests.conftest import FIXTURES

CASE = FIXTURES / "flink" / "2.3" / "uid-rocksdb-incremental-p3"
JOB = "0000000000006b670000000000007569"
HOUR = 3600.0


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "checkpoints" / JOB
    shutil.copytree(CASE / JOB, job)
    return job


def _age(root: Path, seconds: float) -> None:
    """Set every mtime under ``root`` (links themselves, not their targets) ``seconds`` into the past."""
    then = time.time() - seconds
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (then, then), follow_symlinks=False)
    os.utime(root, (then, then))


def _write(path: Path, data: bytes = b"leaked") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_every_file_a_retained_checkpoint_names_is_referenced(tmp_path):
    job = _job(tmp_path)
    plan = plan_gc(str(job))
    files = [p for p in job.rglob("*") if p.is_file() and p.name != "_metadata"]
    assert plan.checkpoints == (3,) and plan.orphans == () and plan.skipped == ()
    assert plan.referenced_files == len(files) == 31
    assert plan.referenced_bytes == sum(p.stat().st_size for p in files)
    assert plan.missing == () and plan.outside == ()
    # The base directory of one job names the same job directory.
    again = plan_gc(str(tmp_path / "checkpoints"))
    assert again.directory == str(job) and again.job_id == JOB and again.referenced_files == 31


def test_strays_aborted_and_in_progress_checkpoints(tmp_path):
    job = _job(tmp_path)
    sst = next((job / "shared").iterdir())
    _write(job / "shared" / "0a1b2c3d-leaked", sst.read_bytes())  # a copy of a real SST, under a new name
    _write(job / "shared" / "merged" / "segment-7")  # a nested (file-merging style) file
    _write(job / "taskowned" / "tm-1" / "state")
    _write(job / "chk-1" / "f1")  # aborted: older than the newest completed checkpoint
    _write(job / "chk-3" / "not-in-metadata")  # a completed checkpoint's stray
    _write(job / "chk-4" / "f4")  # newest, no _metadata: may be in progress
    plan = plan_gc(str(job))
    by_path = {o.path: o for o in plan.orphans}
    assert set(by_path) == {
        "shared/0a1b2c3d-leaked",
        "shared/merged/segment-7",
        "taskowned/tm-1/state",
        "chk-1/f1",
        "chk-3/not-in-metadata",
        "chk-4/f4",
    }
    assert plan.incomplete == (1, 4) and plan.in_progress == 4 and plan.directories == ("chk-1",)
    assert "may be in progress" in (by_path["chk-4/f4"].hold or "")
    assert all(o.hold is None for p, o in by_path.items() if p != "chk-4/f4")
    assert "no _metadata" in by_path["chk-1/f1"].reason
    assert "does not name it" in by_path["chk-3/not-in-metadata"].reason
    assert plan.referenced_files == 31 and plan.orphan_bytes == sst.stat().st_size + 5 * len(b"leaked")
    forced = plan_gc(str(job), force=True)
    assert forced.deletable == forced.orphans and forced.directories == ("chk-1", "chk-4")


def test_older_than_holds_young_orphans(tmp_path):
    job = _job(tmp_path)
    old = _write(job / "shared" / "old")
    young = _write(job / "shared" / "young")
    past = time.time() - 2 * HOUR
    os.utime(old, (past, past))
    plan = plan_gc(str(job), older_than=HOUR)
    holds = {o.path: o.hold for o in plan.orphans}
    assert holds["shared/old"] is None
    assert holds["shared/young"] is not None and "younger than 60m" in holds["shared/young"]
    assert [o.path for o in plan.deletable] == ["shared/old"]
    assert young.exists()


def test_a_dropped_metadata_orphans_what_only_that_checkpoint_named(tmp_path):
    job = _job(tmp_path)
    named = {r.rsplit("/", 1)[-1] for r, _ in state_references(read_flink_metadata(job / "chk-3").metadata)}
    (job / "chk-3" / "_metadata").unlink()
    plan = plan_gc(str(job), force=True)
    orphaned = {o.path.rsplit("/", 1)[-1] for o in plan.orphans}
    assert orphaned == named and plan.referenced_files == 0
    assert plan.checkpoints == () and plan.in_progress == 3


def test_a_given_savepoint_keeps_what_it_names(tmp_path):
    """A job restored from this directory (LEGACY mode) names its shared files: --savepoint keeps them."""
    job = _job(tmp_path)
    snapshot = read_flink_metadata(job / "chk-3")
    other = tmp_path / "other-job" / "chk-12"
    shutil.copytree(job / "chk-3", other)

    def into_shared(entry):  # the other job's handles name this job's shared/ files by absolute path
        if not isinstance(entry.handle, FileHandle):
            return entry
        name = entry.handle.path.rsplit("/", 1)[-1]
        return dataclasses.replace(
            entry, handle=FileHandle((job / "shared" / name).as_uri(), entry.handle.size)
        )

    operators = []
    for op in snapshot.metadata.operators:
        subs = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if isinstance(keyed, IncrementalKeyedHandle):
                keyed = dataclasses.replace(
                    keyed,
                    shared=tuple(into_shared(e) for e in keyed.shared),
                    private=tuple(
                        into_shared(e) for e in keyed.private
                    ),  # Flink 2.3 puts those in shared/ too
                )
            subs.append(dataclasses.replace(sub, managed_keyed_state=keyed))
        operators.append(dataclasses.replace(op, subtasks=tuple(subs)))
    (other / "_metadata").write_bytes(
        write_metadata(dataclasses.replace(snapshot.metadata, operators=tuple(operators)))
    )
    (job / "chk-3" / "_metadata").unlink()
    alone = plan_gc(str(job), force=True)
    kept = plan_gc(str(job), [str(other)], force=True)
    shared = {p.name for p in (job / "shared").iterdir()}
    assert {o.path for o in alone.orphans if o.path.startswith("shared/")} == {f"shared/{n}" for n in shared}
    assert not [o for o in kept.orphans if o.path.startswith("shared/")]
    assert kept.referenced_files == len(shared) and kept.savepoints == (str(other / "_metadata"),)
    # Its job directory works as well: every retained checkpoint in it.
    assert plan_gc(str(job), [str(tmp_path / "other-job")], force=True).referenced_files == len(shared)


def test_a_reference_outside_holds_files_of_its_name(tmp_path):
    """A handle naming a file outside the directory: a file of that name here is never guessed away."""
    job = _job(tmp_path)
    snapshot = read_flink_metadata(job / "chk-3")
    # Not where kg looks for a copy of it (beside _metadata, shared/, x/): kg reads the file outside.
    outside = _write(tmp_path / "elsewhere" / "x" / "ffff-outside")
    _write(job / "taskowned" / "ffff-outside")
    ops = list(snapshot.metadata.operators)
    for i, op in enumerate(ops):
        subs = list(op.subtasks)
        for j, sub in enumerate(subs):
            keyed = sub.managed_keyed_state
            if isinstance(keyed, IncrementalKeyedHandle) and keyed.shared:
                first = dataclasses.replace(keyed.shared[0], handle=FileHandle(outside.as_uri(), 6))
                keyed = dataclasses.replace(keyed, shared=(first, *keyed.shared[1:]))
                subs[j] = dataclasses.replace(sub, managed_keyed_state=keyed)
                break
        else:
            continue
        ops[i] = dataclasses.replace(op, subtasks=tuple(subs))
        break
    (job / "chk-3" / "_metadata").write_bytes(
        write_metadata(dataclasses.replace(snapshot.metadata, operators=tuple(ops)))
    )
    plan = plan_gc(str(job))
    assert ("taskowned/ffff-outside" in dict(plan.skipped)) and outside.as_uri() in plan.outside
    assert "taskowned/ffff-outside" not in {o.path for o in plan.orphans}
    # The SST that handle named before is now named by nothing: an orphan.
    assert len(plan.orphans) == 1 and plan.orphans[0].path.startswith("shared/")


def test_links_are_skipped_never_followed(tmp_path):
    job = _job(tmp_path)
    target = _write(tmp_path / "precious")
    (job / "shared" / "link").symlink_to(target)
    (job / "taskowned").mkdir()
    (job / "taskowned" / "dirlink").symlink_to(tmp_path, target_is_directory=True)
    plan = plan_gc(str(job))
    assert dict(plan.skipped).keys() == {"shared/link", "taskowned/dirlink"}
    assert plan.orphans == ()
    (job / "chk-9").symlink_to(job / "chk-3", target_is_directory=True)
    with pytest.raises(InvalidInputError) as linked:
        plan_gc(str(job))
    assert linked.value.code == "GC_LINKED_CHECKPOINT"


def test_an_unreadable_metadata_stops_everything(tmp_path):
    job = _job(tmp_path)
    _write(job / "shared" / "stray")
    shutil.copytree(job / "chk-3", job / "chk-5")
    data = (job / "chk-5" / "_metadata").read_bytes()
    (job / "chk-5" / "_metadata").write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidInputError):
        plan_gc(str(job))
    (job / "chk-5" / "_metadata").write_bytes(data[:4] + (99).to_bytes(4, "big") + data[8:])
    with pytest.raises(UnsupportedFormatError):
        plan_gc(str(job))
    (job / "chk-5" / "_metadata").write_bytes(data)
    assert [o.path for o in plan_gc(str(job)).orphans] == ["shared/stray"]


def test_what_is_not_a_job_directory(tmp_path):
    job = _job(tmp_path)
    with pytest.raises(InvalidArgumentError) as one:
        job_directory(str(job / "chk-3"))
    assert one.value.code == "GC_NOT_A_JOB_DIRECTORY" and str(job) in one.value.message
    savepoint = FIXTURES / "flink" / "2.3" / "uid-rocksdb-native-p3"
    with pytest.raises(InvalidArgumentError) as sp:
        job_directory(str(savepoint))
    assert "--savepoint" in sp.value.message
    shutil.copytree(job, tmp_path / "checkpoints" / ("f" * 32))
    with pytest.raises(InvalidArgumentError) as several:
        job_directory(str(tmp_path / "checkpoints"))
    assert several.value.code == "GC_SEVERAL_JOBS"
    with pytest.raises(InvalidInputError) as none:
        job_directory(str(tmp_path))
    assert none.value.code == "GC_NOT_A_CHECKPOINT_DIRECTORY"
    with pytest.raises(InvalidInputError):
        job_directory(str(tmp_path / "missing"))


def test_liveness_without_an_ha_store_is_how_long_nothing_changed(tmp_path):
    job = _job(tmp_path)
    _age(job, 2 * HOUR)
    quiet = judge_liveness(plan_gc(str(job)))
    assert quiet.method == "quiet" and not quiet.live
    _write(job / "shared" / "new-sst")
    fresh = judge_liveness(plan_gc(str(job)))
    assert fresh.live and "no HA store was given" in fresh.reason
    _age(job, 2 * HOUR)
    # A longer --older-than asks for a longer quiet period.
    assert judge_liveness(plan_gc(str(job)), older_than=3 * HOUR).live
    # A checkpoint being written: its first file counts; folders do not (kg gc's own deletions touch them).
    (job / "chk-4").mkdir()
    assert not judge_liveness(plan_gc(str(job))).live
    _write(job / "chk-4" / "first-file")
    assert judge_liveness(plan_gc(str(job))).live
    assert QUIET_SECONDS == HOUR


def test_durations():
    assert parse_duration("0") == 0.0
    assert parse_duration("90s") == 90 and parse_duration("30m") == 1800 and parse_duration("7d") == 604800
    assert parse_duration("1h30m") == 5400 and parse_duration("2w") == 1209600
    for bad in ("", "7", "1x", "-1h", "h", "1h 2m"):
        with pytest.raises(InvalidArgumentError):
            parse_duration(bad)


#: Every retained checkpoint among the fixtures: Flink 1.15 … 2.3; HashMap, RocksDB and ForSt incremental,
#: changelog (dstl/), unaligned (channel state), finished operators.
CHECKPOINT_JOBS = sorted({p.parent for p in (FIXTURES / "flink").glob("*/*/*/chk-*")})


@pytest.mark.parametrize("job", CHECKPOINT_JOBS, ids=lambda p: f"{p.parents[1].name}/{p.parent.name}")
def test_every_real_checkpoint_names_every_file_of_its_directory(job, tmp_path):
    copy = tmp_path / job.name
    shutil.copytree(job, copy)
    plan = plan_gc(str(copy))
    swept = [
        p for p in copy.rglob("*")
        if p.is_file() and p.name != "_metadata" and p.relative_to(copy).parts[0] != "dstl"
    ]  # fmt: skip
    assert (plan.orphans, plan.skipped, plan.missing, plan.outside) == ((), (), (), ())
    assert plan.referenced_files == len(swept) and len(plan.checkpoints) == 1


def test_a_file_merging_segment_keeps_its_whole_physical_file(tmp_path):
    """Flink's file merging (FLIP-306) stores state as segments of shared files: the file is referenced."""
    from keygroup_cli.flink import KeyGroupsHandle, SegmentFileHandle

    heap = (
        FIXTURES / "flink" / "2.3" / "heap-checkpoint-p2-maxp128-string" / "0000000000006b670000000000000005"
    )
    job = tmp_path / heap.name
    shutil.copytree(heap, job)
    snapshot = read_flink_metadata(job / "chk-2")
    merged = job / "shared" / "subtask-0" / "merged-0"
    moved = []
    operators = []
    for op in snapshot.metadata.operators:
        subs = []
        for sub in op.subtasks:
            keyed = sub.managed_keyed_state
            if op.label == "keyed-state" and sub.index == 0 and isinstance(keyed, KeyGroupsHandle):
                original = job / "chk-2" / keyed.delegate.relative_path
                _write(merged, b"\0" * 100 + original.read_bytes() + b"\0" * 50)
                segment = SegmentFileHandle(100, keyed.delegate.size, 0, merged.as_uri(), "logical-0")
                keyed = dataclasses.replace(keyed, delegate=segment)
                moved.append(original.relative_to(job).as_posix())
            subs.append(dataclasses.replace(sub, managed_keyed_state=keyed))
        operators.append(dataclasses.replace(op, subtasks=tuple(subs)))
    metadata = dataclasses.replace(snapshot.metadata, operators=tuple(operators))
    (job / "chk-2" / "_metadata").write_bytes(write_metadata(metadata))
    _write(job / "shared" / "subtask-0" / "merged-1")  # a physical file no segment is in
    plan = plan_gc(str(job))
    assert {o.path for o in plan.orphans} == {*moved, "shared/subtask-0/merged-1"}
    assert plan.missing == () and plan.referenced_files == 9  # 8 files of chk-2 and the merged file


def test_any_metadata_under_the_directory_keeps_what_it_names(tmp_path):
    """A checkpoint copied elsewhere under the job directory still names shared/: those files stay."""
    job = _job(tmp_path)
    shutil.copytree(job / "chk-3", job / "copies" / "before-upgrade")
    (job / "chk-3" / "_metadata").unlink()
    plan = plan_gc(str(job), force=True)
    assert not [o for o in plan.orphans if o.path.startswith("shared/")]
    assert plan.savepoints == (str(job / "copies" / "before-upgrade" / "_metadata"),)
    (job / "copies" / "before-upgrade" / "_metadata").write_bytes(b"\0\0\0\0")
    with pytest.raises(InvalidInputError):
        plan_gc(str(job), force=True)


def test_a_reference_kg_state_roots_admits_but_that_is_gone_holds_its_name(tmp_path, monkeypatch):
    """KG_STATE_ROOTS names where the checkpoint was written, now gone: its copies here are held by name."""
    job = _job(tmp_path)
    monkeypatch.setenv("KG_STATE_ROOTS", "/tmp/kg-uidjob-12354471338785865633")
    plan = plan_gc(str(job))
    # chk-3's own files are named relative to it; the 24 shared/ ones by the absolute path now admitted.
    assert plan.orphans == () and plan.referenced_files == 7
    assert len(plan.skipped) == 24 and len(plan.outside) == 24
    assert all(p.startswith("shared/") for p, _why in plan.skipped)

"""A retained ForSt checkpoint's shared SST files, named by absolute paths, read only within the roots (#23).

``fixtures/flink/2.3/forst-checkpoint-p3-maxp128-long`` is a real incremental ForSt checkpoint (Flink
2.3, p 3, maxParallelism 128; fixtures/flink/README.md). Its ``_metadata`` names every database file by
the absolute path Flink wrote it to (``/tmp/kg-flink-fixtures/…/<job id>/shared/…``), gone here:

- moved, as it is in the repository, the files are found in the job's directory the checkpoint sits in
  (``<job id>/shared``): ``kg inspect``, ``kg check`` and ``kg rescale`` read it, and Flink 2.0.1's
  ``fixtures/flink/2.0/uid-forst-incremental-p3`` alike (ForSt 2.0.1 restores kg's NATIVE rescale of it:
  tests/restore/test_native_versions.py);
- where the absolute paths exist but lie outside the checkpoint's own directories (the checkpoint copied
  elsewhere, its handles naming the repository's files), kg refuses them (``kg check`` and ``kg rescale``
  alike: exit 3 ``STATE_FILE_OUTSIDE`` when the checkpoint is opened, naming ``KG_STATE_ROOTS``) until
  ``KG_STATE_ROOTS`` names their root; then a ``--format native`` rescale of it holds the checkpoint's
  state (``kg diff`` against the moved checkpoint).

ForSt's own restore of this checkpoint and ForSt's restore of kg's NATIVE rescale of it are in
tests/restore/test_native.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.flink.io.stream_handles import FileHandle
from keygroup_cli.flink.metadata.handles import IncrementalKeyedHandle
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.restore.harness import CASES, relocated_checkpoint, uid_case

JOB = CASES / "forst-checkpoint-p3-maxp128-long" / "0000000000006b670000000000000019"
CHECKPOINT = JOB / "chk-2"
#: UidJob's second retained incremental ForSt checkpoint, written by Flink 2.0.1 (fixtures/flink/2.0).
FLINK_2_0 = uid_case("2.0.1", "uid-forst-incremental-p3") / "0000000000006b670000000000007569" / "chk-2"


def _shared_paths(checkpoint: Path) -> list[str]:
    paths = []
    for op in read_flink_metadata(checkpoint).metadata.operators:
        for sub in op.subtasks:
            if isinstance(sub.managed_keyed_state, IncrementalKeyedHandle):
                for entry in sub.managed_keyed_state.shared:
                    assert isinstance(entry.handle, FileHandle)
                    paths.append(entry.handle.path)
    return paths


@pytest.mark.parametrize("checkpoint", [CHECKPOINT, FLINK_2_0], ids=["2.3", "2.0.1"])
def test_a_moved_forst_checkpoint_reads_its_shared_files_from_the_job_directory(kg, checkpoint):
    shared = _shared_paths(checkpoint)
    assert shared and all("/shared/" in p and not Path(p.removeprefix("file:")).exists() for p in shared)
    inspected = kg("inspect", checkpoint, "--json")
    assert inspected.exit_code == 0, inspected.stderr
    assert inspected.json()["input_format"] == "flink-checkpoint"
    checked = kg("check", checkpoint, "-p", "4", "--json")
    assert checked.exit_code == 0 and checked.json()["ok"] is True, checked.stdout


def test_shared_files_outside_the_checkpoints_directories_need_kg_state_roots(kg, tmp_path, monkeypatch):
    monkeypatch.delenv("KG_STATE_ROOTS", raising=False)
    elsewhere = relocated_checkpoint(CHECKPOINT, tmp_path / "elsewhere" / "chk-2").parent
    named = [Path(p.removeprefix("file://")) for p in _shared_paths(elsewhere)]
    assert named and all(p.is_file() and p.is_relative_to(JOB.resolve()) for p in named)
    out = tmp_path / "native"
    native = ("rescale", elsewhere, "--to", "4", "--out", out, "--format", "native", "--engine", "local")
    for args in (("check", elsewhere, "-p", "4"), native):  # refused when opened, no file read
        refused = kg(*args, "--json")
        assert refused.exit_code == 3, refused.stderr
        error = refused.json()["error"]
        assert error["code"] == "STATE_FILE_OUTSIDE" and "KG_STATE_ROOTS" in error["message"]
        reference = error["message"].split(": not read")[0].removeprefix("file://")
        assert Path(reference).is_relative_to(JOB.resolve()), reference  # a file of the job's, not its copy
    assert not out.exists()
    monkeypatch.setenv("KG_STATE_ROOTS", str(JOB))
    assert kg("check", elsewhere, "-p", "4").exit_code == 0
    done = kg(*native, "-q")
    assert done.exit_code == 0, done.stderr
    assert kg("diff", out, CHECKPOINT, "-q").exit_code == 0

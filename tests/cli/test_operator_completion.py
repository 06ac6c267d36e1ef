"""``-o <TAB>``: the operators of the snapshot typed before it, through click's completion of the real ``kg``.

What a shell's completion script does on TAB: it runs ``kg`` with ``_KG_COMPLETE=<shell>_complete`` and the
words typed (``COMP_WORDS``, ``COMP_CWORD``). kg reads the input's ``_metadata`` or manifest only, never
imports Spark, and completes nothing (exit 0, no traceback) for an input it cannot read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
KG_SNAPSHOT = FIXTURES / "snapshots" / "valid"
#: Every operator of SAVEPOINT, as ``-o <TAB>`` offers it: its uid, else its id shortened as inspect prints.
SAVEPOINT_OPERATORS = {
    "op-state",
    "2347f36",
    "0ee20ec",
    "9887c2f",
    "ca9e3d0",
    "main-sink-ü",
    "async-wait",
    "keyed-state",
    "kg-source",
    "4ddb67c",
}


def _complete(
    words: list[str], shell: str = "bash", *, importtime: bool = False
) -> subprocess.CompletedProcess:
    """Run the installed ``kg`` as a shell's TAB does, completing the last of ``words`` (may be empty)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("_KG_")}
    env.update(
        _KG_COMPLETE=f"{shell}_complete",
        COMP_WORDS=" ".join(["kg", *words]),
        COMP_CWORD=str(len(words)),
    )
    if importtime:  # the same entry point, listing every module it imports on stderr
        command = [sys.executable, "-X", "importtime", "-m", "keygroup_cli"]
    else:
        command = [str(Path(sys.executable).parent / "kg")]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


def _values(result: subprocess.CompletedProcess) -> list[str]:
    """Return the values of bash_complete's ``type,value`` lines."""
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return [line.split(",", 1)[1] for line in result.stdout.splitlines() if line]


def test_dash_o_completes_the_operators_of_a_savepoint():
    for command in (
        ["get", str(SAVEPOINT)],
        ["rescale", str(SAVEPOINT), "--to", "4"],
        ["plan", str(SAVEPOINT)],
        ["write", str(SAVEPOINT)],
        ["compact", str(SAVEPOINT)],
    ):
        assert set(_values(_complete([*command, "-o", ""]))) == SAVEPOINT_OPERATORS, command
    assert _values(_complete(["export", str(SAVEPOINT), "-o", "ke"])) == ["keyed-state"]
    # A name or a full id typed completes too (what -o takes: core.keygroups.find_named_operator).
    assert _values(_complete(["get", str(SAVEPOINT), "--operator", "count-n"])) == ["count-no-uid"]
    assert _values(_complete(["get", str(SAVEPOINT), "-o", "9887c2fb2"])) == [
        "9887c2fb29a6e66df7039a0be00a90dd"
    ]


def test_dash_o_completes_the_operators_of_a_kg_snapshot_in_every_command_that_takes_one():
    assert _values(_complete(["inspect", str(KG_SNAPSHOT), "-o", ""])) == ["counter", "clicks"]
    assert _values(_complete(["inspect", str(KG_SNAPSHOT), "-o", "cl"])) == ["clicks"]
    assert _values(_complete(["rescale", str(KG_SNAPSHOT), "--to", "2", "-o", "co"])) == ["counter"]


def test_zsh_shows_the_name_of_an_operator_offered_by_its_id():
    result = _complete(["get", str(SAVEPOINT), "-o", "9887"], shell="zsh")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["plain", "9887c2f", "count-no-uid"]


def test_an_input_kg_cannot_read_completes_nothing(tmp_path: Path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "_metadata").write_bytes(b"\x00\x01not flink metadata")
    for path in (broken, tmp_path / "missing", tmp_path):
        assert _values(_complete(["get", str(path), "-o", ""])) == [], path
    # Nothing typed before -o, or a remote input: no completions, nothing read.
    assert _values(_complete(["get", "-o", ""])) == []
    assert _values(_complete(["get", "s3://bucket/savepoint", "-o", ""])) == []


def test_completing_reads_metadata_only_and_never_imports_spark():
    result = _complete(["rescale", str(SAVEPOINT), "--to", "4", "-o", "key"], importtime=True)
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["plain,keyed-state"]
    imported = {
        line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
    }
    assert "keygroup_cli.flink.metadata.reader" in imported  # the completion did read the input
    assert not {name for name in imported if name.split(".")[0] in ("pyspark", "py4j", "rocksdict")}
    assert not {name for name in imported if name.startswith("keygroup_cli.execution.engines")}

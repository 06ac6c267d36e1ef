"""kg check must not pass a Flink savepoint that Flink (and kg inspect / verify / rescale) cannot read.

Issue #20, as a user tried it on real savepoints: with a state file deleted, turned into a directory or
cut short, ``kg check SP -p 4`` said OK; with ``_metadata`` cut by 1–600 bytes (its V4+ properties trailer)
check, check --deep, verify and inspect all said OK. Now a state-file problem is an error finding of
``kg check`` (exit 1, as ``--deep`` reported it already) and a ``_metadata`` that does not decode to its
last byte is an invalid snapshot (exit 3, one line) in every command. The input is never modified.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "2.3"
CASES = ["heap-files-p3-maxp128-long", "uid-heap-canonical-p3", "rocksdb-canonical-p3-maxp128-string"]
#: Every V4+ _metadata of these ends with a CheckpointProperties trailer of this many bytes.
TRAILER = 745


def _copy(tmp_path: Path, case: str) -> Path:
    return Path(shutil.copytree(FLINK / case, tmp_path / case))


def _digest(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry below ``root``: file contents' hash (or "dir") and mode; what must not change."""
    out = {}
    for path in sorted(root.rglob("*")):
        kind = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        out[str(path.relative_to(root))] = (kind, oct(path.stat().st_mode))
    return out


def _keyed_file(sp: Path) -> Path:
    """The largest state file (a keyed one) of a savepoint."""
    files = [p for p in sp.iterdir() if p.is_file() and p.name != "_metadata" and not p.suffix]
    return max(files, key=lambda p: p.stat().st_size)


def _damage(victim: Path, how: str) -> str:
    """Damage one state file; return the finding code kg check reports for it."""
    if how == "deleted":
        victim.unlink()
        return "FLINK_STATE_FILE_MISSING"
    if how == "directory":
        # Unreadable, also for root (for whom chmod 000 stops no read).
        victim.unlink()
        victim.mkdir()
        return "FLINK_STATE_FILE_UNREADABLE"
    os.truncate(victim, victim.stat().st_size - 3)
    return "FLINK_STATE_FILE_SIZE"


def _flink_findings(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["code"], f["severity"]) for f in doc["findings"] if f["code"].startswith("FLINK_")]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("how", ["deleted", "directory", "truncated"])
def test_a_damaged_state_file_fails_check_as_every_other_command(
    kg: Callable[..., Any], tmp_path: Path, case: str, how: str
) -> None:
    sp = _copy(tmp_path, case)
    victim = _keyed_file(sp)
    code = _damage(victim, how)
    before = _digest(sp)

    # Damage is exit 3 in every command, kg check included (restore refusals stay exit 1).
    plain = kg("check", sp, "-p", "4", "--json")
    assert plain.exit_code == 3
    assert plain.json()["ok"] is False
    assert _flink_findings(plain.json()) == [(code, "error")]
    (finding,) = [f for f in plain.json()["findings"] if f["code"] == code]
    assert finding["message"].startswith(f"{victim}: ")
    assert "\n" not in finding["message"]

    text = kg("check", sp, "-p", "4")
    assert text.exit_code == 3
    assert text.stderr == ""
    assert code in text.stdout and "FAILED" in text.stdout

    # --deep reports the same problem once (the deep walk words it as the stat does).
    deep = kg("check", sp, "-p", "4", "--deep", "--json")
    assert deep.exit_code == 3
    assert [f for f in deep.json()["findings"] if f["code"] == code] == [finding]

    for args in (("verify", sp), ("inspect", sp)):
        result = kg(*args)
        assert result.exit_code == 3, args
    inspected = kg("inspect", sp)
    assert inspected.stderr.count("\n") == 1 and inspected.stderr.startswith("kg: error: ")
    assert _digest(sp) == before


def test_an_operator_state_file_deleted(kg: Callable[..., Any], tmp_path: Path) -> None:
    sp = _copy(tmp_path, "heap-files-p3-maxp128-long")
    (sp / "1833047a-eb30-49fb-ad09-627dd3f91027").unlink()  # kg-source's operator state
    doc = kg("check", sp, "-p", "4", "--json").json()
    assert [(f["code"], f["subject"]) for f in doc["findings"]] == [
        ("FLINK_STATE_FILE_MISSING", "kg-source subtask 0")
    ]


def test_undamaged_savepoints_still_pass(kg: Callable[..., Any]) -> None:
    for case in CASES:
        doc = kg("check", FLINK / case, "-p", "4", "--json").json()
        assert _flink_findings(doc) == [], case


def _cut_metadata(sp: Path, cut: int) -> None:
    metadata = sp / "_metadata"
    metadata.write_bytes(metadata.read_bytes()[:-cut])


def _assert_truncated(result: Any, sp: Path) -> None:
    assert result.exit_code == 3
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"kg: error: {sp / '_metadata'}: truncated: the CheckpointProperties")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cut", [1, 7, 100, 600])
def test_a_cut_metadata_is_invalid_in_every_command(
    kg: Callable[..., Any], tmp_path: Path, case: str, cut: int
) -> None:
    sp = _copy(tmp_path, case)
    _cut_metadata(sp, cut)
    before = _digest(sp)
    out = tmp_path / "out"
    commands = [
        ("check", sp, "-p", "4"),
        ("check", sp, "-p", "4", "--deep"),
        ("verify", sp),
        ("inspect", sp),
        ("rescale", sp, "--to", "4", "--out", out, "--engine", "local"),
        ("convert", sp, "--out", out),
    ]
    # (kg plan and kg diff read kg snapshots only: they refuse any Flink savepoint before reading it.)
    for args in commands:
        _assert_truncated(kg(*args), sp)
        doc = kg(*args, "--json").json()
        assert doc["error"]["code"] == "FLINK_METADATA_TRUNCATED", args
    assert not out.exists()
    assert _digest(sp) == before


def test_every_cut_of_the_trailer_is_refused(kg: Callable[..., Any], tmp_path: Path) -> None:
    sp = _copy(tmp_path, "heap-files-p3-maxp128-long")
    whole = (sp / "_metadata").read_bytes()
    for cut in range(1, 601):
        (sp / "_metadata").write_bytes(whole[:-cut])
        for args in (("check", sp, "-p", "4"), ("inspect", sp)):
            result = kg(*args)
            assert result.exit_code == 3, (cut, args, result.stderr)
            assert "truncated: the CheckpointProperties trailer" in result.stderr, (cut, args)
    for cut in range(601, TRAILER + 1):
        (sp / "_metadata").write_bytes(whole[:-cut])
        assert kg("check", sp, "-p", "4").exit_code == 3, cut


def test_bytes_after_the_trailer_are_refused(kg: Callable[..., Any], tmp_path: Path) -> None:
    sp = _copy(tmp_path, "uid-heap-canonical-p3")
    metadata = sp / "_metadata"
    metadata.write_bytes(metadata.read_bytes() + b"\0" * 5)
    for args in (("check", sp, "-p", "4", "--json"), ("inspect", sp, "--json"), ("verify", sp, "--json")):
        result = kg(*args)
        assert result.exit_code == 3
        assert result.json()["error"]["code"] == "FLINK_METADATA_CORRUPT"
        assert (
            "5 unexpected trailing bytes after the CheckpointProperties trailer"
            in (result.json()["error"]["message"])
        )


def test_inspect_still_shows_savepoint_canonical(kg: Callable[..., Any]) -> None:
    result = kg("inspect", FLINK / "uid-heap-canonical-p3")
    assert result.exit_code == 0
    assert "CANONICAL" in result.stdout

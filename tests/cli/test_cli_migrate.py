"""``kg migrate``: operator migration on real Flink 1.20 / 2.3 savepoints and checkpoints (no JVM here)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from keygroup_cli.core.keygroups import operator_id_for_uid
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from tests.conftest import FIXTURES

V6 = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"
LONG = operator_id_for_uid("keyed-long")
NEW = operator_id_for_uid("keyed-long-v2")


def _digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(
    "case",
    [
        "2.3/uid-heap-canonical-p3",
        "2.3/uid-heap-native-p3",
        "2.3/uid-rocksdb-native-p3",
        "1.20/uid-rocksdb-incremental-p3",
        "2.3/uid-heap-checkpoint-p3",
        "2.3/heap-inline-p3-maxp10-string",
        "2.3/unaligned-checkpoint-p2",
    ],
)
def test_migrate_writes_a_verified_savepoint_and_leaves_the_input(kg, tmp_path: Path, case: str) -> None:
    source = FIXTURES / "flink" / case
    before = _digest(source)
    old = read_flink_metadata(source).metadata
    stateful = next(op for op in old.operators if op.has_state and op.subtasks[0].managed_keyed_state)
    dest = tmp_path / "out"
    r = kg("migrate", source, "--out", dest, "--rename", f"{stateful.uid or stateful.operator_id}=renamed")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    assert _digest(source) == before
    new = read_flink_metadata(dest).metadata
    assert new.checkpoint_id == old.checkpoint_id
    assert new.properties_bytes == old.properties_bytes
    moved = {op.operator_id: op for op in new.operators}[operator_id_for_uid("renamed")]
    assert moved.parallelism == stateful.parallelism and moved.max_parallelism == stateful.max_parallelism
    assert stateful.operator_id not in {op.operator_id for op in new.operators}
    verified = kg("verify", dest)
    assert verified.exit_code == 0, verified.stdout
    assert not [p for p in tmp_path.iterdir() if p.name != "out"]  # no staging left behind


def test_migrate_text_names_every_change(kg, tmp_path: Path) -> None:
    r = kg(
        "migrate",
        V6,
        "--out",
        tmp_path / "o",
        "--rename",
        "keyed-long=keyed-long-v2",
        "--drop",
        "string-sink",
    )
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    # Ids shortened as git shortens hashes (--json: whole).
    assert lines[0] == f"rename      keyed-long ({LONG[:7]}) -> keyed-long-v2 ({NEW[:7]})"
    assert lines[1] == f"drop        string-sink ({operator_id_for_uid('string-sink')[:7]}) [no state]"
    # The last sentence wraps at the console's width (between words: the path stays whole).
    written = " ".join(" ".join(lines[2:]).split())  # wherever the console broke the line
    assert written.startswith(
        f"wrote {tmp_path / 'o'}: checkpoint 1, 6 operators, 3 with state, 7 state files ("
    )
    assert written.endswith(", copied locally)")


def test_migrate_dry_run_json_writes_nothing(kg, tmp_path: Path) -> None:
    dest = tmp_path / "o"
    r = kg("migrate", V6, "--out", dest, "--rename", "keyed-long=keyed-long-v2", "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["command"] == "migrate" and doc["dry_run"] is True and doc["checkpoint_id"] == 1
    assert doc["changes"] == [
        {
            "action": "rename",
            "operator_id": LONG,
            "uid": "keyed-long",
            "new_operator_id": NEW,
            "new_uid": "keyed-long-v2",
            "has_state": True,
            "replaces": None,
        }
    ]
    assert doc["files"] == 7 and doc["bytes"] > 0 and doc["operators"] == 7
    assert not dest.exists()


@pytest.mark.parametrize(
    "args, code, message",
    [
        (
            ["--rename", "nope=x"],
            "OPERATOR_NOT_IN_SAVEPOINT",
            "--rename nope: no operator with uid or operator id 'nope'",
        ),
        (["--drop", "nope"], "OPERATOR_NOT_IN_SAVEPOINT", "--drop nope: no operator"),
        (["--rename", "keyed-long=keyed-string"], "OPERATOR_ID_TAKEN", "already has state"),
        (["--assign-uid", f"{LONG}=x"], "OPERATOR_HAS_UID", "use --rename keyed-long=x"),
        (["--rename", "keyed-long"], "INVALID_OPTION", "expected OLD=NEW"),
    ],
)
def test_migrate_refusals_are_one_line_exit_2(kg, tmp_path: Path, args, code: str, message: str) -> None:
    dest = tmp_path / "o"
    r = kg("migrate", V6, "--out", dest, *args)
    assert r.exit_code == 2
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and message in r.stderr, r.stderr
    assert not dest.exists() and list(tmp_path.iterdir()) == []
    j = kg("migrate", V6, "--out", dest, *args, "--json")
    assert j.json()["error"]["code"] == code


def test_migrate_refuses_an_existing_destination_or_one_inside_the_input(kg, tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    r = kg("migrate", V6, "--out", tmp_path / "o", "--drop", "string-sink", "--json")
    assert r.exit_code == 2 and r.json()["error"]["code"] == "DESTINATION_EXISTS"
    r = kg("migrate", V6, "--out", V6 / "inside", "--drop", "string-sink", "--json")
    assert r.exit_code == 2 and r.json()["error"]["code"] == "DESTINATION_INSIDE_INPUT"


def test_migrate_missing_state_file_is_exit_3_and_commits_nothing(kg, tmp_path: Path) -> None:
    import shutil

    source = tmp_path / "sp"
    shutil.copytree(V6, source)
    meta = read_flink_metadata(source).metadata
    keyed = next(op for op in meta.operators if op.operator_id == LONG)
    (source / keyed.subtasks[0].managed_keyed_state.delegate.relative_path).unlink()
    r = kg("migrate", source, "--out", tmp_path / "o", "--rename", "keyed-long=x")
    assert r.exit_code == 3 and "state file is missing" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sp"]


def test_migrate_refuses_a_kg_snapshot_and_what_is_no_savepoint(kg, tmp_path: Path) -> None:
    r = kg("migrate", FIXTURES / "snapshots" / "valid", "--out", tmp_path / "o", "--drop", "x", "--json")
    assert r.exit_code == 4 and r.json()["error"]["code"] == "MIGRATE_KG_SNAPSHOT"
    (tmp_path / "empty").mkdir()
    r = kg("migrate", tmp_path / "empty", "--out", tmp_path / "o", "--drop", "x")
    assert r.exit_code == 3 and "not a Flink savepoint or checkpoint" in r.stderr
    assert not (tmp_path / "o").exists()

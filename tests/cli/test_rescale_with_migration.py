"""``kg rescale --rename/--assign-uid/--drop``: operator migration in the rescale's own pass (no JVM here).

The output of one pass must hold the state ``kg migrate`` followed by ``kg rescale`` gives (compared as kg
snapshots, key by key), with the operators named as the migration leaves them and the checkpoint id kept.
Real Flink restoring these outputs is ``tests/restore/test_migrate_restores.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keygroup_cli.convert.from_savepoint import savepoint_to_snapshot
from keygroup_cli.core.keygroups import operator_id_for_uid
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.snapshot.diff import diff_snapshots
from tests.conftest import FIXTURES
from tests.execution.snapshots import generate, tree_digest

V6 = FIXTURES / "flink" / "2.3" / "uid-heap-canonical-p3"
V4 = FIXTURES / "flink" / "1.20" / "uid-heap-canonical-p3"
LONG, STRING = operator_id_for_uid("keyed-long"), operator_id_for_uid("keyed-string")
NEW = operator_id_for_uid("keyed-long-v2")

CASES = {
    # Same maxParallelism (key groups copied as bytes), V6 metadata: rename and drop.
    "copy-v6": (V6, ["--to", "4", "--rename", "keyed-long=keyed-long-v2", "--drop", "keyed-string"]),
    # A new maxParallelism for keyed-long alone, named by its old id (keys re-hashed); V4 metadata records
    # no uid: keyed-long is given one by its id, keyed-string renamed by its uid's hash.
    "rehash-v4": (
        V4,
        [
            "--to",
            "2",
            "-m",
            "64",
            "--operator",
            LONG,
            "--assign-uid",
            f"{LONG}=keyed-long-v2",
            "--rename",
            "keyed-string=s2",
        ],
    ),
}


def _migration_args(args: list[str]) -> list[str]:
    keep, it = [], iter(args)
    for a in it:
        if a in ("--rename", "--assign-uid", "--drop"):
            keep += [a, next(it)]
    return keep


def _rescale_args(args: list[str]) -> list[str]:
    keep, it = [], iter(args)
    for a in it:
        if a in ("--rename", "--assign-uid", "--drop"):
            next(it)
        elif a == "--operator":
            # After kg migrate the operator has its new uid.
            keep += [a, {LONG: "keyed-long-v2"}.get(next(it), "")]
        else:
            keep.append(a)
    return keep


@pytest.mark.parametrize("case", CASES)
def test_one_pass_writes_what_migrate_then_rescale_writes(kg, tmp_path: Path, case: str) -> None:
    source, args = CASES[case]
    before = tree_digest(source)
    one = tmp_path / "one-pass"
    r = kg("--json", "rescale", source, "--out", one, "--engine", "local", *args)
    assert r.exit_code == 0, r.stderr
    assert tree_digest(source) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one-pass"]  # no intermediate savepoint
    doc = r.json()
    assert sorted(c["action"] for c in doc["migration"]) == sorted(a[2:] for a in _migration_args(args)[::2])
    migrated, two = tmp_path / "migrated", tmp_path / "two-pass"
    assert kg("migrate", source, "--out", migrated, *_migration_args(args)).exit_code == 0
    r2 = kg("rescale", migrated, "--out", two, "--engine", "local", *_rescale_args(args))
    assert r2.exit_code == 0, r2.stderr
    ours, theirs = read_flink_metadata(one).metadata, read_flink_metadata(two).metadata
    assert ours.checkpoint_id == read_flink_metadata(source).metadata.checkpoint_id
    assert [(o.operator_id, o.uid, o.name, o.parallelism, o.max_parallelism) for o in ours.operators] == [
        (o.operator_id, o.uid, o.name, o.parallelism, o.max_parallelism) for o in theirs.operators
    ]
    assert [u["operator_id"] for u in doc["operators"]] == [o.operator_id for o in ours.operators]
    savepoint_to_snapshot(one, tmp_path / "one.kg")
    savepoint_to_snapshot(two, tmp_path / "two.kg")
    diff = diff_snapshots(tmp_path / "one.kg", tmp_path / "two.kg")
    assert diff.operators and all(op.same for op in diff.operators), diff


def test_dry_run_prints_the_surgery_above_the_plan_and_writes_nothing(kg, tmp_path: Path) -> None:
    dest = tmp_path / "out"
    args = ["--to", "4", "--out", dest, "--rename", "keyed-long=keyed-long-v2", "--drop", "keyed-string"]
    r = kg("rescale", V6, *args, "--from", "3", "--dry-run")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    # Ids shortened as git shortens hashes (--json: whole).
    assert lines[0] == f"drop        keyed-string ({STRING[:7]})"
    assert lines[1] == f"rename      keyed-long ({LONG[:7]}) -> keyed-long-v2 ({NEW[:7]})"
    assert any(line.startswith("keyed-long-v2: parallelism 3 -> 4") for line in lines)
    assert not any(line.startswith("keyed-string") for line in lines)
    j = kg("--json", "rescale", V6, *args, "--from", "3", "--dry-run").json()
    assert j["command"] == "plan"
    assert j["migration"][1] == {
        "action": "rename",
        "operator_id": LONG,
        "uid": "keyed-long",
        "new_operator_id": NEW,
        "new_uid": "keyed-long-v2",
        "has_state": True,
        "replaces": None,
    }
    assert STRING not in {op["operator_id"] for op in j["operators"]}
    assert not dest.exists()
    # Without migration the document says so (the key is always there for a savepoint).
    plain = kg("--json", "rescale", V6, "--to", "4", "--out", dest, "--from", "3", "--dry-run").json()
    assert plain["migration"] == []


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--rename", "nope=x"], "OPERATOR_NOT_IN_SAVEPOINT", "--rename nope: no operator with uid"),
        (["--rename", "keyed-long"], "INVALID_OPTION", "--rename keyed-long: expected OLD=NEW"),
        (["--drop", "nope"], "OPERATOR_NOT_IN_SAVEPOINT", "--drop nope: no operator"),
        (["--rename", "keyed-long=keyed-string"], "OPERATOR_ID_TAKEN", "already has state in the savepoint"),
        (["--assign-uid", f"{LONG}=x"], "OPERATOR_HAS_UID", "use --rename keyed-long=x"),
        (["--rename", "keyed-long=a", "--drop", "keyed-long"], "OPERATOR_CHANGED_TWICE", "more than one"),
        (["--drop", "keyed-long", "--operator", "keyed-long"], "OPERATOR_DROPPED", "the operator is dropped"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True], ids=["rescale", "dry-run"])
def test_refusals_are_one_line_and_write_nothing(kg, tmp_path: Path, args, code, message, dry_run) -> None:
    dest = tmp_path / "out"
    extra = ["--dry-run"] if dry_run else []
    r = kg("--json", "rescale", V6, "--to", "4", "--out", dest, "--engine", "local", *args, *extra)
    assert r.exit_code == 2, r.stderr
    assert r.json()["error"]["code"] == code and message in r.json()["error"]["message"]
    text = kg("rescale", V6, "--to", "4", "--out", dest, "--engine", "local", *args, *extra)
    assert text.stderr.startswith("kg: error: ") and text.stderr.count("\n") == 1, text.stderr
    assert not dest.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("dry_run", [False, True], ids=["rescale", "dry-run"])
def test_a_kg_snapshot_takes_no_surgery(kg, tmp_path: Path, dry_run: bool) -> None:
    source = generate(tmp_path / "in", ("counter", "string", 50, 2, 16))
    extra = ["--dry-run"] if dry_run else []
    r = kg("rescale", source, "--to", "3", "--out", tmp_path / "out", "--drop", "counter", *extra)
    assert r.exit_code == 4, r.stderr
    assert r.stderr.startswith("kg: error: ") and "MIGRATE_KG_SNAPSHOT" not in r.stderr
    assert "--rename, --assign-uid and --drop rewrite Flink savepoints" in r.stderr
    assert not (tmp_path / "out").exists()
    r = kg("--json", "rescale", source, "--to", "3", "--out", tmp_path / "o", "--drop", "x")
    doc = json.loads(r.stdout)
    assert doc["error"]["code"] == "MIGRATE_KG_SNAPSHOT"


def test_kg_plan_takes_the_surgery_and_prints_what_the_dry_run_prints(kg, tmp_path: Path) -> None:
    migration = ["--rename", "keyed-long=keyed-long-v2", "--drop", "keyed-string"]
    plan = kg("--json", "plan", V6, "--from", "3", "--to", "4", *migration)
    dry = kg(
        "--json", "rescale", V6, "--from", "3", "--to", "4", "--out", tmp_path / "o", *migration, "--dry-run"
    )
    assert plan.exit_code == dry.exit_code == 0, plan.stderr + dry.stderr
    assert plan.json() == dry.json() and [c["action"] for c in plan.json()["migration"]] == ["drop", "rename"]
    pure = kg("plan", "--from", "3", "--to", "4", "-m", "128", "--drop", "keyed-string")
    assert pure.exit_code == 2 and "--drop" in pure.stderr

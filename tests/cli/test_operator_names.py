"""``-o/--operator`` names an operator by uid, name, full 32-hex id or a unique id prefix (#41).

Text output shortens ids as ``git`` shortens hashes; what it prints is what ``-o`` takes back. A name or a
prefix several operators share is one line, exit 2 ``OPERATOR_AMBIGUOUS``, listing them
(``core.keygroups.find_named_operator``).
"""

from __future__ import annotations

from pathlib import Path

from keygroup_cli.core.keygroups import find_named_operator, operator_id_for_uid
from keygroup_cli.snapshot import open_snapshot
from tests.execution.snapshots import generate

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "2.3"
SAVEPOINT = FLINK / "heap-files-p3-maxp128-long"
#: The operator of SAVEPOINT without a uid: named only by its name and its id.
NO_UID_ID = "9887c2fb29a6e66df7039a0be00a90dd"
#: Two uids whose operator ids share their first four hex digits (``d868``), found once by search.
TWINS = ("op-650", "op-726")


def test_an_operator_is_named_by_its_name_its_id_or_a_prefix_of_it(kg):
    by_id = kg("get", SAVEPOINT, "-o", NO_UID_ID, "-k", "0")
    assert by_id.exit_code == 0 and "value 5" in by_id.stdout, by_id.stderr
    for label in ("count-no-uid", NO_UID_ID[:7], NO_UID_ID[:4], NO_UID_ID[:12].upper()):
        named = kg("get", SAVEPOINT, "-o", label, "-k", "0")
        assert (named.exit_code, named.stdout) == (0, by_id.stdout), label
    # The id inspect prints, shortened, is what -o takes back.
    short = NO_UID_ID[:7]
    assert short in kg("inspect", SAVEPOINT).stdout
    planned = kg("plan", SAVEPOINT, "--to", "4", "-o", short, "--json").json()
    rescaled = {op["operator_id"] for op in planned["operators"] if op["rescaled"]}
    assert NO_UID_ID in rescaled and operator_id_for_uid("keyed-state") not in rescaled
    inspected = kg("inspect", SAVEPOINT, "-o", "count-no-uid", "--json").json()
    assert [op["operator_id"] for op in inspected["operators"]] == [NO_UID_ID]


def test_a_name_several_operators_share_is_ambiguous_and_lists_them(kg, tmp_path):
    # The SQL job names six operators DataStreamToTable: one line, exit 2, each candidate's id and uid.
    source = FLINK / "sql-heap-canonical-p2"
    for command in (
        ("plan", source, "--to", "3", "-o", "DataStreamToTable"),
        ("rescale", source, "--to", "3", "-o", "DataStreamToTable", "--out", tmp_path / "out"),
    ):
        result = kg(*command)
        assert result.exit_code == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "kg: error: operator 'DataStreamToTable' is ambiguous: the name of 6 operators: "
        )
        assert lines[0].count("_external-datastream)") == 6
    assert not (tmp_path / "out").exists()
    assert kg("--json", "plan", source, "--to", "3", "-o", "DataStreamToTable").json()["error"]["code"] == (
        "OPERATOR_AMBIGUOUS"
    )


def test_an_id_prefix_several_operators_share_is_ambiguous(kg, tmp_path):
    ids = [operator_id_for_uid(uid) for uid in TWINS]
    assert ids[0][:4] == ids[1][:4] and ids[0][:5] != ids[1][:5]
    snapshot = tmp_path / "snap"
    spec = [arg for uid in TWINS for arg in ("-o", f"{uid}:string:20:2:16")]
    assert kg("generate", snapshot, *spec, "-q").exit_code == 0
    result = kg("plan", snapshot, "--to", "3", "-o", ids[0][:4])
    assert result.exit_code == 2
    assert result.stderr == (
        f"kg: error: operator '{ids[0][:4]}' is ambiguous: the id prefix of 2 operators: "
        f"{ids[0]} (op-650), {ids[1]} (op-726); give its uid or more of its id\n"
    )
    # One digit more names one of them; fewer than four names none (an id prefix is at least 4 digits).
    planned = kg("plan", snapshot, "--to", "3", "-o", ids[1][:5], "--json").json()
    assert [op["uid"] for op in planned["operators"] if op["rescaled"]] == ["op-726"]
    short = kg("plan", snapshot, "--to", "3", "-o", ids[0][:3])
    assert short.exit_code == 2 and f"no operator '{ids[0][:3]}'" in short.stderr


def test_a_uid_wins_over_a_name_and_a_prefix(tmp_path):
    # Exact uid or id first, then a name, then a prefix: an operator whose uid looks like another's id
    # prefix is named by its uid.
    twin = operator_id_for_uid(TWINS[0])[:6]
    snapshot = generate(tmp_path / "snap", (twin, "string", 10, 1, 16), (TWINS[0], "string", 10, 1, 16))
    operators = open_snapshot(snapshot).manifest.operators
    found = find_named_operator(twin, operators)
    assert found is not None and found.uid == twin
    assert find_named_operator(TWINS[0], operators).uid == TWINS[0]  # type: ignore[union-attr]
    assert find_named_operator("nothing-like-it", operators) is None

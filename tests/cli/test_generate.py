from __future__ import annotations

from pathlib import Path

import pytest

from keygroup_cli.snapshot import open_snapshot


def test_generate_json_document_and_snapshot(kg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    dest = tmp_path / "snap"
    r = kg("generate", dest, "-o", "counter:string:50:3:10", "-o", "sess:long:20:2", "--seed", "4", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    doc = r.json()
    assert doc["command"] == "generate" and doc["schema_version"] == 3 and doc["seed"] == 4
    assert [(o["uid"], o["parallelism"], o["max_parallelism"]) for o in doc["operators"]] == [
        ("counter", 3, 10),
        ("sess", 2, 128),
    ]
    m = open_snapshot(dest).manifest
    assert m.created_at == "1970-01-01T00:00:00Z" and m.origin["seed"] == 4
    assert doc["operators"][0]["keyed_rows"] == m.operators[0].keyed_rows > 50


def test_generate_flag_form_and_text(kg, tmp_path: Path) -> None:
    r = kg(
        "generate",
        tmp_path / "s",
        "--operator",
        "c",
        "--key-type",
        "int",
        "--keys",
        "30",
        "-p",
        "2",
        "-m",
        "16",
    )
    assert r.exit_code == 0, r.stderr
    assert "c" in r.stdout and "int" in r.stdout and r.stderr == ""
    op = open_snapshot(tmp_path / "s").manifest.operators[0]
    assert (op.key_type, op.parallelism, op.max_parallelism) == ("int", 2, 16)


def test_generate_refuses_existing_destination(kg, tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    r = kg("generate", tmp_path / "s", "--json")
    assert r.exit_code == 2
    assert r.stderr.startswith("kg: error: destination exists:") and r.stderr.count("\n") == 1
    assert r.json()["error"]["code"] == "DESTINATION_EXISTS"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("c:string:10:200:128", "Maximum parallelism must not be smaller than parallelism."),
        ("c:long:abc", "keys 'abc' is not an integer"),
    ],
)
def test_generate_bad_operator_spec(kg, tmp_path: Path, spec: str, message: str) -> None:
    r = kg("generate", tmp_path / "s", "-o", spec)
    assert r.exit_code == 2 and r.stdout == ""
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "s").exists()

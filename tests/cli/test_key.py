from __future__ import annotations

import json

import pytest


def test_key_json_in_input_order_with_flinks_answers(kg, key_vectors):
    rows = [r for r in key_vectors if r["type"] == "string"][:200]
    keys = [r["key"] for r in rows if "\n" not in r["key"] and not r["key"].startswith("-")]
    result = kg("key", *keys, "--max-parallelism", "128", "--parallelism", "3", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert (doc["max_parallelism"], doc["parallelism"], doc["key_type"]) == (128, 3, "string")
    by_key = {r["key"]: r for r in rows}
    assert [k["key"] for k in doc["keys"]] == keys
    for item in doc["keys"]:
        flink = by_key[item["key"]]
        assert item["hash_code"] == flink["hash_code"]
        assert item["key_group"] == flink["key_groups"]["128"]
        assert item["subtask"] == flink["operator_index"]["128/3"]


@pytest.mark.parametrize("key_type,arrow_name", [("long", "long"), ("int", "int")])
def test_keys_file_numeric(kg, key_vectors, tmp_path, key_type, arrow_name):
    rows = [r for r in key_vectors if r["type"] == key_type][:500]
    path = tmp_path / "keys.txt"
    path.write_text("".join(f"{r['key']}\r\n" for r in rows))
    result = kg("key", "--keys-file", str(path), "-t", key_type, "-m", "4096", "-p", "7", "--json")
    assert result.exit_code == 0, result.stderr
    got = result.json()["keys"]
    assert [k["key"] for k in got] == [r["key"] for r in rows]
    assert [k["key_group"] for k in got] == [r["key_groups"]["4096"] for r in rows]
    assert [k["subtask"] for k in got] == [r["operator_index"]["4096/7"] for r in rows]
    assert "subtask" in got[0]


def test_keys_file_strings_from_stdin_tsv(kg, key_vectors):
    rows = [r for r in key_vectors if r["type"] == "string" and "\n" not in r["key"] and "\r" not in r["key"]]
    text = "".join(r["key"] + "\n" for r in rows)
    result = kg("key", "--keys-file", "-", "-m", "32768", "-p", "1000", input=text.encode())
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == "key\thash_code\tkey_group\tsubtask"
    body = [line.split("\t") for line in lines[1:-1]]
    assert len(body) == len(rows)
    for fields, row in zip(body, rows, strict=True):
        assert int(fields[1]) == row["hash_code"]
        assert int(fields[2]) == row["key_groups"]["32768"]
        assert int(fields[3]) == row["operator_index"]["32768/1000"]


def test_json_escapes_control_characters_and_quotes(kg):
    keys = ['a"b', "back\\slash", "tab\there", "nul\x00", "emoji😀"]
    result = kg("key", "--keys-file", "-", "-m", "10", "--json", input="\n".join(keys).encode())
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert [k["key"] for k in doc["keys"]] == keys
    assert "subtask" not in doc["keys"][0] and doc["parallelism"] is None


def test_boolean_keys(kg):
    doc = kg("key", "true", "FALSE", "-t", "boolean", "-m", "10", "--json").json()
    assert [(k["key"], k["hash_code"]) for k in doc["keys"]] == [(True, 1231), (False, 1237)]


def test_bad_long_key_names_the_line(kg, tmp_path):
    path = tmp_path / "k.txt"
    path.write_text("1\n2\nthree\n")
    result = kg("key", "-f", str(path), "-t", "long", "-m", "128")
    assert result.exit_code == 2
    assert result.stderr == f"kg: error: {path} line 3: Not a long key: 'three'\n"


def test_int_overflow_is_refused(kg):
    result = kg("key", "2147483648", "-t", "int", "-m", "128")
    assert result.exit_code == 2
    assert "Not a Java int" in result.stderr


def test_invalid_utf8_in_file_is_refused(kg):
    result = kg("key", "-f", "-", "-m", "128", input=b"ok\n\xff\xfe\n")
    assert result.exit_code == 2
    assert "stdin line 2 is not valid UTF-8" in result.stderr


def test_keys_and_file_together_is_usage_error(kg, tmp_path):
    path = tmp_path / "k.txt"
    path.write_text("a\n")
    assert kg("key", "x", "-f", str(path), "-m", "10").exit_code == 2
    assert kg("key", "-m", "10").exit_code == 2


@pytest.mark.parametrize("version", ["2.3", "1.20"])
def test_sql_keys_land_where_flink_stored_them(kg, version, tmp_path):
    from pathlib import Path

    from keygroup_cli import read_state

    case = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / version / "sql-heap-canonical-p2"
    doc = json.loads((case / "expected-sql-state.json").read_text(encoding="utf-8"))
    uid = next(q["uid"] for q in doc["queries"] if q["name"] == "composite")
    stored = {
        (r["key"]["f0"], r["key"]["f1"], r["key"]["f2"]): r["key_group"]
        for r in read_state(case, uid, "accState").to_pylist()
    }
    keys = tmp_path / "keys.jsonl"
    keys.write_text("".join(json.dumps(list(k)) + "\n" for k in stored), encoding="utf-8")
    result = kg("key", "-f", keys, "--sql-key", "INT,VARCHAR(10),boolean", "-m", "128", "-p", "2", "--json")
    assert result.exit_code == 0, result.stderr
    found = result.json()
    assert found["key_type"] == "RowData<INT, VARCHAR, BOOLEAN>"
    assert {tuple(k["key"]): k["key_group"] for k in found["keys"]} == stored
    assert all(k["subtask"] == (k["key_group"] >= 64) for k in found["keys"])


@pytest.mark.parametrize("version", ["2.3", "1.20"])
def test_decimal_timestamp_and_row_keys_land_where_flink_stored_them(kg, version, tmp_path):
    from pathlib import Path

    case = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / version / "sql-heap-canonical-p2"
    doc = json.loads((case / "expected-sql-state.json").read_text(encoding="utf-8"))
    query = next(q for q in doc["queries"] if q["name"] == "typed")
    keys = tmp_path / "keys.jsonl"
    keys.write_text("".join(json.dumps(k["key"]) + "\n" for k in query["keys"]), encoding="utf-8")
    spec = "DECIMAL(10, 2), DECIMAL(25, 4), TIMESTAMP(3), TIMESTAMP(9), ROW<INT, STRING>"
    located = kg("key", "-f", keys, "--sql-key", spec, "-m", "128", "--json")
    assert located.exit_code == 0, located.stderr
    # kg get finds each key only where its bytes, as kg builds them, are stored under the group kg hashes.
    args = [a for k in query["keys"] for a in ("-k", json.dumps(k["key"]))]
    found = kg("get", case, "-o", query["uid"], *args, "--json")
    assert found.exit_code == 0, found.stderr
    got = found.json()
    assert got["key_type"] == f"RowData<{spec.replace('INT,', 'INTEGER,').replace('STRING', 'VARCHAR')}>"
    assert [k["key"] for k in got["keys"]] == [k["key"] for k in query["keys"]]  # as the job wrote them
    assert [k["key_group"] for k in got["keys"]] == [k["key_group"] for k in located.json()["keys"]]
    for key, want in zip(got["keys"], query["keys"], strict=True):
        assert key["states"]["accState"]["entries"][0]["value"]["fields"] == want["result"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("[1, 2]", "--sql-key", "INT,STRING"), 2, "is not a string"),
        (("1", "--sql-key", "MAP<INT, INT>"), 2, "MAP<INT, INT> is not a key field type"),
        (('["1.234"]', "--sql-key", "DECIMAL(5, 2)"), 2, "does not fit DECIMAL(5, 2)"),
        (("1", "--sql-key", "INT", "-t", "long"), 2, "not both"),
    ],
)
def test_bad_sql_keys(kg, args, code, message):
    result = kg("key", *args, "-m", "128")
    assert result.exit_code == code
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [("5",), ("--", "-5", "-m", "128"), ("--json", "5")])
def test_a_missing_max_parallelism_is_a_usage_error(kg, args):
    # After "--" even "-m 128" is a key: -m is then missing (once an internal error, exit 70).
    result = kg("key", *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "--max-parallelism" in result.stdout + result.stderr


def test_negative_keys_after_the_options(kg):
    result = kg("key", "-m", "128", "--json", "--", "-5")
    assert result.exit_code == 0, result.stderr
    assert [k["key"] for k in result.json()["keys"]] == ["-5"]

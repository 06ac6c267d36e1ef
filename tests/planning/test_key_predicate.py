"""The key predicate of ``kg compact --keep-where/--drop-where``: parsed, compiled, evaluated by Arrow."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from keygroup_cli.core.errors import InvalidArgumentError
from keygroup_cli.planning.key_predicate import compile_predicate, keys_from_file

STRINGS = pa.table({"key": ["abc", "abd", "xyz", "it's", None]})
LONGS = pa.table({"key": pa.array([1, 5, 10, 15, 20, -3], pa.int64())})
ROWS = pa.table(
    {
        "key": pa.array(
            [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
            pa.struct([("id", pa.int32()), ("name", pa.string())]),
        )
    }
)


def _keys(table: pa.Table, text: str, base: Path | None = None) -> list:
    return (
        table.filter(compile_predicate(text, table.schema.field("key").type, base)).column("key").to_pylist()
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("key LIKE 'ab%'", ["abc", "abd"]),
        ("key NOT LIKE 'ab%'", ["xyz", "it's"]),
        ("key = 'it''s'", ["it's"]),
        ("key IN ('xyz', 'abc')", ["abc", "xyz"]),
        ("key IS NULL", [None]),
        ("NOT (key = 'abc' OR key = 'xyz') AND key IS NOT NULL", ["abd", "it's"]),
        ("key like 'a_c'", ["abc"]),
    ],
)
def test_string_keys(text: str, want: list) -> None:
    assert _keys(STRINGS, text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("key >= 10 AND key < 20", [10, 15]),
        ("key BETWEEN 1 AND 5", [1, 5]),
        ("key <> 5 AND key != 10 AND key > 0", [1, 15, 20]),
        ("key NOT IN (1, 20)", [5, 10, 15, -3]),
        ("key < -1 OR key = 20", [20, -3]),
    ],
)
def test_long_keys(text: str, want: list) -> None:
    assert _keys(LONGS, text) == want


def test_struct_key_fields() -> None:
    assert _keys(ROWS, "key.id = 2")[0]["name"] == "b"
    assert len(_keys(ROWS, "key.name LIKE 'a%'")) == 1


def test_keys_in_a_file(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_text("10\n20\n\n", encoding="utf-8")
    pq.write_table(pa.table({"key": pa.array([1, 5], pa.int64())}), tmp_path / "k.parquet")
    assert _keys(LONGS, "key IN FILE 'k.txt'", tmp_path) == [10, 20]
    assert _keys(LONGS, f"key NOT IN FILE '{tmp_path / 'k.parquet'}'") == [10, 15, 20, -3]
    assert keys_from_file(tmp_path / "k.txt", pa.int32()).type == pa.int32()
    (tmp_path / "bad.txt").write_text("ten\n", encoding="utf-8")
    with pytest.raises(InvalidArgumentError, match="is not a int64"):
        _keys(LONGS, "key IN FILE 'bad.txt'", tmp_path)
    with pytest.raises(InvalidArgumentError, match="cannot read keys"):
        _keys(LONGS, "key IN FILE 'missing.txt'", tmp_path)


@pytest.mark.parametrize(
    ("table", "text", "words"),
    [
        (STRINGS, "", "empty"),
        (STRINGS, "value = 1", "unknown column"),
        (STRINGS, "key = ", "expected"),
        (STRINGS, "key = 'a' extra", "unexpected"),
        (STRINGS, "key ~ 'a'", "unexpected"),
        (LONGS, "key = 'ten'", "is not a int64"),
        (LONGS, "key LIKE 'a%'", "LIKE needs a text column"),
        (ROWS, "key.nope = 1", "no field 'nope'"),
        (STRINGS, "(key = 'a'", "expected )"),
        (STRINGS, "key NOT = 'a'", "NOT goes before"),
        (STRINGS, "__import__('os') = 1", "unknown column"),
    ],
)
def test_refusals_are_usage_errors(table: pa.Table, text: str, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(words)) as caught:
        compile_predicate(text, table.schema.field("key").type)
    assert caught.value.code == "WHERE_INVALID" and caught.value.exit_code == 2

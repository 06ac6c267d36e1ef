from __future__ import annotations

import pyarrow as pa
import pytest

from keygroup_cli.core import keys
from keygroup_cli.core.errors import InvalidArgumentError


def test_split_lines():
    assert keys.split_lines(b"") == []
    assert keys.split_lines(b"a\nb\n") == [b"a", b"b"]
    assert keys.split_lines(b"a\r\nb") == [b"a", b"b"]
    assert keys.split_lines(b"\n\n") == [b"", b""]  # two empty-string keys


def test_parse_and_locate():
    parsed = keys.parse_keys([b" 42", b"-1 "], "long")
    assert parsed.type == pa.int64() and parsed.to_pylist() == [42, -1]
    located = keys.locate_keys(parsed, "long", 128, 3)
    assert located.hash_codes.tolist() == [42, 0]
    assert located.subtasks is not None and len(located.subtasks) == 2


def test_parse_errors_name_the_position():
    with pytest.raises(InvalidArgumentError, match="f line 2"):
        keys.parse_keys([b"1", b"x"], "int", source="f")
    with pytest.raises(InvalidArgumentError, match="key #1 is not a boolean"):
        keys.parse_keys(["yes"], "boolean")


def test_locate_checks_bounds():
    with pytest.raises(InvalidArgumentError):
        keys.locate_keys(pa.array(["a"]), "string", 10, 11)

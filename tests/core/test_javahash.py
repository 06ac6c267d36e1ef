"""Java hashCode() per key type against Flink/Java-generated vectors; vectorised equals scalar."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keygroup_cli.core import javahash
from keygroup_cli.core.errors import InvalidArgumentError, UnsupportedFormatError

ARROW = {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "boolean": pa.bool_()}


def _by_type(key_vectors, key_type):
    rows = [r for r in key_vectors if r["type"] == key_type]
    assert rows, key_type
    return rows


@pytest.mark.parametrize("key_type", ["string", "long", "int", "boolean"])
def test_scalar_hash_codes_match_java(key_vectors, key_type):
    for row in _by_type(key_vectors, key_type):
        assert javahash.hash_code(row["key"], key_type) == row["hash_code"], row["key"]


@pytest.mark.parametrize("key_type", ["string", "long", "int", "boolean"])
def test_vectorised_hash_codes_match_java(key_vectors, key_type):
    rows = _by_type(key_vectors, key_type)
    keys = pa.array([r["key"] for r in rows], type=ARROW[key_type])
    assert javahash.hash_codes(keys, key_type).tolist() == [r["hash_code"] for r in rows]


def test_string_vectors_cover_the_hard_cases(key_vectors):
    keys = [r["key"] for r in _by_type(key_vectors, "string")]
    assert "" in keys
    assert any(any(ord(c) > 0xFFFF for c in k) for k in keys)  # surrogate pairs
    assert any(len(k) >= 1000 for k in keys)  # the weighted-sum path
    assert any("\x00" in k for k in keys)


def test_known_values():
    assert javahash.string_hash_code("hello") == 99162322
    assert javahash.long_hash_code(-1) == 0
    assert javahash.long_hash_code(2**63 - 1) == -(2**31)
    assert javahash.boolean_hash_code(True) == 1231


@settings(max_examples=200)
@given(st.lists(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=300), max_size=40))
def test_vectorised_strings_equal_scalar(values):
    array = pa.array(values, type=pa.string())
    expected = [javahash.string_hash_code(v) for v in values]
    assert javahash.hash_codes(array, "string").tolist() == expected
    # Sliced, chunked and dictionary-encoded inputs give the same answer.
    if len(values) > 2:
        assert javahash.hash_codes(array.slice(1), "string").tolist() == expected[1:]
    chunked = pa.chunked_array([array[: len(values) // 2], array[len(values) // 2 :]], type=pa.string())
    assert javahash.hash_codes(chunked, "string").tolist() == expected
    assert javahash.hash_codes(array.dictionary_encode(), "string").tolist() == expected


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=50))
def test_vectorised_longs_equal_scalar(values):
    codes = javahash.hash_codes(np.array(values, dtype=np.int64), "long")
    assert codes.tolist() == [javahash.long_hash_code(v) for v in values]


def test_binary_and_unknown_types_are_refused():
    with pytest.raises(UnsupportedFormatError, match="opaque"):
        javahash.hash_code(b"x", "binary")
    with pytest.raises(UnsupportedFormatError, match="Unknown key type"):
        javahash.hash_codes([1], "double")


def test_out_of_range_and_null_keys_are_refused():
    with pytest.raises(InvalidArgumentError, match="Not a Java long"):
        javahash.long_hash_code(2**63)
    with pytest.raises(InvalidArgumentError, match="Null keys"):
        javahash.hash_codes(pa.array(["a", None]), "string")


def test_row_keys_hash_as_binary_row_data_in_any_chunking():
    from keygroup_cli.core.errors import InvalidInputError

    # RowDataSerializer's bytes: the big-endian length, then the row (header word and one slot per field).
    rows = [bytes([0, 0, 0, 0, 0, 0, 0, 0]) + i.to_bytes(8, "little") for i in range(5)]
    rows.append(bytes(8) + b"\x00" * 8 + bytes(range(16)))  # a longer row: another length group
    keys = pa.array([len(r).to_bytes(4, "big") + r for r in rows], type=pa.binary())
    codes = javahash.hash_codes(keys, "row")
    assert codes.tolist() == [javahash.hash_code(k, "row") for k in keys.to_pylist()]
    assert len(set(codes.tolist())) == len(rows)
    chunked = pa.chunked_array([keys.slice(0, 2), keys.slice(2)])
    assert javahash.hash_codes(chunked, "row").tolist() == codes.tolist()
    assert javahash.hash_codes(keys.slice(3), "row").tolist() == codes.tolist()[3:]
    assert javahash.hash_codes(pa.array([], type=pa.binary()), "row").tolist() == []
    for bad in (b"\x00\x00\x00\x09" + bytes(8), b"\x00\x00\x00\x06" + bytes(6), b"\x00"):
        with pytest.raises(InvalidInputError, match="not a serialized BinaryRowData"):
            javahash.hash_codes(pa.array([bad], type=pa.binary()), "row")

"""Java DataInput/DataOutput semantics: modified UTF-8, big-endian primitives, bounded reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.io.binary import DataInput, DataOutput, decode_modified_utf8, encode_modified_utf8


def test_modified_utf8_matches_java_write_utf() -> None:
    # Java: NUL is C0 80, supplementary characters are two 3-byte surrogates (values from writeUTF).
    assert encode_modified_utf8("a\x00b") == b"a\xc0\x80b"
    assert encode_modified_utf8("\U0001f600") == b"\xed\xa0\xbd\xed\xb8\x80"
    assert encode_modified_utf8("ü") == b"\xc3\xbc"
    assert decode_modified_utf8(b"\xed\xa0\xbd\xed\xb8\x80") == "\U0001f600"


@given(st.text())
def test_modified_utf8_round_trips(text: str) -> None:
    assert decode_modified_utf8(encode_modified_utf8(text)) == text


@given(
    st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1), st.text(max_size=50))
    )
)
def test_primitives_round_trip(values: list[tuple[int, int, str]]) -> None:
    out = DataOutput()
    for long, int_, text in values:
        out.write_long(long)
        out.write_int(int_)
        out.write_utf(text)
    reader = DataInput(out.getvalue())
    assert [(reader.read_long(), reader.read_int(), reader.read_utf()) for _ in values] == values
    assert reader.at_end()


def test_reading_past_the_end_names_the_source_and_offset() -> None:
    reader = DataInput(b"\x00\x00", "some/_metadata", base=100)
    with pytest.raises(InvalidInputError, match=r"some/_metadata: truncated or corrupt at byte 100"):
        reader.read_int()
    with pytest.raises(InvalidInputError):
        DataInput(b"\x00\x00\x00\x02").read_longs(2**30)


def test_malformed_utf_is_invalid_snapshot() -> None:
    with pytest.raises(InvalidInputError, match="malformed modified UTF-8"):
        DataInput(b"\x00\x01\xff").read_utf()

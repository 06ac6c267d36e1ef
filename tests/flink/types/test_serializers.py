"""Key codecs, StringValue, writeVariableIntBytes and TimerSerializer timestamps."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keygroup_cli.core.errors import InvalidInputError
from keygroup_cli.flink.types.serializers import (
    LONG_SERIALIZER_SNAPSHOT,
    STRING_SERIALIZER_SNAPSHOT,
    flip_sign_bit,
    key_codec,
    read_string,
    read_timer_timestamp,
    value_end,
    variable_int_bytes,
    write_string,
    write_timer_timestamp,
)


def test_string_value_layout() -> None:
    # length+1 as a varint, then each UTF-16 unit as a varint (as read from Flink's own files).
    assert write_string("key-3") == b"\x06key-3"
    assert write_string("") == b"\x01"
    assert write_string(None) == b"\x00"
    # 'é' = 0xE9 -> E9 01; '€' = 0x20AC -> AC 41; '😀' = D83D DE00 -> BD B0 03, 80 BC 03
    assert write_string("é€😀") == bytes.fromhex("05e901ac41bdb00380bc03")
    assert write_string("x" * 200)[:2] == bytes([0xC9, 0x01])


@given(st.text())
def test_string_round_trip(text: str) -> None:
    raw = write_string(text)
    assert read_string(raw + b"tail", 0) == (text, len(raw))


def test_truncated_string_is_an_error() -> None:
    with pytest.raises(InvalidInputError):
        read_string(b"\x05ab", 0)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_timer_timestamp_flips_the_sign_bit(ts: int) -> None:
    raw = write_timer_timestamp(ts)
    assert struct.unpack(">Q", raw)[0] == (ts % 2**64) ^ (1 << 63)
    assert read_timer_timestamp(raw, 0) == ts
    assert flip_sign_bit(flip_sign_bit(ts)) == ts


def test_variable_int_bytes() -> None:
    assert variable_int_bytes(0) == b"\x00"
    assert variable_int_bytes(5) == b"\x05"
    assert variable_int_bytes(256) == b"\x00\x01"
    assert variable_int_bytes(0x123456) == b"\x56\x34\x12"


def test_key_codecs() -> None:
    string = key_codec(STRING_SERIALIZER_SNAPSHOT)
    assert (string.key_type, string.variable, string.self_delimiting) == ("string", True, True)
    long_ = key_codec(LONG_SERIALIZER_SNAPSHOT)
    assert (long_.key_type, long_.fixed_size) == ("long", 8)
    assert long_.read(struct.pack(">q", -7) + b"z", 0) == (-7, 8)
    assert long_.encoder()(-7) == struct.pack(">q", -7)
    int_ = key_codec("org.apache.flink.api.common.typeutils.base.IntSerializer$IntSerializerSnapshot")
    assert int_.decode(struct.pack(">i", -3)) == -3 and int_.encoder()(-3) == struct.pack(">i", -3)
    boolean = key_codec(
        "org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot"
    )
    assert boolean.decode(b"\x01") is True and boolean.encoder()(False) == b"\x00"
    opaque = key_codec("org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot")
    assert (opaque.key_type, opaque.self_delimiting) == ("binary", False)
    assert opaque.decode(b"ab") == b"ab"


def test_value_end() -> None:
    assert value_end(STRING_SERIALIZER_SNAPSHOT, b"\x03ab!", 0) == 3
    assert value_end(LONG_SERIALIZER_SNAPSHOT, bytes(9), 1) == 9
    assert value_end("com.example.Unknown", b"x", 0) is None

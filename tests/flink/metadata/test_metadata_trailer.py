"""The V4+ ``CheckpointProperties`` trailer is read to its last byte, as Flink's ObjectInputStream reads it.

Flink (``MetadataV4Serializer.deserializeProperties``) reads exactly one Java-serialized object after the
last operator and casts it to ``CheckpointProperties``: a trailer cut anywhere fails its restore with an
EOFException. kg used to accept any trailer that began with the Java stream magic.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keygroup_cli.core.errors import InvalidInputError, KgError
from keygroup_cli.flink.metadata.reader import JAVA_SERIALIZATION_MAGIC, PROPERTIES_CLASS, parse_metadata
from keygroup_cli.flink.metadata.writer import CANONICAL_SAVEPOINT_PROPERTIES, write_metadata

FLINK_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "flink"
#: Every _metadata of every Flink version (1.15–2.3), savepoints and chk-N checkpoints alike.
ALL_METADATA = sorted(FLINK_FIXTURES.glob("**/_metadata"))
HEAP_P3 = FLINK_FIXTURES / "2.3" / "heap-files-p3-maxp128-long" / "_metadata"


def _v4_plus() -> list[Path]:
    return [p for p in ALL_METADATA if parse_metadata(p.read_bytes()).version >= 4]


def _trailer_length(raw: bytes) -> int:
    trailer = parse_metadata(raw).properties_bytes
    assert trailer is not None
    return len(trailer)


def test_every_fixture_parses_to_its_last_byte() -> None:
    assert len(ALL_METADATA) >= 40
    versions = set()
    for path in ALL_METADATA:
        raw = path.read_bytes()
        meta = parse_metadata(raw, str(path))
        versions.add(meta.version)
        # Lossless: what was read is the whole file, trailer included.
        assert write_metadata(meta) == raw, path
        if meta.version >= 4:
            assert meta.properties is not None and meta.properties.type_name is not None, path
    assert versions == {3, 4, 5, 6}


@pytest.mark.parametrize("cut", [1, 7, 100, 600])
def test_a_cut_trailer_is_refused_in_every_v4_plus_fixture(cut: int) -> None:
    paths = _v4_plus()
    assert paths
    for path in paths:
        raw = path.read_bytes()
        assert cut < _trailer_length(raw)
        with pytest.raises(InvalidInputError) as caught:
            parse_metadata(raw[:-cut], str(path))
        assert caught.value.code == "FLINK_METADATA_TRUNCATED", path
        assert caught.value.exit_code == 3
        assert "\n" not in caught.value.message
        assert caught.value.message.startswith(f"{path}: truncated: the CheckpointProperties trailer")


def test_every_cut_length_of_the_trailer_is_refused() -> None:
    raw = HEAP_P3.read_bytes()
    length = _trailer_length(raw)
    assert length == 745
    start = len(raw) - length
    for cut in range(1, 601):
        with pytest.raises(InvalidInputError) as caught:
            parse_metadata(raw[:-cut], "sp/_metadata")
        assert caught.value.code == "FLINK_METADATA_TRUNCATED", cut
        assert caught.value.message == (
            f"sp/_metadata: truncated: the CheckpointProperties trailer from byte {start} ends after "
            f"{length - cut} bytes, inside its serialized object (Flink's restore fails with an EOFException)"
        )
    # Cut to within its stream header, or exactly where it starts: still a truncation.
    for cut in range(length - 3, length + 1):
        with pytest.raises(InvalidInputError) as caught:
            parse_metadata(raw[:-cut])
        assert caught.value.code == "FLINK_METADATA_TRUNCATED", cut
    with pytest.raises(InvalidInputError, match="where its CheckpointProperties trailer starts"):
        parse_metadata(raw[:start])
    # One byte more and the last operator is cut: the body's own truncation error.
    with pytest.raises(InvalidInputError) as caught:
        parse_metadata(raw[: start - 1])
    assert caught.value.code == "FLINK_TRUNCATED"


@pytest.mark.parametrize("extra", [b"\x00", b"\xac\xed\x00\x05", b"x" * 300])
def test_bytes_after_the_trailer_are_refused(extra: bytes) -> None:
    raw = HEAP_P3.read_bytes()
    with pytest.raises(InvalidInputError) as caught:
        parse_metadata(raw + extra, "sp/_metadata")
    assert caught.value.code == "FLINK_METADATA_CORRUPT"
    assert caught.value.message == (
        f"sp/_metadata: {len(extra)} unexpected trailing bytes after the CheckpointProperties trailer (it "
        f"ends at byte {len(raw)} of {len(raw) + len(extra)})"
    )


def test_v3_needs_no_trailer_and_refuses_extra_bytes() -> None:
    raw = (FLINK_FIXTURES / "1.15" / "uid-heap-canonical-p3" / "_metadata").read_bytes()
    meta = parse_metadata(raw)
    assert meta.version == 3 and meta.properties_bytes is None
    with pytest.raises(InvalidInputError, match="unexpected trailing bytes after the last operator"):
        parse_metadata(raw + CANONICAL_SAVEPOINT_PROPERTIES)


def test_a_trailer_that_is_not_a_java_stream_is_corrupt() -> None:
    raw = HEAP_P3.read_bytes()
    start = len(raw) - _trailer_length(raw)
    with pytest.raises(InvalidInputError, match="is not a Java serialization stream") as caught:
        parse_metadata(raw[:start] + b"PK\x03\x04" + raw[start + 4 :])
    assert caught.value.code == "FLINK_METADATA_CORRUPT"


def test_a_trailer_holding_another_object_is_corrupt() -> None:
    # A serialized java.lang.String: Flink's cast to CheckpointProperties fails.
    raw = HEAP_P3.read_bytes()
    start = len(raw) - _trailer_length(raw)
    with pytest.raises(InvalidInputError, match=f"holds no {PROPERTIES_CLASS}") as caught:
        parse_metadata(raw[:start] + JAVA_SERIALIZATION_MAGIC + b"t\x00\x03abc")
    assert caught.value.code == "FLINK_METADATA_CORRUPT"


def test_the_synthesised_canonical_trailer_walks_to_its_end() -> None:
    raw = HEAP_P3.read_bytes()
    start = len(raw) - _trailer_length(raw)
    meta = parse_metadata(raw[:start] + CANONICAL_SAVEPOINT_PROPERTIES)
    assert meta.properties is not None and meta.properties.format_type == "CANONICAL"


def _utf(text: str) -> bytes:
    return struct.pack(">H", len(text)) + text.encode()


def _custom_properties() -> bytes:
    """A CheckpointProperties stream with what Flink's do not use: writeObject data, an array, a reset."""
    int_array = b"\x72" + _utf("[I") + bytes(8) + b"\x02" + b"\x00\x00" + b"\x78" + b"\x70"
    desc = (
        b"\x72"
        + _utf(PROPERTIES_CLASS)
        + bytes(8)
        + b"\x03"  # SC_SERIALIZABLE | SC_WRITE_METHOD
        + b"\x00\x02"
        + b"I"
        + _utf("count")
        + b"["
        + _utf("values")
        + b"\x74"
        + _utf("[I")
        + b"\x78"  # no class annotation
        + b"\x70"  # no superclass
    )
    values = struct.pack(">i", 7) + b"\x75" + int_array + struct.pack(">i", 2) + struct.pack(">ii", 1, 2)
    annotation = b"\x77\x03abc" + b"\x7a" + struct.pack(">i", 2) + b"de" + b"\x70" + b"\x78"
    return JAVA_SERIALIZATION_MAGIC + b"\x79" + b"\x73" + desc + values + annotation


def test_the_walk_follows_writeobject_data_arrays_and_resets() -> None:
    raw = HEAP_P3.read_bytes()
    body = raw[: len(raw) - _trailer_length(raw)]
    trailer = _custom_properties()
    meta = parse_metadata(body + trailer)
    assert meta.properties_bytes == trailer
    for cut in range(1, len(trailer)):
        with pytest.raises(InvalidInputError) as caught:
            parse_metadata(body + trailer[:-cut])
        assert caught.value.code == "FLINK_METADATA_TRUNCATED", cut


def test_a_reference_to_an_unknown_handle_is_corrupt() -> None:
    raw = HEAP_P3.read_bytes()
    body = raw[: len(raw) - _trailer_length(raw)]
    with pytest.raises(InvalidInputError, match="invalid handle value") as caught:
        parse_metadata(body + JAVA_SERIALIZATION_MAGIC + b"\x71\x00\x7e\x00\x05")
    assert caught.value.code == "FLINK_METADATA_CORRUPT"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_trailers_raise_only_kg_errors(data: st.DataObject) -> None:
    raw = HEAP_P3.read_bytes()
    start = len(raw) - _trailer_length(raw)
    trailer = bytearray(raw[start:])
    mode = data.draw(st.sampled_from(["flip", "overwrite", "random", "cut-and-append"]))
    if mode == "flip":
        for _ in range(data.draw(st.integers(1, 6))):
            i = data.draw(st.integers(4, len(trailer) - 1))
            trailer[i] ^= 1 << data.draw(st.integers(0, 7))
    elif mode == "overwrite":
        i = data.draw(st.integers(4, len(trailer) - 1))
        chunk = data.draw(st.binary(min_size=1, max_size=16))
        trailer[i : i + len(chunk)] = chunk
    elif mode == "random":
        trailer = bytearray(JAVA_SERIALIZATION_MAGIC + data.draw(st.binary(max_size=300)))
    else:
        trailer = trailer[: data.draw(st.integers(0, len(trailer)))] + data.draw(st.binary(max_size=20))
    try:
        parse_metadata(raw[:start] + bytes(trailer))
    except KgError as exc:
        assert "\n" not in exc.message

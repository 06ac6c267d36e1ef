"""Encoding keyed-state entries from typed values (flink/keyed/typed_entries.py) against what Flink wrote.

For every bundled fixture savepoint (every Flink version, HashMap, RocksDB and ForSt, canonical, NATIVE,
incremental and checkpoint layouts, the typed, Avro, SQL, upgrade and Kafka jobs), every entry of every state
kg decodes is decoded part by part (key, namespace, user key, value) and encoded again with the state's own
serializers: the bytes must be the ones Flink wrote. The same entries read back from ``kg export``'s typed
batches (Arrow) must encode to the same bytes, and a keyed file rebuilt from re-encoded entries alone must
be the original file byte for byte. States kg cannot encode (Kryo) are refused by column, before anything is
written.
"""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

from keygroup_cli.core.errors import ExitCode
from keygroup_cli.core.keygroups import KeyGroupRange
from keygroup_cli.flink.data.lookup import state_codecs
from keygroup_cli.flink.data.tables import open_canonical, state_batches
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import decode_keyed_file
from keygroup_cli.flink.keyed.encode import write_keyed_file
from keygroup_cli.flink.keyed.typed_entries import (
    EncodedEntry,
    encode_arrow_entry,
    encode_entry,
    require_encodable,
)
from keygroup_cli.flink.savepoint import KeyedStream, Savepoint
from keygroup_cli.flink.types.values import (
    NotEncodable,
    StateCodecs,
    TtlValue,
    ValueNotEncodable,
    arrow_rows,
)
from tests.kg_fixture_state import FLINK_FIXTURES

ALL_FLINK = FLINK_FIXTURES.parent
#: Every savepoint and checkpoint bundled under fixtures/flink/*/.
SAVEPOINTS = sorted(str(p.parent.relative_to(ALL_FLINK)) for p in ALL_FLINK.rglob("_metadata"))
#: The ones whose operators hold no keyed state kg reads (a Kafka pipeline; a changelog checkpoint).
WITHOUT_KEYED_STATE = {
    "2.0/kafka-p2",
    "2.3/changelog-checkpoint-p2-maxp128-string/0000000000006b67000000000000001b/chk-2",
}

Parts = tuple[bytes, bytes, bytes | None, bytes | None, int | None]


def _decoded_entry(codecs: StateCodecs, key: bytes, row: dict[str, Any]) -> EncodedEntry:
    """Decode every part of a kg keyed row with the state's codecs, then encode it again."""
    namespace = codecs.namespace.decode(row["namespace"])
    decoded_key = codecs.key.decode(key)
    if codecs.kind == "timer":
        return encode_entry(codecs, decoded_key, namespace, timestamp=row["timestamp"])
    assert codecs.value is not None
    if codecs.kind == "map":
        assert codecs.user_key is not None
        value = None if row["value"] is None else codecs.value.decode(row["value"])
        return encode_entry(
            codecs, decoded_key, namespace, value, user_key=codecs.user_key.decode(row["user_key"])
        )
    if codecs.kind == "list":
        return encode_entry(codecs, decoded_key, namespace, codecs.list_elements(row["value"]))
    return encode_entry(codecs, decoded_key, namespace, codecs.value.decode(row["value"]))


def _parts(entry: EncodedEntry) -> Parts:
    return (entry.key, entry.namespace, entry.user_key, entry.value, entry.timestamp)


def _file(savepoint: Savepoint, stream: KeyedStream) -> bytes:
    with StreamSource(stream.handle.delegate, savepoint.directory) as src:
        return src.read(0, src.size)


def _round_trip_stream(
    savepoint: Savepoint, stream: KeyedStream, raw: dict[str, list[Parts]], counts: dict[str, int]
) -> None:
    """Re-encode every entry of one keyed file from its decoded values; rebuild the file from them."""
    codecs = state_codecs(stream)
    key_codec = stream.layout.codec
    key_bytes = key_codec.encoder()
    rebuilt: list[dict[str, Any]] = []
    with StreamSource(stream.handle.delegate, savepoint.directory) as src:
        batches = list(
            decode_keyed_file(src, stream.handle, stream.layout, compressed=stream.header.compressed)
        )
    for batch in batches:
        for row in batch.to_pylist():
            state = codecs[row["state"]]
            key = row["key"] if isinstance(row["key"], bytes) else key_bytes(row["key"])
            original: Parts = (key, row["namespace"], row["user_key"], row["value"], row["timestamp"])
            raw[row["state"]].append(original)
            if state.write_reasons():
                rebuilt.append(row)  # checked by the refusal tests; kept as Flink wrote it here
                counts["refused"] += 1
                continue
            entry = _decoded_entry(state, key, row)
            assert _parts(entry) == original, (row["state"], row)
            assert entry.key_cell(key_codec) == row["key"]
            rebuilt.append(entry.row(key_codec, row["key_group"], row["state"]))
            counts["entries"] += 1
    if stream.header.compressed or not batches:
        return
    data = _file(savepoint, stream)
    first = min(o for o in stream.handle.offsets if o)
    out = io.BytesIO()
    table = pa.Table.from_pylist(rebuilt, schema=batches[0].schema)
    handle = stream.handle
    written = write_keyed_file(
        out,
        data[:first],
        stream.layout,
        [table],
        KeyGroupRange(handle.key_group_start, handle.key_group_end),
        compressed=False,
    )
    assert written.offsets == handle.offsets
    assert out.getvalue() == data
    counts["files"] += 1


@pytest.mark.parametrize("case", SAVEPOINTS)
def test_every_entry_encodes_to_the_bytes_flink_wrote(case: str) -> None:
    counts: dict[str, int] = defaultdict(int)
    with open_canonical(ALL_FLINK / case) as savepoint:
        for operator_id, streams in savepoint.keyed_streams.items():
            raw: dict[str, list[Parts]] = defaultdict(list)
            codecs: dict[str, StateCodecs] = {}
            for stream in streams:
                _round_trip_stream(savepoint, stream, raw, counts)
                for name, c in state_codecs(stream).items():
                    codecs.setdefault(name, c)
            # The export's typed batches (Arrow), read back and encoded: the same bytes, in file order.
            op = next(o for o in savepoint.metadata.operators if o.operator_id == operator_id)
            seen: dict[str, int] = defaultdict(int)
            for name, batch in state_batches(savepoint, op.uid or op.operator_id):
                if codecs[name].write_reasons():
                    continue
                for row in arrow_rows(batch):
                    expected = raw[name][seen[name]]
                    assert _parts(encode_arrow_entry(codecs[name], row)) == expected, (name, row)
                    seen[name] += 1
                    counts["arrow"] += 1
            assert {n: len(raw[n]) for n in seen} == dict(seen)
    if case in WITHOUT_KEYED_STATE:
        assert counts["entries"] == 0 and counts["refused"] == 0
    else:
        assert counts["entries"] > 0
        assert counts["arrow"] == counts["entries"]


def _typed_codecs(case: str) -> dict[str, StateCodecs]:
    with open_canonical(ALL_FLINK / case) as savepoint:
        out: dict[str, StateCodecs] = {}
        for streams in savepoint.keyed_streams.values():
            for stream in streams:
                for name, c in state_codecs(stream).items():
                    out.setdefault(name, c)
        return out


def test_kryo_parts_are_refused_by_column_before_anything_is_written() -> None:
    codecs = _typed_codecs("1.20/upgrade-heap-canonical-p2")
    value_state = codecs["kryo-value"]
    reasons = value_state.write_reasons()
    assert list(reasons) == ["value"]
    assert "Kryo" in reasons["value"]
    assert not value_state.value.encodable  # type: ignore[union-attr]
    with pytest.raises(NotEncodable) as caught:
        encode_entry(value_state, 1, None, b"\x01\x02")
    assert caught.value.code == "TYPE_NOT_ENCODABLE"
    assert caught.value.exit_code == ExitCode.UNSUPPORTED
    assert (
        "'kryo-value'" in str(caught.value) and "'value'" in str(caught.value) and "Kryo" in str(caught.value)
    )
    # A Kryo key refuses the key column, and with it every entry of the state.
    key_state = codecs["kryo-key"]
    assert "key" in key_state.write_reasons()
    with pytest.raises(NotEncodable, match="'key'"):
        require_encodable(key_state)
    # A POJO with a Kryo field is refused as a whole, and says which part is Kryo.
    pojo = codecs["pojo-list"]
    assert "Kryo" in pojo.write_reasons()["value"]
    with pytest.raises(NotEncodable, match="kg cannot encode it"):
        pojo.list_bytes([{"anything": 1}])
    # Only the parts asked for are checked: the key and namespace of a Kryo value state encode.
    require_encodable(value_state, ("key", "namespace"))


def test_export_rows_of_a_kryo_state_are_refused_not_passed_through() -> None:
    codecs = _typed_codecs("2.3/typed-heap-canonical-p2")
    kryo = codecs["kryo"]
    with pytest.raises(NotEncodable):
        encode_arrow_entry(kryo, {"key": "k", "value": b"\x01", "undecoded": None})


def test_values_that_do_not_fit_are_refused_with_the_column_and_the_path() -> None:
    codecs = _typed_codecs("2.3/typed-heap-canonical-p2")
    by_kind = {c.kind: c for c in codecs.values() if not c.write_reasons()}
    value_states = [c for c in codecs.values() if c.kind == "value" and not c.write_reasons()]
    assert value_states and "list" in by_kind and "map" in by_kind
    state = value_states[0]
    # A value state never holds null: Flink clears the state instead.
    with pytest.raises(ValueNotEncodable, match="no null value"):
        encode_entry(state, _a_key(state), None, None)
    # A list never holds a null element.
    listed = by_kind["list"]
    with pytest.raises(ValueNotEncodable) as caught:
        encode_entry(listed, _a_key(listed), None, [None])
    assert caught.value.exit_code == ExitCode.USAGE and "[0]" in str(caught.value)
    # A key is never null (not even a String key, whose serializer could write one).
    with pytest.raises(ValueNotEncodable, match="never null"):
        encode_entry(state, None, None, 1)
    # An export row with a column the state's schema does not have.
    with pytest.raises(ValueNotEncodable, match="no column 'colour'"):
        encode_arrow_entry(state, {"key": _a_key(state), "value": None, "colour": 1})


def test_ttl_values_encode_with_the_timestamp_the_caller_chooses() -> None:
    codecs = _typed_codecs("2.3/typed-heap-canonical-p2")
    ttl_states = [c for c in codecs.values() if c.value is not None and c.value.ttl]
    assert {c.kind for c in ttl_states} == {"value", "list", "map"}
    for state in ttl_states:
        assert state.value is not None
        inner = state.value.value  # type: ignore[attr-defined]
        sample = _sample(inner)
        written = state.value.write(TtlValue(sample, 1_234_567))
        assert written[:8] == (1_234_567).to_bytes(8, "big")
        assert state.value.decode(written) == TtlValue(sample, 1_234_567)
        arrow = state.value.to_arrow(TtlValue(sample, 99))
        assert arrow["ttl_last_access"] == 99
        assert state.value.encode_arrow(arrow)[:8] == (99).to_bytes(8, "big")


def _a_key(state: StateCodecs) -> Any:
    return _sample(state.key)


def _sample(codec: Any) -> Any:
    """A value of a simple codec (the typed job's keys and TTL values are Strings or Longs)."""
    return {"String": "k", "Long": 7, "Integer": 7}[codec.type_name]


def test_every_bundled_savepoint_is_covered() -> None:
    versions = {case.split("/")[0] for case in SAVEPOINTS}
    assert versions == {p.name for p in ALL_FLINK.iterdir() if p.is_dir() and any(p.rglob("_metadata"))}
    assert len(SAVEPOINTS) >= 90
    assert all((ALL_FLINK / case / "_metadata").is_file() for case in SAVEPOINTS)
    assert WITHOUT_KEYED_STATE <= set(SAVEPOINTS)

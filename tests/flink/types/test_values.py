"""Typed values (flink/types/values.py) against what real Flink 2.3 wrote and what the job says it wrote.

Every row of the keyed operators is decoded with the serializers of its file's header and compared key by key
with the job's own expected-state.json: the KgTestJob cases (Long values, List<Long>, Map<String, Long> with
null values, timers; String and Long keys) and the TypedStateGen cases (POJO, Tuple, Row, enum, byte[], every
primitive, TTL value/list/map, a Kryo value that stays bytes), for HashMap and RocksDB, canonical, NATIVE and
a HashMap checkpoint.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.keygroups import operator_id_for_uid
from keygroup_cli.flink.data.lookup import state_codecs, typed_entry
from keygroup_cli.flink.io.stream_source import StreamSource
from keygroup_cli.flink.keyed.decode import decode_keyed_file
from keygroup_cli.flink.layouts.heap import canonical_view, needs_canonical_view
from keygroup_cli.flink.savepoint import Savepoint, open_savepoint
from keygroup_cli.flink.types.serializer_snapshots import SerializerSnapshot
from keygroup_cli.flink.types.values import NotDecodable, StateCodecs, TtlValue, to_plain, type_codec
from tests.kg_fixture_state import FLINK_FIXTURES, expected

#: TypedJob's cases, written by Flink 2.3 and 1.20 (fixtures/flink/README-typed.md).
TYPED_CASES = tuple(
    f"{version}/{case}"
    for version in ("2.3", "1.20")
    for case in ("typed-heap-canonical-p2", "typed-rocksdb-canonical-p2", "typed-rocksdb-native-p2")
)
ALL_FLINK = FLINK_FIXTURES.parent
JOB_CASES = (
    "heap-files-p3-maxp128-long",
    "heap-inline-p3-maxp10-string",
    "heap-snappy-files-p3-maxp128-long",
    "rocksdb-canonical-snappy-p2-maxp256-string",
    "heap-checkpoint-p2-maxp128-string",
    "rocksdb-native-files-p2-maxp128-long",
)


def _opened(case: str, scratch: Path, root: Path = FLINK_FIXTURES) -> Savepoint:
    savepoint = open_savepoint(root / case)
    if needs_canonical_view(savepoint):
        return Savepoint.rewritten(canonical_view(savepoint, scratch / "canonical"), savepoint)
    return savepoint


def _entries(savepoint: Savepoint, uid: str) -> dict[Any, dict[str, list[Any]]]:
    """Return key -> state -> decoded entries (file order) of every subtask of operator ``uid``."""
    out: dict[Any, dict[str, list[Any]]] = {}
    for stream in savepoint.keyed_streams[operator_id_for_uid(uid)]:  # by id: 1.20 records no uids
        codecs = state_codecs(stream)
        with StreamSource(stream.handle.delegate, savepoint.directory) as src:
            for batch in decode_keyed_file(
                src, stream.handle, stream.layout, compressed=stream.header.compressed
            ):
                for row in batch.to_pylist():
                    entry = typed_entry(codecs[row["state"]], row)
                    out.setdefault(row["key"], {}).setdefault(entry.state, []).append(entry)
    return out


def _json_form(value: Any) -> Any:
    """Return a decoded value as the job's JSON has it: bytes as base64, TTL values without their stamp."""
    if isinstance(value, TtlValue):
        return _json_form(value.value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _json_form(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_form(v) for v in value]
    return value


@pytest.mark.parametrize("case", TYPED_CASES)
def test_typed_values_equal_the_jobs_own_values(case: str, tmp_path: Path) -> None:
    want = json.loads((ALL_FLINK / case / "expected-typed-state.json").read_text(encoding="utf-8"))
    found = _entries(_opened(case, tmp_path, ALL_FLINK), want["uid"])
    assert sorted(found) == [k["key"] for k in want["keys"]]
    for key in want["keys"]:
        states = found[key["key"]]
        for name, value in key["states"].items():
            entries = states[name]
            assert all(e.note is None and e.namespace is None for e in entries), (name, entries)
            if entries[0].kind == "map":
                got = {str(e.user_key): _json_form(e.value) for e in entries}
            else:
                (entry,) = entries
                got = _json_form(entry.value)
            assert got == value, (case, key["key"], name)
        # The TTL wrapper keeps its last-access timestamp; the Kryo value stays bytes with a note.
        assert isinstance(states["ttl-value"][0].value, TtlValue)
        assert states["ttl-value"][0].value.last_access > 1_600_000_000_000
        (kryo,) = states["kryo"]
        assert isinstance(kryo.value, bytes) and "Kryo" in (kryo.note or "")


@pytest.mark.parametrize("case", JOB_CASES)
def test_job_values_equal_expected_state(case: str, tmp_path: Path) -> None:
    want = expected(case)["keyedOperators"][0]
    found = _entries(_opened(case, tmp_path), want["uid"])
    assert len(found) == len(want["keys"])
    for key in want["keys"]:
        states = found[key["key"]]
        (total,) = states["sum"]
        (ids,) = states["ids"]
        assert (total.value, ids.value) == (key["sum"], key["ids"])
        assert {e.user_key: e.value for e in states["buckets"]} == key["buckets"]
        event = [e.timestamp for e in states.get("_timer_state/event_user-timers", [])]
        processing = [e.timestamp for e in states.get("_timer_state/processing_user-timers", [])]
        assert (sorted(event), sorted(processing)) == (key["eventTimers"], key["processingTimers"])
        assert all(e.namespace is None and e.note is None for entries in states.values() for e in entries)


def _snapshot(name: str, *nested: SerializerSnapshot, body: bytes = b"") -> SerializerSnapshot:
    raw = struct.pack(">H", len(name)) + name.encode() + struct.pack(">i", 1) + body
    return SerializerSnapshot(name, 1, raw, tuple(nested))


def test_unknown_serializers_stay_bytes_and_say_why() -> None:
    codec = type_codec(_snapshot("com.example.MySerializer$MySnapshot"))
    assert codec.reason is not None and "MySerializer" in codec.reason
    with pytest.raises(NotDecodable):
        codec.decode(b"\x00\x01")
    avro = type_codec(_snapshot("org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot"))
    assert avro.reason is not None and "Avro" in avro.reason


def test_bytes_that_do_not_fit_the_serializer_are_not_decodable() -> None:
    long_codec = type_codec(
        _snapshot("org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot")
    )
    assert long_codec.decode(struct.pack(">q", -5)) == -5
    with pytest.raises(NotDecodable):
        long_codec.decode(b"\x00" * 7)
    with pytest.raises(NotDecodable):
        long_codec.decode(b"\x00" * 9)


def test_a_list_state_with_opaque_elements_is_not_decoded() -> None:
    info_codec = StateCodecs(
        "s", "list", type_codec(_snapshot("x.K")), type_codec(_snapshot("x.N")), type_codec(_snapshot("x.E"))
    )
    with pytest.raises(NotDecodable):
        info_codec.list_elements(b"\x01,\x02")
    assert to_plain(TtlValue([1], 7)) == {"value": [1], "ttl_last_access": 7}

"""State-file headers: the states of every Flink fixture, unknown serializers, and fuzzed headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keygroup_cli.assess.summary import summarize
from keygroup_cli.core.errors import KgError, UnsupportedFormatError
from keygroup_cli.flink.io.binary import DataOutput
from keygroup_cli.flink.keyed.header import read_keyed_header
from keygroup_cli.flink.operator.header import read_operator_header
from keygroup_cli.flink.types.serializer_snapshots import COMPOSITE_MAGIC, NESTED_MAGIC

FLINK_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "flink"
CASES = sorted(p.parent for p in FLINK_FIXTURES.glob("*/*/expected-state.json"))

BASE = "org.apache.flink.api.common.typeutils.base."
STRING = f"{BASE}StringSerializer$StringSerializerSnapshot"
LONG = f"{BASE}LongSerializer$LongSerializerSnapshot"
VOID = "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_state_names_and_kinds_match_the_job(case: Path) -> None:
    expected = json.loads((case / "expected-state.json").read_text(encoding="utf-8"))
    report = json.loads((case / "flink-report.json").read_text(encoding="utf-8"))["metadata"]
    summary = summarize(case)
    by_id = {op.operator_id: op for op in summary.operators}
    by_name = {op["operatorName"]: op["operatorId"] for op in report["operators"]}
    kinds = {"VALUE": "value", "LIST": "list", "MAP": "map"}
    for keyed in expected["keyedOperators"]:
        op_id = keyed["operatorId"] if keyed["uid"] else by_name["count-no-uid"]
        op = by_id[op_id]
        if op.handle_kind == "changelog":  # its states are declared in the changelog, which kg does not read
            assert not op.states
            continue
        assert op.states is not None
        states = {s.name: s.kind for s in op.states}
        # Flink registers the (possibly empty) timer queues of every KeyedProcessFunction.
        assert set(keyed["states"]) <= set(states)
        assert all(name.startswith("_timer_state/") for name in set(states) - set(keyed["states"]))
        for name, description in keyed["states"].items():
            first = description.split()[0]
            assert states[name] == (kinds[first] if first in kinds else "timer")
        long_keys = expected["input"]["keyOf"].endswith("(Long)")
        assert op.key_serializer == ("LongSerializer" if long_keys else "StringSerializer")
    for operator in expected["operatorState"]:
        op = by_id[operator["operatorId"]]
        modes = {
            "SPLIT_DISTRIBUTE": "operator-split",
            "UNION": "operator-union",
            "BROADCAST": "operator-broadcast",
        }
        states = {s.name: s for s in op.states or ()}
        for name, description in operator["states"].items():
            assert states[name].kind == modes[description.split(",")[0]]
            assert states[name].serializer == "LongSerializer"
        split = sum(len(s["split-ids"]) for s in operator["subtasks"])
        assert states["split-ids"].elements == split


def _snapshot(out: DataOutput, cls: str, version: int = 3, body: bytes = b"", top: bool = True) -> None:
    if top:
        out.write_int(2)
    out.write_utf(cls)
    out.write_int(version)
    out.write_bytes(body)


def _state(out: DataOutput, name: str, kind: str, value_cls: str, value_body: bytes = b"") -> None:
    out.write_utf(name)
    out.write_int(0)
    out.write_int(1)
    out.write_utf("KEYED_STATE_TYPE")
    out.write_utf(kind)
    out.write_int(2)
    out.write_utf("VALUE_SERIALIZER")
    _snapshot(out, value_cls, 5, value_body)
    out.write_utf("NAMESPACE_SERIALIZER")
    _snapshot(out, VOID)


def test_unknown_serializer_is_reported_by_class_name_not_a_crash() -> None:
    out = DataOutput()
    out.write_int(6)
    out.write_bool(False)
    _snapshot(out, STRING)
    out.write_short(2)
    # A POJO snapshot body kg cannot parse: it even contains bytes that look like a class name.
    pojo_body = b"\x00\x05hello\x00\x00\x00\x07\x00\x10KEYED_STATE_TYPE\xff\x00"
    _state(out, "profile", "VALUE", "com.acme.ProfileSerializer$ProfileSnapshot", pojo_body)
    _state(out, "count", "VALUE", LONG)
    raw = out.getvalue()
    header = read_keyed_header(raw + b"\x00\x01payload", "file", end=len(raw))
    assert header.states is not None
    assert [(s.name, s.kind) for s in header.states] == [("profile", "value"), ("count", "value")]
    profile = header.states[0].serializer("VALUE_SERIALIZER")
    assert profile is not None
    assert profile.class_name == "com.acme.ProfileSerializer$ProfileSnapshot"
    assert not profile.known
    assert profile.raw.endswith(pojo_body)
    assert header.end == len(raw)


def test_unknown_composite_snapshot_is_understood_generically() -> None:
    nested = DataOutput()
    nested.write_int(COMPOSITE_MAGIC)
    nested.write_int(1)
    nested.write_utf("com.acme.Pair")  # outer body: a class name, as TupleSerializerSnapshot writes
    nested.write_int(NESTED_MAGIC)
    nested.write_int(1)
    nested.write_int(2)
    _snapshot(nested, STRING, top=False)
    _snapshot(nested, LONG, top=False)
    out = DataOutput()
    out.write_int(6)
    out.write_bool(True)
    _snapshot(out, LONG)
    out.write_short(1)
    _state(out, "pairs", "LIST", "com.acme.PairSerializer$PairSnapshot", nested.getvalue())
    raw = out.getvalue()
    header = read_keyed_header(raw, "file", end=len(raw))
    assert header.compressed
    assert header.states is not None
    value = header.states[0].serializer("VALUE_SERIALIZER")
    assert value is not None and value.known
    assert value.serializer_name == "PairSerializer<StringSerializer, LongSerializer>"


def test_old_proxy_version_is_unsupported() -> None:
    with pytest.raises(UnsupportedFormatError, match=r"Unsupported readVersion \[5\]"):
        read_keyed_header(b"\x00\x00\x00\x05\x00\x00\x00", "file")


def _real_header() -> tuple[bytes, int]:
    case = next(c for c in CASES if c.name.startswith("heap-files"))
    report = json.loads((case / "flink-report.json").read_text(encoding="utf-8"))["metadata"]
    for op in report["operators"]:
        for sub in op["subtasks"]:
            for handle in sub["managedKeyedState"]:
                first = min(o for o in handle["offsets"] if o)
                return (case / handle["delegate"]["relativePath"]).read_bytes()[:first], first
    raise AssertionError("no keyed state")


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzzed_headers_never_raise_anything_but_kg_errors(data: st.DataObject) -> None:
    raw, end = _real_header()
    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    for reader in (read_keyed_header, read_operator_header):
        try:
            reader(bytes(buf[:cut]), "file", data.draw(st.sampled_from([None, end, cut])))
        except KgError:
            pass


POJO = "org.apache.flink.api.java.typeutils.runtime.PojoSerializerSnapshot"
KRYO = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"


def _optional_map(out: DataOutput, entries: list[tuple[str, bytes | None, bytes | None]]) -> None:
    # LinkedOptionalMapSerializer.writeOptionalMap: header, size, then name, framed key, framed value.
    out.write_long(0x4F2C69A3D70)
    out.write_int(len(entries))
    for name, key, value in entries:
        out.write_utf(name)
        for part in (key, value):
            out.write_bool(part is not None)
            if part is not None:
                out.write_int(len(part))
                out.write_bytes(part)


def _versioned(cls: str, body: bytes = b"") -> bytes:
    out = DataOutput()
    _snapshot(out, cls, 2, body, top=False)
    return out.getvalue()


def test_pojo_snapshot_fields_are_parsed_by_their_frames() -> None:
    # A Kryo field snapshot whose body holds a class name and bytes that look like more snapshots: the
    # frame, not backtracking, says where it ends.
    kryo_body = DataOutput()
    kryo_body.write_utf("java.util.List")
    kryo_body.write_bytes(b"\x00\x00\x00\x02\x00\x10VALUE_SERIALIZER\x00\x00\x00\x02")
    body = DataOutput()
    body.write_utf("com.acme.Profile")
    _optional_map(
        body,
        [
            ("name", b"field-bytes", _versioned(STRING)),
            ("tags", b"field-bytes", _versioned(KRYO, kryo_body.getvalue())),
            ("gone", None, _versioned(LONG)),  # a field the class no longer has
            ("lost", b"field-bytes", None),  # a serializer snapshot that did not load
        ],
    )
    _optional_map(body, [("com.acme.Sub", None, _versioned(LONG))])
    _optional_map(body, [])
    out = DataOutput()
    out.write_int(6)
    out.write_bool(False)
    _snapshot(out, STRING)
    out.write_short(1)
    _state(out, "profile", "VALUE", POJO, body.getvalue())
    raw = out.getvalue()
    header = read_keyed_header(raw, "file", end=len(raw))
    assert header.states is not None
    value = header.states[0].serializer("VALUE_SERIALIZER")
    assert value is not None and value.known
    assert value.type_class == "com.acme.Profile"
    assert value.nested_names == ("name", "tags", "gone", "subclass com.acme.Sub")
    assert [n.class_name for n in value.nested] == [STRING, KRYO, LONG, LONG]
    assert value.nested[1].type_class == "java.util.List"
    assert value.serializer_name == (
        "PojoSerializer<StringSerializer, KryoSerializer, LongSerializer, LongSerializer>"
    )
    assert header.states[0].serializer("NAMESPACE_SERIALIZER") is not None


def test_flink_1_20_pojo_with_a_kryo_list_field_is_read_as_flink_wrote_it() -> None:
    # Before POJO snapshots were parsed, backtracking took part of this one for another serializer entry.
    summary = summarize(FLINK_FIXTURES / "1.20" / "upgrade-heap-canonical-p2", read_states=True)
    states = {s.name: s for op in summary.operators for s in op.states or ()}
    pojo = dict(states["pojo-list"].serializers)
    assert set(pojo) == {"VALUE_SERIALIZER", "NAMESPACE_SERIALIZER"}
    value = pojo["VALUE_SERIALIZER"]
    assert value.type_class == "kg.versioned.UpgradeJob$PojoWithList"
    assert dict(zip(value.nested_names, (n.type_class for n in value.nested), strict=True)) == {
        "name": None,
        "tags": "java.util.List",
    }
    assert states["pojo-plain"].serializer == "PojoSerializer<LongSerializer, StringSerializer>"


def test_flink_1_20_kryo_snapshots_are_parsed_by_their_frames() -> None:
    # Before Kryo snapshots were parsed, backtracking ended the key's Kryo snapshot inside a timer's
    # serializer early and read the rest as a snapshot of class kg.versioned.UpgradeJob$KeyBag.
    summary = summarize(FLINK_FIXTURES / "1.20" / "upgrade-heap-canonical-p2", read_states=True)
    for op in summary.operators:
        if op.key_serializer == "KryoSerializer":
            key = op.key_serializer_snapshot
            assert key is not None and key.known
            assert key.type_class == "kg.versioned.UpgradeJob$KeyBag"
            timers = {s.serializer for s in op.states or () if s.kind == "timer"}
            assert timers == {"TimerSerializer<KryoSerializer, VoidNamespaceSerializer>"}
            break
    else:
        raise AssertionError("no operator keyed by Kryo")
    states = {s.name: s for op in summary.operators for s in op.states or ()}
    kryo = dict(states["kryo-value"].serializers)["VALUE_SERIALIZER"]
    assert kryo.known and kryo.type_class == "kg.versioned.UpgradeJob$Bag"

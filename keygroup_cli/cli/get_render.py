"""Render ``kg get``'s result: one JSON document, or a block of lines per key."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from typing import Any

from rich.console import Console

from keygroup_cli.assess.summary import operator_label
from keygroup_cli.cli.render import operator_document
from keygroup_cli.flink import AvroInstant, KeyLookup, KeyState, StateEntry, TtlValue, shown_scalar


def plain(value: Any) -> Any:
    """Return a decoded value as JSON data: bytes as base64, TTL values as ``{value, ttl_last_access}``.

    Non-finite floats become the strings ``NaN``, ``Infinity`` and ``-Infinity`` (JSON has no such numbers);
    Avro dates and timestamps their ISO-8601 text (``2024-01-31``, ``2024-01-31T12:00:00.250Z``; outside
    years 1-9999 their count of days or units).
    """
    if isinstance(value, TtlValue):
        return {"value": plain(value.value), "ttl_last_access": value.last_access}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, AvroInstant):
        text = value.iso()
        return value.value if text is None else text
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return shown_scalar(value)  # SQL DECIMAL and TIMESTAMP fields as text


def _entry(entry: StateEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": plain(entry.namespace)}
    if entry.kind == "timer":
        out["timestamp"] = entry.timestamp
    else:
        if entry.kind == "map":
            out["user_key"] = plain(entry.user_key)
        out["value"] = plain(entry.value)
    if entry.note:
        out["note"] = entry.note
    return out


def _key(state: KeyState) -> dict[str, Any]:
    states: dict[str, Any] = {}
    for entry in state.entries:
        states.setdefault(entry.state, {"kind": entry.kind, "entries": []})["entries"].append(_entry(entry))
    return {
        "key": plain(state.key),
        "key_group": state.key_group,
        "subtask": state.subtask,
        "found": state.found,
        "states": states,
    }


def lookup_document(lookup: KeyLookup, typed: str, name: str | None = None) -> dict[str, Any]:
    """Return ``kg get --json``'s document (without ``schema_version`` and ``command``).

    ``typed`` is the input as the user typed it; ``name`` the operator's name.
    """
    return {
        "input": typed,
        "operator": operator_document(lookup.operator_uid, name, lookup.operator_id),
        "key_type": lookup.key_type,
        "key_serializer": lookup.key_serializer,
        "max_parallelism": lookup.max_parallelism,
        "layout_note": lookup.layout_note,
        "states": [
            {"name": s.name, "kind": s.kind, "type": s.type_name, "notes": list(s.notes)}
            for s in lookup.states
        ],
        "keys": [_key(k) for k in lookup.keys],
    }


def timer_time(millis: int | None) -> str:
    """Return a timer's epoch milliseconds as ISO-8601 UTC (``2100-01-01T00:00:00.100Z``).

    Outside the years 1-9999 (``Long.MAX_VALUE``, a watermark's end-of-time timer) the milliseconds as
    they are, with their unit. ``kg get --json`` keeps the milliseconds (``timestamp``).
    """
    if millis is None:
        return "-"
    try:
        when = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=millis)
    except OverflowError:
        return f"{millis} ms since the epoch"
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return "0x" + value.hex() if value else "0x (empty)"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(plain(value), ensure_ascii=False, default=str)


def print_lookup(console: Console, lookup: KeyLookup, name: str | None = None) -> None:
    """Print each key's states: one line per value, list, map entry or timer (``name``: the operator's)."""

    def line(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    notes = {s.name: s.notes for s in lookup.states}
    label = operator_label(lookup.operator_uid, name, lookup.operator_id)
    for state in lookup.keys:
        where = f"key group {state.key_group}, subtask {state.subtask}"
        if not state.found:
            line(f"{label} key {_text(state.key)} ({lookup.key_type}): no state ({where})")
            continue
        line(f"{label} key {_text(state.key)} ({lookup.key_type}), {where}")
        width = max(len(e.state) for e in state.entries)
        for entry in state.entries:
            ns = "" if entry.namespace is None else f" [namespace {_text(entry.namespace)}]"
            if entry.kind == "timer":
                shown = f"at {timer_time(entry.timestamp)}"
            elif entry.kind == "map":
                shown = f"{_text(entry.user_key)} -> {_text(entry.value)}"
            else:
                shown = _text(entry.value)
            line(f"  {entry.state:<{width}}  {entry.kind:<5} {shown}{ns}")
        for name in dict.fromkeys(e.state for e in state.entries):
            for note in notes.get(name, ()):
                line(f"  note: {name}: {note}")
    if lookup.layout_note:
        line(f"note: {lookup.layout_note}")

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from keygroup_cli.core.errors import InvalidInputError, UnsupportedFormatError
from keygroup_cli.snapshot import MANIFEST_NAME, open_snapshot
from keygroup_cli.snapshot.manifest import (
    dumps_manifest,
    manifest_from_dict,
    manifest_to_dict,
    parse_manifest,
    read_manifest,
    write_manifest,
)

# Flink's id for uid "my-keyed-op" (fixtures/vectors/operator_ids.json / flink-savepoint-format.md §7).
OP_ID = "35a9f8ef506cec52320f30f0582ce304"


def _doc() -> dict[str, Any]:
    # maxP 10, p 3: Flink ranges [0,3] [4,6] [7,9].
    return {
        "format": "kg-snapshot",
        "format_version": 1,
        "snapshot_id": 42,
        "created_by": "kg test",
        "created_at": "2026-01-01T00:00:00Z",
        "origin": {"kind": "generated", "seed": 1},
        "operators": [
            {
                "uid": "my-keyed-op",
                "operator_id": OP_ID,
                "name": None,
                "parallelism": 3,
                "max_parallelism": 10,
                "key_type": "string",
                "states": [{"name": "count", "kind": "value"}, {"name": "buf", "kind": "operator-split"}],
                "keyed_files": [
                    {
                        "subtask": 0,
                        "key_group_start": 0,
                        "key_group_end": 3,
                        "path": "op/keyed-00000.parquet",
                        "rows": 6,
                        "bytes": 100,
                        "xxh64": "0123456789abcdef",
                        "key_group_rows": [1, 2, 3, 0],
                    },
                    {
                        "subtask": 2,
                        "key_group_start": 7,
                        "key_group_end": 9,
                        "path": "op/keyed-00002.parquet",
                        "rows": 1,
                        "bytes": 100,
                        "xxh64": "0123456789abcdef",
                        "key_group_rows": [0, 0, 1],
                    },
                ],
                "operator_files": [
                    {
                        "subtask": 1,
                        "path": "op/operator-00001.parquet",
                        "rows": 2,
                        "bytes": 9,
                        "xxh64": "00" * 8,
                    }
                ],
            }
        ],
    }


def _error(doc: Any) -> str:
    with pytest.raises(InvalidInputError) as info:
        manifest_from_dict(doc, source="snap/_manifest.json")
    assert info.value.exit_code == 3
    assert "\n" not in info.value.message and info.value.message.startswith("snap/_manifest.json")
    return info.value.code


def test_round_trip_is_lossless_and_canonical() -> None:
    doc = _doc()
    m = manifest_from_dict(doc)
    assert m.snapshot_id == 42 and m.operators[0].keyed_files[0].key_group_rows == (1, 2, 3, 0)
    assert manifest_to_dict(m) == doc
    assert parse_manifest(dumps_manifest(m)) == m


def test_unknown_additive_fields_survive_a_round_trip() -> None:
    doc = _doc()
    doc["future_top"] = {"a": 1}
    op = doc["operators"][0]
    op["flink"] = {"serializers": ["x"]}
    op["states"][0]["ttl"] = 5
    op["keyed_files"][0]["compression"] = "zstd"
    op["operator_files"][0]["note"] = True
    m = manifest_from_dict(doc)
    assert m.extensions == {"future_top": {"a": 1}}
    assert m.operators[0].extensions == {"flink": {"serializers": ["x"]}}
    assert json.loads(dumps_manifest(m)) == doc


def test_unknown_format_version_is_unsupported() -> None:
    doc = _doc()
    doc["format_version"] = 2
    with pytest.raises(UnsupportedFormatError) as info:
        manifest_from_dict(doc)
    assert info.value.code == "UNSUPPORTED_FORMAT_VERSION" and info.value.exit_code == 4
    assert "format_version 2" in info.value.message


def test_wrong_format_name() -> None:
    doc = _doc()
    doc["format"] = "iceberg"
    assert _error(doc) == "NOT_A_KG_SNAPSHOT"


def test_bad_json(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(InvalidInputError) as info:
        read_manifest(tmp_path / MANIFEST_NAME)
    assert info.value.code == "MANIFEST_JSON_INVALID" and str(tmp_path) in info.value.message


def _mutated(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(_doc())
    *parents, last = path.split(".")
    target: Any = doc
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    if value is KeyError:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "code"),
    [
        ("snapshot_id", KeyError, "MANIFEST_FIELD_MISSING"),
        ("snapshot_id", "42", "MANIFEST_FIELD_INVALID"),
        ("snapshot_id", True, "MANIFEST_FIELD_INVALID"),
        ("operators.0.parallelism", KeyError, "MANIFEST_FIELD_MISSING"),
        ("operators.0.parallelism", 0, "PARALLELISM_INVALID"),
        ("operators.0.parallelism", 11, "PARALLELISM_INVALID"),
        ("operators.0.max_parallelism", 32769, "PARALLELISM_INVALID"),
        ("operators.0.operator_id", OP_ID.upper(), "OPERATOR_ID_INVALID"),
        ("operators.0.operator_id", OP_ID[:30], "OPERATOR_ID_INVALID"),
        ("operators.0.key_type", "double", "KEY_TYPE_UNKNOWN"),
        ("operators.0.key_type", None, "MANIFEST_FIELD_MISSING"),
        ("operators.0.states.0.kind", "reducing", "STATE_KIND_UNKNOWN"),
        ("operators.0.keyed_files.1.key_group_start", 3, "KEY_GROUP_RANGES_OVERLAP"),
        ("operators.0.keyed_files.1.key_group_start", 8, "KEY_GROUP_RANGE_MISMATCH"),
        ("operators.0.keyed_files.0.key_group_rows", [1, 2, 3], "KEY_GROUP_ROWS_INVALID"),
        ("operators.0.keyed_files.0.rows", 7, "KEY_GROUP_ROWS_INVALID"),
        ("operators.0.keyed_files.0.key_group_rows", [1, 2, -3, 0], "MANIFEST_FIELD_INVALID"),
        ("operators.0.keyed_files.0.subtask", 2, "KEY_GROUP_RANGE_MISMATCH"),
        ("operators.0.keyed_files.0.subtask", 3, "SUBTASK_OUT_OF_RANGE"),
        ("operators.0.keyed_files.0.xxh64", "XYZ", "MANIFEST_FIELD_INVALID"),
        ("operators.0.keyed_files.0.path", "/etc/passwd", "PATH_ESCAPES_SNAPSHOT"),
        ("operators.0.keyed_files.0.path", "../other/keyed-00000.parquet", "PATH_ESCAPES_SNAPSHOT"),
        ("operators.0.keyed_files.0.path", "op/../../x.parquet", "PATH_ESCAPES_SNAPSHOT"),
        ("operators.0.keyed_files.0.path", "op\\x.parquet", "PATH_ESCAPES_SNAPSHOT"),
        ("operators.0.keyed_files.0.path", "op/keyed-00002.parquet", "PATH_DUPLICATE"),
        ("operators.0.states.1.name", "count", "STATE_DUPLICATE"),
        ("operators", {}, "MANIFEST_FIELD_INVALID"),
    ],
)
def test_structural_errors(path: str, value: Any, code: str) -> None:
    assert _error(_mutated(path, value)) == code


def test_gapped_range_is_rejected() -> None:
    # A file claiming [0, 2] for subtask 0 leaves key group 3 to nobody.
    doc = _mutated("operators.0.keyed_files.0.key_group_end", 2)
    doc["operators"][0]["keyed_files"][0]["key_group_rows"] = [1, 2, 3]
    assert _error(doc) == "KEY_GROUP_RANGE_MISMATCH"


def test_write_manifest_commits_atomically(tmp_path: Path) -> None:
    m = manifest_from_dict(_doc())
    target = write_manifest(tmp_path, m)
    assert target == tmp_path / MANIFEST_NAME
    assert sorted(os.listdir(tmp_path)) == [MANIFEST_NAME]  # no temp file left behind
    assert read_manifest(target) == m
    assert target.read_bytes() == dumps_manifest(m)


def test_open_snapshot_dir_or_manifest(tmp_path: Path) -> None:
    write_manifest(tmp_path, manifest_from_dict(_doc()))
    assert open_snapshot(tmp_path).path == tmp_path
    assert open_snapshot(tmp_path / MANIFEST_NAME).manifest.snapshot_id == 42


def test_open_snapshot_without_manifest(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidInputError, match=r"nor a kg snapshot .*no _manifest.json; an uncommitted write"
    ):
        open_snapshot(tmp_path)
    with pytest.raises(InvalidInputError, match="no such snapshot") as info:
        open_snapshot(tmp_path / "nope")
    assert info.value.code == "SNAPSHOT_NOT_FOUND"


def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    snap.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (snap / "op").symlink_to(outside)
    write_manifest(snap, manifest_from_dict(_doc()))
    with pytest.raises(InvalidInputError) as info:
        open_snapshot(snap)
    # A link leading outside is a containment refusal, worded as every command words it (storage.containment).
    assert info.value.code == "STATE_FILE_OUTSIDE" and "op/keyed-00000.parquet" in info.value.message

"""kg inspect on real Flink savepoints/checkpoints and on kg snapshots."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FLINK = Path(__file__).resolve().parents[2] / "fixtures" / "flink"
CASES = sorted(p.parent for p in FLINK.glob("*/*/flink-report.json"))


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_inspect_json_matches_flink_report(kg: Callable[..., Any], case: Path) -> None:
    report = json.loads((case / "flink-report.json").read_text(encoding="utf-8"))["metadata"]
    result = kg("inspect", case, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc = result.json()
    assert doc["command"] == "inspect"
    assert doc["input_format"] == (
        "flink-savepoint" if report["properties"]["isSavepoint"] else "flink-checkpoint"
    )
    assert doc["checkpoint_id"] == report["checkpointId"]
    assert doc["metadata_version"] == report["metadataVersion"]
    assert doc["format_type"] == report["properties"]["savepointFormatType"]
    assert len(doc["operators"]) == len(report["operators"])
    for ours, theirs in zip(doc["operators"], report["operators"], strict=True):
        assert ours["operator_id"] == theirs["operatorId"]
        assert ours["uid"] == theirs["operatorUid"]
        assert ours["name"] == theirs["operatorName"]
        assert ours["parallelism"] == theirs["parallelism"]
        assert ours["max_parallelism"] == theirs["maxParallelism"]
        for sub, fsub in zip(ours["subtasks"], theirs["subtasks"], strict=True):
            assert sub["subtask"] == fsub["index"]
            keyed = fsub["managedKeyedState"]
            if keyed:
                assert [sub["key_group_start"], sub["key_group_end"]] == keyed[0]["keyGroupRange"]
                assert sub["keyed_file_bytes"] == keyed[0]["stateSize"]
            else:
                assert sub["key_group_start"] is None and sub["key_group_end"] is None
            operator_state = fsub["managedOperatorState"]
            assert sub["operator_state_bytes"] == (operator_state[0]["stateSize"] if operator_state else 0)
        if any(s["managedKeyedState"] for s in theirs["subtasks"]):
            assert {s["kind"] for s in ours["states"]} <= {"value", "list", "map", "timer"}
            # A changelog checkpoint declares its states in the state changelog (dstl files), which kg does
            # not read: it lists none, and says which kind of handle it saw.
            if ours["handle_kind"] == "changelog":
                assert ours["states"] == []
            else:
                assert ours["states"]


def test_inspect_text_lists_operators_states_and_subtasks(kg: Callable[..., Any]) -> None:
    case = next(c for c in CASES if c.name == "heap-files-p3-maxp128-long")
    result = kg("inspect", case, "--subtasks")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert "flink-savepoint (Savepoint, CANONICAL)" in result.stdout
    # The operator id shortened as git shortens a hash (--json and --table plain|tsv: whole).
    assert "826c380 " in result.stdout and "826c38023c4272520855c3219fef4f3f" not in result.stdout
    assert "ids: list ListSerializer<LongSerializer>" in result.stdout
    assert "86-127" in result.stdout


@pytest.mark.parametrize("version", ["2.3", "1.20"])
def test_inspect_names_a_sql_jobs_key_fields(kg: Callable[..., Any], version: str) -> None:
    case = FLINK / version / "sql-heap-canonical-p2"
    uid = json.loads((case / "expected-sql-state.json").read_text(encoding="utf-8"))["queries"][3]["uid"]
    result = kg("inspect", case, "-o", uid)
    assert result.exit_code == 0, result.stderr
    assert "(canonical, SQL key RowData<INTEGER, VARCHAR, BOOLEAN>)" in result.stdout
    assert "accState: value RowDataSerializer<LongSerializer, LongSerializer>" in result.stdout
    doc = kg("inspect", case, "-o", uid, "--json").json()
    (op,) = doc["operators"]
    assert op["key_serializer"] == "RowDataSerializer<IntSerializer, StringDataSerializer, BooleanSerializer>"


def test_inspect_kafka_source_offsets_and_sink_prefix(kg: Callable[..., Any]) -> None:
    case = FLINK / "2.0" / "kafka-p2"
    want = json.loads((case / "expected-connector-state.json").read_text(encoding="utf-8"))
    doc = kg("inspect", case, "--kafka-source", "kafka-source", "--json").json()
    (source,) = doc["kafka_sources"]
    assert source["operator"]["uid"] == "kafka-source"
    assert [(s["partition"], s["offset"]) for s in source["splits"]] == [
        (p["partition"], p["nextOffset"]) for p in want["partitions"]
    ]
    assert source["enumerator"]["initial_discovery_finished"] is True
    text = kg("inspect", case, "--kafka-source", "kafka-source")
    assert text.exit_code == 0 and "orders partition 0: offset 10 (subtask 1)" in text.stdout
    assert "enumerator: 3 partitions (3 assigned); initial discovery finished" in text.stdout
    plain = kg("inspect", case, "--json").json()
    assert "kafka_sources" not in plain and "kafka_sinks" not in plain
    sink = kg("inspect", case, "--kafka-sink", "kafka-sink", "--json").json()
    (writer_state,) = sink["kafka_sinks"]
    assert writer_state["transactional_id_prefixes"] == [want["sink"]["transactionalIdPrefix"]]
    assert "kafka_sources" not in sink
    other = kg("inspect", FLINK / "2.3" / "uid-heap-canonical-p3", "--kafka-source", "uid-source")
    assert other.exit_code == 4 and "is not a KafkaSource's" in other.stderr


def test_inspect_native_savepoint_reads_rocksdb_metadata_file(kg: Callable[..., Any]) -> None:
    case = next(c for c in CASES if "native" in c.name)
    doc = kg("inspect", case, "--json").json()
    keyed = next(op for op in doc["operators"] if op["uid"] == "keyed-state")
    assert keyed["handle_kind"] == "rocksdb-native"
    assert {s["name"] for s in keyed["states"]} >= {"sum", "ids", "buckets"}
    assert all(sub["non_empty_key_groups"] is None for sub in keyed["subtasks"])


def test_inspect_missing_path(kg: Callable[..., Any], tmp_path: Path) -> None:
    result = kg("inspect", tmp_path / "nope", "--json")
    assert result.exit_code == 3
    assert result.json()["error"]["code"] == "SNAPSHOT_NOT_FOUND"
    assert "no such file or directory" in result.stderr


def test_inspect_corrupt_metadata_is_one_line_exit_3(kg: Callable[..., Any], tmp_path: Path) -> None:
    raw = (
        CASES[0] / json.loads((CASES[0] / "flink-report.json").read_text())["metadata"]["metadataFile"]
    ).read_bytes()
    (tmp_path / "_metadata").write_bytes(raw[:200])
    result = kg("inspect", tmp_path)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("kg: error: ")


def test_inspect_unsupported_version_exit_4(kg: Callable[..., Any], tmp_path: Path) -> None:
    (tmp_path / "_metadata").write_bytes(b"\x49\x60\x67\x2d\x00\x00\x00\x07" + b"\x00" * 32)
    result = kg("inspect", tmp_path)
    assert result.exit_code == 4
    assert "Unrecognized checkpoint version number: 7" in result.stderr


def test_inspect_missing_state_file_is_invalid(kg: Callable[..., Any], tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "heap-files-p3-maxp128-long")
    (tmp_path / "_metadata").write_bytes((case / "_metadata").read_bytes())
    result = kg("inspect", tmp_path)
    assert result.exit_code == 3
    assert "state file is missing" in result.stderr


def test_inspect_kg_snapshot(kg: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "snap"
    generated = kg("generate", out, "--operator", "counter", "-p", "2", "-m", "16", "--keys", "500")
    assert generated.exit_code == 0, generated.stderr
    result = kg("inspect", out, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["input_format"] == "kg-snapshot"
    keyed = [op for op in doc["operators"] if op["has_keyed_state"]]
    assert keyed
    op = keyed[0]
    assert [(s["key_group_start"], s["key_group_end"]) for s in op["subtasks"]] == [(0, 7), (8, 15)]
    assert sum(s["rows"] for s in op["subtasks"]) >= op["rows"]
    histogram = op["key_group_histogram"]
    assert histogram["key_groups"] == 16
    assert histogram["min_rows"] <= histogram["median_rows"] <= histogram["max_rows"]
    assert histogram["hottest"][0]["rows"] == histogram["max_rows"]
    text = kg("inspect", out).stdout
    assert "rows per key group" in text


def test_inspect_and_check_do_not_import_pyspark() -> None:
    case = next(c for c in CASES if c.name == "heap-files-p3-maxp128-long")
    code = (
        "import sys\n"
        "from keygroup_cli.cli import run\n"
        f"assert run(['inspect', {str(case)!r}, '--json']) == 0\n"
        f"run(['check', {str(case)!r}, '-p', '2', '--json'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'pyarrow'))\n"
        "print('IMPORTED', bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "IMPORTED []" in done.stdout


def _flink_key_group_bytes(case: Path, operator_id: str) -> list[int]:
    """Return bytes per key group from Flink's report: offset to next offset, or to the stream's end."""
    report = json.loads((case / "flink-report.json").read_text(encoding="utf-8"))
    op = next(o for o in report["metadata"]["operators"] if o["operatorId"] == operator_id)
    sizes = [0] * op["maxParallelism"]
    for sub in op["subtasks"]:
        for keyed in sub["managedKeyedState"]:
            delegate = keyed["delegate"]
            end = delegate.get("inlineSize") or report["files"][delegate["resolvedPath"]]
            start = keyed["keyGroupRange"][0]
            present = sorted((o, start + j) for j, o in enumerate(keyed["offsets"]) if o)
            for (offset, group), nxt in zip(present, [o for o, _ in present[1:]] + [end], strict=True):
                sizes[group] = nxt - offset
    return sizes


@pytest.mark.parametrize("name", ["heap-files-p3-maxp128-long", "rocksdb-canonical-snappy-p2-maxp256-string"])
def test_inspect_key_groups_json_matches_flinks_offsets(kg: Callable[..., Any], name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    result = kg("inspect", case, "--key-groups", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc = result.json()
    keyed = [op for op in doc["operators"] if op["has_keyed_state"]]
    assert len(keyed) == 2
    assert all("key_group_sizes" not in op for op in doc["operators"] if not op["has_keyed_state"])
    for op in keyed:
        sizes = op["key_group_sizes"]
        assert sizes["available"] is True and sizes["source"] == "key-group-offsets"
        assert sizes["bytes"] == _flink_key_group_bytes(case, op["operator_id"])
        assert sizes["key_group_bytes"] == sum(sizes["bytes"])
        assert sizes["keyed_file_bytes"] == op["keyed_file_bytes"]
        assert [s["keyed_file_bytes"] for s in sizes["subtasks"]] == [
            s["keyed_file_bytes"] for s in op["subtasks"]
        ]
        assert sizes["non_empty_key_groups"] == sum(s["non_empty_key_groups"] for s in op["subtasks"])
        assert sizes["hottest"][0]["bytes"] == sizes["max_bytes"] == max(sizes["bytes"])
        advice = sizes["advice"]
        assert (advice["min"], advice["max"]) == (2, 32)
        assert [a["parallelism"] for a in advice["parallelisms"]] == list(range(2, 33))
        current = next(a for a in advice["parallelisms"] if a["parallelism"] == op["parallelism"])
        assert current["byte_skew"] == sizes["byte_skew"]
        assert current["max_bytes"] == max(s["key_group_bytes"] for s in sizes["subtasks"])


def test_inspect_key_groups_text(kg: Callable[..., Any]) -> None:
    case = next(c for c in CASES if c.name == "heap-files-p3-maxp128-long")
    result = kg("inspect", case, "--key-groups")
    assert result.exit_code == 0
    assert result.stderr == ""
    out = result.stdout
    assert "key-group bytes: 57.1 KiB in 128 key groups (101 with data); files 62.5 KiB" in out
    assert "exact: from the key-group offsets" in out
    assert "hottest key group" in out
    assert "at parallelism 3 subtasks hold" in out
    assert "best (most even by bytes) in 2-32:" in out
    assert "even key groups" in out


def test_inspect_min_max_imply_key_groups(kg: Callable[..., Any]) -> None:
    case = next(c for c in CASES if c.name == "heap-inline-p3-maxp10-string")
    result = kg("inspect", case, "--min", "4", "--max", "50", "--json")
    assert result.exit_code == 0, result.stderr
    op = next(o for o in result.json()["operators"] if o["uid"] == "keyed-state")
    advice = op["key_group_sizes"]["advice"]
    # --max is clipped to maxParallelism 10.
    assert [a["parallelism"] for a in advice["parallelisms"]] == list(range(4, 11))
    skews = {a["parallelism"]: a["byte_skew"] for a in advice["parallelisms"]}
    assert len(advice["best"]) == 5
    assert [skews[p] for p in advice["best"]] == sorted(skews.values())[:5]


@pytest.mark.parametrize(
    ("args", "message"), [(["--min", "0"], "at least 1"), (["--min", "11"], "maxParallelism")]
)
def test_inspect_key_groups_bad_range_is_usage_error(
    kg: Callable[..., Any], args: list[str], message: str
) -> None:
    case = next(c for c in CASES if c.name == "heap-inline-p3-maxp10-string")
    result = kg("inspect", case, *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("name", ["rocksdb-native-p2-maxp128-string", "rocksdb-native-files-p2-maxp128-long"])
def test_inspect_key_groups_native_savepoint_exit_4(kg: Callable[..., Any], name: str) -> None:
    case = next(c for c in CASES if c.name == name)
    result = kg("inspect", case, "--key-groups", "--json")
    assert result.exit_code == 4
    assert result.json()["error"]["code"] == "KEY_GROUP_SIZES_UNAVAILABLE"
    assert "NATIVE" in result.stderr and "canonical savepoint" in result.stderr
    assert result.stderr.count("\n") == 1
    # Without --key-groups the same savepoint inspects fine.
    assert kg("inspect", case).exit_code == 0


def test_inspect_key_groups_missing_state_file_exit_3(kg: Callable[..., Any], tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name.startswith("heap-files-p3"))
    for f in case.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    report = json.loads((case / "flink-report.json").read_text(encoding="utf-8"))
    op = next(o for o in report["metadata"]["operators"] if o["operatorUid"] == "keyed-state")
    victim = op["subtasks"][1]["managedKeyedState"][0]["delegate"]["resolvedPath"]
    (tmp_path / victim).unlink()
    result = kg("inspect", tmp_path, "--key-groups")
    assert result.exit_code == 3
    assert result.stdout == ""
    assert victim in result.stderr and "state file is missing" in result.stderr


def test_inspect_key_groups_kg_snapshot(kg: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "snap"
    assert kg("generate", out, "--operator", "counter", "-p", "2", "-m", "16", "--keys", "500").exit_code == 0
    result = kg("inspect", out, "--key-groups", "--json")
    assert result.exit_code == 0, result.stderr
    op = next(o for o in result.json()["operators"] if o["has_keyed_state"])
    sizes = op["key_group_sizes"]
    assert sizes["source"] == "manifest-estimate"
    assert len(sizes["bytes"]) == 16
    assert [s["key_group_bytes"] for s in sizes["subtasks"]] == [
        s["keyed_file_bytes"] for s in op["subtasks"]
    ]
    assert sizes["advice"]["max"] == 16
    text = kg("inspect", out, "--key-groups").stdout
    assert "estimated: file bytes shared out by rows per key group" in text


def test_inspect_key_groups_does_not_import_pyspark() -> None:
    case = next(c for c in CASES if c.name.startswith("heap-files-p3"))
    code = (
        "import sys\n"
        "from keygroup_cli.cli import run\n"
        f"assert run(['inspect', {str(case)!r}, '--key-groups', '--json']) == 0\n"
        "print('IMPORTED', sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "IMPORTED []" in done.stdout


def test_inspect_key_groups_text_shows_current_parallelism_outside_the_range(kg: Callable[..., Any]) -> None:
    case = next(c for c in CASES if c.name == "heap-inline-p3-maxp10-string")
    doc = kg("inspect", case, "--min", "5", "--max", "10", "--json").json()
    sizes = next(o for o in doc["operators"] if o["uid"] == "keyed-state")["key_group_sizes"]
    result = kg("inspect", case, "--min", "5", "--max", "10")
    assert result.exit_code == 0 and result.stderr == ""
    section = result.stdout.split("keyed-state (canonical")[1]
    current = next(line.split() for line in section.splitlines() if line.strip().endswith("current"))
    assert current[:3] == ["3", f"{sizes['byte_skew']:.2f}", f"{sizes['key_group_skew']:.2f}"]
    assert "best (most even by bytes) in 5-10:" in section

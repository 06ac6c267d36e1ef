from __future__ import annotations


def test_ranges_json_contract(kg, range_vectors):
    result = kg("ranges", "--max-parallelism", "128", "--parallelism", "3", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc = result.json()
    assert doc["schema_version"] == 3 and doc["command"] == "ranges"
    assert (doc["max_parallelism"], doc["parallelism"]) == (128, 3)
    flink = next(c for c in range_vectors["ranges"] if (c["max_parallelism"], c["parallelism"]) == (128, 3))
    assert [[r["key_group_start"], r["key_group_end"]] for r in doc["ranges"]] == flink["ranges"]
    assert [r["subtask"] for r in doc["ranges"]] == [0, 1, 2]
    assert [r["key_groups"] for r in doc["ranges"]] == [43, 43, 42]


def test_ranges_text_table(kg):
    result = kg("ranges", "-m", "10", "-p", "3")
    assert result.exit_code == 0
    assert "maxParallelism 10, parallelism 3" in result.stdout
    assert "1.20x the mean" in result.stdout
    assert result.stderr == ""


def test_global_json_flag_before_the_command(kg):
    result = kg("--json", "ranges", "-m", "10", "-p", "2")
    assert result.exit_code == 0
    assert [r["key_group_end"] for r in result.json()["ranges"]] == [4, 9]


def test_default_max_parallelism(kg):
    result = kg("ranges", "--default-max-parallelism", "86", "--json")
    assert result.json()["default_max_parallelism"] == 256
    defaulted = kg("ranges", "--parallelism", "100", "--json").json()
    assert defaulted["max_parallelism"] == 256 and defaulted["max_parallelism_defaulted"] is True


def test_parallelism_above_max_is_a_usage_error_with_flinks_words(kg):
    result = kg("ranges", "-m", "10", "-p", "11")
    assert result.exit_code == 2
    assert result.stderr == (
        "kg: error: --parallelism 11 is above --max-parallelism 10: Maximum parallelism must not be smaller "
        "than parallelism. (choose --max-parallelism 128 or more, or --parallelism 10 or less)\n"
    )
    assert result.stdout == ""


def test_error_under_json_is_one_document(kg):
    result = kg("ranges", "-m", "40000", "-p", "1", "--json")
    assert result.exit_code == 2
    doc = result.json()
    assert doc["error"] == {
        "code": "PARALLELISM_OUT_OF_BOUNDS",
        "message": "--max-parallelism 40000: Operator parallelism not within bounds: 40000 (Flink allows a "
        "maxParallelism of 1 to 32768)",
    }
    assert result.stderr.count("\n") == 1


def test_missing_parallelism_is_usage_error(kg):
    result = kg("ranges", "-m", "10")
    assert result.exit_code == 2
    assert "Missing option '--parallelism'" in result.stderr


def test_exit_code_passed_to_ctx_exit_reaches_the_shell(tmp_path):
    # kg check/verify/diff end with ctx.exit(1); the real entry point must return it, not 0.
    import subprocess
    import sys

    from tests.conftest import FIXTURES

    case = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
    result = subprocess.run(
        [sys.executable, "-m", "keygroup_cli", "check", str(case), "--parallelism", "200"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stderr
    assert "PARALLELISM_EXCEEDS_MAX_PARALLELISM" in result.stdout

"""At 60 columns, and piped to a file, no number, id or path of a command's result is cut.

Each command runs twice: ``--json`` names the values, and the text output at ``COLUMNS=60`` must show
every one of them whole. Tables may fold a long id or path over lines, or switch to key/value records,
so the text is compared with whitespace and box-drawing removed; an ellipsis anywhere, or a line wider
than the console, fails the test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from keygroup_cli.cli import run
from keygroup_cli.cli.render import format_bytes, short_ids
from tests.conftest import FIXTURES

WIDTH = 60
#: A directory name that on its own is wider than the console: every path below it must fold or wrap.
LONG_DIR = "a-directory-name-long-enough-that-no-path-below-it-fits-in-sixty-columns"
LONG_UID = "sessions-keyed-by-user-with-an-operator-uid-wider-than-a-cell"
SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
#: Characters of table borders (U+2500..U+257F), and whitespace: what folding and layout add.
_LAYOUT = re.compile(r"[\s\u2500-\u257f]+")
_BOX = re.compile(r"[\u2500-\u257f]")


def _kg(*args: Any) -> str:
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        code = run([str(a) for a in args])
    assert code == 0, err.getvalue().decode()
    return out.getvalue().decode()


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Return two kg snapshots under a long path, one with a long uid and thousands of rows per subtask."""
    root = tmp_path_factory.mktemp("narrow") / LONG_DIR
    snap, other = root / "snap", root / "other"
    _kg("generate", snap, "-o", "counter:long:9000:3:128", "-o", f"{LONG_UID}:string:4000:2:128", "-q")
    _kg(
        "generate",
        other,
        "-o",
        "counter:long:9000:3:128",
        "-o",
        f"{LONG_UID}:string:4000:2:128",
        "--seed",
        "3",
        "-q",
    )
    return {"root": root, "snap": snap, "other": other}


@pytest.fixture
def narrow(kg: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[str, Any]]:
    """Return ``invoke(*args)`` → (text at 60 columns, JSON document) of the same command."""

    def invoke(*args: Any, json_args: tuple[Any, ...] | None = None) -> tuple[str, Any]:
        monkeypatch.setenv("COLUMNS", str(WIDTH))
        text = kg(*args)
        assert text.exit_code in (0, 1), text.stderr
        document = kg("--json", *(json_args or args)).json()
        return text.stdout, document

    return invoke


def _values(document: Any, *keys: str) -> Iterator[Any]:
    """Yield every non-null value of the given keys, anywhere in the document."""
    if isinstance(document, dict):
        for key, value in document.items():
            if key in keys and value is not None and not isinstance(value, dict | list):
                yield value
            yield from _values(value, *keys)
    elif isinstance(document, list):
        for item in document:
            yield from _values(item, *keys)


def _short(document: Any) -> list[str]:
    """Return the document's operator ids as text shows them: shortened as git shortens hashes."""
    return list(short_ids(_values(document, "operator_id")).values())


def assert_whole(text: str, values: list[Any], width: int = WIDTH) -> None:
    """Assert that ``text`` shows every value whole: ints plain or with thousands separators."""
    assert values, "the command's JSON names values to look for"
    assert "…" not in text
    # Tables must fit (rich crops what does not); plain soft-wrapped lines are the terminal's to wrap.
    too_wide = [line for line in text.splitlines() if cell_len(line) > width and _BOX.search(line)]
    assert not too_wide, too_wide
    flat = _LAYOUT.sub("", text)
    for value in values:
        shown = {str(value), f"{value:,}"} if isinstance(value, int) else {str(value)}
        assert any(_LAYOUT.sub("", s) in flat for s in shown), f"{value!r} is not shown whole"


def test_ranges(narrow: Callable[..., tuple[str, Any]]) -> None:
    text, doc = narrow("ranges", "-m", "32768", "-p", "7")
    assert_whole(text, [*_values(doc, "key_group_start", "key_group_end", "key_groups"), 32768])


def test_advise(narrow: Callable[..., tuple[str, Any]]) -> None:
    text, doc = narrow("advise", "-m", "32768", "--min", "1000", "--max", "1010", "--all")
    shown = [*_values(doc, "parallelism", "min_key_groups", "max_key_groups")]
    assert_whole(text, [*shown, *(f"{p['key_group_skew']:.2f}" for p in doc["parallelisms"])])


def test_plan(narrow: Callable[..., tuple[str, Any]]) -> None:
    text, doc = narrow("plan", "--from", "7", "--to", "9", "-m", "32768")
    runs = [f"{a}-{b}" for t in doc["transfers"] for a, b in t["runs"]]
    assert_whole(text, [*_values(doc, "from_subtask", "to_subtask", "key_groups"), *runs])


def test_plan_of_a_snapshot(narrow: Callable[..., tuple[str, Any]], snapshots: dict[str, Path]) -> None:
    text, doc = narrow("plan", snapshots["snap"], "--to", "4", "--subtasks")
    values = [*_values(doc, "uid", "rows", "moved_rows", "keyed_rows")]
    sizes = [*_values(doc, "bytes", "key_group_bytes", "moved_bytes")]
    assert (
        LONG_UID in values and max(v for v in values if isinstance(v, int)) >= 1000 and max(sizes) > 100_000
    )
    # Sizes are written in binary units, as everywhere in kg's text.
    assert_whole(text, [*values, *map(format_bytes, sizes)])


def test_rescale(narrow: Callable[..., tuple[str, Any]], snapshots: dict[str, Path]) -> None:
    out = snapshots["root"] / "rescaled"
    args = ("rescale", snapshots["snap"], "--from", "3", "--to", "4", "--engine", "local", "-q", "--subtasks")
    text, doc = narrow(*args, "--out", out, json_args=(*args, "--out", out.with_name("rescaled-json")))
    rescaled = [op for op in doc["operators"] if op["rescaled"]]
    kept = [op for op in doc["operators"] if not op["rescaled"]]
    assert rescaled and kept
    values = [
        *_values(rescaled, "uid"),
        *_values([s for op in rescaled for s in op["subtasks"]], "keyed_rows", "operator_state_rows"),
        *map(format_bytes, _values([s for op in rescaled for s in op["subtasks"]], "keyed_file_bytes")),
    ]
    values += [*(op[k] for op in kept for k in ("uid", "keyed_rows")), doc["moved_rows"]]
    ranges = [f"{s['key_group_start']}-{s['key_group_end']}" for op in rescaled for s in op["subtasks"]]
    assert_whole(text, [*values, *ranges, str(out)])


def test_generate(narrow: Callable[..., tuple[str, Any]], snapshots: dict[str, Path]) -> None:
    spec = ("-o", "counter:long:3000:3:4096", "-o", f"{LONG_UID}:string:2000:2")
    text_dest, json_dest = snapshots["root"] / "gen-text", snapshots["root"] / "gen-json"
    text, doc = narrow("generate", text_dest, *spec, json_args=("generate", json_dest, *spec))
    sizes = map(format_bytes, _values(doc, "bytes"))
    assert_whole(text, [*_values(doc, "uid", "keyed_rows", "max_parallelism"), *sizes, str(text_dest)])


def test_inspect_a_snapshot(narrow: Callable[..., tuple[str, Any]], snapshots: dict[str, Path]) -> None:
    text, doc = narrow("inspect", snapshots["snap"], "--subtasks")
    subtasks = [s for op in doc["operators"] for s in op["subtasks"]]
    values = [*_values(doc, "input", "uid"), *_short(doc), *_values(subtasks, "key_group_end", "rows")]
    assert str(snapshots["snap"]) in values
    assert_whole(text, values)


def test_inspect_a_savepoint_with_key_groups(narrow: Callable[..., tuple[str, Any]]) -> None:
    text, doc = narrow("inspect", SAVEPOINT, "--subtasks", "--key-groups")
    values = [
        *_values(doc, "input", "key_group_start", "key_group_end", "non_empty_key_groups"),
        *_short(doc),
    ]
    assert_whole(text, values)


def test_key(narrow: Callable[..., tuple[str, Any]]) -> None:
    keys = ("user-" + "x" * 70, "-9000000000000", "42")
    text, doc = narrow("key", "-t", "string", "-m", "32768", "-p", "7", "--", *keys)
    assert_whole(text, [*_values(doc, "key", "hash_code", "key_group", "subtask")])


def test_diff(narrow: Callable[..., tuple[str, Any]], snapshots: dict[str, Path]) -> None:
    text, doc = narrow("diff", snapshots["snap"], snapshots["other"])
    assert doc["same"] is False
    values = [*_values(doc, "a", "b", "rows_a", "rows_b", "only_in_a", "only_in_b")]
    assert_whole(text, [*values, LONG_UID])


def test_check(narrow: Callable[..., tuple[str, Any]]) -> None:
    text, doc = narrow("check", SAVEPOINT, "-p", "100")
    assert doc["findings"]
    assert_whole(text, [*_values(doc, "code", "subject", "operators", "operators_with_state")])


def test_verify(narrow: Callable[..., tuple[str, Any]], snapshots: dict[str, Path]) -> None:
    text, doc = narrow("verify", snapshots["snap"])
    assert_whole(text, [*_values(doc, "input", "files", "rows")])


def test_piped_output_keeps_every_path_and_id_on_one_line(
    kg: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, snapshots: dict[str, Path]
) -> None:
    # Not a terminal and no COLUMNS: rich would assume 80 columns; kg does not wrap at all.
    monkeypatch.delenv("COLUMNS")
    result = kg("inspect", snapshots["snap"], "--subtasks")
    doc = kg("inspect", snapshots["snap"], "--json").json()
    lines = result.stdout.splitlines()
    assert "…" not in result.stdout
    for value in [str(snapshots["snap"]), *_short(doc), *_values(doc, "uid")]:
        assert any(value in line for line in lines), value
    plan = kg("plan", snapshots["snap"], "--to", "4").stdout
    assert f"{LONG_UID}: parallelism 2 -> 4, maxParallelism 128" in plan

"""Every command's text output fits a terminal of 80 and of 120 columns, and never splits an id.

Each command runs as a reader types it (relative paths, in a work directory holding ``savepoint/``, the
README's fixture) with ``COLUMNS`` set: no line may be wider than the console, and no operator id
(32 hex characters in ``--json``, a unique prefix of at least 7 in text) may be cut over two lines.
Long per-subtask detail is behind ``--subtasks``: the default of ``kg rescale`` and ``kg plan`` is a
summary whose length does not grow with the new parallelism.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from keygroup_cli.cli.render import short_ids
from tests.conftest import FIXTURES

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
DEPLOYMENT = FIXTURES / "k8s" / "autoscaler-ceiling" / "deployment.yaml"
JOB_ID = "0000000000006b670000000000000005"
CHECKPOINTS = FIXTURES / "flink" / "2.3" / "heap-checkpoint-p2-maxp128-string" / JOB_ID
#: Operators without uids and names: shown by their (shortened) ids.
UID_LESS = FIXTURES / "flink" / "1.17" / "uid-heap-canonical-p3"
WIDTHS = (80, 120)
_HEX = re.compile(r"[0-9a-f]{32}")
_LAYOUT = re.compile(r"[\s\u2500-\u257f]+")

#: (name, arguments, exit code). Runs in order in one work directory: later commands read earlier output.
COMMANDS: list[tuple[str, tuple[str, ...], int]] = [
    ("ranges", ("ranges", "-m", "128", "-p", "3"), 0),
    ("key", ("key", "user-42", "-m", "128", "-p", "4"), 0),
    ("plan", ("plan", "--from", "3", "--to", "4", "-m", "128"), 0),
    ("plan-savepoint", ("plan", "savepoint", "--to", "64"), 0),
    ("advise", ("advise", "-m", "128", "--min", "64", "--max", "128"), 0),
    ("inspect", ("inspect", "savepoint"), 0),
    ("inspect-subtasks", ("inspect", "savepoint", "--subtasks"), 0),
    ("inspect-key-groups", ("inspect", "savepoint", "--key-groups"), 0),
    ("inspect-uid-less", ("inspect", "uid-less", "--subtasks"), 0),
    ("check", ("check", "savepoint"), 0),
    ("check-p200", ("check", "savepoint", "-p", "200"), 1),
    ("check-uid-less", ("check", "uid-less", "-p", "200"), 1),
    ("verify", ("verify", "savepoint"), 0),
    ("get", ("get", "savepoint", "-o", "keyed-state", "-k", "0"), 0),
    ("export", ("export", "savepoint", "-o", "keyed-state", "--out", "exported"), 0),
    ("convert", ("convert", "savepoint", "--out", "snapshot"), 0),
    ("diff", ("diff", "savepoint", "snapshot"), 0),
    ("rescale-dry-run", ("rescale", "savepoint", "--to", "64", "--out", "r64", "--dry-run"), 0),
    ("rescale", ("rescale", "savepoint", "--from", "3", "--to", "4", "-m", "1024", "--out", "r4"), 0),
    ("rescale-64", ("rescale", "savepoint", "--to", "64", "--out", "r64"), 0),
    (
        "rescale-subtasks",
        ("rescale", "savepoint", "--from", "3", "--to", "4", "--out", "r4s", "--subtasks"),
        0,
    ),
    (
        "migrate",
        ("migrate", "savepoint", "--out", "m", "--rename", "keyed-state=keyed-state-v2", "--dry-run"),
        0,
    ),
    ("generate", ("generate", "generated", "-o", "counter:long:3000:3:128"), 0),
    ("doctor", ("doctor",), 0),
    ("clean", ("clean", "r4"), 0),
    ("export-sum", ("export", "savepoint", "-o", "keyed-state", "--state", "sum", "--out", "sum.parquet"), 0),
    (
        "write",
        ("write", "savepoint", "-o", "keyed-state", "-s", "sum", "--mode", "upsert", "--data", "sum.parquet")
        + ("--out", "written", "--dry-run"),
        0,
    ),
    ("compact", ("compact", "uid-less", "--timers-before", "0", "--out", "compacted"), 0),
    ("compact-dry-run", ("compact", "savepoint", "--drop-where", "key < 9", "--out", "c", "--dry-run"), 0),
    ("gc", ("gc", "job"), 0),
    ("inspect-deployment", ("inspect", str(DEPLOYMENT)), 0),
    ("plan-deployment", ("plan", str(DEPLOYMENT)), 0),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a work directory with the reader's ``savepoint/`` and a savepoint of uid-less operators."""
    root = tmp_path_factory.mktemp("width")
    shutil.copytree(SAVEPOINT, root / "savepoint")
    shutil.copytree(UID_LESS, root / "uid-less")
    shutil.copytree(CHECKPOINTS, root / "job")
    (root / "job" / "shared").mkdir()
    (root / "job" / "shared" / "leaked-sst-0123456789abcdef0123456789abcdef").write_bytes(b"x")  # an orphan
    return root


@pytest.fixture(scope="module")
def outputs(workdir: Path) -> dict[tuple[str, int], str]:
    """Run every command at every width (the engine local: no JVM) and return its stdout by (name, width)."""
    from click.testing import CliRunner

    from keygroup_cli.cli import run

    results: dict[tuple[str, int], str] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(workdir)
        mp.setenv("NO_COLOR", "1")
        mp.setenv("KG_ENGINE", "local")
        for width in WIDTHS:
            for name, args, code in COMMANDS:
                mp.setenv("COLUMNS", str(width))
                # Each width writes its own outputs.
                args = tuple(a if a not in _OUTPUTS else f"{a}-{width}" for a in args)
                runner = CliRunner()
                with runner.isolation() as (out, err, _):
                    got = run(list(args))
                assert got == code, (name, width, err.getvalue().decode())
                results[name, width] = out.getvalue().decode()
    return results


#: Output paths of COMMANDS (and the inputs later commands read from them), one per width.
_OUTPUTS = {"exported", "snapshot", "r64", "r4", "r4s", "m", "generated", "sum.parquet", "compacted"}


def _ids(workdir: Path) -> Iterator[str]:
    """Yield every operator id of the two savepoints, whole and as text shortens it."""
    from keygroup_cli.assess.summary import summarize

    for path in (workdir / "savepoint", workdir / "uid-less"):
        ids = [op.operator_id for op in summarize(path, read_states=False).operators]
        yield from ids
        yield from short_ids(ids).values()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", [name for name, _, _ in COMMANDS])
def test_no_line_is_wider_than_the_console(
    outputs: dict[tuple[str, int], str], name: str, width: int
) -> None:
    text = outputs[name, width]
    assert text.strip(), f"kg {name} printed nothing"
    too_wide = [line for line in text.splitlines() if cell_len(line.rstrip()) > width]
    assert not too_wide, "\n".join(too_wide)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", [name for name, _, _ in COMMANDS])
def test_no_id_is_split_over_lines(
    outputs: dict[tuple[str, int], str], workdir: Path, name: str, width: int
) -> None:
    text = outputs[name, width]
    lines = [_LAYOUT.sub("", line) for line in text.splitlines()]
    flat = "".join(lines)
    for identifier in _ids(workdir):
        if identifier in flat:
            assert any(identifier in line for line in lines), f"{identifier} is split over lines"
    # Whatever else is 32-hex in the text is whole too: no line ends inside one.
    for match in _HEX.finditer(flat):
        assert any(match[0] in line for line in lines), f"{match[0]} is split over lines"


def test_text_shows_short_ids_and_json_the_whole_ones(
    outputs: dict[tuple[str, int], str], kg: Callable[..., Any]
) -> None:
    document = kg("inspect", SAVEPOINT, "--json").json()
    whole = [op["operator_id"] for op in document["operators"]]
    short = short_ids(whole)
    assert all(_HEX.fullmatch(i) for i in whole)
    text = outputs["inspect", 80]
    assert all(short[i] in text and i not in text for i in whole)
    assert all(len(s) >= 7 for s in short.values()) and len(set(short.values())) == len(whole)


def test_short_ids_grow_until_unique() -> None:
    a, b = "0" * 7 + "1" + "f" * 24, "0" * 7 + "2" + "f" * 24
    assert short_ids([a, b]) == {a: "00000001", b: "00000002"}
    assert short_ids([a]) == {a: "0000000"}


def test_rescale_prints_one_row_per_operator_unless_asked_for_subtasks(
    outputs: dict[tuple[str, int], str],
) -> None:
    at_4, at_64 = outputs["rescale", 80], outputs["rescale-64", 80]
    # The README's savepoint: 5 operators with state. Before, --to 4 at 80 columns printed 121 lines of
    # key/value records and --to 64 several hundred; now both are a table of one row per operator.
    assert len(at_4.splitlines()) <= 16 and len(at_64.splitlines()) <= 16
    assert "keyed-state" in at_4 and "3 -> 4" in at_4 and "3 -> 64" in at_64
    detailed = outputs["rescale-subtasks", 120]
    assert "key groups" in detailed and "96-127" in detailed
    plan = outputs["plan-savepoint", 80]
    assert len(plan.splitlines()) <= 30 and "--subtasks lists every transfer" in plan


def test_one_spelling_for_arrows_and_for_what_was_written(outputs: dict[tuple[str, int], str]) -> None:
    texts = {name: outputs[name, 120] for name, _, _ in COMMANDS}
    assert not [name for name, text in texts.items() if "→" in text]
    assert not [name for name, text in texts.items() if "Wrote" in text or "committed" in text]
    assert "wrote Flink savepoint r4-120" in texts["rescale"]
    assert "wrote kg snapshot snapshot-120" in texts["convert"]

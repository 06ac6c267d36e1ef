"""kg rescale and kg plan name the operators not at --from's parallelism that a rescale without it moves.

A savepoint's non-parallel source runs at 1 beside operators at 3: ``kg rescale SP --to 8`` rescales
every operator (the documented default, which scripts rely on), and says so on stderr, suggesting
``--from 3``. ``kg plan`` and ``--dry-run`` say it before anything is written, the rescale once it has
committed (a refusal stays one line on stderr), even under ``-q``: it is about what is written. The Python
``rescale()`` is unchanged.
"""

from __future__ import annotations

from keygroup_cli.cli.rescale_render import mixed_parallelism_warning
from keygroup_cli.flink.metadata.locate import read_flink_metadata
from keygroup_cli.planning.plan import plan_rescale
from keygroup_cli.snapshot import open_snapshot
from tests.conftest import FIXTURES
from tests.execution.snapshots import generate

SAVEPOINT = FIXTURES / "flink" / "2.3" / "heap-files-p3-maxp128-long"
WARNING = (
    "kg: warning: without --from or --operator every operator is rescaled to parallelism 8, also those "
    "not at 3: 'kg-source' at 1; --from 3 rescales only the operators at 3 and keeps the others' "
    "parallelism\n"
)


def test_a_rescale_without_from_names_the_source_it_moves_and_suggests_from(kg, tmp_path):
    plan = kg("plan", SAVEPOINT, "--to", "8")
    dry = kg("rescale", SAVEPOINT, "--to", "8", "--out", tmp_path / "dry", "--dry-run")
    real = kg("rescale", SAVEPOINT, "--to", "8", "--out", tmp_path / "out", "--engine", "local")
    assert plan.exit_code == dry.exit_code == real.exit_code == 0
    assert plan.stderr == dry.stderr == real.stderr == WARNING
    assert "kg-source: parallelism 1 -> 8" in plan.stdout  # the plan shows the move it warns about
    doc = kg("rescale", SAVEPOINT, "--to", "8", "--out", tmp_path / "json", "--engine", "local", "--json")
    assert doc.json()["warnings"] == [WARNING.removeprefix("kg: warning: ").rstrip("\n")]
    source = next(op for op in doc.json()["operators"] if op["uid"] == "kg-source")
    assert (source["from_parallelism"], source["to_parallelism"]) == (1, 8)


def test_no_warning_with_from_operator_or_nothing_moved(kg, tmp_path):
    for args in (
        ("--from", "3", "--to", "8"),  # the source keeps 1
        ("--to", "8", "-o", "keyed-state"),  # named operators
        ("--to", "1"),  # the source is at 1 already
    ):
        plan = kg("plan", SAVEPOINT, *args, "--json")
        real = kg("rescale", SAVEPOINT, *args, "--out", tmp_path / str(len(list(tmp_path.iterdir()))), "-q")
        assert plan.exit_code == real.exit_code == 0, real.stderr
        assert plan.stderr == real.stderr == "", args
        assert plan.json()["warnings"] == []


def test_the_warning_survives_quiet(kg, tmp_path):
    # #41 item 7: "a plain backend switch" written as `kg rescale savepoint/ --to 3 --format native -q` also
    # rescales the parallelism-1 source. That changes what is written, so -q (no progress, no other
    # warning) does not hide it: the plan, the dry run and the rescale say it.
    args = ("--to", "3", "--format", "native", "-q")
    warning = WARNING.replace("parallelism 8", "parallelism 3")
    plan = kg("plan", SAVEPOINT, *args)
    dry = kg("rescale", SAVEPOINT, *args, "--out", tmp_path / "dry", "--dry-run")
    out = tmp_path / "out"
    real = kg("rescale", SAVEPOINT, *args, "--out", out, "--engine", "local")
    assert plan.exit_code == dry.exit_code == real.exit_code == 0, real.stderr
    assert plan.stderr == dry.stderr == real.stderr == warning
    source = next(op for op in read_flink_metadata(out).metadata.operators if op.uid == "kg-source")
    assert source.parallelism == 3  # what the warning says was written
    # The form that switches backends without rescaling the source prints nothing under -q.
    kept = kg("rescale", SAVEPOINT, "--from", "3", *args, "--out", tmp_path / "kept", "--engine", "local")
    assert (kept.exit_code, kept.stderr) == (0, "")
    source = next(
        op for op in read_flink_metadata(tmp_path / "kept").metadata.operators if op.uid == "kg-source"
    )
    assert source.parallelism == 1


def test_the_switch_state_backend_how_to_hides_no_source_rescale(kg, tmp_path):
    # Every `kg rescale` of the how-to, run as written (-q included; savepoint/ is the page's canonical
    # savepoint, heap-files-p3-maxp128-long): where it moves a parallelism-1 source, the warning is there.
    page = (FIXTURES.parent / "docs" / "how-to" / "switch-state-backend.md").read_text(encoding="utf-8")
    commands = [line.split() for line in page.splitlines() if line.startswith("kg rescale ")]
    assert len(commands) >= 3 and all("-q" in words for words in commands)
    for i, words in enumerate(commands):
        words = [str(SAVEPOINT) if w == "savepoint/" else w for w in words[1:]]
        words = [str(FIXTURES.parent / w) if w.startswith("fixtures/") else w for w in words]
        out = words.index("--out")
        words[out + 1] = str(tmp_path / f"out{i}")
        dry = kg(*words, "--dry-run")
        planned = kg(*[w for w in words if w != "-q"], "--dry-run", "--json")
        assert dry.exit_code == planned.exit_code == 0, (words, dry.stderr)
        moved = [
            op["uid"]
            for op in planned.json()["operators"]
            if op["has_state"] and op["from_parallelism"] == 1 != op["to_parallelism"]
        ]
        if moved:
            assert "kg: warning: without --from or --operator" in dry.stderr, words
            assert all(repr(uid) in dry.stderr for uid in moved), (words, dry.stderr)


def test_a_refusal_stays_one_line(kg, tmp_path):
    for command in (
        ("plan", SAVEPOINT, "--to", "200"),
        ("rescale", SAVEPOINT, "--to", "200", "--out", tmp_path / "o", "--dry-run"),
        ("rescale", SAVEPOINT, "--to", "200", "--out", tmp_path / "o", "--engine", "local"),
    ):
        result = kg(*command)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1
        assert result.stderr.startswith("kg: error: --to 200 is above")


def test_the_common_parallelism_is_suggested_and_long_lists_are_cut(tmp_path):
    source = generate(
        tmp_path / "in",
        *[(f"wide-{i}", "long", 20, 4, 128) for i in range(2)],
        *[(f"narrow-{i}", "long", 20, 2, 128) for i in range(5)],
        ("single", "long", 20, 1, 128),
    )
    snapshot = open_snapshot(source)
    (warning,) = mixed_parallelism_warning(plan_rescale(snapshot, 8), None, ())
    assert "also those not at 2: " in warning and "--from 2 rescales only the operators at 2" in warning
    assert "'single' at 1; 'wide-0', 'wide-1' at 4;" in warning
    # At the common parallelism itself, the others are still named: they move to it.
    (to_common,) = mixed_parallelism_warning(plan_rescale(snapshot, 2), None, ())
    assert "'single' at 1; 'wide-0', 'wide-1' at 4;" in to_common
    # A tie goes to the higher parallelism (a job's default, against a non-parallel operator).
    tie = generate(tmp_path / "tie", ("a", "long", 20, 3, 128), ("b", "long", 20, 1, 128))
    (tied,) = mixed_parallelism_warning(plan_rescale(open_snapshot(tie), 8), None, ())
    assert "not at 3: 'b' at 1" in tied
    many = generate(tmp_path / "many", ("a", "long", 20, 3, 128), *_ops("s", 5, 1))
    (listed,) = mixed_parallelism_warning(plan_rescale(open_snapshot(many), 8), None, ())
    assert "not at 1: 'a' at 3" in listed
    few = generate(tmp_path / "few", *_ops("a", 6, 3), ("b", "long", 5, 2, 128))
    assert mixed_parallelism_warning(plan_rescale(open_snapshot(few), 8), 3, ()) == []
    many_at_1 = generate(tmp_path / "many1", *_ops("a", 6, 3), *_ops("b", 5, 1))
    (more,) = mixed_parallelism_warning(plan_rescale(open_snapshot(many_at_1), 8), None, ())
    assert "'b0', 'b1', 'b2' and 2 more at 1" in more


def _ops(prefix: str, count: int, parallelism: int) -> list[tuple[str, str, int, int, int]]:
    return [(f"{prefix}{i}", "long", 5, parallelism, 128) for i in range(count)]


def test_a_from_no_operator_runs_at_names_the_one_that_would_work(kg, tmp_path):
    # The savepoint runs at 3 (its source at 1): --from 5 selects nothing, and the refusal says --from 3.
    for command in (
        ("plan", SAVEPOINT, "--from", "5", "--to", "4"),
        ("rescale", SAVEPOINT, "--from", "5", "--to", "4", "--out", tmp_path / "o", "--dry-run"),
        ("rescale", SAVEPOINT, "--from", "5", "--to", "4", "--out", tmp_path / "o", "--engine", "local"),
    ):
        result = kg(*command)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.endswith("; --from 3 selects the operators at 3\n"), result.stderr
        assert not (tmp_path / "o").exists()
    # With --operator the operators are named: the refusal is the planner's own.
    named = kg("plan", SAVEPOINT, "--from", "5", "--to", "4", "-o", "keyed-state")
    assert named.exit_code == 2 and "--from 3" not in named.stderr

"""One short flag, one meaning, in every command; per-environment defaults from ``KG_*`` variables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import pytest

from keygroup_cli.cli import cli
from keygroup_cli.cli.options import SHORT_FLAGS

#: Commands whose flags another change owns (``rescale.py``); drop an entry once its ``-p``/``-o`` land.
PENDING: dict[str, set[str]] = {}


def _commands() -> dict[str, click.Context]:
    """Return the context of the root group and of every command (``-h`` is inherited from the root)."""
    root = cli.make_context("kg", [], resilient_parsing=True)
    found = {"": root}
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        assert command is not None
        found[name] = command.make_context(name, [], parent=root, resilient_parsing=True)
    return found


def _options(ctx: click.Context) -> list[click.Option]:
    return [p for p in ctx.command.get_params(ctx) if isinstance(p, click.Option)]


def test_every_short_flag_has_its_one_meaning_in_every_command() -> None:
    seen: dict[str, set[str]] = {}
    for name, command in _commands().items():
        for option in _options(command):
            shorts = [o for o in option.opts + option.secondary_opts if not o.startswith("--")]
            longs = {o for o in option.opts + option.secondary_opts if o.startswith("--")}
            for short in shorts:
                assert short in SHORT_FLAGS, f"kg {name} {short}: not in options.SHORT_FLAGS"
                allowed = set(SHORT_FLAGS[short][1])
                assert longs & allowed, f"kg {name} {short} is {sorted(longs)}, elsewhere {sorted(allowed)}"
                seen.setdefault(short, set()).add(name)
    # The convention is real: the shared flags are shared.
    assert {"check", "generate", "key", "plan", "ranges"} <= seen["-p"]
    assert {"advise", "check", "generate", "key", "plan", "ranges", "rescale"} <= seen["-m"]
    assert {"generate", "plan"} <= seen["-o"]
    assert {"generate", "key"} <= seen["-t"]


def test_a_command_with_a_conventional_long_flag_has_its_short_flag_too() -> None:
    for name, command in _commands().items():
        for option in _options(command):
            names = set(option.opts + option.secondary_opts)
            for short, (_meaning, longs) in SHORT_FLAGS.items():
                if names & set(longs) and short not in PENDING.get(name, set()):
                    assert short in names, f"kg {name} {sorted(names)} lacks {short}"


def test_long_flags_of_before_still_work(kg: Callable[..., Any]) -> None:
    assert (
        kg("plan", "--from", "3", "--to", "4", "--max-parallelism", "10", "--json").json()["to_parallelism"]
        == 4
    )
    short = kg("plan", "--from", "3", "-p", "4", "-m", "10", "--json").json()
    assert short["to_parallelism"] == 4 and short["max_parallelism"] == 10
    assert kg("ranges", "--parallelism", "3", "--max-parallelism", "10", "--json").json()["parallelism"] == 3


def test_root_flags_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KG_JSON", "KG_QUIET", "KG_DEBUG"):
        monkeypatch.setenv(name, "1")
    ctx = cli.make_context("kg", ["ranges"])
    assert ctx.params["json_output"] and ctx.params["quiet"] and ctx.params["debug"]
    monkeypatch.setenv("KG_JSON", "false")
    assert not cli.make_context("kg", ["ranges"]).params["json_output"]


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_kg_json_switches_results_and_errors_to_json(
    kg: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("KG_JSON", value)
    ok = kg("ranges", "-m", "10", "-p", "3")
    assert ok.exit_code == 0 and ok.json()["ranges"][2] == {
        "subtask": 2,
        "key_group_start": 7,
        "key_group_end": 9,
        "key_groups": 3,
    }
    # A usage error escapes the click context: the boundary reads the variable itself.
    failed = kg("ranges", "-m", "10")
    assert failed.exit_code == 2 and failed.json()["error"]["code"] == "USAGE"


def test_kg_json_off_prints_text(kg: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KG_JSON", "0")
    result = kg("ranges", "-m", "10", "-p", "3")
    assert result.exit_code == 0 and "maxParallelism 10, parallelism 3" in result.stdout


def test_help_shows_the_environment_variables(kg: Callable[..., Any]) -> None:
    assert "[env var: KG_JSON]" in " ".join(kg("--help").stdout.split())
    text = " ".join(kg("ranges", "--help").stdout.split())
    assert "[env var: KG_JSON]" in text and "[env var: KG_QUIET]" in text

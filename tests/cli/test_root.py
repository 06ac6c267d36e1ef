"""The root group: "did you mean" for mistyped names, and shell completion of the lazy commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from keygroup_cli.cli import cli


def test_mistyped_command_suggests_the_nearest(kg: Callable[..., Any]) -> None:
    result = kg("rescal", "snap/", "--to", "4")
    assert result.exit_code == 2 and result.stdout == ""
    assert "Error: No such command 'rescal'. Did you mean 'rescale'?" in result.stderr
    assert "Did you mean 'inspect'?" in kg("inspcet", "x").stderr


def test_a_prefix_suggests_every_command_it_starts() -> None:
    result = CliRunner().invoke(cli, ["r"], prog_name="kg")
    assert result.exit_code == 2
    assert "No such command 'r'. Did you mean one of 'ranges', 'rescale'?" in result.stderr


def test_nothing_near_suggests_nothing(kg: Callable[..., Any]) -> None:
    result = kg("xyzzy")
    assert result.exit_code == 2 and "No such command 'xyzzy'.\n" in result.stderr
    assert "Did you mean" not in result.stderr


def test_mistyped_command_under_json_is_the_error_document(kg: Callable[..., Any]) -> None:
    result = kg("--json", "rescal")
    assert result.exit_code == 2
    error = result.json()["error"]
    assert error == {"code": "USAGE", "message": "No such command 'rescal'. Did you mean 'rescale'?"}


def test_mistyped_option_suggests_the_option(kg: Callable[..., Any]) -> None:
    result = kg("ranges", "-m", "10", "--paralelism", "3")
    assert result.exit_code == 2
    assert "No such option '--paralelism'" in result.stderr and "'--parallelism'" in result.stderr
    assert "Did you mean" in result.stderr


def _complete(shell: str, words: str, cword: int | str) -> list[str]:
    """Run click's completion in-process as the shell's script would (fish passes the incomplete word)."""
    env = {"_KG_COMPLETE": f"{shell}_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    result = CliRunner().invoke(cli, [], prog_name="kg", env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_completion_lists_the_lazily_loaded_commands() -> None:
    assert _complete("bash", "kg resc", 1) == ["plain,rescale"]
    every = {line.split(",", 1)[1] for line in _complete("bash", "kg ", 1)}
    assert {"advise", "check", "inspect", "plan", "ranges", "rescale", "verify"} <= every


def test_completion_of_options_and_choices() -> None:
    assert _complete("bash", "kg ranges --par", 2) == ["plain,--parallelism"]
    assert "plain,--max-parallelism" in _complete("bash", "kg plan --max", 2)
    assert _complete("bash", "kg key -t lo", 3) == ["plain,long"]


def test_zsh_and_fish_completion_carry_the_help() -> None:
    zsh = _complete("zsh", "kg resc", 1)
    assert zsh[:2] == ["plain", "rescale"] and zsh[2].startswith("Rescale SNAPSHOT")
    fish = _complete("fish", "kg insp", "insp")
    assert fish[0].startswith("plain,inspect\tShow the operators")


def test_bash_completes_through_the_installed_script(tmp_path: Path) -> None:
    # The real thing: bash sources `_KG_COMPLETE=bash_source kg` and calls the function on TAB.
    bindir = Path(sys.executable).parent
    assert (bindir / "kg").exists(), "kg is installed next to the interpreter"
    bash = shutil.which("bash")
    assert bash is not None
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    script = subprocess.run(
        ["kg"], env={**env, "_KG_COMPLETE": "bash_source"}, capture_output=True, text=True, check=True
    ).stdout
    (tmp_path / "kg.bash").write_text(script)
    probe = (
        f"source {tmp_path / 'kg.bash'}; COMP_WORDS=(kg resc); COMP_CWORD=1; "
        '_kg_completion kg; echo "${COMPREPLY[@]}"'
    )
    done = subprocess.run([bash, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "rescale"

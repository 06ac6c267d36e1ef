"""``kg completion SHELL``: click's script for bash, zsh or fish, as ``_KG_COMPLETE`` prints it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from keygroup_cli.cli import cli

Kg = Callable[..., Any]

#: What marks each shell's script: the function registered for kg, and how the shell is told to use it.
MARKERS = {
    "bash": ("_kg_completion()", "complete -o nosort -F _kg_completion kg"),
    "zsh": ("#compdef kg", "compdef _kg_completion kg"),
    "fish": ("function _kg_completion", 'complete --no-files --command kg --arguments "(_kg_completion)"'),
}


def _sourced(shell: str) -> str:
    """Return what ``_KG_COMPLETE=<shell>_source kg`` prints: click's own script."""
    result = CliRunner().invoke(cli, [], prog_name="kg", env={"_KG_COMPLETE": f"{shell}_source"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_script_is_clicks_for_that_shell(kg: Kg, shell: str) -> None:
    result = kg("completion", shell)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == _sourced(shell)
    assert "_KG_COMPLETE" in result.stdout and f"{shell}_complete" in result.stdout
    for marker in MARKERS[shell]:
        assert marker in result.stdout


def test_an_unknown_shell_is_one_line_and_exit_2(kg: Kg) -> None:
    result = kg("completion", "tcsh")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == "kg: error: unknown shell 'tcsh': kg completes bash, zsh and fish\n"
    assert kg("--json", "completion", "tcsh").json()["error"]["code"] == "UNKNOWN_SHELL"


def test_json_carries_the_script(kg: Kg) -> None:
    doc = kg("completion", "fish", "--json").json()
    assert doc == {
        "schema_version": 3,
        "command": "completion",
        "shell": "fish",
        "complete_var": "_KG_COMPLETE",
        "script": _sourced("fish"),
    }


def test_the_shell_argument_completes() -> None:
    env = {"_KG_COMPLETE": "bash_complete", "COMP_WORDS": "kg completion ", "COMP_CWORD": "2"}
    result = CliRunner().invoke(cli, [], prog_name="kg", env=env)
    assert result.stdout.splitlines() == ["plain,bash", "plain,zsh", "plain,fish"]
    env.update(COMP_WORDS="kg compl", COMP_CWORD="1")
    assert CliRunner().invoke(cli, [], prog_name="kg", env=env).stdout.splitlines() == ["plain,completion"]


def test_bash_completes_through_the_printed_script(tmp_path: Path) -> None:
    # What the how-to tells users: `kg completion bash >> ~/.bashrc`, then TAB in a new shell.
    bindir = Path(sys.executable).parent
    assert (bindir / "kg").exists(), "kg is installed next to the interpreter"
    bash = shutil.which("bash")
    assert bash is not None
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("_KG_COMPLETE", None)
    rc = tmp_path / ".bashrc"
    with rc.open("w") as fh:
        subprocess.run(["kg", "completion", "bash"], env=env, stdout=fh, check=True)
    probe = f'source {rc}; COMP_WORDS=(kg compl); COMP_CWORD=1; _kg_completion kg; echo "${{COMPREPLY[@]}}"'
    done = subprocess.run([bash, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "completion"

"""Every command is documented: docs/reference/cli.md is generated from --help and must be current."""

from __future__ import annotations

import os

import click
from click.testing import CliRunner

from keygroup_cli.cli import cli
from tests.conftest import ROOT

CLI_DOC = ROOT / "docs" / "reference" / "cli.md"

HEADER = """# CLI reference

Generated from `kg --help` and `kg COMMAND --help`; `tests/test_docs.py` fails when it is stale.
Regenerate with `python -m pytest tests/test_docs.py --update-golden`.
"""


def _help(args: list[str]) -> str:
    runner = CliRunner()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        result = runner.invoke(cli, [*args, "--help"], prog_name="kg", terminal_width=100)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    assert result.exit_code == 0, result.output
    return result.output.rstrip() + "\n"


def _commands() -> list[str]:
    ctx = click.Context(cli)
    return cli.list_commands(ctx)


def render_cli_reference() -> str:
    parts = [HEADER, "## kg\n", "```text\n" + _help([]) + "```\n"]
    for name in _commands():
        parts += [f"## kg {name}\n", "```text\n" + _help([name]) + "```\n"]
    return "\n".join(parts)


def test_cli_reference_is_current(update_golden):
    expected = render_cli_reference()
    if update_golden:
        CLI_DOC.write_text(expected)
    assert CLI_DOC.exists(), "run: python -m pytest tests/test_docs.py --update-golden"
    assert CLI_DOC.read_text() == expected, "docs/reference/cli.md is stale: rerun with --update-golden"


def test_every_command_has_a_docstring_and_examples():
    ctx = click.Context(cli)
    names = _commands()
    assert {"ranges", "key", "plan", "advise"} <= set(names)
    for name in names:
        command = cli.get_command(ctx, name)
        assert command is not None and command.help, name
        assert command.epilog and "Examples:" in command.epilog, name


def test_docs_link_to_existing_files():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for target in _relative_links(text):
            resolved = (page.parent / target).resolve()
            assert resolved.exists(), f"{page.relative_to(ROOT)} links to missing {target}"


def _relative_links(text: str) -> list[str]:
    import re

    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    return [link for link in links if not link.startswith(("http://", "https://", "mailto:"))]

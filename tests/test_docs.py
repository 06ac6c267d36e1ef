"""Every command is documented: docs/reference/cli.md is generated from --help and must be current."""

from __future__ import annotations

import os

import click
from click.testing import CliRunner

from keygroup_cli.cli import cli
from keygroup_cli.cli.options import SHORT_FLAGS
from tests.conftest import ROOT

CLI_DOC = ROOT / "docs" / "reference" / "cli.md"

HEADER = """# CLI reference

Generated from `kg --help` and `kg COMMAND --help`; `tests/test_docs.py` fails when it is stale.
Regenerate with `python -m pytest tests/test_docs.py --update-golden`.
TAB completion for bash, zsh and fish: [shell completion](../how-to/shell-completion.md) (`kg completion`).
What kg runs with and what works here: [`kg doctor`](doctor.md). Tables for `cut`, `awk` and `sort`:
[`--table plain|tsv`](../how-to/pipe-tables.md).
"""

#: Environment variables kg reads that are not the default of an option.
OTHER_ENVIRONMENT = [
    ("NO_COLOR", "set (to anything): no colours, as `--no-color` (https://no-color.org)"),
    ("COLUMNS", "width of the text output; unset and not a terminal: lines are not wrapped"),
    ("SOURCE_DATE_EPOCH", "`kg generate`: seconds since 1970 written as the manifest's `created_at`"),
    ("_KG_COMPLETE", "`bash_source`, `zsh_source` or `fish_source`: print the shell completion script"),
    (
        "KG_CACHE_DIR",
        "kg's cache (Spark's class-data-sharing archive, Spark logs of failed runs, the native kernels' "
        "compile cache); default `~/.cache/kg`",
    ),
    ("KG_SPARK_CDS", "`0`: no class-data-sharing archive of Spark's classes"),
    (
        "KG_SPARK_DIRECT",
        "`0`: always start Spark's driver JVM through spark-submit (by default kg starts it itself with the "
        "command Spark's launcher printed for an earlier session, when nothing the launcher reads is set)",
    ),
    (
        "KG_SPARK_PRESTART",
        "`0`: no Python daemon prestarted beside an embedded (`local`) Spark session's JVM (by default one "
        "imports what the workers need while the JVM starts; Linux, at least 2 cores)",
    ),
    (
        "KG_NATIVE",
        "`0`: pure Python; `1`: the native kernels of the `[native]` extra (exit 6 without numba); "
        "`auto` (default): the kernels when numba imports, once the process has walked 32 MiB of blocks, "
        "or from the first block of a read task or checked copy of at least 32 MiB",
    ),
    ("PYSPARK_PYTHON", "the Python of Spark's workers (default in local mode: kg's own interpreter)"),
    ("SPARK_MASTER", "a Spark master: `kg rescale`'s default engine is then Spark, as with `--master`"),
    ("KG_PROGRESS", "`off`: no line per stage on stderr when it is not a terminal (bars are unchanged)"),
    ("AWS_ENDPOINT_URL", "an S3-compatible store (MinIO, Ceph); with the rest of the AWS credential chain"),
    ("KG_SCRATCH_DIR", "where inputs from object stores are downloaded and remote outputs staged"),
    (
        "KG_STATE_ROOTS",
        "more directories or object-store prefixes (`:`-separated) an input's state files may lead to",
    ),
    (
        "MALLOC_TRIM_THRESHOLD_",
        "glibc only: when it, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` is set, "
        "the `kg` command and kg's Spark workers leave the allocator as it is instead of keeping freed "
        "buffers for reuse (`keygroup_cli.core.allocator`; [performance](../performance.md))",
    ),
]


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


def _options() -> dict[str, list[click.Option]]:
    """Return the options of the root group ("") and of every command, by command name."""
    root = cli.make_context("kg", [], resilient_parsing=True)
    found = {"": [p for p in cli.get_params(root) if isinstance(p, click.Option)]}
    for name in _commands():
        command = cli.get_command(root, name)
        assert command is not None
        ctx = command.make_context(name, [], parent=root, resilient_parsing=True)
        found[name] = [p for p in command.get_params(ctx) if isinstance(p, click.Option)]
    return found


def _short_flags() -> str:
    """Return the table of short flags: one meaning each, and the commands that have it."""
    used: dict[str, set[str]] = {}
    for name, options in _options().items():
        for option in options:
            for flag in option.opts + option.secondary_opts:
                if not flag.startswith("--"):
                    used.setdefault(flag, set()).add(f"kg {name}".strip())
    every = {f"kg {name}".strip() for name in _options()}
    rows = ["| Short | Long | Meaning | Commands |", "|---|---|---|---|"]
    for short, (meaning, longs) in SHORT_FLAGS.items():
        having = used.get(short, set())
        commands = "every command" if having == every else ", ".join(sorted(having))
        rows.append(f"| `{short}` | {', '.join(f'`{x}`' for x in longs)} | {meaning} | {commands} |")
    intro = "A short flag means the same in every command that has it (`tests/cli/test_options.py`).\n"
    return "## Short flags\n\n" + intro + "\n" + "\n".join(rows) + "\n"


def _environment() -> str:
    """Return the table of environment variables: option defaults first, then the others."""
    by_var: dict[str, tuple[str, set[str]]] = {}
    for name, options in _options().items():
        for option in options:
            names = option.envvar if isinstance(option.envvar, (list, tuple)) else [option.envvar]
            for var in filter(None, names):
                flag = max(option.opts, key=len)
                by_var.setdefault(var, (flag, set()))[1].add(f"kg {name}".strip())
    rows = ["| Variable | Sets | Commands |", "|---|---|---|"]
    every = {f"kg {name}".strip() for name in _options()}
    for var, (flag, commands) in sorted(by_var.items()):
        having = "every command" if commands == every else ", ".join(sorted(commands))
        rows.append(f"| `{var}` | default of `{flag}` | {having} |")
    rows += [f"| `{var}` | {what} | |" for var, what in OTHER_ENVIRONMENT]
    intro = (
        "Options people set once per environment (a CI job, a laptop) read a default from the\n"
        "environment; an option given on the command line wins. Flags (`--json`, `--quiet`, `--debug`)\n"
        "take `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`. `--help` shows each as `[env var: ...]`.\n"
    )
    return "## Environment variables\n\n" + intro + "\n" + "\n".join(rows) + "\n"


def render_cli_reference() -> str:
    parts = [HEADER, _short_flags(), _environment(), "## kg\n", "```text\n" + _help([]) + "```\n"]
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


def test_every_environment_variable_is_documented():
    text = CLI_DOC.read_text()
    for options in _options().values():
        for option in options:
            if option.envvar:
                assert option.show_envvar, f"{option.opts}: --help does not show {option.envvar}"
                assert f"| `{option.envvar}` |" in text, option.envvar
    for var, _what in OTHER_ENVIRONMENT:
        assert f"| `{var}` |" in text


def test_shell_completion_how_to_names_every_shell():
    text = (ROOT / "docs" / "how-to" / "shell-completion.md").read_text()
    for shell in ("bash", "zsh", "fish"):
        assert f"_KG_COMPLETE={shell}_source kg" in text
        assert f"kg completion {shell} >" in text

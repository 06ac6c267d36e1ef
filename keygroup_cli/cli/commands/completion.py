"""``kg completion SHELL``: print the TAB-completion script of bash, zsh or fish (click's own)."""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem, get_completion_class

from keygroup_cli.cli.options import output_options
from keygroup_cli.cli.render import output_for
from keygroup_cli.core.errors import InvalidArgumentError

SHELLS = ("bash", "zsh", "fish")

#: The variable click's completion scripts set when they ask kg for completions (``_<PROG>_COMPLETE``).
COMPLETE_VAR = "_KG_COMPLETE"

EPILOG = """\b
Examples:
  kg completion bash >> ~/.bashrc
  kg completion zsh >> ~/.zshrc          # after compinit
  kg completion fish > ~/.config/fish/completions/kg.fish
  eval "$(kg completion bash)"           # this shell only

The script prints what _KG_COMPLETE=bash_source kg prints (zsh_source, fish_source); on TAB it asks
the kg on PATH, so completions always match the installed version. Open a new shell after installing it.
"""


def _shells(_ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(shell) for shell in SHELLS if shell.startswith(incomplete)]


@click.command(epilog=EPILOG)
@click.argument("shell", metavar="SHELL", shell_complete=_shells)
@output_options
@click.pass_context
def command(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script of SHELL: bash (4.4+), zsh or fish."""
    out = output_for(ctx)
    # Checked here rather than by click.Choice: an unknown shell is one line, as every usage error of kg.
    complete = get_completion_class(shell) if shell in SHELLS else None
    if complete is None:
        raise InvalidArgumentError(
            f"unknown shell {shell!r}: kg completes {', '.join(SHELLS[:-1])} and {SHELLS[-1]}",
            code="UNKNOWN_SHELL",
        )
    script = complete(ctx.find_root().command, {}, "kg", COMPLETE_VAR).source()
    out.result(
        "completion",
        {"shell": shell, "complete_var": COMPLETE_VAR, "script": script},
        # As click writes it for _KG_COMPLETE=bash_source: bytes, so Windows does not turn LF into CRLF.
        lambda console: click.echo(script.encode(), nl=False),
    )

"""Run kg as ``python -m keygroup_cli``."""

from __future__ import annotations

from keygroup_cli.cli import main

if __name__ == "__main__":
    main()

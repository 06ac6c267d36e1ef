"""kg's cache directory: Spark's class-data-sharing archive, failed Spark runs' logs, numba's cache."""

from __future__ import annotations

import os
from pathlib import Path


def cache_directory() -> Path:
    """Return kg's cache directory: ``$KG_CACHE_DIR``, else ``$XDG_CACHE_HOME/kg``, else ``~/.cache/kg``."""
    if os.environ.get("KG_CACHE_DIR"):
        return Path(os.environ["KG_CACHE_DIR"])
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(home) / "kg"


__all__ = ["cache_directory"]

"""The test tree itself: every test module can be collected in one run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique() -> None:
    # tests/ has no __init__.py files, so pytest imports each module by its basename (prepend mode): two
    # test_x.py in different directories stop the whole run at collection, though each runs alone.
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []

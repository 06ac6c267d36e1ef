"""kg's cache directory: the environment decides, in a documented order."""

from __future__ import annotations

from pathlib import Path

from keygroup_cli.core.cache import cache_directory


def test_kg_cache_dir_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("KG_CACHE_DIR", str(tmp_path / "kg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == tmp_path / "kg"


def test_xdg_cache_home_then_the_home_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("KG_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == tmp_path / "xdg" / "kg"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_directory() == Path(tmp_path / "home" / ".cache" / "kg")


def test_an_empty_variable_counts_as_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("KG_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_directory() == tmp_path / "kg"

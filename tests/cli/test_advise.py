from __future__ import annotations

import pytest


def test_advise_128_at_100_is_156_percent(kg):
    doc = kg("advise", "-m", "128", "--min", "90", "--max", "128", "--json").json()
    by_p = {a["parallelism"]: a for a in doc["parallelisms"]}
    assert by_p[100]["key_group_skew"] == pytest.approx(1.5625)
    assert (by_p[100]["min_key_groups"], by_p[100]["max_key_groups"]) == (1, 2)
    assert doc["even_parallelisms"] == [128]


def test_even_parallelisms_are_divisors(kg):
    doc = kg("advise", "-m", "4096", "--min", "1", "--max", "100", "--json").json()
    assert doc["even_parallelisms"] == [p for p in range(1, 101) if 4096 % p == 0]


def test_advise_text_lists_even_and_least_skewed(kg):
    result = kg("advise", "-m", "128", "--min", "2", "--max", "100")
    assert result.exit_code == 0
    assert "Even parallelisms in range: 2, 4, 8, 16, 32, 64" in result.stdout


def test_advise_bounds(kg):
    assert kg("advise", "-m", "128", "--max", "129").exit_code == 2

"""The time flags of ``kg write`` and ``kg compact``, and their document's shape."""

from __future__ import annotations

import click
import pytest

from keygroup_cli.cli.state_edit_render import Duration, Instant


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("1700000000000", 1_700_000_000_000),
        ("2026-11-29T00:00:00Z", 1_795_910_400_000),
        ("2026-11-29T00:00:00", 1_795_910_400_000),  # no zone: UTC
        ("2026-11-29T01:00:00+01:00", 1_795_910_400_000),
    ],
)
def test_instants(text: str, ms: int) -> None:
    assert Instant().convert(text, None, None) == ms


@pytest.mark.parametrize(
    ("text", "ms"), [("500", 500), ("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("7d", 604_800_000)]
)
def test_durations(text: str, ms: int) -> None:
    assert Duration().convert(text, None, None) == ms


@pytest.mark.parametrize(
    ("kind", "text"), [(Instant, "yesterday"), (Duration, "0"), (Duration, "-5s"), (Duration, "1w")]
)
def test_refusals(kind: type[click.ParamType], text: str) -> None:
    with pytest.raises(click.BadParameter):
        kind().convert(text, None, None)

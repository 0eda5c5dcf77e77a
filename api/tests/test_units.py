"""Byte counts as every tool prints them."""

from __future__ import annotations

import pytest

from rocketcluster.api.units import binary_size


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.50 KiB"),
        (12_900_000, "12.3 MiB"),
        (50 << 20, "50.0 MiB"),
        (300 << 30, "300 GiB"),
        (3 << 40, "3.00 TiB"),
        (5 << 60, "5120 PiB"),
    ],
)
def test_binary_size(value: int, text: str) -> None:
    assert binary_size(value) == text

"""How people read quantities: one formatting of byte counts for every tool that prints
them (rocketctl, the health reports), so the same size reads the same everywhere."""

from __future__ import annotations

from typing import Final

BYTE_UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def binary_size(n_bytes: float) -> str:
    """Bytes in binary units with three significant digits: ``512 B``, ``12.3 MiB``."""
    value, unit = float(n_bytes), 0
    while abs(value) >= 1024 and unit < len(BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(value)} B"
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{digits}f} {BYTE_UNITS[unit]}"

"""Numbers for people: durations, sizes, counts, money and UTC times.

The tables carry raw integers (epoch-ms times, byte counts, milliseconds); the report
converts them here and nowhere else, so every section speaks the same units.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from rocketcluster.api.units import binary_size

# (unit name, milliseconds in it, plural label for axes)
TIME_UNITS: tuple[tuple[str, float, str], ...] = (
    ("s", 1_000.0, "seconds"),
    ("min", 60_000.0, "minutes"),
    ("h", 3_600_000.0, "hours"),
    ("d", 86_400_000.0, "days"),
)


def _missing(value: object) -> bool:
    """None, NaN and pandas' NA/NaT all mean "no value" in a result table."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):  # pd.NA and NaT refuse float(): they are missing
        return True


def duration(ms: float | int | None) -> str:
    """A duration in the two largest units that matter: ``0.31 s``, ``3 min 20 s``,
    ``2 h 5 min``, ``3 d 4 h``; sub-second precision only where it is all there is."""
    if ms is None or _missing(ms):
        return "—"
    ms = float(ms)
    sign = "\u2212" if ms < 0 else ""
    ms = abs(ms)
    if ms == 0:
        return "0 s"
    if ms < 1_000:
        return f"{sign}{ms / 1000:.2f} s" if ms >= 10 else f"{sign}{ms / 1000:.3f} s"
    if ms < 60_000:
        secs = ms / 1000
        return f"{sign}{secs:.2f} s" if secs < 10 else f"{sign}{secs:.0f} s"
    total_s = round(ms / 1000)
    days, rest = divmod(total_s, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days} d {hours} h" if hours else f"{sign}{days} d"
    if hours:
        return f"{sign}{hours} h {minutes} min" if minutes else f"{sign}{hours} h"
    return f"{sign}{minutes} min {secs} s" if secs else f"{sign}{minutes} min"


def size(n_bytes: float | int | None) -> str:
    """Bytes in binary units with three significant digits: ``512 B``, ``12.3 MiB``."""
    if n_bytes is None or _missing(n_bytes):
        return "—"
    return binary_size(n_bytes)


def count(n: float | int | None) -> str:
    """An exact count with thousands separators: ``1,234,567``."""
    if n is None or _missing(n):
        return "—"
    return f"{int(n):,}"


def compact(n: float | int | None) -> str:
    """A count short enough for a headline: ``950``, ``12.3 k``, ``4.1 M``."""
    if n is None or _missing(n):
        return "—"
    value = float(n)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            scaled = value / limit
            digits = f"{scaled:.1f}" if abs(scaled) < 100 else f"{scaled:.0f}"
            return f"{digits.removesuffix('.0')} {suffix}"
    return f"{int(value)}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 election``, ``2 elections``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def money(amount: float | None, currency: str = "$") -> str:
    """A monthly amount: two decimals under 1,000, whole units above."""
    if amount is None or _missing(amount):
        return "—"
    if abs(amount) >= 1000:
        return f"{currency}{amount:,.0f}"
    return f"{currency}{amount:,.2f}"


def percent(ratio: float | None) -> str:
    """A ratio in [0, 1] as a percentage; one decimal, so 99.9 % is not rounded to 100."""
    if ratio is None or _missing(ratio):
        return "—"
    value = ratio * 100
    if 99.9 < value < 100:
        return f"{math.floor(value * 100) / 100:.2f} %"
    return f"{value:.1f} %"


def utc(ms: int | float | None, *, seconds: bool = True) -> str:
    """An epoch-ms time as ``2025-01-31 14:05:09 UTC``."""
    if ms is None or _missing(ms):
        return "—"
    moment = datetime.fromtimestamp(float(ms) / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")


def utc_clock(ms: int | float | None) -> str:
    """Time of day only (``14:05:09``), for spans inside one report window."""
    if ms is None or _missing(ms):
        return "—"
    return datetime.fromtimestamp(float(ms) / 1000, tz=UTC).strftime("%H:%M:%S")


def window(start_ms: int | None, end_ms: int | None) -> str:
    """A window as ``2025-01-31 14:00:00 → 15:00:00 UTC (1 h)``; the date is repeated
    only when the window crosses midnight."""
    if start_ms is None or end_ms is None:
        return "unknown (no table carried a time)"
    start = datetime.fromtimestamp(start_ms / 1000, tz=UTC)
    end = datetime.fromtimestamp(end_ms / 1000, tz=UTC)
    end_fmt = "%H:%M:%S" if start.date() == end.date() else "%Y-%m-%d %H:%M:%S"
    return (
        f"{start:%Y-%m-%d %H:%M:%S} → {end.strftime(end_fmt)} UTC ({duration(end_ms - start_ms)})"
    )


def time_unit(max_ms: float) -> tuple[str, float, str]:
    """The unit a time axis should use so its largest value reads as 2 to 120 of them."""
    chosen = TIME_UNITS[0]
    for unit in TIME_UNITS:
        if max_ms >= 2 * unit[1] or unit is TIME_UNITS[0]:
            chosen = unit
    return chosen

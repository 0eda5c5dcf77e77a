"""Medians over the repetitions of a case: the machine is shared and noisy, so the
benchmark reports the median run and medians of rates, never a single run.
"""

from __future__ import annotations

from typing import Any


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def summarize_runs(runs: list[dict[str, Any]], rate: str) -> dict[str, Any]:
    """The run with the median ``rate``, with the medians of the rates and every run's
    rate."""
    best = sorted(runs, key=lambda r: r[rate])[len(runs) // 2]
    return {
        **best,
        rate: median([r[rate] for r in runs]),
        "mb_per_s": median([r["mb_per_s"] for r in runs]),
        f"runs_{rate}": [round(r[rate], 1) for r in runs],
        "runs": len(runs),
    }


def median_of(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return median(values) if values else None

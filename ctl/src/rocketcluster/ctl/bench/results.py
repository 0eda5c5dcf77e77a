"""Benchmark output: one JSON file per run under bench/results/, and a table."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any


def machine_info() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "host": platform.node(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in load],
    }


def stamp_now() -> str:
    return time.strftime("%Y%m%dT%H%M%S")


def write_results(
    out_dir: Path, name: str, payload: dict[str, Any], stamp: str | None = None
) -> Path:
    """``payload`` as ``out_dir/<name>-<stamp>.json`` (``stamp``: now unless given,
    so files written beside it in the same run can share it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = stamp or stamp_now()
    path = out_dir / f"{name}-{stamp}.json"
    payload = {"benchmark": name, "time": stamp, "machine": machine_info(), **payload}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_fmt(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)

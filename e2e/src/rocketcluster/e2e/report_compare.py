"""Two health report runs compared table for table: what the tests of the jobs assert
when a run continues another, or runs on another Spark master, and must still give the
same report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rocketcluster.jobs import tables

# What may differ between two runs of the same report: how long they took, whether they
# continued a state.
_RUN_ONLY = ("jobSeconds", "incremental")


def comparable_run(directory: Path) -> dict[str, Any]:
    """A run directory's result tables as sorted plain records, and its summary without
    the run-only fields."""
    import pyarrow.parquet as pq

    found: dict[str, Any] = {}
    for table in tables.RESULTS:
        rows = pq.read_table(directory / "parquet" / table).to_pylist()
        found[table] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    summary = json.loads((directory / "summary.json").read_text())
    for key in _RUN_ONLY:
        summary["meta"].pop(key, None)
    found["summary"] = summary
    return found


def plot_rows(history: Path) -> list[dict[str, Any]]:
    """The lag plot's parts a run's state holds (``OUT/history``), sorted."""
    import pyarrow.parquet as pq

    rows = pq.read_table(history / "state" / "lag_parts").to_pylist()
    return sorted(rows, key=lambda r: (r["consumer_group"], r["broker_group"], r["time"]))

"""The README's recovery table, made from the soak reports of record.

Why. The README sets our recovery per fault kind beside RocketMQ's ≈ 3 s; the figures
come from the committed ``summary.json`` of each local 1,000-fault soak
(``e2e/chaos/results/soak-seed<N>-1000faults/``). Copied by hand they drift from the
reports; made here, ``ctl/tests/test_soak_record.py`` holds the README to them.

``python -m rocketcluster.ctl.chaos.record [RESULTS]`` prints the table.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path("e2e/chaos/results")
LOCAL_RUN = re.compile(r"soak-seed(\d+)-\d+faults")
# (column heading, the figure per kind in summary.json's recovery_by_kind)
COLUMNS = (
    ("first failure to first success, p99", "recovery_p99_s"),
    ("heal to first success, p99", "after_heal_p99_s"),
    ("until every producer, p99", "all_recovered_p99_s"),
    ("whole again after heal, p99", "whole_p99_s"),
)


def local_runs(results: Path) -> list[tuple[int, Path]]:
    """(seed, directory) of each local soak of record, by seed."""
    found = []
    for directory in results.iterdir():
        match = LOCAL_RUN.fullmatch(directory.name)
        if match and (directory / "summary.json").is_file():
            found.append((int(match.group(1)), directory))
    return sorted(found)


def _figure(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    return "—" if value is None else f"{value:.2f}"


def table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """One row per fault kind (most faults first), each run's figure side by side."""
    totals: dict[str, int] = {}
    for summary in summaries:
        for kind, row in summary["recovery_by_kind"].items():
            totals[kind] = totals.get(kind, 0) + int(row["count"])
    lines = [
        "| fault kind | faults | " + " | ".join(h for h, _ in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for kind in sorted(totals, key=lambda k: (-totals[k], k)):
        rows = [summary["recovery_by_kind"].get(kind, {}) for summary in summaries]
        counts = " + ".join(str(row.get("count", 0)) for row in rows)
        cells = [" / ".join(_figure(row, key) for row in rows) + " s" for _, key in COLUMNS]
        lines.append(f"| {kind} | {counts} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record_table(results: Path = RESULTS) -> str:
    summaries = [json.loads((d / "summary.json").read_text()) for _, d in local_runs(results)]
    return table(summaries)


def main() -> None:
    parser = argparse.ArgumentParser(description="The README's soak recovery table.")
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS)
    print(record_table(parser.parse_args().results))


if __name__ == "__main__":
    main()

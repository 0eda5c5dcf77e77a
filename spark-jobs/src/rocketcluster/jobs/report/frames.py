"""What the report knows about its inputs: which result tables came, in what state,
how bad each status is, and the window they cover.

A report must render whatever the jobs produced: a job that was not run, ran on an
idle cluster, or wrote a table of another version each get a sentence, not a crash.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pandas as pd

from rocketcluster.jobs.tables import (
    LAG_POINTS,
    LAG_QUEUES,
    RESULT_SCHEMAS,
    SSS_GROUPS,
    column_names,
)

# Burrow's statuses, adapted: worse ones first in every list the report shows.
SEVERITY: Final[Mapping[str, int]] = {
    "ERR": 5,
    "STOP": 4,
    "STALL": 3,
    "REWIND": 2,
    "WARN": 1,
    "OK": 0,
}
UNKNOWN_SEVERITY: Final = 1  # a status this report does not know is worth a look


def severity(status: object) -> int:
    """How bad a status is (5 worst); unknown ones rank with WARN."""
    return SEVERITY.get(str(status).upper(), UNKNOWN_SEVERITY)


class State(enum.Enum):
    MISSING = "missing"  # the job producing it was not run
    BAD = "bad"  # columns do not match the contract
    EMPTY = "empty"  # ran, found nothing
    READY = "ready"


@dataclass(frozen=True)
class Table:
    """One result table as the report sees it."""

    name: str
    state: State
    frame: Any  # a pandas DataFrame with the contract's columns (empty unless READY)
    missing_columns: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        return self.state is State.READY


def table(results: Mapping[str, Any], name: str) -> Table:
    """Look a result table up and check it against ``RESULT_SCHEMAS``."""
    columns = column_names(RESULT_SCHEMAS[name])
    frame = results.get(name)
    if frame is None:
        return Table(name, State.MISSING, pd.DataFrame(columns=columns))
    lacking = tuple(c for c in columns if c not in frame.columns)
    if lacking:
        return Table(name, State.BAD, pd.DataFrame(columns=columns), lacking)
    if len(frame) == 0:
        return Table(name, State.EMPTY, frame)
    return Table(name, State.READY, frame.reset_index(drop=True))


def is_null(value: object) -> bool:
    """True for None, NaN, NaT and pd.NA alike (nullable columns arrive as any)."""
    return bool(pd.isna(value))


def as_int(value: object, default: int = 0) -> int:
    """A nullable integer cell as a Python int."""
    return default if is_null(value) else int(value)  # type: ignore[call-overload]


def derive_window(results: Mapping[str, Any]) -> tuple[int, int] | None:
    """The window the jobs looked at, when the caller did not say: the jobs' own
    window columns first, else the span of the lag snapshots."""
    starts: list[int] = []
    ends: list[int] = []
    for name in (LAG_QUEUES, SSS_GROUPS):
        t = table(results, name)
        if t.ready:
            starts.append(int(t.frame["window_start"].min()))
            ends.append(int(t.frame["window_end"].max()))
    points = table(results, LAG_POINTS)
    if points.ready:
        starts.append(int(points.frame["time"].min()))
        ends.append(int(points.frame["time"].max()))
    if not starts:
        return None
    return min(starts), max(ends)


def unusable_note(t: Table, job: str, empty: str) -> str | None:
    """The sentence shown instead of table ``t`` when it cannot be drawn (the job
    ``job`` did not run, the table is of another version, or it has no rows), else
    None."""
    from rocketcluster.jobs.report import html as h

    if t.state is State.MISSING:
        return h.note(
            f"No <code>{t.name}</code> table in this run: the {job} job was not run, or "
            "not this part of it.",
            kind="missing",
        )
    if t.state is State.BAD:
        return h.note(
            f"Table <code>{t.name}</code> lacks the columns "
            f"{h.esc(', '.join(t.missing_columns))}: the job and the report are of "
            "different versions.",
            kind="bad",
        )
    if t.state is State.EMPTY:
        return h.note(empty)
    return None

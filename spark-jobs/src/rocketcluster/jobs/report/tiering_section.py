"""The tiering section: what could move from local disk to object storage, what that
saves each month, and what the tier already holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from rocketcluster.jobs.report import fmt
from rocketcluster.jobs.report import html as h
from rocketcluster.jobs.report.frames import State, as_int, is_null, table
from rocketcluster.jobs.report.plots import MAX_BARS, as_text, savings_plot
from rocketcluster.jobs.tables import TIERING_CANDIDATES

MAX_ROWS: Final = 500
DEFAULT_CURRENCY: Final = "$"

HOWTO: Final = (
    (
        "Candidate",
        "A queue, or one sealed segment of it, that is old, large and has not been read "
        "for long: the score weighs age, size and read recency. Rank 1 is the best bet.",
    ),
    (
        "Saving per month",
        "What keeping these bytes on object storage instead of local disk would save, "
        "from the price table in the job's config. Segments are parts of their queues: "
        "add up one level, never both.",
    ),
    (h.badge("LOCAL"), "Still on the brokers' disks: the saving is still to be made."),
    (h.badge("IN TIER"), "The tier already holds it: its saving is being made."),
    ("Age / idle", "Since the newest message was stored / since it was last read."),
)


def currency(summary: Mapping[str, Any]) -> str:
    """The price table's currency if the summary says it, else dollars."""
    for scope in (summary.get("tiering"), summary):
        if isinstance(scope, Mapping) and isinstance(scope.get("currency"), str):
            return str(scope["currency"])
    return DEFAULT_CURRENCY


@dataclass(frozen=True)
class LevelTotal:
    level: str
    candidates: int
    saving: float
    bytes: int
    tiered: int
    tiered_bytes: int


def totals(candidates: Any) -> list[LevelTotal]:
    """Per level (queue, segment): what is still to be saved and what the tier holds."""
    out = []
    for level, rows in candidates.groupby("level", sort=True):
        in_tier = rows["tiered"].eq(True)  # a null "tiered" is local: nobody moved it
        local = rows[~in_tier]
        held = rows[in_tier]
        out.append(
            LevelTotal(
                level=str(level),
                candidates=len(local),
                saving=float(local["monthly_saving"].fillna(0).sum()),
                bytes=int(local["bytes"].fillna(0).sum()),
                tiered=len(held),
                tiered_bytes=int(held["bytes"].fillna(0).sum()),
            )
        )
    return out


def total_line(items: list[LevelTotal], money_unit: str) -> str:
    """``Queues: 3 to move (2.1 GiB), <b>$4.20 per month</b>; the tier holds 1 (1 GiB).``"""
    parts = []
    for t in items:
        held = (
            f"; the tier already holds {t.tiered} ({fmt.size(t.tiered_bytes)})" if t.tiered else ""
        )
        parts.append(
            f"<li>{h.esc(t.level.capitalize())}s: {t.candidates} to move "
            f"({fmt.size(t.bytes)}), total saving "
            f"<b>{h.esc(fmt.money(t.saving, money_unit))} per month</b>{h.esc(held)}.</li>"
        )
    return f'<ul class="total" data-total="tiering">{"".join(parts)}</ul>'


def _table(candidates: Any, money_unit: str) -> str:
    frame = candidates.sort_values(["rank", "monthly_saving"], ascending=[True, False])
    total = len(frame)
    rows = []
    for r in frame.head(MAX_ROWS).itertuples():
        tiered = bool(r.tiered) if not is_null(r.tiered) else False
        rows.append(
            [
                h.number(fmt.count(r.rank), as_int(r.rank)),
                h.text(r.level),
                h.text(r.broker_group),
                h.text("all topics" if is_null(r.topic) else r.topic),
                h.number(as_text(r.queue_id), as_int(r.queue_id, -1)),
                h.number(as_text(r.segment), as_int(r.segment, -1)),
                h.number(fmt.size(r.bytes), as_int(r.bytes)),
                h.number(fmt.count(r.messages), as_int(r.messages)),
                h.number(fmt.duration(r.age_ms), as_int(r.age_ms)),
                h.number(fmt.duration(r.idle_ms), as_int(r.idle_ms)),
                h.number("—" if is_null(r.score) else f"{float(r.score):.3g}", _f(r.score)),
                h.number(fmt.money(r.monthly_saving, money_unit), _f(r.monthly_saving)),
                h.Cell(h.badge("IN TIER" if tiered else "LOCAL"), int(tiered)),
            ]
        )
    headers = [
        "Rank",
        "Level",
        "Broker group",
        "Topic",
        "Queue",
        "Segment",
        "Size",
        "Messages",
        "Age",
        "Idle",
        "Score",
        "Saving / month",
        "Where",
    ]
    cut = ""
    if total > MAX_ROWS:
        cut = h.note(f"The top {MAX_ROWS} of {fmt.count(total)} candidates are shown.")
    return h.table(headers, rows, name="tiering-candidates") + cut


def _f(value: object) -> float | None:
    return None if is_null(value) else float(value)  # type: ignore[arg-type]


def tiering_section(results: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """The whole section, whatever state the candidates table is in."""
    cands = table(results, TIERING_CANDIDATES)
    head = '<section id="tiering" data-section="tiering"><h2>Tiering candidates</h2>'
    if cands.state is State.MISSING:
        body = h.note(
            "The tiering job was not run: this run has no tiering_candidates table, so "
            "no savings were estimated.",
            kind="missing",
        )
        return head + body + "</section>"
    if cands.state is State.BAD:
        body = h.note(
            "Table <code>tiering_candidates</code> lacks the columns "
            f"{h.esc(', '.join(cands.missing_columns))}: the job and the report are of "
            "different versions.",
            kind="bad",
        )
        return head + body + "</section>"
    parts = [head, h.howto("tiering candidates", HOWTO)]
    if cands.state is State.EMPTY:
        parts.append(
            h.note(
                "No queue or segment qualified: nothing on local disk was old, large and "
                "unread enough to be worth moving."
            )
        )
        return "".join([*parts, "</section>"])
    unit = currency(summary)
    frame = cands.frame
    parts.append(total_line(totals(frame), unit))
    shown = min(len(frame), MAX_BARS)
    parts.append(
        h.figure(
            "tiering-savings",
            savings_plot(frame, unit),
            f"Projected saving per month of the {shown} top-ranked candidates; grey bars "
            "are already in the tier.",
            label="Bar chart of projected monthly savings per tiering candidate",
        )
    )
    parts.append("<h3>Candidates, ranked</h3>")
    parts.append(_table(frame, unit))
    parts.append("</section>")
    return "".join(parts)

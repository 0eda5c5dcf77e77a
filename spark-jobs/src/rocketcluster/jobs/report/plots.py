"""The report's plots, each drawn from result frames into inline SVG text.

Times are epoch milliseconds in the tables; matplotlib's date axis counts days since
1970-01-01 UTC, so a time is ``ms / 86_400_000`` and every axis reads in UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import matplotlib.dates as mdates
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from rocketcluster.jobs.report import fmt
from rocketcluster.jobs.report.frames import is_null
from rocketcluster.jobs.report.svg import new_figure, plotting, to_svg

MS_PER_DAY: Final = 86_400_000.0
PALETTE: Final = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
)
MAX_LAG_LINES: Final = len(PALETTE)
MAX_BARS: Final = 15
MAX_LINE_POINTS: Final = 1_500
MIN_GAP_SHARE: Final = 0.004  # the narrowest no-master shading, as a share of the window
IN_SET: Final = "#9bd3a6"
MASTER: Final = "#1a4f8b"
NO_MASTER: Final = "#d1242f"
ELECTION: Final = "#57606a"
CANDIDATE: Final = "#1f6feb"
TIERED: Final = "#afb8c1"


def _days(ms: Any) -> Any:
    return ms / MS_PER_DAY


def _time_axis(ax: Axes, window: tuple[int, int] | None) -> None:
    # matplotlib's stubs leave these two untyped
    locator = mdates.AutoDateLocator(minticks=4, maxticks=9)  # type: ignore[no-untyped-call, unused-ignore]
    concise = mdates.ConciseDateFormatter(locator, tz=mdates.UTC)  # type: ignore[no-untyped-call, unused-ignore]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(concise)
    if window is not None and window[1] > window[0]:
        ax.set_xlim(_days(window[0]), _days(window[1]))
    ax.set_xlabel("time (UTC)")
    ax.grid(alpha=0.3, linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)


@dataclass(frozen=True)
class Series:
    """One consumer group's line: x in epoch ms, y in the plot's unit."""

    label: str
    times: Sequence[int]
    values: Sequence[float]


def _thin(series: Any) -> Any:
    """At most ``MAX_LINE_POINTS`` points: a plot is ~1000 px wide, so more only
    fatten the file. Each bucket keeps its largest lag (a peak must not vanish)."""
    if len(series) <= MAX_LINE_POINTS:
        return series
    times = series.index.to_numpy()
    width = (int(times[-1]) - int(times[0])) // MAX_LINE_POINTS + 1
    buckets = (times - times[0]) // width
    values = series.groupby(buckets).max()
    values.index = series.index.to_series().groupby(buckets).max().to_numpy()
    return values


def group_series(points: Any, groups: Sequence[str], column: str, how: str) -> list[Series]:
    """Per group, ``column`` over time across its queues: each queue's latest value is
    carried forward to every snapshot time (brokers snapshot at slightly different
    moments), then summed (messages) or maxed (time) across queues."""
    out: list[Series] = []
    for group in groups:
        rows = points[points["consumer_group"] == group]
        if rows.empty:
            continue
        wide = rows.pivot_table(
            index="time",
            columns=["broker_group", "topic", "queue_id"],
            values=column,
            aggfunc="max",
        ).ffill()
        combined = _thin(wide.sum(axis=1) if how == "sum" else wide.max(axis=1))
        out.append(
            Series(
                group,
                [int(t) for t in combined.index],
                [float(v) for v in combined.to_numpy()],
            )
        )
    return out


def lag_plot(
    series: Sequence[Series],
    statuses: Mapping[str, str],
    *,
    kind: str,
    window: tuple[int, int] | None,
) -> str:
    """Lag over time, one line per consumer group, in messages (``kind="messages"``)
    or in time (``kind="time"``, y in the unit that suits the largest lag)."""
    with plotting():
        fig = new_figure(10.5, 3.6)
        ax = fig.add_subplot()
        peak = max((max(s.values) for s in series if s.values), default=0.0)
        _, unit_ms, unit_label = fmt.time_unit(peak)
        for i, s in enumerate(series):
            ys = list(s.values) if kind == "messages" else [v / unit_ms for v in s.values]
            ax.plot(
                [_days(t) for t in s.times],
                ys,
                color=PALETTE[i % len(PALETTE)],
                linewidth=1.6,
                marker="o" if len(ys) <= 60 else None,
                markersize=3,
                label=f"{s.label} ({statuses.get(s.label, '?')})",
            )
        if kind == "messages":
            ax.set_ylabel("lag (messages)")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.compact(v)))
            ax.set_title("Consumer lag in messages: not yet consumed, summed over queues")
        else:
            ax.set_ylabel(f"lag ({unit_label})")
            ax.set_title("Consumer lag in time: age of the oldest unconsumed message, worst queue")
        ax.set_ylim(bottom=0)
        _time_axis(ax, window)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="group")
        return to_svg(fig, f"lag-{kind}")


def _bars(ax: Axes, spans: Sequence[tuple[float, float]], y: float, h: float, **kw: Any) -> None:
    if spans:
        ax.broken_barh([(_days(a), _days(b - a)) for a, b in spans], (y - h / 2, h), **kw)


def _span(start: Any, end: Any, window_end: int) -> tuple[float, float]:
    return float(start), float(window_end if is_null(end) else end)


def sss_timeline_plot(
    broker_group: str,
    intervals: Any,
    masters: Any,
    unclean_times: Sequence[int],
    *,
    window: tuple[int, int],
    title: str,
) -> str:
    """One broker group's SyncStateSet over time: a lane per replica with its in-set
    intervals, the master's intervals drawn inside them, gaps without a master shaded,
    elections as dashed lines and unclean elections in red."""
    ids = sorted(
        {int(b) for b in intervals["broker_id"]}
        | {int(m) for m in masters["master_id"] if not is_null(m)}
    )
    lane = {broker_id: len(ids) - 1 - i for i, broker_id in enumerate(ids)}
    with plotting():
        fig = new_figure(10.5, 1.5 + 0.42 * max(len(ids), 1))
        ax = fig.add_subplot()
        for broker_id in ids:
            rows = intervals[intervals["broker_id"] == broker_id]
            spans = [_span(r.start, r.end, window[1]) for r in rows.itertuples()]
            _bars(ax, spans, lane[broker_id], 0.62, facecolor=IN_SET, edgecolor="none")
        span_ms = max(window[1] - window[0], 1)
        for r in masters.itertuples():
            a, b = _span(r.start, r.end, window[1])
            if is_null(r.master_id):
                _no_master(ax, a, b, window, top=len(ids) - 0.45)
                continue
            y = lane[int(r.master_id)]
            _bars(ax, [(a, b)], y, 0.3, facecolor=MASTER, edgecolor="none")
            if (b - a) / span_ms > 0.12:
                ax.text(
                    _days((a + b) / 2),
                    y,
                    f"master, epoch {int(r.master_epoch)}",
                    color="white",
                    fontsize=7,
                    ha="center",
                    va="center",
                )
            if a > window[0]:
                ax.axvline(_days(a), color=ELECTION, linestyle="--", linewidth=1.0)
        for t in unclean_times:
            ax.axvline(_days(t), color=NO_MASTER, linewidth=2.4)
            ax.plot([_days(t)], [-0.62], marker="^", color=NO_MASTER, markersize=7)
            ax.text(
                _days(t), -0.62, "  unclean election", color=NO_MASTER, fontsize=7.5, va="center"
            )
        ax.set_yticks(range(len(ids)), [f"broker {b}" for b in reversed(ids)])
        ax.set_ylim(-1.0, len(ids) - 0.1)
        ax.set_ylabel("replica")
        ax.set_title(title, loc="left")
        _time_axis(ax, window)
        handles = [
            Patch(facecolor=IN_SET, label="in SyncStateSet"),
            Patch(facecolor=MASTER, label="master"),
            Patch(facecolor=NO_MASTER, alpha=0.3, label="no master"),
            Line2D([], [], color=ELECTION, linestyle="--", label="election"),
            Line2D([], [], color=NO_MASTER, linewidth=2.4, label="unclean election"),
        ]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        return to_svg(fig, f"sss-{broker_group}")


def _no_master(ax: Axes, a: float, b: float, window: tuple[int, int], *, top: float) -> None:
    """Shade a gap without master; a sub-second gap is widened to stay visible (its
    label gives the true duration)."""
    span_ms = max(window[1] - window[0], 1)
    shown_b = max(b, a + MIN_GAP_SHARE * span_ms)
    ax.axvspan(_days(a), _days(shown_b), color=NO_MASTER, alpha=0.18, lw=0)
    near_start = (a - window[0]) / span_ms < 0.2
    ax.text(
        _days(shown_b if near_start else a),
        top,
        f"{' ' if near_start else ''}no master {fmt.duration(b - a)}{'' if near_start else ' '}",
        color=NO_MASTER,
        fontsize=7.5,
        ha="left" if near_start else "right",
        va="bottom",
    )


def candidate_label(row: Any) -> str:
    """``orders/3 @ broker-0`` for a queue, ``segment 12 @ broker-0`` for a commit-log
    segment (it holds every topic's messages, so it names none)."""
    if str(row.level) == "segment" and not is_null(row.segment):
        return f"segment {int(row.segment)} @ {row.broker_group}"
    return f"{row.topic}/{as_text(row.queue_id)} @ {row.broker_group}"


def as_text(value: object) -> str:
    return "—" if is_null(value) else str(int(value))  # type: ignore[call-overload]


def savings_plot(candidates: Any, currency: str) -> str:
    """Projected monthly saving of the top-ranked candidates, the ones the tier
    already holds greyed out (their saving is being made)."""
    top = candidates.sort_values(["rank", "monthly_saving"], ascending=[True, False])
    top = top.head(MAX_BARS)
    with plotting():
        fig = new_figure(10.5, 1.2 + 0.3 * max(len(top), 1))
        ax = fig.add_subplot()
        labels = [f"#{int(r.rank)} {r.level}: {candidate_label(r)}" for r in top.itertuples()]
        values = [float(v) for v in top["monthly_saving"]]
        tiered = [bool(v) for v in top["tiered"]]
        bars = ax.barh(
            range(len(top)),
            values,
            color=[TIERED if t else CANDIDATE for t in tiered],
            height=0.68,
        )
        for bar, value, t in zip(bars, values, tiered, strict=True):
            ax.text(
                bar.get_width(),
                bar.get_y() + bar.get_height() / 2,
                f" {fmt.money(value, currency)}" + (" (in tier)" if t else ""),
                va="center",
                fontsize=7.5,
            )
        ax.set_yticks(range(len(top)), labels)
        ax.invert_yaxis()
        ax.set_xlabel(f"projected saving ({currency} per month)")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.money(v, currency)))
        ax.set_xlim(0, max(values, default=1.0) * 1.18 or 1.0)
        ax.grid(axis="x", alpha=0.3, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_title(f"Top {len(top)} tiering candidates by rank", loc="left")
        ax.legend(
            handles=[
                Patch(facecolor=CANDIDATE, label="candidate (on local disk)"),
                Patch(facecolor=TIERED, label="already in the tier"),
            ],
            loc="lower right",
            frameon=False,
        )
        return to_svg(fig, "tiering-savings")

"""A picture of a run for a person: throughput, errors and latency over time, with
every fault window shaded (and labelled, when there are few), so "what happened
when" needs no log. A run of several sessions is drawn end to end: each session's
clock starts at zero, so its records are shifted to follow the last one's, with a
line where each session began."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from rocketcluster.ctl.chaos.history import FAIL, INFO, INVOKE, OK, Record

COLORS = {
    "kill": "#d62728",
    "pause": "#ff7f0e",
    "partition": "#9467bd",
    "partition-master-controllers": "#8c564b",
    "partition-raft-leader": "#e377c2",
    "oneway-inbound": "#17becf",
    "oneway-outbound": "#1f77b4",
    "packet-loss": "#bcbd22",
    "kill-controller-majority": "#7f0000",
    "kill-two-replicas": "#ff1493",
    "kill-front": "#f7b6d2",
    "kill-all-controllers": "#3b0000",
    "partition-halves": "#5254a3",
    "partition-bridge": "#6b6ecf",
    "partition-majorities-ring": "#9c9ede",
    "disk-full": "#637939",
    "slow-disk": "#8ca252",
}
SHORT = {
    "kill": "kill",
    "pause": "pause",
    "partition": "part",
    "partition-master-controllers": "m|ctl",
    "partition-raft-leader": "part-ldr",
    "oneway-inbound": "1way-in",
    "oneway-outbound": "1way-out",
    "packet-loss": "loss",
    "kill-controller-majority": "kill-ctl-maj",
    "kill-two-replicas": "kill-2",
    "kill-front": "kill-fe",
    "kill-all-controllers": "kill-ctl-all",
    "partition-halves": "halves",
    "partition-bridge": "bridge",
    "partition-majorities-ring": "ring",
    "disk-full": "disk-full",
    "slow-disk": "slow-disk",
}

PHASES = {"final-heal": "final heal", "drained": "drained", "audited": "audit done"}
SESSION_GAP_S = 10.0  # drawn between two sessions of one run
LABELLED_FAULTS = 150  # more fault windows than this are shaded without labels

RecordSource = Callable[[], Iterable[Record]]


def session_offsets(records: Iterable[Record]) -> dict[int, float]:
    """Where each session's time zero falls on the run's axis (pure)."""
    spans: dict[int, float] = {}
    for r in records:
        session = int(r.get("session", 0))
        spans[session] = max(spans.get(session, 0.0), float(r["time"]))
    offsets: dict[int, float] = {}
    at = 0.0
    for session in sorted(spans):
        offsets[session] = at
        at += spans[session] + SESSION_GAP_S
    return offsets


def _on_axis(
    records: Iterable[Record], offsets: dict[int, float]
) -> Iterator[tuple[float, Record]]:
    for r in records:
        yield offsets.get(int(r.get("session", 0)), 0.0) + float(r["time"]), r


def _bins(records: Iterable[tuple[float, Record]], width: float) -> dict[str, dict[int, float]]:
    series: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    started: dict[tuple[Any, str], float] = {}
    latencies: dict[int, list[float]] = defaultdict(list)
    for t, r in records:
        b = int(t // width)
        f, kind = r.get("f"), r.get("type")
        if f == "send":
            key = (r.get("id"), "send")
            if kind == INVOKE:
                started[key] = t
                continue
            series[f"send-{kind}"][b] += 1 / width
            if kind == OK and key in started:
                latencies[b].append(t - started.pop(key))
        elif f == "receive" and kind == OK and "id" in r:
            series["delivered"][b] += 1 / width
        elif f in ("receive", "ack") and kind in (FAIL, INFO):
            series["consume-errors"][b] += 1 / width
    for b, values in latencies.items():
        values.sort()
        series["lat-p50"][b] = values[len(values) // 2] * 1000
        series["lat-max"][b] = values[-1] * 1000
    return series


def _line(ax: Any, data: dict[int, float], width: float, end: int, **kw: Any) -> None:
    xs = [i * width for i in range(end + 1)]
    # A step per bin: a count in [t, t + width) is drawn over that interval, never
    # before it (a line would put an error seemingly ahead of the fault causing it).
    ax.step(xs, [data.get(i, 0.0) for i in range(end + 1)], where="post", linewidth=0.9, **kw)


def _width(span: float) -> float:
    for limit, width in ((900, 1.0), (3600, 5.0), (4 * 3600, 15.0)):
        if span <= limit:
            return width
    return 60.0


def render(
    source: RecordSource | Sequence[Record],
    faults: Sequence[dict[str, Any]],
    path: Path,
    title: str,
) -> None:
    """Write the timeline PNG: sends/deliveries per second, failed and indeterminate
    operations per second, send latency (ok only), fault windows shaded. ``source``:
    the records, or a function that reads them anew (a soak's history is read three
    times rather than held in memory)."""

    def records() -> Iterable[Record]:
        return source() if callable(source) else source

    offsets = session_offsets(records())
    if not offsets:
        return
    span = max(t for t, _ in _on_axis(records(), offsets))
    width = _width(span)
    series = _bins(_on_axis(records(), offsets), width)
    end = int(span // width) + 1
    fig, axes = plt.subplots(
        3,
        1,
        figsize=(max(14.0, min(40.0, span / 45)), 9),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 2, 2]},
    )
    ok_ax, err_ax, lat_ax = axes
    _line(ok_ax, series["send-ok"], width, end, color="#2ca02c", label="sends acknowledged/s")
    _line(ok_ax, series["delivered"], width, end, color="#1f77b4", label="deliveries/s", alpha=0.7)
    ok_ax.set_ylabel("per second")
    ok_ax.legend(loc="upper left", fontsize=8)
    _line(err_ax, series["send-info"], width, end, color="#ff7f0e", label="sends indeterminate/s")
    _line(err_ax, series["send-fail"], width, end, color="#d62728", label="sends failed/s")
    _line(
        err_ax, series["consume-errors"], width, end, color="#7f7f7f", label="receive/ack errors/s"
    )
    err_ax.set_ylabel("per second")
    err_ax.legend(loc="upper left", fontsize=8)
    _line(lat_ax, series["lat-p50"], width, end, color="#9467bd", label="send latency p50 (ms)")
    _line(lat_ax, series["lat-max"], width, end, color="#8c564b", label="send latency max (ms)")
    lat_ax.set_yscale("symlog", linthresh=10)
    lat_ax.set_ylabel("ms")
    lat_ax.set_xlabel(f"seconds since start (bins of {width:g}s)")
    lat_ax.legend(loc="upper left", fontsize=8)
    kinds_seen = set()
    top = ok_ax.get_ylim()[1]
    labelled = sum(1 for f in faults if not f.get("skipped")) <= LABELLED_FAULTS
    for i, f in enumerate(faults):
        if f.get("skipped"):
            continue
        shift = offsets.get(int(f.get("session", 0)), 0.0)
        start = shift + f["start"]
        stop = shift + f["end"] if f.get("end") is not None else span
        color = COLORS.get(f["kind"], "#aaaaaa")
        kinds_seen.add(f["kind"])
        for ax in axes:
            ax.axvspan(start, stop, color=color, alpha=0.18, linewidth=0)
        label = SHORT.get(f["kind"], f["kind"])
        if labelled and (span <= 900 or i % 2 == 0):
            ok_ax.text(
                start,
                top * (0.97 - 0.07 * (i % 3)),
                label,
                fontsize=7,
                color=color,
                va="top",
                ha="left",
                rotation=0,
            )
    for t, r in _on_axis(records(), offsets):
        if r.get("f") != "note":
            continue
        event = r.get("event")
        if event == "session" and r.get("resumed"):
            phase = f"session {r.get('session')}"
        elif event in PHASES:
            phase = PHASES[str(event)]
        else:
            continue
        for ax in axes:
            ax.axvline(t, color="#444444", linestyle=":", linewidth=1)
        lat_ax.text(
            t,
            lat_ax.get_ylim()[1],
            f" {phase}",
            fontsize=7,
            va="top",
            ha="left",
            color="#444444",
        )
    handles = [
        Patch(color=COLORS.get(k, "#aaaaaa"), alpha=0.4, label=k) for k in sorted(kinds_seen)
    ]
    if handles:
        fig.legend(
            handles=handles,
            loc="lower center",
            ncol=min(5, len(handles)),
            fontsize=8,
            title="fault windows",
        )
    fig.suptitle(title, fontsize=11)
    ok_ax.set_xlabel("")
    for ax in axes:
        ax.grid(alpha=0.25)
        ax.set_xlim(0, math.ceil(span))
    legend_rows = -(-len(handles) // 5)
    fig.tight_layout(rect=(0, 0.03 + 0.024 * legend_rows if handles else 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_recovery(by_kind: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """Recovery per fault kind as the clients saw it — p50, p99 and max seconds from
    the first failed send to every failing producer succeeding again — one bar
    group per kind, the slowest on top, with the seeds' ~3 s drawn for reference."""
    rows = sorted(
        ((kind, row) for kind, row in by_kind.items() if row.get("count")),
        key=lambda item: item[1].get("all_recovered_max_s") or 0.0,
    )
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(rows) + 1.6))
    height = 0.26
    for i, (_, row) in enumerate(rows):
        for j, (key, label, color) in enumerate(
            (
                ("all_recovered_p50_s", "p50", "#2ca02c"),
                ("all_recovered_p99_s", "p99", "#ff7f0e"),
                ("all_recovered_max_s", "max", "#d62728"),
            )
        ):
            value = row.get(key) or 0.0
            ax.barh(
                i + (j - 1) * height, value, height, color=color, label=label if i == 0 else None
            )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{kind} (x{row['count']})" for kind, row in rows], fontsize=8)
    ax.axvline(3.0, color="#444444", linestyle=":", linewidth=1, label="RocketMQ's ~3 s")
    ax.set_xlabel("seconds until every failing producer succeeded again")
    ax.grid(axis="x", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

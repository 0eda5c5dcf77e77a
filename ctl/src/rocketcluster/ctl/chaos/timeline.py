"""A picture of a run for a person: throughput, errors and latency over time, with
every fault window shaded and labelled, so "what happened when" needs no log."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
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
}

PHASES = {"final-heal": "final heal", "drained": "drained", "audited": "audit done"}


def _bins(records: Sequence[Record], width: float) -> dict[str, dict[int, float]]:
    series: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    started: dict[tuple[Any, str], float] = {}
    latencies: dict[int, list[float]] = defaultdict(list)
    for r in records:
        b = int(r["time"] // width)
        f, kind = r.get("f"), r.get("type")
        if f == "send":
            key = (r.get("id"), "send")
            if kind == INVOKE:
                started[key] = r["time"]
                continue
            series[f"send-{kind}"][b] += 1 / width
            if kind == OK and key in started:
                latencies[b].append(r["time"] - started.pop(key))
        elif f == "receive" and kind == OK and "id" in r:
            series["delivered"][b] += 1 / width
        elif f == "audit" and kind == OK and "id" in r:
            series["audited"][b] += 1 / width
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


def render(
    records: Sequence[Record], faults: Sequence[dict[str, Any]], path: Path, title: str
) -> None:
    """Write the timeline PNG: sends/deliveries per second, failed and indeterminate
    operations per second, send latency (ok only), fault windows shaded."""
    if not records:
        return
    span = max(r["time"] for r in records)
    width = 1.0 if span <= 900 else 5.0
    series = _bins(records, width)
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
    _line(ok_ax, series["audited"], width, end, color="#7f7f7f", label="audit reads/s", alpha=0.7)
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
    for i, f in enumerate(faults):
        if f.get("skipped"):
            continue
        start = f["start"]
        stop = f["end"] if f.get("end") is not None else span
        color = COLORS.get(f["kind"], "#aaaaaa")
        kinds_seen.add(f["kind"])
        for ax in axes:
            ax.axvspan(start, stop, color=color, alpha=0.18, linewidth=0)
        label = SHORT.get(f["kind"], f["kind"])
        if span <= 900 or i % 2 == 0:
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
    for r in records:
        if r.get("f") == "note" and r.get("event") in PHASES:
            for ax in axes:
                ax.axvline(r["time"], color="#444444", linestyle=":", linewidth=1)
            lat_ax.text(
                r["time"],
                lat_ax.get_ylim()[1],
                f" {PHASES[r['event']]}",
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
    for ax in axes:
        ax.grid(alpha=0.25)
        ax.set_xlim(0, math.ceil(span))
    fig.tight_layout(rect=(0, 0.07 if handles else 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

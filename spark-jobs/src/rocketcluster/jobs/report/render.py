"""The report page: the headline, then one section per job, in one HTML file with
everything inlined (styles, script, plots as SVG), since it is read offline where the
cluster runs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rocketcluster.jobs.report import fmt
from rocketcluster.jobs.report import html as h
from rocketcluster.jobs.report.frames import State, derive_window, table
from rocketcluster.jobs.report.headline import Problem, problems
from rocketcluster.jobs.report.lag_section import lag_section
from rocketcluster.jobs.report.sss_section import sss_section
from rocketcluster.jobs.report.tiering_section import currency, tiering_section, totals
from rocketcluster.jobs.tables import (
    LAG_GROUPS,
    LAG_POINTS,
    LAG_QUEUES,
    SSS_GROUPS,
    SSS_INTERVALS,
    SSS_MASTERS,
    SSS_REPLICAS,
    TIERING_CANDIDATES,
)

JOBS: Mapping[str, tuple[str, ...]] = {
    "consumer lag": (LAG_GROUPS, LAG_QUEUES, LAG_POINTS),
    "SyncStateSet history": (SSS_GROUPS, SSS_REPLICAS, SSS_INTERVALS, SSS_MASTERS),
    "tiering candidates": (TIERING_CANDIDATES,),
}


def ran(results: Mapping[str, Any]) -> list[str]:
    """The jobs that produced at least one of their tables."""
    return [
        job
        for job, names in JOBS.items()
        if any(table(results, n).state is not State.MISSING for n in names)
    ]


def unchecked(results: Mapping[str, Any]) -> list[str]:
    """What this report cannot vouch for: jobs not run, tables it could not read."""
    out = []
    for job, names in JOBS.items():
        states = [table(results, n) for n in names]
        if all(t.state is State.MISSING for t in states):
            out.append(f"Not checked: {job} (the job was not run).")
        for t in states:
            if t.state is State.BAD:
                lacking = ", ".join(t.missing_columns)
                out.append(f"Not readable: {t.name} (columns missing: {lacking}).")
    return out


def _problem_item(p: Problem) -> str:
    return (
        f'<li class="problem" data-severity="{p.severity}">{h.badge(p.status)}'
        f'<a href="#{h.esc(p.anchor)}">{h.esc(p.text)}</a></li>'
    )


def headline(
    results: Mapping[str, Any],
    summary: Mapping[str, Any],
    found: Sequence[Problem],
) -> str:
    """Problems worst first, or a green all-healthy line for what was checked; and
    what the run could not read (a broker group's partitions, a controller's events),
    so that nobody takes a partial report for a whole one."""
    notes = unchecked(results)
    unread = [str(m) for m in (summary.get("meta") or {}).get("missing") or []]
    extra = []
    cands = table(results, TIERING_CANDIDATES)
    if cands.ready:
        levels = {t.level: t for t in totals(cands.frame)}
        best = levels.get("queue") or next(iter(levels.values()))
        if best.candidates:
            extra.append(
                f"Tiering: {fmt.plural(best.candidates, best.level)} could move to the "
                f"tier, saving {fmt.money(best.saving, currency(summary))} per month."
            )
    if found:
        title = f"{fmt.plural(len(found), 'problem')}, worst first"
        body = "<ul>" + "".join(_problem_item(p) for p in found) + "</ul>"
        cls = "headline"
    else:
        lag = table(results, LAG_GROUPS)
        sss = table(results, SSS_GROUPS)
        checked = []
        if lag.ready:
            checked.append(f"{fmt.plural(len(lag.frame), 'consumer group')} OK")
        if sss.ready:
            checked.append(f"{fmt.plural(len(sss.frame), 'broker group')} stable")
        if not ran(results):
            title, cls = "Nothing checked", "headline"
            body = '<p class="unchecked">No job results in this run.</p>'
        elif unread:
            title, cls = "Healthy where read — some partitions could not be read", "headline"
            what = f": {', '.join(checked)}" if checked else ""
            body = f'<p class="unchecked">Healthy in what was read{h.esc(what)}.</p>'
        else:
            title, cls = "All healthy", "headline healthy"
            what = f": {', '.join(checked)}" if checked else ""
            body = f'<p class="allgood" data-healthy="1">✔ all healthy{h.esc(what)}</p>'
    tail = "".join(
        f'<p class="unchecked" data-missing="1">Not read (retried, then left out): {h.esc(m)}</p>'
        for m in unread
    )
    tail += "".join(f'<p class="unchecked">{h.esc(n)}</p>' for n in notes)
    tail += "".join(f'<p class="extra">{h.esc(e)}</p>' for e in extra)
    return (
        f'<div class="{cls}" id="headline" data-section="headline">'
        f"<h2>{h.esc(title)}</h2>{body}{tail}</div>"
    )


def _summary_section(summary: Mapping[str, Any]) -> str:
    if not summary:
        return ""
    text = json.dumps(summary, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    return (
        '<section id="summary" data-section="summary"><h2>Job summaries</h2>'
        '<details class="raw"><summary>The JSON summary written next to this report'
        f"</summary><pre>{h.esc(text)}</pre></details></section>"
    )


def render_report(
    results: Mapping[str, Any],
    summary: Mapping[str, Any],
    *,
    cluster: str,
    generated_at_ms: int,
    window: tuple[int, int] | None = None,
) -> str:
    """The whole report as one self-contained HTML document.

    ``results`` maps result table names (``rocketcluster.jobs.tables``) to pandas
    DataFrames with exactly the contract's columns; a table left out is a job not
    run. ``window`` defaults to the span the tables themselves cover.
    """
    span = window if window is not None else derive_window(results)
    found = problems(results, span[1] if span else None)
    if found:
        status = fmt.plural(len(found), "problem")
    else:
        status = "all healthy" if ran(results) else "nothing checked"
    title = f"{cluster} health: {status}"
    sections = [
        headline(results, summary, found),
        lag_section(results, span),
        sss_section(results, span),
        tiering_section(results, summary),
        _summary_section(summary),
    ]
    nav = "".join(
        f'<a href="#{target}">{label}</a>'
        for target, label in (
            ("headline", "Headline"),
            ("lag", "Consumer lag"),
            ("sss", "SyncStateSet"),
            ("tiering", "Tiering"),
        )
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{h.CSP}">'
        '<link rel="icon" href="data:,">'
        f"<title>{h.esc(title)}</title><style>{h.CSS}</style></head><body>"
        f'<header class="top"><h1>Health report: {h.esc(cluster)}</h1>'
        f'<span class="meta" data-generated="{generated_at_ms}">generated '
        f"{h.esc(fmt.utc(generated_at_ms))}</span>"
        f'<span class="meta" data-window="{h.esc(_window_attr(span))}">window '
        f"{h.esc(fmt.window(*span) if span else fmt.window(None, None))}</span></header>"
        f'<nav class="toc">{nav}</nav>'
        + "".join(sections)
        + "<footer>rocketcluster health report · every time is UTC · sizes in binary "
        "units (1 GiB = 1024 MiB) · click a column header to sort</footer>"
        f"<script>{h.JS}</script></body></html>\n"
    )


def _window_attr(span: tuple[int, int] | None) -> str:
    return "" if span is None else f"{span[0]}-{span[1]}"


def write_report(path: Path, html: str) -> Path:
    """Write the report (creating its directory) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path

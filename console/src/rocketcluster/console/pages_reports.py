"""Health reports: the runs the Spark CronJob wrote (``reportsDir``:
``<UTC time>/{report.html, summary.json}``), newest first, each opened in place —
the report is self-contained HTML, shown in a sandboxed frame under a policy that
lets it load nothing at all."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from rocketcluster.console.web import Refused, console_of, render, viewer

router = APIRouter()
RUN_NAME = re.compile(r"^[0-9A-Za-z][0-9A-Za-z:._-]{0,63}$")
# The report's own policy (its inline style and its table-sorting script, nothing
# from anywhere), plus a sandbox without same-origin: its script runs in an opaque
# origin that cannot read the console's cookies or pages.
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'; "
    "sandbox allow-scripts"
)


def list_runs(directory: Path) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for path in directory.iterdir():
        if path.is_symlink() or not path.is_dir() or not RUN_NAME.match(path.name):
            continue
        if not (path / "report.html").is_file():
            continue
        summary: dict[str, Any] = {}
        try:
            summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = {}
        runs.append({"name": path.name, "summary": summary, "mtime": path.stat().st_mtime})
    runs.sort(key=lambda r: str(r["name"]), reverse=True)
    return runs


def headline(summary: dict[str, Any]) -> str:
    """A run's summary.json in one line: each job's verdict in numbers."""
    parts = []
    lag = summary.get("lag")
    if isinstance(lag, dict):
        counts = lag.get("groups_by_status") or {}
        shown = [f"{n} {status}" for status, n in counts.items() if n]
        parts.append("consumer groups: " + (", ".join(shown) if shown else "none"))
    sss = summary.get("sss-history")
    if isinstance(sss, dict):
        groups = sss.get("groups") or []
        elections = sum(int(g.get("elections") or 0) for g in groups)
        unclean = sum(int(g.get("unclean_elections") or 0) for g in groups)
        parts.append(
            f"{len(groups)} broker groups, {elections} elections"
            + (f" ({unclean} unclean)" if unclean else "")
        )
    tiering = summary.get("tiering")
    if isinstance(tiering, dict):
        saving = float(tiering.get("monthly_saving") or 0)
        parts.append(f"tiering: {tiering.get('segments', 0)} segments, saving {saving:.2f} a month")
    return " · ".join(parts) or "no job summary"


@router.get("/reports", response_class=HTMLResponse)
async def reports(request: Request) -> HTMLResponse:
    viewer(request)
    directory = console_of(request).config.reports_dir
    runs: list[dict[str, Any]] = []
    problem = None
    if directory is None:
        problem = (
            "no reports directory is configured: enable spec.healthReports (Kubernetes) or "
            "give rocketctl console --reports DIR"
        )
    elif not directory.is_dir():
        problem = f"{directory} does not exist yet: the first report run creates it"
    else:
        runs = list_runs(directory)
        for r in runs:
            r["headline"] = headline(r["summary"])
    return render(
        request, "reports.html", title="Health reports", nav="reports", runs=runs, problem=problem
    )


def _run_dir(request: Request, run: str) -> Path:
    directory = console_of(request).config.reports_dir
    if directory is None or not RUN_NAME.match(run):
        raise Refused(f"no report run {run!r}")
    path = directory / run
    if path.is_symlink() or not (path / "report.html").is_file():
        raise Refused(f"no report run {run!r}")
    return path


@router.get("/reports/{run}", response_class=HTMLResponse)
async def report_page(request: Request, run: str) -> HTMLResponse:
    viewer(request)
    _run_dir(request, run)
    return render(request, "report.html", title=f"Health report {run}", nav="reports", run=run)


@router.get("/reports/{run}/report.html")
async def report_file(request: Request, run: str) -> Response:
    viewer(request)
    path = _run_dir(request, run) / "report.html"
    return FileResponse(
        path,
        media_type="text/html; charset=utf-8",
        headers={"Content-Security-Policy": REPORT_CSP, "X-Frame-Options": "SAMEORIGIN"},
    )

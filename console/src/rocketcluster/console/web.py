"""The pieces every page shares: the ``Console`` (config, upstream, access, audit,
templates) kept on ``app.state``, the viewer of a request, CSRF checks, flash
messages and rendering.

A page handler asks ``viewer(request)``: it raises ``SignInNeeded`` (turned into a
redirect to the sign-in page) when no valid session names a user. Forms post back
the session's CSRF token; ``check_post`` refuses a POST without it, or one whose
Origin is another site.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from itsdangerous import BadSignature, URLSafeSerializer

from rocketcluster.api.console_config import ConsoleConfig
from rocketcluster.console.access import ADMIN_SESSION, COOKIE, Access, Viewer
from rocketcluster.console.audit import AuditLog
from rocketcluster.console.live_stats import LiveStatsCache
from rocketcluster.console.upstream import Upstream

FLASH_COOKIE = "rc_flash"
TEMPLATES = Path(__file__).parent / "templates"


class SignInNeeded(Exception):
    pass


class Refused(Exception):
    """A viewer who may not do or see this (403 page)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Console:
    config: ConsoleConfig
    upstream: Upstream
    access: Access
    audit: AuditLog
    templates: Jinja2Templates
    flash_signer: URLSafeSerializer
    stats: LiveStatsCache = field(default_factory=LiveStatsCache)


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def viewer(request: Request) -> Viewer:
    console = console_of(request)
    session = console.access.session(request.cookies.get(COOKIE))
    if session is None and not console.access.enabled:
        cookie = console.access.new_session(ADMIN_SESSION)
        request.state.new_session = cookie
        session = console.access.session(cookie)
    found = console.access.viewer(session)
    if found is None:
        raise SignInNeeded()
    request.state.viewer = found
    return found


def check_post(request: Request, form: Any) -> Viewer:
    """The viewer of a form POST that carries the session's CSRF token."""
    who = viewer(request)
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if origin.split("://", 1)[-1] != host:
            raise Refused(f"a form from {origin} cannot act here")
    if not console_of(request).access.csrf_ok(who, form.get("csrf")):
        raise Refused(
            "this form's security token is missing or stale: reload the page and try again"
        )
    return who


def flash(request: Request, response: Any, text: str, kind: str = "ok") -> None:
    """A message the next page shows once (signed: a link cannot forge one)."""
    signed = console_of(request).flash_signer.dumps({"t": text, "k": kind})
    response.set_cookie(FLASH_COOKIE, signed, httponly=True, samesite="strict", max_age=60)


def _flash_of(request: Request) -> dict[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    try:
        data = console_of(request).flash_signer.loads(raw)
    except BadSignature:
        return None
    return {"text": str(data.get("t", "")), "kind": str(data.get("k", "ok"))}


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    console = console_of(request)
    who: Viewer | None = getattr(request.state, "viewer", None)
    shown_flash = _flash_of(request)
    response = console.templates.TemplateResponse(
        request,
        template,
        {
            "cluster": console.config.cluster,
            "viewer": who,
            "auth": console.access.enabled,
            "flash": shown_flash,
            "started": time.perf_counter(),
            **context,
        },
        status_code=status_code,
    )
    if shown_flash is not None:
        response.delete_cookie(FLASH_COOKIE)
    return response


def fmt_time(ms: Any) -> str:
    if ms is None or ms == "":
        return "—"
    try:
        moment = datetime.fromtimestamp(int(ms) / 1000, UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def fmt_age(ms: Any) -> str:
    try:
        seconds = max(0.0, int(ms) / 1000)
    except (TypeError, ValueError):
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def fmt_bytes(n: Any) -> str:
    try:
        value = float(n)
    except (TypeError, ValueError):
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def fmt_count(n: Any) -> str:
    try:
        return f"{int(n):,}"
    except (TypeError, ValueError):
        return "—"


def fmt_rate(n: Any) -> str:
    try:
        value = float(n)
    except (TypeError, ValueError):
        return "—"
    return f"{value:,.1f}/s" if value < 100 else f"{value:,.0f}/s"


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(TEMPLATES))
    env = templates.env
    env.filters.update(time=fmt_time, age=fmt_age, bytes=fmt_bytes, count=fmt_count, rate=fmt_rate)
    return templates

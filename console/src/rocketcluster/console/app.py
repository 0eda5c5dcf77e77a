"""The console's FastAPI application: pages (``pages_*`` routers), sign-in, static
assets served by the console itself, and the headers that keep a browser from
loading anything from elsewhere (a Content-Security-Policy allowing only this origin,
no framing by other sites, no MIME sniffing)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from rocketcluster.api.console_config import ConsoleConfig
from rocketcluster.console import (
    pages_groups,
    pages_messages,
    pages_overview,
    pages_reports,
    pages_topics,
)
from rocketcluster.console.access import COOKIE, Access, SignInError
from rocketcluster.console.audit import AuditLog
from rocketcluster.console.upstream import Upstream
from rocketcluster.console.web import (
    Console,
    Refused,
    SignInNeeded,
    console_of,
    make_templates,
    render,
)

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; frame-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'self'"
)
MAX_FORM_BYTES = 1 << 20
FAILED_SIGN_IN_DELAY_S = 0.5


def _safe_next(target: str | None) -> str:
    """Only a path of this site (an open redirect otherwise)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def create_console_app(config: ConsoleConfig) -> FastAPI:
    access = Access(config.auth)
    upstream = Upstream(config, access.admin_token)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await upstream.aclose()

    app = FastAPI(
        title=f"rocketcluster console ({config.cluster})",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.state.console = Console(
        config,
        upstream,
        access,
        AuditLog(config.audit_log),
        make_templates(),
        access.flash_signer,
    )

    @app.middleware("http")
    async def headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > MAX_FORM_BYTES:
            return JSONResponse({"detail": "request body over 1 MiB"}, status_code=413)
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
        if request.url.path.startswith("/static/"):
            response.headers["Cache-Control"] = "public, max-age=3600"
        else:
            response.headers.setdefault("Cache-Control", "no-store")
        cookie = getattr(request.state, "new_session", None)
        if cookie:
            response.set_cookie(
                COOKIE, cookie, httponly=True, samesite="strict", max_age=access.seconds
            )
        return response

    @app.exception_handler(SignInNeeded)
    async def sign_in_needed(request: Request, _: SignInNeeded) -> Response:
        if request.method != "GET":
            return render(request, "refused.html", 401, message="your session ended: sign in again")
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/signin?next={quote(target)}", status_code=303)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        return render(request, "refused.html", 403, message=exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path.startswith("/static/"):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        return render(request, "refused.html", exc.status_code, message=str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'request'}: {e.get('msg')}"
            for e in exc.errors()
        )
        return render(request, "refused.html", 400, message=f"bad request: {problems}")

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> dict[str, str]:
        return {"status": "ready"}

    @app.get("/signin")
    async def signin_page(request: Request, next: str = "/") -> Response:
        if not access.enabled:
            return RedirectResponse(_safe_next(next), status_code=303)
        return render(request, "signin.html", next=_safe_next(next), error=None)

    @app.post("/signin")
    async def signin(request: Request) -> Response:
        form = await request.form()
        target = _safe_next(str(form.get("next") or "/"))
        try:
            user = access.sign_in(
                str(form.get("token") or ""),
                str(form.get("access_key") or ""),
                str(form.get("secret_key") or ""),
            )
        except SignInError as exc:
            console_of(request).audit.record(
                str(form.get("access_key") or "token")[:64], "sign-in", "console", f"refused: {exc}"
            )
            await asyncio.sleep(FAILED_SIGN_IN_DELAY_S)  # guessing keys takes long
            return render(request, "signin.html", 401, next=target, error=str(exc))
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            access.new_session(user),
            httponly=True,
            samesite="strict",
            max_age=access.seconds,
            secure=request.url.scheme == "https",
        )
        return response

    @app.post("/signout")
    async def signout(request: Request) -> Response:
        response = RedirectResponse("/signin" if access.enabled else "/", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (pages_overview, pages_topics, pages_messages, pages_groups, pages_reports):
        app.include_router(module.router)
    return app

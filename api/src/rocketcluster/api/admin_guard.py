"""AdminTokenGuard: the admin REST API and ``/metrics`` of brokers and controllers
require ``Authorization: Bearer <admin token>`` when auth is on.

A plain ASGI middleware (no framework import), shared by both servers. ``/healthz``
and ``/readyz`` stay open: the kubelet probes them without credentials. A request
whose TLS client certificate the server verified may pass without the token:
``verified_peer`` is that hook (the TLS work supplies it; until then nothing passes
that way).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from rocketcluster.api.auth import AuthProcessConfig, WatchedFile, read_token

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})
BEARER: Final = b"bearer "


class AdminTokenGuard:
    def __init__(
        self,
        app: ASGIApp,
        token: Callable[[], str],
        *,
        open_paths: frozenset[str] = OPEN_PATHS,
        verified_peer: Callable[[Scope], bool] | None = None,
    ) -> None:
        self._app = app
        self._token = token
        self._open = open_paths
        self._verified_peer = verified_peer

    def allowed(self, scope: Scope) -> bool:
        if scope["path"] in self._open:
            return True
        if self._verified_peer is not None and self._verified_peer(scope):
            return True
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                if value[: len(BEARER)].lower() != BEARER:
                    return False
                presented = value[len(BEARER) :].strip()
                return hmac.compare_digest(presented, self._token().encode())
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.allowed(scope):
            await self._app(scope, receive, send)
            return
        body = json.dumps(
            {
                "detail": "this endpoint requires the admin token: send "
                "'Authorization: Bearer <token>' (rocketctl reads it from the local "
                "cluster's directory or --token / ROCKETCTL_ADMIN_TOKEN)"
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="rocketcluster"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def guard_admin(
    app: ASGIApp, auth: AuthProcessConfig, verified_peer: Callable[[Scope], bool] | None = None
) -> ASGIApp:
    """``app`` behind the admin token when ``auth`` is on (the token file is re-read
    when it changes), ``app`` itself otherwise."""
    if not auth.enabled or auth.admin_token_file is None:
        return app
    token = WatchedFile(
        auth.admin_token_file,
        read_token,
        auth.reload_seconds,
        on_error=lambda exc: log.warning("keeping the previous admin token: %s", exc),
    )
    return AdminTokenGuard(app, token.get, verified_peer=verified_peer)

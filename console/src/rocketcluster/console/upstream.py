"""Upstream: the console's only way to the cluster — HTTP calls to the controllers' and
brokers' admin APIs, with the admin token and the cluster's CA when security is on.

Every failure becomes an ``UpstreamError`` that names the endpoint and says what
happened in words a page can show (cannot connect, no answer in N s, the endpoint's
own ``detail``), so a broker or controller that is down makes one line of a page red
instead of failing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from rocketcluster.api.console_config import ConsoleConfig

# A listing follows at most this many ``Link: rel=next`` pages (10,000 rows each).
MAX_PAGES = 20


class UpstreamError(Exception):
    """A call to ``where`` that gave no usable answer; ``status`` when it answered."""

    def __init__(self, where: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason
        self.status = status


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI's validation errors
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail)[:500]


class Upstream:
    """One pooled HTTP client for every admin endpoint of the cluster."""

    def __init__(self, config: ConsoleConfig, token: Callable[[], str | None]) -> None:
        self._token = token
        self._timeout = config.request_timeout_seconds
        verify: Any = str(config.ca_file) if config.ca_file else True
        self._client = httpx.AsyncClient(
            timeout=self._timeout,
            verify=verify,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _headers(self) -> dict[str, str]:
        token = self._token()
        return {"authorization": f"Bearer {token}"} if token else {}

    async def request(
        self,
        method: str,
        base: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
    ) -> httpx.Response:
        """The endpoint's answer when it is 2xx; UpstreamError otherwise."""
        try:
            response = await self._client.request(
                method, base + path, params=params, json=json, headers=self._headers()
            )
        except httpx.TimeoutException:
            raise UpstreamError(base, f"no answer in {self._timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise UpstreamError(base, f"cannot connect ({type(exc).__name__}: {exc})") from None
        if response.status_code >= 400:
            raise UpstreamError(
                base, f"HTTP {response.status_code}: {_detail(response)}", response.status_code
            )
        return response

    async def get(self, base: str, path: str, **params: Any) -> Any:
        response = await self.request("GET", base, path, params=params or None)
        try:
            return response.json()
        except ValueError:
            raise UpstreamError(base, f"{path} answered something that is not JSON") from None

    async def listing(self, base: str, path: str) -> list[Any]:
        """Every row of a paged listing (``Link: <...>; rel="next"``)."""
        rows: list[Any] = []
        params: dict[str, Any] = {"limit": 10_000}
        for _ in range(MAX_PAGES):
            response = await self.request("GET", base, path, params=params)
            rows.extend(response.json())
            nxt = response.links.get("next", {}).get("url")
            if not nxt:
                return rows
            after = httpx.URL(nxt).params.get("after")
            if after is None:
                return rows
            params = {"limit": 10_000, "after": after}
        return rows

    async def gather(self, calls: Sequence[Any]) -> list[Any]:
        """Run ``calls`` (awaitables) together: each result, or its UpstreamError."""
        results = await asyncio.gather(*calls, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, UpstreamError):
                raise r
        return list(results)

    async def post_json(self, base: str, path: str, payload: Any) -> Any:
        """POST ``payload`` as JSON; the JSON answer."""
        response = await self.request("POST", base, path, json=payload)
        try:
            return response.json()
        except ValueError:
            raise UpstreamError(base, f"{path} answered something that is not JSON") from None

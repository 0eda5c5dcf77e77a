"""The operator's view into the cluster's own admin APIs (HTTP on port 8080 of every
controller and broker pod), reached at pod IPs from the API server — the same on a
real cluster and under the e2e realiser, and never through stale cached addresses.

Controller calls go to the Raft leader, found by the shared client's rule
(api/client/controller_admin.py) and mapped to its pod by member id (member ``i+1`` is
the Deployment ``C-controller-i``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.client.controller_admin import AsyncControllerAdmin, ControllerAdminError

T = TypeVar("T")

TIMEOUT_S = 3.0
ELECT_TIMEOUT_S = 30.0


class AdminError(RuntimeError):
    """An admin API refused a request or could not be reached; ``status`` is 0 when
    nothing answered."""

    def __init__(self, message: str, status: int = 0, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail

    @property
    def refused(self) -> bool:
        """The request as it is was refused (4xx: a person or a newer peer must change
        something), not the peer unavailable (0, 5xx, or 421: leadership moved)."""
        return 400 <= self.status < 500 and self.status != 421


def _url(ip: str, path: str, https: bool = False) -> str:
    return f"{'https' if https else 'http'}://{ip}:{ADMIN_PORT}{path}"


async def _request(
    http: httpx.AsyncClient,
    method: str,
    ip: str,
    path: str,
    body: Any = None,
    timeout: float = TIMEOUT_S,  # noqa: ASYNC109 (httpx's own timeout, per request)
    server_name: str | None = None,
    token: str | None = None,
) -> httpx.Response:
    """``server_name``: https, the certificate checked for that name (sent as SNI)
    rather than for the pod IP dialled (trust.py); ``token``: the cluster's admin token
    (security.auth)."""
    extensions = {"sni_hostname": server_name} if server_name else None
    headers = {"authorization": f"Bearer {token}"} if token else None
    try:
        answer = await http.request(
            method,
            _url(ip, path, https=server_name is not None),
            json=body,
            timeout=timeout,
            extensions=extensions,
            headers=headers,
        )
    except httpx.HTTPError as exc:
        raise AdminError(f"{method} {path} on {ip}: {exc!r}") from exc
    if answer.status_code >= 400:
        try:
            detail = answer.json().get("detail", answer.text)
        except ValueError:
            detail = answer.text
        raise AdminError(
            f"{method} {path} on {ip}: {answer.status_code} {detail}",
            answer.status_code,
            detail,
        )
    return answer


async def _call(
    http: httpx.AsyncClient,
    method: str,
    ip: str,
    path: str,
    body: Any = None,
    server_name: str | None = None,
    token: str | None = None,
) -> Any:
    answer = await _request(http, method, ip, path, body, server_name=server_name, token=token)
    return answer.json() if answer.content else None


@dataclass
class ControllerAdmin:
    """The controllers of one cluster: member id -> pod IP (of Ready or running pods).

    The calls are the shared client's (api/client/controller_admin.py: its leader rule,
    quoting, the token, SNI under TLS) over the operator's own HTTP client; its errors
    come out as AdminError, as the reconciler expects."""

    http: httpx.AsyncClient
    members: dict[int, str]
    server_name: str | None = None  # https, checked for this name (trust.py)
    token: str | None = None  # security.auth: the cluster's admin token
    _client: AsyncControllerAdmin | None = field(default=None, init=False, repr=False)

    def _controllers(self) -> AsyncControllerAdmin:
        if not self.members:
            raise AdminError("no controller pod has an address yet")
        if self._client is None:
            self._client = AsyncControllerAdmin(
                {member: f"{ip}:{ADMIN_PORT}" for member, ip in self.members.items()},
                server_name=self.server_name,
                token=self.token,
                timeout=TIMEOUT_S,
                probe_timeout=TIMEOUT_S,
                attempts=2,  # once more if leadership moved under the call (421)
                retry_pause=0.0,
                http=self.http,
            )
        return self._client

    async def _do(self, call: Callable[[AsyncControllerAdmin], Awaitable[T]]) -> T:
        try:
            return await call(self._controllers())
        except ControllerAdminError as exc:
            raise AdminError(str(exc), exc.status, exc.detail) from exc

    async def cluster_views(self) -> dict[int, dict[str, Any]]:
        """``/v1/cluster`` of every member that answers, by member id."""
        if not self.members:
            return {}
        views = await self._controllers().views()
        return {
            v.member_id: dict(v.view)
            for v in views
            if v.view is not None and v.member_id is not None
        }

    async def groups(self) -> list[dict[str, Any]]:
        return await self._do(lambda c: c.groups())

    async def catalogue(self) -> dict[str, Any] | None:
        """The catalogue (topics, consumer groups, group endpoints and write flags), or
        None from controllers that predate it."""
        try:
            return await self._do(lambda c: c.catalogue())
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise

    async def elect(self, group: str, broker_id: int) -> dict[str, Any]:
        return await self._do(lambda c: c.elect(group, broker_id, timeout=ELECT_TIMEOUT_S))

    async def transfer_leadership(self, to: int | None) -> dict[str, Any]:
        return await self._do(lambda c: c.transfer_leadership(to, timeout=ELECT_TIMEOUT_S))

    async def set_writable(self, group: str, writable: bool) -> None:
        await self._do(lambda c: c.set_writable(group, writable))

    async def forget_group(self, group: str) -> None:
        try:
            await self._do(lambda c: c.forget_group(group))
        except AdminError as exc:
            if exc.status != 404:
                raise

    async def put(self, collection: str, name: str, body: dict[str, Any]) -> int:
        """Put an entry into the catalogue: the catalogue version that holds it."""
        answer = await self._do(lambda c: c.put(collection, name, body))
        return int((answer or {}).get("version", 0))

    async def put_entries(self, topics: list[dict[str, Any]], groups: list[dict[str, Any]]) -> int:
        """Put up to MAX_BATCH_ENTRIES topics and groups in one command: the catalogue
        version that holds them."""
        answer = await self._do(lambda c: c.put_entries(topics, groups))
        return int((answer or {}).get("version", 0))

    async def delete(self, collection: str, name: str) -> None:
        try:
            await self._do(lambda c: c.delete(collection, name))
        except AdminError as exc:
            if exc.status != 404:
                raise


@dataclass
class BrokerAdmin:
    """One broker pod's admin API."""

    http: httpx.AsyncClient
    ip: str
    server_name: str | None = None  # https, checked for this name (trust.py)
    token: str | None = None  # security.auth: the cluster's admin token

    async def get(self, path: str) -> Any:
        return await _call(
            self.http, "GET", self.ip, path, server_name=self.server_name, token=self.token
        )

    async def get_all(self, path: str) -> list[dict[str, Any]]:
        """Every item of a paged listing (broker/admin/paging.py): its pages followed
        by their ``Link: rel=next``."""
        items: list[dict[str, Any]] = []
        next_path: str | None = path
        while next_path is not None:
            answer = await _request(
                self.http, "GET", self.ip, next_path, server_name=self.server_name, token=self.token
            )
            items += answer.json()
            next_path = answer.links.get("next", {}).get("url")
        return items

    async def broker(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.get("/v1/broker")
        except AdminError:
            return None
        return found

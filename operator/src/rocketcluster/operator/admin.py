"""The operator's view into the cluster's own admin APIs (HTTP on port 8080 of every
controller and broker pod), reached at pod IPs from the API server — the same on a
real cluster and under the e2e realiser, and never through stale cached addresses.

Controller writes go to the Raft leader; the leader is found by asking members and
mapped to its pod by member id (member ``i+1`` is the Deployment ``C-controller-i``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from rocketcluster.api.broker_config import ADMIN_PORT

TIMEOUT_S = 3.0
ELECT_TIMEOUT_S = 30.0


class AdminError(RuntimeError):
    """An admin API refused a request or could not be reached; ``status`` is 0 when
    nothing answered."""

    def __init__(self, message: str, status: int = 0, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


def _name(name: str) -> str:
    """A name as one path segment: RocketMQ names may hold ``%`` (``%RETRY%g``)."""
    return quote(name, safe="")


def _url(ip: str, path: str, https: bool = False) -> str:
    return f"{'https' if https else 'http'}://{ip}:{ADMIN_PORT}{path}"


async def _call(
    http: httpx.AsyncClient,
    method: str,
    ip: str,
    path: str,
    body: Any = None,
    timeout: float = TIMEOUT_S,  # noqa: ASYNC109 (httpx's own timeout, per request)
    server_name: str | None = None,
    token: str | None = None,
) -> Any:
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
    return answer.json() if answer.content else None


@dataclass
class ControllerAdmin:
    """The controllers of one cluster: member id -> pod IP (of Ready or running pods)."""

    http: httpx.AsyncClient
    members: dict[int, str]
    server_name: str | None = None  # https, checked for this name (trust.py)
    token: str | None = None  # security.auth: the cluster's admin token

    async def cluster_views(self) -> dict[int, dict[str, Any]]:
        """``/v1/cluster`` of every member that answers."""

        async def one(member: int, ip: str) -> tuple[int, dict[str, Any] | None]:
            try:
                view = await _call(
                    self.http,
                    "GET",
                    ip,
                    "/v1/cluster",
                    server_name=self.server_name,
                    token=self.token,
                )
                return member, view
            except AdminError:
                return member, None

        answers = await asyncio.gather(*(one(m, ip) for m, ip in self.members.items()))
        return {m: view for m, view in answers if view is not None}

    async def leader_ip(self) -> str:
        views = await self.cluster_views()
        leaders = [int(v["leader"]) for v in views.values() if v.get("leader")]
        for leader in leaders:
            ip = self.members.get(leader)
            if ip is not None:
                return ip
        raise AdminError("no controller member knows a leader")

    async def leader_call(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = TIMEOUT_S,  # noqa: ASYNC109 (httpx's own timeout, per request)
    ) -> Any:
        """A call on the leader; once more if leadership moved under it (421)."""
        for attempt in range(2):
            ip = await self.leader_ip()
            try:
                return await _call(
                    self.http,
                    method,
                    ip,
                    path,
                    body,
                    timeout,
                    server_name=self.server_name,
                    token=self.token,
                )
            except AdminError as exc:
                if exc.status != 421 or attempt:
                    raise
        raise AssertionError("unreachable")

    async def groups(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self.leader_call("GET", "/v1/groups")
        return found

    async def catalogue(self) -> dict[str, Any] | None:
        """The catalogue (topics, consumer groups, group endpoints and write flags), or
        None from controllers that predate it."""
        try:
            found: dict[str, Any] = await self.leader_call("GET", "/v1/catalogue")
        except AdminError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def elect(self, group: str, broker_id: int) -> dict[str, Any]:
        answer: dict[str, Any] = await self.leader_call(
            "POST", f"/v1/groups/{_name(group)}/elect", {"brokerId": broker_id}, ELECT_TIMEOUT_S
        )
        return answer

    async def transfer_leadership(self, to: int | None) -> dict[str, Any]:
        answer: dict[str, Any] = await self.leader_call(
            "POST", "/v1/raft/transfer-leadership", {"to": to}, ELECT_TIMEOUT_S
        )
        return answer

    async def set_writable(self, group: str, writable: bool) -> None:
        await self.leader_call("PUT", f"/v1/groups/{_name(group)}/writable", {"writable": writable})

    async def forget_group(self, group: str) -> None:
        try:
            await self.leader_call("DELETE", f"/v1/groups/{_name(group)}")
        except AdminError as exc:
            if exc.status != 404:
                raise

    async def put(self, collection: str, name: str, body: dict[str, Any]) -> int:
        """Put an entry into the catalogue: the catalogue version that holds it."""
        answer = await self.leader_call("PUT", f"/v1/{collection}/{_name(name)}", body)
        return int((answer or {}).get("version", 0))

    async def delete(self, collection: str, name: str) -> None:
        try:
            await self.leader_call("DELETE", f"/v1/{collection}/{_name(name)}")
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

    async def broker(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.get("/v1/broker")
        except AdminError:
            return None
        return found

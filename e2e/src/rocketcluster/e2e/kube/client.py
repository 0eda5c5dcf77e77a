"""A small async client for the emulator: what the realiser needs — list, watch,
get, create, the PATCH types, delete, TokenRequest — and nothing more, with the
bearer token it is given. Paths come from :class:`ResourceType`; errors keep the
server's Status."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from rocketcluster.e2e.kube.resources import ResourceType

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """A refusal from the server: its code, reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message = code, reason, message


class WatchExpired(KubeError):
    """The resourceVersion a watch started from is gone: list again."""


def _error(response: httpx.Response) -> KubeError:
    try:
        status = response.json()
    except ValueError:
        status = {}
    return KubeError(
        response.status_code,
        str(status.get("reason", response.reason_phrase)),
        str(status.get("message", response.text[:300])),
    )


class KubeClient:
    def __init__(self, base_url: str, *, timeout: float = 30.0, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, headers=headers)

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, url: str, **kw: Any) -> dict[str, Any]:
        response = await self._http.request(method, url, **kw)
        if response.status_code >= 400:
            raise _error(response)
        data: dict[str, Any] = response.json()
        return data

    async def list(
        self, rt: ResourceType, namespace: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        data = await self._call("GET", rt.path(namespace))
        return list(data.get("items") or []), str(data["metadata"]["resourceVersion"])

    async def watch(
        self, rt: ResourceType, resource_version: str, *, timeout_s: int = 300
    ) -> AsyncIterator[dict[str, Any]]:
        """Events after ``resource_version`` until the server ends the stream."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_s),
            "allowWatchBookmarks": "true",
        }
        timeout = httpx.Timeout(10.0, read=timeout_s + 30.0)
        async with self._http.stream("GET", rt.path(), params=params, timeout=timeout) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise _error(resp)
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise WatchExpired(410, "Expired", str(status.get("message")))
                    raise KubeError(
                        int(status.get("code", 500)),
                        str(status.get("reason")),
                        str(status.get("message")),
                    )
                yield event

    async def get(
        self, rt: ResourceType, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        try:
            return await self._call("GET", rt.path(namespace, name))
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise

    async def create(
        self, rt: ResourceType, namespace: str | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        return await self._call("POST", rt.path(namespace), json=body)

    async def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        subresource: str | None = None,
        content_type: str = MERGE,
    ) -> dict[str, Any]:
        url = rt.path(namespace, name) + (f"/{subresource}" if subresource else "")
        return await self._call(
            "PATCH", url, content=json.dumps(patch), headers={"Content-Type": content_type}
        )

    async def token(self, namespace: str, service_account: str) -> str:
        """A new token of a ServiceAccount (TokenRequest); :class:`KubeError` 404 when
        the ServiceAccount does not exist."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        data = await self._call("POST", path, json=body)
        return str(data["status"]["token"])

    async def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
    ) -> dict[str, Any] | None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        try:
            return await self._call("DELETE", rt.path(namespace, name), json=body)
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise

"""A small async client for the Kubernetes API (httpx): paths from apiVersion and
kind, typed errors that carry the API server's own reason and message."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Final

import httpx

from rocketcluster.operator.kube.connection import Connection

# apiVersion -> kind -> plural (namespaced). Only what the operator touches.
PLURALS: Final[dict[str, dict[str, str]]] = {
    "v1": {
        "ConfigMap": "configmaps",
        "Event": "events",
        "PersistentVolumeClaim": "persistentvolumeclaims",
        "Pod": "pods",
        "Secret": "secrets",
        "Service": "services",
        "ServiceAccount": "serviceaccounts",
    },
    "apps/v1": {"Deployment": "deployments", "StatefulSet": "statefulsets"},
    "batch/v1": {"CronJob": "cronjobs"},
    "networking.k8s.io/v1": {"Ingress": "ingresses", "NetworkPolicy": "networkpolicies"},
    "policy/v1": {"PodDisruptionBudget": "poddisruptionbudgets"},
    "rbac.authorization.k8s.io/v1": {"Role": "roles", "RoleBinding": "rolebindings"},
    # The Kubeflow Spark Operator's (healthReports.spark.mode sparkOperator).
    "sparkoperator.k8s.io/v1beta2": {"ScheduledSparkApplication": "scheduledsparkapplications"},
    "monitoring.coreos.com/v1": {
        "PodMonitor": "podmonitors",
        "PrometheusRule": "prometheusrules",
        "ServiceMonitor": "servicemonitors",
    },
    "rocketcluster.io/v1alpha1": {
        "RocketCluster": "rocketclusters",
        "RocketConsumerGroup": "rocketconsumergroups",
        "RocketTopic": "rockettopics",
        "RocketUser": "rocketusers",
    },
}

TIMEOUT_S = 10.0


class KubeApiError(RuntimeError):
    """The API server refused a request (its HTTP status, reason and message)."""

    def __init__(self, status: int, reason: str, message: str, what: str) -> None:
        super().__init__(f"{what}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class KubeNotFound(KubeApiError):
    pass


class KubeUnavailable(RuntimeError):
    """The API server could not be reached (retry later)."""


def resource_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    try:
        plural = PLURALS[api_version][kind]
    except KeyError as exc:
        raise ValueError(f"the operator does not manage {api_version} {kind}") from exc
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def object_path(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return resource_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])


def selector_text(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def matches(obj: dict[str, Any], labels: dict[str, str]) -> bool:
    have = obj.get("metadata", {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


class KubeClient:
    def __init__(self, connection: Connection, transport: httpx.AsyncBaseTransport | None = None):
        self.connection = connection
        self._http = httpx.AsyncClient(
            base_url=connection.server,
            verify=connection.httpx_verify(),
            cert=connection.client_cert,
            timeout=TIMEOUT_S,
            transport=transport,
        )

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        token = self.connection.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = httpx.Request("POST", "/", json=body).content
        try:
            answer = await self._http.request(
                method, path, content=content, headers=headers, params=params
            )
        except httpx.HTTPError as exc:
            raise KubeUnavailable(f"{method} {path}: {exc!r}") from exc
        if answer.status_code >= 400:
            try:
                status = answer.json()
            except ValueError:
                status = {}
            error = KubeNotFound if answer.status_code == 404 else KubeApiError
            raise error(
                answer.status_code,
                str(status.get("reason", answer.reason_phrase)),
                str(status.get("message", answer.text[:300])),
                f"{method} {path}",
            )
        return answer.json() if answer.content else None

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.request(
                "GET", resource_path(api_version, kind, namespace, name)
            )
        except KubeNotFound:
            return None
        return found

    async def list(
        self, api_version: str, kind: str, namespace: str, labels: dict[str, str]
    ) -> list[dict[str, Any]]:
        """Objects with all of ``labels`` (also filtered here: an API that ignores the
        selector must not make the operator act on strangers)."""
        answer = await self.request(
            "GET",
            resource_path(api_version, kind, namespace),
            params={"labelSelector": selector_text(labels)} if labels else None,
        )
        items = (answer or {}).get("items") or []
        return [i for i in items if matches(i, labels)]

    async def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API serves ``kind`` (an optional operator's CRD installed), from
        its discovery document, which every authenticated client may read."""
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            answer = await self.request("GET", prefix)
        except KubeNotFound:
            return False
        plural = PLURALS[api_version][kind]
        return any(r.get("name") == plural for r in (answer or {}).get("resources") or [])

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        created: dict[str, Any] = await self.request(
            "POST", resource_path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj
        )
        return created

    async def patch(
        self,
        path: str,
        body: Any,
        *,
        content_type: str = "application/merge-patch+json",
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        patched: dict[str, Any] = await self.request(
            "PATCH", path, body=body, content_type=content_type, params=params
        )
        return patched

    async def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, orphan: bool = False
    ) -> bool:
        """False when it was gone already."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if orphan:
            body["propagationPolicy"] = "Orphan"
        try:
            await self.request(
                "DELETE", resource_path(api_version, kind, namespace, name), body=body
            )
        except KubeNotFound:
            return False
        return True

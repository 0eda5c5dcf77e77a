"""The one way the operator writes an object it renders.

On a real API server: server-side apply with our field manager (``force``: the
operator owns what it renders; fields other managers set — an HPA's replicas, an
admission webhook's annotations — stay theirs). On the kmock emulator, which
ignores apply patches, a JSON merge patch of the desired object (create when
missing). Both are idempotent; the choice is a setting (``ROCKETCLUSTER_APPLY_MODE``
= ``server-side`` | ``merge``), and both are tested at the request level.

A merge patch cannot remove a field the operator stopped rendering; server-side
apply does. That difference only matters on the emulator."""

from __future__ import annotations

import json
import os
from enum import StrEnum
from typing import Any, Protocol

from rocketcluster.api import kube
from rocketcluster.operator.kube.client import KubeClient, KubeNotFound, object_path

ENV_APPLY_MODE = "ROCKETCLUSTER_APPLY_MODE"


class ApplyMode(StrEnum):
    SERVER_SIDE = "server-side"
    MERGE = "merge"

    @classmethod
    def from_env(cls) -> ApplyMode:
        value = os.environ.get(ENV_APPLY_MODE, cls.SERVER_SIDE.value)
        try:
            return cls(value)
        except ValueError as exc:
            raise ValueError(
                f"{ENV_APPLY_MODE}={value!r}: expected one of {[m.value for m in cls]}"
            ) from exc


class Applier(Protocol):
    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    async def apply_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Write ``status`` to ``obj``'s status subresource: the object as stored."""
        ...


class ServerSideApplier:
    def __init__(self, client: KubeClient, field_manager: str = kube.MANAGER) -> None:
        self._client = client
        self._params = {"fieldManager": field_manager, "force": "true"}

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        # JSON is YAML: the apply content type takes either.
        return await self._client.patch(
            object_path(obj),
            obj,
            content_type="application/apply-patch+yaml",
            params=self._params,
        )

    async def apply_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {
                "name": obj["metadata"]["name"],
                "namespace": obj["metadata"]["namespace"],
            },
            "status": status,
        }
        return await self._client.patch(
            object_path(obj) + "/status",
            body,
            content_type="application/apply-patch+yaml",
            params=self._params,
        )


class MergePatchApplier:
    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._client.patch(object_path(obj), obj)
        except KubeNotFound:
            return await self._client.create(obj)

    async def apply_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return await self._client.patch(object_path(obj) + "/status", {"status": status})


def applier(client: KubeClient, mode: ApplyMode) -> Applier:
    if mode is ApplyMode.SERVER_SIDE:
        return ServerSideApplier(client)
    return MergePatchApplier(client)


def digest(obj: dict[str, Any]) -> str:
    """What was applied, to skip re-applying an unchanged object."""
    return json.dumps(obj, sort_keys=True)

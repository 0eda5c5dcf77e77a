"""The write adapter at the request level, both ways: server-side apply as a real API
server expects it, and the merge-patch path against the kmock emulator (which
stores what it is sent, so the result is checked too)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from rocketcluster.operator.kube.apply import (
    ApplyMode,
    MergePatchApplier,
    ServerSideApplier,
    applier,
)
from rocketcluster.operator.kube.client import KubeApiError, KubeClient, KubeUnavailable
from rocketcluster.operator.kube.connection import Connection

CONFIG_MAP: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "prod-broker-0-config", "namespace": "team-a"},
    "data": {"a.json": "{}"},
}


@pytest.fixture
async def emulator() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        api.resources["v1/configmaps"] = kmock.ResourceInfo(
            kind="ConfigMap",
            verbs={"get", "list", "watch", "create", "patch", "delete"},
            namespaced=True,
        )
        yield api


@pytest.fixture
async def recorder() -> AsyncIterator[kmock.RawHandler]:
    """A plain recording server: answers what each test tells it to."""
    async with kmock.RawHandler() as api, kmock.Server(api):
        yield api


def _client(api: kmock.RawHandler, token: str | None = "t0ken") -> KubeClient:
    return KubeClient(Connection(server=str(api.url).rstrip("/"), token=token))


async def test_server_side_apply_sends_one_apply_patch_with_our_field_manager(
    recorder: kmock.RawHandler,
) -> None:
    recorder["patch"] << {**CONFIG_MAP, "metadata": {**CONFIG_MAP["metadata"], "uid": "u1"}}
    async with _client(recorder) as client:
        answer = await ServerSideApplier(client).apply(CONFIG_MAP)
    assert answer["metadata"]["uid"] == "u1"
    (request,) = list(recorder[:])
    assert request.method == "PATCH"
    assert request.url.path == "/api/v1/namespaces/team-a/configmaps/prod-broker-0-config"
    assert request.headers["Content-Type"] == "application/apply-patch+yaml"
    assert request.headers["Authorization"] == "Bearer t0ken"
    assert dict(request.params) == {"fieldManager": "rocketcluster-operator", "force": "true"}
    assert request.data == CONFIG_MAP  # the whole desired object, nothing fetched first


async def test_server_side_apply_of_status_names_the_object_and_only_status(
    recorder: kmock.RawHandler,
) -> None:
    recorder["patch"] << {}
    cluster = {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketCluster",
        "metadata": {"name": "prod", "namespace": "team-a", "uid": "x"},
        "spec": {"image": "i"},
    }
    async with _client(recorder) as client:
        await ServerSideApplier(client).apply_status(cluster, {"masters": "2/2"})
    (request,) = list(recorder[:])
    assert (
        request.url.path
        == "/apis/rocketcluster.io/v1alpha1/namespaces/team-a/rocketclusters/prod/status"
    )
    assert request.data == {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketCluster",
        "metadata": {"name": "prod", "namespace": "team-a"},
        "status": {"masters": "2/2"},
    }


async def test_merge_patch_creates_then_patches_and_the_emulator_holds_the_result(
    emulator: kmock.KubernetesEmulator,
) -> None:
    async with _client(emulator, token=None) as client:
        adapter = applier(client, ApplyMode.MERGE)
        assert isinstance(adapter, MergePatchApplier)
        await adapter.apply(CONFIG_MAP)
        changed = {**CONFIG_MAP, "data": {"a.json": "{}", "b.json": "{}"}}
        await adapter.apply(changed)
        stored = await client.get("v1", "ConfigMap", "team-a", "prod-broker-0-config")
    assert stored is not None and stored["data"] == changed["data"]
    methods = [(r.method, r.headers.get("Content-Type")) for r in emulator[:]]
    assert methods == [
        ("PATCH", "application/merge-patch+json"),  # missing: 404
        ("POST", "application/json"),  # so created
        ("PATCH", "application/merge-patch+json"),  # then patched
        ("GET", None),
    ]
    assert all("Authorization" not in r.headers for r in emulator[:])


async def test_api_errors_carry_the_servers_reason(recorder: kmock.RawHandler) -> None:
    (
        recorder["patch"]
        << 422
        << {
            "kind": "Status",
            "reason": "Invalid",
            "message": "spec.replicas: Invalid value: -1",
        }
    )
    async with _client(recorder) as client:
        with pytest.raises(KubeApiError) as caught:
            await ServerSideApplier(client).apply(CONFIG_MAP)
    assert caught.value.status == 422
    assert "spec.replicas" in str(caught.value)


async def test_an_unreachable_api_is_unavailable_not_a_crash() -> None:
    async with KubeClient(Connection(server="http://127.0.0.1:9")) as client:
        with pytest.raises(KubeUnavailable):
            await ServerSideApplier(client).apply(CONFIG_MAP)


def test_the_mode_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCKETCLUSTER_APPLY_MODE", "merge")
    assert ApplyMode.from_env() is ApplyMode.MERGE
    monkeypatch.delenv("ROCKETCLUSTER_APPLY_MODE")
    assert ApplyMode.from_env() is ApplyMode.SERVER_SIDE
    monkeypatch.setenv("ROCKETCLUSTER_APPLY_MODE", "replace")
    with pytest.raises(ValueError, match="expected one of"):
        ApplyMode.from_env()

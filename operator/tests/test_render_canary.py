"""The canary as the operator renders it (``spec.canary``): a ConfigMap and a
Deployment that validate as Kubernetes objects, a config that names every group's
client Service and files the pod mounts, an unprivileged pod without a token, the
PodMonitor's second endpoint; its topic and group for the catalogue, its user with
auth on, a drain that ignores it, and the objects pruned when it is switched off."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import kubernetes_validate
import pytest

from rocketcluster.api import kube
from rocketcluster.api.auth import SECRET_KEY, UsersFile
from rocketcluster.api.canary_config import CANARY_USER, CanaryConfig
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.user_resource import user_secret_name, users_secret_name
from rocketcluster.api.users import Action
from rocketcluster.operator import prune
from rocketcluster.operator.kube.apply import MergePatchApplier
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.observe import orchestrated
from rocketcluster.operator.orchestrate.scale import (
    Consumption,
    GroupContents,
    QueueRange,
    drain_problems,
)
from rocketcluster.operator.reconcile import ClusterMemory, ClusterReconciler
from rocketcluster.operator.render import canary, render_cluster
from rocketcluster.operator.render.brokers import client_endpoints
from rocketcluster.operator.render.output import to_yaml
from rocketcluster.operator.users import UsersReconciler

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "snapshots" / "canary.yaml"
OLDEST, NEWEST = "1.27.0", "1.37.0"  # as test_render.py: the Kubernetes versions we support


def _cluster(
    example: str = "cluster.yaml", canary_spec: dict[str, Any] | None = None, **spec: Any
) -> RocketCluster:
    data = load_manifest(REPO / "examples" / example).model_dump(mode="json", by_alias=True)
    data["spec"]["canary"] = {"enabled": True} if canary_spec is None else canary_spec
    data["spec"].update(spec)
    return RocketCluster.model_validate(data)


def _mine(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["metadata"]["labels"][kube.LABEL_COMPONENT] == canary.COMPONENT]


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _one(_mine(objects), "Deployment")["spec"]["template"]["spec"]
    return spec


def _config(objects: list[dict[str, Any]]) -> CanaryConfig:
    config_map = _one(_mine(objects), "ConfigMap")
    return CanaryConfig.model_validate(json.loads(config_map["data"][canary.CONFIG_FILE]))


def _file_source(pod: dict[str, Any], path: Path) -> dict[str, Any]:
    """The volume a file path in the container lies on (the deepest mount holding it)."""
    mounts = pod["containers"][0]["volumeMounts"]
    holding = [m for m in mounts if str(path).startswith(m["mountPath"].rstrip("/") + "/")]
    assert holding, f"{path} is on no mounted volume"
    mount = max(holding, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return {"mount": mount, "volume": volume, "key": str(path)[len(mount["mountPath"]) + 1 :]}


@pytest.mark.parametrize("example", ["cluster.yaml", "standalone.yaml", "secure.yaml"])
def test_nothing_is_rendered_while_the_canary_is_off(example: str) -> None:
    default = load_manifest(REPO / "examples" / example)
    if default.spec.canary.enabled:
        default = _cluster(example, {"enabled": False})
    assert _mine(render_cluster(default)) == []
    disabled = _cluster(example, {"enabled": False, "intervalSeconds": 9})
    assert render_cluster(disabled) == render_cluster(default)
    assert canary.catalogue_entries(disabled) == ([], [])
    assert canary.canary_user(disabled) is None
    assert canary.drain_ignores(disabled) == (frozenset(), frozenset())


def test_render_matches_snapshot() -> None:
    """The canary's objects and the PodMonitor that scrapes it, with TLS and auth:
    examples/secure.yaml with the canary and the PodMonitor on."""
    cluster = _cluster("secure.yaml", monitoring={"serviceMonitor": True})
    objects = render_cluster(cluster)
    text = to_yaml([*_mine(objects), _one(objects, "PodMonitor")])
    snapshot = SNAPSHOT
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.write_text(text)
    assert text == snapshot.read_text(), (
        f"rendering of the canary changed: review, then UPDATE_SNAPSHOTS=1 pytest {__file__}"
    )


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("example", ["cluster.yaml", "standalone.yaml", "secure.yaml"])
def test_on_it_renders_a_valid_config_map_and_deployment(example: str, version: str) -> None:
    objects = _mine(render_cluster(_cluster(example)))
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("ConfigMap", f"{objects[0]['metadata']['name']}"),
        ("Deployment", f"{objects[0]['metadata']['name']}"),
    ]
    assert objects[0]["metadata"]["name"].endswith("-canary")
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_would_catch_a_mistake_in_the_deployment() -> None:
    deployment = _one(_mine(render_cluster(_cluster())), "Deployment")
    deployment["spec"]["strategy"]["typ"] = "Recreate"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, NEWEST, strict=True)


def test_the_config_names_every_group_at_its_client_service() -> None:
    cluster = _cluster(
        canary_spec={"enabled": True, "intervalSeconds": 3, "timeoutSeconds": 7, "topic": "probe"}
    )
    config = _config(render_cluster(cluster))
    assert config.cluster == "prod"
    # What applications are given (rocketctl render's client endpoints): the Services.
    assert [g.endpoint for g in config.groups] == client_endpoints(cluster).split(";")
    assert [g.name for g in config.groups] == [
        f"prod-broker-{i}" for i in range(cluster.spec.brokers.groups)
    ]
    assert config.groups[0].endpoint == "prod-broker-0.default.svc.cluster.local:8081"
    assert (config.topic, config.consumer_group) == ("probe", "rocketcluster-canary")
    assert (config.interval_seconds, config.timeout_seconds) == (3, 7)
    assert config.ca_file is None and config.credentials is None
    scaled = _cluster(brokers={**cluster.spec.brokers.model_dump(by_alias=True), "groups": 3})
    assert [g.name for g in _config(render_cluster(scaled)).groups][-1] == "prod-broker-2"


def test_the_pod_runs_rocketctl_canary_unprivileged_without_a_token() -> None:
    cluster = _cluster()
    objects = render_cluster(cluster)
    deployment = _one(_mine(objects), "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = _pod(objects)
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["image"] == cluster.spec.image  # the brokers' image carries rocketctl
    assert container["command"] == ["rocketctl"]
    assert container["args"][:3] == ["canary", "--config", canary.CONFIG_PATH]
    assert container["args"][3:] == ["--listen", f"0.0.0.0:{canary.PORT}"]
    assert _file_source(pod, Path(canary.CONFIG_PATH))["volume"]["configMap"] == {
        "name": "prod-canary"
    }
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["ports"] == [
        {"name": canary.PORT_NAME, "containerPort": canary.PORT, "protocol": "TCP"}
    ]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": canary.PORT_NAME}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(canary.PORT)
    assert annotations["prometheus.io/scrape"] == "true"
    assert container["resources"]["limits"] == {"memory": "256Mi"}
    image = _cluster(canary_spec={"enabled": True, "image": "registry.example/canary:1"})
    assert _pod(render_cluster(image))["containers"][0]["image"] == "registry.example/canary:1"
    assert "prod-canary" not in {o["metadata"]["name"] for o in objects if orchestrated(o)}


def test_with_tls_and_auth_it_trusts_the_ca_and_signs_as_its_user() -> None:
    cluster = _cluster("secure.yaml")
    objects = render_cluster(cluster)
    config, pod = _config(objects), _pod(objects)
    assert config.ca_file is not None and config.credentials is not None
    ca = _file_source(pod, config.ca_file)
    assert ca["volume"]["secret"]["secretName"] == cluster.spec.security.tls.secret_name
    assert ca["volume"]["secret"]["items"] == [{"key": ca["key"], "path": ca["key"]}]
    assert config.credentials.access_key == CANARY_USER
    key = _file_source(pod, config.credentials.secret_key_file)
    assert key["volume"]["secret"]["secretName"] == user_secret_name(cluster.name, CANARY_USER)
    assert key["volume"]["secret"]["items"] == [{"key": SECRET_KEY, "path": key["key"]}]
    user = canary.canary_user(cluster)
    assert user is not None and user.name == CANARY_USER
    assert {(p.topic, p.group, tuple(p.actions)) for p in user.permissions} == {
        ("rocketcluster-canary", None, (Action.PUB, Action.SUB)),
        (None, "rocketcluster-canary", (Action.SUB,)),
    }


def test_the_pod_monitor_scrapes_the_canary_only_when_it_is_on() -> None:
    flags = {"serviceMonitor": True}
    off_cluster = _cluster("secure.yaml", {"enabled": False}, monitoring=flags)
    off = _one(render_cluster(off_cluster), "PodMonitor")
    assert len(off["spec"]["podMetricsEndpoints"]) == 1
    assert canary.COMPONENT not in off["spec"]["selector"]["matchExpressions"][0]["values"]
    objects = render_cluster(_cluster("secure.yaml", monitoring=flags))
    monitor = _one(objects, "PodMonitor")
    kubernetes_validate.validate(_one(_mine(objects), "Deployment"), NEWEST, strict=True)
    assert canary.COMPONENT in monitor["spec"]["selector"]["matchExpressions"][0]["values"]
    first, second = monitor["spec"]["podMetricsEndpoints"]
    assert first == off["spec"]["podMetricsEndpoints"][0]  # brokers and controllers alike
    assert second["port"] == _pod(objects)["containers"][0]["ports"][0]["name"]
    assert "bearerTokenSecret" not in second and "scheme" not in second  # plain HTTP
    assert {"targetLabel": "job", "replacement": "rocketcluster-canary"} in second["relabelings"]
    labels = _one(_mine(objects), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())


def test_its_topic_and_group_go_into_the_catalogue_unless_the_manifest_has_them() -> None:
    topics, groups = canary.catalogue_entries(_cluster())
    assert topics == [
        {"name": "rocketcluster-canary", "queues": 1, "messageType": "NORMAL", "trace": "off"}
    ]
    assert groups == [{"name": "rocketcluster-canary", "fifo": False, "maxDeliveryAttempts": 16}]
    declared = _cluster(
        topics=[{"name": "rocketcluster-canary", "queues": 4}],
        consumerGroups=[{"name": "rocketcluster-canary"}],
    )
    assert canary.catalogue_entries(declared) == ([], [])


@pytest.mark.parametrize(
    ("field", "value"),
    [("topic", "RMQ_SYS_CANARY"), ("consumerGroup", "%DLQ%x"), ("topic", "bad name")],
)
def test_reserved_or_invalid_names_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=field if field == "topic" else "consumerGroup"):
        _cluster(canary_spec={"enabled": True, field: value})


def test_a_drain_ignores_the_canarys_messages_and_nothing_else() -> None:
    contents = GroupContents(
        queues=(
            QueueRange("rocketcluster-canary", 0, 0, 5),
            QueueRange("%DLQ%rocketcluster-canary", 0, 0, 1),
            QueueRange("orders", 0, 0, 10),
        ),
        consumption=(
            Consumption("rocketcluster-canary", "rocketcluster-canary", 0, 3, 1),
            Consumption("billing", "orders", 0, 10, 0),
        ),
    )
    ignores = canary.drain_ignores(_cluster())
    assert drain_problems(contents, *ignores) == []
    plain = drain_problems(contents)
    assert any("rocketcluster-canary" in p for p in plain), plain
    behind = GroupContents(
        queues=contents.queues, consumption=(Consumption("billing", "orders", 0, 4, 0),)
    )
    assert drain_problems(behind, *ignores) == ["consumer group billing has 6 unconsumed messages"]


# -- against the API emulator ------------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        for key, kind in (
            ("v1/configmaps", "ConfigMap"),
            ("v1/services", "Service"),
            ("v1/secrets", "Secret"),
            ("apps/v1/deployments", "Deployment"),
            ("apps/v1/statefulsets", "StatefulSet"),
            ("batch/v1/cronjobs", "CronJob"),
            # What the health reports' prune lists (its Spark driver's account).
            ("v1/serviceaccounts", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1/roles", "Role"),
            ("rbac.authorization.k8s.io/v1/rolebindings", "RoleBinding"),
            ("networking.k8s.io/v1/ingresses", "Ingress"),
            ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
            ("rocketcluster.io/v1alpha1/rocketusers", "RocketUser"),
        ):
            api.resources[key] = kmock.ResourceInfo(kind=kind, verbs=verbs, namespaced=True)
        async with KubeClient(Connection(server=str(api.url).rstrip("/"))) as kube_client:
            yield kube_client


async def _names(client: KubeClient, api_version: str, kind: str) -> set[str]:
    return {i["metadata"]["name"] for i in await client.list(api_version, kind, "default", {})}


async def test_switching_the_canary_off_removes_it_and_nothing_else(client: KubeClient) -> None:
    applier = MergePatchApplier(client)
    for obj in render_cluster(_cluster()):
        if obj["kind"] in ("ConfigMap", "Service", "Deployment", "StatefulSet"):
            await applier.apply(obj)
    assert "prod-canary" in await _names(client, "apps/v1", "Deployment")
    events: list[tuple[str, str, str]] = []
    async with httpx.AsyncClient() as http:
        reconciler = ClusterReconciler(client, applier, http, lambda *e: events.append(e))
        off = _cluster(canary_spec={"enabled": False})
        await reconciler._prune(off, render_cluster(off), ClusterMemory())
    assert sorted(e for e in events if e[1] == "CanaryRemoved") == [
        ("Normal", "CanaryRemoved", "ConfigMap/prod-canary"),
        ("Normal", "CanaryRemoved", "Deployment/prod-canary"),
    ]
    assert "prod-canary" not in await _names(client, "apps/v1", "Deployment")
    assert "prod-broker-0-config" in await _names(client, "v1", "ConfigMap")
    assert await prune.prune(client, off, prune.CANARY, []) == []


async def test_with_auth_the_canary_user_gets_a_secret_and_a_place_in_the_users_file(
    client: KubeClient,
) -> None:
    cluster = _cluster("secure.yaml")
    await UsersReconciler(client, MergePatchApplier(client)).sync(cluster)
    ns = cluster.metadata.namespace
    secret = await client.get("v1", "Secret", ns, user_secret_name(cluster.name, CANARY_USER))
    assert secret is not None
    key = base64.b64decode(secret["data"][SECRET_KEY]).decode()
    users_secret = await client.get("v1", "Secret", ns, users_secret_name(cluster.name))
    assert users_secret is not None
    (body,) = users_secret["data"].values()
    users = UsersFile.model_validate_json(base64.b64decode(body))
    (user,) = [u for u in users.users if u.access_key == CANARY_USER]
    assert user.secret_key == key
    # Off again: the users file no longer lists it.
    await UsersReconciler(client, MergePatchApplier(client)).sync(
        _cluster("secure.yaml", {"enabled": False})
    )
    users_secret = await client.get("v1", "Secret", ns, users_secret_name(cluster.name))
    assert users_secret is not None
    (body,) = users_secret["data"].values()
    assert CANARY_USER not in {
        u.access_key for u in UsersFile.model_validate_json(base64.b64decode(body)).users
    }

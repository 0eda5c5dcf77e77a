"""The web console the operator renders behind ``spec.console``: nothing while it is
off; a ConfigMap (a ConsoleConfig naming every admin endpoint), a Deployment, a
Service and, when asked, an Ingress while it is on — with TLS, auth and the health
reports mounted as the config file says, valid for the Kubernetes versions we
support; the session key Secret kept by the users reconciler; the objects removed
when the console goes (against the kmock API emulator); and the console's
Deployment never mistaken for a controller member by the roller."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import kmock
import kubernetes_validate
import pytest

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.console_config import ConsoleConfig
from rocketcluster.operator import prune
from rocketcluster.operator.kube.apply import MergePatchApplier
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.observe import Observer, is_controller_member, orchestrated
from rocketcluster.operator.reconcile import ClusterMemory, ClusterReconciler
from rocketcluster.operator.render import auth, console, render_cluster, tls
from rocketcluster.operator.users import UsersReconciler

REPO = Path(__file__).resolve().parents[2]
OLDEST, NEWEST = "1.27.0", "1.37.0"  # as test_render.py: the Kubernetes versions we support
FULL_CONSOLE: dict[str, Any] = {
    "enabled": True,
    "replicas": 2,
    "service": {"type": "NodePort", "port": 80, "annotations": {"team": "messaging"}},
    "ingress": {
        "enabled": True,
        "host": "rocket.example.com",
        "className": "nginx",
        "path": "/console",
        "tlsSecretName": "rocket-web-tls",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
    },
}


def _cluster(
    example: str = "cluster.yaml",
    console_spec: dict[str, Any] | None = None,
    *,
    uid: str | None = None,
    **spec: Any,
) -> RocketCluster:
    data = load_manifest(REPO / "examples" / example).model_dump(mode="json", by_alias=True)
    data["spec"]["console"] = {"enabled": True} if console_spec is None else console_spec
    data["spec"].update(spec)
    if uid is not None:
        data["metadata"]["uid"] = uid
    return RocketCluster.model_validate(data)


def _secure(console_spec: dict[str, Any] | None = None, **spec: Any) -> RocketCluster:
    """examples/secure.yaml (TLS and auth on) with the console and health reports."""
    return _cluster("secure.yaml", console_spec, healthReports={"schedule": "@daily"}, **spec)


def _mine(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o for o in objects if o["metadata"]["labels"][kube.LABEL_COMPONENT] == console.COMPONENT
    ]


def _one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = _one(_mine(objects), "Deployment")["spec"]["template"]["spec"]
    return spec


def _config(objects: list[dict[str, Any]]) -> ConsoleConfig:
    config_map = _one(_mine(objects), "ConfigMap")
    return ConsoleConfig.model_validate(json.loads(config_map["data"][console.CONFIG_FILE]))


def _file_source(pod: dict[str, Any], path: Path) -> dict[str, Any]:
    """The volume a file path in the container lies on (the deepest mount holding it)."""
    mounts = pod["containers"][0]["volumeMounts"]
    holding = [m for m in mounts if str(path).startswith(m["mountPath"].rstrip("/") + "/")]
    assert holding, f"{path} is on no mounted volume"
    mount = max(holding, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return {"mount": mount, "volume": volume, "key": str(path)[len(mount["mountPath"]) + 1 :]}


# -- what is rendered --------------------------------------------------------------------


@pytest.mark.parametrize("example", ["cluster.yaml", "standalone.yaml", "secure.yaml"])
def test_nothing_is_rendered_while_the_console_is_off(example: str) -> None:
    default = load_manifest(REPO / "examples" / example)
    assert default.spec.console.enabled is False
    assert _mine(render_cluster(default)) == []
    if default.spec.controller.replicas > 0:
        disabled = _cluster(example, {**FULL_CONSOLE, "enabled": False})
        assert _mine(render_cluster(disabled)) == []
        assert render_cluster(disabled) == render_cluster(default)


def test_on_it_renders_a_config_map_deployment_service_and_ingress() -> None:
    objects = render_cluster(_cluster(console_spec=FULL_CONSOLE))
    assert sorted((o["kind"], o["metadata"]["name"]) for o in _mine(objects)) == [
        ("ConfigMap", "prod-console"),
        ("Deployment", "prod-console"),
        ("Ingress", "prod-console"),
        ("Service", "prod-console"),
    ]
    kinds = [o["kind"] for o in objects]
    assert kinds.index("Ingress") > kinds.index("Service")  # applied after its backend
    without_ingress = render_cluster(_cluster())
    assert sorted(o["kind"] for o in _mine(without_ingress)) == [
        "ConfigMap",
        "Deployment",
        "Service",
    ]


VARIANTS: dict[str, Callable[[], RocketCluster]] = {
    "plain": _cluster,
    "full": lambda: _cluster(console_spec=FULL_CONSOLE, uid="u-1"),
    "secure": lambda: _secure(FULL_CONSOLE),
    "load-balancer": lambda: _cluster(
        console_spec={"enabled": True, "service": {"type": "LoadBalancer"}}
    ),
}


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_is_valid_kubernetes(variant: str, version: str) -> None:
    objects = _mine(render_cluster(VARIANTS[variant]()))
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_would_catch_a_mistake_in_an_ingress() -> None:
    ingress = _one(_mine(render_cluster(_cluster(console_spec=FULL_CONSOLE))), "Ingress")
    ingress["spec"]["rules"][0]["http"]["paths"][0]["pathTyp"] = "Prefix"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ingress, NEWEST, strict=True)


def test_the_config_names_every_controller_and_broker_admin_api() -> None:
    cluster = _cluster()
    config = _config(render_cluster(cluster))
    assert config.cluster == "prod"
    assert config.controllers == [
        f"http://prod-controller-{i}.default.svc.cluster.local:8080" for i in range(3)
    ]
    assert [(b.name, b.group) for b in config.brokers] == [
        (f"prod-broker-{g}-{r}", f"prod-broker-{g}") for g in range(2) for r in range(3)
    ]
    assert config.brokers[4].admin == (
        "http://prod-broker-1-1.prod-broker-1-headless.default.svc.cluster.local:8080"
    )
    # Off by default: no CA, no sign-in, no reports; the audit log on its emptyDir.
    assert config.ca_file is None and config.auth.enabled is False
    assert config.reports_dir is None
    pod = _pod(render_cluster(cluster))
    assert config.audit_log is not None
    audit = _file_source(pod, config.audit_log)
    assert "emptyDir" in audit["volume"] and not audit["mount"].get("readOnly")
    assert {v["name"] for v in pod["volumes"]} == {"config", "tmp", "audit"}


def test_the_container_runs_the_config_file_on_the_console_port() -> None:
    objects = render_cluster(_cluster())
    pod = _pod(objects)
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/rocketcluster/rocketcluster-console:0.1.0"
    assert container["command"] == ["rocketcluster-console"]
    args = container["args"]
    config_file = Path(args[args.index("--config") + 1])
    source = _file_source(pod, config_file)
    assert source["volume"]["configMap"]["name"] == "prod-console"
    assert source["key"] in _one(_mine(objects), "ConfigMap")["data"]
    assert args[args.index("--listen") + 1] == "0.0.0.0:8090"
    assert container["ports"] == [{"name": "http", "containerPort": 8090, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_the_pod_is_unprivileged_and_has_no_kubernetes_token() -> None:
    pod = _pod(render_cluster(_secure()))
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod  # no account of its own: it needs no API
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    security = pod["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # Only /tmp and the audit directory are writable.
    writable = {
        m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if not m.get("readOnly")
    }
    assert writable == {"/tmp", console.AUDIT_DIR}


def test_resources_come_from_the_spec_with_small_defaults() -> None:
    default = _pod(render_cluster(_cluster()))["containers"][0]["resources"]
    assert default == {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    given = {"enabled": True, "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}
    pod = _pod(render_cluster(_cluster(console_spec=given)))
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}
    bare = {"enabled": True, "resources": {}}
    assert "resources" not in _pod(render_cluster(_cluster(console_spec=bare)))["containers"][0]


def test_with_tls_the_console_trusts_the_clusters_ca_and_dials_https() -> None:
    cluster = _secure()
    objects = render_cluster(cluster)
    config = _config(objects)
    assert config.ca_file is not None
    source = _file_source(_pod(objects), config.ca_file)
    # ca.crt alone: never the shared key.
    assert source["volume"]["secret"] == {
        "secretName": "prod-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    assert source["key"] == "ca.crt" and source["mount"]["readOnly"] is True
    urls = config.controllers + [b.admin for b in config.brokers]
    assert urls and all(u.startswith("https://") for u in urls)
    # Every host it dials is named by the shared certificate (a wildcard covers a label).
    for url in urls:
        host = urlsplit(url).hostname or ""
        assert any(
            host.split(".", 1)[1] == name.removeprefix("*.") for name in tls.dns_names(cluster)
        ), host
    # Plain HTTP probes: the console serves people over HTTP; TLS ends at the Ingress.
    container = _pod(objects)["containers"][0]
    assert "scheme" not in container["readinessProbe"]["httpGet"]


def test_with_auth_the_console_mounts_the_token_users_and_session_key() -> None:
    objects = render_cluster(_secure())
    config = _config(objects)
    pod = _pod(objects)
    assert config.auth.enabled is True
    wanted = {
        config.auth.admin_token_file: ("prod-admin-token", "token"),
        config.auth.users_file: ("prod-users", "users.json"),
        config.auth.session_key_file: ("prod-console-session", "sessionKey"),
    }
    for path, (secret, key) in wanted.items():
        assert path is not None
        source = _file_source(pod, path)
        assert source["volume"]["secret"]["secretName"] == secret
        assert source["key"] == key and source["mount"]["readOnly"] is True
    # The file names no secret itself.
    assert "secretKey" not in _one(_mine(objects), "ConfigMap")["data"][console.CONFIG_FILE]
    # Auth off: nothing of it.
    plain = _pod(render_cluster(_cluster()))
    assert not [v for v in plain["volumes"] if "secret" in v]


def test_the_reports_are_mounted_read_only_from_the_reports_claim() -> None:
    objects = render_cluster(_secure())
    config = _config(objects)
    assert config.reports_dir == Path(console.REPORTS_DIR)
    pod = _pod(objects)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "reports"]
    assert volume["persistentVolumeClaim"] == {"claimName": "prod-health-reports", "readOnly": True}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "reports"]
    assert mount == {"name": "reports", "mountPath": console.REPORTS_DIR, "readOnly": True}
    # A claim of the user's (healthReports.output) is the one mounted.
    own = _cluster(healthReports={"output": "shared-reports"})
    (volume,) = [v for v in _pod(render_cluster(own))["volumes"] if v["name"] == "reports"]
    assert volume["persistentVolumeClaim"]["claimName"] == "shared-reports"


def test_the_service_and_ingress_follow_the_spec() -> None:
    objects = _mine(render_cluster(_cluster(console_spec=FULL_CONSOLE)))
    service = _one(objects, "Service")
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    assert service["metadata"]["annotations"] == {"team": "messaging"}
    pod_labels = _one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ingress = _one(objects, "Ingress")
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["rocket.example.com"], "secretName": "rocket-web-tls"}
    ]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "rocket.example.com"
    assert rule["http"]["paths"] == [
        {
            "path": "/console",
            "pathType": "Prefix",
            "backend": {"service": {"name": "prod-console", "port": {"name": "http"}}},
        }
    ]
    minimal = {"enabled": True, "ingress": {"enabled": True, "host": "r.example.com"}}
    bare = _one(_mine(render_cluster(_cluster(console_spec=minimal))), "Ingress")
    assert "ingressClassName" not in bare["spec"] and "tls" not in bare["spec"]
    assert "annotations" not in bare["metadata"]


def _pod_hash(cluster: RocketCluster) -> str:
    deployment = _one(_mine(render_cluster(cluster)), "Deployment")
    value: str = deployment["spec"]["template"]["metadata"]["annotations"][kube.ANNOTATION_POD_HASH]
    return value


def test_a_config_change_rolls_the_console_and_a_service_change_does_not() -> None:
    base = _pod_hash(_cluster())
    assert _pod_hash(_cluster()) == base  # stable
    # A third group is a new set of brokers in console.json: a new pod hash.
    assert _pod_hash(_cluster(brokers={"groups": 3, "replicas": 3})) != base
    assert _pod_hash(_cluster(console_spec={"enabled": True, "image": "x/console:2"})) != base
    # The Service, the Ingress and the replica count are not in the pod.
    same = {**FULL_CONSOLE, "replicas": 3}
    assert _pod_hash(_cluster(console_spec=same)) == base


def test_it_is_owned_by_the_cluster() -> None:
    for obj in _mine(render_cluster(_cluster(console_spec=FULL_CONSOLE, uid="u-1"))):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner["kind"] == "RocketCluster" and owner["uid"] == "u-1"


def test_the_console_deployment_is_no_controller_member() -> None:
    objects = render_cluster(_cluster())
    members = [o["metadata"]["name"] for o in objects if is_controller_member(o)]
    assert members == [f"prod-controller-{i}" for i in range(3)]
    rolled = {o["metadata"]["name"] for o in objects if orchestrated(o)}
    assert "prod-console" not in rolled
    assert {"prod-broker-0", "prod-broker-1", "prod-controller-0"} <= rolled


# -- against the API emulator ------------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        for key, kind in (
            ("v1/configmaps", "ConfigMap"),
            ("v1/services", "Service"),
            ("v1/secrets", "Secret"),
            ("v1/pods", "Pod"),
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


APPLIED = ("ConfigMap", "Service", "Deployment", "StatefulSet", "Ingress")


async def _apply_all(client: KubeClient, objects: list[dict[str, Any]]) -> None:
    applier = MergePatchApplier(client)
    for obj in objects:
        if obj["kind"] in APPLIED:
            await applier.apply(obj)


async def _names(client: KubeClient, api_version: str, kind: str) -> set[str]:
    return {i["metadata"]["name"] for i in await client.list(api_version, kind, "default", {})}


async def test_switching_the_console_off_removes_it_and_nothing_else(client: KubeClient) -> None:
    on = _cluster(console_spec=FULL_CONSOLE)
    await _apply_all(client, render_cluster(on))
    assert "prod-console" in await _names(client, "networking.k8s.io/v1", "Ingress")
    # The Ingress alone goes when it is switched off.
    no_ingress = _cluster(console_spec={**FULL_CONSOLE, "ingress": {"enabled": False}})
    wanted = [o for o in render_cluster(no_ingress) if prune.belongs(o, prune.CONSOLE)]
    removed = await prune.prune(client, no_ingress, prune.CONSOLE, wanted)
    assert removed == [("networking.k8s.io/v1", "Ingress", "prod-console")]
    # Console off: its ConfigMap, Service and Deployment go; the controllers' and the
    # brokers' stay.
    off = _cluster(console_spec={"enabled": False})
    removed = await prune.prune(client, off, prune.CONSOLE, [])
    assert sorted(removed) == [
        ("apps/v1", "Deployment", "prod-console"),
        ("v1", "ConfigMap", "prod-console"),
        ("v1", "Service", "prod-console"),
    ]
    assert await _names(client, "apps/v1", "Deployment") == {
        f"prod-controller-{i}" for i in range(3)
    }
    assert {"prod-controller-config", "prod-broker-0-config"} <= await _names(
        client, "v1", "ConfigMap"
    )
    assert "prod-broker-0" in await _names(client, "v1", "Service")
    assert await prune.prune(client, off, prune.CONSOLE, []) == []


async def test_the_reconciler_prunes_when_the_section_goes(client: KubeClient) -> None:
    events: list[tuple[str, str, str]] = []
    async with httpx.AsyncClient() as http:
        reconciler = ClusterReconciler(
            client, MergePatchApplier(client), http, lambda *e: events.append(e)
        )
        memory = ClusterMemory()
        on = _cluster()
        await _apply_all(client, render_cluster(on))
        await reconciler._prune(on, render_cluster(on), memory)
        assert events == []
        gone = load_manifest(REPO / "examples" / "cluster.yaml")  # no console section
        await reconciler._prune(gone, render_cluster(gone), memory)
    assert sorted(events) == [
        ("Normal", "ConsoleRemoved", "ConfigMap/prod-console"),
        ("Normal", "ConsoleRemoved", "Deployment/prod-console"),
        ("Normal", "ConsoleRemoved", "Service/prod-console"),
    ]


async def test_the_observer_does_not_take_the_console_for_a_controller_member(
    client: KubeClient,
) -> None:
    cluster = _cluster()
    objects = render_cluster(cluster)
    await _apply_all(client, objects)
    desired = {o["metadata"]["name"]: o for o in objects if orchestrated(o)}
    async with httpx.AsyncClient() as http:
        observed = await Observer(client, http).observe(cluster, desired)
    assert "prod-console" not in observed.workloads
    assert observed.controllers is not None
    assert [m.name for m in observed.controllers.members] == [
        f"prod-controller-{i}" for i in range(3)
    ]


def _secret_value(secret: dict[str, Any] | None, key: str) -> str:
    assert secret is not None
    return base64.b64decode(secret["data"][key]).decode()


async def test_the_session_key_secret_is_made_once_and_kept(client: KubeClient) -> None:
    users = UsersReconciler(client, MergePatchApplier(client))
    cluster = _secure(uid="u-1")
    name = auth.console_session_secret_name(cluster)
    assert name == "prod-console-session"
    await users.sync(cluster)
    first = await client.get("v1", "Secret", "default", name)
    key = _secret_value(first, auth.SESSION_KEY)
    assert len(key) >= 32
    assert first is not None
    assert first["metadata"]["labels"][kube.LABEL_COMPONENT] == auth.COMPONENT
    assert first["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    await users.sync(cluster)
    assert _secret_value(await client.get("v1", "Secret", "default", name), auth.SESSION_KEY) == key
    # A key a person put there is kept as well.
    await client.patch(
        f"/api/v1/namespaces/default/secrets/{name}",
        {"data": {auth.SESSION_KEY: base64.b64encode(b"k" * 40).decode()}},
    )
    await users.sync(cluster)
    secret = await client.get("v1", "Secret", "default", name)
    assert _secret_value(secret, auth.SESSION_KEY) == "k" * 40


@pytest.mark.parametrize("what", ["console off", "auth off"])
async def test_no_session_key_without_a_console_that_signs_people_in(
    client: KubeClient, what: str
) -> None:
    cluster = _secure({"enabled": False}) if what == "console off" else _cluster()
    await UsersReconciler(client, MergePatchApplier(client)).sync(cluster)
    assert "prod-console-session" not in await _names(client, "v1", "Secret")

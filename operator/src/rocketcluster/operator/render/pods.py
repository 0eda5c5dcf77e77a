"""The parts every rocketcluster pod shares: a non-root, read-only container with the
downward API in its environment, probes on the admin port, spread across zones and
nodes."""

from __future__ import annotations

from typing import Any

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.cluster import PlacementSpec, ResourcesSpec, RocketCluster

RUN_AS = 10001
ZONE_KEY = "topology.kubernetes.io/zone"
HOST_KEY = "kubernetes.io/hostname"


def downward_env() -> list[dict[str, Any]]:
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    return [
        field(kube.ENV_POD_NAME, "metadata.name"),
        field(kube.ENV_POD_NAMESPACE, "metadata.namespace"),
        field(kube.ENV_POD_IP, "status.podIP"),
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
    ]


def probes() -> dict[str, Any]:
    """Startup allows a long recovery (a broker rebuilds its queues from the log);
    liveness only restarts a process that stopped answering; readiness is what the
    Services and the operator's roll wait for."""

    def http(path: str, period: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": "admin"},
            "periodSeconds": period,
            "timeoutSeconds": 2,
            "failureThreshold": failures,
        }

    return {
        "startupProbe": http("/healthz", 2, 300),
        "livenessProbe": http("/healthz", 10, 6),
        "readinessProbe": http("/readyz", 2, 2),
    }


def container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def resources(spec: ResourcesSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec.requests:
        out["requests"] = dict(spec.requests)
    if spec.limits:
        out["limits"] = dict(spec.limits)
    return out


def container(
    cluster: RocketCluster,
    name: str,
    args: list[str],
    ports: dict[str, int],
    spec_resources: ResourcesSpec,
    image: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": cluster.spec.image_pull_policy.value,
        "command": args[:1],
        "args": args[1:],
        "env": downward_env(),
        "ports": [
            {"name": port_name, "containerPort": port, "protocol": "TCP"}
            for port_name, port in ports.items()
        ],
        "volumeMounts": [
            {"name": "config", "mountPath": kube.CONFIG_DIR, "readOnly": True},
            {"name": "data", "mountPath": kube.DATA_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": container_security(),
        **probes(),
    }
    limits = resources(spec_resources)
    if limits:
        out["resources"] = limits
    return out


def web_container(
    name: str,
    image: str,
    pull_policy: str,
    argv: list[str],
    port: tuple[str, int],
    mounts: list[dict[str, Any]],
    spec: ResourcesSpec,
) -> dict[str, Any]:
    """The container of a small HTTP service the operator runs beside the cluster (the
    console, the canary): ``argv`` on a read-only root filesystem with HOME in /tmp,
    one named port, ``/healthz`` for startup and liveness (a process that stopped
    answering) and ``/readyz`` for readiness."""

    def probe(path: str, period: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": port[0]},
            "periodSeconds": period,
            "timeoutSeconds": 2,
            "failureThreshold": failures,
        }

    out: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": argv[:1],
        "args": argv[1:],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HOME", "value": "/tmp"},  # the root filesystem is read-only
        ],
        "ports": [{"name": port[0], "containerPort": port[1], "protocol": "TCP"}],
        "volumeMounts": mounts,
        "securityContext": container_security(),
        "startupProbe": probe("/healthz", 2, 30),
        "livenessProbe": probe("/healthz", 10, 6),
        "readinessProbe": probe("/readyz", 5, 2),
    }
    limits = resources(spec)
    if limits:
        out["resources"] = limits
    return out


def tokenless_pod_spec(
    placement: PlacementSpec,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    grace_seconds: int,
    spread_over: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The pod spec of a process that calls no Kubernetes API (the console, the
    canary): no service-account token, no Service links, the restricted security
    context, the cluster's placement (spread over nodes by ``spread_over`` pods when
    it runs several)."""
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_seconds,
        "securityContext": pod_security(),
        **({"topologySpreadConstraints": spread(placement, spread_over)} if spread_over else {}),
        **placement_fields(placement),
        "containers": [container],
        "volumes": volumes,
    }


def spread(placement: PlacementSpec, selector: dict[str, str]) -> list[dict[str, Any]]:
    """Replicas of one group (or the controller members) over zones, then nodes: a
    zone or node failure takes at most one replica while there are enough of them.
    Zones are a hard rule only when the manifest names them."""
    zone_rule = "DoNotSchedule" if placement.zones else "ScheduleAnyway"
    return [
        {
            "maxSkew": 1,
            "topologyKey": ZONE_KEY,
            "whenUnsatisfiable": zone_rule,
            "labelSelector": {"matchLabels": dict(selector)},
        },
        {
            "maxSkew": 1,
            "topologyKey": HOST_KEY,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        },
    ]


def placement_fields(placement: PlacementSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if placement.node_selector:
        out["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        out["tolerations"] = [dict(t) for t in placement.tolerations]
    if placement.zones:
        out["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": ZONE_KEY, "operator": "In", "values": placement.zones}
                            ]
                        }
                    ]
                }
            }
        }
    return out


def scrape_annotations(*, https: bool = False) -> dict[str, str]:
    """The conventional annotations for Prometheus' kubernetes-pods discovery."""
    out = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(ADMIN_PORT),
        "prometheus.io/path": "/metrics",
    }
    if https:
        out["prometheus.io/scheme"] = "https"
    return out


def pod_spec(
    cluster: RocketCluster,
    container_spec: dict[str, Any],
    *,
    service_account: str,
    automount_token: bool,
    selector: dict[str, str],
    grace_seconds: int,
    data_volume: dict[str, Any] | None,
    config_map: str,
) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": config_map}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    if data_volume is not None:
        volumes.insert(1, data_volume)
    return {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": automount_token,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_seconds,
        "securityContext": pod_security(),
        "topologySpreadConstraints": spread(cluster.spec.placement, selector),
        **placement_fields(cluster.spec.placement),
        "containers": [container_spec],
        "volumes": volumes,
    }

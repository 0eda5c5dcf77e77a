"""The web console of a RocketCluster (``spec.console``): the ``rocketcluster-console``
process, which reads and operates the cluster only through the controllers' and
brokers' admin APIs — no Kubernetes API (no service account token is mounted, and
the operator's RBAC gives it nothing). For ``enabled: true`` the operator renders:

- a **ConfigMap** ``<cluster>-console`` with ``console.json`` (a
  :class:`~rocketcluster.api.console_config.ConsoleConfig`): the controllers' admin
  URLs through their Services, every broker replica's admin URL through its group's
  headless Service (one DNS name per pod, which the TLS certificate covers), the CA
  with TLS on, the mounted auth files with auth on, the reports directory with
  ``spec.healthReports``, and an audit log;
- a **Deployment** ``<cluster>-console``: non-root, read-only root filesystem,
  ``/readyz`` and ``/healthz`` probes on port 8090 (plain HTTP: TLS for people ends
  at the Ingress), the pod-hash annotation over its pod spec and config, so a change
  to either rolls it (the Deployment's own rolling update: no orchestration needed);
- a **Service** ``<cluster>-console`` (``service.type``, ``service.port``);
- an **Ingress** ``<cluster>-console`` with ``ingress.enabled``.

What it mounts:

- with security.tls, only ``ca.crt`` of the cluster's TLS Secret (the console verifies
  the admin APIs; it presents no certificate);
- with security.auth, the admin token and users Secrets the operator keeps (users.py)
  and the session key Secret ``<cluster>-console-session`` (render/auth.py), which
  users.py makes once with a random key and never overwrites: every replica signs and
  checks sessions with the same key;
- with spec.healthReports, the reports' claim **read-only** at ``/reports``. That
  claim is ReadWriteOnce unless ``healthReports.output`` names one of yours that is
  not: a console pod scheduled on another node than the report job's pod cannot
  attach it (it then waits in ContainerCreating), so a shared volume
  (ReadWriteMany/ReadOnlyMany) is what serves more than one node;
- the audit log (offset resets, resends, test sends, as JSON lines) on an emptyDir:
  it lasts as long as the pod; the console also logs each action to stdout.

Every object carries the component label ``console``: the reconciler deletes them
when the console is switched off or its section goes (:data:`KINDS`, prune.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from rocketcluster.api import kube
from rocketcluster.api.auth import ADMIN_TOKEN_KEY, USERS_FILE_KEY
from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.cluster import CONSOLE_PORT, RocketCluster
from rocketcluster.api.console_config import ConsoleAuth, ConsoleBroker, ConsoleConfig
from rocketcluster.operator.render import auth, pods, tls
from rocketcluster.operator.render.brokers import group_names, pod_names
from rocketcluster.operator.render.controllers import admin_urls
from rocketcluster.operator.render.hashing import pod_hash
from rocketcluster.operator.render.health_reports import claim_name
from rocketcluster.operator.render.meta import K8sObject, metadata, selector_labels

COMPONENT: Final = "console"
# What the reconciler lists to find objects no longer rendered (prune.py).
KINDS: Final = (
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("networking.k8s.io/v1", "Ingress"),
)
CONFIG_FILE: Final = "console.json"
CONFIG_PATH: Final = f"{kube.CONFIG_DIR}/{CONFIG_FILE}"
PORT_NAME: Final = "http"
SESSION_DIR: Final = f"{auth.AUTH_ROOT}/console-session"
SESSION_VOLUME: Final = "console-session"
REPORTS_DIR: Final = "/reports"
AUDIT_DIR: Final = "/var/log/rocketcluster-console"
AUDIT_LOG: Final = f"{AUDIT_DIR}/audit.jsonl"
AUDIT_SIZE: Final = "64Mi"
GRACE_SECONDS: Final = 30


def name(cluster: RocketCluster) -> str:
    """The ConfigMap, Deployment, Service and Ingress: ``<cluster>-console``."""
    return f"{cluster.name}-console"


def enabled(cluster: RocketCluster) -> bool:
    return cluster.spec.console.enabled


def broker_endpoints(cluster: RocketCluster) -> list[ConsoleBroker]:
    """Every broker replica's admin API, by its pod's name under the group's headless
    Service (stable across restarts; https with TLS on)."""
    ns = cluster.metadata.namespace
    scheme = "https" if tls.enabled(cluster) else "http"
    out = []
    for group in group_names(cluster):
        headless = kube.headless_service_name(group)
        for pod in pod_names(group, cluster.spec.brokers.replicas):
            host = kube.pod_host(pod, headless, ns)
            out.append(
                ConsoleBroker(name=pod, group=group, admin=f"{scheme}://{host}:{ADMIN_PORT}")
            )
    return out


def _auth(cluster: RocketCluster) -> ConsoleAuth:
    if not auth.enabled(cluster):
        return ConsoleAuth()
    return ConsoleAuth(
        enabled=True,
        admin_token_file=Path(auth.TOKEN_DIR) / ADMIN_TOKEN_KEY,
        users_file=Path(auth.USERS_DIR) / USERS_FILE_KEY,
        session_key_file=Path(SESSION_DIR) / auth.SESSION_KEY,
    )


def config(cluster: RocketCluster) -> ConsoleConfig:
    """``console.json``: what the console reads at start."""
    return ConsoleConfig(
        cluster=cluster.name,
        controllers=admin_urls(cluster),
        brokers=broker_endpoints(cluster),
        ca_file=Path(tls.TLS_DIR) / tls.CA_KEY if tls.enabled(cluster) else None,
        auth=_auth(cluster),
        reports_dir=Path(REPORTS_DIR) if cluster.spec.health_reports is not None else None,
        audit_log=Path(AUDIT_LOG),
    )


def config_map(cluster: RocketCluster) -> K8sObject:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(cluster, name(cluster), COMPONENT),
        "data": {CONFIG_FILE: config(cluster).model_dump_json(by_alias=True, indent=2)},
    }


def _volumes(cluster: RocketCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, container mounts): config, scratch and audit always; the CA, the
    auth Secrets and the reports as the spec has them."""
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": name(cluster)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        {"name": "audit", "emptyDir": {"sizeLimit": AUDIT_SIZE}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": kube.CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "audit", "mountPath": AUDIT_DIR},
    ]
    if tls.enabled(cluster):  # ca.crt alone: the console presents no certificate
        secret = {"secretName": tls.secret_name(cluster), "items": [tls.ca_item()]}
        volumes.append({"name": tls.VOLUME, "secret": secret})
        mounts.append({"name": tls.VOLUME, "mountPath": tls.TLS_DIR, "readOnly": True})
    auth_volumes, auth_mounts = auth.volumes(cluster, users=True)
    volumes += auth_volumes
    mounts += auth_mounts
    if auth.enabled(cluster):
        secret = {"secretName": auth.console_session_secret_name(cluster)}
        volumes.append({"name": SESSION_VOLUME, "secret": secret})
        mounts.append({"name": SESSION_VOLUME, "mountPath": SESSION_DIR, "readOnly": True})
    if cluster.spec.health_reports is not None:
        # Read-only on both sides: the console never writes the reports. The claim is
        # usually ReadWriteOnce (see the module's docstring).
        claim = {"claimName": claim_name(cluster), "readOnly": True}
        volumes.append({"name": "reports", "persistentVolumeClaim": claim})
        mounts.append({"name": "reports", "mountPath": REPORTS_DIR, "readOnly": True})
    return volumes, mounts


def _container(cluster: RocketCluster, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    # Readiness is what the Service and a rolling update wait for; liveness only
    # restarts a process that stopped answering (a page whose endpoints are down is
    # still served: the console says so).
    return pods.web_container(
        "console",
        cluster.spec.console_image(),
        cluster.spec.image_pull_policy.value,
        ["rocketcluster-console", "--config", CONFIG_PATH, "--listen", f"0.0.0.0:{CONSOLE_PORT}"],
        (PORT_NAME, CONSOLE_PORT),
        mounts,
        cluster.spec.console.resources,
    )


def deployment(cluster: RocketCluster) -> K8sObject:
    selector = selector_labels(cluster, COMPONENT)
    volumes, mounts = _volumes(cluster)
    # The console calls no Kubernetes API: no token in the pod.
    spec = pods.tokenless_pod_spec(
        cluster.spec.placement,
        _container(cluster, mounts),
        volumes,
        GRACE_SECONDS,
        spread_over=selector,
    )
    settings = config(cluster).model_dump(mode="json", by_alias=True)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(cluster, name(cluster), COMPONENT),
        "spec": {
            "replicas": cluster.spec.console.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": {**selector, kube.LABEL_PART_OF: "rocketcluster"},
                    # The config file is part of the hash: a new console.json rolls it.
                    "annotations": {kube.ANNOTATION_POD_HASH: pod_hash(spec, settings)},
                },
                "spec": spec,
            },
        },
    }


def service(cluster: RocketCluster) -> K8sObject:
    spec = cluster.spec.console.service
    meta = metadata(cluster, name(cluster), COMPONENT, annotations=dict(spec.annotations))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": spec.type.value,
            "selector": selector_labels(cluster, COMPONENT),
            "ports": [
                {"name": PORT_NAME, "port": spec.port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


def ingress(cluster: RocketCluster) -> K8sObject | None:
    spec = cluster.spec.console.ingress
    if not spec.enabled:
        return None
    if not spec.host:  # the model refuses this; an Ingress without a host is never made
        raise ValueError(f"{cluster.name}: spec.console.ingress.enabled needs ingress.host")
    backend = {"service": {"name": name(cluster), "port": {"name": PORT_NAME}}}
    body: dict[str, Any] = {
        "rules": [
            {
                "host": spec.host,
                "http": {"paths": [{"path": spec.path, "pathType": "Prefix", "backend": backend}]},
            }
        ]
    }
    if spec.class_name:
        body = {"ingressClassName": spec.class_name, **body}
    if spec.tls_secret_name:
        body["tls"] = [{"hosts": [spec.host], "secretName": spec.tls_secret_name}]
    meta = metadata(cluster, name(cluster), COMPONENT, annotations=dict(spec.annotations))
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": body}


def render(cluster: RocketCluster) -> list[K8sObject]:
    """Nothing unless ``spec.console.enabled``; else its ConfigMap, Deployment, Service
    and (with ``ingress.enabled``) Ingress."""
    if not enabled(cluster):
        return []
    objects = [config_map(cluster), deployment(cluster), service(cluster)]
    found = ingress(cluster)
    if found is not None:
        objects.append(found)
    return objects

"""Controller members: one Deployment (Recreate: a member never runs twice on its
volume), one PVC and one Service each — so every member keeps a stable address and
its Raft log across restarts and node moves — and one ConfigMap with every member's
config file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT, CONTROLLER_PORT
from rocketcluster.api.cluster import ClaimRetention, RocketCluster
from rocketcluster.api.controller_config import ControllerMember, ControllerProcessConfig
from rocketcluster.api.process_settings import controller_settings
from rocketcluster.operator.render import auth, pods, tls
from rocketcluster.operator.render.hashing import pod_hash
from rocketcluster.operator.render.meta import (
    K8sObject,
    metadata,
    selector_labels,
    service_ports,
    tokenless_service_account,
)

COMPONENT = kube.COMPONENT_CONTROLLER
PORTS = {"raft": CONTROLLER_PORT, "admin": ADMIN_PORT}


def service_account_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-controller"


def member_names(cluster: RocketCluster) -> list[str]:
    return [
        kube.controller_member_name(cluster.name, i)
        for i in range(cluster.spec.controller.replicas)
    ]


def member_addresses(cluster: RocketCluster) -> list[str]:
    """Each member's Raft endpoint, through its Service (stable across restarts)."""
    ns = cluster.metadata.namespace
    return [f"{kube.service_host(m, ns)}:{CONTROLLER_PORT}" for m in member_names(cluster)]


def admin_urls(cluster: RocketCluster) -> list[str]:
    """Each member's admin endpoint, through its Service (https with TLS on): what the
    health report jobs and the console read the cluster from (any member serves the
    replicated state)."""
    ns = cluster.metadata.namespace
    scheme = "https" if tls.enabled(cluster) else "http"
    return [f"{scheme}://{kube.service_host(m, ns)}:{ADMIN_PORT}" for m in member_names(cluster)]


def process_config(cluster: RocketCluster, index: int) -> ControllerProcessConfig:
    ns = cluster.metadata.namespace
    members = [
        ControllerMember(
            id=i + 1,
            raft_address=f"{kube.service_host(name, ns)}:{CONTROLLER_PORT}",
            admin_address=f"{kube.service_host(name, ns)}:{ADMIN_PORT}",
        )
        for i, name in enumerate(member_names(cluster))
    ]
    return ControllerProcessConfig.model_validate(
        {
            **controller_settings(cluster),
            "node_id": index + 1,
            "members": members,
            "data_dir": Path(kube.DATA_DIR),
            "bind_host": "0.0.0.0",
            "tls": tls.files(cluster),
            "auth": auth.process_auth(cluster, users=False),
        }
    )


def config_map(cluster: RocketCluster) -> K8sObject:
    data = {
        f"{name}.json": process_config(cluster, i).model_dump_json(by_alias=True, indent=2)
        for i, name in enumerate(member_names(cluster))
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(cluster, kube.controller_config_name(cluster.name), COMPONENT),
        "data": data,
    }


def member_selector(cluster: RocketCluster, name: str) -> dict[str, str]:
    return selector_labels(cluster, COMPONENT, **{kube.LABEL_MEMBER: name})


def claim(cluster: RocketCluster, name: str) -> K8sObject:
    """The member's volume; owned by the RocketCluster (deleted with it) only when the
    manifest says ``whenDeleted: Delete``."""
    storage = cluster.spec.controller.storage
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    owned = storage.when_deleted is ClaimRetention.DELETE
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(
            cluster,
            f"{name}-data",
            COMPONENT,
            owned=owned,
            extra_labels={kube.LABEL_MEMBER: name},
        ),
        "spec": spec,
    }


def service(cluster: RocketCluster, name: str) -> K8sObject:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, name, COMPONENT, extra_labels={kube.LABEL_MEMBER: name}),
        "spec": {
            "type": "ClusterIP",
            # Members must reach each other before any is ready (ready = a leader known).
            "publishNotReadyAddresses": True,
            "selector": member_selector(cluster, name),
            "ports": service_ports(PORTS),
        },
    }


def deployment(cluster: RocketCluster, index: int) -> K8sObject:
    name = member_names(cluster)[index]
    selector = member_selector(cluster, name)
    config_path = f"{kube.CONFIG_DIR}/{name}.json"
    spec = pods.pod_spec(
        cluster,
        pods.container(
            cluster,
            "controller",
            ["rocketcluster-controller", "--config", config_path],
            PORTS,
            cluster.spec.controller.resources,
            cluster.spec.controller_image(),
        ),
        service_account=service_account_name(cluster),
        automount_token=False,
        selector=selector_labels(cluster, COMPONENT),
        grace_seconds=30,
        data_volume={"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-data"}},
        config_map=kube.controller_config_name(cluster.name),
    )
    tls.add_to_pod(cluster, spec)
    auth_volumes, auth_mounts = auth.volumes(cluster, users=False)
    spec["volumes"] += auth_volumes
    spec["containers"][0]["volumeMounts"] += auth_mounts
    settings = process_config(cluster, index).model_dump(mode="json", by_alias=True)
    annotations = {
        kube.ANNOTATION_POD_HASH: pod_hash(spec, settings),
        **pods.scrape_annotations(https=tls.enabled(cluster)),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(cluster, name, COMPONENT, extra_labels={kube.LABEL_MEMBER: name}),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": {**selector, **_pod_labels(cluster)},
                    "annotations": annotations,
                },
                "spec": spec,
            },
        },
    }


def _pod_labels(cluster: RocketCluster) -> dict[str, str]:
    return {kube.LABEL_PART_OF: "rocketcluster"}


def service_account(cluster: RocketCluster) -> K8sObject:
    """Controllers never call the Kubernetes API: no token is mounted."""
    return tokenless_service_account(cluster, service_account_name(cluster), COMPONENT)


def disruption_budget(cluster: RocketCluster) -> K8sObject:
    """One member at a time: a voluntary eviction never costs the Raft quorum."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(cluster, f"{cluster.name}-controller", COMPONENT),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(cluster, COMPONENT)},
        },
    }


def render(cluster: RocketCluster) -> list[K8sObject]:
    """Every object of the controller members (none for a standalone cluster)."""
    names = member_names(cluster)
    if not names:
        return []
    objects: list[K8sObject] = [service_account(cluster), config_map(cluster)]
    objects += [claim(cluster, name) for name in names]
    objects += [service(cluster, name) for name in names]
    objects += [deployment(cluster, i) for i in range(len(names))]
    objects.append(disruption_budget(cluster))
    return objects

"""Labels, selectors and owner references shared by every rendered object."""

from __future__ import annotations

from typing import Any

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster

K8sObject = dict[str, Any]


def selector_labels(cluster: RocketCluster, component: str, **extra: str) -> dict[str, str]:
    """The labels a workload selects its pods by: never the role label, which the
    brokers change on their own pods (a pod must never fall out of its StatefulSet)."""
    return {
        kube.LABEL_NAME: "rocketcluster",
        kube.LABEL_INSTANCE: cluster.name,
        kube.LABEL_COMPONENT: component,
        kube.LABEL_CLUSTER: cluster.name,
        **extra,
    }


def labels(cluster: RocketCluster, component: str, **extra: str) -> dict[str, str]:
    return {
        **selector_labels(cluster, component, **extra),
        kube.LABEL_MANAGED_BY: kube.MANAGER,
        kube.LABEL_PART_OF: "rocketcluster",
        kube.LABEL_VERSION: image_tag(cluster.spec.image),
    }


def component_selector(cluster: RocketCluster, component: str) -> dict[str, str]:
    """The labels every object of one optional part of ``cluster`` (monitoring, health
    reports) carries, and only they: what the reconciler lists to find the objects a
    spec change no longer asks for."""
    return {
        kube.LABEL_NAME: "rocketcluster",
        kube.LABEL_INSTANCE: cluster.name,
        kube.LABEL_COMPONENT: component,
        kube.LABEL_MANAGED_BY: kube.MANAGER,
    }


def image_tag(image: str) -> str:
    """The tag of an image reference, as a label value (``latest`` when none)."""
    name, _, digest = image.partition("@")
    if digest:
        return digest.partition(":")[2][:63] or "unknown"
    last = name.rsplit("/", 1)[-1]
    return last.partition(":")[2][:63] or "latest"


def owner_reference(cluster: RocketCluster) -> dict[str, Any] | None:
    """The RocketCluster as owner (garbage collection deletes what it owns), when its
    uid is known — not for ``rocketctl render`` of a file."""
    uid = cluster.metadata.uid
    if not uid:
        return None
    return {
        "apiVersion": kube.API_VERSION,
        "kind": "RocketCluster",
        "name": cluster.name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(
    cluster: RocketCluster,
    name: str,
    component: str,
    *,
    owned: bool = True,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": cluster.metadata.namespace,
        "labels": labels(cluster, component, **(extra_labels or {})),
    }
    if annotations:
        meta["annotations"] = annotations
    owner = owner_reference(cluster) if owned else None
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def service_ports(ports: dict[str, int]) -> list[dict[str, Any]]:
    """Service ports named like the container ports they target."""
    return [
        {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
        for name, port in ports.items()
    ]


def tokenless_service_account(cluster: RocketCluster, name: str, component: str) -> K8sObject:
    """A ServiceAccount that mounts no token by default: a pod that calls the API says
    so itself (automountServiceAccountToken on the pod), the others never get one."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(cluster, name, component),
        "automountServiceAccountToken": False,
    }

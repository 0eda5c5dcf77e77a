"""Every object of a RocketCluster, in the order they are applied: identities and
configuration before the workloads that use them, the health report CronJob after
the controllers it reads, the console's Ingress after its Service, monitoring last
(its kinds may be missing from a cluster without the Prometheus operator)."""

from __future__ import annotations

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.operator.render import (
    brokers,
    console,
    controllers,
    health_reports,
    monitoring,
)
from rocketcluster.operator.render.meta import K8sObject

APPLY_ORDER = (
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Service",
    "Ingress",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
    "PodMonitor",
    "PrometheusRule",
)


def render_cluster(cluster: RocketCluster) -> list[K8sObject]:
    objects = (
        controllers.render(cluster)
        + brokers.render(cluster)
        + health_reports.render(cluster)
        + console.render(cluster)
        + monitoring.render(cluster)
    )
    return sorted(objects, key=lambda o: APPLY_ORDER.index(o["kind"]))

"""Every object of a RocketCluster, in the order they are applied: identities and
configuration before the workloads that use them, the health report CronJob after
the controllers it reads, the console's Ingress after its Service, monitoring last
(its kinds may be missing from a cluster without the Prometheus operator)."""

from __future__ import annotations

from dataclasses import dataclass

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.operator.orchestrate.compat import Gate
from rocketcluster.operator.render import (
    brokers,
    canary,
    console,
    controllers,
    health_reports,
    monitoring,
    network,
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
    "NetworkPolicy",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "ScheduledSparkApplication",
    "PodDisruptionBudget",
    "PodMonitor",
    "PrometheusRule",
)


@dataclass(frozen=True)
class RenderContext:
    """What the operator knows beside the spec. Its defaults render from the spec
    alone (``rocketctl render``, the snapshots)."""

    # The feature gate (orchestrate/compat.py): None renders what the spec says.
    features: Gate | None = None


def render_cluster(
    cluster: RocketCluster, context: RenderContext = RenderContext()
) -> list[K8sObject]:
    objects = (
        controllers.render(cluster)
        + brokers.render(cluster, context.features)
        + health_reports.render(cluster)
        + console.render(cluster)
        + canary.render(cluster)
        + monitoring.render(cluster)
        + network.render(cluster)
    )
    return sorted(objects, key=lambda o: APPLY_ORDER.index(o["kind"]))

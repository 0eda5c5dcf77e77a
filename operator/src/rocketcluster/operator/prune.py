"""Removing what a spec switch no longer asks for. Monitoring (``spec.monitoring``),
the health reports (``spec.healthReports``), the console (``spec.console``), the
canary (``spec.canary``) and the NetworkPolicies (``spec.networkPolicies``) are
parts of a cluster that come and go with the spec: their objects carry one component
label each, and those that exist but are no longer rendered are deleted. Server-side
apply only ever adds and changes; this is the other half."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.operator.kube.client import KubeApiError, KubeClient
from rocketcluster.operator.render import canary, console, health_reports, monitoring, network
from rocketcluster.operator.render.meta import component_selector

ObjectKey = tuple[str, str, str]  # (apiVersion, kind, name)


@dataclass(frozen=True)
class Switchable:
    """One optional part of a cluster: its component label, the kinds to list for
    stale objects, the event reason when one is removed, and whether a kind may be
    missing from the API (an optional operator's CRDs)."""

    component: str
    kinds: tuple[tuple[str, str], ...]
    removed_reason: str
    optional_api: str | None = None  # an apiVersion whose absence (404/403) is no error


MONITORING = Switchable(
    monitoring.COMPONENT, monitoring.KINDS, "MonitoringRemoved", monitoring.MONITORING_API
)
HEALTH_REPORTS = Switchable(
    health_reports.COMPONENT,
    health_reports.KINDS,
    "HealthReportRemoved",
    health_reports.SPARK_OPERATOR_API,
)
CONSOLE = Switchable(console.COMPONENT, console.KINDS, "ConsoleRemoved")
NETWORK_POLICIES = Switchable(network.COMPONENT, network.KINDS, "NetworkPoliciesRemoved")
CANARY = Switchable(canary.COMPONENT, canary.KINDS, "CanaryRemoved")
SWITCHABLE = (MONITORING, HEALTH_REPORTS, CONSOLE, NETWORK_POLICIES, CANARY)


def object_key(obj: dict[str, Any]) -> ObjectKey:
    return (obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


def belongs(obj: dict[str, Any], part: Switchable) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return labels.get(kube.LABEL_COMPONENT) == part.component


def stale(
    live: Iterable[dict[str, Any]], rendered: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Objects that exist but are no longer rendered (``live`` already selected by the
    part's component labels)."""
    wanted = {object_key(o) for o in rendered}
    return [o for o in live if object_key(o) not in wanted]


def unavailable(part: Switchable, api_version: str, exc: KubeApiError) -> bool:
    """A kind of an optional API the server does not serve (404) or let us use (403)."""
    return api_version == part.optional_api and exc.status in (403, 404)


async def prune(
    client: KubeClient, cluster: RocketCluster, part: Switchable, wanted: list[dict[str, Any]]
) -> list[ObjectKey]:
    """Delete the objects of ``part`` of ``cluster`` that are not in ``wanted``; kinds
    of an optional API the server does not serve or let us list are skipped. Returns
    what was deleted."""
    ns = cluster.metadata.namespace
    selector = component_selector(cluster, part.component)
    removed = []
    for api_version, kind in part.kinds:
        try:
            live = await client.list(api_version, kind, ns, selector)
        except KubeApiError as exc:
            if unavailable(part, api_version, exc):
                continue
            raise
        for obj in stale(live, wanted):
            if await client.delete(api_version, kind, ns, obj["metadata"]["name"]):
                removed.append(object_key(obj))
    return removed

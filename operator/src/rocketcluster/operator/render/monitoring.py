"""Monitoring objects of a RocketCluster, each behind its ``spec.monitoring`` flag:

- ``serviceMonitor`` → one **PodMonitor** for the cluster's broker and controller pods
  (port ``admin``, 8080, ``/metrics``). A PodMonitor rather than a ServiceMonitor: the
  brokers' client Service selects only the master and serves only the client port,
  so a ServiceMonitor would need the per-group headless Services and the per-member
  controller Services; pods are selected by labels they already carry, one object
  covers both kinds, and a pod that is not ready yet (a slave catching up) is scraped
  too. Its relabelings produce the scrape convention the alerts rely on (job
  ``rocketcluster-broker``/``rocketcluster-controller``, target labels ``cluster``
  and ``group``; see ``monitoring.conventions``). With ``spec.canary`` on, a
  second endpoint scrapes the canary's pod (port ``canary-http``, job
  ``rocketcluster-canary``);
- ``prometheusRule`` → one **PrometheusRule** with every alert scoped to
  ``cluster="<name>"``;
- ``grafanaDashboards`` → one **ConfigMap** per dashboard, labelled
  ``grafana_dashboard: "1"`` for the Grafana sidecar, with its own uid and title and
  the cluster variable defaulting to this cluster (two clusters' dashboards never
  overwrite each other).

Every object carries the component label ``monitoring``: the reconciler deletes those
no longer rendered when a flag goes off (:mod:`rocketcluster.operator.prune`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Final

from rocketcluster.api import kube
from rocketcluster.api.auth import ADMIN_TOKEN_KEY
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.operator.monitoring.alerts import rule_groups
from rocketcluster.operator.monitoring.conventions import (
    CANARY_JOB,
    DASHBOARD_TAG,
    GRAFANA_DASHBOARD_LABEL,
    JOB_PREFIX,
)
from rocketcluster.operator.monitoring.packaged import dashboards
from rocketcluster.operator.render import auth, canary, tls
from rocketcluster.operator.render.meta import K8sObject, component_selector, metadata

COMPONENT: Final = "monitoring"
MONITORING_API: Final = "monitoring.coreos.com/v1"
# What the reconciler lists to find objects a flag no longer asks for.
KINDS: Final = (
    ("v1", "ConfigMap"),
    (MONITORING_API, "PodMonitor"),
    (MONITORING_API, "PrometheusRule"),
)
METRICS_PORT: Final = "admin"  # the container port of ADMIN_PORT (8080): /metrics
SCRAPE_INTERVAL: Final = "30s"
GRAFANA_UID_MAX: Final = 40


def _meta_label(label: str) -> str:
    """The Kubernetes discovery meta label of pod label ``label``."""
    clean = "".join(c if c.isalnum() else "_" for c in label)
    return f"__meta_kubernetes_pod_label_{clean}"


def owner_selector(cluster: RocketCluster) -> dict[str, str]:
    """The labels every monitoring object of ``cluster`` carries (and only they)."""
    return component_selector(cluster, COMPONENT)


def pod_monitor(cluster: RocketCluster) -> K8sObject:
    monitor = _pod_monitor(cluster)
    if auth.enabled(cluster):  # /metrics wants the admin token (render/auth.py)
        monitor["spec"]["podMetricsEndpoints"][0]["bearerTokenSecret"] = {
            "name": auth.token_secret(cluster),
            "key": ADMIN_TOKEN_KEY,
        }
    if canary.enabled(cluster):
        spec = monitor["spec"]
        spec["selector"]["matchExpressions"][0]["values"].append(canary.COMPONENT)
        spec["podMetricsEndpoints"].append(_canary_endpoint())
    return monitor


def _canary_endpoint() -> dict[str, Any]:
    """The canary's pod (spec.canary): plain HTTP on its own port, no token (it
    exports probe results, nothing of the cluster's data); its series carry the
    cluster and the broker group they probe (honorLabels)."""
    return {
        "port": canary.PORT_NAME,
        "path": "/metrics",
        "interval": SCRAPE_INTERVAL,
        "honorLabels": True,
        "relabelings": [
            {"targetLabel": "job", "replacement": CANARY_JOB},
            {
                "sourceLabels": [_meta_label(kube.LABEL_CLUSTER)],
                "regex": "(.+)",
                "targetLabel": "cluster",
            },
        ],
    }


def _pod_monitor(cluster: RocketCluster) -> K8sObject:
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": metadata(cluster, f"{cluster.name}-metrics", COMPONENT),
        "spec": {
            "selector": {
                "matchLabels": {
                    kube.LABEL_NAME: "rocketcluster",
                    kube.LABEL_INSTANCE: cluster.name,
                    kube.LABEL_CLUSTER: cluster.name,
                },
                "matchExpressions": [
                    {
                        "key": kube.LABEL_COMPONENT,
                        "operator": "In",
                        "values": [kube.COMPONENT_BROKER, kube.COMPONENT_CONTROLLER],
                    }
                ],
            },
            "namespaceSelector": {"matchNames": [cluster.metadata.namespace]},
            "podMetricsEndpoints": [
                {
                    "port": METRICS_PORT,
                    "path": "/metrics",
                    "interval": SCRAPE_INTERVAL,
                    "honorLabels": True,
                    **tls.scrape_endpoint(cluster),
                    "relabelings": [
                        {
                            "sourceLabels": [_meta_label(kube.LABEL_COMPONENT)],
                            "regex": f"({kube.COMPONENT_BROKER}|{kube.COMPONENT_CONTROLLER})",
                            "targetLabel": "job",
                            # rocketcluster-broker, rocketcluster-controller
                            "replacement": f"{JOB_PREFIX}$1",
                        },
                        {
                            "sourceLabels": [_meta_label(kube.LABEL_CLUSTER)],
                            "regex": "(.+)",
                            "targetLabel": "cluster",
                        },
                        {  # brokers only: a controller pod has no group label
                            "sourceLabels": [_meta_label(kube.LABEL_GROUP)],
                            "regex": "(.+)",
                            "targetLabel": "group",
                        },
                    ],
                }
            ],
        },
    }


def prometheus_rule(cluster: RocketCluster) -> K8sObject:
    groups = rule_groups({"cluster": cluster.name}, name=f"rocketcluster-{cluster.name}")
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": metadata(cluster, f"{cluster.name}-alerts", COMPONENT),
        "spec": {"groups": groups},
    }


def _short(uid: str) -> str:
    return uid.removeprefix(f"{DASHBOARD_TAG}-")


def cluster_dashboard(board: dict[str, Any], cluster: RocketCluster) -> dict[str, Any]:
    """``board`` for this cluster alone: its own uid, title and link tag, the cluster
    variable set to it."""
    ns, name = cluster.metadata.namespace, cluster.name
    out = copy.deepcopy(board)
    suffix = hashlib.sha256(f"{ns}/{name}".encode()).hexdigest()[:10]
    out["uid"] = f"{board['uid'][: GRAFANA_UID_MAX - len(suffix) - 1]}-{suffix}"
    out["title"] = f"{board['title']} ({ns}/{name})"
    tag = f"{DASHBOARD_TAG}:{ns}/{name}"
    out["tags"] = [*board.get("tags", []), tag]
    for link in out.get("links", []):
        link["tags"] = [tag]
    for variable in out.get("templating", {}).get("list", []):
        if variable.get("name") == "cluster":
            variable["current"] = {"selected": True, "text": name, "value": name}
    return out


def dashboard_config_maps(cluster: RocketCluster) -> list[K8sObject]:
    ns, name = cluster.metadata.namespace, cluster.name
    out = []
    for board in dashboards().values():
        short = _short(board["uid"])
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": metadata(
                    cluster,
                    f"{name}-dashboard-{short}",
                    COMPONENT,
                    extra_labels={GRAFANA_DASHBOARD_LABEL: "1"},
                ),
                # The sidecar writes every key of every such ConfigMap into one folder:
                # the key names the namespace and cluster so none overwrites another.
                "data": {
                    f"rocketcluster-{ns}-{name}-{short}.json": json.dumps(
                        cluster_dashboard(board, cluster), indent=2
                    )
                },
            }
        )
    return out


def render(cluster: RocketCluster) -> list[K8sObject]:
    flags = cluster.spec.monitoring
    objects: list[K8sObject] = []
    if flags.service_monitor:
        objects.append(pod_monitor(cluster))
    if flags.prometheus_rule:
        objects.append(prometheus_rule(cluster))
    if flags.grafana_dashboards:
        objects += dashboard_config_maps(cluster)
    return objects

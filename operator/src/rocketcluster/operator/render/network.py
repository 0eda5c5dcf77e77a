"""The NetworkPolicies of a RocketCluster (``spec.networkPolicies``, on by default).

Ingress only; every port numeric (named ports resolve per pod and say less). Who
talks to whom, from the code:

- clients → brokers' client port (8081); brokers → brokers' 8081 too: a slave or
  demoted master forwards to its group's master (broker/ha/forward.py) and a master
  passes receives to another group (messaging/cross_group.py); the canary (a client);
- slave → master's HA port (10912, broker/ha/slave.py) inside one group, and the
  controllers → a master's HA port: a switchover's phase 0, PrepareHandover
  (controller/handover.py, core.py ``_prepare_handover``);
- brokers → controllers' port (9878: registration, heartbeats, catalogue sync,
  api/client/controller.py); controllers → controllers' 9878 (Raft);
- the admin APIs and /metrics (8080) of brokers and controllers: the operator
  (observe.py, catalogue.py, switchovers), the console (console/upstream.py), the
  health reports (spark-jobs jobs/source.py: the controllers' history and the
  brokers' stats topic), Prometheus (the PodMonitor) and ``extraAdminPeers``.

Three kinds of policy, one component label (:data:`COMPONENT`):

1. ``<cluster>-brokers`` selects every broker: 8081 from ``clientNamespaces`` (unset:
   from everywhere; a list always also admits the cluster's brokers, its canary and
   the operator), 8080 from the admin peers. The HA port is left out: policies add
   up, so it is open only as far as 2. says.
2. ``<group>-replication`` per broker group: 10912 from the group's pods and the
   cluster's controllers.
3. ``<cluster>-controllers``: 9878 from controllers and brokers, 8080 from the admin
   peers.

Console, canary and health-report pods are not selected (they serve nobody in the
cluster). ``enabled: false`` renders nothing and the reconciler deletes what exists
(prune.py). Traffic from the node itself (kubelet probes) is always allowed, as
Kubernetes network plugins do.
"""

from __future__ import annotations

from typing import Any, Final

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT, CLIENT_PORT, CONTROLLER_PORT, HA_PORT
from rocketcluster.api.cluster import LabelSelector, NetworkPeer, RocketCluster
from rocketcluster.operator.render import console, health_reports
from rocketcluster.operator.render.brokers import group_names
from rocketcluster.operator.render.meta import K8sObject, metadata, selector_labels

COMPONENT: Final = "network-policies"
KINDS: Final = (("networking.k8s.io/v1", "NetworkPolicy"),)
API_VERSION: Final = "networking.k8s.io/v1"
# The canary's pods (spec.canary): clients of the client port like any other.
CANARY_COMPONENT: Final = "canary"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"


def brokers_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-brokers"


def controllers_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-controllers"


def replication_name(group: str) -> str:
    return f"{group}-replication"


def selector(sel: LabelSelector) -> dict[str, Any]:
    """A Kubernetes ``LabelSelector`` (empty parts left out; ``{}`` selects all)."""
    out: dict[str, Any] = {}
    if sel.match_labels:
        out["matchLabels"] = dict(sel.match_labels)
    if sel.match_expressions:
        out["matchExpressions"] = [
            {
                "key": r.key,
                "operator": r.operator,
                **({"values": list(r.values)} if r.values else {}),
            }
            for r in sel.match_expressions
        ]
    return out


def peer(p: NetworkPeer) -> dict[str, Any]:
    """A ``from`` entry: an unset podSelector beside a namespaceSelector means every
    pod of those namespaces; both unset would be no peer at all, so it admits the
    pods of the cluster's namespace."""
    out: dict[str, Any] = {}
    if p.namespace_selector is not None:
        out["namespaceSelector"] = selector(p.namespace_selector)
    if p.pod_selector is not None or not out:
        out["podSelector"] = selector(p.pod_selector or LabelSelector())
    return out


def _pods(cluster: RocketCluster, component: str, **extra: str) -> dict[str, Any]:
    """Pods of this cluster (its namespace) with one component label."""
    return {"podSelector": {"matchLabels": selector_labels(cluster, component, **extra)}}


def _ports(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def admin_peers(cluster: RocketCluster) -> list[dict[str, Any]]:
    """Who may use the admin API and /metrics (8080) of brokers and controllers."""
    spec = cluster.spec.network_policies
    return [
        peer(spec.operator),
        _pods(cluster, console.COMPONENT),
        _pods(cluster, health_reports.COMPONENT),
        peer(spec.prometheus),
        *(peer(p) for p in spec.extra_admin_peers),
    ]


def client_rule(cluster: RocketCluster) -> dict[str, Any]:
    """8081: from everywhere, or from the named namespaces plus the cluster's own
    brokers (forwarding, cross-group receives), its canary and the operator."""
    spec = cluster.spec.network_policies
    if spec.client_namespaces is None:
        return {"ports": _ports(CLIENT_PORT)}
    sources: list[dict[str, Any]] = []
    if spec.client_namespaces:
        sources.append(
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": NAMESPACE_NAME_LABEL,
                            "operator": "In",
                            "values": list(spec.client_namespaces),
                        }
                    ]
                }
            }
        )
    sources += [
        _pods(cluster, kube.COMPONENT_BROKER),
        _pods(cluster, CANARY_COMPONENT),
        peer(spec.operator),
    ]
    return {"ports": _ports(CLIENT_PORT), "from": sources}


def _policy(
    cluster: RocketCluster, name: str, pods: dict[str, str], ingress: list[dict[str, Any]]
) -> K8sObject:
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": metadata(cluster, name, COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": pods},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }


def render(cluster: RocketCluster) -> list[K8sObject]:
    if not cluster.spec.network_policies.enabled:
        return []
    brokers = _pods(cluster, kube.COMPONENT_BROKER)
    controllers = _pods(cluster, kube.COMPONENT_CONTROLLER)
    admin = {"ports": _ports(ADMIN_PORT), "from": admin_peers(cluster)}
    objects = [
        _policy(
            cluster,
            brokers_name(cluster),
            selector_labels(cluster, kube.COMPONENT_BROKER),
            [client_rule(cluster), admin],
        )
    ]
    for group in group_names(cluster):
        objects.append(
            _policy(
                cluster,
                replication_name(group),
                selector_labels(cluster, kube.COMPONENT_BROKER, **{kube.LABEL_GROUP: group}),
                [
                    {
                        "ports": _ports(HA_PORT),
                        "from": [
                            _pods(cluster, kube.COMPONENT_BROKER, **{kube.LABEL_GROUP: group}),
                            controllers,
                        ],
                    }
                ],
            )
        )
    if cluster.spec.controller.replicas:
        objects.append(
            _policy(
                cluster,
                controllers_name(cluster),
                selector_labels(cluster, kube.COMPONENT_CONTROLLER),
                [{"ports": _ports(CONTROLLER_PORT), "from": [controllers, brokers]}, admin],
            )
        )
    return objects

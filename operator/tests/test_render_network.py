"""NetworkPolicies (spec.networkPolicies): who may reach which port of which pod, every
option, valid Kubernetes (kubernetes-validate --strict) and a snapshot. The policies
are also judged by the realiser's engine (rocketcluster.e2e.kube.netpol) here, so the
rendered objects are checked for what they admit, not only for their text."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT, CLIENT_PORT, CONTROLLER_PORT, HA_PORT
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.e2e.kube import netpol
from rocketcluster.operator import prune
from rocketcluster.operator.render import network, render_cluster
from rocketcluster.operator.render.meta import labels
from rocketcluster.operator.render.output import to_yaml

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "snapshots" / "network-policies.yaml"
VERSIONS = ("1.27.0", "1.37.0")


def _cluster(**network_policies: Any) -> RocketCluster:
    data = load_manifest(REPO / "examples" / "cluster.yaml").model_dump(mode="json", by_alias=True)
    if network_policies:
        data["spec"]["networkPolicies"] = network_policies
    return RocketCluster.model_validate(data)


def _policies(cluster: RocketCluster) -> list[dict[str, Any]]:
    return [o for o in render_cluster(cluster) if o["kind"] == "NetworkPolicy"]


# --- a small world of pods to judge the rendered policies against ------------------------


def _ns(name: str, **extra: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {netpol.NAME_LABEL: name, **extra}}}


def _pod(ns: str, name: str, ip: str, lbl: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "labels": lbl},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"podIP": ip, "phase": "Running"},
    }


def _world(cluster: RocketCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ns = cluster.metadata.namespace
    groups = [f"{cluster.name}-broker-{i}" for i in range(cluster.spec.brokers.groups)]
    pods = [
        _pod(ns, "b0", "10.0.0.1", labels(cluster, "broker", **{kube.LABEL_GROUP: groups[0]})),
        _pod(ns, "b0s", "10.0.0.2", labels(cluster, "broker", **{kube.LABEL_GROUP: groups[0]})),
        _pod(ns, "b1", "10.0.0.3", labels(cluster, "broker", **{kube.LABEL_GROUP: groups[1]})),
        _pod(ns, "ctl", "10.0.0.4", labels(cluster, "controller")),
        _pod(ns, "console", "10.0.0.5", labels(cluster, "console")),
        _pod(ns, "report", "10.0.0.6", labels(cluster, "health-report")),
        _pod(ns, "canary", "10.0.0.7", labels(cluster, "canary")),
        _pod(
            "rocketcluster-system",
            "operator",
            "10.0.1.1",
            {
                "app.kubernetes.io/name": "rocketcluster-operator",
                "app.kubernetes.io/instance": "rc",
                "app.kubernetes.io/component": "operator",
            },
        ),
        _pod("monitoring", "prometheus", "10.0.2.1", {"app.kubernetes.io/name": "prometheus"}),
        _pod("default", "stranger", "10.0.3.1", {"app": "curl"}),
        _pod("apps", "client", "10.0.4.1", {"app": "shop"}),
        _pod(ns, "neighbour", "10.0.0.9", {"app": "other"}),
    ]
    namespaces = [
        _ns(n) for n in {ns, "rocketcluster-system", "monitoring", "default", "apps", "elsewhere"}
    ]
    return pods, namespaces


def _reach(cluster: RocketCluster) -> set[tuple[str, str, int]]:
    """(source pod, destination pod, port) for every pair the policies admit, over
    the cluster's own ports."""
    pods, namespaces = _world(cluster)
    rules = netpol.ruleset(_policies(cluster), pods, namespaces)
    by_ip = {p["status"]["podIP"]: p["metadata"]["name"] for p in pods}
    out = set()
    for src in pods:
        for dst in pods:
            for port in (CLIENT_PORT, ADMIN_PORT, HA_PORT, CONTROLLER_PORT):
                if rules.allows(src["status"]["podIP"], dst["status"]["podIP"], port):
                    out.add((by_ip[src["status"]["podIP"]], by_ip[dst["status"]["podIP"]], port))
    return out


def _sources(reach: set[tuple[str, str, int]], dst: str, port: int) -> set[str]:
    """Who reaches ``dst`` on ``port``, itself left out (a pod always reaches itself)."""
    assert (dst, dst, port) in reach
    return {s for s, d, p in reach if d == dst and p == port and s != dst}


EVERYONE = {
    "b0",
    "b0s",
    "b1",
    "ctl",
    "console",
    "report",
    "canary",
    "operator",
    "prometheus",
    "stranger",
    "client",
    "neighbour",
}
ADMIN_PEERS = {"operator", "console", "report", "prometheus"}


def test_the_defaults_admit_exactly_the_legitimate_paths() -> None:
    reach = _reach(_cluster())
    # client port: everyone (clientNamespaces unset)
    for broker in ("b0", "b0s", "b1"):
        assert _sources(reach, broker, CLIENT_PORT) == EVERYONE - {broker}
        assert _sources(reach, broker, ADMIN_PORT) == ADMIN_PEERS
    # replication: only the group's own pods and the controllers (PrepareHandover)
    assert _sources(reach, "b0", HA_PORT) == {"b0s", "ctl"}
    assert _sources(reach, "b1", HA_PORT) == {"ctl"}
    # controllers: brokers and controllers on 9878, the admin peers on 8080
    assert _sources(reach, "ctl", CONTROLLER_PORT) == {"b0", "b0s", "b1"}
    assert _sources(reach, "ctl", ADMIN_PORT) == ADMIN_PEERS
    # unselected pods stay open
    assert _sources(reach, "console", ADMIN_PORT) == EVERYONE - {"console"}


def test_client_namespaces_restrict_the_client_port_but_keep_the_clusters_own() -> None:
    reach = _reach(_cluster(clientNamespaces=["apps"]))
    assert _sources(reach, "b0", CLIENT_PORT) == {"client", "b0s", "b1", "canary", "operator"}
    none = _reach(_cluster(clientNamespaces=[]))
    assert _sources(none, "b1", CLIENT_PORT) == {"b0", "b0s", "canary", "operator"}


def test_the_admin_peers_are_configurable() -> None:
    cluster = _cluster(
        operator={
            "namespaceSelector": {"matchLabels": {netpol.NAME_LABEL: "default"}},
            "podSelector": {"matchLabels": {"app": "curl"}},
        },
        prometheus={"podSelector": {"matchLabels": {"app": "other"}}},
        extraAdminPeers=[
            {"namespaceSelector": {"matchLabels": {netpol.NAME_LABEL: "apps"}}},
        ],
    )
    reach = _reach(cluster)
    # the operator's selector now names the stranger; prometheus (no namespace
    # selector) means pods of the cluster's namespace; the extra peer a whole namespace
    assert _sources(reach, "b0", ADMIN_PORT) == {
        "stranger",
        "neighbour",
        "client",
        "console",
        "report",
    }
    assert _sources(reach, "ctl", ADMIN_PORT) == _sources(reach, "b0", ADMIN_PORT)


def test_match_expressions_are_rendered() -> None:
    cluster = _cluster(
        prometheus={
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": netpol.NAME_LABEL, "operator": "In", "values": ["monitoring"]}
                ]
            },
            "podSelector": {
                "matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]
            },
        }
    )
    reach = _reach(cluster)
    assert "prometheus" in _sources(reach, "b0", ADMIN_PORT)
    brokers = next(p for p in _policies(cluster) if p["metadata"]["name"] == "prod-brokers")
    admin = brokers["spec"]["ingress"][1]["from"]
    assert {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": netpol.NAME_LABEL, "operator": "In", "values": ["monitoring"]}
            ]
        },
        "podSelector": {
            "matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "Exists"}]
        },
    } in admin


def test_disabled_renders_none_and_the_reconciler_prunes_them() -> None:
    on = _policies(_cluster())
    assert {p["metadata"]["name"] for p in on} == {
        "prod-brokers",
        "prod-controllers",
        "prod-broker-0-replication",
        "prod-broker-1-replication",
    }
    assert all(prune.belongs(p, prune.NETWORK_POLICIES) for p in on)
    assert prune.NETWORK_POLICIES in prune.SWITCHABLE
    assert _policies(_cluster(enabled=False)) == []
    assert prune.stale(on, []) == on


def test_a_cluster_without_controllers_gets_no_controller_policy() -> None:
    data = load_manifest(REPO / "examples" / "standalone.yaml").model_dump(
        mode="json", by_alias=True
    )
    names = {
        p["metadata"]["name"]
        for p in render_cluster(RocketCluster.model_validate(data))
        if p["kind"] == "NetworkPolicy"
    }
    assert not any(n.endswith("-controllers") for n in names)
    assert any(n.endswith("-brokers") for n in names)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_policy_is_valid_kubernetes(version: str) -> None:
    for cluster in (
        _cluster(),
        _cluster(
            clientNamespaces=["apps", "web"],
            extraAdminPeers=[{"podSelector": {"matchLabels": {"a": "b"}}}],
        ),
    ):
        for policy in _policies(cluster):
            kubernetes_validate.validate(policy, version, strict=True)
    bad = _policies(_cluster())[0]
    bad["spec"]["ingress"][0]["prots"] = bad["spec"]["ingress"][0].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_render_matches_snapshot() -> None:
    cluster = _cluster(
        clientNamespaces=["apps"],
        extraAdminPeers=[{"namespaceSelector": {"matchLabels": {"team": "sre"}}}],
    )
    text = to_yaml(_policies(cluster))
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text(), (
        "rendering of the NetworkPolicies changed: review, then "
        f"UPDATE_SNAPSHOTS=1 pytest {__file__}"
    )


def test_policy_names_and_components() -> None:
    cluster = _cluster()
    assert network.brokers_name(cluster) == "prod-brokers"
    for policy in _policies(cluster):
        assert policy["metadata"]["labels"][kube.LABEL_COMPONENT] == network.COMPONENT
        assert policy["spec"]["policyTypes"] == ["Ingress"]

"""The chart's RBAC is exactly what the operator calls: every call allowed (in a Role
per watched namespace, or one ClusterRole), nothing else granted, every kind the
client knows decided, and everything the operator grants the brokers held by it."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from rocketcluster.e2e.chart import (
    REPO,
    WATCHED,
    Helm,
    Permission,
    allows,
    by_kind,
    granted,
    group_of,
    one,
    operand_objects,
    real_helm,
)
from rocketcluster.operator import prune
from rocketcluster.operator.kube.client import PLURALS

OPERATOR_SRC = REPO / "operator" / "src" / "rocketcluster" / "operator"


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return real_helm(tmp_path_factory)


@pytest.fixture(scope="session")
def cluster_wide(helm: Helm) -> list[dict[str, Any]]:
    return helm.template({})


@pytest.fixture(scope="session")
def namespaced(helm: Helm) -> list[dict[str, Any]]:
    return helm.template({"watchNamespaces": WATCHED})


# What the operator calls in the namespaces it manages, and why (file: call). The chart
# must grant exactly this, in a Role per watched namespace or one ClusterRole.
NAMESPACED_CALLS: dict[tuple[str, str], set[str]] = {
    # handlers.py: kopf lists and watches the kinds it handles and patches them (its
    # finalizer and annotations); catalogue.py: client.get of a topic's RocketCluster.
    ("rocketcluster.io", "rocketclusters"): {"list", "watch", "patch", "get"},
    ("rocketcluster.io", "rockettopics"): {"list", "watch", "patch"},
    ("rocketcluster.io", "rocketconsumergroups"): {"list", "watch", "patch"},
    # users.py also lists a cluster's RocketUsers (they go into its users Secret).
    ("rocketcluster.io", "rocketusers"): {"list", "watch", "patch"},
    # apply.py apply_status: reconcile.py (clusters), catalogue.py (topics, groups).
    ("rocketcluster.io", "rocketclusters/status"): {"patch"},
    ("rocketcluster.io", "rockettopics/status"): {"patch"},
    ("rocketcluster.io", "rocketconsumergroups/status"): {"patch"},
    ("rocketcluster.io", "rocketusers/status"): {"patch"},
    # users.py (security.auth): lists the cluster's auth Secrets (get: one not found
    # by its labels), applies them when missing and the users Secret when it changed;
    # trust.py (security.tls) reads ca.crt of spec.security.tls.secretName.
    ("", "secrets"): {"list", "get", "create", "patch"},
    # handlers.py kopf.event, and kopf's own handler events (core v1 events).
    ("", "events"): {"create"},
    # observe.py / catalogue.py list; reconcile.py _act deletes (roll) and
    # _clean_executors lists and deletes a failed health report run's executors; get
    # and patch are what render/brokers.py pod_label_rbac grants the brokers, watch,
    # create and deletecollection what render/health_reports.py DRIVER_RULES grants
    # the Spark driver (escalation rule).
    ("", "pods"): {"list", "delete", "get", "patch", "watch", "create", "deletecollection"},
    # Applied (apply.py: patch, and create in merge mode); deleted by _remove_group,
    # and the console's listed and deleted when spec.console goes (prune.py).
    ("", "services"): {"list", "create", "patch", "delete"},
    # Also monitoring and health report objects (prune.py): listed to find the stale
    # ones, which are deleted.
    ("", "configmaps"): {"list", "create", "patch", "delete"},
    ("batch", "cronjobs"): {"list", "create", "patch", "delete"},
    ("monitoring.coreos.com", "podmonitors"): {"list", "create", "patch", "delete"},
    ("monitoring.coreos.com", "prometheusrules"): {"list", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"create", "patch", "delete"},
    ("apps", "statefulsets"): {"list", "create", "patch", "delete"},
    # Applied; deployments also listed by observe.py, and the console's deleted when
    # spec.console goes (prune.py), as its Ingress.
    ("", "persistentvolumeclaims"): {"create", "patch"},
    # Also the health reports' Spark driver's account, pruned when its mode goes.
    ("", "serviceaccounts"): {"list", "create", "patch", "delete"},
    ("apps", "deployments"): {"list", "create", "patch", "delete"},
    ("networking.k8s.io", "ingresses"): {"list", "create", "patch", "delete"},
    # render/network.py (spec.networkPolicies): applied, listed and deleted when it is
    # switched off (prune.py).
    ("networking.k8s.io", "networkpolicies"): {"list", "create", "patch", "delete"},
    # The brokers' pod-label Role and the Spark driver's (pruned when its mode goes).
    ("rbac.authorization.k8s.io", "roles"): {"list", "create", "patch", "delete"},
    ("rbac.authorization.k8s.io", "rolebindings"): {"list", "create", "patch", "delete"},
    # healthReports.spark.mode sparkOperator (applied where served; pruned).
    ("sparkoperator.k8s.io", "scheduledsparkapplications"): {"list", "create", "patch", "delete"},
}
# Kinds the client knows (PLURALS) that no code calls today: no permission for them.
# The test below proves that nothing outside kube/client.py names them.
NOT_CALLED = {"ServiceMonitor"}
# kopf's observers, cluster-scoped (observation.py): CRDs always, namespaces only when
# it watches listed namespaces (it resolves them; cluster-wide it never lists them);
# observe.py Observer.cordoned lists Nodes (GET /api/v1/nodes, a drain's cordon).
DISCOVERY_CLUSTER_WIDE: set[Permission] = {
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("", "nodes", "list"),
}
DISCOVERY_NAMESPACED = DISCOVERY_CLUSTER_WIDE | {
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
}


LEADER_ELECTION_ROLE = "rc-rocketcluster-operator-leader-election"  # test_chart.py checks it


def _managed(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The Roles (or RoleBindings) for the namespaces the operator manages: all but
    the leader election's, in the release's namespace."""
    return [o for o in by_kind(objects, kind) if o["metadata"]["name"] != LEADER_ELECTION_ROLE]


def _calls() -> set[Permission]:
    return {(g, r, v) for (g, r), verbs in NAMESPACED_CALLS.items() for v in verbs}


def _bound(objects: list[dict[str, Any]], binding_kind: str, role: dict[str, Any]) -> None:
    """``role`` is bound to the operator's service account (in the release namespace)."""
    meta = role["metadata"]
    bindings = [
        b
        for b in by_kind(objects, binding_kind)
        if b["roleRef"]
        == {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": meta["name"]}
        and b["metadata"].get("namespace") == meta.get("namespace")
    ]
    assert len(bindings) == 1, f"{role['kind']} {meta['name']} is bound {len(bindings)} times"
    assert bindings[0]["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "rc-rocketcluster-operator",
            "namespace": "rocketcluster",
        }
    ]


def test_cluster_wide_rbac_is_exactly_what_the_operator_calls(
    cluster_wide: list[dict[str, Any]],
) -> None:
    objects = cluster_wide
    assert not _managed(objects, "Role")
    main = one(objects, "ClusterRole", "rc-rocketcluster-operator")
    discovery = one(objects, "ClusterRole", "rc-rocketcluster-operator-discovery")
    assert granted(main["rules"]) == _calls()
    assert granted(discovery["rules"]) == DISCOVERY_CLUSTER_WIDE
    for role in (main, discovery):
        _bound(objects, "ClusterRoleBinding", role)


def test_watch_namespace_rbac_is_a_role_in_each_namespace(
    namespaced: list[dict[str, Any]],
) -> None:
    objects = namespaced
    roles = _managed(objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == WATCHED
    for role in roles:
        assert granted(role["rules"]) == _calls()
        _bound(objects, "RoleBinding", role)
    (discovery,) = by_kind(objects, "ClusterRole")
    assert granted(discovery["rules"]) == DISCOVERY_NAMESPACED
    _bound(objects, "ClusterRoleBinding", discovery)


def test_watch_namespace_rbac_can_be_namespaced_only(helm: Helm) -> None:
    objects = helm.template({"watchNamespaces": WATCHED, "rbac": {"clusterDiscovery": False}})
    kinds = [o["kind"] for o in objects]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    assert len(_managed(objects, "Role")) == len(_managed(objects, "RoleBinding")) == 2


def _kind_resource(api_version: str, kind: str) -> tuple[str, str]:
    return group_of(api_version), PLURALS[api_version][kind]


def _string_constants() -> set[str]:
    """Every string literal in the operator's code outside the client's kind table."""
    found: set[str] = set()
    for path in OPERATOR_SRC.rglob("*.py"):
        if path == OPERATOR_SRC / "kube" / "client.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def test_every_kind_the_client_knows_has_rbac_or_no_caller() -> None:
    """Adding a kind to PLURALS fails here until its calls are written down above (and
    so granted by the chart, checked by the two tests before)."""
    constants = _string_constants()
    for api_version, kinds in PLURALS.items():
        for kind in kinds:
            if kind in NOT_CALLED:
                assert kind not in constants, (
                    f"the operator now uses {kind}: add its calls to NAMESPACED_CALLS "
                    "and its rule to charts/rocketcluster-operator/templates/_rbac.tpl"
                )
            else:
                assert _kind_resource(api_version, kind) in NAMESPACED_CALLS, (
                    f"{api_version} {kind} is in PLURALS without RBAC: add its calls to "
                    "NAMESPACED_CALLS and its rule to templates/_rbac.tpl"
                )


@pytest.mark.parametrize("part", prune.SWITCHABLE, ids=lambda p: p.component)
def test_the_operator_may_remove_what_the_spec_no_longer_asks_for(part: prune.Switchable) -> None:
    """The reconciler lists each kind of monitoring and health reports by its owner
    labels and deletes the objects no longer rendered (prune.py)."""
    calls = _calls()
    for api_version, kind in part.kinds:
        group, resource = _kind_resource(api_version, kind)
        assert {(group, resource, "list"), (group, resource, "delete")} <= calls, kind


def test_the_operator_may_apply_everything_it_renders() -> None:
    calls = _calls()
    for obj in operand_objects():
        group, resource = _kind_resource(obj["apiVersion"], obj["kind"])
        assert {(group, resource, "patch"), (group, resource, "create")} <= calls, obj["kind"]


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_the_operator_holds_what_it_grants_the_brokers(
    mode: str, cluster_wide: list[dict[str, Any]], namespaced: list[dict[str, Any]]
) -> None:
    """RBAC refuses to create a Role (or bind it) granting more than the creator has."""
    if mode == "cluster-wide":
        rules = one(cluster_wide, "ClusterRole", "rc-rocketcluster-operator")["rules"]
    else:
        rules = _managed(namespaced, "Role")[0]["rules"]
    granted_to_brokers = [o for o in operand_objects() if o["kind"] == "Role"]
    assert granted_to_brokers
    for role in granted_to_brokers:
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert allows(rules, (group, resource, verb)), (group, resource, verb)


def test_the_rbac_checks_see_wildcards() -> None:
    assert allows([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], ("", "pods", "get"))
    assert granted([{"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}]) != {
        ("", "pods", "get")
    }
    named = {"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get"]}
    assert not allows([named], ("", "pods", "get")) and granted([named]) == set()

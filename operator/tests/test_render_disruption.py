"""A broker group's two PodDisruptionBudgets: the master's, which refuses every
eviction of the master (a drain waits for the operator's switchover), and the other
replicas', which lets one of them go at a time. Judged with the emulator's disruption
arithmetic (rocketcluster.e2e.kube.disruption, the API server's rules), and valid
for the oldest and newest Kubernetes we support."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.e2e.kube import disruption
from rocketcluster.operator.render import brokers, render_cluster

REPO = Path(__file__).resolve().parents[2]
GROUP = "prod-broker-0"


def _cluster(replicas: int) -> RocketCluster:
    data = load_manifest(REPO / "examples" / "cluster.yaml").model_dump(mode="json", by_alias=True)
    brokers_spec = data["spec"]["brokers"]
    brokers_spec["replicas"] = replicas
    replication = brokers_spec["replication"]
    for key in ("inSyncReplicas", "minInSyncReplicas"):
        replication[key] = min(replication[key], replicas)
    return RocketCluster.model_validate(data)


def _budgets(cluster: RocketCluster) -> list[dict[str, Any]]:
    return [
        o
        for o in render_cluster(cluster)
        if o["kind"] == "PodDisruptionBudget"
        and (o["metadata"].get("labels") or {}).get(kube.LABEL_GROUP) == GROUP
    ]


def _pod(
    cluster: RocketCluster, replica: int, role: str | None, ready: bool = True
) -> dict[str, Any]:
    labels = dict(brokers.group_selector(cluster, GROUP))
    if role is not None:
        labels[kube.LABEL_ROLE] = role
    return {
        "metadata": {
            "name": f"{GROUP}-{replica}",
            "namespace": cluster.metadata.namespace,
            "labels": labels,
            "ownerReferences": [{"kind": "StatefulSet", "name": GROUP, "controller": True}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _scale(kind: str, namespace: str, name: str) -> int | None:
    return None  # integer minAvailable: the scale is never needed


@pytest.mark.parametrize(
    ("replicas", "others", "master"), [(1, 0, 0), (2, 0, 1), (3, 1, 1), (5, 3, 1)]
)
def test_each_group_has_a_master_budget_and_one_for_the_others(
    replicas: int, others: int, master: int
) -> None:
    cluster = _cluster(replicas)
    by_name = {b["metadata"]["name"]: b for b in _budgets(cluster)}
    assert set(by_name) == {GROUP, f"{GROUP}-master"}
    assert brokers.master_budget_name(GROUP) == f"{GROUP}-master"
    rest, top = by_name[GROUP]["spec"], by_name[f"{GROUP}-master"]["spec"]
    assert (rest["minAvailable"], top["minAvailable"]) == (others, master)
    assert "maxUnavailable" not in rest and "maxUnavailable" not in top
    for spec, operator in ((rest, "NotIn"), (top, "In")):
        assert spec["selector"]["matchLabels"] == brokers.group_selector(cluster, GROUP)
        assert spec["selector"]["matchExpressions"] == [
            {"key": kube.LABEL_ROLE, "operator": operator, "values": [kube.ROLE_MASTER]}
        ]
    for budget in by_name.values():
        for version in ("1.27.0", "1.37.0"):
            kubernetes_validate.validate(budget, version, strict=True)


@pytest.mark.parametrize("role", [None, "starting", "slave", "no-master", "master"])
def test_every_broker_pod_falls_under_exactly_one_budget(role: str | None) -> None:
    cluster = _cluster(3)
    pod = _pod(cluster, 0, role)
    (budget,) = disruption.budgets_of(pod, _budgets(cluster))
    expected = f"{GROUP}-master" if role == kube.ROLE_MASTER else GROUP
    assert budget["metadata"]["name"] == expected


def test_a_drain_waits_for_the_switchover_then_moves_one_slave_at_a_time() -> None:
    cluster = _cluster(3)
    budgets = _budgets(cluster)
    master, slave1, slave2 = (
        _pod(cluster, 0, "master"),
        _pod(cluster, 1, "slave"),
        _pod(cluster, 2, "slave"),
    )
    pods = [master, slave1, slave2]

    def code(pod: dict[str, Any], now: list[dict[str, Any]]) -> int:
        return disruption.judge(pod, budgets, now, _scale).code

    # the master stays while it is master
    assert code(master, pods) == 429
    # one slave may go; while it is away (unready), the other may not
    assert code(slave1, pods) == 201
    away = [master, _pod(cluster, 1, "starting", ready=False), slave2]
    assert code(slave2, away) == 429
    # the operator switched over: the old master relabelled itself a slave
    switched = [_pod(cluster, 0, "slave"), _pod(cluster, 1, "master"), slave2]
    assert code(switched[0], switched) == 201
    assert code(switched[1], switched) == 429

"""Evictions against PodDisruptionBudgets, and ``kubectl drain``.

Three layers: the disruption arithmetic as pure functions (a table of budgets against
pods and controllers' scales); the ``pods/eviction`` subresource of the emulator over
HTTP (201 and the pod deleted, 429 with the DisruptionBudget cause, 500 for two
budgets, discovery naming policy/v1 Eviction); and the real ``kubectl drain`` of one
of two realised nodes under a budget: it cordons the node, retries the evictions the
budget refuses, and finishes once every pod runs Ready on the other node, never
with two of the budget's pods down at once. The pods only sleep."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.e2e.kube import disruption, scheduler
from rocketcluster.e2e.kube.binaries import Binaries
from rocketcluster.e2e.kube.harness import KubeHarness
from rocketcluster.e2e.kube.nodedrain import Disruptions, drain
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.observe import Observer

NS = "default"
WAIT_S = 120.0  # generous: two shared cores

# --- the arithmetic (pure) --------------------------------------------------------------

SELECTOR = {"matchLabels": {"app": "a"}}


def _pod(
    name: str,
    *,
    ready: bool = True,
    deleting: bool = False,
    phase: str = "Running",
    owner: tuple[str, str] | None = ("StatefulSet", "a"),
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "labels": {"app": "a"} if labels is None else labels,
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {"kind": owner[0], "name": owner[1], "controller": True, "uid": "u"}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _pdb(name: str = "a", selector: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {"selector": SELECTOR if selector is None else selector, **spec},
    }


def _scales(**replicas: int) -> disruption.ScaleOf:
    def scale_of(kind: str, namespace: str, name: str) -> int | None:
        return replicas.get(name)

    return scale_of


THREE_READY = [_pod("a-0"), _pod("a-1"), _pod("a-2")]


@pytest.mark.parametrize(
    ("spec", "pods", "scales", "expected", "healthy", "desired", "allowed"),
    [
        # integer minAvailable: expected = the selected pods
        ({"minAvailable": 2}, THREE_READY, {"a": 3}, 3, 3, 2, 1),
        ({"minAvailable": 3}, THREE_READY, {"a": 3}, 3, 3, 3, 0),
        ({"minAvailable": 0}, THREE_READY, {"a": 3}, 3, 3, 0, 3),
        # minAvailable above what is healthy: never negative
        ({"minAvailable": 5}, THREE_READY, {"a": 3}, 3, 3, 5, 0),
        # maxUnavailable: expected = the controller's scale, not the pods seen
        ({"maxUnavailable": 1}, THREE_READY[:2], {"a": 3}, 3, 2, 2, 0),
        ({"maxUnavailable": 1}, THREE_READY, {"a": 3}, 3, 3, 2, 1),
        # percentages round up against the scale
        ({"maxUnavailable": "50%"}, THREE_READY, {"a": 3}, 3, 3, 1, 2),
        ({"minAvailable": "50%"}, THREE_READY, {"a": 3}, 3, 3, 2, 1),
        # a terminating or unready pod is not healthy
        (
            {"minAvailable": 1},
            [_pod("a-0", deleting=True), _pod("a-1", ready=False), _pod("a-2")],
            {"a": 3},
            3,
            1,
            1,
            0,
        ),
        # two controllers of one budget: their scales add up
        (
            {"maxUnavailable": 1},
            [_pod("a-0"), _pod("b-0", owner=("Deployment", "b"))],
            {"a": 1, "b": 2},
            3,
            2,
            2,
            0,
        ),
        # pods of another app are not counted
        ({"minAvailable": 1}, [*THREE_READY, _pod("x", labels={"app": "x"})], {}, 3, 3, 1, 2),
    ],
)
def test_budget_status_is_the_disruption_controllers_arithmetic(
    spec: dict[str, Any],
    pods: list[dict[str, Any]],
    scales: dict[str, int],
    expected: int,
    healthy: int,
    desired: int,
    allowed: int,
) -> None:
    numbers = disruption.budget_status(_pdb(**spec), pods, _scales(**scales))
    assert (
        numbers.expected,
        numbers.current_healthy,
        numbers.desired_healthy,
        numbers.disruptions_allowed,
    ) == (expected, healthy, desired, allowed)
    assert numbers.error is None


def test_a_pod_without_a_controller_blocks_a_scale_based_budget() -> None:
    pods = [_pod("a-0", owner=None), _pod("a-1")]
    numbers = disruption.budget_status(_pdb(maxUnavailable=1), pods, _scales(a=2))
    assert numbers.disruptions_allowed == 0 and numbers.error is not None
    verdict = disruption.judge(pods[1], [_pdb(maxUnavailable=1)], pods, _scales(a=2))
    assert verdict.code == 429
    assert "still being processed" in verdict.causes[0]["message"]


@pytest.mark.parametrize(
    ("pod", "pdbs", "code"),
    [
        # no budget selects it: deleted
        (THREE_READY[0], [_pdb(selector={"matchLabels": {"app": "other"}})], 201),
        # an empty selector selects nothing (the eviction code's rule)
        (THREE_READY[0], [_pdb(selector={}, minAvailable=3)], 201),
        # a disruption to spare
        (THREE_READY[0], [_pdb(minAvailable=2)], 201),
        # none to spare
        (THREE_READY[0], [_pdb(minAvailable=3)], 429),
        # two budgets: the eviction subresource refuses to choose
        (THREE_READY[0], [_pdb("a", minAvailable=0), _pdb("b", minAvailable=0)], 500),
        # finished, pending or already deleting: no check
        (_pod("a-0", phase="Succeeded"), [_pdb(minAvailable=3)], 201),
        (_pod("a-0", phase="Pending"), [_pdb(minAvailable=3)], 201),
        (_pod("a-0", deleting=True), [_pdb(minAvailable=3)], 201),
    ],
)
def test_an_eviction_is_judged_against_the_pods_budget(
    pod: dict[str, Any], pdbs: list[dict[str, Any]], code: int
) -> None:
    verdict = disruption.judge(pod, pdbs, THREE_READY, _scales(a=3))
    assert verdict.code == code
    if code == 429:
        assert verdict.message == disruption.VIOLATION
        (cause,) = verdict.causes
        assert cause["reason"] == "DisruptionBudget"
        assert "needs 3 healthy pods and has 3 currently" in cause["message"]
    if code == 500:
        assert "more than one PodDisruptionBudget" in verdict.message


def test_an_unready_pod_may_go_while_the_budget_is_healthy() -> None:
    sick = _pod("a-2", ready=False)
    pods = [_pod("a-0"), _pod("a-1"), sick]
    # healthy 2 >= desired 2: the unready pod costs the budget nothing
    assert disruption.judge(sick, [_pdb(minAvailable=2)], pods, _scales()).code == 201
    # healthy 2 < desired 3: refused, unless the policy always allows unready pods
    assert disruption.judge(sick, [_pdb(minAvailable=3)], pods, _scales()).code == 429
    always = _pdb(minAvailable=3, unhealthyPodEvictionPolicy="AlwaysAllow")
    assert disruption.judge(sick, [always], pods, _scales()).code == 201
    # a healthy pod needs a disruption to spare (2 healthy: one above 1, none above 2)
    assert disruption.judge(pods[0], [_pdb(minAvailable=1)], pods, _scales()).code == 201
    assert disruption.judge(pods[0], [_pdb(minAvailable=2)], pods, _scales()).code == 429


# --- the scheduler (pure) ---------------------------------------------------------------


def _node(name: str, *, cordoned: bool = False, **labels: str) -> dict[str, Any]:
    node = scheduler.node_object(name)
    node["metadata"]["labels"].update(labels)
    node["spec"] = {"unschedulable": True} if cordoned else {}
    node["status"] = scheduler.node_status(name, "2026-01-01T00:00:00Z")
    return node


def _bound(name: str, node: str, app: str = "a") -> dict[str, Any]:
    pod = _pod(name, labels={"app": app})
    pod["spec"] = {"nodeName": node}
    return pod


SPREAD = {
    "maxSkew": 1,
    "topologyKey": scheduler.HOSTNAME,
    "whenUnsatisfiable": "ScheduleAnyway",
    "labelSelector": SELECTOR,
}


def test_the_scheduler_spreads_and_never_uses_a_cordoned_node() -> None:
    new: dict[str, Any] = {**_pod("a-9"), "spec": {"topologySpreadConstraints": [SPREAD]}}
    nodes = [_node("n-0"), _node("n-1"), _node("n-2")]
    # n-0 holds one pod of the app, n-1 two pods of another: the app spreads first
    pods = [_bound("a-0", "n-0"), _bound("x-0", "n-1", "x"), _bound("x-1", "n-1", "x")]
    assert scheduler.choose_node(new, nodes, pods) == "n-2"
    nodes[2] = _node("n-2", cordoned=True)
    assert scheduler.choose_node(new, nodes, pods) == "n-1"
    # nodeSelector is a filter
    picky = {**new, "spec": {**new["spec"], "nodeSelector": {"disk": "ssd"}}}
    assert scheduler.choose_node(picky, nodes, pods) is None
    nodes[0] = _node("n-0", disk="ssd")
    assert scheduler.choose_node(picky, nodes, pods) == "n-0"
    # a hard spread on a label no node has: nothing fits
    hard = {**SPREAD, "topologyKey": "topology.kubernetes.io/zone"}
    zoned = {
        **new,
        "spec": {"topologySpreadConstraints": [{**hard, "whenUnsatisfiable": "DoNotSchedule"}]},
    }
    assert scheduler.choose_node(zoned, nodes, pods) is None


# --- the emulator's eviction subresource over HTTP ------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeHarness]:
    with KubeHarness(
        tmp_path_factory.mktemp("eviction-api"), realise=False, authorization_mode="RBAC"
    ) as harness:
        yield harness


def _running(kube: KubeHarness, name: str, labels: dict[str, str]) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "sleep:1"}]},
        }
    )
    kube.patch(
        "pods",
        NS,
        name,
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        },
        subresource="status",
    )


def _evict(kube: KubeHarness, name: str, **options: Any) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NS},
    }
    if options:
        body["deleteOptions"] = options
    response = kube.http.post(kube.path("pods", NS, name) + "/eviction", json=body)
    return response.status_code, response.json()


def test_discovery_names_the_eviction_subresource_as_policy_v1(api: KubeHarness) -> None:
    resources = api.http.get("/api/v1").json()["resources"]
    (eviction,) = [r for r in resources if r["name"] == "pods/eviction"]
    assert (eviction["group"], eviction["version"], eviction["kind"]) == (
        "policy",
        "v1",
        "Eviction",
    )
    assert eviction["verbs"] == ["create"]
    (nodes,) = [r for r in resources if r["name"] == "nodes"]
    assert nodes["namespaced"] is False


def test_evictions_answer_201_429_and_500_as_the_budgets_say(api: KubeHarness) -> None:
    for i in range(3):
        _running(api, f"e-{i}", {"app": "e"})
    api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "e", "namespace": NS},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "e"}}},
        }
    )
    code, body = _evict(api, "e-0", gracePeriodSeconds=0)
    assert (code, body["kind"], body["status"]) == (201, "Status", "Success")
    assert api.get("pods", NS, "e-0") is None  # no finalizer, no grace: gone at once
    code, body = _evict(api, "e-1")
    assert code == 429 and body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    (cause,) = body["details"]["causes"]
    assert cause["reason"] == "DisruptionBudget"
    assert cause["message"] == "The disruption budget e needs 2 healthy pods and has 2 currently"
    assert api.get("pods", NS, "e-1") is not None
    # a second budget over the same pods: the API server will not pick one
    api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "e-too", "namespace": NS},
            "spec": {"maxUnavailable": 3, "selector": {"matchLabels": {"app": "e"}}},
        }
    )
    code, body = _evict(api, "e-1")
    assert code == 500 and "more than one PodDisruptionBudget" in body["message"]
    # a dry run judges without deleting; a wrong name in the body is refused
    api.delete("poddisruptionbudgets", NS, "e-too")
    api.patch("poddisruptionbudgets", NS, "e", {"spec": {"minAvailable": 1}})
    response = api.http.post(
        api.path("pods", NS, "e-1") + "/eviction",
        params={"dryRun": "All"},
        json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "e-1"}},
    )
    assert response.status_code == 201 and api.get("pods", NS, "e-1") is not None
    code, body = _evict_named(api, "e-1", "e-2")
    assert code == 400


def test_an_eviction_deletes_with_its_delete_options(api: KubeHarness) -> None:
    _running(api, "held", {"app": "held"})  # no budget selects it
    api.patch("pods", NS, "held", {"metadata": {"finalizers": ["example.com/hold"]}})
    code, _ = _evict(api, "held", gracePeriodSeconds=7)
    assert code == 201
    pod = api.get("pods", NS, "held") or {}
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 7
    # a precondition on another uid refuses, as a DELETE would
    _running(api, "other", {"app": "held"})
    code, _ = _evict(api, "other", preconditions={"uid": "not-its-uid"})
    assert code == 409 and api.get("pods", NS, "other") is not None
    api.patch("pods", NS, "held", {"metadata": {"finalizers": None}})


def _evict_named(kube: KubeHarness, url_name: str, body_name: str) -> tuple[int, dict[str, Any]]:
    response = kube.http.post(
        kube.path("pods", NS, url_name) + "/eviction",
        json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": body_name}},
    )
    return response.status_code, response.json()


# --- kubectl drain of one of two realised nodes -----------------------------------------

SLEEP = ["python3", "-c", "import time; time.sleep(3600)"]
REPLICAS = 4


def _workloads() -> list[dict[str, Any]]:
    template = {
        "metadata": {"labels": {"app": "sleeper"}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": scheduler.HOSTNAME,
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "sleeper"}},
                }
            ],
            "containers": [{"name": "sleep", "image": "sleep:1", "command": SLEEP}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "sleeper", "namespace": NS},
            "spec": {
                "replicas": REPLICAS,
                "serviceName": "sleeper",
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "sleeper"}},
                "template": template,
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "sleeper", "namespace": NS},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "sleeper"}}},
        },
    ]


def _all_placed(kube: KubeHarness, replicas: int) -> dict[str, str] | None:
    """Each sleeper's node, once ``replicas`` of them are Ready."""
    placed = _placement(kube)
    return placed if len(placed) == replicas else None


def _placement(kube: KubeHarness) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in kube.list("pods", NS, label_selector="app=sleeper")
        if disruption.is_healthy(p)
    }


def test_kubectl_drain_moves_pods_one_budget_at_a_time_and_finishes(
    tmp_path: Path, binaries: Binaries
) -> None:
    with KubeHarness(tmp_path / "drain", nodes=2, probe_period_cap=1.0) as kube:
        nodes = kube.kubectl("get", "nodes", "-o", "name").stdout.split()
        assert nodes == ["node/realiser-0", "node/realiser-1"]
        kube.kubectl("apply", "-f", "-", input="\n---\n".join(map(json.dumps, _workloads())))
        placed = kube.wait_for(
            lambda: _all_placed(kube, REPLICAS),
            WAIT_S,
            "every sleeper Ready",
        )
        # the soft hostname spread: two on each node
        assert sorted(placed.values()) == ["realiser-0"] * 2 + ["realiser-1"] * 2
        kube.wait_for(
            lambda: (
                (kube.get("poddisruptionbudgets", NS, "sleeper") or {})
                .get("status", {})
                .get("disruptionsAllowed")
                == 1
                or None
            ),
            WAIT_S,
            "the budget's status",
        )
        with Disruptions(kube, NS, "app=sleeper", REPLICAS) as sampler:
            run = drain(kube, "realiser-0", timeout_s=240.0)
        print(
            f"kubectl drain: {run.refused} evictions refused (429) and retried, at most "
            f"{sampler.worst} of {REPLICAS} pods down in {sampler.looks} looks, "
            f"{run.seconds:.1f}s\n{run.output}"
        )
        assert run.drained, run.output
        # both of the node's pods were asked at once: one had to wait for the other's
        # replacement, and kubectl retried it
        assert run.refused >= 1 and set(run.refused_pods()) <= set(placed), run.output
        assert sorted(set(run.evicted())) == sorted(
            name for name, node in placed.items() if node == "realiser-0"
        )
        assert sampler.looks > 10 and sampler.worst <= 1, (sampler.worst, sampler.looks)
        node = kube.get("nodes", None, "realiser-0") or {}
        assert node["spec"].get("unschedulable") is True
        after = kube.wait_for(
            lambda: _all_placed(kube, REPLICAS),
            WAIT_S,
            "every sleeper Ready again",
        )
        assert set(after.values()) == {"realiser-1"}, after
        left = kube.kubectl(
            "get", "pods", "-A", "--field-selector", "spec.nodeName=realiser-0", "-o", "name"
        )
        assert left.stdout.strip() == ""
        # uncordoned, the node takes new pods again
        kube.kubectl("uncordon", "realiser-0")
        kube.kubectl("scale", "statefulset", "sleeper", f"--replicas={REPLICAS + 1}")
        grown = kube.wait_for(
            lambda: _all_placed(kube, REPLICAS + 1),
            WAIT_S,
            "the fifth sleeper Ready",
        )
        assert grown[f"sleeper-{REPLICAS}"] == "realiser-0"


# --- the operator's view of cordoned nodes ----------------------------------------------


async def _cordoned(url: str, token: str) -> list[tuple[frozenset[str] | None, str | None]]:
    """Two observations of the cordoned nodes by an operator with ``token``."""
    async with httpx.AsyncClient() as http:
        client = KubeClient(Connection(server=url, token=token))
        try:
            observer = Observer(client, http)
            return [await observer.cordoned(), await observer.cordoned()]
        finally:
            await client.close()


def test_the_operator_sees_cordoned_nodes_or_warns_once_it_may_not(api: KubeHarness) -> None:
    for name in ("n-0", "n-1"):
        api.create(scheduler.node_object(name))
    api.kubectl("cordon", "n-1")
    seen = asyncio.run(_cordoned(api.api_url, api.token))
    assert seen == [(frozenset({"n-1"}), None)] * 2
    # a ServiceAccount without the chart's discovery ClusterRole
    api.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "op", "namespace": NS}}
    )
    refused = asyncio.run(_cordoned(api.api_url, api.service_account_token(NS, "op")))
    (first, warning), second = refused
    assert first is None and warning is not None and "cannot list Nodes (403" in warning
    assert second == (None, None)  # said once

"""Monitoring objects the operator renders behind ``spec.monitoring``: a PodMonitor
whose relabelings make the scrape convention the alerts use, a PrometheusRule scoped
to the cluster, dashboard ConfigMaps for the Grafana sidecar — and their removal when
a flag goes off (against the kmock API emulator, with the operator's real client)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import kubernetes_validate
import pytest

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.operator.kube.apply import MergePatchApplier
from rocketcluster.operator.kube.client import KubeClient, KubeNotFound
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.monitoring import alerts, packaged
from rocketcluster.operator.monitoring.conventions import BROKER_JOB, CONTROLLER_JOB
from rocketcluster.operator.observe import Observed
from rocketcluster.operator.reconcile import ClusterMemory, ClusterReconciler, prune_monitoring
from rocketcluster.operator.render import monitoring as render_monitoring
from rocketcluster.operator.render import render_cluster
from rocketcluster.operator.render.cluster import APPLY_ORDER

REPO = Path(__file__).resolve().parents[2]
OLDEST, NEWEST = "1.27.0", "1.37.0"  # as test_render.py: the Kubernetes versions we support

ALL_ON = {"serviceMonitor": True, "prometheusRule": True, "grafanaDashboards": True}


def _cluster(monitoring: dict[str, bool], name: str = "prod", ns: str = "team-a") -> RocketCluster:
    data = load_manifest(REPO / "examples" / "cluster.yaml").model_dump(mode="json", by_alias=True)
    data["metadata"] = {"name": name, "namespace": ns, "uid": "u-1"}
    data["spec"]["monitoring"] = monitoring
    return RocketCluster.model_validate(data)


def _kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _monitoring(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["metadata"]["labels"][kube.LABEL_COMPONENT] == "monitoring"]


def test_nothing_is_rendered_unless_asked() -> None:
    assert _monitoring(render_cluster(_cluster({}))) == []
    only_rules = _monitoring(render_cluster(_cluster({"prometheusRule": True})))
    assert [o["kind"] for o in only_rules] == ["PrometheusRule"]


def test_every_flag_renders_its_objects_last_and_owned() -> None:
    objects = render_cluster(_cluster(ALL_ON))
    found = _monitoring(objects)
    assert sorted({o["kind"] for o in found}) == ["ConfigMap", "PodMonitor", "PrometheusRule"]
    assert len(_kind(found, "ConfigMap")) == len(packaged.dashboards())
    assert objects[-2:] == [*_kind(objects, "PodMonitor"), *_kind(objects, "PrometheusRule")]
    assert {"PodMonitor", "PrometheusRule"} <= set(APPLY_ORDER)
    for obj in found:
        meta = obj["metadata"]
        assert meta["namespace"] == "team-a"
        assert meta["ownerReferences"][0]["uid"] == "u-1"
        selector = render_monitoring.owner_selector(_cluster(ALL_ON))
        assert selector.items() <= meta["labels"].items()


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
def test_dashboard_config_maps_are_valid_kubernetes(version: str) -> None:
    for config_map in _kind(_monitoring(render_cluster(_cluster(ALL_ON))), "ConfigMap"):
        kubernetes_validate.validate(config_map, version, strict=True)


def test_dashboards_are_for_this_cluster_and_picked_up_by_the_sidecar() -> None:
    maps = _kind(render_cluster(_cluster(ALL_ON)), "ConfigMap")
    maps = [m for m in maps if m["metadata"]["labels"].get("grafana_dashboard") == "1"]
    originals = {b["uid"]: b for b in packaged.dashboards().values()}
    assert len(maps) == len(originals)
    uids = set()
    for config_map in maps:
        ((key, text),) = config_map["data"].items()
        assert re.fullmatch(r"rocketcluster-team-a-prod-[a-z-]+\.json", key)
        board = json.loads(text)
        uids.add(board["uid"])
        assert len(board["uid"]) <= 40  # Grafana's limit
        original = next(o for u, o in originals.items() if board["uid"].startswith(u))
        assert board["title"] == f"{original['title']} (team-a/prod)"
        assert board["panels"] == original["panels"]
        (cluster_var,) = [v for v in board["templating"]["list"] if v["name"] == "cluster"]
        assert cluster_var["current"] == {"selected": True, "text": "prod", "value": "prod"}
        assert board["links"][0]["tags"] == ["rocketcluster:team-a/prod"]
        assert "rocketcluster:team-a/prod" in board["tags"]
    assert len(uids) == len(maps)
    # Another cluster's dashboards collide with none of these: uid, key, name.
    other = _kind(render_cluster(_cluster(ALL_ON, name="prod", ns="team-b")), "ConfigMap")
    other_uids = {
        json.loads(next(iter(m["data"].values())))["uid"]
        for m in other
        if m["metadata"]["labels"].get("grafana_dashboard") == "1"
    }
    assert not uids & other_uids


def test_the_pod_monitor_scrapes_every_broker_and_controller_pod_by_the_convention() -> None:
    objects = render_cluster(_cluster(ALL_ON))
    (monitor,) = _kind(objects, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": ["team-a"]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True
    # The selector picks exactly the cluster's broker and controller pods, and each
    # has the port the endpoint names, on the admin port.
    selector = spec["selector"]
    (components,) = selector["matchExpressions"]
    workloads = _kind(objects, "StatefulSet") + _kind(objects, "Deployment")
    assert len(workloads) == 5
    for workload in workloads:
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector["matchLabels"].items() <= pod_labels.items()
        assert pod_labels[kube.LABEL_COMPONENT] in components["values"]
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports[endpoint["port"]] == ADMIN_PORT
    # Relabelings: what Prometheus makes of a broker pod's and a controller pod's labels.
    for workload, job in (
        (_kind(objects, "StatefulSet")[0], BROKER_JOB),
        (_kind(objects, "Deployment")[0], CONTROLLER_JOB),
    ):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        target = _relabel(endpoint["relabelings"], labels)
        assert target["job"] == job
        assert target["cluster"] == "prod"
        assert target.get("group") == labels.get(kube.LABEL_GROUP)


def _relabel(rules: list[dict[str, Any]], pod_labels: dict[str, str]) -> dict[str, str]:
    """Prometheus' ``replace`` relabeling (the only action used) over a pod's meta
    labels: the regex must match the whole joined value."""
    meta = {
        "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v
        for k, v in pod_labels.items()
    }
    target: dict[str, str] = {}
    for rule in rules:
        assert rule.get("action", "replace") == "replace"
        value = ";".join(meta.get(s, "") for s in rule["sourceLabels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if match:
            target[rule["targetLabel"]] = match.expand(
                rule.get("replacement", "$1").replace("$1", r"\1")
            )
    return target


def test_the_prometheus_rule_holds_every_alert_scoped_to_the_cluster() -> None:
    (rule,) = _kind(render_cluster(_cluster(ALL_ON)), "PrometheusRule")
    assert rule["metadata"]["name"] == "prod-alerts"
    (group,) = rule["spec"]["groups"]
    assert group["name"] == "rocketcluster-prod"
    names = [r["alert"] for r in group["rules"]]
    assert names == [a.name for a in alerts.alerts()]
    for r in group["rules"]:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}
        assert r["labels"]["severity"] in ("critical", "warning")
        assert r["annotations"]["runbook_url"].endswith("#" + r["alert"].lower())
        selectors = re.findall(r"\b(?:rocket(?:mq|cluster)_\w+|up)\{([^}]*)\}", r["expr"])
        assert selectors and all('cluster="prod"' in s for s in selectors), r["expr"]
        bare = re.findall(r"\b(rocket(?:mq|cluster)_\w+|up)\b(?!\{)", r["expr"])
        assert not bare, f"{r['alert']}: unscoped {bare}"


# -- pruning, against the API emulator ------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        api.resources["v1/configmaps"] = kmock.ResourceInfo(
            kind="ConfigMap", verbs=verbs, namespaced=True
        )
        for plural, kind in (("podmonitors", "PodMonitor"), ("prometheusrules", "PrometheusRule")):
            api.resources[f"monitoring.coreos.com/v1/{plural}"] = kmock.ResourceInfo(
                kind=kind, verbs=verbs, namespaced=True
            )
        async with KubeClient(Connection(server=str(api.url).rstrip("/"))) as kube_client:
            yield kube_client


async def _names(client: KubeClient, kind: str, api_version: str = "v1") -> set[str]:
    items = await client.list(api_version, kind, "team-a", {})
    return {i["metadata"]["name"] for i in items}


async def test_turning_flags_off_deletes_their_objects_and_nothing_else(
    client: KubeClient,
) -> None:
    applier = MergePatchApplier(client)
    everything = render_cluster(_cluster(ALL_ON))
    for obj in everything:
        if obj["kind"] in ("ConfigMap", "PodMonitor", "PrometheusRule"):
            await applier.apply(obj)
    before = await _names(client, "ConfigMap")
    assert "prod-broker-0-config" in before and "prod-dashboard-overview" in before

    # Dashboards off: their ConfigMaps go, the brokers' configuration stays.
    rules_only = _monitoring(
        render_cluster(_cluster({"serviceMonitor": True, "prometheusRule": True}))
    )
    removed = await prune_monitoring(client, _cluster({}), rules_only)
    assert {name for _, kind, name in removed if kind == "ConfigMap"} == {
        n for n in before if "-dashboard-" in n
    }
    assert await _names(client, "ConfigMap") == {n for n in before if "-dashboard-" not in n}
    assert await _names(client, "PodMonitor", "monitoring.coreos.com/v1") == {"prod-metrics"}

    # Everything off: the rest goes; a second pass finds nothing to do.
    removed = await prune_monitoring(client, _cluster({}), [])
    assert sorted((kind, name) for _, kind, name in removed) == [
        ("PodMonitor", "prod-metrics"),
        ("PrometheusRule", "prod-alerts"),
    ]
    assert await prune_monitoring(client, _cluster({}), []) == []
    assert "prod-controller-config" in await _names(client, "ConfigMap")


async def test_another_clusters_monitoring_is_left_alone(client: KubeClient) -> None:
    applier = MergePatchApplier(client)
    for obj in _monitoring(render_cluster(_cluster(ALL_ON, name="stage"))):
        await applier.apply(obj)
    assert await prune_monitoring(client, _cluster({}), []) == []
    assert "stage-metrics" in await _names(client, "PodMonitor", "monitoring.coreos.com/v1")


async def test_pruning_skips_kinds_the_api_does_not_serve() -> None:
    """Without the Prometheus operator's CRDs (404 on its kinds) pruning still removes
    dashboards and raises nothing."""
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        api.resources["v1/configmaps"] = kmock.ResourceInfo(
            kind="ConfigMap",
            verbs={"get", "list", "create", "patch", "delete"},
            namespaced=True,
        )
        async with KubeClient(Connection(server=str(api.url).rstrip("/"))) as kube_client:
            (dashboard, *_) = render_monitoring.dashboard_config_maps(_cluster(ALL_ON))
            await MergePatchApplier(kube_client).apply(dashboard)
            removed = await prune_monitoring(kube_client, _cluster({}), [])
    assert removed == [("v1", "ConfigMap", dashboard["metadata"]["name"])]


class _WithoutPrometheusOperator:
    """The applier as on an API server without the monitoring.coreos.com CRDs: the
    kmock emulator stores any kind, a real server answers 404 for an unserved one."""

    def __init__(self, inner: MergePatchApplier) -> None:
        self._inner = inner

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            raise KubeNotFound(
                404, "NotFound", "the server could not find the requested resource", "PATCH"
            )
        return await self._inner.apply(obj)

    async def apply_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return await self._inner.apply_status(obj, status)


async def test_without_the_prometheus_operator_the_rest_still_applies() -> None:
    """The reconciler warns about the PodMonitor and PrometheusRule it cannot apply and
    goes on: the dashboards are applied, the tick does not fail."""
    events: list[tuple[str, str, str]] = []
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        api.resources["v1/configmaps"] = kmock.ResourceInfo(
            kind="ConfigMap", verbs={"get", "list", "create", "patch"}, namespaced=True
        )
        async with (
            KubeClient(Connection(server=str(api.url).rstrip("/"))) as kube_client,
            httpx.AsyncClient() as http,
        ):
            applier = _WithoutPrometheusOperator(MergePatchApplier(kube_client))
            reconciler = ClusterReconciler(kube_client, applier, http, lambda *e: events.append(e))
            objects = _monitoring(render_cluster(_cluster(ALL_ON)))
            observed = Observed(
                workloads={}, groups={}, controllers=None, controller_admin=None, catalogue=None
            )
            await reconciler._apply(_cluster(ALL_ON), objects, observed, ClusterMemory(), {})
            applied = await _names(kube_client, "ConfigMap")
    assert applied == {o["metadata"]["name"] for o in _kind(objects, "ConfigMap")}
    warned = sorted((k, m.split(":")[0]) for k, r, m in events if r == "MonitoringNotApplied")
    assert warned == [
        ("Warning", "PodMonitor/prod-metrics"),
        ("Warning", "PrometheusRule/prod-alerts"),
    ]

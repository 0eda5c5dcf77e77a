"""Rendering: snapshots of what the operator creates for the examples, every object
valid for the oldest and newest Kubernetes we support, and the properties the
roll, the Services and the security model rely on."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from rocketcluster.api import kube
from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.controller_config import ControllerProcessConfig
from rocketcluster.operator.render import render_cluster
from rocketcluster.operator.render.brokers import pod_label_role_name, with_running_pods
from rocketcluster.operator.render.output import to_yaml

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).parent / "snapshots"
EXAMPLES = (
    "cluster.yaml",
    "standalone.yaml",
    "health-reports.yaml",
    "health-reports-kubernetes.yaml",
    "tiered-s3.yaml",
    "tiered-posix.yaml",
)
OLDEST, NEWEST = "1.27.0", "1.37.0"


def _cluster(name: str = "cluster.yaml", **changes: Any) -> RocketCluster:
    cluster = load_manifest(REPO / "examples" / name)
    if not changes:
        return cluster
    data = cluster.model_dump(mode="json", by_alias=True)
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return RocketCluster.model_validate(data)


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in _by_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize("example", EXAMPLES)
def test_render_matches_snapshot(example: str) -> None:
    text = to_yaml(render_cluster(_cluster(example)))
    snapshot = SNAPSHOTS / example
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.parent.mkdir(exist_ok=True)
        snapshot.write_text(text)
    assert text == snapshot.read_text(), (
        f"rendering of {example} changed: review, then UPDATE_SNAPSHOTS=1 pytest {__file__}"
    )


def test_console_render_matches_snapshot() -> None:
    """The console's objects (spec.console) with TLS, auth, the health reports and an
    Ingress: examples/secure.yaml with every console option on."""
    data = load_manifest(REPO / "examples" / "secure.yaml").model_dump(mode="json", by_alias=True)
    data["spec"]["healthReports"] = {"schedule": "@daily"}
    data["spec"]["console"] = {
        "enabled": True,
        "replicas": 2,
        "service": {"type": "LoadBalancer", "annotations": {"team": "messaging"}},
        "ingress": {
            "enabled": True,
            "host": "rocket.example.com",
            "className": "nginx",
            "tlsSecretName": "rocket-web-tls",
        },
    }
    objects = render_cluster(RocketCluster.model_validate(data))
    text = to_yaml(
        [o for o in objects if o["metadata"]["labels"][kube.LABEL_COMPONENT] == "console"]
    )
    snapshot = SNAPSHOTS / "console.yaml"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.write_text(text)
    assert text == snapshot.read_text(), (
        f"rendering of the console changed: review, then UPDATE_SNAPSHOTS=1 pytest {__file__}"
    )


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_object_is_valid_kubernetes(example: str, version: str) -> None:
    objects = render_cluster(_cluster(example))
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_would_catch_a_mistake() -> None:
    """The check above is not vacuous: a misspelt field is refused."""
    sts = _by_kind(render_cluster(_cluster()), "StatefulSet")[0]
    sts["spec"]["updateStrategy"]["tpye"] = "OnDelete"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, NEWEST, strict=True)


def test_the_production_example_has_its_shape() -> None:
    objects = render_cluster(_cluster())
    assert [d["metadata"]["name"] for d in _by_kind(objects, "Deployment")] == [
        "prod-controller-0",
        "prod-controller-1",
        "prod-controller-2",
    ]
    assert [s["metadata"]["name"] for s in _by_kind(objects, "StatefulSet")] == [
        "prod-broker-0",
        "prod-broker-1",
    ]
    for dep in _by_kind(objects, "Deployment"):
        assert dep["spec"]["strategy"] == {"type": "Recreate"}
        claim = dep["spec"]["template"]["spec"]["volumes"][1]["persistentVolumeClaim"]
        assert claim["claimName"] == f"{dep['metadata']['name']}-data"
    for sts in _by_kind(objects, "StatefulSet"):
        assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
        assert sts["spec"]["replicas"] == 3
        assert kube.LABEL_ROLE not in sts["spec"]["selector"]["matchLabels"]
    assert {p["metadata"]["name"] for p in _by_kind(objects, "PersistentVolumeClaim")} == {
        f"prod-controller-{i}-data" for i in range(3)
    }


def test_the_group_service_selects_the_master_and_the_headless_one_every_replica() -> None:
    objects = render_cluster(_cluster())
    client = _one(objects, "Service", "prod-broker-1")
    assert client["spec"]["selector"][kube.LABEL_ROLE] == kube.ROLE_MASTER
    assert client["spec"]["selector"][kube.LABEL_GROUP] == "prod-broker-1"
    headless = _one(objects, "Service", "prod-broker-1-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert kube.LABEL_ROLE not in headless["spec"]["selector"]
    assert headless["spec"]["publishNotReadyAddresses"] is True
    # A standalone broker labels nothing: its Service selects the one pod.
    standalone = _one(render_cluster(_cluster("standalone.yaml")), "Service", "demo-broker-0")
    assert kube.LABEL_ROLE not in standalone["spec"]["selector"]


def test_config_files_are_the_local_runtimes_models() -> None:
    """The ConfigMaps hold BrokerProcessConfig / ControllerProcessConfig files, one
    per pod, naming Services rather than pod IPs (stable across restarts)."""
    objects = render_cluster(_cluster())
    broker_files = _one(objects, "ConfigMap", "prod-broker-1-config")["data"]
    assert sorted(broker_files) == [f"prod-broker-1-{r}.json" for r in range(3)]
    config = BrokerProcessConfig.model_validate(json.loads(broker_files["prod-broker-1-2.json"]))
    assert config.group == "prod-broker-1"
    assert config.broker_id == 3
    assert (
        config.advertised_host == "prod-broker-1-2.prod-broker-1-headless.default.svc.cluster.local"
    )
    assert config.route_endpoint == "prod-broker-1.default.svc.cluster.local:8081"
    assert config.controllers == [
        f"prod-controller-{i}.default.svc.cluster.local:9878" for i in range(3)
    ]
    assert str(config.data_dir) == kube.DATA_DIR
    assert [t.name for t in config.topics] == ["orders", "payments"]
    controller_files = _one(objects, "ConfigMap", "prod-controller-config")["data"]
    member = ControllerProcessConfig.model_validate(
        json.loads(controller_files["prod-controller-1.json"])
    )
    assert member.node_id == 2
    assert member.write_quorum == 2
    assert [m.raft_address for m in member.members] == [
        f"prod-controller-{i}.default.svc.cluster.local:9878" for i in range(3)
    ]


def test_pods_are_unprivileged_and_spread() -> None:
    for workload in _by_kind(render_cluster(_cluster()), "StatefulSet") + _by_kind(
        render_cluster(_cluster()), "Deployment"
    ):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
        assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    zoned = _cluster(spec__placement={"zones": ["a", "b", "c"]})
    sts = _by_kind(render_cluster(zoned), "StatefulSet")[0]["spec"]["template"]["spec"]
    assert sts["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"
    terms = sts["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["a", "b", "c"]


def test_brokers_may_patch_only_their_own_pods() -> None:
    objects = render_cluster(_cluster())
    (role,) = _by_kind(objects, "Role")
    (rule,) = role["rules"]
    assert rule["resources"] == ["pods"] and rule["verbs"] == ["get", "patch"]
    assert sorted(rule["resourceNames"]) == sorted(
        f"prod-broker-{g}-{r}" for g in range(2) for r in range(3)
    )
    controller_sa = _one(objects, "ServiceAccount", "prod-controller")
    assert controller_sa["automountServiceAccountToken"] is False


def _pod_hashes(cluster: RocketCluster) -> dict[str, str]:
    objects = render_cluster(cluster)
    return {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"][
            kube.ANNOTATION_POD_HASH
        ]
        for o in objects
        if o["kind"] in ("StatefulSet", "Deployment")
    }


def test_pod_hash_follows_what_needs_a_restart_and_only_that() -> None:
    base = _pod_hashes(_cluster())
    image = _pod_hashes(_cluster(spec__image="ghcr.io/rocketcluster/rocketcluster-broker:0.2.0"))
    assert all(image[name] != h for name, h in base.items()), "an image change rolls everything"
    pinned = _pod_hashes(_cluster(spec__controller__image="registry.example/ctl:1"))
    assert all(pinned[n] != h for n, h in base.items() if "controller" in n)
    assert all(pinned[n] == h for n, h in base.items() if "broker" in n)
    flush = _pod_hashes(_cluster(spec__brokers__flush="sync"))
    assert all(flush[n] != h for n, h in base.items() if "broker" in n)
    assert all(flush[n] == h for n, h in base.items() if "controller" in n)
    # Topics come from the catalogue, routes too: no restart for either.
    topics = _pod_hashes(_cluster(spec__topics=[{"name": "other", "queues": 2}]))
    assert topics == base
    grown = _pod_hashes(_cluster(spec__brokers__groups=3))
    assert {n: grown[n] for n in base} == base


def test_claims_follow_the_retention_policy() -> None:
    kept = render_cluster(_cluster())
    sts = _by_kind(kept, "StatefulSet")[0]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    owned = RocketCluster.model_validate(
        {
            **_cluster().model_dump(mode="json", by_alias=True),
            "metadata": {"name": "prod", "uid": "1234"},
        }
    )
    claims = _by_kind(render_cluster(owned), "PersistentVolumeClaim")
    assert all("ownerReferences" not in c["metadata"] for c in claims)
    deleting = _cluster(
        spec__controller__storage={"size": "1Gi", "whenDeleted": "Delete"},
        metadata={"name": "prod", "uid": "1234"},
    )
    claims = _by_kind(render_cluster(deleting), "PersistentVolumeClaim")
    assert all(c["metadata"]["ownerReferences"][0]["uid"] == "1234" for c in claims)
    for obj in render_cluster(deleting):
        if obj["kind"] != "PersistentVolumeClaim":
            assert obj["metadata"]["ownerReferences"][0]["kind"] == "RocketCluster"


def test_controllers_run_the_controller_twin_of_the_broker_image() -> None:
    objects = render_cluster(_cluster(spec__image="registry.example/rc/rocketcluster-broker:0.3.1"))
    workloads = [o for o in objects if o["kind"] in ("StatefulSet", "Deployment")]
    for o in workloads:
        image = o["spec"]["template"]["spec"]["containers"][0]["image"]
        twin = "controller" if o["kind"] == "Deployment" else "broker"
        assert image == f"registry.example/rc/rocketcluster-{twin}:0.3.1", o["metadata"]["name"]


def _broker_container(cluster: RocketCluster) -> dict[str, Any]:
    sts = next(
        s
        for s in _by_kind(render_cluster(cluster), "StatefulSet")
        if "broker" in s["metadata"]["name"]
    )
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_front_processes_get_a_core_each_unless_the_manifest_says() -> None:
    """frontProcesses: 3 asks the scheduler for four cores (the store process and each
    front) when the manifest names no CPU; a CPU the manifest names stays as it is."""
    auto = _broker_container(_cluster())
    assert "cpu" not in auto.get("resources", {}).get("requests", {})
    env = {e["name"]: e for e in auto["env"]}
    field = env[kube.ENV_CPU_REQUEST_MILLIS]["valueFrom"]["resourceFieldRef"]
    assert field == {"containerName": "broker", "resource": "requests.cpu", "divisor": "1m"}
    three = _broker_container(_cluster(spec__brokers__frontProcesses=3))
    assert three["resources"]["requests"]["cpu"] == "4"
    limited = _broker_container(
        _cluster(spec__brokers__frontProcesses=3, spec__brokers__resources={"limits": {"cpu": "2"}})
    )
    assert limited["resources"] == {"limits": {"cpu": "2"}}
    configs = render_cluster(_cluster(spec__brokers__frontProcesses=3))
    brokers = [
        json.loads(text)
        for c in _by_kind(configs, "ConfigMap")
        for name, text in c.get("data", {}).items()
        if "-broker-" in name and name.endswith(".json")
    ]
    assert brokers and all(b["frontProcesses"] == 3 for b in brokers)
    # "auto" is not written: a broker of the previous release reads the config too.
    default = [
        text
        for c in _by_kind(render_cluster(_cluster()), "ConfigMap")
        for text in c.get("data", {}).values()
    ]
    assert not any('"frontProcesses"' in text for text in default)


def test_the_pod_label_role_names_each_broker_pod_and_keeps_those_still_running() -> None:
    """Brokers label their own pods (the client Service follows the master): the Role
    names exactly the spec's pods; the reconciler adds pods a scale-in is removing
    while they run (a failover during the drain must still move the Service)."""
    cluster = _cluster()
    role = _one(render_cluster(cluster), "Role", pod_label_role_name(cluster))
    (rule,) = role["rules"]
    assert rule["verbs"] == ["get", "patch"]
    assert len(rule["resourceNames"]) == 6 and "prod-broker-1-2" in rule["resourceNames"]
    kept = with_running_pods(role, ["prod-broker-2-1", "prod-broker-0-0", "prod-broker-2-0"])
    assert kept["rules"][0]["resourceNames"] == [
        *rule["resourceNames"],
        "prod-broker-2-0",
        "prod-broker-2-1",
    ]
    assert role["rules"][0]["resourceNames"] == rule["resourceNames"]  # not changed

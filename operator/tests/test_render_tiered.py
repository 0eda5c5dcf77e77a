"""What ``spec.tieredStorage`` renders: the section in every broker's config file, S3
credentials as environment variables from the named Secret (resolved by the kubelet:
never in a ConfigMap, never read by the operator), the shared volume of the posix
backend mounted in every broker pod — nothing of it in the controllers, nothing at all
while tiering is off — and a new pod hash, so that a change rolls the brokers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api import kube
from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.operator.render import render_cluster

REPO = Path(__file__).resolve().parents[2]
AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _cluster(example: str = "tiered-s3.yaml", **tiered: Any) -> RocketCluster:
    """An example with its tieredStorage updated by ``tiered`` (None removes a key)."""
    data = load_manifest(REPO / "examples" / example).model_dump(mode="json", by_alias=True)
    section = data["spec"]["tieredStorage"]
    for key, value in tiered.items():
        if value is None:
            section.pop(key, None)
        else:
            section[key] = value
    return RocketCluster.model_validate(data)


def _workloads(cluster: RocketCluster, kind: str) -> list[dict[str, Any]]:
    return [o for o in render_cluster(cluster) if o["kind"] == kind]


def _containers(cluster: RocketCluster, kind: str) -> list[dict[str, Any]]:
    return [
        c for w in _workloads(cluster, kind) for c in w["spec"]["template"]["spec"]["containers"]
    ]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container["env"]}


def _broker_files(cluster: RocketCluster) -> dict[str, str]:
    return {
        name: text
        for o in render_cluster(cluster)
        if o["kind"] == "ConfigMap" and o["metadata"].get("labels", {}).get(kube.LABEL_GROUP)
        for name, text in o["data"].items()
    }


def _hashes(cluster: RocketCluster) -> dict[str, str]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"][
            kube.ANNOTATION_POD_HASH
        ]
        for o in render_cluster(cluster)
        if o["kind"] in ("StatefulSet", "Deployment")
    }


def test_every_broker_config_carries_the_section() -> None:
    cluster = _cluster()
    files = _broker_files(cluster)
    assert len(files) == 6  # 2 groups x 3 replicas
    for name, text in files.items():
        config = BrokerProcessConfig.model_validate(json.loads(text))
        assert config.tiered_storage == cluster.spec.tiered_storage, name


def test_s3_credentials_come_from_the_secret_as_environment() -> None:
    for broker in _containers(_cluster(), "StatefulSet"):
        env = _env(broker)
        for name in AWS:
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "archive-s3" and ref["key"] == name
            assert ref.get("optional", False) is (name == "AWS_SESSION_TOKEN")
        assert not any("value" in env[name] for name in AWS)
        # The downward API is still there, first.
        assert broker["env"][0]["name"] == kube.ENV_POD_NAME
    for controller in _containers(_cluster(), "Deployment"):
        assert not set(AWS) & set(_env(controller))


def test_the_pods_own_identity_needs_no_environment() -> None:
    cluster = _cluster(s3={"bucket": "rocketcluster-archive", "region": "eu-central-1"})
    assert cluster.spec.tiered_storage.s3 is not None
    for broker in _containers(cluster, "StatefulSet"):
        assert not set(AWS) & set(_env(broker))


def test_the_posix_claim_is_mounted_in_every_broker_pod() -> None:
    cluster = _cluster("tiered-posix.yaml")
    (sts,) = _workloads(cluster, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert {"name": "tier", "persistentVolumeClaim": {"claimName": "ledger-tier"}} in pod["volumes"]
    (broker,) = pod["containers"]
    assert {"name": "tier", "mountPath": "/var/lib/rocketcluster-tier"} in broker["volumeMounts"]
    assert not set(AWS) & set(_env(broker))
    # The per-replica volume stays the broker's own.
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    for deployment in _workloads(cluster, "Deployment"):
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        assert all(v["name"] != "tier" for v in volumes)
    # The operator does not make the claim: it is the user's, shared by every pod.
    claims = [o for o in render_cluster(cluster) if o["kind"] == "PersistentVolumeClaim"]
    assert all(c["metadata"]["name"] != "ledger-tier" for c in claims)


def test_a_path_provided_otherwise_is_not_mounted() -> None:
    cluster = _cluster("tiered-posix.yaml", posix={"path": "/mnt/tier"})
    (sts,) = _workloads(cluster, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp"]
    assert all(m["name"] != "tier" for m in pod["containers"][0]["volumeMounts"])


@pytest.mark.parametrize("example", ["tiered-s3.yaml", "tiered-posix.yaml"])
def test_nothing_tiered_is_rendered_while_tiering_is_off(example: str) -> None:
    on, off = _cluster(example), _cluster(example, enabled=False)
    for broker in _containers(off, "StatefulSet"):
        assert not set(AWS) & set(_env(broker))
        assert all(m["name"] != "tier" for m in broker["volumeMounts"])
    for sts in _workloads(off, "StatefulSet"):
        assert all(v["name"] != "tier" for v in sts["spec"]["template"]["spec"]["volumes"])
    for text in _broker_files(off).values():
        assert json.loads(text)["tieredStorage"]["enabled"] is False
    # Only the brokers' pods differ from the enabled rendering.
    kinds = {o["kind"] for o in render_cluster(on)}
    assert kinds == {o["kind"] for o in render_cluster(off)}


def test_a_tiered_storage_change_rolls_the_brokers_and_only_them() -> None:
    base = _hashes(_cluster())
    brokers = [n for n in base if "-broker-" in n]
    controllers = [n for n in base if "-controller-" in n]
    assert brokers and controllers
    for change in (
        {"enabled": False},
        {"readPolicy": "FORCE"},
        {"uploadIntervalSeconds": 5},
        {"localRetentionHours": None},
        {"s3": {"bucket": "rocketcluster-other", "credentialsSecret": "archive-s3"}},
        {"s3": {"bucket": "rocketcluster-archive", "credentialsSecret": "other-s3"}},
    ):
        changed = _hashes(_cluster(**change))
        assert all(changed[n] != base[n] for n in brokers), change
        assert all(changed[n] == base[n] for n in controllers), change
    posix = _hashes(_cluster("tiered-posix.yaml"))
    moved = _hashes(
        _cluster("tiered-posix.yaml", posix={"path": "/mnt/tier", "claimName": "ledger-tier"})
    )
    assert posix["ledger-broker-0"] != moved["ledger-broker-0"]


def test_a_relative_posix_path_cannot_be_rendered_for_kubernetes() -> None:
    """The CRD refuses it; `rocketctl render` of a local manifest says why."""
    cluster = _cluster("tiered-posix.yaml", posix={"path": "tier", "claimName": "ledger-tier"})
    with pytest.raises(ValueError, match=r"posix\.path 'tier' must be absolute in Kubernetes"):
        render_cluster(cluster)

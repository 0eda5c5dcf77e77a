"""Rendering ``spec.security.tls``: the Secret mounted in every broker and controller
pod, its paths in the process configs, HTTPS probes and scraping, valid Kubernetes
objects, and a clear refusal when the Secret is not named."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.cluster import RocketCluster, load_manifest
from rocketcluster.api.controller_config import ControllerProcessConfig
from rocketcluster.operator.render import render_cluster
from rocketcluster.operator.render.output import to_yaml
from rocketcluster.operator.render.tls import TLS_DIR, TlsSpecError

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "snapshots" / "tls.yaml"


def _cluster(**tls: Any) -> RocketCluster:
    cluster = load_manifest(REPO / "examples" / "tls.yaml")
    data = cluster.model_dump(mode="json", by_alias=True)
    data["spec"]["security"]["tls"].update(tls)
    data["spec"]["monitoring"] = {"serviceMonitor": True}
    return RocketCluster.model_validate(data)


def test_render_matches_snapshot() -> None:
    text = to_yaml(render_cluster(load_manifest(REPO / "examples" / "tls.yaml")))
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text(), (
        f"rendering of examples/tls.yaml changed: review, then UPDATE_SNAPSHOTS=1 pytest {__file__}"
    )


@pytest.mark.parametrize("version", ["1.27.0", "1.37.0"])
def test_every_object_is_valid_kubernetes(version: str) -> None:
    for obj in render_cluster(_cluster()):
        if obj["kind"] in ("PodMonitor", "PrometheusRule"):
            continue  # custom resources: validated against their CRDs elsewhere
        kubernetes_validate.validate(obj, version, strict=True)


def test_every_pod_mounts_the_secret_and_its_config_points_at_it() -> None:
    objects = render_cluster(_cluster())
    workloads = [o for o in objects if o["kind"] in ("StatefulSet", "Deployment")]
    assert len(workloads) == 4  # three controller members, one broker group
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
        assert volume["secret"] == {"secretName": "prod-tls", "defaultMode": 0o440}
        [container] = pod["containers"]
        assert {"name": "tls", "mountPath": TLS_DIR, "readOnly": True} in container["volumeMounts"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["scheme"] == "HTTPS"
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scheme"] == "https"
    for config_map in (o for o in objects if o["kind"] == "ConfigMap"):
        for name, text in config_map["data"].items():
            if not name.endswith(".json"):
                continue
            raw = json.loads(text)
            model = BrokerProcessConfig if "group" in raw else ControllerProcessConfig
            config = model.model_validate(raw)
            assert config.tls is not None, name
            assert str(config.tls.cert_file) == f"{TLS_DIR}/tls.crt"
            assert str(config.tls.key_file) == f"{TLS_DIR}/tls.key"
            assert str(config.tls.ca_file) == f"{TLS_DIR}/ca.crt"


def test_prometheus_scrapes_over_https_trusting_the_ca() -> None:
    [monitor] = [o for o in render_cluster(_cluster()) if o["kind"] == "PodMonitor"]
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "prod-tls", "key": "ca.crt"}},
        "serverName": "prod-controller-0.default.svc.cluster.local",
    }


def test_tls_off_renders_no_tls() -> None:
    objects = render_cluster(_cluster(enabled=False))
    text = json.dumps(objects)
    assert "prod-tls" not in text and "HTTPS" not in text and TLS_DIR not in text


def test_tls_without_a_secret_is_refused_with_what_to_set() -> None:
    with pytest.raises(TlsSpecError) as refused:
        render_cluster(_cluster(secretName=None))
    message = str(refused.value)
    assert "spec.security.tls.secretName" in message
    assert "*.prod-broker-0-headless.default.svc.cluster.local" in message


def test_health_reports_read_the_controllers_over_https_trusting_the_ca() -> None:
    data = _cluster().model_dump(mode="json", by_alias=True)
    data["spec"]["healthReports"] = {"schedule": "0 * * * *"}
    objects = render_cluster(RocketCluster.model_validate(data))
    [cron] = [o for o in objects if o["kind"] == "CronJob"]
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    urls = [a for a in container["args"] if "://" in a]
    assert urls and all(u.startswith("https://prod-controller-") for u in urls)
    assert {"name": "SSL_CERT_FILE", "value": f"{TLS_DIR}/ca.crt"} in container["env"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"] == {
        "secretName": "prod-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],  # never the key
    }
    for version in ("1.27.0", "1.37.0"):
        kubernetes_validate.validate(cron, version, strict=True)

"""``spec.console`` in the model and the CRD: off by default, the image derived from
spec.image like the controllers' and the Spark jobs', and the manifests that cannot
run refused by both with a message that says what to set."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rocketcluster.api.cluster import (
    CONSOLE_PORT,
    RocketCluster,
    ServiceType,
    console_image_for,
)
from rocketcluster.e2e.crd_check import crd_problems


def _manifest(console: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketCluster",
        "metadata": {"name": "web"},
        "spec": {"console": console, **spec},
    }


def _model_problems(obj: dict[str, Any]) -> list[str]:
    try:
        RocketCluster.model_validate(obj)
    except ValidationError as exc:
        return [str(e["msg"]) for e in exc.errors()]
    return []


def test_the_console_is_off_unless_enabled() -> None:
    spec = RocketCluster.model_validate({"metadata": {"name": "web"}}).spec
    assert spec.console.enabled is False
    assert spec.console.replicas == 1
    assert spec.console.service.type is ServiceType.CLUSTER_IP
    assert spec.console.service.port == CONSOLE_PORT == 8090
    assert spec.console.ingress.enabled is False and spec.console.ingress.path == "/"
    assert spec.console.resources.requests == {"cpu": "50m", "memory": "128Mi"}
    assert crd_problems(_manifest({})) == []


def test_a_full_console_section_is_accepted_by_crd_and_model() -> None:
    console = {
        "enabled": True,
        "replicas": 2,
        "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}},
        "service": {
            "type": "LoadBalancer",
            "port": 443,
            "annotations": {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"},
        },
        "ingress": {
            "enabled": True,
            "host": "console.example.com",
            "className": "nginx",
            "path": "/rocket",
            "tlsSecretName": "console-tls",
            "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        },
    }
    obj = _manifest(console)
    assert crd_problems(obj) == []
    parsed = RocketCluster.model_validate(obj).spec.console
    assert parsed.ingress.class_name == "nginx" and parsed.ingress.tls_secret_name == "console-tls"
    assert parsed.service.type is ServiceType.LOAD_BALANCER


def test_the_image_is_the_console_twin_of_the_brokers_unless_given() -> None:
    assert console_image_for("ghcr.io/acme/rocketcluster-broker:1.2.3") == (
        "ghcr.io/acme/rocketcluster-console:1.2.3"
    )
    assert console_image_for("rocketcluster-broker") == "rocketcluster-console"
    assert console_image_for("ghcr.io/acme/rocketcluster-broker@sha256:" + "0" * 64) is None
    assert console_image_for("registry.example/acme/messaging:2.0") is None
    released = RocketCluster.model_validate(_manifest({"enabled": True})).spec
    assert released.console_image() == "ghcr.io/rocketcluster/rocketcluster-console:0.1.0"
    own = _manifest(
        {"enabled": True, "image": "registry.example/acme/console:2.0"},
        image="registry.example/acme/messaging:2.0",
    )
    assert crd_problems(own) == []
    assert RocketCluster.model_validate(own).spec.console_image() == (
        "registry.example/acme/console:2.0"
    )


def test_an_ingress_without_a_host_is_refused_by_both() -> None:
    obj = _manifest({"enabled": True, "ingress": {"enabled": True}})
    message = (
        "ingress.enabled needs ingress.host: the host name the console is served at "
        "(e.g. console.example.com)"
    )
    assert crd_problems(obj) == [f".spec.console.ingress: {message}"]
    assert _model_problems(obj) == [f"Value error, {message}"]
    # An empty host is no host either.
    assert crd_problems(_manifest({"ingress": {"enabled": True, "host": ""}})) != []
    assert _model_problems(_manifest({"ingress": {"enabled": True, "host": ""}})) != []


def test_a_standalone_cluster_may_have_a_console() -> None:
    # No controllers: the console reads the brokers alone (each group its own master).
    obj = _manifest(
        {"enabled": True}, controller={"replicas": 0}, brokers={"groups": 1, "replicas": 1}
    )
    assert crd_problems(obj) == [] and _model_problems(obj) == []


def test_a_foreign_broker_image_needs_a_console_image() -> None:
    obj = _manifest({"enabled": True}, image="registry.example/acme/messaging:2.0")
    problems = crd_problems(obj)
    assert problems == [
        ".spec: console.image is needed when spec.image is not a rocketcluster-broker image "
        "by tag (its rocketcluster-console twin cannot be derived)"
    ]
    (model,) = _model_problems(obj)
    assert "console.image is needed" in model and "registry.example/acme/messaging:2.0" in model


@pytest.mark.parametrize(
    ("console", "field"),
    [
        ({"replicas": 0}, "replicas"),
        ({"replicas": 11}, "replicas"),
        ({"service": {"type": "ExternalName"}}, "type"),
        ({"service": {"port": 70000}}, "port"),
        ({"ingress": {"host": "Console.Example.com"}}, "host"),
        ({"ingress": {"host": "console.example.com", "path": "rocket"}}, "path"),
        ({"ingress": {"tlsSecretName": "Not_A_Name"}}, "tlsSecretName"),
        ({"sessionSeconds": 60}, "sessionSeconds"),
    ],
)
def test_out_of_range_values_are_refused_by_both(console: dict[str, Any], field: str) -> None:
    obj = _manifest(console)
    problems = crd_problems(obj)
    assert problems and any(field in p for p in problems), problems
    with pytest.raises(ValidationError):
        RocketCluster.model_validate(obj)


def test_wildcard_ingress_hosts_are_accepted() -> None:
    obj = _manifest({"enabled": True, "ingress": {"enabled": True, "host": "*.example.com"}})
    assert crd_problems(obj) == [] and _model_problems(obj) == []

"""``spec.security.tls`` in the CRD: Kubernetes refuses TLS without the Secret that
holds the certificates (the model accepts it: rocketctl local makes its own CA)."""

from __future__ import annotations

from typing import Any

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.e2e.crd_check import crd_problems


def _manifest(tls: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "rocketcluster.io/v1alpha1",
        "kind": "RocketCluster",
        "metadata": {"name": "sec"},
        "spec": {"security": {"tls": tls}},
    }


def test_tls_without_secret_is_refused_by_the_crd_only() -> None:
    refused = _manifest({"enabled": True})
    assert crd_problems(refused) == [
        ".spec.security.tls: enabled needs secretName in Kubernetes: a Secret with "
        "tls.crt, tls.key and ca.crt (what a cert-manager Certificate writes)"
    ]
    RocketCluster.model_validate(refused)  # local mode: fine
    assert crd_problems(_manifest({"enabled": True, "secretName": "sec-tls"})) == []
    assert crd_problems(_manifest({"enabled": False})) == []

"""``spec.security.tls`` in Kubernetes: the Secret named by ``secretName`` (``tls.crt``,
``tls.key``, ``ca.crt`` — what a cert-manager Certificate writes) mounted read-only in
every broker and controller pod, its paths in their process configs, HTTPS probes and
an HTTPS PodMonitor that trusts ``ca.crt``.

One Secret serves every pod, so its certificate must name every address peers dial
(``dns_names``): the controller members' and groups' Services, and each replica
through its group's headless Service. A Secret volume follows rewrites of the Secret
(cert-manager renewals) and the processes reload the files at their next handshake:
no restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.tls import TlsFiles

TLS_DIR: Final = "/etc/rocketcluster/tls"
VOLUME: Final = "tls"
CA_KEY: Final = "ca.crt"
CERT_KEY: Final = "tls.crt"
KEY_KEY: Final = "tls.key"
# Owner and group read (the pods run with fsGroup = their uid): the key stays private.
FILE_MODE: Final = 0o440


class TlsSpecError(ValueError):
    """``spec.security.tls`` cannot be rendered as given; says what to set."""


def enabled(cluster: RocketCluster) -> bool:
    return cluster.spec.security.tls.enabled


def secret_name(cluster: RocketCluster) -> str:
    name = cluster.spec.security.tls.secret_name
    if not name:
        raise TlsSpecError(
            f"{cluster.name}: spec.security.tls.enabled needs spec.security.tls.secretName "
            f"in Kubernetes: a Secret in namespace {cluster.metadata.namespace} with "
            f"{CERT_KEY}, {KEY_KEY} and {CA_KEY} (a cert-manager Certificate writes these) "
            f"whose certificate names {', '.join(dns_names(cluster))}"
        )
    return name


def files(cluster: RocketCluster) -> TlsFiles | None:
    """The process configs' ``tls``: the mounted Secret's files, or None when off."""
    if not enabled(cluster):
        return None
    secret_name(cluster)  # refuse early, with the names the certificate needs
    return TlsFiles(
        ca_file=Path(TLS_DIR) / CA_KEY,
        cert_file=Path(TLS_DIR) / CERT_KEY,
        key_file=Path(TLS_DIR) / KEY_KEY,
    )


def dns_names(cluster: RocketCluster) -> list[str]:
    """What the shared certificate must name: every Service of the namespace (the
    controller members and the groups' client endpoints) and every broker replica (one
    wildcard per group's headless Service: a wildcard covers one label)."""
    ns = cluster.metadata.namespace
    names = [f"*.{ns}.svc.{kube.CLUSTER_DOMAIN}", f"*.{ns}.svc"]
    for g in range(cluster.spec.brokers.groups):
        headless = kube.headless_service_name(kube.broker_group_name(cluster.name, g))
        names.append(f"*.{headless}.{ns}.svc.{kube.CLUSTER_DOMAIN}")
    return names


def server_name(cluster: RocketCluster) -> str:
    """A name the shared certificate covers, for clients that dial pod IPs (Prometheus,
    the operator): any pod presents the same certificate."""
    ns = cluster.metadata.namespace
    if cluster.spec.controller.replicas > 0:
        return kube.service_host(kube.controller_member_name(cluster.name, 0), ns)
    return kube.service_host(kube.broker_group_name(cluster.name, 0), ns)


def ca_item() -> dict[str, str]:
    """The Secret volume item of the CA alone (for pods that only verify)."""
    return {"key": CA_KEY, "path": CA_KEY}


def add_to_pod(cluster: RocketCluster, pod_spec: dict[str, Any]) -> None:
    """Mount the Secret in the pod's container and probe it over HTTPS (the kubelet
    does not verify the certificate; it only needs the scheme)."""
    if not enabled(cluster):
        return
    pod_spec["volumes"].append(
        {
            "name": VOLUME,
            "secret": {"secretName": secret_name(cluster), "defaultMode": FILE_MODE},
        }
    )
    for container in pod_spec["containers"]:
        container["volumeMounts"].append({"name": VOLUME, "mountPath": TLS_DIR, "readOnly": True})
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if probe in container and "httpGet" in container[probe]:
                container[probe]["httpGet"]["scheme"] = "HTTPS"


def scrape_endpoint(cluster: RocketCluster) -> dict[str, Any]:
    """PodMonitor endpoint fields: HTTPS, trusting ``ca.crt`` of the same Secret."""
    if not enabled(cluster):
        return {}
    return {
        "scheme": "https",
        "tlsConfig": {
            "ca": {"secret": {"name": secret_name(cluster), "key": CA_KEY}},
            "serverName": server_name(cluster),
        },
    }

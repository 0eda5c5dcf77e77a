"""The canary of a RocketCluster (``spec.canary``): ``rocketctl canary`` in a small
Deployment that sends a message through every broker group's client Service every
few seconds and receives it back, exporting ``rocketmq_canary_*`` per group (latency
histogram, probe results, success ratio, last success) on ``/metrics`` (port 8091,
plain HTTP). For ``enabled: true`` the operator renders:

- a **ConfigMap** ``<cluster>-canary`` with ``canary.json`` (a
  :class:`~rocketcluster.api.canary_config.CanaryConfig`): every group of the spec at
  its client Service, the CA with TLS on, the canary user's credentials with auth on.
  The canary re-reads the file when the kubelet updates it, so a scale-out's group is
  probed without a restart (the config is not part of the pod hash);
- a **Deployment** ``<cluster>-canary``, one replica, ``Recreate`` (two canaries at
  once would receive each other's messages), from the brokers' image (it carries
  rocketctl, the client library, prometheus-client and uvicorn: no image to build or
  pull), non-root, read-only root filesystem, no service account token (it calls no
  Kubernetes API), ``/healthz`` and ``/readyz`` probes, Prometheus' scrape
  annotations; the cluster's PodMonitor selects it too (render/monitoring.py).

Why a Deployment and not a task of the operator: it keeps measuring while the
operator is down or changing leader — when an in-operator canary would go blind — and
it measures from where applications sit: through the same Services and the same
NetworkPolicies, with its own resources and liveness. A stuck probe cannot delay a
reconciliation, and the operator's image needs no client library.

Beside the objects, with the canary on: its topic and consumer group go into the
catalogue with the manifest's (reconcile.py, :func:`catalogue_entries`), the user
``rocketcluster-canary`` is kept with the others when auth is on (users.py,
:func:`canary_user`), and a scale-in's drain ignores the canary's messages
(:func:`drain_ignores`). Every object carries the component label ``canary``: the
reconciler deletes them when the canary is switched off (:data:`KINDS`, prune.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from rocketcluster.api import kube
from rocketcluster.api.auth import SECRET_KEY
from rocketcluster.api.canary_config import (
    CANARY_USER,
    CanaryConfig,
    CanaryCredentials,
    CanaryGroup,
)
from rocketcluster.api.canary_config import catalogue_entries as _entries
from rocketcluster.api.catalogue import canonical_spec
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.names import dlq_topic, retry_topic
from rocketcluster.api.user_resource import user_secret_name
from rocketcluster.api.users import Action, PermissionSpec, UserSpec
from rocketcluster.operator.render import auth, pods, tls
from rocketcluster.operator.render.brokers import client_endpoint, group_names
from rocketcluster.operator.render.meta import K8sObject, metadata, selector_labels

COMPONENT: Final = "canary"
# What the reconciler lists to find objects no longer rendered (prune.py).
KINDS: Final = (("v1", "ConfigMap"), ("apps/v1", "Deployment"))
PORT: Final = 8091
PORT_NAME: Final = "canary-http"
CONFIG_FILE: Final = "canary.json"
CONFIG_PATH: Final = f"{kube.CONFIG_DIR}/{CONFIG_FILE}"
CREDENTIALS_DIR: Final = f"{auth.AUTH_ROOT}/canary"
CREDENTIALS_VOLUME: Final = "canary-credentials"
GRACE_SECONDS: Final = 15


def name(cluster: RocketCluster) -> str:
    """The ConfigMap and the Deployment: ``<cluster>-canary``."""
    return f"{cluster.name}-canary"


def enabled(cluster: RocketCluster) -> bool:
    return cluster.spec.canary.enabled


def image(cluster: RocketCluster) -> str:
    """``canary.image``, or the brokers' image (which carries ``rocketctl``)."""
    return cluster.spec.canary.image or cluster.spec.image


def canary_user(cluster: RocketCluster) -> UserSpec | None:
    """The user the canary signs as when auth is on: send and receive on its topic,
    receive as its consumer group; None when the canary or auth is off."""
    if not (enabled(cluster) and auth.enabled(cluster)):
        return None
    spec = cluster.spec.canary
    return UserSpec(
        name=CANARY_USER,
        permissions=[
            PermissionSpec(topic=spec.topic, actions=[Action.PUB, Action.SUB]),
            PermissionSpec(group=spec.consumer_group, actions=[Action.SUB]),
        ],
    )


def catalogue_entries(cluster: RocketCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(topics, consumer groups) the canary needs in the catalogue, canonical; none
    when it is off, and not one the manifest declares itself (the manifest's wins)."""
    if not enabled(cluster):
        return [], []
    spec = cluster.spec.canary
    topic, group = _entries(spec.topic, spec.consumer_group)
    declared_topics = {t.name for t in cluster.spec.topics}
    declared_groups = {g.name for g in cluster.spec.consumer_groups}
    return (
        [canonical_spec(topic)] if topic.name not in declared_topics else [],
        [canonical_spec(group)] if group.name not in declared_groups else [],
    )


def drain_ignores(cluster: RocketCluster) -> tuple[frozenset[str], frozenset[str]]:
    """(topics, consumer groups) a scale-in's drain does not wait for: the canary's
    topic and its dead-letter topic, and its consumer group. A drained group refuses
    the canary's sends (the canary skips it), and what little it may hold is probes."""
    spec = cluster.spec.canary
    if not enabled(cluster):
        return frozenset(), frozenset()
    topics = {spec.topic, dlq_topic(spec.consumer_group), retry_topic(spec.consumer_group)}
    return frozenset(topics), frozenset({spec.consumer_group})


def _credentials(cluster: RocketCluster) -> CanaryCredentials | None:
    if canary_user(cluster) is None:
        return None
    return CanaryCredentials(
        access_key=CANARY_USER, secret_key_file=Path(CREDENTIALS_DIR) / SECRET_KEY
    )


def config(cluster: RocketCluster) -> CanaryConfig:
    """``canary.json``: what the canary reads (and re-reads when it changes)."""
    spec = cluster.spec.canary
    return CanaryConfig(
        cluster=cluster.name,
        groups=[
            CanaryGroup(name=g, endpoint=client_endpoint(cluster, g)) for g in group_names(cluster)
        ],
        topic=spec.topic,
        consumer_group=spec.consumer_group,
        interval_seconds=spec.interval_seconds,
        timeout_seconds=spec.timeout_seconds,
        ca_file=Path(tls.TLS_DIR) / tls.CA_KEY if tls.enabled(cluster) else None,
        credentials=_credentials(cluster),
    )


def config_map(cluster: RocketCluster) -> K8sObject:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(cluster, name(cluster), COMPONENT),
        "data": {CONFIG_FILE: config(cluster).model_dump_json(by_alias=True, indent=2)},
    }


def scrape_annotations() -> dict[str, str]:
    """Prometheus' kubernetes-pods discovery convention, on the canary's own port."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(PORT),
        "prometheus.io/path": "/metrics",
    }


def _volumes(cluster: RocketCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": name(cluster)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": kube.CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if tls.enabled(cluster):  # ca.crt alone: the canary presents no certificate
        secret = {"secretName": tls.secret_name(cluster), "items": [tls.ca_item()]}
        volumes.append({"name": tls.VOLUME, "secret": secret})
        mounts.append({"name": tls.VOLUME, "mountPath": tls.TLS_DIR, "readOnly": True})
    if canary_user(cluster) is not None:  # its secret key alone, from its user Secret
        secret = {
            "secretName": user_secret_name(cluster.name, CANARY_USER),
            "items": [{"key": SECRET_KEY, "path": SECRET_KEY}],
        }
        volumes.append({"name": CREDENTIALS_VOLUME, "secret": secret})
        mounts.append({"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_DIR, "readOnly": True})
    return volumes, mounts


def _container(cluster: RocketCluster, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    # Neither probe looks at the brokers: a canary whose probes fail is working.
    return pods.web_container(
        "canary",
        image(cluster),
        cluster.spec.image_pull_policy.value,
        ["rocketctl", "canary", "--config", CONFIG_PATH, "--listen", f"0.0.0.0:{PORT}"],
        (PORT_NAME, PORT),
        mounts,
        cluster.spec.canary.resources,
    )


def deployment(cluster: RocketCluster) -> K8sObject:
    selector = selector_labels(cluster, COMPONENT)
    volumes, mounts = _volumes(cluster)
    # The canary calls no Kubernetes API: no token in the pod.
    spec = pods.tokenless_pod_spec(
        cluster.spec.placement,
        _container(cluster, mounts),
        volumes,
        GRACE_SECONDS,
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(cluster, name(cluster), COMPONENT),
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 3,
            # Never two canaries at once: they share the consumer group, and each
            # would receive (and ignore) some of the other's messages.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": {**selector, kube.LABEL_PART_OF: "rocketcluster"},
                    "annotations": scrape_annotations(),
                },
                "spec": spec,
            },
        },
    }


def render(cluster: RocketCluster) -> list[K8sObject]:
    """Nothing unless ``spec.canary.enabled``; else its ConfigMap and Deployment."""
    if not enabled(cluster):
        return []
    return [config_map(cluster), deployment(cluster)]

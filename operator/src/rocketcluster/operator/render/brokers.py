"""Broker groups: one StatefulSet per group (OnDelete — only the operator's roller
replaces pods, in its order), a headless Service that names every replica, a client
Service that selects whichever pod is master (each broker labels its own pod), a
ConfigMap with one config file per replica, and two PodDisruptionBudgets (the master;
the other replicas). Tiered storage adds to the broker pods only: S3 credentials from
the named Secret as environment variables, or the posix backend's shared claim
mounted at its path."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rocketcluster.api import kube
from rocketcluster.api.broker_config import (
    ADMIN_PORT,
    CLIENT_PORT,
    HA_PORT,
    BrokerProcessConfig,
    s3_credential_env,
)
from rocketcluster.api.cluster import BrokersSpec, ResourcesSpec, RocketCluster
from rocketcluster.api.process_settings import broker_settings
from rocketcluster.api.tiered_spec import TieredBackend
from rocketcluster.operator.orchestrate.compat import Gate, for_group
from rocketcluster.operator.render import auth, pods, tls
from rocketcluster.operator.render.controllers import member_addresses
from rocketcluster.operator.render.hashing import pod_hash
from rocketcluster.operator.render.meta import (
    K8sObject,
    metadata,
    selector_labels,
    service_ports,
)

COMPONENT = kube.COMPONENT_BROKER
PORTS = {"client": CLIENT_PORT, "ha": HA_PORT, "admin": ADMIN_PORT}
# Settings a broker takes from the controllers' catalogue once it runs: a change to
# them alone needs no restart (the files only bootstrap a fresh broker).
HOT_SETTINGS = ("routeGroups", "topics", "consumerGroups")
TIER_VOLUME = "tier"


def service_account_name(cluster: RocketCluster) -> str:
    return f"{cluster.name}-broker"


def group_names(cluster: RocketCluster) -> list[str]:
    return [kube.broker_group_name(cluster.name, g) for g in range(cluster.spec.brokers.groups)]


def pod_names(group: str, replicas: int) -> list[str]:
    return [kube.broker_pod_name(group, r) for r in range(replicas)]


def client_endpoint(cluster: RocketCluster, group: str) -> str:
    """The group's endpoint for clients: its Service, which follows the master."""
    return f"{kube.service_host(group, cluster.metadata.namespace)}:{CLIENT_PORT}"


def client_endpoints(cluster: RocketCluster) -> str:
    return ";".join(client_endpoint(cluster, g) for g in group_names(cluster))


def group_selector(cluster: RocketCluster, group: str) -> dict[str, str]:
    return selector_labels(cluster, COMPONENT, **{kube.LABEL_GROUP: group})


def process_config(cluster: RocketCluster, group: str, replica: int) -> BrokerProcessConfig:
    ns = cluster.metadata.namespace
    pod = kube.broker_pod_name(group, replica)
    replicated = cluster.spec.controller.replicas > 0
    settings: dict[str, Any] = {
        **broker_settings(cluster),
        "group": group,
        "broker_id": replica + 1 if replicated else 0,
        "data_dir": Path(kube.DATA_DIR),
        "bind_host": "0.0.0.0",
        "advertised_host": kube.pod_host(pod, kube.headless_service_name(group), ns),
        "group_endpoint": client_endpoint(cluster, group),
        "route_groups": {g: client_endpoint(cluster, g) for g in group_names(cluster)},
        "controllers": member_addresses(cluster) if replicated else [],
    }
    if replicated:  # a broker follows its role on its pod's label: the Service selects it
        settings["label_pod_role"] = True
    settings["tls"] = tls.files(cluster)
    settings["auth"] = auth.process_auth(cluster, users=True)
    return BrokerProcessConfig.model_validate(settings)


def shared_settings(cluster: RocketCluster, group: str) -> dict[str, Any]:
    """What every replica's config holds alike and reads only at start (the pod hash
    covers these): replica 0's file without its own identity and the hot settings."""
    data = process_config(cluster, group, 0).model_dump(mode="json", by_alias=True)
    for key in (*HOT_SETTINGS, "brokerId", "advertisedHost"):
        data.pop(key, None)
    return data


def config_map(cluster: RocketCluster, group: str) -> K8sObject:
    replicas = cluster.spec.brokers.replicas
    data = {
        f"{pod}.json": process_config(cluster, group, r).model_dump_json(by_alias=True, indent=2)
        for r, pod in enumerate(pod_names(group, replicas))
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            cluster, kube.broker_config_name(group), COMPONENT, extra_labels=_group(group)
        ),
        "data": data,
    }


def _group(group: str) -> dict[str, str]:
    return {kube.LABEL_GROUP: group}


def headless_service(cluster: RocketCluster, group: str) -> K8sObject:
    """One DNS name per replica, published before readiness: replicas find their
    master (and the controllers find them) while they catch up."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(
            cluster, kube.headless_service_name(group), COMPONENT, extra_labels=_group(group)
        ),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": group_selector(cluster, group),
            "ports": service_ports(PORTS),
        },
    }


def client_service(cluster: RocketCluster, group: str) -> K8sObject:
    """What the official clients connect to: always the group's current master (a
    standalone group has one broker, which is its master)."""
    selector = group_selector(cluster, group)
    if cluster.spec.controller.replicas > 0:
        selector[kube.LABEL_ROLE] = kube.ROLE_MASTER
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, group, COMPONENT, extra_labels=_group(group)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": service_ports({"client": CLIENT_PORT}),
        },
    }


def tier_env(cluster: RocketCluster) -> list[dict[str, Any]]:
    """S3 credentials from ``tieredStorage.s3.credentialsSecret``, one variable per key
    (the kubelet resolves them: neither the operator nor the config files see them)."""
    tiered = cluster.spec.tiered_storage
    secret = tiered.s3.credentials_secret if tiered.s3 is not None else None
    env = []
    for name, required in s3_credential_env(tiered).items():
        ref: dict[str, Any] = {"name": secret, "key": name}
        if not required:
            ref["optional"] = True
        env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return env


def tier_volume(cluster: RocketCluster) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The shared volume of the posix backend (its claim, mounted at ``posix.path``) as
    (volume, mount); None when the operator mounts nothing."""
    tiered = cluster.spec.tiered_storage
    posix = tiered.posix
    if not tiered.enabled or tiered.backend is not TieredBackend.POSIX or posix is None:
        return None
    if not posix.path.startswith("/"):
        # The CRD refuses it; only `rocketctl render` of a local manifest gets here.
        raise ValueError(
            f"tieredStorage.posix.path {posix.path!r} must be absolute in Kubernetes "
            "(a relative path is for rocketctl local)"
        )
    if posix.claim_name is None:
        return None
    volume = {"name": TIER_VOLUME, "persistentVolumeClaim": {"claimName": posix.claim_name}}
    return volume, {"name": TIER_VOLUME, "mountPath": posix.path}


def broker_resources(brokers: BrokersSpec) -> ResourcesSpec:
    """The manifest's resources; with a number of front processes and no CPU asked
    for, a core each for the store process and every front, so the scheduler places
    the pod where they can run (a CPU limit stays the manifest's: a request above it
    would be refused)."""
    resources = brokers.resources
    fronts = brokers.front_processes
    if not isinstance(fronts, int) or fronts == 0:
        return resources
    if "cpu" in resources.requests or "cpu" in resources.limits:
        return resources
    return resources.model_copy(update={"requests": {**resources.requests, "cpu": str(fronts + 1)}})


def cpu_request_env() -> dict[str, Any]:
    """The container's CPU request, for frontProcesses "auto" when no quota says."""
    return {
        "name": kube.ENV_CPU_REQUEST_MILLIS,
        "valueFrom": {
            "resourceFieldRef": {
                "containerName": "broker",
                "resource": "requests.cpu",
                "divisor": "1m",
            }
        },
    }


def broker_container(cluster: RocketCluster) -> dict[str, Any]:
    container = pods.container(
        cluster,
        "broker",
        ["rocketcluster-broker", "--config", f"{kube.CONFIG_DIR}/$({kube.ENV_POD_NAME}).json"],
        PORTS,
        broker_resources(cluster.spec.brokers),
        cluster.spec.image,
    )
    container["env"] += [cpu_request_env(), *tier_env(cluster)]
    container["volumeMounts"] += auth.volumes(cluster, users=True)[1]
    tier = tier_volume(cluster)
    if tier is not None:
        container["volumeMounts"].append(tier[1])
    return container


def statefulset(cluster: RocketCluster, group: str) -> K8sObject:
    brokers = cluster.spec.brokers
    selector = group_selector(cluster, group)
    spec = pods.pod_spec(
        cluster,
        broker_container(cluster),
        service_account=service_account_name(cluster),
        automount_token=cluster.spec.controller.replicas > 0,
        selector=selector,
        grace_seconds=brokers.termination_grace_period_seconds,
        data_volume=None,
        config_map=kube.broker_config_name(group),
    )
    tier = tier_volume(cluster)
    if tier is not None:
        spec["volumes"].append(tier[0])
    tls.add_to_pod(cluster, spec)
    spec["volumes"] += auth.volumes(cluster, users=True)[0]
    annotations = {
        kube.ANNOTATION_POD_HASH: pod_hash(spec, shared_settings(cluster, group)),
        **pods.scrape_annotations(https=tls.enabled(cluster)),
    }
    storage = brokers.storage
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        claim_spec["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(cluster, group, COMPONENT, extra_labels=_group(group)),
        "spec": {
            "replicas": brokers.replicas,
            "serviceName": kube.headless_service_name(group),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "revisionHistoryLimit": 3,
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": storage.when_deleted.value,
                "whenScaled": storage.when_scaled.value,
            },
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": dict(selector), "annotations": annotations},
                "spec": spec,
            },
            "volumeClaimTemplates": [
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data", "labels": dict(selector)},
                    "spec": claim_spec,
                }
            ],
        },
    }


def master_budget_name(group: str) -> str:
    return f"{group}-master"


def _role_selector(cluster: RocketCluster, group: str, operator: str) -> dict[str, Any]:
    return {
        "matchLabels": group_selector(cluster, group),
        "matchExpressions": [
            {"key": kube.LABEL_ROLE, "operator": operator, "values": [kube.ROLE_MASTER]}
        ],
    }


def disruption_budget(cluster: RocketCluster, group: str) -> K8sObject:
    """The group's replicas other than its master (each broker labels its own pod with
    its role; one not labelled yet counts here): a drain may take one of them away
    while the others keep ``replicas - 2`` up. An integer ``minAvailable``, because
    against ``maxUnavailable`` the disruption controller counts the StatefulSet's
    whole scale and would never allow a disruption of the slaves it selects."""
    replicas = cluster.spec.brokers.replicas
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(cluster, group, COMPONENT, extra_labels=_group(group)),
        "spec": {
            "minAvailable": max(0, replicas - 2),
            "selector": _role_selector(cluster, group, "NotIn"),
        },
    }


def master_disruption_budget(cluster: RocketCluster, group: str) -> K8sObject:
    """The group's master: never evicted while it is master (a group of two or more).
    A drain of its node waits, answered 429, until the operator has switched it over
    to a slave on another node; the old master then relabels itself and falls under
    the group's other budget. The selectors never overlap, so an eviction never meets
    two budgets."""
    replicas = cluster.spec.brokers.replicas
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(
            cluster, master_budget_name(group), COMPONENT, extra_labels=_group(group)
        ),
        "spec": {
            "minAvailable": 1 if replicas >= 2 else 0,
            "selector": _role_selector(cluster, group, "In"),
        },
    }


def pod_label_role_name(cluster: RocketCluster) -> str:
    return f"{service_account_name(cluster)}-pod-label"


def with_running_pods(role: K8sObject, running: Iterable[str]) -> K8sObject:
    """The pod-label Role with the names of broker pods still running added to what
    the spec names: a leaving group's (or replica's) brokers keep labelling their own
    pods until they are gone — a failover during a scale-in's drain must still move
    the group's client Service."""
    rules = [dict(r) for r in role["rules"]]
    named = list(rules[0]["resourceNames"])
    rules[0]["resourceNames"] = named + sorted(set(running) - set(named))
    return {**role, "rules": rules}


def pod_label_rbac(cluster: RocketCluster) -> list[K8sObject]:
    """Least privilege for the role label: get and patch exactly the broker pods of
    this cluster, nothing else (and, while they run, those a scale-in is removing:
    :func:`with_running_pods`)."""
    name = service_account_name(cluster)
    pods_of_cluster = [
        pod
        for group in group_names(cluster)
        for pod in pod_names(group, cluster.spec.brokers.replicas)
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(cluster, name, COMPONENT),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(cluster, pod_label_role_name(cluster), COMPONENT),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "resourceNames": pods_of_cluster,
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(cluster, f"{name}-pod-label", COMPONENT),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"{name}-pod-label",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": name, "namespace": cluster.metadata.namespace}
            ],
        },
    ]


def render_group(cluster: RocketCluster, group: str) -> list[K8sObject]:
    return [
        config_map(cluster, group),
        headless_service(cluster, group),
        client_service(cluster, group),
        statefulset(cluster, group),
        disruption_budget(cluster, group),
        master_disruption_budget(cluster, group),
    ]


def render(cluster: RocketCluster, features: Gate | None = None) -> list[K8sObject]:
    """``features``: the feature gate; a group's objects then hold only what its
    brokers understand (compat.for_group). None: what the spec says."""
    groups = group_names(cluster)
    if not groups:
        return []
    objects = pod_label_rbac(cluster)
    for group in groups:
        spec = cluster if features is None else for_group(cluster, features, group)
        objects += render_group(spec, group)
    return objects

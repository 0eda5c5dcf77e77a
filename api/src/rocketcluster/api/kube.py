"""How a RocketCluster is laid out on Kubernetes: object names, labels, paths and
environment — the contract shared by the operator (which renders the objects), the
brokers (which label their own pod with their role) and the e2e pod realiser.

Names, for cluster ``C`` in namespace ``NS``, controller member ``i`` and broker
group ``g`` (both from 0), replica ``r``:

- controller member: Deployment, Service and PVC ``C-controller-i`` (the PVC with a
  ``-data`` suffix); its config file ``C-controller-i.json`` in ConfigMap
  ``C-controller-config``; reached at ``C-controller-i.NS.svc.cluster.local``;
- broker group ``C-broker-g``: StatefulSet ``C-broker-g`` (pods ``C-broker-g-r``,
  PVCs ``data-C-broker-g-r``), headless Service ``C-broker-g-headless`` (one DNS name
  per pod), client Service ``C-broker-g`` selecting the pod labelled master, config
  files ``C-broker-g-r.json`` in ConfigMap ``C-broker-g-config``.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "rocketcluster.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

# Labels on every object the operator renders.
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_VERSION: Final = "app.kubernetes.io/version"
LABEL_CLUSTER: Final = f"{GROUP}/cluster"
LABEL_GROUP: Final = f"{GROUP}/group"  # a broker group's pods and objects
LABEL_MEMBER: Final = f"{GROUP}/controller-member"  # one controller member's objects
# Kept current by each broker on its own pod ("master", "slave", "no-master",
# "starting"); the group's client Service selects role=master.
LABEL_ROLE: Final = f"{GROUP}/role"
ROLE_MASTER: Final = "master"

# Annotations.
ANNOTATION_POD_HASH: Final = f"{GROUP}/pod-hash"  # what a pod was rendered from
ANNOTATION_RESTART: Final = f"{GROUP}/restart-reason"

MANAGER: Final = "rocketcluster-operator"  # field manager and managed-by label
COMPONENT_CONTROLLER: Final = "controller"
COMPONENT_BROKER: Final = "broker"

# Paths inside a pod.
CONFIG_DIR: Final = "/etc/rocketcluster"
DATA_DIR: Final = "/var/lib/rocketcluster"
SERVICEACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"

# Environment of a pod (the downward API) and the overrides the e2e realiser sets.
ENV_POD_NAME: Final = "POD_NAME"
ENV_POD_NAMESPACE: Final = "POD_NAMESPACE"
ENV_POD_IP: Final = "POD_IP"
# The broker container's CPU request in millicores (the Downward API's
# resourceFieldRef): what frontProcesses "auto" sizes by when the container has no
# CPU quota (broker/front/sizing.py).
ENV_CPU_REQUEST_MILLIS: Final = "ROCKETCLUSTER_CPU_REQUEST_MILLIS"
ENV_KUBE_API_URL: Final = (
    "ROCKETCLUSTER_KUBE_API_URL"  # instead of https://$KUBERNETES_SERVICE_HOST
)
ENV_SERVICEACCOUNT_DIR: Final = "ROCKETCLUSTER_SERVICEACCOUNT_DIR"

CLUSTER_DOMAIN: Final = "cluster.local"


def controller_member_name(cluster: str, index: int) -> str:
    return f"{cluster}-controller-{index}"


def controller_config_name(cluster: str) -> str:
    return f"{cluster}-controller-config"


def broker_group_name(cluster: str, index: int) -> str:
    return f"{cluster}-broker-{index}"


def broker_pod_name(group: str, replica: int) -> str:
    return f"{group}-{replica}"


def headless_service_name(group: str) -> str:
    return f"{group}-headless"


def broker_config_name(group: str) -> str:
    return f"{group}-config"


def service_host(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}"


def pod_host(pod: str, headless_service: str, namespace: str) -> str:
    return f"{pod}.{headless_service}.{namespace}.svc.{CLUSTER_DOMAIN}"


def group_index(cluster: str, group: str) -> int | None:
    """The index of broker group ``group`` of ``cluster``, or None if it is not one."""
    prefix = f"{cluster}-broker-"
    tail = group[len(prefix) :] if group.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None

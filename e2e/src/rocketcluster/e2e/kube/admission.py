"""What the API server adds to and refuses in built-in objects: defaulting and the
immutable-field rules a manifest author (and the operator) trips over on a real
cluster — a StatefulSet's volumeClaimTemplates, a Deployment's selector, a Pod's
spec, a Service's clusterIP, an immutable ConfigMap.

Pure functions on the stored dicts; the emulator calls them on every write. Only
the defaults our controllers and kubectl read are filled in, not every one the Go
types declare.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

from rocketcluster.e2e.kube.resources import ResourceType
from rocketcluster.e2e.kube.schema import FieldError

_STS_MUTABLE = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)


def _default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("imagePullPolicy", "IfNotPresent")
            for port in container.get("ports") or []:
                port.setdefault("protocol", "TCP")
    if spec.get("serviceAccountName"):
        spec.setdefault("serviceAccount", spec["serviceAccountName"])


def _default_template(spec: dict[str, Any]) -> None:
    template = spec.setdefault("template", {})
    _default_pod_spec(template.setdefault("spec", {}))


def apply_defaults(
    rt: ResourceType, obj: dict[str, Any], *, allocate_ip: Callable[[str, str], str]
) -> dict[str, Any]:
    """``obj`` with the server-side defaults of its type. ``allocate_ip(ns, name)``
    gives a Service its ClusterIP (the API server allocates it, not kube-proxy)."""
    obj = copy.deepcopy(obj)
    spec = obj.setdefault("spec", {}) if rt.kind not in _NO_SPEC else None
    if rt.kind == "Namespace":  # set on every write, as the API server does
        meta = obj.setdefault("metadata", {})
        if meta.get("name"):
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    if rt.kind == "Pod" and spec is not None:
        _default_pod_spec(spec)
    elif rt.kind == "Service" and spec is not None:
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        if spec["type"] != "ExternalName":
            if not spec.get("clusterIP"):
                meta = obj.get("metadata", {})
                spec["clusterIP"] = allocate_ip(meta.get("namespace", ""), meta.get("name", ""))
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
    elif rt.kind == "StatefulSet" and spec is not None:
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy["type"] = "RollingUpdate"
            strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
        spec.setdefault("revisionHistoryLimit", 10)
        policy = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
        policy.setdefault("whenDeleted", "Retain")
        policy.setdefault("whenScaled", "Retain")
        _default_template(spec)
    elif rt.kind == "Deployment" and spec is not None:
        spec.setdefault("replicas", 1)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy["type"] = "RollingUpdate"
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxSurge", "25%")
            rolling.setdefault("maxUnavailable", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        _default_template(spec)
    elif rt.kind == "PersistentVolumeClaim" and spec is not None:
        spec.setdefault("volumeMode", "Filesystem")
    elif rt.kind == "Namespace" and spec is not None:
        spec.setdefault("finalizers", ["kubernetes"])
    elif rt.kind == "Secret":
        obj.setdefault("type", "Opaque")
        strings = obj.pop("stringData", None) or {}
        if strings:
            data = dict(obj.get("data") or {})
            for key, value in strings.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = data
    elif rt.kind in ("Job",) and spec is not None:
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        _default_template(spec)
    if spec == {} and rt.kind in _SPEC_OPTIONAL:
        obj.pop("spec", None)
    return obj


# Kinds whose objects have no spec at all, and kinds where an empty one is omitted.
_NO_SPEC = frozenset(
    {
        "ConfigMap",
        "Secret",
        "Endpoints",
        "ServiceAccount",
        "Event",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
    }
)
_SPEC_OPTIONAL = frozenset(
    {"Namespace", "ServiceMonitor", "PodMonitor", "PrometheusRule", "Lease", "PodDisruptionBudget"}
)


def initial_status(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The status an object is created with when its type has a status subresource
    (whatever the client sent is dropped, as the API server does)."""
    if rt.kind == "Pod":
        return {"phase": "Pending", "qosClass": "BestEffort"}
    if rt.kind == "Namespace":
        return {"phase": "Active"}
    if rt.kind == "PersistentVolumeClaim":
        return {"phase": "Pending"}
    if rt.kind == "Service":
        return {"loadBalancer": {}}
    return None


def _image_free(spec: dict[str, Any]) -> dict[str, Any]:
    """A Pod spec without the fields an update may change."""
    out = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for container in out.get(key) or []:
            container.pop("image", None)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        out.pop(key, None)
    return out


def immutable_errors(
    rt: ResourceType, old: dict[str, Any], new: dict[str, Any]
) -> list[FieldError]:
    """The field errors an update of ``old`` into ``new`` gets (empty: allowed)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if rt.kind == "StatefulSet":
        frozen_old = {k: v for k, v in old_spec.items() if k not in _STS_MUTABLE}
        frozen_new = {k: v for k, v in new_spec.items() if k not in _STS_MUTABLE}
        if frozen_old != frozen_new:
            allowed = ", ".join(f"'{k}'" for k in _STS_MUTABLE)
            return [
                FieldError(
                    "spec",
                    "FieldValueForbidden",
                    f"Forbidden: updates to statefulset spec for fields other than "
                    f"{allowed} are forbidden",
                )
            ]
    if rt.kind in ("Deployment", "Job") and old_spec.get("selector") != new_spec.get("selector"):
        return [_immutable("spec.selector", new_spec.get("selector"))]
    if rt.kind == "Service":
        ip = old_spec.get("clusterIP")
        if ip and new_spec.get("clusterIP") not in (ip, None, ""):
            return [_immutable("spec.clusterIP", new_spec.get("clusterIP"))]
    if rt.kind == "Pod":
        before, after = _image_free(old_spec), _image_free(new_spec)
        if not before.get("nodeName"):  # binding sets it once
            after.pop("nodeName", None)
            before.pop("nodeName", None)
        if before != after:
            return [
                FieldError(
                    "spec",
                    "FieldValueForbidden",
                    "Forbidden: pod updates may not change fields other than "
                    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                    "additions to existing tolerations), "
                    "`spec.terminationGracePeriodSeconds`",
                )
            ]
    if rt.kind == "PersistentVolumeClaim":
        before = {k: v for k, v in old_spec.items() if k not in ("resources", "volumeName")}
        after = {k: v for k, v in new_spec.items() if k not in ("resources", "volumeName")}
        if before != after:
            return [
                FieldError(
                    "spec",
                    "FieldValueForbidden",
                    "Forbidden: spec is immutable after creation except "
                    "resources.requests and volumeAttributesClassName for bound "
                    "claims",
                )
            ]
    if rt.kind in ("ConfigMap", "Secret") and old.get("immutable"):
        for key in ("data", "binaryData", "immutable"):
            if old.get(key) != new.get(key):
                return [_immutable(key, None)]
    return []


def _immutable(field: str, value: Any) -> FieldError:
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {value!r}: field is immutable")

"""A container's environment and command line, as kubelet builds them. Pure.

Order and rules follow kubelet: ``envFrom`` sources first (ConfigMap/Secret keys,
with ``prefix``), then ``env`` in order, each value ``$(VAR)``-expanded against what
is already defined; ``valueFrom`` reads the downward API (``fieldRef``,
``resourceFieldRef``), ConfigMap and Secret keys. A missing non-optional source is
a :class:`ConfigError` — kubelet's ``CreateContainerConfigError``, retried until
the source appears. Service links (``<SVC>_SERVICE_HOST`` …) come before all of it
when ``enableServiceLinks`` is on, as in a real pod.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from rocketcluster.e2e.kube.podstatus import HOST_IP
from rocketcluster.e2e.kube.substitute import expand_vars


class ConfigError(ValueError):
    """A reference the container's configuration cannot be built without."""

    reason = "CreateContainerConfigError"  # the container's waiting reason, as kubelet says


def field_value(pod: Mapping[str, Any], path: str, pod_ip: str, node: str) -> str:
    """A downward API ``fieldPath`` of the pod."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str((meta.get(m[1]) or {}).get(m[2], ""))
    values = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or node,
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": HOST_IP,
        "status.hostIPs": HOST_IP,
    }
    if path == "metadata.labels":
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get("labels") or {}).items()))
    if path == "metadata.annotations":
        items = sorted((meta.get("annotations") or {}).items())
        return "\n".join(f'{k}="{v}"' for k, v in items)
    if path not in values:
        raise ConfigError(f"unsupported fieldRef {path!r}")
    return str(values[path])


def _resource_ref(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    resource = ref.get("resource", "")
    kind, _, what = resource.partition(".")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(what)
    if value is None:
        value = (resources.get("limits") or {}).get(what) or ("1" if what == "cpu" else "0")
    return str(value)


def _key_ref(
    kind: str,
    ref: Mapping[str, Any],
    sources: Mapping[str, Mapping[str, Any]],
) -> str | None:
    obj = sources.get(ref.get("name", ""))
    optional = bool(ref.get("optional"))
    key = ref.get("key", "")
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{ref.get("name")}" not found')
    data = _data(kind, obj)
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {ref.get('name')}")
    return data[key]


def _data(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """The string values of a ConfigMap (data, binaryData) or Secret (decoded)."""
    out: dict[str, str] = {}
    if kind == "Secret":
        for k, v in (obj.get("data") or {}).items():
            out[k] = base64.b64decode(v).decode("utf-8", errors="replace")
        for k, v in (obj.get("stringData") or {}).items():
            out[k] = str(v)
        return out
    out.update({k: str(v) for k, v in (obj.get("data") or {}).items()})
    for k, v in (obj.get("binaryData") or {}).items():
        out[k] = base64.b64decode(v).decode("utf-8", errors="replace")
    return out


def service_links(services: list[Mapping[str, Any]]) -> dict[str, str]:
    """Docker-link style variables of the ClusterIP Services of the pod's namespace."""
    out: dict[str, str] = {}
    for svc in services:
        spec = svc.get("spec") or {}
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        prefix = svc["metadata"]["name"].upper().replace("-", "_")
        out[f"{prefix}_SERVICE_HOST"] = ip
        out[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port"))
        for port in ports:
            if port.get("name"):
                pname = port["name"].upper().replace("-", "_")
                out[f"{prefix}_SERVICE_PORT_{pname}"] = str(port.get("port"))
        first = ports[0]
        proto = str(first.get("protocol", "TCP")).lower()
        out[f"{prefix}_PORT"] = f"{proto}://{ip}:{first.get('port')}"
    return out


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    configmaps: Mapping[str, Mapping[str, Any]],
    secrets: Mapping[str, Mapping[str, Any]],
    pod_ip: str,
    node: str,
    base: Mapping[str, str],
) -> dict[str, str]:
    """The container's variables on top of ``base`` (service links, the API server
    variables, PATH…). Raises :class:`ConfigError` for a missing source."""
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, ref_key, sources in (
            ("ConfigMap", "configMapRef", configmaps),
            ("Secret", "secretRef", secrets),
        ):
            ref = source.get(ref_key)
            if ref is None:
                continue
            obj = sources.get(ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind} "{ref.get("name")}" not found')
            for k, v in _data(kind, obj).items():
                env[prefix + k] = v
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand_vars(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = field_value(pod, source["fieldRef"]["fieldPath"], pod_ip, node)
        elif "resourceFieldRef" in source:
            value = _resource_ref(container, source["resourceFieldRef"])
        elif "configMapKeyRef" in source:
            value = _key_ref("ConfigMap", source["configMapKeyRef"], configmaps)
        elif "secretKeyRef" in source:
            value = _key_ref("Secret", source["secretKeyRef"], secrets)
        else:
            raise ConfigError(f"env {name}: unsupported valueFrom {sorted(source)}")
        if value is not None:
            env[name] = value
    return env


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args``, ``$(VAR)``-expanded. Process mode has no image
    entrypoint to fall back on, so a container without ``command`` is refused."""
    command = list(container.get("command") or [])
    if not command:
        raise ConfigError(
            f"container {container.get('name')!r} has no command: process mode cannot run an "
            f"image's entrypoint ({container.get('image')!r}); give it a command"
        )
    argv = command + list(container.get("args") or [])
    return [expand_vars(str(a), dict(env)) for a in argv]

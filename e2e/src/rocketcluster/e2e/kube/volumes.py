"""A pod's volumes as host directories.

- ``configMap`` / ``secret`` (decoded) / ``downwardAPI`` / ``projected`` (configMap,
  secret, downwardAPI, serviceAccountToken sources): files computed by
  :func:`volume_files` (pure), written by :func:`write_files` — each file atomically,
  stale keys removed — and rewritten whenever their content changes (the realiser
  asks again when a ConfigMap, Secret, claim, DNS name or the pod's labels changed),
  like kubelet's sync without its delay. ConfigMap and Secret file contents go
  through the pod's :class:`Substitution` (paths, DNS names, ``0.0.0.0``);
- ``persistentVolumeClaim``: ``DIR/volumes/<ns>/<claim>``, which outlives the pod
  and is removed only with the claim object;
- ``emptyDir``: a directory of this pod instance, gone with it;
- ``hostPath``: the path itself.

``subPath`` mounts resolve to a path inside the volume's directory.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rocketcluster.e2e.kube.atomic import write_atomic
from rocketcluster.e2e.kube.podenv import ConfigError, field_value

# What a pod mounts when its node has no token source (tests of the files alone);
# the realiser mounts the ServiceAccount's own token, minted by TokenRequest.
TOKEN = "rocketcluster-emulator-token"

Files = dict[str, tuple[bytes, bool]]  # relative path → (content, substitute it?)


def _keyed(
    kind: str,
    source: Mapping[str, Any],
    objects: Mapping[str, Mapping[str, Any]],
    name_key: str,
) -> Files:
    name = source.get(name_key, "")
    obj = objects.get(name)
    if obj is None:
        if source.get("optional"):
            return {}
        raise ConfigError(f'{kind} "{name}" not found')
    if kind == "Secret":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    else:  # text keys as written; binaryData decoded once, to the bytes it holds
        data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    items = source.get("items")
    if not items:
        return {k: (v, True) for k, v in data.items()}
    out: Files = {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise ConfigError(f"configmap/secret {name}: no key {item['key']!r}")
        out[item.get("path", item["key"])] = (data[item["key"]], True)
    return out


def _downward(
    items: list[Mapping[str, Any]], pod: Mapping[str, Any], pod_ip: str, node: str
) -> Files:
    out: Files = {}
    for item in items:
        if "fieldRef" in item:
            value = field_value(pod, item["fieldRef"]["fieldPath"], pod_ip, node)
        else:
            value = "0"
        out[item["path"]] = (value.encode(), False)
    return out


def volume_files(
    volume: Mapping[str, Any],
    *,
    pod: Mapping[str, Any],
    configmaps: Mapping[str, Mapping[str, Any]],
    secrets: Mapping[str, Mapping[str, Any]],
    pod_ip: str,
    node: str,
    token: str = TOKEN,
) -> Files | None:
    """The files of a content volume; None for directory volumes. ``node`` is what
    ``spec.nodeName`` reads as while the pod has none; ``token`` is the pod's
    ServiceAccount token (projected ``serviceAccountToken`` sources)."""
    if "configMap" in volume:
        return _keyed("ConfigMap", volume["configMap"], configmaps, "name")
    if "secret" in volume:
        return _keyed("Secret", volume["secret"], secrets, "secretName")
    if "downwardAPI" in volume:
        return _downward(volume["downwardAPI"].get("items") or [], pod, pod_ip, node)
    if "projected" in volume:
        out: Files = {}
        for source in volume["projected"].get("sources") or []:
            if "configMap" in source:
                out.update(_keyed("ConfigMap", source["configMap"], configmaps, "name"))
            elif "secret" in source:
                out.update(_keyed("Secret", source["secret"], secrets, "name"))
            elif "downwardAPI" in source:
                items = source["downwardAPI"].get("items") or []
                out.update(_downward(items, pod, pod_ip, node))
            elif "serviceAccountToken" in source:
                out[source["serviceAccountToken"].get("path", "token")] = (token.encode(), False)
        return out
    return None


def claim_dir(root: Path, namespace: str, claim: str) -> Path:
    return root / "volumes" / namespace / claim


def host_dir(volume: Mapping[str, Any], *, root: Path, pod_dir: Path, namespace: str) -> Path:
    """Where a volume lives on the host."""
    if "persistentVolumeClaim" in volume:
        return claim_dir(root, namespace, volume["persistentVolumeClaim"]["claimName"])
    if "hostPath" in volume:
        return Path(str(volume["hostPath"]["path"]))
    return pod_dir / "volumes" / str(volume["name"])


def serviceaccount_files(namespace: str, token: str = TOKEN) -> Files:
    return {
        "token": (token.encode(), False),
        "namespace": (namespace.encode(), False),
        "ca.crt": (b"", False),
    }


def write_files(directory: Path, files: Mapping[str, bytes]) -> None:
    """Make ``directory`` hold exactly ``files`` (relative path → final content):
    a file whose content differs is replaced atomically, one no longer wanted goes.
    Files already right are not touched (a process may be reading them)."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for rel, data in files.items():
        path = directory / rel
        wanted.add(path)
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    for path in list(directory.rglob("*")):
        if path.is_file() and path not in wanted and not path.name.startswith("."):
            path.unlink()


# Kubernetes mounts these read-only, whatever the volumeMount says.
READ_ONLY_KINDS = ("configMap", "secret", "downwardAPI", "projected")


def read_only(volume: Mapping[str, Any]) -> bool:
    return any(kind in volume for kind in READ_ONLY_KINDS)


def open_to_pod(volume: Mapping[str, Any], path: Path, fs_group: int | None) -> None:
    """Let a container that runs as its own user write its volumes, as kubelet does:
    an ``emptyDir`` is world-writable; a claim gets the pod's ``fsGroup`` (group
    owner, group read-write, setgid directories) unless its root already has it
    (``fsGroupChangePolicy: OnRootMismatch``)."""
    if "emptyDir" in volume:
        path.chmod(0o777)
        return
    if "persistentVolumeClaim" not in volume or fs_group is None or not path.is_dir():
        return
    root = path.stat()
    if root.st_gid == fs_group and root.st_mode & 0o2070 == 0o2070:
        return
    for directory, _, files in os.walk(path):
        for item in [Path(directory), *(Path(directory) / f for f in files)]:
            mode = item.lstat().st_mode
            os.chown(item, -1, fs_group, follow_symlinks=False)
            if not item.is_symlink():
                extra = 0o2070 if item.is_dir() else 0o060
                item.chmod((mode & 0o7777) | extra)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def claim_in_use(namespace: str, claim: str, pods: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a pod of the namespace mounts the claim (a protected claim being
    deleted waits for that pod to go, as kubernetes.io/pvc-protection does)."""
    return any(
        p["metadata"]["namespace"] == namespace
        and any(
            (v.get("persistentVolumeClaim") or {}).get("claimName") == claim
            for v in (p.get("spec") or {}).get("volumes") or []
        )
        for p in pods
    )


def binding(claim: Mapping[str, Any], protection: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two patches that bind a new claim to its volume: protect it and name the
    volume; then its status (Bound, with the capacity it asked for)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    finalizers = list(meta.get("finalizers") or [])
    if protection not in finalizers:
        finalizers.append(protection)
    patch = {
        "metadata": {"finalizers": finalizers},
        "spec": {"volumeName": f"pvc-{meta['uid']}"},
    }
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    status = {
        "status": {
            "phase": "Bound",
            "capacity": {"storage": storage},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
        }
    }
    return patch, status

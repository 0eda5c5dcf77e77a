"""Pods from pod templates, as the workload controllers make them: the revision hash
of a template, owner references, and the pod object itself. Pure."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from rocketcluster.e2e.kube import labels

# The alphabet Kubernetes renders hashes and random suffixes in (no vowels, no
# look-alike digits), so names read like a real cluster's.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Mapping[str, Any], length: int = 10) -> str:
    """A stable hash of a pod template (the ``pod-template-hash`` /
    ``controller-revision-hash`` value)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    number = int.from_bytes(digest[:16], "big")
    out = []
    for _ in range(length):
        number, rest = divmod(number, len(SAFE_ALPHABET))
        out.append(SAFE_ALPHABET[rest])
    return "".join(out)


def owner_reference(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    uid = owner["metadata"]["uid"]
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def orphans(
    owner: Mapping[str, Any],
    pods: list[dict[str, Any]],
    member: Callable[[Mapping[str, Any]], bool] = lambda pod: True,
) -> list[dict[str, Any]]:
    """The pods a workload controller adopts (its ``ClaimPods``): live pods of its
    namespace that no controller owns, matching its selector — what a workload
    deleted with ``propagationPolicy: Orphan`` and made again finds."""
    meta = owner["metadata"]
    selector = labels.from_label_selector((owner.get("spec") or {}).get("selector"))
    out = []
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        refs = pmeta.get("ownerReferences") or []
        if (
            pmeta.get("namespace") == meta.get("namespace")
            and not is_terminating(pod)
            and not any(r.get("controller") for r in refs)
            and selector
            and labels.matches(selector, pmeta.get("labels"))
            and member(pod)
        ):
            out.append(pod)
    return out


def adopted(pod: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as it is once its new controller's owner reference is added."""
    meta = dict(pod["metadata"])
    meta["ownerReferences"] = [*(meta.get("ownerReferences") or []), owner_reference(owner)]
    return {**pod, "metadata": meta}


def pod_from_template(
    template: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    owner: Mapping[str, Any],
    labels: Mapping[str, str],
    finalizers: tuple[str, ...] = (),
    hostname: str | None = None,
    subdomain: str | None = None,
    extra_volumes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta_t = template.get("metadata") or {}
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    if extra_volumes:
        names = {v["name"] for v in extra_volumes}
        spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] not in names]
        spec["volumes"] += extra_volumes
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**(meta_t.get("labels") or {}), **labels},
        "ownerReferences": [owner_reference(owner)],
    }
    if meta_t.get("annotations"):
        meta["annotations"] = dict(meta_t["annotations"])
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def is_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def is_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

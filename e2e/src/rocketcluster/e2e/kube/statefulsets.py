"""The StatefulSet controller's decisions, as a pure function of one StatefulSet, its
pods and its claims: :func:`plan_statefulset` returns what to create and delete
now and the status to report; the realiser carries it out and asks again.

It follows the Kubernetes controller's algorithm, in its order:

1. Walk the wanted ordinals upwards. A missing pod is created (its claims first,
   from ``volumeClaimTemplates``, named ``<template>-<sts>-<ordinal>``); a failed or
   succeeded pod is deleted (to be recreated); a terminating pod is waited for.
   Under ``OrderedReady`` the walk stops at the first pod created, terminating or
   not Ready — ordinal n+1 only starts once n is Ready. ``Parallel`` goes on.
2. Condemned pods (ordinals no longer wanted) go from the highest down; under
   ``OrderedReady`` one at a time and only once every wanted pod is Ready.
3. ``RollingUpdate``: once every wanted pod exists and is Ready, the highest-ordinal
   pod (down to ``partition``) whose revision is not the update revision is deleted
   — one at a time — and step 1 recreates it from the new template. ``OnDelete``
   replaces nothing: a pod gets the current template only when it is recreated.
4. Claims follow ``persistentVolumeClaimRetentionPolicy``: ``whenDeleted: Delete``
   gives each claim an owner reference to the StatefulSet (the API server's garbage
   collector deletes them with it); ``whenScaled: Delete`` deletes the claims of
   condemned ordinals once their pod is gone.

Revisions are ``<sts>-<hash of the template>``; pods recreated below the partition
get the *current* revision's template when it is known (``revisions``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.e2e.kube.templates import (
    controlled_by,
    is_finished,
    is_ready,
    is_terminating,
    owner_reference,
    pod_from_template,
    template_hash,
)

REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


@dataclass
class StatefulSetPlan:
    create_claims: list[dict[str, Any]] = field(default_factory=list)
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    delete_claims: list[str] = field(default_factory=list)
    # claim name → the ownerReferences it should have (retention policy changes)
    claim_owners: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)


def revision_of(sts: Mapping[str, Any], template: Mapping[str, Any]) -> str:
    return f"{sts['metadata']['name']}-{template_hash(template)}"


def ordinal_of(sts_name: str, pod_name: str) -> int | None:
    m = re.fullmatch(re.escape(sts_name) + r"-(\d+)", pod_name)
    return int(m[1]) if m else None


def claim_name(template_name: str, sts_name: str, ordinal: int) -> str:
    return f"{template_name}-{sts_name}-{ordinal}"


def _claim(sts: Mapping[str, Any], template: Mapping[str, Any], ordinal: int) -> dict[str, Any]:
    meta = sts["metadata"]
    tmeta = template.get("metadata") or {}
    selector = ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    claim_meta: dict[str, Any] = {
        "name": claim_name(tmeta["name"], meta["name"], ordinal),
        "namespace": meta["namespace"],
        "labels": {**(tmeta.get("labels") or {}), **selector},
    }
    if tmeta.get("annotations"):
        claim_meta["annotations"] = dict(tmeta["annotations"])
    owners = _claim_owners(sts)
    if owners:
        claim_meta["ownerReferences"] = owners
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": claim_meta,
        "spec": dict(template.get("spec") or {}),
    }


def _policy(sts: Mapping[str, Any]) -> dict[str, str]:
    policy = (sts.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}
    return {
        "whenDeleted": policy.get("whenDeleted", "Retain"),
        "whenScaled": policy.get("whenScaled", "Retain"),
    }


def _claim_owners(sts: Mapping[str, Any]) -> list[dict[str, Any]]:
    if _policy(sts)["whenDeleted"] == "Delete":
        return [owner_reference(sts, controller=False)]
    return []


def plan_statefulset(
    sts: Mapping[str, Any],
    pods: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    *,
    revisions: Mapping[str, Mapping[str, Any]] | None = None,
    finalizers: tuple[str, ...] = (),
    ready: Callable[[Mapping[str, Any]], bool] = is_ready,
) -> StatefulSetPlan:
    meta, spec = sts["metadata"], sts.get("spec") or {}
    name, namespace = meta["name"], meta["namespace"]
    replicas = int(spec.get("replicas", 1))
    start = int((spec.get("ordinals") or {}).get("start", 0))
    wanted = range(start, start + replicas)
    monotonic = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
    strategy = spec.get("updateStrategy") or {}
    rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
    partition = int((strategy.get("rollingUpdate") or {}).get("partition", 0)) if rolling else 0
    template = spec.get("template") or {}
    claim_templates = spec.get("volumeClaimTemplates") or []
    update_rev = revision_of(sts, template)
    status = sts.get("status") or {}
    current_rev = status.get("currentRevision") or update_rev
    revisions = revisions or {}

    owned: dict[int, dict[str, Any]] = {}
    for pod in pods:
        ordinal = ordinal_of(name, pod["metadata"]["name"])
        if ordinal is not None and controlled_by(pod, sts):
            owned[ordinal] = pod
    claim_names = {c["metadata"]["name"]: c for c in claims}
    plan = StatefulSetPlan()

    def healthy(pod: Mapping[str, Any]) -> bool:
        return ready(pod) and not is_terminating(pod)

    def new_pod(ordinal: int) -> dict[str, Any]:
        use_rev, use_template = update_rev, template
        below_partition = rolling and ordinal < start + partition
        if below_partition and current_rev != update_rev and current_rev in revisions:
            use_rev, use_template = current_rev, revisions[current_rev]
        pod_name = f"{name}-{ordinal}"
        volumes = [
            {
                "name": t["metadata"]["name"],
                "persistentVolumeClaim": {
                    "claimName": claim_name(t["metadata"]["name"], name, ordinal)
                },
            }
            for t in claim_templates
        ]
        return pod_from_template(
            use_template,
            name=pod_name,
            namespace=namespace,
            owner=sts,
            labels={
                POD_NAME_LABEL: pod_name,
                POD_INDEX_LABEL: str(ordinal),
                REVISION_LABEL: use_rev,
            },
            finalizers=finalizers,
            hostname=pod_name,
            subdomain=spec.get("serviceName") or None,
            extra_volumes=volumes,
        )

    # 1. wanted ordinals, upwards
    blocked = False
    for ordinal in wanted:
        existing = owned.get(ordinal)
        if existing is None:
            for t in claim_templates:
                claim = _claim(sts, t, ordinal)
                if claim["metadata"]["name"] not in claim_names:
                    plan.create_claims.append(claim)
            plan.create_pods.append(new_pod(ordinal))
            if monotonic:
                blocked = True
                break
            continue
        if is_finished(existing) and not is_terminating(existing):
            plan.delete_pods.append(existing["metadata"]["name"])
            blocked = True
            if monotonic:
                break
            continue
        if not healthy(existing):
            blocked = True
            if monotonic:
                break

    # 2. condemned ordinals, downwards
    condemned = sorted((o for o in owned if o not in wanted), reverse=True)
    if condemned and not (monotonic and blocked):
        if monotonic:
            if not any(is_terminating(owned[o]) for o in condemned):
                plan.delete_pods.append(owned[condemned[0]]["metadata"]["name"])
        else:
            plan.delete_pods += [
                owned[o]["metadata"]["name"] for o in condemned if not is_terminating(owned[o])
            ]

    # 3. rolling update, from the highest ordinal down to the partition
    if rolling and not blocked and not condemned:
        for ordinal in reversed(wanted):
            if ordinal < start + partition:
                break
            pod = owned[ordinal]
            labels = pod["metadata"].get("labels") or {}
            if labels.get(REVISION_LABEL) != update_rev and not is_terminating(pod):
                plan.delete_pods.append(pod["metadata"]["name"])
                break
            if not healthy(pod):
                break

    # 4. claims of condemned ordinals, and owner references per the retention policy
    for t in claim_templates:
        tname = t["metadata"]["name"]
        for cname, claim in claim_names.items():
            prefix = f"{tname}-{name}-"
            if not cname.startswith(prefix) or not cname[len(prefix) :].isdigit():
                continue
            ordinal = int(cname[len(prefix) :])
            if _policy(sts)["whenScaled"] == "Delete" and ordinal not in wanted:
                if ordinal not in owned and not claim["metadata"].get("deletionTimestamp"):
                    plan.delete_claims.append(cname)
                continue
            refs = claim["metadata"].get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != meta["uid"]]
            want = others + _claim_owners(sts)
            if [r.get("uid") for r in refs] != [r.get("uid") for r in want]:
                plan.claim_owners[cname] = want

    plan.status = _status(sts, owned, update_rev, current_rev, healthy)
    return plan


def _status(
    sts: Mapping[str, Any],
    owned: dict[int, dict[str, Any]],
    update_rev: str,
    current_rev: str,
    healthy: Callable[[Mapping[str, Any]], bool],
) -> dict[str, Any]:
    replicas = int((sts.get("spec") or {}).get("replicas", 1))

    def revision(pod: Mapping[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)

    ready = sum(1 for p in owned.values() if healthy(p))
    updated = sum(1 for p in owned.values() if revision(p) == update_rev)
    if updated == replicas and len(owned) == replicas and ready == replicas:
        current_rev = update_rev
    current = sum(1 for p in owned.values() if revision(p) == current_rev)
    return {
        "observedGeneration": sts["metadata"].get("generation", 1),
        "replicas": len(owned),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": current,
        "updatedReplicas": updated,
        "currentRevision": current_rev,
        "updateRevision": update_rev,
        "collisionCount": 0,
    }

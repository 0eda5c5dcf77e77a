"""The StatefulSet controller's decisions, as a pure function of one StatefulSet, its
pods and its claims: :func:`plan_statefulset` returns what to create and delete
now and the status to report; the realiser carries it out and asks again.

It follows the Kubernetes controller's algorithm, in its order:

1. Walk the wanted ordinals upwards. A missing pod is created (its claims first,
   from ``volumeClaimTemplates``, named ``<template>-<sts>-<ordinal>``) — but not
   while one of its claims is being deleted: it waits for the claim to go and then
   gets a new one; a pending pod whose claim is missing gets it back; a failed or
   succeeded pod is deleted (to be recreated); a terminating pod is waited for.
   Under ``OrderedReady`` the walk stops at the first pod created, terminating or
   not Ready — ordinal n+1 only starts once n is Ready. ``Parallel`` goes on.
2. Condemned pods (ordinals no longer wanted) go from the highest down; under
   ``OrderedReady`` one at a time, only once every wanted pod is Ready, and an
   unhealthy one only if it is the lowest unhealthy condemned pod.
3. ``RollingUpdate``: the highest-ordinal pod (down to ``partition``) whose
   revision is not the update revision is deleted — one at a time, never past a
   pod that is not Ready — and step 1 recreates it from the new template. Under
   ``OrderedReady`` only once every wanted pod exists and is Ready and none is
   condemned. ``OnDelete`` replaces nothing: a pod gets the new template only when
   it is recreated.
4. Claims follow ``persistentVolumeClaimRetentionPolicy``: ``whenDeleted: Delete``
   gives each claim an owner reference to the StatefulSet (the API server's garbage
   collector deletes them with it); ``whenScaled: Delete`` deletes the claims of
   condemned ordinals once their pod is gone.

Orphaned pods named like its own and matching its selector are adopted first
(``adopt_pods``), as after a deletion with ``propagationPolicy: Orphan``.

Revisions are ``<sts>-<hash of the template>``; pods recreated below the partition
get the *current* revision's template when it is known (``revisions``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.e2e.kube.templates import (
    adopted,
    controlled_by,
    is_finished,
    is_ready,
    is_terminating,
    orphans,
    owner_reference,
    pod_from_template,
    template_hash,
)

REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"


@dataclass
class StatefulSetPlan:
    adopt_pods: list[str] = field(default_factory=list)  # orphans: give them an owner
    create_claims: list[dict[str, Any]] = field(default_factory=list)
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    delete_claims: list[str] = field(default_factory=list)
    # claim name → the ownerReferences it should have (retention policy changes)
    claim_owners: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    # the revision of spec.template, for the caller to remember with it: pods made
    # below a partition during a later update get the then-current revision's template
    update_revision: str = ""


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


def _deleting(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and is_terminating(obj)


def plan_statefulset(
    sts: Mapping[str, Any],
    pods: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    *,
    revisions: Mapping[str, Mapping[str, Any]] | None = None,
    finalizers: tuple[str, ...] = (),
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

    plan = StatefulSetPlan(update_revision=update_rev)
    owned: dict[int, dict[str, Any]] = {}
    for pod in pods:
        ordinal = ordinal_of(name, pod["metadata"]["name"])
        if ordinal is not None and controlled_by(pod, sts):
            owned[ordinal] = pod
    for pod in orphans(sts, pods, lambda p: ordinal_of(name, p["metadata"]["name"]) is not None):
        ordinal = ordinal_of(name, pod["metadata"]["name"])
        if ordinal is not None and ordinal not in owned:
            plan.adopt_pods.append(pod["metadata"]["name"])
            owned[ordinal] = adopted(pod, sts)
    claim_names = {c["metadata"]["name"]: c for c in claims}

    def healthy(pod: Mapping[str, Any]) -> bool:
        return is_ready(pod) and not is_terminating(pod)

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

    def claims_of(ordinal: int) -> list[dict[str, Any]]:
        return [_claim(sts, t, ordinal) for t in claim_templates]

    # 1. wanted ordinals, upwards
    blocked = False
    for ordinal in wanted:
        existing = owned.get(ordinal)
        if existing is None:
            wanted_claims = claims_of(ordinal)
            if any(_deleting(claim_names.get(c["metadata"]["name"])) for c in wanted_claims):
                # "pvc is being deleted": the pod waits for it to go, then gets a new one
                blocked = True
                if monotonic:
                    break
                continue
            plan.create_claims += [
                c for c in wanted_claims if c["metadata"]["name"] not in claim_names
            ]
            plan.create_pods.append(new_pod(ordinal))
            blocked = True
            if monotonic:
                break
            continue
        if is_finished(existing) and not is_terminating(existing):
            plan.delete_pods.append(existing["metadata"]["name"])
            blocked = True
            if monotonic:
                break
            continue
        if (existing.get("status") or {}).get("phase", "Pending") == "Pending":
            # a pending pod whose claim went missing gets it back
            plan.create_claims += [
                c for c in claims_of(ordinal) if c["metadata"]["name"] not in claim_names
            ]
        if not healthy(existing):
            blocked = True
            if monotonic:
                break

    # 2. condemned ordinals, downwards; under OrderedReady one at a time, and an
    # unhealthy one only when it is the first unhealthy pod of the set
    condemned = sorted((o for o in owned if o not in wanted), reverse=True)
    if condemned and not (monotonic and blocked):
        unhealthy = sorted(o for o in condemned if not healthy(owned[o]))
        for o in condemned:
            pod = owned[o]
            if is_terminating(pod):
                if monotonic:
                    break
                continue
            if monotonic and not healthy(pod) and o != unhealthy[0]:
                break
            plan.delete_pods.append(pod["metadata"]["name"])
            if monotonic:
                break

    # 3. rolling update, from the highest ordinal down to the partition: under
    # OrderedReady only once every pod is in place and Ready, under Parallel at once
    if rolling and not (monotonic and (blocked or condemned)):
        for ordinal in reversed(wanted):
            if ordinal < start + partition:
                break
            replica = owned.get(ordinal)
            if replica is None or replica["metadata"]["name"] in plan.delete_pods:
                break  # being made this pass: not healthy yet
            labels = replica["metadata"].get("labels") or {}
            if labels.get(REVISION_LABEL) != update_rev and not is_terminating(replica):
                plan.delete_pods.append(replica["metadata"]["name"])
                break
            if not healthy(replica):
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

    plan.status = _status(sts, owned, update_rev, current_rev, rolling=rolling)
    return plan


def _status(
    sts: Mapping[str, Any],
    owned: dict[int, dict[str, Any]],
    update_rev: str,
    current_rev: str,
    *,
    rolling: bool,
) -> dict[str, Any]:
    """As the controller counts: ``replicas`` every created pod, ``readyReplicas``
    every Running and Ready one (a terminating pod still Ready included), current
    and updated ones by revision among the pods not terminating. ``currentRevision``
    moves to the update revision only under ``RollingUpdate`` once every replica is
    updated and Ready; under ``OnDelete`` it stays where it was, as in Kubernetes."""
    replicas = int((sts.get("spec") or {}).get("replicas", 1))
    created = [p for p in owned.values() if (p.get("status") or {}).get("phase")]

    def revision(pod: Mapping[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)

    running_ready = sum(
        1 for p in created if (p.get("status") or {}).get("phase") == "Running" and is_ready(p)
    )
    live = [p for p in created if not is_terminating(p)]
    updated = sum(1 for p in live if revision(p) == update_rev)
    if rolling and updated == replicas and running_ready == replicas and len(created) == replicas:
        current_rev = update_rev
    current = sum(1 for p in live if revision(p) == current_rev)
    return {
        "observedGeneration": sts["metadata"].get("generation", 1),
        "replicas": len(created),
        "readyReplicas": running_ready,
        "availableReplicas": running_ready,
        "currentReplicas": current,
        "updatedReplicas": updated,
        "currentRevision": current_rev,
        "updateRevision": update_rev,
        "collisionCount": 0,
    }

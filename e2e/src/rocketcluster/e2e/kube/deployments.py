"""The Deployment controller's decisions, as a pure function of one Deployment and
its pods. There is no ReplicaSet in between (the pods are owned by the Deployment
directly), but pods carry the ``pod-template-hash`` label and are named
``<deployment>-<hash>-<5 random>`` as a ReplicaSet would name them.

- ``Recreate``: every old pod is deleted first, and no new pod is created while any
  old pod still exists — including one that is terminating — so the old process is
  gone before the new one starts.
- ``RollingUpdate``: new pods are added while the total stays within
  ``replicas + maxSurge``; old pods are removed (not-Ready ones first) while the
  Ready count stays at least ``replicas - maxUnavailable``.

Orphaned pods matching the selector are adopted (``adopt_pods``), as the
ReplicaSet would adopt them after a deletion with ``propagationPolicy: Orphan``.

The status carries replicas, updated/ready/available/unavailable counts,
``observedGeneration`` and the Available and Progressing conditions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.e2e.kube.podstatus import transition_time
from rocketcluster.e2e.kube.templates import (
    adopted,
    controlled_by,
    is_finished,
    is_ready,
    is_terminating,
    orphans,
    pod_from_template,
    template_hash,
)

HASH_LABEL = "pod-template-hash"


@dataclass
class DeploymentPlan:
    adopt_pods: list[str] = field(default_factory=list)  # orphans: give them an owner
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)


def _scaled(value: Any, replicas: int, *, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = replicas * int(value[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def plan_deployment(
    deploy: Mapping[str, Any],
    pods: list[dict[str, Any]],
    *,
    suffix: Callable[[], str],
    now: str,
    finalizers: tuple[str, ...] = (),
) -> DeploymentPlan:
    """``suffix()`` gives the random part of a new pod's name; ``now`` stamps
    condition transitions."""
    meta, spec = deploy["metadata"], deploy.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    template = spec.get("template") or {}
    pod_hash = template_hash(template)
    strategy = spec.get("strategy") or {}
    adopt = orphans(deploy, pods)
    owned = [p for p in pods if controlled_by(p, deploy)] + [adopted(p, deploy) for p in adopt]
    live = [p for p in owned if not is_terminating(p)]

    def current(p: Mapping[str, Any]) -> bool:
        return (p["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash

    new = [p for p in live if current(p)]
    old = [p for p in owned if not current(p)]  # terminating ones too: Recreate waits
    plan = DeploymentPlan(adopt_pods=[p["metadata"]["name"] for p in adopt])

    def make() -> dict[str, Any]:
        return pod_from_template(
            template,
            name=f"{meta['name']}-{pod_hash}-{suffix()}",
            namespace=meta["namespace"],
            owner=deploy,
            labels={HASH_LABEL: pod_hash},
            finalizers=finalizers,
        )

    def healthy(p: Mapping[str, Any]) -> bool:
        return is_ready(p) and not is_terminating(p)

    # Finished pods of a Deployment are replaced, as a ReplicaSet replaces them.
    for p in new:
        if is_finished(p):
            plan.delete_pods.append(p["metadata"]["name"])
    new = [p for p in new if not is_finished(p)]

    if strategy.get("type") == "Recreate":
        plan.delete_pods += [p["metadata"]["name"] for p in old if not is_terminating(p)]
        if not old:
            plan.create_pods += [make() for _ in range(replicas - len(new))]
    else:
        rolling = strategy.get("rollingUpdate") or {}
        surge = _scaled(rolling.get("maxSurge", "25%"), replicas, round_up=True)
        unavailable = _scaled(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        live_old = [p for p in old if not is_terminating(p)]
        room = replicas + surge - len(new) - len(live_old)
        plan.create_pods += [make() for _ in range(max(0, min(replicas - len(new), room)))]
        available = sum(1 for p in live if healthy(p))
        removable = available - (replicas - unavailable)
        for p in sorted(live_old, key=healthy):  # not-Ready first
            if not healthy(p):
                plan.delete_pods.append(p["metadata"]["name"])
            elif removable > 0:
                plan.delete_pods.append(p["metadata"]["name"])
                removable -= 1
    if len(new) > replicas:  # scaled down: not-Ready first, then the newest
        extra = sorted(new, key=lambda p: (healthy(p), p["metadata"].get("creationTimestamp", "")))
        plan.delete_pods += [p["metadata"]["name"] for p in extra[: len(new) - replicas]]

    plan.status = _status(deploy, live, new, healthy, replicas, now)
    return plan


def _status(
    deploy: Mapping[str, Any],
    live: list[dict[str, Any]],
    new: list[dict[str, Any]],
    healthy: Callable[[Mapping[str, Any]], bool],
    replicas: int,
    now: str,
) -> dict[str, Any]:
    spec = deploy.get("spec") or {}
    strategy = spec.get("strategy") or {}
    unavailable_allowed = 0
    if strategy.get("type") != "Recreate":
        rolling = strategy.get("rollingUpdate") or {}
        unavailable_allowed = _scaled(
            rolling.get("maxUnavailable", "25%"), replicas, round_up=False
        )
    ready = sum(1 for p in live if healthy(p))
    updated = len(new)
    available_ok = ready >= replicas - unavailable_allowed
    complete = updated == replicas and len(live) == replicas and ready == replicas
    old_conditions = {c["type"]: c for c in (deploy.get("status") or {}).get("conditions") or []}

    def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        status = "True" if ok else "False"
        before = old_conditions.get(kind) or {}
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now
            if before.get("reason") != reason
            else before.get("lastUpdateTime", now),
            "lastTransitionTime": transition_time(before, status, now),
        }

    name = deploy["metadata"]["name"]
    return {
        "observedGeneration": deploy["metadata"].get("generation", 1),
        "replicas": len(live),
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(0, replicas - ready),
        "conditions": [
            condition(
                "Available",
                available_ok,
                "MinimumReplicasAvailable" if available_ok else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available_ok
                else "Deployment does not have minimum availability.",
            ),
            condition(
                "Progressing",
                True,
                "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                f'Deployment "{name}" has successfully progressed.'
                if complete
                else f'Deployment "{name}" is progressing.',
            ),
        ],
    }

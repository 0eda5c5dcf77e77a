"""PodDisruptionBudgets as the API server judges an eviction and as the disruption
controller keeps their status: pure functions over the objects, no I/O.

The arithmetic (``pkg/controller/disruption``):

- ``expectedPods``: for an integer ``minAvailable``, the pods the budget selects; for
  ``maxUnavailable`` or a percentage, the scale of the controllers owning them
  (each StatefulSet or Deployment counted once, its ``spec.replicas``);
- ``currentHealthy``: selected pods that are Ready and not being deleted;
- ``desiredHealthy``: ``minAvailable`` (a percentage of ``expectedPods``, rounded
  up), or ``expectedPods - maxUnavailable`` (a percentage rounded up), at least 0;
- ``disruptionsAllowed``: ``currentHealthy - desiredHealthy``, at least 0.

The eviction subresource (``pkg/registry/core/pod/storage/eviction.go``): a pod that
has finished, is Pending or is already being deleted goes without a budget check; a
pod no budget selects is deleted; more than one budget is a 500; a Ready pod needs
``disruptionsAllowed > 0`` (else 429 TooManyRequests with a DisruptionBudget cause);
an unready pod may also go while ``currentHealthy ≥ desiredHealthy > 0`` (the
default ``IfHealthyBudget`` policy), or always under ``AlwaysAllow``. A budget with an empty
selector selects nothing, as in the eviction code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rocketcluster.e2e.kube import labels

VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
MORE_THAN_ONE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource "
    "does not support."
)
# (kind, namespace, name) of a pod's controller -> its spec.replicas, None if unknown
ScaleOf = Callable[[str, str, str], int | None]


@dataclass(frozen=True)
class BudgetStatus:
    expected: int
    current_healthy: int
    desired_healthy: int
    disruptions_allowed: int
    error: str | None = None  # why the numbers could not be had (no controller scale)

    def as_status(self, generation: int) -> dict[str, Any]:
        return {
            "observedGeneration": generation,
            "expectedPods": self.expected,
            "currentHealthy": self.current_healthy,
            "desiredHealthy": self.desired_healthy,
            "disruptionsAllowed": self.disruptions_allowed,
        }


@dataclass(frozen=True)
class Verdict:
    """What the eviction answers: ``code`` 201 means delete the pod (``budget`` names
    the budget that allowed it, if any); otherwise a Status with that code."""

    code: int
    reason: str = ""
    message: str = ""
    causes: tuple[dict[str, str], ...] = ()
    budget: str | None = None

    @property
    def allowed(self) -> bool:
        return self.code == 201


def is_ready(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def is_healthy(pod: Mapping[str, Any]) -> bool:
    """Counted in ``currentHealthy``: Ready and not being deleted."""
    return is_ready(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether ``pdb`` covers ``pod`` (same namespace; an empty selector: nothing)."""
    pod_meta, pdb_meta = pod.get("metadata") or {}, pdb.get("metadata") or {}
    if pod_meta.get("namespace") != pdb_meta.get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    try:
        parsed = labels.from_label_selector(selector)
    except labels.SelectorError:
        return False
    return labels.matches(parsed, pod_meta.get("labels"))


def budgets_of(pod: Mapping[str, Any], pdbs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pdbs if selects(p, pod)]


def _scaled(value: int | str, total: int) -> int:
    """An IntOrString against ``total``: a percentage rounded up."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


def _controller(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def _expected_scale(pods: list[dict[str, Any]], scale_of: ScaleOf) -> tuple[int, str | None]:
    """The summed scale of the selected pods' controllers (each once)."""
    seen: set[tuple[str, str, str]] = set()
    total = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        owner = _controller(pod)
        if owner is None:
            return 0, f"found no controller for pod {meta.get('name')!r}"
        key = (owner[0], str(meta.get("namespace")), owner[1])
        if key in seen:
            continue
        seen.add(key)
        scale = scale_of(*key)
        if scale is None:
            return 0, f"found no scale for {owner[0]} {owner[1]!r} of pod {meta.get('name')!r}"
        total += scale
    return total, None


def budget_status(
    pdb: Mapping[str, Any], pods: list[dict[str, Any]], scale_of: ScaleOf
) -> BudgetStatus:
    """What the disruption controller writes into ``pdb``'s status; ``pods`` may be
    any pods (those the budget selects are counted)."""
    spec = pdb.get("spec") or {}
    selected = [p for p in pods if selects(pdb, p)]
    healthy = sum(1 for p in selected if is_healthy(p))
    max_unavailable = spec.get("maxUnavailable")
    min_available = spec.get("minAvailable")
    error = None
    if max_unavailable is not None:
        expected, error = _expected_scale(selected, scale_of)
        desired = max(0, expected - _scaled(max_unavailable, expected))
    elif min_available is not None:
        if isinstance(min_available, int):
            expected, desired = len(selected), min_available
        else:
            expected, error = _expected_scale(selected, scale_of)
            desired = _scaled(min_available, expected)
    else:  # neither set: the API server defaults minAvailable to 1... of nothing
        expected, desired = len(selected), 0
    if error is not None:
        return BudgetStatus(expected, healthy, desired, 0, error)
    return BudgetStatus(expected, healthy, desired, max(0, healthy - desired))


def judge(
    pod: Mapping[str, Any],
    pdbs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    scale_of: ScaleOf,
) -> Verdict:
    """The eviction of ``pod`` against the budgets of its namespace."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed", "Pending") or meta.get("deletionTimestamp"):
        return Verdict(201)
    mine = budgets_of(pod, pdbs)
    if not mine:
        return Verdict(201)
    if len(mine) > 1:
        return Verdict(500, "InternalError", MORE_THAN_ONE)
    pdb = mine[0]
    name = pdb["metadata"]["name"]
    numbers = budget_status(pdb, pods, scale_of)
    if not is_ready(pod) and numbers.error is None:
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow" or (numbers.current_healthy >= numbers.desired_healthy > 0):
            return Verdict(201, budget=name)
    if numbers.error is None and numbers.disruptions_allowed > 0:
        return Verdict(201, budget=name)
    cause = (
        f"The disruption budget {name} is still being processed by the server."
        if numbers.error is not None
        else f"The disruption budget {name} needs {numbers.desired_healthy} healthy pods "
        f"and has {numbers.current_healthy} currently"
    )
    return Verdict(
        429,
        "TooManyRequests",
        VIOLATION,
        ({"reason": "DisruptionBudget", "message": cause},),
        budget=name,
    )


def conditions(
    numbers: BudgetStatus, old: list[dict[str, Any]] | None, now: str
) -> list[dict[str, Any]]:
    """The DisruptionAllowed condition, its transition time kept while it holds."""
    allowed = numbers.disruptions_allowed > 0
    value = "True" if allowed else "False"
    reason = "SufficientPods" if allowed else "InsufficientPods"
    if numbers.error is not None:
        reason = "SyncFailed"
    before = next((c for c in old or [] if c.get("type") == "DisruptionAllowed"), None)
    since = (
        before.get("lastTransitionTime", now)
        if before is not None and before.get("status") == value
        else now
    )
    return [
        {
            "type": "DisruptionAllowed",
            "status": value,
            "reason": reason,
            "message": numbers.error or "",
            "lastTransitionTime": since,
        }
    ]

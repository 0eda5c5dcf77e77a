"""A drained node's master is switched over first.

``kubectl drain`` cordons a node (``spec.unschedulable``), then evicts its pods
through the eviction subresource. A broker group's master falls under its own
PodDisruptionBudget (``<group>-master``, minAvailable 1: render/brokers.py), so its
eviction is refused (429) for as long as it is master, and kubectl retries. This
decides what the operator does meanwhile, one step per call:

- the group's master runs on a cordoned node, and a slave that is Ready, caught up
  (:meth:`GroupObservation.back_in_sync`) and on a schedulable node can take over:
  SWITCHOVER to it (the preferred one runs the current spec, then by name). The old
  master relabels itself a slave, falls under the group's other budget, and the
  drain evicts it once that budget allows;
- the master is on a cordoned node and no such slave exists (yet): WAIT — a slave
  being replaced, or catching up, becomes one — and BLOCKED once the wait has lasted
  ``stuck_after_s`` (the caller says how long: nothing here keeps time);
- otherwise (no master on a cordoned node, no master known, a standalone group or a
  group of one, whose budget lets the drain take its only broker): DONE, nothing
  for the drain to do.

Pure: the caller acts (the same switchover a roll makes) and calls again with what
it observes next.
"""

from __future__ import annotations

from rocketcluster.operator.orchestrate.broker_roll import STUCK_AFTER_S
from rocketcluster.operator.orchestrate.model import GroupObservation, PodState
from rocketcluster.operator.orchestrate.steps import Step, StepKind, blocked, done, wait


def master_on_cordoned(group: GroupObservation, cordoned: frozenset[str]) -> PodState | None:
    """The group's master, when it runs on a cordoned node (and is not already
    going away)."""
    master = group.master_pod
    if master is None or master.deleting or not master.exists:
        return None
    return master if master.node is not None and master.node in cordoned else None


def successors(group: GroupObservation, cordoned: frozenset[str]) -> list[PodState]:
    """Slaves that may take the master role from a drained master: Ready, caught up
    and on a schedulable node — current spec first, then by name."""
    master = group.master_pod
    found = [
        p
        for p in group.pods
        if p is not master
        and p.exists
        and not p.deleting
        and p.ready
        and p.node is not None
        and p.node not in cordoned
        and group.back_in_sync(p)
    ]
    return sorted(found, key=lambda p: (p.pod_hash != group.desired_hash, p.name))


def next_drain_step(
    group: GroupObservation,
    cordoned: frozenset[str],
    *,
    waiting_for_s: float = 0.0,
    stuck_after_s: float = STUCK_AFTER_S,
) -> Step:
    """``waiting_for_s``: how long this group's master has waited on a cordoned node
    without a successor (the caller's clock)."""
    if not group.replicated or len(group.pods) < 2 or group.view is None:
        return done()
    master = master_on_cordoned(group, cordoned)
    if master is None:
        return done()
    candidates = successors(group, cordoned)
    if not candidates:
        why = (
            f"master {master.name} is on cordoned node {master.node}: no caught-up slave "
            f"on a schedulable node of {group.name} to hand over to"
        )
        if waiting_for_s >= stuck_after_s:
            return blocked(f"{why} for {waiting_for_s:.0f}s")
        return wait(why)
    target = candidates[0]
    return Step(
        StepKind.SWITCHOVER,
        f"master {master.name} is on cordoned node {master.node} (a drain): hand over "
        f"to {target.name} on {target.node}",
        pod=master.name,
        target=target.broker_id,
    )

"""The next step of a broker group's rolling restart.

A pod is *stale* when its pod hash differs from the rendered one. The algorithm, one
step per call (the caller acts, then calls again with what it observes next):

1. Nothing stale: done — unless this group's roll is under way (``rolling``) and a
   replica is not whole again yet (see :func:`settling`): wait, so the next group
   starts only after this one's last restarted pod is ready and back in sync.
2. A pod being deleted, missing (fewer pods than replicas: the StatefulSet has not
   recreated a deleted one yet), or not yet Ready: wait — unless it has been
   unready for longer than ``stuck_after_s`` with the current hash, which blocks the
   roll (a broken pod is a person's problem, not something to restart around).
3. Stale pods that are not Ready and not the master serve nobody: restart them first.
4. The controllers must answer and the group must have a master; otherwise blocked
   (controller unreachable) or wait (an election is running).
5. Every pod already restarted must be back in the SyncStateSet, caught up since it
   became ready (:meth:`GroupObservation.back_in_sync`), before the next one goes:
   wait until it is.
6. A stale slave: restart it, if the SyncStateSet without it still holds
   ``minInSyncReplicas`` — otherwise blocked (never take the group below it).
7. Only the master is stale: hand over to a caught-up slave (in the SyncStateSet,
   Ready, current hash), then restart the old master as a slave on a later call.
   After ``max_switchover_failures`` failed handovers in a row: blocked, with the
   controller's answer. A group of one replica restarts its only broker.
"""

from __future__ import annotations

from rocketcluster.operator.orchestrate.model import Attempts, GroupObservation, PodState
from rocketcluster.operator.orchestrate.steps import (
    RestartReason,
    Step,
    StepKind,
    blocked,
    done,
    wait,
)

STUCK_AFTER_S = 300.0
MAX_SWITCHOVER_FAILURES = 3


def stale(group: GroupObservation) -> list[PodState]:
    return [p for p in group.pods if p.exists and p.pod_hash != group.desired_hash]


def next_group_step(
    group: GroupObservation,
    attempts: Attempts | None = None,
    *,
    rolling: bool = False,
    stuck_after_s: float = STUCK_AFTER_S,
    max_switchover_failures: int = MAX_SWITCHOVER_FAILURES,
    cordoned: frozenset[str] = frozenset(),
) -> Step:
    """``cordoned``: nodes being drained; a master is handed to a slave elsewhere
    when there is one (the drain would move one on a cordoned node next)."""
    attempts = attempts or Attempts()
    todo = stale(group)
    if not todo:
        why = settling(group) if rolling else None
        return wait(why) if why else done()
    pods = sorted(group.pods, key=lambda p: p.name)
    # 2. Anything in motion first settles.
    for pod in pods:
        if pod.deleting or not pod.exists:
            return wait(f"pod {pod.name} is being replaced")
    if missing := _missing(group):
        return wait(missing)
    master = group.master_pod
    for pod in pods:
        if pod.ready or pod in todo:
            continue
        if pod.ready_for_s > stuck_after_s:
            return blocked(
                f"pod {pod.name} has not become ready for {pod.ready_for_s:.0f}s after its "
                f"restart ({pod.restarts} container restarts): see its log"
            )
        return wait(f"pod {pod.name} is starting")
    # 3. Stale and unready: restarting it costs nothing.
    for pod in todo:
        if not pod.ready and pod is not master:
            return Step(
                StepKind.DELETE_POD,
                f"{pod.name} is not ready and runs an old spec",
                pod=pod.name,
                restart=RestartReason.NOT_READY,
            )
    if not group.replicated:
        pod = todo[0]
        return _delete(pod, "standalone broker: restarted in place")
    # 4. The controllers decide who is master; without them, no roll.
    if group.view is None:
        return blocked("the controllers do not answer: the roll waits for them")
    if group.view.master_id is None or master is None:
        return wait(f"group {group.name} has no master (an election is running)")
    # 5. Each restarted replica back in sync before the next.
    for pod in pods:
        if pod not in todo and not group.back_in_sync(pod):
            return wait(f"pod {pod.name} is catching up (not yet back in the SyncStateSet)")
    # 6. Slaves first.
    in_sync = {p.name for p in pods if group.in_sync(p)}
    for pod in todo:
        if pod is master:
            continue
        remaining = len(in_sync - {pod.name})
        if remaining < group.min_in_sync:
            return blocked(
                f"restarting {pod.name} would leave {remaining} in-sync replicas, fewer "
                f"than minInSyncReplicas ({group.min_in_sync})"
            )
        return _delete(pod, f"slave {pod.name} runs an old spec")
    # 7. Only the master is left.
    if len(pods) == 1:
        return _delete(master, "the group's only broker (clients wait for it)")
    failures = attempts.switchover_failures.get(group.name, 0)
    if failures >= max_switchover_failures:
        error = attempts.last_switchover_error.get(group.name, "")
        return blocked(f"switchover of {group.name} failed {failures} times: {error}")
    candidates = [
        p for p in pods if p is not master and p.ready and group.back_in_sync(p) and p not in todo
    ]
    if not candidates:
        return wait(f"no caught-up slave of {group.name} to hand the master role to")
    target = min(candidates, key=lambda p: (p.node is not None and p.node in cordoned, p.name))
    return Step(
        StepKind.SWITCHOVER,
        f"master {master.name} runs an old spec: hand over to {target.name}",
        pod=master.name,
        target=target.broker_id,
    )


def settling(group: GroupObservation) -> str | None:
    """Why a group whose pods all run the current spec is not whole again yet — a
    replica missing, being replaced, not ready, or not back in the SyncStateSet — or
    None. A roll is finished only then: the next group waits for it."""
    for pod in sorted(group.pods, key=lambda p: p.name):
        if pod.deleting or not pod.exists:
            return f"pod {pod.name} is being replaced"
        if not pod.ready:
            return f"pod {pod.name} is starting after its restart"
        if group.replicated and group.view is not None and not group.back_in_sync(pod):
            return f"pod {pod.name} is catching up (not yet back in the SyncStateSet)"
    return _missing(group)


def _missing(group: GroupObservation) -> str | None:
    """A deleted pod vanishes from the API before its StatefulSet recreates it: in
    between, the group simply has fewer pods, and the next one must not go."""
    live = sum(1 for p in group.pods if p.exists)
    if live < group.desired_replicas:
        return f"{live} of {group.desired_replicas} replicas of {group.name} exist"
    return None


def _delete(pod: PodState, reason: str) -> Step:
    return Step(StepKind.DELETE_POD, reason, pod=pod.name, restart=RestartReason.SPEC_CHANGED)

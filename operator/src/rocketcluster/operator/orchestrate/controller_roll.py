"""The next step of the controller members' rolling restart.

A member is *stale* when its Deployment in the API still holds an older template
than the rendered one (applying it is the restart: the Deployment recreates the
pod). One member at a time:

1. Nothing stale: done — unless the roll is under way (``rolling``) and a member is
   not whole again yet (see :func:`settling`): wait, the broker groups roll after.
2. A member whose pod is missing, being replaced or not Ready: wait (blocked after
   ``stuck_after_s``) — the quorum must be whole before anyone goes.
3. No leader agreed by a majority: wait (an election is running).
4. A stale follower: roll it (lowest index first).
5. Only the leader is stale: transfer leadership to a caught-up follower first; it
   goes last, as a follower, on a later call.
"""

from __future__ import annotations

from rocketcluster.operator.orchestrate.model import ControllerObservation
from rocketcluster.operator.orchestrate.steps import Step, StepKind, blocked, done, wait

STUCK_AFTER_S = 300.0


def next_controller_step(
    controllers: ControllerObservation,
    *,
    rolling: bool = False,
    stuck_after_s: float = STUCK_AFTER_S,
) -> Step:
    members = sorted(controllers.members, key=lambda m: m.index)
    todo = [m for m in members if m.applied_hash is not None and m.applied_hash != m.desired_hash]
    if not todo:
        why = settling(controllers) if rolling else None
        return wait(why) if why else done()
    for m in members:
        pod = m.pod
        if pod is None or pod.deleting or not pod.exists:
            return wait(f"controller {m.name} is being replaced")
        if pod.pod_hash != m.applied_hash:
            return wait(f"controller {m.name} is restarting with its new spec")
        if not pod.ready:
            if pod.ready_for_s > stuck_after_s:
                return blocked(
                    f"controller {m.name} has not become ready for {pod.ready_for_s:.0f}s "
                    "(it needs a quorum of members and its volume): see its log"
                )
            return wait(f"controller {m.name} is starting")
    leader = controllers.leader_id
    if leader is None:
        return wait("the controllers are electing a leader")
    for m in todo:
        if m.member_id != leader:
            return Step(
                StepKind.APPLY_MEMBER,
                f"controller {m.name} runs an old spec",
                pod=m.name,
                target=m.member_id,
            )
    followers = [m for m in members if m.member_id != leader and m not in todo]
    if not followers:
        # A single member: it restarts alone (the controllers pause meanwhile).
        only = todo[0]
        return Step(StepKind.APPLY_MEMBER, "the only controller member", only.name, only.member_id)
    return Step(
        StepKind.TRANSFER_LEADERSHIP,
        f"leader {todo[0].name} goes last: leadership moves to {followers[0].name} first",
        pod=todo[0].name,
        target=followers[0].member_id,
    )


def settling(controllers: ControllerObservation) -> str | None:
    """Why the members, all on the current spec, are not whole again yet — a member's
    pod missing, restarting or not ready, or no leader agreed — or None. The broker
    groups roll only after that."""
    for m in sorted(controllers.members, key=lambda m: m.index):
        pod = m.pod
        if pod is None or pod.deleting or not pod.exists or pod.pod_hash != m.applied_hash:
            return f"controller {m.name} is being replaced"
        if not pod.ready:
            return f"controller {m.name} is starting after its restart"
    if controllers.leader_id is None:
        return "the controllers are electing a leader"
    return None

"""From observations and the steps decided to the RocketCluster's status: the
conditions a person (and ``kubectl wait --for=condition=Ready``) reads, and what
the controllers say about every group."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketcluster.api.status import (
    Condition,
    ConditionType,
    ControllerMemberStatus,
    ControllerStatus,
    GroupStatus,
    RocketClusterStatus,
)
from rocketcluster.operator.orchestrate.model import ControllerObservation, GroupObservation
from rocketcluster.operator.orchestrate.steps import Step, StepKind


@dataclass(frozen=True)
class Assessment:
    """Everything the status is computed from."""

    generation: int | None
    image: str
    groups: tuple[GroupObservation, ...]  # the desired groups
    controllers: ControllerObservation | None  # None: standalone
    endpoints: dict[str, str]  # group -> client endpoint
    steps: dict[str, Step] = field(default_factory=dict)  # "controllers" or a group name
    leaving: dict[str, list[str]] = field(default_factory=dict)  # group -> drain problems
    invalid: str | None = None
    # What the cluster runs without and a person should fix: (reason, message).
    notices: tuple[tuple[str, str], ...] = ()


def _cond(kind: ConditionType, ok: bool, reason: str, message: str, gen: int | None) -> Condition:
    return Condition(
        type=kind.value,
        status="True" if ok else "False",
        reason=reason,
        message=message,
        observed_generation=gen,
    )


def _group_status(group: GroupObservation, endpoint: str) -> GroupStatus:
    view = group.view
    names = {p.broker_id: p.name for p in group.pods if p.broker_id is not None}
    master = group.master_pod
    return GroupStatus(
        name=group.name,
        replicas=group.desired_replicas,
        ready_replicas=sum(1 for p in group.pods if p.ready),
        master=master.name if master else None,
        master_broker_id=view.master_id if view else None,
        master_epoch=view.master_epoch if view else None,
        sync_state_set=sorted(names.get(b, f"broker-{b}") for b in view.sync_state_set)
        if view
        else [],
        sync_state_set_epoch=view.sync_state_set_epoch if view else None,
        writable=view.writable if view else True,
        endpoint=endpoint,
    )


def _serving(group: GroupObservation) -> bool:
    if not group.replicated:
        return any(p.ready for p in group.pods)
    return group.master_pod is not None and group.master_pod.ready


def _controller_status(controllers: ControllerObservation) -> ControllerStatus:
    leader = controllers.leader_id
    terms = [m.term for m in controllers.members if m.term is not None]
    return ControllerStatus(
        members=[
            ControllerMemberStatus(
                id=m.member_id,
                name=m.name,
                ready=bool(m.pod and m.pod.ready),
                leader=m.member_id == leader,
            )
            for m in controllers.members
        ],
        leader=leader,
        term=max(terms) if terms else None,
    )


def assess(a: Assessment) -> RocketClusterStatus:
    gen = a.generation
    if a.invalid is not None:
        return RocketClusterStatus(
            observed_generation=gen,
            image=a.image,
            conditions=[
                _cond(ConditionType.READY, False, "InvalidSpec", a.invalid, gen),
                _cond(ConditionType.WARNING, True, "InvalidSpec", a.invalid, gen),
            ],
            operation="waiting for a valid spec",
        )
    serving = [g for g in a.groups if _serving(g)]
    leader = a.controllers.leader_id if a.controllers else None
    ready_problems = [f"group {g.name} has no master" for g in a.groups if g not in serving]
    if a.controllers is not None and leader is None:
        ready_problems.insert(0, "the controllers have no leader")
    steps = [(name, step) for name, step in a.steps.items() if step.kind is not StepKind.DONE]
    blocked = [(n, s) for n, s in steps if s.kind is StepKind.BLOCKED]
    moving = [(n, s) for n, s in steps if s.kind is not StepKind.BLOCKED]
    unhealthy = _health_problems(a)
    warnings = [f"{n}: {s.reason}" for n, s in blocked]
    warnings += [
        f"scale-in of {g} waits: {'; '.join(problems)}"
        for g, problems in a.leaving.items()
        if problems
    ]
    warn_reason = (
        "ScaleDownBlocked"
        if any(a.leaving.values())
        else "ControllerUnreachable"
        if any("controllers do not answer" in s.reason for _, s in blocked)
        else "RollBlocked"
        if warnings or not a.notices
        else a.notices[0][0]
    )
    warnings += [message for _, message in a.notices]
    operation = "; ".join(f"{n}: {s.reason}" for n, s in moving) or (
        f"draining {', '.join(a.leaving)}" if a.leaving else ""
    )
    conditions = [
        _cond(
            ConditionType.READY,
            not ready_problems,
            "AllGroupsServing" if not ready_problems else "NotServing",
            "; ".join(ready_problems) or f"{len(serving)} of {len(a.groups)} groups have a master",
            gen,
        ),
        _cond(
            ConditionType.PROGRESSING,
            bool(moving or a.leaving),
            _progress_reason(moving, a),
            operation or "the cluster matches its spec",
            gen,
        ),
        _cond(
            ConditionType.DEGRADED,
            bool(unhealthy),
            "ReplicasUnhealthy" if unhealthy else "AllReplicasHealthy",
            "; ".join(unhealthy) or "every replica is ready and in sync",
            gen,
        ),
        _cond(
            ConditionType.WARNING,
            bool(warnings),
            warn_reason if warnings else "None",
            "; ".join(warnings),
            gen,
        ),
    ]
    return RocketClusterStatus(
        observed_generation=gen,
        conditions=conditions,
        masters=f"{len(serving)}/{len(a.groups)}",
        controller=_controller_status(a.controllers) if a.controllers else None,
        groups=[_group_status(g, a.endpoints.get(g.name, "")) for g in a.groups],
        client_endpoints=";".join(a.endpoints[g.name] for g in a.groups if g.name in a.endpoints),
        image=a.image,
        operation=operation,
    )


def _progress_reason(moving: list[tuple[str, Step]], a: Assessment) -> str:
    if a.leaving:
        return "ScalingIn"
    if not moving:
        return "Reconciled"
    kinds = {s.kind for _, s in moving}
    if kinds & {StepKind.DELETE_POD, StepKind.SWITCHOVER, StepKind.APPLY_MEMBER}:
        return "RollingUpdate"
    if kinds & {StepKind.TRANSFER_LEADERSHIP}:
        return "RollingUpdate"
    return "Waiting"


def _health_problems(a: Assessment) -> list[str]:
    problems = []
    for g in a.groups:
        ready = sum(1 for p in g.pods if p.ready)
        if ready < g.desired_replicas:
            problems.append(f"{g.name}: {ready}/{g.desired_replicas} replicas ready")
        elif g.replicated and g.view is not None and len(g.view.sync_state_set) < ready:
            problems.append(
                f"{g.name}: {len(g.view.sync_state_set)}/{g.desired_replicas} replicas in sync"
            )
    if a.controllers is not None:
        down = [m.name for m in a.controllers.members if not (m.pod and m.pod.ready)]
        if down:
            problems.append(f"controllers not ready: {', '.join(down)}")
    return problems

"""The status a person reads: conditions from what was observed and decided — Ready
only with a master everywhere, Progressing while a roll or scale-in moves, Warning
with the reason when something stopped and waits for a person."""

from __future__ import annotations

from rocketcluster.api.status import RocketClusterStatus
from rocketcluster.operator.orchestrate.assess import Assessment, assess
from rocketcluster.operator.orchestrate.model import (
    ControllerObservation,
    GroupObservation,
    GroupView,
    MemberState,
    PodState,
)
from rocketcluster.operator.orchestrate.steps import Step, StepKind, blocked, done, wait


def _group(name: str = "c-broker-0", master: int | None = 1, ready: int = 3) -> GroupObservation:
    pods = tuple(
        PodState(f"{name}-{i}", ready=i < ready, pod_hash="h", broker_id=i + 1) for i in range(3)
    )
    return GroupObservation(name, "h", 3, pods, GroupView(master, 2, frozenset({1, 2, 3})))


def _controllers(leader: int | None = 1) -> ControllerObservation:
    return ControllerObservation(
        tuple(
            MemberState(i, f"c-controller-{i}", "h", "h", PodState(f"p{i}", True, "h"), leader)
            for i in range(3)
        )
    )


def _conditions(status: RocketClusterStatus) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in status.conditions}


def _assess(**kwargs: object) -> dict[str, tuple[str, str, str]]:
    base: dict[str, object] = {
        "generation": 3,
        "image": "img:1",
        "groups": (_group(),),
        "controllers": _controllers(),
        "endpoints": {"c-broker-0": "c-broker-0.ns.svc.cluster.local:8081"},
    }
    return _conditions(assess(Assessment(**{**base, **kwargs})))  # type: ignore[arg-type]


def test_a_whole_cluster_is_ready_and_quiet() -> None:
    status = assess(Assessment(3, "img:1", (_group(),), _controllers(), {"c-broker-0": "e:8081"}))
    conditions = _conditions(status)
    assert conditions["Ready"][:2] == ("True", "AllGroupsServing")
    assert conditions["Progressing"][:2] == ("False", "Reconciled")
    assert conditions["Degraded"][0] == "False" and conditions["Warning"][0] == "False"
    assert status.masters == "1/1" and status.observed_generation == 3
    assert status.groups[0].master == "c-broker-0-0" and status.client_endpoints == "e:8081"


def test_no_master_or_no_leader_is_not_ready() -> None:
    conditions = _assess(groups=(_group(master=None),), controllers=_controllers(None))
    assert conditions["Ready"][:2] == ("False", "NotServing")
    assert "the controllers have no leader" in conditions["Ready"][2]
    assert "group c-broker-0 has no master" in conditions["Ready"][2]


def test_a_roll_in_progress_is_progressing_and_an_unready_replica_degraded() -> None:
    steps: dict[str, Step] = {
        "c-broker-0": Step(StepKind.SWITCHOVER, "master c-broker-0-0 runs an old spec", target=2)
    }
    conditions = _assess(groups=(_group(ready=2),), steps=steps)
    assert conditions["Progressing"][:2] == ("True", "RollingUpdate")
    assert "c-broker-0: master c-broker-0-0 runs an old spec" in conditions["Progressing"][2]
    assert conditions["Degraded"] == ("True", "ReplicasUnhealthy", "c-broker-0: 2/3 replicas ready")
    assert conditions["Warning"][0] == "False"


def test_a_stopped_roll_warns_with_its_reason() -> None:
    steps = {"c-broker-0": blocked("restarting c-broker-0-1 would leave 0 in-sync replicas")}
    conditions = _assess(steps=steps)
    assert conditions["Warning"][:2] == ("True", "RollBlocked")
    assert "would leave 0 in-sync replicas" in conditions["Warning"][2]
    unreachable = {"c-broker-0": blocked("the controllers do not answer (timeout)")}
    assert _assess(steps=unreachable)["Warning"][:2] == ("True", "ControllerUnreachable")


def test_a_scale_in_that_waits_says_what_is_left() -> None:
    leaving = {"c-broker-1": ["consumer group billing has 12 unconsumed messages"]}
    conditions = _assess(leaving=leaving)
    assert conditions["Warning"][:2] == ("True", "ScaleDownBlocked")
    assert conditions["Warning"][2] == (
        "scale-in of c-broker-1 waits: consumer group billing has 12 unconsumed messages"
    )
    assert conditions["Progressing"][:2] == ("True", "ScalingIn")
    # a leaving group that only progresses is no warning
    moving = _assess(leaving={"c-broker-1": []}, steps={"c-broker-0": done()})
    assert moving["Warning"][0] == "False" and moving["Progressing"][1] == "ScalingIn"


def test_an_invalid_spec_is_named() -> None:
    status = assess(Assessment(4, "", (), None, {}, invalid="invalid spec: brokers.groups: >= 1"))
    conditions = _conditions(status)
    assert conditions["Ready"] == ("False", "InvalidSpec", "invalid spec: brokers.groups: >= 1")
    assert conditions["Warning"][:2] == ("True", "InvalidSpec")


def test_waiting_alone_is_progress_not_a_warning() -> None:
    conditions = _assess(steps={"c-broker-0": wait("pod c-broker-0-1 is starting")})
    assert conditions["Progressing"][:2] == ("True", "Waiting")
    assert conditions["Warning"][0] == "False"

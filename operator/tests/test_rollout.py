"""The roll's memory in the status (orchestrate/rollout.py): what an operator that
starts again, or a standby that takes over, reads back and goes on from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rocketcluster.api.status import RocketClusterStatus
from rocketcluster.operator.orchestrate.broker_roll import next_group_step
from rocketcluster.operator.orchestrate.model import GroupObservation, GroupView, PodState
from rocketcluster.operator.orchestrate.rollout import SWITCHOVER_SETTLE_S, Rollout
from rocketcluster.operator.orchestrate.steps import Step, StepKind

T0 = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
SWITCHOVER = Step(StepKind.SWITCHOVER, "hand over", target=2)
DELETE = Step(StepKind.DELETE_POD, "slave runs an old spec", pod="prod-broker-0-1")


def _through_the_api(rollout: Rollout) -> Rollout:
    """Written as a merge patch, read back from a RocketCluster's status."""
    stored = RocketClusterStatus.model_validate({"rollout": rollout.to_json()})
    dumped = stored.model_dump(mode="json", by_alias=True, exclude_none=True)
    return Rollout.from_status(dumped)


def test_a_started_part_survives_the_round_trip_and_finishes() -> None:
    rollout = Rollout().intent("prod-broker-0", DELETE, T0, "op-a").started("prod-broker-0", T0)
    back = _through_the_api(rollout)
    assert back == rollout
    assert back.rolling("prod-broker-0") and not back.rolling("prod-broker-1")
    assert back.started_at("prod-broker-0") == T0
    action = back.status.last_action
    assert action is not None
    assert (action.phase, action.kind, action.pod, action.holder) == (
        "Intent",
        "DeletePod",
        "prod-broker-0-1",
        "op-a",
    )
    assert back.done(T0).status.last_action.phase == "Done"  # type: ignore[union-attr]
    assert not back.finished("prod-broker-0").rolling("prod-broker-0")
    # starting twice keeps the first start time
    assert back.started("prod-broker-0", T0 + timedelta(minutes=1)) == back


def test_the_json_replaces_what_is_stored_even_when_emptied() -> None:
    """A merge patch drops a key only when it is null: the last action, once gone,
    is written as null; lists are written whole."""
    data = Rollout().to_json()
    assert data == {"parts": [], "lastAction": None, "switchovers": [], "removing": []}


def test_a_switchover_ordered_before_a_restart_is_given_time() -> None:
    rollout = Rollout().intent("prod-broker-0", SWITCHOVER, T0, "op-a")
    assert "may still be running" in (rollout.switchover_in_flight("prod-broker-0", T0) or "")
    assert rollout.switchover_in_flight("prod-broker-1", T0) is None
    later = T0 + timedelta(seconds=SWITCHOVER_SETTLE_S)
    assert rollout.switchover_in_flight("prod-broker-0", later) is None
    # once its answer was seen (Done) there is nothing to wait for
    assert rollout.done(T0).switchover_in_flight("prod-broker-0", T0) is None
    # a pod deletion in flight is not a switchover
    deleting = Rollout().intent("prod-broker-0", DELETE, T0, "op-a")
    assert deleting.switchover_in_flight("prod-broker-0", T0) is None


def test_switchover_failures_count_for_the_spec_they_rolled_to() -> None:
    rollout = Rollout().switchover_failed("g0", "h1", "no caught-up slave")
    rollout = _through_the_api(rollout.switchover_failed("g0", "h1", "timed out"))
    attempts = rollout.attempts({"g0": "h1"})
    assert attempts.switchover_failures == {"g0": 2}
    assert attempts.last_switchover_error == {"g0": "timed out"}
    # a new spec starts the count again; a success forgets it
    assert rollout.attempts({"g0": "h2"}).switchover_failures == {}
    assert rollout.switchover_failed("g0", "h2", "x").attempts(
        {"g0": "h2"}
    ).switchover_failures == {"g0": 1}
    assert rollout.switchover_succeeded("g0").attempts({"g0": "h1"}).switchover_failures == {}


def test_a_removal_is_remembered_until_it_is_finished() -> None:
    rollout = Rollout().started("g2", T0).switchover_failed("g2", "h", "e").removing("g2")
    back = _through_the_api(rollout.removing("g2"))
    assert back.status.removing == ["g2"]
    gone = back.removed("g2")
    assert gone.status.removing == [] and not gone.rolling("g2")
    assert gone.status.switchovers == []


def test_a_group_restarted_after_its_last_delete_keeps_the_next_waiting() -> None:
    """The bug this state fixes: an operator restarted right after deleting a group's
    last stale pod saw current hashes everywhere and called the group done, so the
    next group started while that pod was still out of the SyncStateSet. With the
    part read back as rolling, the group waits for the pod."""

    def pod(name: str, broker_id: int, ready: bool) -> PodState:
        return PodState(name=name, ready=ready, pod_hash="new", broker_id=broker_id)

    group = GroupObservation(
        name="g0",
        desired_hash="new",
        desired_replicas=3,
        pods=(pod("g0-0", 1, True), pod("g0-1", 2, True), pod("g0-2", 3, False)),
        view=GroupView(master_id=1, master_epoch=3, sync_state_set=frozenset({1, 2})),
        min_in_sync=2,
    )
    rollout = _through_the_api(Rollout().started("g0", T0))
    assert next_group_step(group, rolling=False).kind is StepKind.DONE  # memory lost
    step = next_group_step(group, rolling=rollout.rolling("g0"))
    assert step.kind is StepKind.WAIT, step

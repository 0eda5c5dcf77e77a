"""The roll and scale decisions, step by step, on observed states."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rocketcluster.operator.orchestrate import broker_roll, controller_roll
from rocketcluster.operator.orchestrate.broker_roll import next_group_step
from rocketcluster.operator.orchestrate.controller_roll import next_controller_step
from rocketcluster.operator.orchestrate.model import (
    CATCH_UP_GRACE_S,
    Attempts,
    ControllerObservation,
    GroupObservation,
    GroupView,
    MemberState,
    PodState,
)
from rocketcluster.operator.orchestrate.scale import (
    Consumption,
    GroupContents,
    QueueRange,
    drain_problems,
    groups_to_remove,
    replica_scale_in_step,
)
from rocketcluster.operator.orchestrate.steps import StepKind

NEW, OLD = "new", "old"


def _group(
    hashes: tuple[str, ...] = (OLD, OLD, OLD),
    *,
    master: int | None = 1,
    in_sync: tuple[int, ...] = (1, 2, 3),
    ready: tuple[bool, ...] | None = None,
    view: bool = True,
    min_in_sync: int = 1,
    ready_for_s: float = 60.0,
    caught_up_ago_s: float | None = 1.0,
    reported: bool = True,
) -> GroupObservation:
    """Pods ready for a minute, each slave caught up a second ago by the master's
    report, unless told otherwise."""
    ready = ready or tuple(True for _ in hashes)
    pods = tuple(
        PodState(
            f"g-{i}",
            ready=ready[i],
            pod_hash=h,
            broker_id=i + 1,
            ready_for_s=ready_for_s,
            caught_up_ago_s=caught_up_ago_s,
        )
        for i, h in enumerate(hashes)
    )
    return GroupObservation(
        name="g",
        desired_hash=NEW,
        desired_replicas=len(hashes),
        pods=pods,
        view=GroupView(master, 5, frozenset(in_sync)) if view else None,
        min_in_sync=min_in_sync,
        catch_up_reported=reported,
    )


def test_a_current_group_needs_nothing() -> None:
    assert next_group_step(_group((NEW, NEW, NEW))).kind is StepKind.DONE


def test_slaves_go_first_then_a_switchover_then_the_old_master() -> None:
    """Walk a whole roll: each step's effect applied to the observation."""
    group = _group()
    order = []
    for _ in range(10):
        step = next_group_step(group)
        if step.kind is StepKind.DONE:
            break
        order.append((step.kind, step.pod))
        pods = list(group.pods)
        if step.kind is StepKind.DELETE_POD:
            i = next(n for n, p in enumerate(pods) if p.name == step.pod)
            pods[i] = replace(pods[i], pod_hash=NEW)  # recreated, ready, back in sync
            group = replace(group, pods=tuple(pods))
        elif step.kind is StepKind.SWITCHOVER:
            assert group.view is not None
            group = replace(group, view=replace(group.view, master_id=step.target))
    assert order == [
        (StepKind.DELETE_POD, "g-1"),
        (StepKind.DELETE_POD, "g-2"),
        (StepKind.SWITCHOVER, "g-0"),
        (StepKind.DELETE_POD, "g-0"),
    ]


def test_the_next_slave_waits_until_the_last_one_is_back_in_sync() -> None:
    step = next_group_step(_group((OLD, NEW, OLD), in_sync=(1, 3)))
    assert step.kind is StepKind.WAIT and "g-1" in step.reason


def test_the_next_slave_waits_while_the_last_one_is_gone_from_the_api() -> None:
    """Between its deletion and the StatefulSet recreating it, a restarted pod is
    simply absent: the group has fewer pods than replicas, and nobody else goes."""
    rolling = _group((OLD, OLD, OLD), master=2, in_sync=(2, 3))
    gone = replace(rolling, pods=rolling.pods[1:])  # g-0 deleted, not yet recreated
    step = next_group_step(gone)
    assert step.kind is StepKind.WAIT and "2 of 3" in step.reason
    assert next_group_step(rolling).pod == "g-0"  # with every pod there: a slave goes


def test_a_listed_slave_goes_on_only_once_it_caught_up_since_it_came_back() -> None:
    """The master drops a lagging replica from the SyncStateSet only after
    maxTimeNotCatchup: a slave restarted and ready sooner is still listed while it
    lags (the upgrade test met it: the next slave went, then the set dropped the
    first). Listed and caught up since it became ready: the next one goes."""
    restarted = _group((OLD, NEW, OLD), ready_for_s=3.0, caught_up_ago_s=5.0)  # before
    step = next_group_step(restarted)
    assert step.kind is StepKind.WAIT and "g-1" in step.reason, step
    never = _group((OLD, NEW, OLD), ready_for_s=3.0, caught_up_ago_s=None)
    assert next_group_step(never).kind is StepKind.WAIT
    caught_up = _group((OLD, NEW, OLD), ready_for_s=3.0, caught_up_ago_s=0.5)
    assert next_group_step(caught_up).pod == "g-2"


def test_from_a_master_that_does_not_report_catch_up_a_listing_must_outlive_the_grace() -> None:
    """A master of a release before the report (an upgrade's first slaves): still in
    the SyncStateSet CATCH_UP_GRACE_S after it became ready means caught up."""
    young = _group((OLD, NEW, OLD), ready_for_s=3.0, caught_up_ago_s=None, reported=False)
    assert next_group_step(young).kind is StepKind.WAIT
    old = _group(
        (OLD, NEW, OLD), ready_for_s=CATCH_UP_GRACE_S, caught_up_ago_s=None, reported=False
    )
    assert next_group_step(old).pod == "g-2"


def test_the_master_role_goes_only_to_a_slave_caught_up_since_it_came_back() -> None:
    lagging = _group((OLD, NEW, NEW), ready_for_s=3.0, caught_up_ago_s=5.0)
    assert next_group_step(lagging).kind is StepKind.WAIT
    assert next_group_step(_group((OLD, NEW, NEW))).kind is StepKind.SWITCHOVER


def test_a_restarting_pod_is_waited_for_and_a_stuck_one_blocks() -> None:
    starting = _group((OLD, NEW, OLD), ready=(True, False, True))
    assert next_group_step(starting).kind is StepKind.WAIT
    pods = list(starting.pods)
    pods[1] = replace(pods[1], ready_for_s=600, restarts=7)
    step = next_group_step(replace(starting, pods=tuple(pods)))
    assert step.kind is StepKind.BLOCKED and "g-1" in step.reason and "7" in step.reason


def test_a_stale_unready_slave_is_restarted_first() -> None:
    step = next_group_step(_group(ready=(True, True, False), in_sync=(1, 2)))
    assert (step.kind, step.pod) == (StepKind.DELETE_POD, "g-2")


def test_never_below_min_in_sync_replicas() -> None:
    step = next_group_step(_group(in_sync=(1, 2), min_in_sync=2, hashes=(OLD, OLD, NEW)))
    assert step.kind is StepKind.WAIT  # g-2 (current) is not back in sync yet
    step = next_group_step(_group(in_sync=(1, 2), min_in_sync=2, hashes=(OLD, OLD)))
    assert step.kind is StepKind.BLOCKED and "minInSyncReplicas" in step.reason


def test_no_roll_without_the_controllers_or_without_a_master() -> None:
    assert next_group_step(_group(view=False)).kind is StepKind.BLOCKED
    assert next_group_step(_group(master=None)).kind is StepKind.WAIT


def test_repeated_switchover_failures_block_with_the_controllers_answer() -> None:
    group = _group((OLD, NEW, NEW))
    assert next_group_step(group).kind is StepKind.SWITCHOVER
    attempts = Attempts({"g": 3}, {"g": "target lacks records"})
    step = next_group_step(group, attempts)
    assert step.kind is StepKind.BLOCKED and "target lacks records" in step.reason


def test_a_single_replica_group_restarts_in_place() -> None:
    group = _group((OLD,), in_sync=(1,))
    assert next_group_step(group).kind is StepKind.DELETE_POD


def test_a_rolled_group_is_whole_only_once_every_replica_is_back() -> None:
    """No pod runs the old spec any more, but the old master's new pod is still
    starting, then catching up: the roll of this group is not over yet."""
    assert broker_roll.settling(_group((NEW, NEW, NEW))) is None
    starting = _group((NEW, NEW, NEW), master=2, ready=(False, True, True), in_sync=(2, 3))
    assert broker_roll.settling(starting) == "pod g-0 is starting after its restart"
    behind = _group((NEW, NEW, NEW), master=2, in_sync=(2, 3))
    assert broker_roll.settling(behind) == (
        "pod g-0 is catching up (not yet back in the SyncStateSet)"
    )
    missing = replace(behind, pods=behind.pods[1:], view=GroupView(2, 6, frozenset({2, 3})))
    assert broker_roll.settling(missing) == "2 of 3 replicas of g exist"
    # the roller waits for it while the roll is under way, and only then
    assert next_group_step(behind, rolling=True).kind is StepKind.WAIT
    assert next_group_step(behind).kind is StepKind.DONE


def _members(
    applied: tuple[str, ...], leader: int = 1, ready: tuple[bool, ...] = (True, True, True)
) -> ControllerObservation:
    return ControllerObservation(
        tuple(
            MemberState(
                index=i,
                name=f"c-{i}",
                desired_hash=NEW,
                applied_hash=h,
                pod=PodState(f"c-{i}-x", ready=ready[i], pod_hash=h),
                leader_id=leader,
            )
            for i, h in enumerate(applied)
        )
    )


def test_controller_members_roll_one_at_a_time_leader_last() -> None:
    controllers = _members((OLD, OLD, OLD), leader=1)
    order = []
    for _ in range(10):
        step = next_controller_step(controllers)
        if step.kind is StepKind.DONE:
            break
        order.append((step.kind, step.target))
        members = list(controllers.members)
        if step.kind is StepKind.APPLY_MEMBER:
            i = next(n for n, m in enumerate(members) if m.member_id == step.target)
            pod = members[i].pod
            assert pod is not None
            members[i] = replace(members[i], applied_hash=NEW, pod=replace(pod, pod_hash=NEW))
        elif step.kind is StepKind.TRANSFER_LEADERSHIP:
            members = [replace(m, leader_id=step.target) for m in members]
        controllers = ControllerObservation(tuple(members))
    assert order == [
        (StepKind.APPLY_MEMBER, 2),
        (StepKind.APPLY_MEMBER, 3),
        (StepKind.TRANSFER_LEADERSHIP, 2),
        (StepKind.APPLY_MEMBER, 1),
    ]


def test_controllers_wait_for_a_whole_quorum_and_a_leader() -> None:
    assert next_controller_step(_members((OLD, NEW, OLD), ready=(True, False, True))).kind is (
        StepKind.WAIT
    )
    no_leader = ControllerObservation(
        tuple(replace(m, leader_id=None) for m in _members((OLD, OLD, OLD)).members)
    )
    assert next_controller_step(no_leader).kind is StepKind.WAIT


def test_rolled_controllers_are_whole_once_every_member_is_ready_with_a_leader() -> None:
    assert controller_roll.settling(_members((NEW, NEW, NEW))) is None
    restarting = _members((NEW, NEW, NEW), ready=(True, True, False))
    assert controller_roll.settling(restarting) == "controller c-2 is starting after its restart"
    assert next_controller_step(restarting, rolling=True).kind is StepKind.WAIT
    assert next_controller_step(restarting).kind is StepKind.DONE
    electing = ControllerObservation(
        tuple(replace(m, leader_id=None) for m in _members((NEW, NEW, NEW)).members)
    )
    assert controller_roll.settling(electing) == "the controllers are electing a leader"


def _contents(committed: int = 10, inflight: int = 0, unread: int = 0) -> GroupContents:
    queues = [QueueRange("orders", q, 0, 10) for q in range(2)]
    if unread:
        queues.append(QueueRange("audit-log", 0, 0, unread))
    return GroupContents(
        queues=tuple(queues),
        consumption=tuple(
            Consumption("billing", "orders", q, committed, inflight) for q in range(2)
        ),
    )


def test_drained_only_when_every_reader_is_at_the_end() -> None:
    assert drain_problems(_contents()) == []
    assert drain_problems(_contents(committed=7)) == [
        "consumer group billing has 6 unconsumed messages"
    ]
    assert drain_problems(_contents(inflight=1)) == [
        "consumer group billing has 2 messages in flight"
    ]
    assert drain_problems(_contents(unread=5)) == [
        "topic audit-log holds 5 unread messages that no consumer group has read"
    ]
    pending = replace(_contents(), pending_timers=3, pending_transactions=1)
    assert len(drain_problems(pending)) == 2


def test_the_highest_groups_go_first() -> None:
    index = {"p-broker-0": 0, "p-broker-1": 1, "p-broker-2": 2}
    assert groups_to_remove(1, list(index), index) == ["p-broker-2", "p-broker-1"]
    assert groups_to_remove(3, list(index), index) == []


@pytest.mark.parametrize(
    ("master", "expected"),
    [(3, StepKind.SWITCHOVER), (1, StepKind.DONE)],
)
def test_replica_scale_in_moves_the_master_first(master: int, expected: StepKind) -> None:
    step = replica_scale_in_step(_group((NEW, NEW, NEW), master=master), 2)
    assert step.kind is expected


def test_replica_scale_in_keeps_min_in_sync() -> None:
    group = _group((NEW, NEW, NEW), in_sync=(1, 3), min_in_sync=2)
    assert replica_scale_in_step(group, 2).kind is StepKind.BLOCKED


def test_a_roll_hands_the_master_to_a_slave_off_a_cordoned_node() -> None:
    """A roll's switchover prefers a slave whose node is not being drained (the drain
    would move one on a cordoned node next); with no other, a cordoned one still will."""
    group = _group((OLD, NEW, NEW))
    pods = [replace(p, node=f"n{i}") for i, p in enumerate(group.pods)]
    group = replace(group, pods=tuple(pods))
    assert next_group_step(group).target == 2  # g-1 by name
    step = next_group_step(group, cordoned=frozenset({"n1"}))
    assert step.kind is StepKind.SWITCHOVER and step.target == 3
    step = next_group_step(group, cordoned=frozenset({"n1", "n2"}))
    assert step.kind is StepKind.SWITCHOVER and step.target == 2

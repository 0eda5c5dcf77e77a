"""A drained node's master is switched over first (orchestrate/drain.py): the step
for each state of a group whose master's node is cordoned."""

from __future__ import annotations

from dataclasses import replace

from rocketcluster.operator.orchestrate.drain import (
    master_on_cordoned,
    next_drain_step,
    successors,
)
from rocketcluster.operator.orchestrate.model import GroupObservation, GroupView, PodState
from rocketcluster.operator.orchestrate.steps import StepKind

NEW, OLD = "new", "old"
CORDONED = frozenset({"node-0"})


def _group(
    nodes: tuple[str | None, ...] = ("node-0", "node-1", "node-2"),
    *,
    master: int | None = 1,
    in_sync: tuple[int, ...] = (1, 2, 3),
    ready: tuple[bool, ...] | None = None,
    hashes: tuple[str, ...] | None = None,
    view: bool = True,
    replicated: bool = True,
) -> GroupObservation:
    """Pods ready for a minute, each slave caught up a second ago; broker i+1 is
    pod g-i on nodes[i]; broker 1 is master."""
    ready = ready or tuple(True for _ in nodes)
    hashes = hashes or tuple(NEW for _ in nodes)
    pods = tuple(
        PodState(
            f"g-{i}",
            ready=ready[i],
            pod_hash=hashes[i],
            broker_id=i + 1,
            ready_for_s=60.0,
            caught_up_ago_s=1.0,
            node=node,
        )
        for i, node in enumerate(nodes)
    )
    return GroupObservation(
        name="g",
        desired_hash=NEW,
        desired_replicas=len(nodes),
        pods=pods,
        view=GroupView(master, 5, frozenset(in_sync)) if view else None,
        replicated=replicated,
        catch_up_reported=True,
    )


def test_a_master_on_a_cordoned_node_is_switched_over_to_a_caught_up_slave() -> None:
    step = next_drain_step(_group(), CORDONED)
    assert step.kind is StepKind.SWITCHOVER
    assert (step.pod, step.target) == ("g-0", 2)
    assert "cordoned node node-0" in step.reason and "g-1 on node-1" in step.reason


def test_nothing_to_do_when_no_master_is_on_a_cordoned_node() -> None:
    assert next_drain_step(_group(), frozenset()).kind is StepKind.DONE
    # a slave's node is cordoned: its budget lets the drain take it, no switchover
    assert next_drain_step(_group(), frozenset({"node-1"})).kind is StepKind.DONE
    # unscheduled pods are on no node
    assert next_drain_step(_group((None, "node-1", "node-2")), CORDONED).kind is StepKind.DONE


def test_the_successor_is_on_a_schedulable_node_ready_and_caught_up() -> None:
    # the other node is cordoned too: g-2 remains
    step = next_drain_step(_group(), frozenset({"node-0", "node-1"}))
    assert (step.kind, step.target) == (StepKind.SWITCHOVER, 3)
    # g-1 not ready: g-2
    step = next_drain_step(_group(ready=(True, False, True)), CORDONED)
    assert step.target == 3
    # g-1 not in the SyncStateSet: g-2
    step = next_drain_step(_group(in_sync=(1, 3)), CORDONED)
    assert step.target == 3
    # g-1 caught up before it last became ready: it lags, g-2
    group = _group()
    lagging = replace(group.pods[1], caught_up_ago_s=120.0)
    group = replace(group, pods=(group.pods[0], lagging, group.pods[2]))
    assert next_drain_step(group, CORDONED).target == 3
    # g-1 being deleted: g-2
    group = _group()
    going = replace(group.pods[1], deleting=True)
    group = replace(group, pods=(group.pods[0], going, group.pods[2]))
    assert next_drain_step(group, CORDONED).target == 3


def test_a_slave_on_the_current_spec_is_preferred() -> None:
    step = next_drain_step(_group(hashes=(NEW, OLD, NEW)), CORDONED)
    assert step.target == 3
    assert [p.name for p in successors(_group(hashes=(NEW, OLD, NEW)), CORDONED)] == [
        "g-2",
        "g-1",
    ]


def test_without_a_successor_it_waits_then_blocks() -> None:
    alone = _group(in_sync=(1,))
    step = next_drain_step(alone, CORDONED)
    assert step.kind is StepKind.WAIT and "no caught-up slave" in step.reason
    step = next_drain_step(alone, CORDONED, waiting_for_s=301.0, stuck_after_s=300.0)
    assert step.kind is StepKind.BLOCKED and "301s" in step.reason
    # every other node cordoned as well
    everywhere = frozenset({"node-0", "node-1", "node-2"})
    assert next_drain_step(_group(), everywhere).kind is StepKind.WAIT


def test_groups_that_cannot_switch_over_are_left_to_their_budget() -> None:
    # one replica: its budget lets the drain take it
    assert next_drain_step(_group(("node-0",)), CORDONED).kind is StepKind.DONE
    # standalone brokers have no master role to hand over
    assert next_drain_step(_group(replicated=False), CORDONED).kind is StepKind.DONE
    # the controllers do not answer, or no master is known: nothing to hand over
    assert next_drain_step(_group(view=False), CORDONED).kind is StepKind.DONE
    assert next_drain_step(_group(master=None), CORDONED).kind is StepKind.DONE


def test_a_master_already_going_away_is_not_switched_over() -> None:
    group = _group()
    going = replace(group.pods[0], deleting=True)
    group = replace(group, pods=(going, *group.pods[1:]))
    assert master_on_cordoned(group, CORDONED) is None
    assert next_drain_step(group, CORDONED).kind is StepKind.DONE

"""The roll-order check on synthetic histories: a correct roll passes with its numbers,
and each broken rule is named."""

from __future__ import annotations

from rocketcluster.e2e.k8s.rollcheck import PodEvent, check_roll, member_of
from rocketcluster.e2e.k8s.timeline import ClusterTimeline, LeaderSample, Sample

MEMBERS = ["c-controller-0", "c-controller-1", "c-controller-2"]
IDS = {"c-broker-0": {"c-broker-0-0": 1, "c-broker-0-1": 2, "c-broker-0-2": 3}}


def _timeline(
    masters: list[tuple[float, int | None, tuple[int, ...]]], leaders: list[tuple[float, int]]
) -> ClusterTimeline:
    tl = ClusterTimeline(member_ips=list)
    tl.samples = [Sample(at, "c-broker-0", m, 1, sss) for at, m, sss in masters]
    tl.leaders = [LeaderSample(at, leader) for at, leader in leaders]
    return tl


def _good_history() -> tuple[list[PodEvent], ClusterTimeline]:
    events = [
        # controllers: followers 0 and 2, then the leader (member 2 = c-controller-1)
        PodEvent(10, "deleting", "c-controller-0-aaa-1"),
        PodEvent(14, "ready", "c-controller-0-bbb-2"),
        PodEvent(15, "deleting", "c-controller-2-aaa-1"),
        PodEvent(19, "ready", "c-controller-2-bbb-2"),
        PodEvent(21, "deleting", "c-controller-1-aaa-1"),
        PodEvent(25, "ready", "c-controller-1-bbb-2"),
        # the group: slaves 1 and 2, switchover to 2, then the old master 0
        PodEvent(30, "deleting", "c-broker-0-1"),
        PodEvent(35, "ready", "c-broker-0-1"),
        PodEvent(37, "deleting", "c-broker-0-2"),
        PodEvent(42, "ready", "c-broker-0-2"),
        PodEvent(46, "deleting", "c-broker-0-0"),
        PodEvent(51, "ready", "c-broker-0-0"),
    ]
    timeline = _timeline(
        [
            (1, 1, (1, 2, 3)),
            (31, 1, (1, 3)),
            (36, 1, (1, 2, 3)),
            (38, 1, (1, 2)),
            (43, 1, (1, 2, 3)),
            (44, None, (1, 2, 3)),
            (44.3, 3, (3,)),
            (45, 3, (2, 3)),
            (52, 3, (1, 2, 3)),
        ],
        [(1, 2), (20, 2), (20.5, 1), (30, 1)],
    )
    return events, timeline


def test_a_roll_in_order_passes_with_its_numbers() -> None:
    events, timeline = _good_history()
    report = check_roll(events, timeline, members=MEMBERS, broker_ids=IDS, min_in_sync=1, since=5)
    assert report.problems == []
    assert report.controller_order == ["c-controller-0", "c-controller-2", "c-controller-1"]
    assert report.old_leader == "c-controller-1" and report.controllers_took_s == 15
    roll = report.groups["c-broker-0"]
    assert roll.order == ["c-broker-0-1", "c-broker-0-2", "c-broker-0-0"]
    assert roll.old_master == "c-broker-0-0" and roll.took_s == 21
    assert abs(roll.longest_without_master_s - 0.3) < 1e-9
    assert roll.smallest_sync_state_set == 1
    assert any(
        "rolled c-broker-0-1 -> c-broker-0-2 -> c-broker-0-0" in line for line in report.lines()
    )


def test_deleting_the_master_or_the_leader_is_named() -> None:
    events, timeline = _good_history()
    # the old master goes before the switchover; the leader goes first
    swap = {"c-broker-0-0": "c-broker-0-2", "c-broker-0-2": "c-broker-0-0"}
    events = [PodEvent(e.at, e.kind, swap.get(e.pod, e.pod)) for e in events]
    timeline.leaders = [LeaderSample(1, 1)]
    report = check_roll(events, timeline, members=MEMBERS, broker_ids=IDS, min_in_sync=1, since=5)
    assert "c-broker-0: c-broker-0-0 was the master when deleted" in report.problems
    assert "c-broker-0: the master at the start (c-broker-0-0) did not go last" in report.problems
    assert "controller c-controller-0 was the Raft leader when deleted" in report.problems
    assert any("did not roll last" in p for p in report.problems)


def test_haste_and_too_few_in_sync_replicas_are_named() -> None:
    events, timeline = _good_history()
    # the second slave goes before the first is ready again and back in sync
    events = [
        PodEvent(33, e.kind, e.pod) if (e.pod, e.kind) == ("c-broker-0-2", "deleting") else e
        for e in events
    ]
    timeline.samples.append(Sample(33.5, "c-broker-0", 1, 1, ()))
    timeline.samples.sort(key=lambda s: s.at)
    report = check_roll(events, timeline, members=MEMBERS, broker_ids=IDS, min_in_sync=1, since=5)
    assert "c-broker-0: c-broker-0-2 went before c-broker-0-1 was ready" in report.problems
    assert (
        "c-broker-0: c-broker-0-2 went before c-broker-0-1 was back in the SyncStateSet"
        in report.problems
    )
    assert "c-broker-0: only 0 in-sync replicas (minInSyncReplicas 1)" in report.problems


def test_groups_must_not_overlap_and_controllers_come_first() -> None:
    ids = {
        "c-broker-0": {"c-broker-0-0": 1},
        "c-broker-1": {"c-broker-1-0": 1},
    }
    timeline = ClusterTimeline(member_ips=list)
    timeline.samples = [Sample(1, g, 1, 1, (1,)) for g in ids]
    events = [
        PodEvent(10, "deleting", "c-broker-0-0"),
        PodEvent(11, "deleting", "c-broker-1-0"),
        PodEvent(12, "deleting", "c-controller-0-x-1"),
        PodEvent(15, "ready", "c-broker-0-0"),
        PodEvent(16, "ready", "c-broker-1-0"),
    ]
    report = check_roll(
        events, timeline, members=["c-controller-0"], broker_ids=ids, min_in_sync=1, since=5
    )
    assert "c-broker-1 started rolling before c-broker-0 had finished" in report.problems
    assert "controller c-controller-0 rolled after broker pods had started" in report.problems


def test_member_of_matches_whole_name_parts() -> None:
    members = ["c-controller-1", "c-controller-10"]
    assert member_of("c-controller-10-abc-1", members) == "c-controller-10"
    assert member_of("c-controller-1-abc-1", members) == "c-controller-1"
    assert member_of("c-broker-1-0", members) is None

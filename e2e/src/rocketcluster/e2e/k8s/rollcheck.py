"""Did a rolling restart go in the promised order? Pure: from pod events (when each
pod was deleted, when each became ready) and a :class:`ClusterTimeline` (who was
master and leader, and the SyncStateSets, over time) to a report of the order seen,
the numbers a person asks for, and every rule that was broken.

The rules (DESIGN §6, the operator's roller):

1. Controller members roll before any broker group, one at a time (the next goes
   only after the previous member's new pod is ready), and no member is deleted
   while it leads — the leader at the start goes last, after a leadership transfer.
2. Broker groups roll one at a time. Within a group every pod restarts once; no pod
   is deleted while it is the master (a switchover to a caught-up slave comes
   first), so the master at the start goes last; each pod goes only after the one
   before it is ready again and back in the SyncStateSet.
3. No group ever has fewer than ``minInSyncReplicas`` in its SyncStateSet.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rocketcluster.e2e.k8s.timeline import ClusterTimeline


@dataclass(frozen=True)
class PodEvent:
    at: float
    kind: str  # "deleting" | "ready"
    pod: str


@dataclass
class GroupRoll:
    group: str
    order: list[str] = field(default_factory=list)  # pods in the order they were deleted
    old_master: str | None = None
    took_s: float = 0.0  # first deletion to the last replacement ready
    longest_without_master_s: float = 0.0
    smallest_sync_state_set: int = 0


@dataclass
class RollReport:
    controller_order: list[str] = field(default_factory=list)  # members, deletion order
    old_leader: str | None = None
    controllers_took_s: float = 0.0
    groups: dict[str, GroupRoll] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    sample_period_s: float = 0.0  # how often the controllers' view was read

    def lines(self) -> list[str]:
        """A few readable lines: the order and the numbers."""
        out = []
        if self.controller_order:
            out.append(
                f"controllers rolled {' -> '.join(self.controller_order)} in "
                f"{self.controllers_took_s:.1f}s (leader at the start: {self.old_leader})"
            )
        every = f" (seen every {self.sample_period_s:.1f}s)" if self.sample_period_s else ""
        for g in self.groups.values():
            out.append(
                f"{g.group} rolled {' -> '.join(g.order)} in {g.took_s:.1f}s "
                f"(old master {g.old_master} last); longest without a master "
                f"{g.longest_without_master_s:.2f}s{every}; smallest SyncStateSet "
                f"{g.smallest_sync_state_set}"
            )
        out += [f"PROBLEM: {p}" for p in self.problems]
        return out


def member_of(pod: str, members: Iterable[str]) -> str | None:
    """The controller member (Deployment) a pod belongs to: ``<member>-<hash>-<id>``."""
    return next((m for m in members if pod.startswith(f"{m}-")), None)


def _ready_after(events: list[PodEvent], pod_prefix: str, after: float) -> float | None:
    """When the first pod whose name starts with ``pod_prefix`` became ready after
    ``after`` (a StatefulSet pod keeps its name; a Deployment's gets a new one)."""
    times = [
        e.at for e in events if e.kind == "ready" and e.pod.startswith(pod_prefix) and e.at > after
    ]
    return min(times) if times else None


def check_roll(
    events: Iterable[PodEvent],
    timeline: ClusterTimeline,
    *,
    members: list[str],
    broker_ids: Mapping[str, Mapping[str, int]],
    min_in_sync: int,
    since: float,
) -> RollReport:
    """``members``: controller member names by index (member i+1 is ``members[i]``);
    ``broker_ids``: group -> pod -> broker id; ``since``: when the roll was asked for."""
    evs = sorted((e for e in events if e.at >= since), key=lambda e: e.at)
    report = RollReport(sample_period_s=timeline.period_s)
    deletions = [e for e in evs if e.kind == "deleting"]
    pod_group = {pod: g for g, pods in broker_ids.items() for pod in pods}

    # 1. controllers
    member_deletions = [(e, m) for e in deletions if (m := member_of(e.pod, members))]
    broker_deletions = [e for e in deletions if e.pod in pod_group]
    first_broker = broker_deletions[0].at if broker_deletions else float("inf")
    leader_at_start = timeline.leader_at(since)
    report.old_leader = members[leader_at_start - 1] if leader_at_start else None
    previous_ready = 0.0
    for event, member in member_deletions:
        report.controller_order.append(member)
        if event.at > first_broker:
            report.problems.append(f"controller {member} rolled after broker pods had started")
        leader = timeline.leader_at(event.at)
        if leader is not None and members[leader - 1] == member:
            report.problems.append(f"controller {member} was the Raft leader when deleted")
        if event.at < previous_ready:
            report.problems.append(f"controller {member} went before the previous one was ready")
        previous_ready = _ready_after(evs, f"{member}-", event.at) or float("inf")
    if member_deletions:
        report.controllers_took_s = (
            previous_ready if previous_ready != float("inf") else member_deletions[-1][0].at
        ) - member_deletions[0][0].at
        if report.old_leader and report.controller_order[-1] != report.old_leader:
            report.problems.append(
                f"the leader at the start ({report.old_leader}) did not roll last"
            )
        if sorted(report.controller_order) != sorted(members):
            report.problems.append(f"controllers rolled {report.controller_order}, not {members}")

    # 2. broker groups, in the order they started
    spans: list[tuple[str, float, float]] = []
    for group, ids in broker_ids.items():
        mine = [e for e in broker_deletions if pod_group[e.pod] == group]
        roll = report.groups.setdefault(group, GroupRoll(group))
        if not mine:
            report.problems.append(f"{group}: no pod was restarted")
            continue
        start = timeline.at(group, mine[0].at)
        master_id = start.master_id if start else None
        roll.old_master = next((p for p, b in ids.items() if b == master_id), None)
        end = mine[0].at
        for i, event in enumerate(mine):
            roll.order.append(event.pod)
            seen = timeline.at(group, event.at)
            if seen is not None and seen.master_id == ids.get(event.pod):
                report.problems.append(f"{group}: {event.pod} was the master when deleted")
            if i > 0:
                before = mine[i - 1].pod
                if (_ready_after(evs, before, mine[i - 1].at) or float("inf")) > event.at:
                    report.problems.append(f"{group}: {event.pod} went before {before} was ready")
                if seen is not None and ids.get(before) not in seen.sync_state_set:
                    report.problems.append(
                        f"{group}: {event.pod} went before {before} was back in the SyncStateSet"
                    )
            end = _ready_after(evs, event.pod, event.at) or event.at
        roll.took_s = end - mine[0].at
        if sorted(roll.order) != sorted(ids):
            report.problems.append(
                f"{group}: restarted {roll.order}, expected each of {sorted(ids)}"
            )
        if roll.old_master is not None and roll.order[-1] != roll.old_master:
            report.problems.append(
                f"{group}: the master at the start ({roll.old_master}) did not go last"
            )
        roll.longest_without_master_s = timeline.longest_without_master(group, mine[0].at, end)
        roll.smallest_sync_state_set = timeline.smallest_sync_state_set(group, since, end)
        if roll.smallest_sync_state_set < min_in_sync:
            report.problems.append(
                f"{group}: only {roll.smallest_sync_state_set} in-sync replicas "
                f"(minInSyncReplicas {min_in_sync})"
            )
        spans.append((group, mine[0].at, end))
    spans.sort(key=lambda s: s[1])
    for (a, _, a_end), (b, b_start, _) in itertools.pairwise(spans):
        if b_start < a_end:
            report.problems.append(f"{b} started rolling before {a} had finished")
    return report

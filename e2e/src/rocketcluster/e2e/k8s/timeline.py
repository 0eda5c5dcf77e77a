"""A timeline of the cluster as its controllers see it — every broker group's master,
epoch and SyncStateSet, and the controllers' Raft leader — sampled a few times a
second in a background thread, so a suite can say how long each group was without
a master, whether a group ever fell below its minimum of in-sync replicas, and who
led or was master when a pod was deleted, while something else (a roll, a kill)
happens."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.client.controller_admin import ControllerAdmin, ControllerAdminError


@dataclass(frozen=True)
class Sample:
    at: float
    group: str
    master_id: int | None
    master_epoch: int
    sync_state_set: tuple[int, ...]


@dataclass(frozen=True)
class LeaderSample:
    at: float
    leader_id: int | None  # the controller member id (member i+1 is C-controller-i)


def leader_view(admin: ControllerAdmin) -> tuple[int | None, list[dict[str, Any]] | None]:
    """The Raft leader's member id and its ``/v1/groups`` (the shared client's leader
    rule; each member names its own id, so a member missing from the pod list does not
    shift the others' ids); (None, None) when no leader answers."""
    try:
        leader = admin.leader()
        groups = admin.groups()
    except ControllerAdminError:
        return None, None
    return leader.member_id, groups


@dataclass
class ClusterTimeline:
    """``member_ips()`` gives the controller members' pod IPs in member order (they
    change when a member restarts)."""

    member_ips: Callable[[], list[str]]
    period_s: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    leaders: list[LeaderSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ClusterTimeline:
        self._thread = threading.Thread(target=self._run, daemon=True, name="cluster-timeline")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ClusterTimeline:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        admin: ControllerAdmin | None = None
        try:
            while not self._stop.is_set():
                try:
                    ips = self.member_ips()
                except Exception:  # the API being briefly unreachable is not a failure
                    ips = []
                addresses = [f"{ip}:{ADMIN_PORT}" for ip in ips]
                if admin is not None and admin.addresses != addresses:
                    admin.close()  # a member restarted on another IP
                    admin = None
                if admin is None and addresses:
                    admin = ControllerAdmin(addresses, timeout=1.0, attempts=1)
                leader, groups = leader_view(admin) if admin is not None else (None, None)
                now = time.time()
                self.leaders.append(LeaderSample(now, leader))
                for g in groups or []:
                    self.samples.append(
                        Sample(
                            now,
                            g["group"],
                            g.get("masterId"),
                            int(g.get("masterEpoch", 0)),
                            tuple(sorted(g.get("syncStateSet", []))),
                        )
                    )
                self._stop.wait(self.period_s)
        finally:
            if admin is not None:
                admin.close()

    def of(self, group: str, since: float = 0.0, until: float = float("inf")) -> list[Sample]:
        return [s for s in self.samples if s.group == group and since <= s.at <= until]

    def longest_without_master(
        self, group: str, since: float = 0.0, until: float = float("inf")
    ) -> float:
        """The longest stretch (seconds) in which the controllers named no master —
        from the first sample without one to the next sample with one."""
        longest = 0.0
        gap_start: float | None = None
        for s in self.of(group, since, until):
            if s.master_id is None and gap_start is None:
                gap_start = s.at
            elif s.master_id is not None and gap_start is not None:
                longest = max(longest, s.at - gap_start)
                gap_start = None
        return longest

    def smallest_sync_state_set(
        self, group: str, since: float = 0.0, until: float = float("inf")
    ) -> int:
        sizes = [
            len(s.sync_state_set) for s in self.of(group, since, until) if s.master_id is not None
        ]
        return min(sizes) if sizes else 0

    def at(self, group: str, when: float) -> Sample | None:
        """The last sample of ``group`` taken at or before ``when``."""
        before = [s for s in self.samples if s.group == group and s.at <= when]
        return before[-1] if before else None

    def leader_at(self, when: float) -> int | None:
        before = [s for s in self.leaders if s.at <= when and s.leader_id is not None]
        return before[-1].leader_id if before else None

"""A timeline of every broker group as the controllers see it — master, epoch and
SyncStateSet, sampled a few times a second in a background thread — so a suite can
say how long each group was without a master, and whether a group ever fell below
its minimum of in-sync replicas, while something else (a roll, a kill) happens."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

ADMIN_PORT = 8080


@dataclass(frozen=True)
class Sample:
    at: float
    group: str
    master_id: int | None
    master_epoch: int
    sync_state_set: tuple[int, ...]


def leader_groups(http: httpx.Client, member_ips: list[str]) -> list[dict[str, Any]] | None:
    """``/v1/groups`` from the Raft leader, found through any member that answers."""
    for ip in member_ips:
        try:
            cluster = http.get(f"http://{ip}:{ADMIN_PORT}/v1/cluster").json()
            leader = cluster.get("leader")
            if leader is None:
                continue
            ips = {i + 1: member for i, member in enumerate(member_ips)}
            target = ips.get(int(leader), ip)
            groups: list[dict[str, Any]] = http.get(
                f"http://{target}:{ADMIN_PORT}/v1/groups"
            ).json()
            return groups
        except (httpx.HTTPError, ValueError, KeyError):
            continue
    return None


@dataclass
class GroupTimeline:
    """``member_ips()`` gives the controller members' pod IPs in member order (they
    change when a member restarts)."""

    member_ips: Callable[[], list[str]]
    period_s: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> GroupTimeline:
        self._thread = threading.Thread(target=self._run, daemon=True, name="group-timeline")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        with httpx.Client(timeout=1.0) as http:
            while not self._stop.is_set():
                try:
                    ips = self.member_ips()
                except Exception:  # the API being briefly unreachable is not a failure
                    ips = []
                groups = leader_groups(http, ips) if ips else None
                now = time.time()
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

    def of(self, group: str, since: float = 0.0) -> list[Sample]:
        return [s for s in self.samples if s.group == group and s.at >= since]

    def longest_without_master(self, group: str, since: float = 0.0) -> float:
        """The longest stretch (seconds) in which the controllers named no master —
        from the first sample without one to the next sample with one."""
        longest = 0.0
        gap_start: float | None = None
        for s in self.of(group, since):
            if s.master_id is None and gap_start is None:
                gap_start = s.at
            elif s.master_id is not None and gap_start is not None:
                longest = max(longest, s.at - gap_start)
                gap_start = None
        return longest

    def smallest_sync_state_set(self, group: str, since: float = 0.0) -> int:
        sizes = [len(s.sync_state_set) for s in self.of(group, since) if s.master_id is not None]
        return min(sizes) if sizes else 0

    def masters(self, group: str, since: float = 0.0) -> list[int]:
        """The succession of masters (consecutive duplicates collapsed)."""
        out: list[int] = []
        for s in self.of(group, since):
            if s.master_id is not None and (not out or out[-1] != s.master_id):
                out.append(s.master_id)
        return out

"""What the cluster looks like right now, read through ``Upstream``: the controllers'
Raft and broker-group views, and each broker's own view (role, replication, store).

A page asks for the snapshot once per request; everything that could not be read is
kept as a sentence (``problems``) beside what could, so pages render partially.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.api.console_config import ConsoleBroker, ConsoleConfig
from rocketcluster.console.upstream import Upstream, UpstreamError

DISK_WARN_RATIO = 0.8


@dataclass
class ControllerState:
    url: str
    cluster: dict[str, Any] | None = None
    error: str | None = None

    @property
    def raft(self) -> dict[str, Any]:
        raft: dict[str, Any] = (self.cluster or {}).get("raft", {})
        return raft


@dataclass
class BrokerState:
    broker: ConsoleBroker
    info: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    tier: dict[str, Any] | None = None
    error: str | None = None

    @property
    def role(self) -> str:
        return str((self.info or {}).get("role", "unreachable"))

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    @property
    def broker_id(self) -> int | None:
        value = (self.info or {}).get("brokerId")
        return int(value) if value is not None else None


@dataclass
class Problem:
    severity: str  # "critical" | "warning"
    text: str
    time: float = field(default_factory=time.time)


@dataclass
class ClusterSnapshot:
    name: str
    controllers: list[ControllerState]
    brokers: list[BrokerState]
    groups: list[dict[str, Any]]
    events: list[dict[str, Any]]
    problems: list[Problem]
    read_at: float

    @property
    def leader(self) -> ControllerState | None:
        for c in self.controllers:
            if c.raft.get("state") == "leader":
                return c
        return None

    @property
    def ready(self) -> bool:
        return not any(p.severity == "critical" for p in self.problems)

    def broker_groups(self) -> list[str]:
        seen = dict.fromkeys(b.broker.group for b in self.brokers)
        return list(seen)

    def brokers_of(self, group: str) -> list[BrokerState]:
        return [b for b in self.brokers if b.broker.group == group]

    def reader(self, group: str) -> BrokerState | None:
        """The broker to read ``group``'s data from: its master, else any replica
        that answers (slaves hold the same replicated messages)."""
        live = [b for b in self.brokers_of(group) if b.info is not None]
        masters = [b for b in live if b.is_master]
        chosen = masters or live
        return chosen[0] if chosen else None

    def master(self, group: str) -> BrokerState | None:
        return next((b for b in self.brokers_of(group) if b.is_master), None)

    def readers(self) -> list[BrokerState]:
        return [r for g in self.broker_groups() if (r := self.reader(g)) is not None]


async def _controller(upstream: Upstream, url: str) -> ControllerState:
    try:
        return ControllerState(url, cluster=await upstream.get(url, "/v1/cluster"))
    except UpstreamError as exc:
        return ControllerState(url, error=exc.reason)


async def _broker(upstream: Upstream, broker: ConsoleBroker, deep: bool) -> BrokerState:
    state = BrokerState(broker)
    try:
        state.info = await upstream.get(broker.admin, "/v1/broker")
        state.stats = await upstream.get(broker.admin, "/v1/stats")
        if deep:
            state.tier = await upstream.get(broker.admin, "/v1/tier")
    except UpstreamError as exc:
        state.error = exc.reason
    return state


async def read_cluster(
    upstream: Upstream, config: ConsoleConfig, *, deep: bool = False
) -> ClusterSnapshot:
    """The cluster as its endpoints see it now; ``deep`` adds each broker's tier
    figures (the overview)."""
    calls: list[Any] = [_controller(upstream, url) for url in config.controllers]
    calls += [_broker(upstream, b, deep) for b in config.brokers]
    results = await upstream.gather(calls)
    controllers: list[ControllerState] = results[: len(config.controllers)]
    brokers: list[BrokerState] = results[len(config.controllers) :]
    snapshot = ClusterSnapshot(config.cluster, controllers, brokers, [], [], [], time.time())
    leader = snapshot.leader
    if leader is not None:
        try:
            snapshot.groups = await upstream.get(leader.url, "/v1/groups")
            since = time.time() - 24 * 3600
            events = await upstream.get(leader.url, "/v1/events", since=since)
            snapshot.events = sorted(events, key=lambda e: -int(e.get("time", 0)))[:50]
        except UpstreamError as exc:
            leader.error = exc.reason
    snapshot.problems = find_problems(snapshot)
    return snapshot


def find_problems(snapshot: ClusterSnapshot) -> list[Problem]:
    """What is wrong, worst first: why the cluster is Degraded."""
    out: list[Problem] = []
    for c in snapshot.controllers:
        if c.error:
            out.append(Problem("warning", f"controller {c.url} does not answer: {c.error}"))
    if snapshot.controllers and snapshot.leader is None:
        out.append(
            Problem(
                "critical",
                "no controller leader: broker failover and catalogue changes wait for one",
            )
        )
    for b in snapshot.brokers:
        if b.error:
            out.append(
                Problem(
                    "warning",
                    f"broker {b.broker.name} ({b.broker.group}) does not answer: {b.error}",
                )
            )
    views = {g.get("group"): g for g in snapshot.groups}
    for group in snapshot.broker_groups():
        members = snapshot.brokers_of(group)
        if snapshot.master(group) is None:
            out.append(Problem("critical", f"broker group {group} has no master: sends to it fail"))
        view = views.get(group)
        if view is not None:
            sss = view.get("syncStateSet") or []
            replicas = view.get("replicas") or {}
            if len(sss) < len(replicas):
                missing = sorted(set(map(int, replicas)) - set(sss))
                out.append(
                    Problem(
                        "warning",
                        f"broker group {group}: replicas {missing} are out of the SyncStateSet "
                        f"({len(sss)} of {len(replicas)} in sync)",
                    )
                )
        for b in members:
            ratio = (b.stats or {}).get("diskUsedRatio")
            if isinstance(ratio, float) and ratio >= DISK_WARN_RATIO:
                out.append(Problem("warning", f"broker {b.broker.name}: disk {ratio:.0%} full"))
    out.sort(key=lambda p: p.severity != "critical")
    return out

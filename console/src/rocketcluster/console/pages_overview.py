"""Overview: Ready or Degraded with the reasons, broker groups (master, epoch,
SyncStateSet, each replica's ack lag), controllers (leader, term, commit index),
produce and consume rates, disk and tier at a glance, the newest problems first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from rocketcluster.api.stats import LagStatus
from rocketcluster.console.cluster import BrokerState, ClusterSnapshot, read_cluster
from rocketcluster.console.lag_status import SEVERITY
from rocketcluster.console.web import console_of, render, viewer

router = APIRouter()


@dataclass
class ReplicaRow:
    name: str
    broker_id: int | None
    role: str
    error: str | None
    in_sync: bool
    ack_lag_bytes: int | None
    caught_up_ago_s: float | None
    disk_ratio: float | None
    bytes_on_disk: int | None
    tier: str


@dataclass
class GroupRow:
    group: str
    master: str
    epoch: int | None
    sync_state_set: list[int]
    replicas: list[ReplicaRow]


def _tier(b: BrokerState) -> str:
    tier = b.tier or {}
    if not tier:
        return "—"
    if not tier.get("enabled", False):
        return "off"
    backend = tier.get("backend") or tier.get("kind") or "on"
    return str(backend if isinstance(backend, str) else "on")


def broker_groups(cluster: ClusterSnapshot) -> list[GroupRow]:
    views = {g.get("group"): g for g in cluster.groups}
    rows = []
    for group in cluster.broker_groups():
        master = cluster.master(group)
        view = views.get(group, {})
        sss = [int(i) for i in view.get("syncStateSet") or []]
        repl: dict[str, Any] = ((master.info or {}).get("replication") or {}) if master else {}
        top = int(((master.info or {}).get("commitLog") or {}).get("maxOffset", 0)) if master else 0
        replicas = []
        for b in cluster.brokers_of(group):
            slave = (repl.get("slaves") or {}).get(str(b.broker_id)) if b.broker_id else None
            stats = b.stats or {}
            replicas.append(
                ReplicaRow(
                    b.broker.name,
                    b.broker_id,
                    b.role,
                    b.error,
                    b.broker_id in sss,
                    0
                    if b.is_master
                    else (max(0, top - int(slave["ackOffset"])) if slave else None),
                    0.0 if b.is_master else (slave or {}).get("caughtUpAgoSeconds"),
                    stats.get("diskUsedRatio"),
                    (stats.get("commitLog") or {}).get("bytesOnDisk"),
                    _tier(b),
                )
            )
        rows.append(
            GroupRow(
                group,
                f"{master.broker.name} (id {master.broker_id})" if master else "none",
                view.get("masterEpoch"),
                sss,
                replicas,
            )
        )
    return rows


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> HTMLResponse:
    who = viewer(request)
    console = console_of(request)
    cluster = await read_cluster(console.upstream, console.config, deep=True)
    live = await console.stats.get(console.upstream, cluster)
    problems = [{"severity": p.severity, "text": p.text} for p in cluster.problems]
    problems += [{"severity": "warning", "text": e} for e in live.errors]
    lagging: dict[str, tuple[LagStatus, str]] = {}
    for (bg, group, topic, qid), verdict in live.verdicts().items():
        if not who.may_see_group(group) or verdict.status in (LagStatus.OK,):
            continue
        known = lagging.get(group)
        if known is None or SEVERITY[verdict.status] > SEVERITY[known[0]]:
            lagging[group] = (verdict.status, f"{topic} queue {qid} on {bg}: {verdict.reason}")
    for group, (status, reason) in sorted(lagging.items(), key=lambda kv: -SEVERITY[kv[1][0]]):
        severity = "critical" if status in (LagStatus.ERR, LagStatus.STOP) else "warning"
        problems.append(
            {"severity": severity, "text": f"consumer group {group} {status}: {reason}"}
        )
    controllers = [
        {
            "url": c.url,
            "error": c.error,
            "id": c.raft.get("id"),
            "state": c.raft.get("state", "unreachable"),
            "term": c.raft.get("term"),
            "commit": c.raft.get("commit"),
            "applied": c.raft.get("applied"),
            "leader": c.raft.get("leader"),
        }
        for c in cluster.controllers
    ]
    return render(
        request,
        "overview.html",
        title="Overview",
        nav="overview",
        ready=cluster.ready,
        reasons=[p.text for p in cluster.problems if p.severity == "critical"],
        groups=broker_groups(cluster),
        controllers=controllers,
        produce_rate=live.produce_rate(),
        consume_rate=live.consume_rate(),
        problems=problems,
        events=cluster.events[:15],
    )

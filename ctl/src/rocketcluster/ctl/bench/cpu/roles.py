"""Who is who in a running cluster, what the controllers recorded, what a broker
stored: the parts of a case that read the cluster rather than load it."""

from __future__ import annotations

import time
from typing import Any

import httpx

from rocketcluster.api.client.controller_admin import ControllerAdminError
from rocketcluster.ctl.workload import Cluster


def brokers(cluster: Cluster) -> list[dict[str, Any]]:
    """Every broker process of the cluster (a standalone broker's name has no
    replica suffix, so ``Cluster.brokers`` does not list it)."""
    return [p.as_dict() for p in cluster.local.brokers()]


def role_pids(cluster: Cluster) -> dict[str, int]:
    """Role -> pid: ``master``, ``slave-1``, ``slave-2`` … (in process-name order),
    ``controller-1`` …, ``proxy`` (the local group endpoint) when there is one. A
    broker whose admin API does not say ``slave`` is the master (a standalone broker
    has no controller to tell it)."""
    pids: dict[str, int] = {}
    slaves = 0
    for proc in sorted(brokers(cluster), key=lambda p: str(p["name"])):
        view = cluster.broker_view(proc) or {}
        if view.get("role") == "slave":
            slaves += 1
            pids[f"slave-{slaves}"] = int(proc["pid"])
        else:
            pids["master"] = int(proc["pid"])
    for n, proc in enumerate(sorted(cluster.controllers(), key=lambda p: str(p["name"])), 1):
        pids[f"controller-{n}"] = int(proc["pid"])
    proxies = [p.as_dict() for p in cluster.local.proxies()]
    for n, proc in enumerate(proxies, 1):
        pids["proxy" if len(proxies) == 1 else f"proxy-{n}"] = int(proc["pid"])
    return pids


def master_address(cluster: Cluster, pids: dict[str, int], kind: str) -> str:
    """The master's ``kind`` address (``client``, ``admin``)."""
    proc = next(p for p in brokers(cluster) if int(p["pid"]) == pids["master"])
    return str(proc["addresses"][kind])


DISPATCH_WAIT_S = 10.0


def stored(cluster: Cluster, pids: dict[str, int], topic: str) -> dict[str, int]:
    """Messages each broker holds in ``topic`` (the sum of its queues' max offsets),
    once it has indexed everything its commit log held when asked: an acknowledged
    message is in the log, and reaches the consume queues a moment later (a loaded
    broker was seen 736 messages behind at the end of a window)."""
    out: dict[str, int] = {}
    for proc in brokers(cluster):
        role = next((r for r, pid in pids.items() if pid == int(proc["pid"])), proc["name"])
        try:
            _wait_dispatched(cluster, proc["addresses"]["admin"])
            view = cluster.admin_get(proc["addresses"]["admin"], f"/v1/topics/{topic}")
            out[role] = sum(int(q["maxOffset"]) for q in view["queueOffsets"])
        except (httpx.HTTPError, ValueError, KeyError):
            continue
    return out


def _wait_dispatched(cluster: Cluster, admin: str) -> None:
    """Until the broker's dispatched offset reaches its commit log's end as first
    read (or DISPATCH_WAIT_S passes: the count then says what it says)."""
    log = cluster.admin_get(admin, "/v1/broker")["commitLog"]
    end = int(log["maxOffset"])
    deadline = time.monotonic() + DISPATCH_WAIT_S
    while int(log["dispatchedOffset"]) < end and time.monotonic() < deadline:
        time.sleep(0.05)
        log = cluster.admin_get(admin, "/v1/broker")["commitLog"]


def events(cluster: Cluster) -> list[dict[str, Any]] | None:
    """The controllers' event history for the group (any member answers: the
    history is replicated state), or None when there are no controllers (or none
    answers)."""
    if not cluster.local.controllers():
        return None
    with cluster.controller_admin() as admin:
        try:
            return admin.events(group=cluster.group, any_member=True)
        except ControllerAdminError:
            return None


def elections(
    before: list[dict[str, Any]] | None, after: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """What changed in the group between two reads of the history: master elections
    (a new master epoch), SyncStateSet changes (a new SyncStateSet epoch) and the
    commands that caused them — under load alone all three must be empty."""
    if before is None or after is None:
        return {"elections": 0, "sync_state_set_changes": 0, "events": [], "controllers": False}
    seen = max((int(e["index"]) for e in before), default=0)
    master_epoch = max((int(e.get("masterEpoch", 0)) for e in before), default=0)
    sss_epoch = max((int(e.get("syncStateSetEpoch", 0)) for e in before), default=0)
    new = [e for e in after if int(e["index"]) > seen]
    elected = changed = 0
    for e in sorted(new, key=lambda e: int(e["index"])):
        if int(e.get("masterEpoch", 0)) > master_epoch:
            elected += 1
            master_epoch = int(e["masterEpoch"])
        if int(e.get("syncStateSetEpoch", 0)) > sss_epoch:
            changed += 1
            sss_epoch = int(e["syncStateSetEpoch"])
    return {
        "elections": elected,
        "sync_state_set_changes": changed,
        "events": [
            {k: e.get(k) for k in ("index", "time", "command", "reason", "masterId", "masterEpoch")}
            for e in new
        ],
        "controllers": True,
    }

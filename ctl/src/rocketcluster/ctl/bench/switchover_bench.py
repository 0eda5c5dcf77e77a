"""Switchovers under load: a group of three replicas acknowledging on two, official
clients and the lean client producing all along, and the master role handed round
the brokers N times (what the operator's rolling restart does to each group). Per
switchover: did the designated broker become master, and how long the admin waited;
for the clients: errors, the slowest send during a switchover; then an audit of every
acknowledged message (lost must be 0)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from rocketcluster.ctl.chaos.checker import percentile
from rocketcluster.ctl.lean_workload import LeanWorkload
from rocketcluster.ctl.workload import Cluster, Workload, audit, ha_cluster, running

SETTLE_S = 2.0


def _pct(values: list[float], q: float) -> float:
    return percentile(values, q) or 0.0


def _slowest_during(sends: list[tuple[float, float]], windows: list[tuple[float, float]]) -> float:
    """The longest send that overlapped a switchover (sends: (done at, seconds))."""
    slowest = 0.0
    for done, seconds in sends:
        start = done - seconds
        if any(start < w_end and done > w_start for w_start, w_end in windows):
            slowest = max(slowest, seconds)
    return slowest


def _handover_after(cluster: Cluster, old_master: dict[str, Any]) -> dict[str, Any]:
    """The old master's handover status once its writes resumed (it may still be
    opening its replication stream to the new master when the admin has the answer)."""
    deadline = time.monotonic() + 10
    while True:
        view = cluster.broker_view(old_master) or {}
        handover: dict[str, Any] = (view.get("replication") or {}).get("handover") or {}
        if handover.get("writesPaused") is False or time.monotonic() > deadline:
            return handover
        time.sleep(0.05)


def _switchover(cluster: Cluster, order: list[int]) -> dict[str, Any]:
    view = cluster.wait_in_sync(3, timeout=120)
    master = int(view["masterId"])
    target = order[(order.index(master) + 1) % len(order)]  # round-robin over the brokers
    started = time.time()
    status, answer = cluster.switchover(target)
    seconds = time.time() - started
    group = answer.get("group") or {}
    ok = status == 200 and group.get("masterId") == target
    detail = answer.get("detail")
    handover = _handover_after(cluster, cluster.process_of(master, view))
    return {
        "from": master,
        "to": target,
        "ok": ok,
        "seconds": round(seconds, 3),
        # How long the old master held every append (its write gate closed).
        "write_pause_ms": handover.get("lastPauseMs") if ok else None,
        "started": started,
        "epochs": [view["masterEpoch"], group.get("masterEpoch")],
        "message": answer.get("message", "") if ok else (detail or answer),
    }


def _client(
    sends: list[tuple[float, float]],
    windows: list[tuple[float, float]],
    acked: int,
    errors: dict[str, int],
) -> dict[str, Any]:
    seconds = [s for _, s in sends]
    return {
        "acknowledged": acked,
        "send_errors": sum(errors.values()),
        "errors": errors,
        "send_p50_ms": round(_pct(seconds, 50) * 1000, 1),
        "send_p99_ms": round(_pct(seconds, 99) * 1000, 1),
        "max_send_ms_during_switchovers": round(_slowest_during(sends, windows) * 1000, 1),
        "max_send_ms": round(max(seconds, default=0.0) * 1000, 1),
    }


def run_switchover_bench(
    directory: Path, switchovers: int, lean_inflight: int, pause_s: float
) -> dict[str, Any]:
    shutil.rmtree(directory / "switchover", ignore_errors=True)
    with running(directory / "switchover", ha_cluster(name="so")) as cluster:
        official = Workload(cluster.endpoints)
        lean = LeanWorkload(cluster.endpoints.split(";")[0], inflight=lean_inflight)
        official.start(producers=2)
        if lean_inflight:
            lean.start()
        rounds: list[dict[str, Any]] = []
        started = time.time()
        try:
            time.sleep(SETTLE_S)
            order = sorted(int(b) for b in (cluster.group_view() or {})["replicas"])
            for _ in range(switchovers):
                rounds.append(_switchover(cluster, order))
                time.sleep(pause_s)
        finally:
            lean.stop()
            official.stop()
        elapsed = time.time() - started
        acked = set(official.acked) | set(lean.acked)
        seen = audit(cluster.endpoints, "audit", acked, timeout=900)
    windows = [(r["started"], r["started"] + r["seconds"]) for r in rounds]
    durations = [r["seconds"] for r in rounds if r["ok"]]
    pauses = [float(r["write_pause_ms"]) for r in rounds if r["write_pause_ms"] is not None]
    succeeded = sum(1 for r in rounds if r["ok"])
    return {
        "cluster": "3 replicas, sync replication acknowledged by 2 of 3, 3 controllers",
        "switchovers": len(rounds),
        "succeeded": succeeded,
        "success_rate": succeeded / len(rounds) if rounds else 0.0,
        "duration_p50_s": round(_pct(durations, 50), 3),
        "duration_p99_s": round(_pct(durations, 99), 3),
        "duration_max_s": round(max(durations, default=0.0), 3),
        "write_pause_p50_ms": _pct(pauses, 50),
        "write_pause_max_ms": max(pauses, default=0.0),
        "run_seconds": round(elapsed, 1),
        "official_client": _client(official.sends, windows, len(official.acked), official.errors),
        "lean_client": {
            **_client(lean.sends, windows, len(lean.acked), lean.errors),
            "inflight": lean_inflight,
            "batch": lean.batch,
            "retried_requests": lean.retried,
        },
        "acknowledged": len(acked),
        "lost": len(acked - set(seen)),
        "delivered_at_two_offsets": sum(1 for p in seen.values() if len(p) > 1),
        "rounds": [{k: v for k, v in r.items() if k != "started"} for r in rounds],
    }

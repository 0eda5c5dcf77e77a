"""Replicated groups: produce throughput (one broker, 3 replicas async, 3 replicas sync
acknowledging on 2 of 3) with the lean client, the replication lag under that load,
and the elections that load alone caused (there must be none); and failover: the master
killed with SIGKILL over and over under an official-client workload, with the recovery
time each client saw, where each failover's time went (failover_timeline.py) and an
audit for lost messages."""

from __future__ import annotations

import asyncio
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.ctl.bench.client_bench import TOPIC as BENCH_TOPIC
from rocketcluster.ctl.bench.client_bench import bench_cluster, lean_produce
from rocketcluster.ctl.bench.failover_timeline import LivenessSampler, elections, kill_timeline
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.workload import TOPIC, Cluster, Workload, audit, ha_cluster, running


def _lag_sampler(cluster: Cluster, stop: threading.Event, samples: list[int]) -> None:
    """Poll the master's view of its slaves: bytes it holds that each has not acked."""
    with httpx.Client(timeout=1.0) as http:
        while not stop.is_set():
            for proc in cluster.brokers():
                try:
                    view = http.get(f"http://{proc['addresses']['admin']}/v1/broker").json()
                except (httpx.HTTPError, ValueError):
                    continue
                if view.get("role") != "master":
                    continue
                end = view["commitLog"]["maxOffset"]
                for slave in view["replication"]["slaves"].values():
                    samples.append(max(0, end - slave["ackOffset"]))
            stop.wait(0.1)


def _produce_on(endpoint: str, seconds: float, topic: str) -> dict[str, Any]:
    return asyncio.run(lean_produce(endpoint, seconds, topic))


def throughput(directory: Path, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    runtime = LocalRuntime(directory / "single")
    runtime.down()
    state = runtime.up(bench_cluster("async"))
    try:
        out["single_broker"] = _produce_on(state["clientEndpoints"], seconds, BENCH_TOPIC)
    finally:
        runtime.down()
    for mode in ("async", "sync"):
        with running(
            directory / f"three-{mode}", ha_cluster(mode=mode, name=f"rep-{mode}")
        ) as cluster:
            stop = threading.Event()
            lags: list[int] = []
            sampler = threading.Thread(target=_lag_sampler, args=(cluster, stop, lags))
            sampler.start()
            loaded_from = time.time()
            try:
                # Straight to the master, as a Kubernetes Service routes (in the kernel);
                # the local group endpoint is a userspace proxy, measured beside it.
                master = cluster.master()["addresses"]["client"]
                with LivenessSampler(cluster) as liveness:
                    result = _produce_on(master, seconds, TOPIC)
                result["liveness_under_load"] = liveness.result()
                via = _produce_on(cluster.endpoints.split(";")[0], seconds, TOPIC)
                result["via_local_group_endpoint_msgs_per_s"] = via["msgs_per_s"]
                # Full-speed produce must never make the controllers think the live
                # master dead: any election here was caused by load alone.
                result["elections_under_load"] = len(elections(cluster, loaded_from))
            finally:
                stop.set()
                sampler.join()
            result["replication_lag_bytes"] = {
                "p50": statistics.median(lags) if lags else 0,
                "max": max(lags) if lags else 0,
                "samples": len(lags),
            }
            out[f"three_replicas_{mode}"] = result
    return out


def failover(directory: Path, kills: int) -> dict[str, Any]:
    shutil.rmtree(directory / "failover", ignore_errors=True)
    with running(directory / "failover", ha_cluster(name="fo")) as cluster:
        workload = Workload(cluster.endpoints)
        workload.start(producers=2)
        recoveries: list[float] = []
        serving: list[float] = []
        timelines: list[dict[str, float | None]] = []
        started = time.time()
        try:
            for _ in range(kills):
                time.sleep(1.5)
                victim = cluster.master()
                killed_at = time.time()
                cluster.runtime.kill(victim["name"])
                new_master = cluster.master(exclude={victim["name"]})
                serving.append(time.time() - killed_at)
                time.sleep(2.5)
                recoveries.append(workload.recovery_after(killed_at, cluster.group))
                timelines.append(kill_timeline(cluster, workload, killed_at, new_master))
                cluster.runtime.restart(victim["name"])
                cluster.wait_in_sync(3, timeout=60)
        finally:
            workload.stop()
        election_events = len(elections(cluster, started))
        seen = audit(cluster.endpoints, "audit", set(workload.acked), timeout=300)
    lost = set(workload.acked) - set(seen)
    ordered = sorted(recoveries)
    gaps = sorted(float(t["ack_gap_s"] or 0.0) for t in timelines)
    return {
        "kills": kills,
        "recovery_seconds": recoveries,
        "recovery_p50_s": ordered[len(ordered) // 2],
        "recovery_max_s": ordered[-1],
        # Recovery counts from a first failure; a failover the client rode out without
        # one shows as the gap in its acknowledgements.
        "ack_gap_p50_s": gaps[len(gaps) // 2],
        "ack_gap_max_s": gaps[-1],
        "new_master_serving_p50_s": sorted(serving)[len(serving) // 2],
        "election_events": election_events,  # two per kill: deposed, then elected
        "timelines": timelines,
        "acknowledged": len(workload.acked),
        "client_errors": len(workload.failures),
        "lost": len(lost),
        "delivered_at_two_offsets": sum(1 for p in seen.values() if len(p) > 1),
    }


def run_replication_bench(directory: Path, seconds: float, kills: int) -> dict[str, Any]:
    result: dict[str, Any] = {"throughput": throughput(directory, seconds)}
    if kills:
        result["failover"] = failover(directory, kills)
    return result

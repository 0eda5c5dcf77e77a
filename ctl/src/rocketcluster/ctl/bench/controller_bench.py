"""Controller benchmark: committed commands per second, and failover time — from
SIGKILL of the Raft leader to the first command committed by the new leader — over
many trials on three real controller processes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.api.client.controller import ControllerClient
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime

CLUSTER = RocketCluster.model_validate(
    {
        "metadata": {"name": "bench-ctl"},
        "spec": {"controller": {"replicas": 3}, "brokers": {"groups": 0}},
    }
)


def _members(runtime: LocalRuntime) -> list[dict[str, Any]]:
    return [p for p in (runtime.state() or {})["processes"] if p["role"] == "controller"]


async def _leader(runtime: LocalRuntime, within_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient(timeout=1.0) as http:
        while time.monotonic() < deadline:
            for proc in _members(runtime):
                try:
                    view = (
                        await http.get(f"http://{proc['addresses']['admin']}/v1/cluster")
                    ).json()
                except (httpx.HTTPError, ValueError):
                    continue
                if view["raft"]["state"] == "leader":
                    return proc
            await asyncio.sleep(0.05)
    raise TimeoutError("no controller leader")


async def _throughput(client: ControllerClient, seconds: float, inflight: int) -> dict[str, Any]:
    done = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            answer = await client.put_route(f"bench-{w}-{i % 50}", 8)
            if answer.ok:
                done += 1
                latencies.append(time.perf_counter() - started)
            i += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(inflight)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "commands": done,
        "commands_per_s": done / elapsed,
        "inflight": inflight,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else 0.0,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0,
    }


async def _failover_trial(runtime: LocalRuntime, client: ControllerClient, trial: int) -> float:
    old = await _leader(runtime)
    await client.put_route(f"warm-{trial}", 4)  # the client knows the current leader
    killed_at = time.monotonic()
    runtime.kill(old["name"])
    while True:
        answer = await client.put_route(f"after-kill-{trial}", 4)
        if answer.ok:
            recovered = time.monotonic() - killed_at
            break
    runtime.restart(old["name"], wait=False)
    runtime.wait_ready()
    return recovered


async def _run(directory: Path, trials: int, seconds: float) -> dict[str, Any]:
    runtime = LocalRuntime(directory)
    runtime.down()
    runtime.up(CLUSTER)
    try:
        addresses = [p["addresses"]["raft"] for p in _members(runtime)]
        client = ControllerClient(addresses, timeout=1.0, attempts=200)
        try:
            throughput = {n: await _throughput(client, seconds, n) for n in (1, 32)}
            failovers = [await _failover_trial(runtime, client, t) for t in range(trials)]
        finally:
            await client.close()
    finally:
        runtime.down()
    ordered = sorted(failovers)
    return {
        "throughput": throughput,
        "failover_seconds": failovers,
        "failover_p50_s": ordered[len(ordered) // 2],
        "failover_p99_s": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "failover_max_s": ordered[-1],
        "trials": trials,
    }


def run_controller_bench(directory: Path, trials: int = 20, seconds: float = 5.0) -> dict[str, Any]:
    return asyncio.run(_run(directory, trials, seconds))

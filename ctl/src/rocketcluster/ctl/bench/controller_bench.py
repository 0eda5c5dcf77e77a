"""Controller benchmark: committed commands per second, and failover time — from
SIGKILL of the Raft leader to the first command committed by the new leader — over
many trials on three real controller processes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rocketcluster.api.client.controller import ControllerClient
from rocketcluster.api.client.controller_admin import AsyncControllerAdmin, ControllerAdminError
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.controllers import async_controller_admin
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.state import LocalClusterState, LocalProcess

CLUSTER = RocketCluster.model_validate(
    {
        "metadata": {"name": "bench-ctl"},
        "spec": {"controller": {"replicas": 3}, "brokers": {"groups": 0}},
    }
)


def _state(runtime: LocalRuntime) -> LocalClusterState:
    state = runtime.cluster_state()
    if state is None:
        raise RuntimeError(f"no cluster recorded in {runtime.directory}")
    return state


async def _leader(
    state: LocalClusterState, admin: AsyncControllerAdmin, within_s: float = 30
) -> LocalProcess:
    """The controller leading now (every member asked: the one just killed may be
    remembered), waited for up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            leader = await admin.leader(fresh=True)
        except ControllerAdminError:
            await asyncio.sleep(0.05)
            continue
        found = state.listening_at(leader.address)
        if found is not None:
            return found
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


async def _failover_trial(
    runtime: LocalRuntime, admin: AsyncControllerAdmin, client: ControllerClient, trial: int
) -> float:
    old = await _leader(_state(runtime), admin)
    await client.put_route(f"warm-{trial}", 4)  # the client knows the current leader
    killed_at = time.monotonic()
    runtime.kill(old.name)
    while True:
        answer = await client.put_route(f"after-kill-{trial}", 4)
        if answer.ok:
            recovered = time.monotonic() - killed_at
            break
    runtime.restart(old.name, wait=False)
    runtime.wait_ready()
    return recovered


async def _run(directory: Path, trials: int, seconds: float) -> dict[str, Any]:
    runtime = LocalRuntime(directory)
    runtime.down()
    runtime.up(CLUSTER)
    try:
        state = _state(runtime)
        client = ControllerClient([p.raft for p in state.controllers()], timeout=1.0, attempts=200)
        admin = async_controller_admin(state, attempts=1)
        try:
            throughput = {n: await _throughput(client, seconds, n) for n in (1, 32)}
            failovers = [await _failover_trial(runtime, admin, client, t) for t in range(trials)]
        finally:
            await client.close()
            await admin.aclose()
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

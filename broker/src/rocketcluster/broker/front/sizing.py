"""How many fronts a broker runs, and what each one's share of the client limits is.

``frontProcesses: auto`` sizes from the CPU the container may use — its cgroup's
quota (``cpu.max``; ``cpu.cfs_quota_us`` on cgroup v1), else the CPU request the
operator hands down (``ROCKETCLUSTER_CPU_REQUEST_MILLIS``, from the Downward API) —
never from the node's core count: a broker on a 64-core node without a quota must not
start 63 fronts. Without either, ``auto`` is 0 (today's single process).

The measured costs (README, Performance: ``rocketctl bench cpu``) decide the rule:
the store process needs about one core at the rate fronts can feed it, and each front
runs its share of the clients' calls, so fronts only pay once there is a core for the
store process and at least two for fronts (``MIN_CORES``); from there each further
core is one more front, up to ``MAX_FRONTS``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from rocketcluster.api.kube import ENV_CPU_REQUEST_MILLIS
from rocketcluster.api.limits import ClientLimits

MIN_CORES = 3.0
MAX_FRONTS = 16
CPU_REQUEST_ENV = ENV_CPU_REQUEST_MILLIS
CGROUP_ROOT = Path("/sys/fs/cgroup")


def fronts_for(cores: float | None) -> int:
    """The fronts ``auto`` runs on ``cores`` (None: unknown)."""
    if cores is None or cores < MIN_CORES:
        return 0
    return min(MAX_FRONTS, max(2, int(cores + 0.25) - 1))


def quota_cores_v2(cpu_max: str) -> float | None:
    """Cores from cgroup v2's ``cpu.max`` ("max 100000": no quota)."""
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = int(parts[0]), int(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def quota_cores_v1(quota_us: str, period_us: str) -> float | None:
    """Cores from cgroup v1's ``cpu.cfs_quota_us`` (-1: no quota) and period."""
    quota, period = int(quota_us), int(period_us)
    return quota / period if quota > 0 and period > 0 else None


def container_cores(
    root: Path = CGROUP_ROOT, environ: Mapping[str, str] = os.environ
) -> float | None:
    """The CPU this container may use, or None when nothing says."""
    try:
        v2 = root / "cpu.max"
        if v2.exists():
            cores = quota_cores_v2(v2.read_text())
        else:
            v1 = root / "cpu"
            cores = quota_cores_v1(
                (v1 / "cpu.cfs_quota_us").read_text(), (v1 / "cpu.cfs_period_us").read_text()
            )
    except (OSError, ValueError):
        cores = None
    if cores is None:
        millis = environ.get(CPU_REQUEST_ENV, "")
        if millis.strip().isdigit() and int(millis) > 0:
            cores = int(millis) / 1000
    return cores


def resolve(front_processes: int | str) -> int:
    """A broker's fronts: the number configured, or ``auto`` sized to the container."""
    if front_processes == "auto":
        return fronts_for(container_cores())
    if isinstance(front_processes, int) and front_processes >= 0:
        return front_processes
    raise ValueError(f"frontProcesses must be 'auto' or a number >= 0, not {front_processes!r}")


def front_share(limits: ClientLimits, fronts: int) -> ClientLimits:
    """What one of ``fronts`` fronts enforces of the broker's limits.

    Limits over all clients (RPCs, connections, per address) are split evenly: the
    kernel spreads connections evenly, so the broker's total stays what the manifest
    says. Per-connection and per-client limits stay whole: a client's calls go over its
    one connection, which one front holds."""
    if fronts <= 1:
        return limits

    def part(value: int) -> int:
        return max(1, math.ceil(value / fronts))

    return limits.model_copy(
        update={
            "max_concurrent_rpcs": part(limits.max_concurrent_rpcs),
            "max_connections": part(limits.max_connections),
            "max_connections_per_address": part(limits.max_connections_per_address),
        }
    )

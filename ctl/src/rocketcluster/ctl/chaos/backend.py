"""Where the chaos cluster runs: a backend starts it and stops it; the runner does the
rest (workload, schedule, checks) the same way on every backend.

:class:`LocalChaosBackend` is ``rocketctl local`` with every controller and broker in
a network namespace of its own (network faults) and every broker's data on a
filesystem of its own (disk faults). The operator's backend, on the Kubernetes
emulator, is ``rocketcluster.e2e.k8s.chaos_pods``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.chaos import netns
from rocketcluster.ctl.chaos.processes import ChaosProcesses, LocalProcesses
from rocketcluster.ctl.chaos.roles import Health
from rocketcluster.ctl.chaos.volumes import Volumes, sweep_cgroups, volumes_usable
from rocketcluster.ctl.local.plan import ProcessPlan, plan_cluster
from rocketcluster.ctl.local.runtime import LocalRuntime


@dataclass
class ChaosCluster:
    """A started cluster, as the runner drives it."""

    processes: ChaosProcesses
    group_endpoints: dict[str, str]  # group -> host:port the workload's clients use
    network: netns.Network | None = None
    network_problem: str | None = None  # why network faults cannot run (None: they can)
    volumes: Volumes | None = None
    volume_problem: str | None = None  # why disk faults cannot run
    more_health: Callable[[], Health] | None = None  # whole also needs this
    # Whether its data outlives the session (a resumed soak goes on with it); if not,
    # each session ends with its own drain and audit.
    durable: bool = True
    notes: list[str] = field(default_factory=list)


class ChaosBackend(Protocol):
    def start(self, cluster: RocketCluster, work: Path) -> ChaosCluster:
        """Start ``cluster`` with its data under ``work`` (a resumed soak's is already
        there) and wait until every process is ready."""

    def stop(self) -> list[str]:
        """Stop exactly what :meth:`start` started; notes on what was left over."""

    def keep_logs(self, out: Path) -> None:
        """Copy the processes' logs into the report directory."""


def _placeholders() -> list[str]:
    """Addresses for a pure plan asked only for its process names."""
    return [f"{netns.SUBNET}.{10 + i}" for i in range(64)]


class LocalChaosBackend:
    def __init__(
        self,
        *,
        network_problem: str | None,
        loopback: bool,
        overrides: dict[str, Any],
        volume_overrides: dict[str, Any],
        controller_overrides: dict[str, Any],
    ) -> None:
        self.network_problem = network_problem
        self.volume_problem = "--loopback given" if loopback else volumes_usable()
        self.overrides = overrides
        self.volume_overrides = volume_overrides
        self.controller_overrides = controller_overrides
        self.runtime: LocalRuntime | None = None
        self.network: netns.Network | None = None
        self.volumes: Volumes | None = None
        self.work: Path | None = None

    def start(self, cluster: RocketCluster, work: Path) -> ChaosCluster:
        self.work = work
        notes: list[str] = []
        self.runtime = LocalRuntime(work / "cluster")
        hosts: list[str] | None = None
        prefix: Callable[[ProcessPlan], list[str]] | None = None
        # The plan is pure: asked once for the process names and roles.
        plans = plan_cluster(cluster, work / "cluster", _placeholders())
        if self.volume_problem is None:
            notes += sweep_cgroups()
            self.volumes = Volumes(work / "disks")
            for plan in plans:
                if plan.role == "broker":
                    self.volumes.mount(plan.name, work / "cluster" / "data" / plan.name)
        if self.network_problem is None:
            self.network = netns.Network()
            notes += self.network.sweep()
            # Every process but the group endpoints (which stay in the runner's
            # namespace) in a namespace of its own.
            names = [p.name for p in plans if p.role != "proxy"]
            nodes = self.network.build(names)
            hosts = [nodes[n].address for n in names] + [netns.RUNNER_ADDRESS]
            by_address = {n.address: n for n in nodes.values()}

            def prefix_of(plan: ProcessPlan) -> list[str]:
                node = by_address.get(plan.host)
                return node.exec_prefix if node else []

            prefix = prefix_of
        overrides = {**self.overrides, **(self.volume_overrides if self.volumes else {})}
        up = self.runtime.up(
            cluster,
            overrides=overrides,
            controller_overrides=self.controller_overrides,
            hosts=hosts,
            argv_prefix=prefix,
        )
        return ChaosCluster(
            LocalProcesses(self.runtime),
            dict(up["groupEndpoints"]),
            self.network,
            self.network_problem,
            self.volumes,
            self.volume_problem,
            notes=notes,
        )

    def stop(self) -> list[str]:
        notes: list[str] = []
        if self.runtime is not None:
            self.runtime.down()
        if self.network is not None:
            left = self.network.rule_count()
            if left:
                notes.append(f"{left} fault rules were still in place at teardown")
            self.network.teardown()
        if self.volumes is not None:
            notes += self.volumes.unmount_all()
        return notes

    def keep_logs(self, out: Path) -> None:
        logs = self.work / "cluster" / "logs" if self.work else None
        if logs is not None and logs.is_dir():
            shutil.copytree(logs, out / "logs", dirs_exist_ok=True)

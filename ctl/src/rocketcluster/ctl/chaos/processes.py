"""What the chaos runner needs from whatever runs the cluster's processes.

Two things run them: the local runtime (``rocketctl local``: the processes are this
runner's children, in network namespaces of their own) and the operator through the
Kubernetes emulator (``rocketcluster.e2e.k8s.chaos_pods``: pods that the pod realiser
makes processes, restarted by its kubelet, the operator itself one of the processes).
Faults, roles and health speak only this protocol, so both meet the same schedule,
workload and checker.

A process is a ``cluster.json`` record (``LocalProcess.as_dict()``): its name, role
(``controller``, ``broker``, ``proxy``), pid, host, addresses and group; an operator
replica is one too, with the role ``operator``, but only :meth:`operators` lists it.
"""

from __future__ import annotations

from typing import Any, Protocol

from rocketcluster.ctl.local.auth import local_admin_token
from rocketcluster.ctl.local.runtime import LocalRuntime, LocalRuntimeError
from rocketcluster.ctl.local.state import LocalClusterState


class NotPossibleHere(Exception):
    """A fault this way of running processes cannot inject (a front to kill where
    brokers run none; a roll where no operator runs); the fault is skipped, saying why."""


class ChaosProcesses(Protocol):
    def cluster_state(self) -> LocalClusterState | None:
        """Every process as it is now (a restart changes a pid): re-read per call."""

    def running(self) -> list[dict[str, Any]]:
        """The processes that run now."""

    def operators(self) -> list[dict[str, Any]]:
        """The operator replica that holds the Lease, where an operator runs."""

    def exited(self, name: str) -> bool:
        """Whether ``name`` stopped by itself since the runner last killed or started it
        (a crash the run must report)."""

    def kill(self, name: str) -> None:
        """SIGKILL ``name``; :meth:`restart` brings it back (or, under a kubelet, it
        comes back by itself)."""

    def kill_front(self, name: str) -> int:
        """SIGKILL one front process of broker ``name``; its pid (NotPossibleHere)."""

    def pause(self, name: str) -> None: ...

    def resume(self, name: str) -> None: ...

    def restart(self, name: str, *, wait: bool = True) -> object:
        """``name`` running again on the same data (after a kill, or a crash)."""

    def roll(self) -> str:
        """Ask for a rolling restart of every pod, as a user would (a spec change);
        what was asked (NotPossibleHere without an operator)."""

    def admin_token(self) -> str | None:
        """The bearer token of the brokers' admin APIs (None: no authentication)."""


class LocalProcesses:
    """The local runtime's processes (children of this runner)."""

    def __init__(self, runtime: LocalRuntime) -> None:
        self.runtime = runtime

    def cluster_state(self) -> LocalClusterState | None:
        return self.runtime.cluster_state()

    def running(self) -> list[dict[str, Any]]:
        return self.runtime.running()

    def operators(self) -> list[dict[str, Any]]:
        return []  # rocketctl local runs no operator

    def exited(self, name: str) -> bool:
        return self.runtime.exited(name)

    def kill(self, name: str) -> None:
        self.runtime.kill(name)

    def kill_front(self, name: str) -> int:
        try:
            return self.runtime.kill_front(name)
        except LocalRuntimeError as exc:
            raise NotPossibleHere(str(exc)) from exc

    def pause(self, name: str) -> None:
        self.runtime.pause(name)

    def resume(self, name: str) -> None:
        self.runtime.resume(name)

    def restart(self, name: str, *, wait: bool = True) -> object:
        return self.runtime.restart(name, wait=wait)

    def roll(self) -> str:
        raise NotPossibleHere("a roll needs the operator (the emulated backend's soak)")

    def admin_token(self) -> str | None:
        return local_admin_token(self.runtime.directory)

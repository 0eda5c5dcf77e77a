"""The chaos soak where the operator runs the cluster (#32): the real kopf operator
(two replicas contending for the Lease, as the chart deploys it) on the Kubernetes
emulator, its pods real processes that the pod realiser's kubelet restarts.

:class:`PodProcesses` is the runner's view of them (``ctl/chaos/processes.py``):

- a kill is SIGKILL of the pod's container, and its kubelet starts it again (after a
  back-off of 1 s doubling to 8 s) — no runner restarts it; a pod whose container
  was restarted more often than the runner killed it has crashed, and is reported
  so (counted per pod uid: a pod the operator replaces during a roll starts at 0);
- the operator's faults hit the replica holding the Lease (:meth:`operators`), named
  as its process (``rocketcluster-operator-1-3``: replica 1, third start), killed
  with SIGKILL (no release: its standby waits the Lease out) or stopped with SIGSTOP
  (its renewals stop; when it wakes, it must find the Lease taken and step down);
- a roll is what a user does: ``spec.image`` changed to a new tag (the pods run
  as host processes, so the image is only a name, but every pod must restart, in
  the roller's order);
- the cluster is whole when, besides the probe's checks, the operator's own status
  is current and healthy (Ready, nothing in progress, nothing degraded) and a
  replica holds the Lease.

The emulator keeps its objects in memory, so the cluster lives as long as one
session: a session of this soak ends with the final drain and audit of what it
acknowledged, and a resumed run starts a new cluster (see ``chaos_soak``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT, CLIENT_PORT, CONTROLLER_PORT
from rocketcluster.ctl.chaos.processes import NotPossibleHere
from rocketcluster.ctl.chaos.roles import Health
from rocketcluster.ctl.local.runtime import FRONT_MARKER, children_of
from rocketcluster.ctl.local.state import LocalClusterState, LocalProcess
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.operated import OperatedCluster


def _restarts(pod: Mapping[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def pod_process(
    pod: Mapping[str, Any], pids: list[int], namespace: str, logs: Path
) -> LocalProcess | None:
    """The runner's record of a controller or broker pod (None for any other pod, or
    one without an address yet). Its addresses are the pod's own: how this host
    reaches it, and what a broker registers with the controllers (its advertised
    host, its name under the group's headless Service, resolves to its pod IP, which
    a recreated StatefulSet pod keeps), which the probe matches replicas by."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    name, ip = str(meta.get("name", "")), (pod.get("status") or {}).get("podIP")
    if not name or not ip:
        return None
    component = labels.get(kube.LABEL_COMPONENT)
    common: dict[str, Any] = {
        "name": name,
        "pid": pids[0] if pids else 0,
        "host": ip,
        "config_path": logs.parent / "pods" / name,
        "log_path": logs / namespace / f"{name}_{component}.log",
    }
    if component == kube.COMPONENT_CONTROLLER:
        member = labels.get(kube.LABEL_MEMBER, name)
        return LocalProcess(
            role="controller",
            addresses={
                "admin": f"{ip}:{ADMIN_PORT}",
                "raft": f"{ip}:{CONTROLLER_PORT}",
                "service-admin": f"{kube.service_host(member, namespace)}:{ADMIN_PORT}",
            },
            **common,
        )
    group = labels.get(kube.LABEL_GROUP)
    if component == kube.COMPONENT_BROKER and group:
        registered = kube.pod_host(name, kube.headless_service_name(group), namespace)
        return LocalProcess(
            role="broker",
            group=group,
            addresses={
                "client": f"{ip}:{CLIENT_PORT}",
                "dns-client": f"{registered}:{CLIENT_PORT}",
                "admin": f"{ip}:{ADMIN_PORT}",
            },
            **common,
        )
    return None


class PodProcesses:
    def __init__(
        self, backend: EmulatedBackend, cluster: OperatedCluster, endpoints: dict[str, str]
    ) -> None:
        """``endpoints``: each broker group's Service, as this host reaches it."""
        self.backend = backend
        self.cluster = cluster
        self.endpoints = endpoints
        self.namespace = backend.namespace
        self.logs = backend.harness.dir / "logs"
        self._killed: dict[str, int] = {}  # pod uid -> restarts the runner caused
        self._rolls = 0

    # -- what runs ------------------------------------------------------------------

    def _pods(self) -> list[dict[str, Any]]:
        return self.cluster.pods({})

    def _realised(self) -> dict[str, list[int]]:
        """Pod name -> the pids of its running containers."""
        try:
            pods = self.backend.harness.realised_pods()
        except (httpx.HTTPError, ValueError):
            return {}
        return {
            str(p["name"]): [int(pid) for pid in p.get("pids") or []]
            for p in pods
            if p.get("namespace") == self.namespace
        }

    def operators(self) -> list[dict[str, Any]]:
        """The replica whose current process holds the Lease ([] while none does)."""
        replicas = self.backend.operators
        holder = replicas.holder()
        for index, proc in enumerate(replicas.processes):
            name = replicas.pod_name(index)
            if holder.startswith(name + "_") and proc.poll() is None:
                log = self.backend.harness.dir / f"{name}.log"
                return [{"name": name, "role": "operator", "pid": proc.pid, "logPath": str(log)}]
        return []

    def cluster_state(self) -> LocalClusterState | None:
        return self._state(self._realised())

    def _state(self, realised: dict[str, list[int]]) -> LocalClusterState:
        found = [
            pod_process(
                pod, realised.get(str(pod["metadata"]["name"]), []), self.namespace, self.logs
            )
            for pod in self._pods()
            if not pod["metadata"].get("deletionTimestamp")
        ]
        processes = [p for p in found if p is not None]
        return LocalClusterState(
            name=self.cluster.name,
            directory=self.backend.harness.dir,
            processes=tuple(processes),
            group_endpoints=self.endpoints,
        )

    def running(self) -> list[dict[str, Any]]:
        realised = self._realised()  # one ask of the realiser for both
        return [p.as_dict() for p in self._state(realised).processes if realised.get(p.name)]

    def exited(self, name: str) -> bool:
        pod = self._pod(name)
        if pod is None:
            return False
        uid = str(pod["metadata"].get("uid", ""))
        return _restarts(pod) > self._killed.get(uid, 0)

    def _pod(self, name: str) -> dict[str, Any] | None:
        return self.backend.get("pods", name)

    # -- faults -----------------------------------------------------------------------

    def kill(self, name: str) -> None:
        replicas = self.backend.operators
        for index, proc in enumerate(replicas.processes):
            if replicas.pod_name(index) == name:
                proc.send_signal(signal.SIGKILL)  # its Deployment starts another
                return
        pod = self._pod(name)
        if pod is not None:
            uid = str(pod["metadata"].get("uid", ""))
            self._killed[uid] = max(self._killed.get(uid, 0), _restarts(pod)) + 1
        self.backend.kill_pod(name)

    def kill_front(self, name: str) -> int:
        pids = self._realised().get(name) or []
        fronts = children_of(pids[0], FRONT_MARKER) if pids else []
        if not fronts:
            raise NotPossibleHere(f"{name} runs no front process (frontProcesses: 0?)")
        os.kill(fronts[0], signal.SIGKILL)
        return fronts[0]

    def _pids(self, name: str) -> list[int]:
        """An operator replica's process by its name whether or not it leads (a paused
        leader loses the Lease while stopped, and must still be woken), else a pod's."""
        replicas = self.backend.operators
        for index, proc in enumerate(replicas.processes):
            if replicas.pod_name(index) == name:
                return [proc.pid] if proc.poll() is None else []
        return self._realised().get(name) or []

    def _signal(self, name: str, signum: signal.Signals) -> None:
        # The container's own process, as kill -STOP does; gone: it ended (a kill of
        # another fault, or its kubelet's restart).
        for pid in self._pids(name)[:1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def pause(self, name: str) -> None:
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def restart(self, name: str, *, wait: bool = True) -> object:
        """Nothing to start: the kubelet (or the operator's Deployment) starts it. A
        crash the runner noticed is counted as seen, so it is reported once. (Never
        lowered: a kill's heal may come before its kubelet's restart, whose back-off
        grows with each kill.)"""
        pod = self._pod(name)
        if pod is not None:
            uid = str(pod["metadata"].get("uid", ""))
            self._killed[uid] = max(self._killed.get(uid, 0), _restarts(pod))
        return None

    def roll(self) -> str:
        self._rolls += 1
        current = str(self.cluster.status().get("image") or "rocketcluster/broker:chaos")
        image = f"{current.rpartition(':')[0] or current}:chaos-roll-{self._rolls}"
        self.cluster.patch({"image": image})
        return f"spec.image={image}"

    def admin_token(self) -> str | None:
        return None  # the soak's cluster runs without authentication (chaos_cluster)

    # -- whole again ------------------------------------------------------------------

    def operator_health(self) -> Health:
        """The operator's part of "whole": a replica holds the Lease, and the status
        of the current generation says Ready, nothing in progress, nothing degraded."""
        if not self.operators():
            return Health(False, "no operator replica holds the Lease")
        try:
            resource = self.cluster.resource() or {}
        except (httpx.HTTPError, ValueError) as exc:
            return Health(False, f"the API server did not answer: {exc}")
        status = resource.get("status") or {}
        generation = (resource.get("metadata") or {}).get("generation")
        if status.get("observedGeneration") != generation:
            return Health(False, "the operator has not observed the current spec yet")
        if not self.cluster.healthy(status):
            return Health(False, f"operator status: {self.cluster.conditions_line()}")
        return Health(True)

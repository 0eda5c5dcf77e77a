"""Who is who right now: the Raft leader, each group's master and slaves, and whether
the cluster is whole again. Faults target roles found at run time, so every answer
comes from the processes themselves (admin APIs, short timeouts: a paused or
partitioned process must not stall the runner)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from rocketcluster.api.broker_config import split_registered
from rocketcluster.api.client.controller_admin import ControllerAdmin, ControllerAdminError
from rocketcluster.api.tls import admin_scheme, http_verify
from rocketcluster.ctl.chaos.processes import ChaosProcesses
from rocketcluster.ctl.local.controllers import controller_admin
from rocketcluster.ctl.local.state import LocalClusterState

TIMEOUT_S = 1.5


@dataclass
class Health:
    healthy: bool
    reason: str = ""


class ClusterProbe:
    """Processes come back as ``cluster.json`` records (dicts), as the fault
    injector and the drain watch take them; every call re-reads them (a restart
    changes a pid). ``more_health``: what else must hold for the cluster to be whole
    where something runs besides its processes (the operator's status)."""

    def __init__(
        self,
        processes: ChaosProcesses,
        replicas: int,
        more_health: Callable[[], Health] | None = None,
    ) -> None:
        self.control = processes
        self.replicas = replicas
        self.more_health = more_health
        self._http: httpx.Client | None = None
        self._scheme = "http"
        self._controllers: ControllerAdmin | None = None
        self._controller_addresses: list[str] = []

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        if self._controllers is not None:
            self._controllers.close()

    def _state(self) -> LocalClusterState | None:
        return self.control.cluster_state()

    def _admin_http(self) -> httpx.Client:
        """The brokers' admin APIs: https with the cluster's CA, the admin token."""
        if self._http is None:
            state = self._state()
            tls = state.client_tls() if state else None
            token = self.control.admin_token()
            self._scheme = admin_scheme(tls)
            self._http = httpx.Client(
                timeout=TIMEOUT_S,
                verify=http_verify(tls),
                headers={"authorization": f"Bearer {token}"} if token else {},
            )
        return self._http

    def _admin(self) -> ControllerAdmin | None:
        """One search for the leader per call, short timeouts: a paused or cut-off
        controller must not stall the runner. Made again when the controllers'
        addresses change (a rolled controller pod comes back at a new address)."""
        state = self._state()
        if state is None or not state.controllers():
            return None
        addresses = state.controller_admin_addresses()
        if self._controllers is None or addresses != self._controller_addresses:
            if self._controllers is not None:
                self._controllers.close()
            self._controllers = controller_admin(
                state, timeout=TIMEOUT_S, probe_timeout=TIMEOUT_S, attempts=1
            )
            self._controller_addresses = addresses
        return self._controllers

    def processes(self) -> list[dict[str, Any]]:
        state = self._state()
        return [p.as_dict() for p in state.processes] if state else []

    def operators(self) -> list[dict[str, Any]]:
        """The operator replica that leads (holds the Lease), where one runs."""
        return self.control.operators()

    def controllers(self) -> list[dict[str, Any]]:
        state = self._state()
        return [p.as_dict() for p in state.controllers()] if state else []

    def groups(self) -> list[str]:
        state = self._state()
        return sorted(state.group_endpoints) if state else []

    def brokers(self, group: str) -> list[dict[str, Any]]:
        state = self._state()
        return [p.as_dict() for p in state.brokers(group)] if state else []

    def group_of(self, name: str) -> str | None:
        state = self._state()
        if state is None:
            return None
        found = next((p for p in state.brokers() if p.name == name), None)
        return state.group_of(found) if found else None

    def get(self, address: str, path: str) -> Any:
        """The JSON answer of GET ``path`` on an admin API, None when it fails (a
        paused or cut-off process must not stall the runner)."""
        try:
            http = self._admin_http()
            answer = http.get(f"{self._scheme}://{address}{path}")
            return answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def raft_leader(self) -> dict[str, Any] | None:
        """The controller that says it leads, with the highest term (a cut-off old
        leader may still believe it leads until check-quorum retires it): every
        member is asked each time."""
        admin, state = self._admin(), self._state()
        if admin is None or state is None:
            return None
        try:
            leader = admin.leader(fresh=True)
        except ControllerAdminError:
            return None
        found = state.listening_at(leader.address)
        return found.as_dict() if found else None

    def group_view(self, group: str) -> dict[str, Any] | None:
        admin = self._admin()
        if admin is None:
            return None
        try:
            return admin.group(group)
        except ControllerAdminError:
            return None

    def _proc_of(self, group: str, registered: str | None) -> dict[str, Any] | None:
        state = self._state()
        if not registered or state is None:
            return None
        found = state.broker_serving(split_registered(registered)[0], group)
        return found.as_dict() if found else None

    def master(self, group: str) -> dict[str, Any] | None:
        """The master the controllers appointed; when no controller answers, the
        broker that says it is master."""
        view = self.group_view(group)
        if view is not None:
            master = view.get("masterId")
            if master is None:
                return None
            return self._proc_of(group, view["replicas"].get(str(master)))
        for proc in self.brokers(group):
            b = self.broker_view(proc)
            if b and b.get("role") == "master":
                return proc
        return None

    def queue_floors(self, topics: Iterable[str]) -> dict[tuple[str, str, int], int]:
        """Per (topic, broker group, queue id), the first offset its master still
        holds (what retention left). A group whose master does not answer is left
        out: its queues count as holding everything."""
        floors: dict[tuple[str, str, int], int] = {}
        for group in self.groups():
            master = self.master(group)
            if master is None:
                continue
            for topic in topics:
                view = self.get(master["addresses"]["admin"], f"/v1/topics/{topic}")
                for row in view.get("queueOffsets", []) if isinstance(view, dict) else []:
                    floors[(topic, group, int(row["queueId"]))] = int(row["minOffset"])
        return floors

    def broker_view(self, proc: dict[str, Any]) -> dict[str, Any] | None:
        view = self.get(proc["addresses"]["admin"], "/v1/broker")
        return view if isinstance(view, dict) else None

    def health(self) -> Health:
        """Whole again: every process runs, a Raft leader exists, every group has a
        master that knows it is one and a full SyncStateSet, and every broker is ready
        (``/readyz``: its fronts serve the client port). A master the controllers named
        whose fronts were still starting served no client: a drain measured from then
        timed the broker's start, not the consumers (``make chaos``, pause +
        kill-two-replicas)."""
        running = {p["name"] for p in self.control.running()}
        missing = [p["name"] for p in self.processes() if p["name"] not in running]
        if missing:
            return Health(False, f"not running: {', '.join(missing)}")
        if self.raft_leader() is None:
            return Health(False, "no Raft leader")
        for group in self.groups():
            view = self.group_view(group)
            if view is None or view.get("masterId") is None:
                return Health(False, f"{group}: no master")
            if len(view.get("syncStateSet", [])) < self.replicas:
                return Health(False, f"{group}: SyncStateSet {view.get('syncStateSet')}")
            master = self._proc_of(group, view["replicas"].get(str(view["masterId"])))
            b = self.broker_view(master) if master else None
            if master is None or not b or b.get("role") != "master":
                return Health(False, f"{group}: the appointed master does not serve yet")
            for proc in self.brokers(group):
                if proc["name"] != master["name"]:
                    s = self.broker_view(proc)
                    if not s or s.get("role") != "slave":
                        return Health(False, f"{proc['name']} is not a slave yet")
                if self.get(proc["addresses"]["admin"], "/readyz") is None:
                    return Health(False, f"{proc['name']} does not serve its clients yet")
        return self.more_health() if self.more_health is not None else Health(True)

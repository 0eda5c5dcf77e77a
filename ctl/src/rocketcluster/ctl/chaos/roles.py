"""Who is who right now: the Raft leader, each group's master and slaves, and whether
the cluster is whole again. Faults target roles found at run time, so every answer
comes from the processes themselves (admin APIs, short timeouts: a paused or
partitioned process must not stall the runner)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from rocketcluster.api.broker_config import split_registered
from rocketcluster.ctl.local.runtime import LocalRuntime

TIMEOUT_S = 1.5


@dataclass
class Health:
    healthy: bool
    reason: str = ""


class ClusterProbe:
    def __init__(self, runtime: LocalRuntime, replicas: int) -> None:
        self.runtime = runtime
        self.replicas = replicas
        self._http = httpx.Client(timeout=TIMEOUT_S)

    def close(self) -> None:
        self._http.close()

    def processes(self) -> list[dict[str, Any]]:
        return list((self.runtime.state() or {"processes": []})["processes"])

    def controllers(self) -> list[dict[str, Any]]:
        return [p for p in self.processes() if p["role"] == "controller"]

    def groups(self) -> list[str]:
        state = self.runtime.state() or {}
        return sorted(state.get("groupEndpoints", {}))

    def brokers(self, group: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.processes()
            if p["role"] == "broker" and p["name"].rpartition("-")[0] == group
        ]

    def group_of(self, name: str) -> str | None:
        for p in self.processes():
            if p["name"] == name and p["role"] == "broker":
                return str(p["name"].rpartition("-")[0])
        return None

    def get(self, address: str, path: str) -> Any:
        """The JSON answer of GET ``path`` on an admin API, None when it fails (a
        paused or cut-off process must not stall the runner)."""
        try:
            answer = self._http.get(f"http://{address}{path}")
            return answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def raft_leader(self) -> dict[str, Any] | None:
        """The controller that says it leads, with the highest term (a cut-off old
        leader may still believe it leads until check-quorum retires it)."""
        best: tuple[int, dict[str, Any]] | None = None
        for proc in self.controllers():
            view = self.get(proc["addresses"]["admin"], "/v1/cluster")
            if not view or view.get("raft", {}).get("state") != "leader":
                continue
            term = int(view["raft"]["term"])
            if best is None or term > best[0]:
                best = (term, proc)
        return best[1] if best else None

    def group_view(self, group: str) -> dict[str, Any] | None:
        leader = self.raft_leader()
        if leader is None:
            return None
        view = self.get(leader["addresses"]["admin"], f"/v1/groups/{group}")
        return view if isinstance(view, dict) else None

    def _proc_of(self, group: str, registered: str | None) -> dict[str, Any] | None:
        if not registered:
            return None
        client = split_registered(registered)[0]
        for proc in self.brokers(group):
            if proc["addresses"]["client"] == client:
                return proc
        return None

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

    def broker_view(self, proc: dict[str, Any]) -> dict[str, Any] | None:
        view = self.get(proc["addresses"]["admin"], "/v1/broker")
        return view if isinstance(view, dict) else None

    def health(self) -> Health:
        """Whole again: every process runs, a Raft leader exists, and every group has
        a master that knows it is one and a full SyncStateSet."""
        running = {p["name"] for p in self.runtime.running()}
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
            if not b or b.get("role") != "master":
                return Health(False, f"{group}: the appointed master does not serve yet")
            for proc in self.brokers(group):
                if master is not None and proc["name"] == master["name"]:
                    continue
                s = self.broker_view(proc)
                if not s or s.get("role") != "slave":
                    return Health(False, f"{proc['name']} is not a slave yet")
        return Health(True)

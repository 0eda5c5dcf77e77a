"""A pod's ``status`` from what its containers are doing, as kubelet reports it: phase,
addresses, the four conditions (with ``lastTransitionTime`` kept while a condition
holds) and one ``containerStatuses`` entry per container. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

HOST_IP = "127.0.0.1"


def transition_time(before: Mapping[str, Any] | None, status: str, now: str) -> str:
    """A condition's ``lastTransitionTime``: the one it had while its status stays
    ``status`` (the time says when it last changed, as kubectl shows it), else now."""
    before = before or {}
    kept = before.get("lastTransitionTime") if before.get("status") == status else None
    return str(kept or now)


@dataclass
class ContainerState:
    """What kubelet knows of one container."""

    name: str
    image: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    pid: int | None = None
    last_state: dict[str, Any] = field(default_factory=dict)

    def terminated_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "exitCode": self.exit_code if self.exit_code is not None else 128 + (self.signal or 0),
            "reason": self.reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "containerID": f"process://{self.pid}",
        }
        if self.signal:
            out["signal"] = self.signal
        return {"terminated": out}

    def to_status(self) -> dict[str, Any]:
        if self.state == "running":
            state: dict[str, Any] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = self.terminated_state()
        else:
            waiting: dict[str, Any] = {"reason": self.reason}
            if self.message:
                waiting["message"] = self.message
            state = {"waiting": waiting}
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_state,
        }
        if self.pid is not None:
            out["containerID"] = f"process://{self.pid}"
        return out


def phase(
    restart_policy: str,
    initialized: bool,
    init_failed: bool,
    containers: list[ContainerState],
) -> str:
    if init_failed:
        return "Failed"
    if not initialized or not containers:
        return "Pending"
    if any(c.state == "running" for c in containers):
        return "Running"
    done = [c for c in containers if c.state == "terminated"]
    if len(done) == len(containers) and restart_policy != "Always":
        if all(c.exit_code == 0 for c in done):
            return "Succeeded"
        if restart_policy == "Never":
            return "Failed"
    if any(c.restart_count or c.started_at for c in containers):
        return "Running"
    return "Pending"


def pod_status(
    pod: Mapping[str, Any],
    *,
    init: list[ContainerState],
    containers: list[ContainerState],
    initialized: bool,
    init_failed: bool,
    pod_ip: str,
    start_time: str,
    now: str,
) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    old = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
    containers_ready = bool(containers) and all(c.ready for c in containers)
    pod_phase = phase(spec.get("restartPolicy", "Always"), initialized, init_failed, containers)
    if pod_phase == "Succeeded":
        containers_ready = False

    def condition(kind: str, ok: bool, reason: str | None = None) -> dict[str, Any]:
        status = "True" if ok else "False"
        out: dict[str, Any] = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": transition_time(old.get(kind), status, now),
        }
        if reason and not ok:
            out["reason"] = reason
        return out

    status: dict[str, Any] = {
        "phase": pod_phase,
        "conditions": [
            condition("PodScheduled", True),
            condition("Initialized", initialized, "ContainersNotInitialized"),
            condition("ContainersReady", containers_ready, "ContainersNotReady"),
            condition("Ready", containers_ready, "ContainersNotReady"),
        ],
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "qosClass": "BestEffort",
        "containerStatuses": [c.to_status() for c in containers],
    }
    if init:
        status["initContainerStatuses"] = [c.to_status() for c in init]
    return status

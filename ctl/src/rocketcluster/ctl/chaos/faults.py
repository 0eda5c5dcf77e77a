"""Fault kinds and how to inject and heal them.

A fault names a role, not a process: "the master of group 0", "the Raft leader".
The injector resolves the role when the fault starts (so a fault always hits
whoever holds the role then), remembers exactly what it did — which processes it
killed or paused, which iptables rules it added — and its heal undoes exactly that.
Network faults need the namespaces of ``netns``; without them they are skipped, and
the run says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rocketcluster.ctl.chaos import netns
from rocketcluster.ctl.chaos.roles import ClusterProbe
from rocketcluster.ctl.local.runtime import LocalRuntime, LocalRuntimeError

log = logging.getLogger("rocketcluster.chaos")


class FaultKind(StrEnum):
    KILL = "kill"  # kill -9, restarted on the same data at heal
    PAUSE = "pause"  # SIGSTOP, SIGCONT at heal
    PARTITION = "partition"  # one node cut off from everything
    MASTER_FROM_CONTROLLERS = "partition-master-controllers"  # clients still reach it
    LEADER_PARTITION = "partition-raft-leader"
    ONEWAY_INBOUND = "oneway-inbound"  # nobody can open a connection to the node
    ONEWAY_OUTBOUND = "oneway-outbound"  # the node cannot open a connection
    PACKET_LOSS = "packet-loss"
    KILL_CONTROLLER_MAJORITY = "kill-controller-majority"
    KILL_TWO_REPLICAS = "kill-two-replicas"  # the master and one slave of a group
    KILL_FRONT = "kill-front"  # kill -9 one front process; its broker starts it again


NETWORK_KINDS = frozenset(
    {
        FaultKind.PARTITION,
        FaultKind.MASTER_FROM_CONTROLLERS,
        FaultKind.LEADER_PARTITION,
        FaultKind.ONEWAY_INBOUND,
        FaultKind.ONEWAY_OUTBOUND,
        FaultKind.PACKET_LOSS,
    }
)


class Target(StrEnum):
    MASTER = "master"  # the current master of a group
    SLAVE = "slave"  # a current slave of a group
    LEADER = "leader"  # the current Raft leader of the controllers
    FOLLOWER = "follower"  # a controller that does not lead
    ALL = "all"  # every controller and broker


DEFAULT_TARGET = {
    FaultKind.MASTER_FROM_CONTROLLERS: Target.MASTER,
    FaultKind.LEADER_PARTITION: Target.LEADER,
    FaultKind.KILL_CONTROLLER_MAJORITY: Target.LEADER,
    FaultKind.KILL_TWO_REPLICAS: Target.MASTER,
    FaultKind.PACKET_LOSS: Target.ALL,
}


@dataclass(frozen=True)
class FaultSpec:
    kind: FaultKind
    duration: float
    target: Target = Target.MASTER
    group: int = 0  # which broker group, modulo the number of groups
    probability: float = 0.1  # packet loss only

    def describe(self) -> str:
        where = f" of group {self.group}" if self.target in (Target.MASTER, Target.SLAVE) else ""
        extra = f" p={self.probability:g}" if self.kind is FaultKind.PACKET_LOSS else ""
        return f"{self.kind.value} ({self.target.value}{where}{extra}, {self.duration:g}s)"


def spec(kind: FaultKind, duration: float, target: Target | None = None, **kw: Any) -> FaultSpec:
    return FaultSpec(kind, duration, target or DEFAULT_TARGET.get(kind, Target.MASTER), **kw)


@dataclass
class ActiveFault:
    fault_id: int
    spec: FaultSpec
    targets: list[str]
    groups: list[str]  # broker groups it hits; empty: all (controllers, everything)
    rules: list[netns.Rule] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)


class Skipped(Exception):
    """The fault cannot be injected now (no namespaces, no holder of the role, the
    holder already under another fault); the run records why."""


class Injector:
    def __init__(
        self,
        runtime: LocalRuntime,
        probe: ClusterProbe,
        network: netns.Network | None,
        network_problem: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.probe = probe
        self.network = network
        self.network_problem = network_problem
        self._busy: dict[str, int] = {}  # process name -> fault id holding it

    # -- resolving roles ------------------------------------------------------------

    def _free(self, procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for p in procs if p["name"] not in self._busy]

    def _resolve(self, target: Target, group: str) -> list[dict[str, Any]]:
        if target is Target.ALL:
            return [p for p in self.probe.processes() if p["role"] in ("broker", "controller")]
        if target is Target.MASTER:
            master = self.probe.master(group)
            return [master] if master else []
        if target is Target.SLAVE:
            master = self.probe.master(group)
            return [
                p
                for p in self.probe.brokers(group)
                if master is None or p["name"] != master["name"]
            ]
        leader = self.probe.raft_leader()
        if target is Target.LEADER:
            return [leader] if leader else []
        return [
            p for p in self.probe.controllers() if leader is None or p["name"] != leader["name"]
        ]

    def _one(self, target: Target, group: str) -> dict[str, Any]:
        found = self._free(self._resolve(target, group))
        if not found:
            raise Skipped(f"no free {target.value} to target in {group}")
        return found[0]

    def _log_end(self, proc: dict[str, Any]) -> int:
        view = self.probe.broker_view(proc) or {}
        return int(view.get("commitLog", {}).get("maxOffset", -1))

    def _node(self, name: str) -> netns.Node:
        assert self.network is not None
        return self.network.nodes[name]

    # -- inject / heal ----------------------------------------------------------------

    def inject(self, fault_id: int, fs: FaultSpec) -> ActiveFault:
        if fs.kind in NETWORK_KINDS and self.network is None:
            raise Skipped(f"network faults need namespaces: {self.network_problem}")
        groups = self.probe.groups()
        group = groups[fs.group % len(groups)] if groups else ""
        broker_target = fs.target in (Target.MASTER, Target.SLAVE)
        active = ActiveFault(fault_id, fs, [], [group] if broker_target else [])
        kind = fs.kind
        if kind is FaultKind.KILL_CONTROLLER_MAJORITY:
            controllers = self.probe.controllers()
            leader = self.probe.raft_leader()
            ordered = sorted(
                controllers, key=lambda p: leader is None or p["name"] != leader["name"]
            )
            victims = self._free(ordered)[: len(controllers) // 2 + 1]
            if len(victims) <= len(controllers) // 2:
                raise Skipped("a controller majority is already under another fault")
            self._kill(active, victims)
        elif kind is FaultKind.KILL_TWO_REPLICAS:
            # The master and the slave with the most data: the survivor is the one most
            # likely to lack acknowledged writes, the hardest case for an election.
            master = self._one(Target.MASTER, group)
            slaves = self._free(self._resolve(Target.SLAVE, group))
            if not slaves:
                raise Skipped(f"no free slave in {group}")
            self._kill(active, [master, max(slaves, key=self._log_end)])
        elif kind is FaultKind.KILL:
            self._kill(active, [self._one(fs.target, group)])
        elif kind is FaultKind.KILL_FRONT:
            victim = self._one(fs.target, group)
            try:
                pid = self.runtime.kill_front(victim["name"])
            except LocalRuntimeError as exc:
                raise Skipped(str(exc)) from exc
            self._hold(active, [victim])
            active.groups = [group]
            log.info("fault %d: front pid %d of %s killed", fault_id, pid, victim["name"])
        elif kind is FaultKind.PAUSE:
            victim = self._one(fs.target, group)
            self.runtime.pause(victim["name"])
            active.paused.append(victim["name"])
            self._hold(active, [victim])
        elif kind is FaultKind.PACKET_LOSS:
            victims = self._resolve(fs.target, group)
            if not victims:
                raise Skipped(f"no {fs.target.value} to target")
            for v in victims:
                active.rules += netns.lossy(self._node(v["name"]), fs.probability)
            active.targets = [v["name"] for v in victims]
        else:
            self._partition(active, kind, group)
        if active.rules:
            assert self.network is not None
            self.network.add(active.rules)
        log.info("fault %d: %s on %s", fault_id, fs.describe(), ", ".join(active.targets))
        return active

    def _partition(self, active: ActiveFault, kind: FaultKind, group: str) -> None:
        fs = active.spec
        if kind is FaultKind.MASTER_FROM_CONTROLLERS:
            master = self._one(Target.MASTER, group)
            peers = [self._node(c["name"]) for c in self.probe.controllers()]
            active.rules = netns.cut_from(self._node(master["name"]), peers)
            active.targets = [master["name"]]
            active.groups = [group]
            return
        target = Target.LEADER if kind is FaultKind.LEADER_PARTITION else fs.target
        victim = self._one(target, group)
        node = self._node(victim["name"])
        if kind in (FaultKind.PARTITION, FaultKind.LEADER_PARTITION):
            active.rules = netns.isolate(node)
        elif kind is FaultKind.ONEWAY_INBOUND:
            active.rules = netns.refuse_inbound(node)
        else:
            active.rules = netns.refuse_outbound(node)
        active.targets = [victim["name"]]
        if victim["role"] == "broker":
            active.groups = [self.probe.group_of(victim["name"]) or group]
        else:
            active.groups = []

    def _kill(self, active: ActiveFault, victims: list[dict[str, Any]]) -> None:
        for v in victims:
            self.runtime.kill(v["name"])
            active.killed.append(v["name"])
        self._hold(active, victims)
        if any(v["role"] == "broker" for v in victims):
            active.groups = sorted(
                {self.probe.group_of(v["name"]) or "" for v in victims if v["role"] == "broker"}
            )

    def _hold(self, active: ActiveFault, victims: list[dict[str, Any]]) -> None:
        active.targets = [v["name"] for v in victims]
        for v in victims:
            self._busy[v["name"]] = active.fault_id

    def heal(self, active: ActiveFault) -> None:
        if active.rules and self.network is not None:
            self.network.delete(active.rules)
        for name in active.paused:
            self.runtime.resume(name)
        for name in active.killed:
            self.runtime.restart(name, wait=False)
        for name in active.targets:
            if self._busy.get(name) == active.fault_id:
                del self._busy[name]
        log.info("fault %d healed", active.fault_id)

    def heal_everything(self) -> list[str]:
        """The final heal: no rule left, nothing paused, every process running."""
        notes = []
        if self.network is not None:
            self.network.flush_all()
        running = {p["name"] for p in self.runtime.running()}
        for proc in self.probe.processes():
            if proc["name"] in running:
                self.runtime.resume(proc["name"])
            else:
                notes.append(f"restarted {proc['name']}")
                self.runtime.restart(proc["name"], wait=False)
        self._busy.clear()
        return notes

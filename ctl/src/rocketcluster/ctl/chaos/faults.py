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
import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rocketcluster.ctl.chaos import netns
from rocketcluster.ctl.chaos.processes import ChaosProcesses, NotPossibleHere
from rocketcluster.ctl.chaos.roles import ClusterProbe
from rocketcluster.ctl.chaos.volumes import Volumes

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
    KILL_CONTROLLERS = "kill-all-controllers"  # every controller at once
    PARTITION_HALVES = "partition-halves"  # every node in one of two halves
    PARTITION_BRIDGE = "partition-bridge"  # two halves and one node that sees both
    PARTITION_RING = "partition-majorities-ring"  # each node sees its own majority
    DISK_FULL = "disk-full"  # a broker's volume has no room left
    SLOW_DISK = "slow-disk"  # a broker's volume allows a few writes per second
    # Where the operator runs (the emulated soak): the replica holding the Lease killed
    # (no release: the standby waits the Lease out) or stopped (its renewals stop),
    # and a rolling restart of every pod asked through the manifest.
    KILL_OPERATOR = "kill-operator"
    PAUSE_OPERATOR = "pause-operator"
    ROLL = "roll"


# Only where the operator runs (the emulated soak's backend).
OPERATOR_KINDS = frozenset({FaultKind.KILL_OPERATOR, FaultKind.PAUSE_OPERATOR, FaultKind.ROLL})


NETWORK_KINDS = frozenset(
    {
        FaultKind.PARTITION,
        FaultKind.MASTER_FROM_CONTROLLERS,
        FaultKind.LEADER_PARTITION,
        FaultKind.ONEWAY_INBOUND,
        FaultKind.ONEWAY_OUTBOUND,
        FaultKind.PACKET_LOSS,
        FaultKind.PARTITION_HALVES,
        FaultKind.PARTITION_BRIDGE,
        FaultKind.PARTITION_RING,
    }
)
# Faults on the nodes' volumes (volumes.py): need per-broker filesystems.
DISK_KINDS = frozenset({FaultKind.DISK_FULL, FaultKind.SLOW_DISK})
# Partitions that split every node (controllers and brokers) by a topology.
TOPOLOGY_KINDS = (FaultKind.PARTITION_HALVES, FaultKind.PARTITION_BRIDGE, FaultKind.PARTITION_RING)


class Target(StrEnum):
    MASTER = "master"  # the current master of a group
    SLAVE = "slave"  # a current slave of a group
    LEADER = "leader"  # the current Raft leader of the controllers
    FOLLOWER = "follower"  # a controller that does not lead
    ALL = "all"  # every controller and broker
    OPERATOR = "operator"  # the operator replica that holds the Lease


DEFAULT_TARGET = {
    FaultKind.MASTER_FROM_CONTROLLERS: Target.MASTER,
    FaultKind.LEADER_PARTITION: Target.LEADER,
    FaultKind.KILL_CONTROLLER_MAJORITY: Target.LEADER,
    FaultKind.KILL_TWO_REPLICAS: Target.MASTER,
    FaultKind.PACKET_LOSS: Target.ALL,
    FaultKind.KILL_CONTROLLERS: Target.ALL,
    FaultKind.PARTITION_HALVES: Target.ALL,
    FaultKind.PARTITION_BRIDGE: Target.ALL,
    FaultKind.PARTITION_RING: Target.ALL,
    FaultKind.ROLL: Target.ALL,
    FaultKind.KILL_OPERATOR: Target.OPERATOR,
    FaultKind.PAUSE_OPERATOR: Target.OPERATOR,
}


@dataclass(frozen=True)
class FaultSpec:
    kind: FaultKind
    duration: float
    target: Target = Target.MASTER
    group: int = 0  # which broker group, modulo the number of groups
    probability: float = 0.1  # packet loss only
    # Partitions by topology: orders the nodes (so a seed replays the same sides).
    # Disk full: bytes left free. Slow disk: writes per second allowed.
    shuffle: int = 0
    leave_bytes: int = 0
    write_iops: int = 4

    def describe(self) -> str:
        where = f" of group {self.group}" if self.target in (Target.MASTER, Target.SLAVE) else ""
        extra = ""
        if self.kind is FaultKind.PACKET_LOSS:
            extra = f" p={self.probability:g}"
        elif self.kind is FaultKind.DISK_FULL:
            extra = f" {self.leave_bytes >> 10} KiB left"
        elif self.kind is FaultKind.SLOW_DISK:
            extra = f" {self.write_iops} writes/s"
        elif self.kind in TOPOLOGY_KINDS:
            extra = f" order {self.shuffle}"
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
    filled: list[str] = field(default_factory=list)  # volumes with a ballast
    throttled: list[str] = field(default_factory=list)  # volumes slowed down


class Skipped(Exception):
    """The fault cannot be injected now (no namespaces, no holder of the role, the
    holder already under another fault); the run records why."""


class Injector:
    def __init__(
        self,
        control: ChaosProcesses,
        probe: ClusterProbe,
        network: netns.Network | None,
        network_problem: str | None = None,
        volumes: Volumes | None = None,
        volume_problem: str | None = None,
    ) -> None:
        self.control = control
        self.probe = probe
        self.network = network
        self.network_problem = network_problem
        self.volumes = volumes
        self.volume_problem = volume_problem
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
        if target is Target.OPERATOR:
            return self.probe.operators()
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
        if fs.kind in DISK_KINDS and self.volumes is None:
            raise Skipped(f"disk faults need per-broker volumes: {self.volume_problem}")
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
        elif kind is FaultKind.KILL_CONTROLLERS:
            controllers = self.probe.controllers()
            victims = self._free(controllers)
            if len(victims) < len(controllers):
                raise Skipped("a controller is already under another fault")
            self._kill(active, victims)
        elif kind in DISK_KINDS:
            self._disk(active, self._one(fs.target, group))
        elif kind in TOPOLOGY_KINDS:
            self._topology(active)
        elif kind is FaultKind.KILL_TWO_REPLICAS:
            # The master and the slave with the most data: the survivor is the one most
            # likely to lack acknowledged writes, the hardest case for an election.
            master = self._one(Target.MASTER, group)
            slaves = self._free(self._resolve(Target.SLAVE, group))
            if not slaves:
                raise Skipped(f"no free slave in {group}")
            self._kill(active, [master, max(slaves, key=self._log_end)])
        elif kind in (FaultKind.KILL, FaultKind.KILL_OPERATOR):
            self._kill(active, [self._one(fs.target, group)])
        elif kind is FaultKind.KILL_FRONT:
            victim = self._one(fs.target, group)
            try:
                pid = self.control.kill_front(victim["name"])
            except NotPossibleHere as exc:
                raise Skipped(str(exc)) from exc
            self._hold(active, [victim])
            active.groups = [group]
            log.info("fault %d: front pid %d of %s killed", fault_id, pid, victim["name"])
        elif kind is FaultKind.ROLL:
            try:
                asked = self.control.roll()
            except NotPossibleHere as exc:
                raise Skipped(str(exc)) from exc
            active.targets = [asked]
        elif kind in (FaultKind.PAUSE, FaultKind.PAUSE_OPERATOR):
            victim = self._one(fs.target, group)
            self.control.pause(victim["name"])
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

    def _topology(self, active: ActiveFault) -> None:
        """Split every controller and broker by the fault's topology; the nodes are
        ordered by name, then shuffled by the fault's own seed."""
        nodes = sorted(
            (self._node(p["name"]) for p in self._resolve(Target.ALL, "")),
            key=lambda n: n.name,
        )
        random.Random(active.spec.shuffle).shuffle(nodes)
        kind = active.spec.kind
        if kind is FaultKind.PARTITION_RING:
            cut = netns.majorities_ring(nodes)
        else:
            split = netns.halves if kind is FaultKind.PARTITION_HALVES else netns.bridge
            cut = netns.grudges(split(nodes))
        by_name = {n.name: n for n in nodes}
        active.rules = netns.isolate_from(by_name, cut)
        active.targets = [n.name for n in nodes]
        active.groups = []

    def _disk(self, active: ActiveFault, victim: dict[str, Any]) -> None:
        assert self.volumes is not None
        fs, name = active.spec, victim["name"]
        if fs.kind is FaultKind.DISK_FULL:
            taken = self.volumes.fill(name, fs.leave_bytes)
            active.filled.append(name)
            log.info("fault %d: ballast of %d MiB on %s", active.fault_id, taken >> 20, name)
        else:
            self.volumes.throttle(name, int(victim["pid"]), fs.write_iops)
            active.throttled.append(name)
        self._hold(active, [victim])
        active.groups = [self.probe.group_of(name) or ""]

    def _kill(self, active: ActiveFault, victims: list[dict[str, Any]]) -> None:
        for v in victims:
            self.control.kill(v["name"])
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
            self.control.resume(name)
        if self.volumes is not None:
            for name in active.filled:
                self.volumes.empty(name)
            for name in active.throttled:
                self.volumes.unthrottle(name)
        for name in active.killed:
            self.control.restart(name, wait=False)
        for name in active.targets:
            if self._busy.get(name) == active.fault_id:
                del self._busy[name]
        log.info("fault %d healed", active.fault_id)

    def revive(self) -> list[str]:
        """Start again every controller and broker that is not running although no
        fault holds it (it exited by itself); their names."""
        dead = [
            p["name"]
            for p in self.probe.processes()
            if p["role"] in ("broker", "controller")
            and p["name"] not in self._busy
            and self.control.exited(p["name"])
        ]
        for name in dead:
            self.control.restart(name, wait=False)
        return dead

    def heal_everything(self) -> list[str]:
        """The final heal: no rule left, nothing paused, every process running."""
        notes = []
        if self.network is not None:
            self.network.flush_all()
        if self.volumes is not None:
            for name in self.volumes.volumes:
                self.volumes.empty(name)
                self.volumes.unthrottle(name)
        running = {p["name"] for p in self.control.running()}
        for proc in self.probe.processes():
            if proc["name"] in running:
                self.control.resume(proc["name"])
            else:
                notes.append(f"restarted {proc['name']}")
                self.control.restart(proc["name"], wait=False)
        self._busy.clear()
        return notes

"""Operator deaths during a roll, on the emulated backend: the leading replica
SIGKILLed once the first broker pod is restarting, and the operator's failpoints
(operator/failpoints.py) armed one after another so that one roll ends an operator at
each kind of step — after a controller leadership transfer, before and during a
switchover, right after a group's last pod was deleted (between two groups), after a
switchover. Each time the standby must take the Lease and the roll go on in order.

The points are armed in this order because a roll of three controllers and two
groups of three has one transfer and two switchovers: group 0's switchover is asked
for three times (the first two operators die before and during it), its old master's
deletion ends the fourth, group 1's switchover the fifth.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from rocketcluster.e2e.k8s.backends import EmulatedBackend

POINTS = (
    "after:TransferLeadership",
    "KILL",  # the leader SIGKILLed after the first broker pod's restart began
    "before:Switchover",
    "during:Switchover",
    "after:DeletePod",
    "after:Switchover",
)


@dataclass(frozen=True)
class Takeover:
    what: str  # a failpoint's name, or "SIGKILL"
    died_at: float  # time.time()
    seconds: float  # until another replica held the Lease


@dataclass
class OperatorKills:
    """Runs beside a roll (a context manager); :attr:`takeovers` says what happened."""

    backend: EmulatedBackend
    groups: list[str]
    takeovers: list[Takeover] = field(default_factory=list)
    pending: list[str] = field(default_factory=lambda: list(POINTS))
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> OperatorKills:
        self._since = time.time()
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        (self.backend.failpoints / "armed").write_text("")

    def _fired(self, point: str) -> float | None:
        path = self.backend.failpoints / "fired" / point.replace(":", "-")
        return path.stat().st_mtime if path.exists() else None

    def _broker_restarting(self) -> bool:
        return any(
            e.kind == "deleting" and e.at >= self._since and e.pod.startswith(tuple(self.groups))
            for e in self.backend.pod_events()
        )

    def _run(self) -> None:
        replicas = self.backend.operators
        try:
            while self.pending and not self._stop.is_set():
                point = self.pending[0]
                holder = replicas.holder()
                if point == "KILL":
                    if not self._broker_restarting():
                        self._stop.wait(0.2)
                        continue
                    old, killed = replicas.kill_leader()
                    took = replicas.wait_for_new_holder(old, timeout=120) - killed
                    self.takeovers.append(Takeover("SIGKILL", killed, took))
                    self.pending.pop(0)
                    continue
                (self.backend.failpoints / "armed").write_text(point + "\n")
                while not self._stop.is_set():
                    fired = self._fired(point)
                    if fired is not None:
                        took = replicas.wait_for_new_holder(holder, timeout=120) - fired
                        self.takeovers.append(Takeover(point, fired, took))
                        self.pending.pop(0)
                        break
                    self._stop.wait(0.2)
                    holder = replicas.holder() or holder
        except Exception as exc:  # reported by the test, not lost in a thread
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def lines(self) -> list[str]:
        out = [f"{t.what}: the standby led {t.seconds:.1f}s later" for t in self.takeovers]
        if self.pending:
            out.append(f"never reached: {', '.join(self.pending)}")
        return out


__all__ = ["POINTS", "OperatorKills", "Takeover"]

"""After every fault, each consumer group drains (issue #25).

When an episode's cluster is whole again, the producers pause (the sends already
started complete first), and the backlog of every consumer group the workload runs is
marked: per broker group, topic and queue, the queue's end on the group's master. The
consumers keep going; the check passes once each group's committed offset reached its
mark on every queue — zero lag — and fails when that takes longer than
``DRAIN_BOUND_S``, naming the broker group, consumer group, queue and offsets that
stalled, and what the master said was in flight or ready. Then the producers resume.

Why the bound holds on a healthy cluster: the consumers keep up with the producers
between faults, a delivery the fault cut off comes back when its invisible time (5 s
in the workload) expires, and a receive that finds nothing on the group it asked is
answered by a group that has messages (messaging/cross_group.py). Without that last
part the official consumer, which picks a group per receive, waited out long polls
on a drained group while the other held its backlog (issue #25)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from rocketcluster.ctl.chaos.roles import ClusterProbe

DRAIN_BOUND_S = 10.0
POLL_S = 0.5
SAMPLE = 20

# broker group, consumer group, topic, queue id
Key = tuple[str, str, str, int]


@dataclass(frozen=True)
class Mark:
    """Where a queue ended when the cluster was whole (``target``) and where the
    consumer group stood then (``committed``)."""

    target: int
    committed: int


@dataclass(frozen=True)
class Position:
    committed: int
    inflight: int = 0
    ready: int = 0


def behind(marks: Mapping[Key, Mark], now: Mapping[Key, Position]) -> list[Key]:
    """The queues whose consumer group has not yet committed up to its mark (a queue
    the group has no position on stands where it stood at the mark)."""
    return sorted(
        key
        for key, mark in marks.items()
        if (now[key].committed if key in now else mark.committed) < mark.target
    )


def stall_report(
    marks: Mapping[Key, Mark], now: Mapping[Key, Position], left: Sequence[Key]
) -> list[dict[str, Any]]:
    out = []
    for key in left[:SAMPLE]:
        position = now.get(key, Position(marks[key].committed))
        bgroup, cg, topic, queue = key
        out.append(
            {
                "bgroup": bgroup,
                "cg": cg,
                "topic": topic,
                "queue": queue,
                "committed": position.committed,
                "target": marks[key].target,
                "inflight": position.inflight,
                "ready": position.ready,
            }
        )
    return out


class DrainWatch:
    def __init__(
        self,
        probe: ClusterProbe,
        subscriptions: Sequence[tuple[str, str]],  # (consumer group, topic)
        *,
        quiesce: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        bound_s: float = DRAIN_BOUND_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.probe = probe
        self.quiesce = quiesce  # pauses the producers while the block runs
        self.subscriptions = list(subscriptions)
        self.bound_s = bound_s
        self._clock = clock
        self._sleep = sleep

    def _masters(self) -> dict[str, str]:
        """Each broker group's master admin address (a group without one is left out:
        the caller only checks a whole cluster)."""
        out = {}
        for group in self.probe.groups():
            master = self.probe.master(group)
            if master is not None:
                out[group] = str(master["addresses"]["admin"])
        return out

    def _positions(self, masters: Mapping[str, str]) -> dict[Key, Position]:
        out: dict[Key, Position] = {}
        for bgroup, admin in masters.items():
            for cg, topic in self.subscriptions:
                rows = self.probe.get(admin, f"/v1/groups/{quote(cg, safe='')}/offsets") or []
                for r in rows:
                    if r.get("topic") == topic:
                        out[(bgroup, cg, topic, int(r["queueId"]))] = Position(
                            int(r["committedOffset"]),
                            int(r.get("inflight", 0)),
                            int(r.get("ready", 0)),
                        )
        return out

    def _marks(self, masters: Mapping[str, str], now: Mapping[Key, Position]) -> dict[Key, Mark]:
        marks: dict[Key, Mark] = {}
        for bgroup, admin in masters.items():
            for cg, topic in self.subscriptions:
                view = self.probe.get(admin, f"/v1/topics/{quote(topic, safe='')}") or {}
                for q in view.get("queueOffsets", []):
                    key = (bgroup, cg, topic, int(q["queueId"]))
                    start = now[key].committed if key in now else int(q["minOffset"])
                    marks[key] = Mark(int(q["maxOffset"]), start)
        return marks

    def wait(self) -> dict[str, Any]:
        """With the producers paused: mark the backlog, then wait until it is consumed
        or the bound passes. Returns what the history records (``complete``,
        ``seconds``, the queues left, and ``paused_s``: how long the producers were
        held, from the moment no new send could start, which the checker leaves out of
        the clients' recovery times)."""
        paused = self._clock()
        with self.quiesce():
            result = self._wait()
        result["paused_s"] = round(self._clock() - paused, 2)
        return result

    def _wait(self) -> dict[str, Any]:
        began = self._clock()
        masters = self._masters()
        now = self._positions(masters)
        marks = self._marks(masters, now)
        backlog = sum(max(0, m.target - m.committed) for m in marks.values())
        while True:
            left = behind(marks, now)
            took = round(self._clock() - began, 2)
            if not left:
                return {"complete": True, "seconds": took, "backlog": backlog}
            if took >= self.bound_s:
                return {
                    "complete": False,
                    "seconds": took,
                    "backlog": backlog,
                    "bound_s": self.bound_s,
                    "stalled": stall_report(marks, now, left),
                    "stalled_queues": len(left),
                }
            self._sleep(POLL_S)
            now = self._positions(self._masters())

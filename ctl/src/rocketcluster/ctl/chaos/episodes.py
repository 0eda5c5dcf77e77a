"""Running one episode of a schedule: inject each fault at its offset, heal it when
its duration is up, record both in the history, then wait until the cluster is whole
again, check that every consumer group drains what it had to catch up on (drain.py),
and only then the quiet gap — so every episode starts from a healthy cluster and its
recovery is measured on its own."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

from rocketcluster.ctl.chaos.drain import DrainWatch
from rocketcluster.ctl.chaos.faults import ActiveFault, FaultSpec, Injector, Skipped
from rocketcluster.ctl.chaos.history import INFO, History
from rocketcluster.ctl.chaos.roles import ClusterProbe
from rocketcluster.ctl.chaos.schedule import Episode

log = logging.getLogger("rocketcluster.chaos")


def wait_healthy(
    probe: ClusterProbe,
    timeout_s: float,
    history: History,
    why: str,
    revive: Callable[[], list[str]] | None = None,
) -> bool:
    """Poll until the cluster is whole; note in the history how long it took.
    ``revive`` starts again any process that exited on its own (a crash: noted, and
    the run's report lists it) — nothing a fault did not kill should be down."""
    began = time.monotonic()
    deadline = began + timeout_s
    health = probe.health()
    while not health.healthy and time.monotonic() < deadline:
        for name in revive() if revive is not None else []:
            log.warning("%s had exited without being killed: started again", name)
            history.append(INFO, "note", event="crashed", process=name, why=why)
        time.sleep(0.25)
        health = probe.health()
    took = round(time.monotonic() - began, 2)
    history.append(
        INFO,
        "note",
        event="health",
        why=why,
        healthy=health.healthy,
        seconds=took,
        reason=health.reason,
    )
    if not health.healthy:
        log.warning("cluster not whole %.0fs after %s: %s", took, why, health.reason)
    return health.healthy


class EpisodeRunner:
    def __init__(
        self,
        injector: Injector,
        probe: ClusterProbe,
        history: History,
        drain: DrainWatch | None = None,
    ) -> None:
        self.injector = injector
        self.probe = probe
        self.history = history
        self.drain = drain
        self._ids = itertools.count(1)
        self.injected = 0  # faults injected (not skipped) by this runner

    def run(self, episode: Episode, settle_s: float) -> bool:
        """Returns whether the cluster was whole again within ``settle_s`` of the
        last heal."""
        log.info("episode: %s", episode.describe())
        began = time.monotonic()
        events = sorted(
            [(t.offset, 0, i) for i, t in enumerate(episode.faults)]
            + [(t.offset + t.fault.duration, 1, i) for i, t in enumerate(episode.faults)]
        )
        active: dict[int, ActiveFault] = {}
        for at, heal, index in events:
            time.sleep(max(0.0, began + at - time.monotonic()))
            fault = episode.faults[index].fault
            if not heal:
                self._inject(index, fault, active)
            elif index in active:
                done = active.pop(index)
                try:
                    self.injector.heal(done)
                finally:
                    self.history.append(
                        INFO, "fault", phase="end", fault_id=done.fault_id, kind=fault.kind.value
                    )
        healthy = wait_healthy(self.probe, settle_s, self.history, "episode", self.injector.revive)
        quiet_from = time.monotonic()
        if healthy and self.drain is not None:
            result = self.drain.wait()
            self.history.append(INFO, "note", event="drain", episode=episode.describe(), **result)
            if not result["complete"]:
                log.warning("consumers did not drain after %s: %s", episode.describe(), result)
        time.sleep(max(0.0, episode.gap - (time.monotonic() - quiet_from)))
        return healthy

    def _inject(self, index: int, fault: FaultSpec, active: dict[int, ActiveFault]) -> None:
        fault_id = next(self._ids)
        common = {"fault_id": fault_id, "kind": fault.kind.value, "spec": fault.describe()}
        try:
            done = self.injector.inject(fault_id, fault)
        except Skipped as why:
            log.warning("SKIPPED %s: %s", fault.describe(), why)
            self.history.append(
                INFO, "fault", phase="start", skipped=True, reason=str(why), **common
            )
            self.history.append(INFO, "fault", phase="end", **common)
            return
        active[index] = done
        self.injected += 1
        self.history.append(
            INFO, "fault", phase="start", targets=done.targets, groups=done.groups, **common
        )

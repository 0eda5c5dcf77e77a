"""Where the time of one failover goes, step by step, as seconds after the SIGKILL: the
controller deposing the dead master and electing another (its event history), the new
master's broker switching role and the group endpoint following it (their logs), and
what the official-client workload saw (its acknowledgements and failures)."""

from __future__ import annotations

import datetime
import itertools
import re
import threading
from pathlib import Path
from typing import Any

from rocketcluster.api.client.controller_admin import ControllerAdmin, ControllerAdminError
from rocketcluster.ctl.workload import Cluster, Workload

STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def first_logged(path: Path, pattern: str, after: float) -> float | None:
    """The time of the first line of ``path`` matching ``pattern`` logged at or after
    ``after`` (the processes log local time with milliseconds)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    wanted = re.compile(pattern)
    for line in text.splitlines():
        stamp = STAMP.match(line)
        if stamp is None or not wanted.search(line):
            continue
        at = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if at >= after:
            return at
    return None


def elections(cluster: Cluster, since: float) -> list[dict[str, Any]]:
    """ElectMaster events of the group since ``since`` (epoch seconds) in the
    controllers' replicated history (any member serves it): a failover is two (the
    dead master deposed, then a replica elected)."""
    with cluster.controller_admin() as admin:
        try:
            events = admin.events(since, cluster.group, any_member=True)
        except ControllerAdminError:
            return []
    return [e for e in events if e["command"] == "ElectMaster"]


def kill_timeline(
    cluster: Cluster,
    workload: Workload,
    killed_at: float,
    new_master: dict[str, Any],
    window: float = 2.5,
) -> dict[str, float | None]:
    """The steps of the failover that began with the SIGKILL at ``killed_at``."""
    events = elections(cluster, killed_at)
    deposed = [e["time"] / 1000 for e in events if e["detail"].get("newMaster") is None]
    elected = [e["time"] / 1000 for e in events if e["detail"].get("newMaster") is not None]
    endpoint = new_master["addresses"]["client"]
    switched = [
        first_logged(p.log_path, rf"master endpoint .* -> {re.escape(endpoint)}", killed_at)
        for p in cluster.local.proxies()
    ]
    promoted = first_logged(Path(new_master["logPath"]), "now master of", killed_at)
    acks = sorted(
        t for t in list(workload.acked.values()) if killed_at - 2 < t < killed_at + window
    )
    fails = [f for f in workload.failures if f >= killed_at]

    def since_kill(at: float | None) -> float | None:
        return None if at is None else round(at - killed_at, 3)

    return {
        "deposed_s": since_kill(min(deposed, default=None)),
        "elected_s": since_kill(min(elected, default=None)),
        "new_master_promoted_s": since_kill(promoted),
        "group_endpoint_switched_s": since_kill(min((s for s in switched if s), default=None)),
        "first_client_failure_s": since_kill(fails[0] if fails else None),
        "first_ack_after_kill_s": since_kill(next((t for t in acks if t > killed_at), None)),
        # The longest the workload went without an acknowledgement around the kill:
        # the outage a client saw, failures or not.
        "ack_gap_s": round(max((b - a for a, b in itertools.pairwise(acks)), default=0.0), 3),
        "slowest_send_s": round(
            max(
                (d for t, d in list(workload.sends) if killed_at < t < killed_at + window),
                default=0.0,
            ),
            3,
        ),
        "client_failures": len(fails),
    }


class LivenessSampler:
    """What the controllers' leader saw of the group's brokers while load ran: the
    oldest heartbeat (seconds since it arrived; a master is judged dead past its
    heartbeat timeout once its WatchRoles channel is gone) and the fewest open
    channels. A broker whose heartbeats load starved shows here before it causes an
    election."""

    def __init__(self, cluster: Cluster, every: float = 0.2) -> None:
        self.cluster = cluster
        self.every = every
        self.oldest_heartbeat_s: dict[int, float] = {}
        self.fewest_channels: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LivenessSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with self.cluster.controller_admin() as admin:
            while not self._stop.wait(self.every):
                self._sample(admin)

    def _sample(self, admin: ControllerAdmin) -> None:
        """The heartbeats and channels of the group's brokers as the leader sees them
        (its own ``/v1/cluster``: liveness is judged by the leader alone)."""
        try:
            view = list(admin.cluster().get("brokers", []))
        except ControllerAdminError:
            return
        for broker in view:
            if broker["group"] != self.cluster.group:
                continue
            bid = int(broker["brokerId"])
            self.oldest_heartbeat_s[bid] = max(
                self.oldest_heartbeat_s.get(bid, 0.0), float(broker["secondsSinceHeartbeat"])
            )
            self.fewest_channels[bid] = min(
                self.fewest_channels.get(bid, 1 << 30), int(broker["channels"])
            )

    def result(self) -> dict[str, Any]:
        return {
            "oldest_heartbeat_s": {str(b): round(s, 3) for b, s in self.oldest_heartbeat_s.items()},
            "fewest_channels": {str(b): c for b, c in self.fewest_channels.items()},
        }

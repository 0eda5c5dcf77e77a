"""The probe's view of the controllers follows them when they move (a rolled
controller pod comes back at a new address: the emulated soak's first roll left the
probe asking the old addresses, so it never found a leader again)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocketcluster.ctl.chaos.roles import ClusterProbe
from rocketcluster.ctl.local.state import LocalClusterState, LocalProcess


class MovingControllers:
    """Just what the probe reads here: the cluster's processes, at ``hosts``."""

    def __init__(self) -> None:
        self.hosts = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]

    def cluster_state(self) -> LocalClusterState:
        controllers = tuple(
            LocalProcess(
                name=f"c{i}",
                role="controller",
                pid=0,
                host=host,
                addresses={"admin": f"{host}:8080", "raft": f"{host}:9878"},
                config_path=Path("/nonexistent"),
                log_path=Path("/nonexistent"),
            )
            for i, host in enumerate(self.hosts)
        )
        return LocalClusterState(name="c", directory=Path("/nonexistent"), processes=controllers)

    def admin_token(self) -> str | None:
        return None

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the probe should not need {name} here")


def test_the_controllers_admin_client_is_made_again_when_their_addresses_change() -> None:
    controllers = MovingControllers()
    probe = ClusterProbe(controllers, replicas=3)
    try:
        first = probe._admin()
        assert first is not None and probe._admin() is first  # unchanged: kept
        controllers.hosts[1] = "127.0.0.22"  # controller 1 rolled to a new pod
        again = probe._admin()
        assert again is not None and again is not first
        assert probe._controller_addresses[1] == "127.0.0.22:8080"
        assert probe._admin() is again
    finally:
        probe.close()


class AllRunning:
    def __init__(self, procs: list[dict[str, Any]]) -> None:
        self.procs = procs

    def running(self) -> list[dict[str, Any]]:
        return self.procs

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the probe should not need {name} here")


class OneGroup(ClusterProbe):
    """A cluster of one group of three replicas, every answer from ``self.answers``
    (admin address + path -> JSON; a missing key is a failed request)."""

    def __init__(self) -> None:
        self.procs: list[dict[str, Any]] = [
            {"name": f"b{i}", "addresses": {"admin": f"10.0.0.{i}:8080"}} for i in range(3)
        ]
        super().__init__(AllRunning(self.procs), replicas=3)
        self.answers: dict[str, Any] = {}
        for i, proc in enumerate(self.procs):
            admin = proc["addresses"]["admin"]
            self.answers[admin + "/v1/broker"] = {"role": "master" if i == 0 else "slave"}
            self.answers[admin + "/readyz"] = {"status": "ready"}

    def processes(self) -> list[dict[str, Any]]:
        return self.procs

    def groups(self) -> list[str]:
        return ["g0"]

    def brokers(self, group: str) -> list[dict[str, Any]]:
        return self.procs

    def raft_leader(self) -> dict[str, Any] | None:
        return {"name": "c0"}

    def group_view(self, group: str) -> dict[str, Any] | None:
        return {"masterId": 1, "syncStateSet": [1, 2, 3], "replicas": {"1": "b0"}}

    def _proc_of(self, group: str, registered: str | None) -> dict[str, Any] | None:
        return self.procs[0]

    def get(self, address: str, path: str) -> Any:
        return self.answers.get(address + path)


def test_a_master_whose_fronts_do_not_serve_yet_is_not_whole() -> None:
    """The controllers named a master and it says so, but its client port is not
    served yet (``/readyz`` 503 while its fronts start): the cluster is not whole, so
    the drain does not time the broker's start (make chaos: pause + kill-two-replicas
    stalled the official FIFO consumer's drain this way)."""
    probe = OneGroup()
    try:
        assert probe.health().healthy, probe.health().reason
        del probe.answers["10.0.0.0:8080/readyz"]
        health = probe.health()
        assert not health.healthy
        assert health.reason == "b0 does not serve its clients yet"
    finally:
        probe.close()

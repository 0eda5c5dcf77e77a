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


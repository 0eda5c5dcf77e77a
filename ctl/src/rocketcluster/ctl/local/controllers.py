"""The controller admin client of a local cluster: its controllers' admin addresses,
https with its CA when it runs TLS, and its admin token when security.auth is on —
all from ``cluster.json`` and the cluster's directory, so no caller forgets one."""

from __future__ import annotations

from typing import TypedDict, Unpack

from rocketcluster.api.client.controller_admin import AsyncControllerAdmin, ControllerAdmin
from rocketcluster.ctl.local.auth import local_admin_token
from rocketcluster.ctl.local.state import LocalClusterState, LocalStateError


class AdminOptions(TypedDict, total=False):
    """How patient a client is (the defaults are the admin client's)."""

    timeout: float
    probe_timeout: float
    attempts: int
    retry_pause: float


def _addresses(state: LocalClusterState) -> list[str]:
    found = state.controller_admin_addresses()
    if not found:
        raise LocalStateError(str(state.directory), f"cluster {state.name} has no controller")
    return found


def controller_admin(state: LocalClusterState, **options: Unpack[AdminOptions]) -> ControllerAdmin:
    return ControllerAdmin(
        _addresses(state),
        tls=state.client_tls(),
        token=local_admin_token(state.directory),
        **options,
    )


def async_controller_admin(
    state: LocalClusterState, **options: Unpack[AdminOptions]
) -> AsyncControllerAdmin:
    return AsyncControllerAdmin(
        _addresses(state),
        tls=state.client_tls(),
        token=local_admin_token(state.directory),
        **options,
    )

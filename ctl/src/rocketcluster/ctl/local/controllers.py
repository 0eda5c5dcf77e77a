"""The controller admin client of a local cluster: its controllers' admin addresses,
https with its CA when it runs TLS, and its admin token when security.auth is on —
all from ``cluster.json`` and the cluster's directory, so no caller forgets one."""

from __future__ import annotations

from rocketcluster.api.client.controller_admin import AsyncControllerAdmin, ControllerAdmin
from rocketcluster.api.client.controller_requests import (
    ATTEMPTS,
    PROBE_TIMEOUT_S,
    RETRY_PAUSE_S,
    TIMEOUT_S,
)
from rocketcluster.ctl.local.auth import local_admin_token
from rocketcluster.ctl.local.state import LocalClusterState, LocalStateError


def _addresses(state: LocalClusterState) -> list[str]:
    found = state.controller_admin_addresses()
    if not found:
        raise LocalStateError(str(state.directory), f"cluster {state.name} has no controller")
    return found


def controller_admin(
    state: LocalClusterState,
    *,
    timeout: float = TIMEOUT_S,
    probe_timeout: float = PROBE_TIMEOUT_S,
    attempts: int = ATTEMPTS,
    retry_pause: float = RETRY_PAUSE_S,
) -> ControllerAdmin:
    return ControllerAdmin(
        _addresses(state),
        tls=state.client_tls(),
        token=local_admin_token(state.directory),
        timeout=timeout,
        probe_timeout=probe_timeout,
        attempts=attempts,
        retry_pause=retry_pause,
    )


def async_controller_admin(
    state: LocalClusterState,
    *,
    timeout: float = TIMEOUT_S,
    probe_timeout: float = PROBE_TIMEOUT_S,
    attempts: int = ATTEMPTS,
    retry_pause: float = RETRY_PAUSE_S,
) -> AsyncControllerAdmin:
    return AsyncControllerAdmin(
        _addresses(state),
        tls=state.client_tls(),
        token=local_admin_token(state.directory),
        timeout=timeout,
        probe_timeout=probe_timeout,
        attempts=attempts,
        retry_pause=retry_pause,
    )

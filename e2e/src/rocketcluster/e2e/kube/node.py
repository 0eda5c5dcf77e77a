"""What every pod worker of the node shares: where the node keeps its files, the API
server, the event log and ledger, what pods read from the cache, and — in image
mode — the working containers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from rocketcluster.e2e.kube.events import EventLog
from rocketcluster.e2e.kube.imagerun import ImageRuntime
from rocketcluster.e2e.kube.processes import Ledger


class PodInputs(Protocol):
    """What a pod reads from the rest of the cluster, answered from the cache."""

    def configmaps(self, namespace: str) -> Mapping[str, Mapping[str, Any]]: ...
    def secrets(self, namespace: str) -> Mapping[str, Mapping[str, Any]]: ...
    def services(self, namespace: str) -> list[Mapping[str, Any]]: ...
    def claim_exists(self, namespace: str, name: str) -> bool: ...
    def resolve(self, name: str) -> str | None: ...


@dataclass(frozen=True)
class NodeContext:
    root: Path
    api_url: str
    node_name: str
    events: EventLog
    ledger: Ledger
    http: httpx.AsyncClient
    inputs: PodInputs
    report: Callable[[Mapping[str, Any], dict[str, Any]], Awaitable[None]]
    probe_period_cap: float | None = None
    images: ImageRuntime | None = None  # image mode; None: containers are host processes
    # Host processes only: an image named here runs the Python packages below that
    # directory instead of the host's (a previous release's tree, for upgrade tests).
    host_sources: Mapping[str, Path] = field(default_factory=dict)
    # (namespace, ServiceAccount) → the token its pods mount (TokenRequest); raises
    # podenv.ConfigError while the account is missing. None: a fixed placeholder.
    token_for: Callable[[str, str], Awaitable[str]] | None = None
    # (pod uid, pod address) → the cgroup.procs its processes join before they exec
    # (NetworkPolicies enforced: firewall.py); None, or an answer of None: no cgroup.
    cgroup_for: Callable[[str, str], Awaitable[str | None]] | None = None

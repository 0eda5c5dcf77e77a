"""Where the jobs' inputs live on a running cluster: the controllers' event history and,
per broker group, the replicas whose admin API serves the stats topic.

Brokers register ``client-endpoint|ha-endpoint`` with the controllers; their admin API
listens on the same host at the standard admin port (DESIGN §3: the same in a pod and in
local mode, where every process has its own loopback address). ``broker_admin`` overrides
that per group when a deployment differs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from rocketcluster.api.broker_config import ADMIN_PORT, split_registered
from rocketcluster.api.client.admin import AdminClient, AdminError, StoredSnapshot
from rocketcluster.api.client.controller_admin import ControllerAdmin, ControllerAdminError

STATS_PAGE = 500


class ClusterUnreachableError(RuntimeError):
    """No controller (or no replica of a group) answered."""


@dataclass(frozen=True)
class GroupReplicas:
    """One broker group and the admin addresses of its replicas, master first."""

    name: str
    admin: tuple[str, ...]


def _host(endpoint: str) -> str:
    host = endpoint.rsplit(":", 1)[0] if ":" in endpoint else endpoint
    return host.strip("[]")


def group_replicas(
    view: Mapping[str, Any],
    broker_admin: Mapping[str, Sequence[str]] | None = None,
    scheme: str = "http",
) -> GroupReplicas:
    """A controller's group view (``GET /v1/groups``) as admin addresses, master first;
    ``https`` ones when the controllers were reached over https (a cluster with
    spec.security.tls serves https on every admin port)."""
    name = str(view["group"])
    if broker_admin and name in broker_admin:
        return GroupReplicas(name, tuple(broker_admin[name]))
    replicas: dict[str, str] = dict(view.get("replicas") or {})
    master = str(view.get("masterId"))
    order = sorted(replicas, key=lambda broker_id: (broker_id != master, int(broker_id)))
    admin = []
    for broker_id in order:
        client, _ = split_registered(replicas[broker_id])
        address = f"{_host(client)}:{ADMIN_PORT}"
        admin.append(address if scheme == "http" else f"{scheme}://{address}")
    return GroupReplicas(name, tuple(admin))


@dataclass
class ControllerApi:
    """GETs against whichever controller answers; every member serves the replicated
    state (groups, events), so no leader is needed to read (the shared client's
    ``any_member`` reads). ``addresses``: ``host:port`` or URLs (``https://`` ones
    trust the CA in $SSL_CERT_FILE)."""

    addresses: Sequence[str]
    timeout: float = 10.0
    errors: list[str] = field(default_factory=list)
    token: str | None = None  # the cluster's admin token when security.auth is on

    def get(self, path: str, **params: Any) -> Any:
        self.errors.clear()
        if not self.addresses:
            raise ClusterUnreachableError(
                f"no controller answered GET {path}: none given "
                "(give --controller http://HOST:8080 of a running controller)"
            )
        with ControllerAdmin(self.addresses, token=self.token, timeout=self.timeout) as api:
            try:
                return api.get(path, params, any_member=True)
            except ControllerAdminError as exc:
                self.errors.extend(exc.tried)
                raise ClusterUnreachableError(
                    f"no controller answered GET {path}: {'; '.join(exc.tried)} "
                    "(give --controller http://HOST:8080 of a running controller)"
                ) from exc

    def groups(
        self, broker_admin: Mapping[str, Sequence[str]] | None = None
    ) -> list[GroupReplicas]:
        tls = any(a.startswith("https://") for a in self.addresses)
        scheme = "https" if tls else "http"
        return [group_replicas(v, broker_admin, scheme) for v in self.get("/v1/groups")]

    def events(self, since_ms: int, group: str | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"since": since_ms / 1000}
        if group is not None:
            params["group"] = group
        found: list[dict[str, Any]] = self.get("/v1/events", **params)
        return found


def first_answering(group: GroupReplicas, token: str | None = None) -> AdminClient:
    """An admin client on the first replica of ``group`` that is up (master first): the
    stats topic is replicated, so any of them serves the same offsets."""
    problems = []
    for address in group.admin:
        client = AdminClient(address, timeout=10.0, token=token)
        if client.ready():
            return client
        problems.append(address)
        client.close()
    raise ClusterUnreachableError(
        f"no replica of broker group {group.name} answered at {', '.join(problems)}"
    )


def stats_offset_range(admin: AdminClient, since_ms: int | None) -> tuple[int, int]:
    """[first, end) queue offsets of the stats topic holding snapshots at or after
    ``since_ms`` (all kept ones when None)."""
    try:
        page = admin.stats_snapshots(0, 1)
        low, high = page.min_offset, page.max_offset
        if since_ms is not None:
            low = max(low, admin.stats_offset(since_ms))
    except AdminError as exc:
        raise ClusterUnreachableError(f"reading stats offsets from {admin.base}: {exc}") from exc
    return low, high


def read_stored(admin: AdminClient, start: int, end: int) -> Iterator[StoredSnapshot]:
    """The snapshots at stats offsets [start, end), with their offsets (a reader that
    loses the replica goes on from the next one on another)."""
    try:
        yield from admin.iter_stats_snapshots(start, end, page_size=STATS_PAGE)
    except (AdminError, httpx.HTTPError) as exc:
        raise ClusterUnreachableError(f"reading stats from {admin.base}: {exc}") from exc

"""Leader election through a ``coordination.k8s.io/v1`` Lease: of the operator's
replicas, one reconciles; the others wait, ready to take over.

The rules are client-go's. A holder renews every ``retry`` seconds; a candidate takes
the Lease once its record has stayed *unchanged* for ``leaseDurationSeconds`` as the
candidate's own clock measures it (never by comparing ``renewTime`` with local time,
so clock skew between nodes does not matter). Every write is a replace conditional on
the resourceVersion read, so two candidates never both win. A leader that cannot
renew for ``renew_deadline`` seconds steps down — its process exits and restarts as a
candidate — before anyone else may take over (renew deadline < lease duration). On a
clean shutdown the leader empties the holder so a standby takes over at once.

Why not kopf's own peering: it elects by priority and freezes operators of equal
priority with a warning, needs cluster-wide CRDs of its own, and gives the reconciler
no way to check, right before a disruptive action, that it still leads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from rocketcluster.operator.kube.client import KubeApiError, KubeClient, KubeUnavailable

API_VERSION = "coordination.k8s.io/v1"
DEFAULT_NAME = "rocketcluster-operator"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseConfig:
    name: str = DEFAULT_NAME
    namespace: str = "default"
    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_s < self.renew_deadline_s < self.duration_s:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_s}, {self.renew_deadline_s}, {self.duration_s})"
            )

    @classmethod
    def from_env(cls, namespace: str) -> LeaseConfig:
        """``ROCKETCLUSTER_LEASE_{NAME,DURATION_SECONDS,RENEW_DEADLINE_SECONDS,
        RETRY_PERIOD_SECONDS}`` (the chart sets them); the namespace is the pod's."""
        env = os.environ
        return cls(
            name=env.get("ROCKETCLUSTER_LEASE_NAME", DEFAULT_NAME),
            namespace=env.get("POD_NAMESPACE") or namespace,
            duration_s=float(env.get("ROCKETCLUSTER_LEASE_DURATION_SECONDS", "15")),
            renew_deadline_s=float(env.get("ROCKETCLUSTER_LEASE_RENEW_DEADLINE_SECONDS", "10")),
            retry_s=float(env.get("ROCKETCLUSTER_LEASE_RETRY_PERIOD_SECONDS", "2")),
        )


def identity() -> str:
    """Unique per process: a restarted container competes as a new candidate."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{secrets.token_hex(4)}"


def micro_time(at: datetime | None = None) -> str:
    """A ``MicroTime`` as the API server writes it."""
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration_s: float
    transitions: int
    resource_version: str

    @classmethod
    def of(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=float(spec.get("leaseDurationSeconds") or 0),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
        )


class Decision(Enum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # ours
    TAKE = "take"  # free, or its holder stopped renewing
    WAIT = "wait"  # another leads


def decide(
    record: LeaseRecord | None, unchanged_for_s: float, me: str, config: LeaseConfig
) -> Decision:
    """What a candidate does with the Lease as read, given how long (by its own clock)
    the record has stayed the same."""
    if record is None:
        return Decision.CREATE
    if record.holder == me:
        return Decision.RENEW
    if not record.holder:
        return Decision.TAKE
    if unchanged_for_s >= (record.duration_s or config.duration_s):
        return Decision.TAKE
    return Decision.WAIT


class LeaderElector:
    """One candidate. :meth:`acquire` returns once it leads; :meth:`keep` renews
    until it cannot, then returns; :meth:`release` hands the Lease back."""

    def __init__(
        self,
        client: KubeClient,
        config: LeaseConfig,
        me: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.config = config
        self.identity = me or identity()
        self._clock = clock
        self._seen: LeaseRecord | None = None
        self._seen_at = 0.0  # when the record last changed, by our clock
        self._renewed_at: float | None = None  # our last successful write as holder
        self.transitions = 0

    def leading(self) -> bool:
        """Whether this process may act: it holds the Lease and renewed it within the
        renew deadline (checked before every disruptive action)."""
        renewed = self._renewed_at
        return renewed is not None and self._clock() - renewed < self.config.renew_deadline_s

    def _path(self, name: str | None = None) -> str:
        base = f"/apis/{API_VERSION}/namespaces/{self.config.namespace}/leases"
        return f"{base}/{name}" if name else base

    async def _read(self) -> tuple[dict[str, Any] | None, LeaseRecord | None]:
        try:
            lease: dict[str, Any] = await self._client.request("GET", self._path(self.config.name))
        except KubeApiError as exc:
            if exc.status == 404:
                return None, None
            raise
        record = LeaseRecord.of(lease)
        if record != self._seen:
            self._seen, self._seen_at = record, self._clock()
        return lease, record

    def _spec(self, acquire: bool, transitions: int) -> dict[str, Any]:
        now = micro_time()
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.config.duration_s)),
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if acquire:
            spec["acquireTime"] = now
        return spec

    async def try_once(self) -> bool:
        """One round of the election: create, take or renew the Lease if the rules
        allow; whether this candidate now leads."""
        asked_at = self._clock()
        lease, record = await self._read()
        decision = decide(record, self._clock() - self._seen_at, self.identity, self.config)
        if decision is Decision.WAIT:
            return False
        try:
            if decision is Decision.CREATE:
                body = {
                    "apiVersion": API_VERSION,
                    "kind": "Lease",
                    "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                    "spec": self._spec(True, 0),
                }
                await self._client.request("POST", self._path(), body=body)
            else:
                assert lease is not None and record is not None
                taking = decision is Decision.TAKE
                transitions = record.transitions + (1 if taking else 0)
                replaced = {
                    **lease,
                    "spec": {**(lease.get("spec") or {}), **self._spec(taking, transitions)},
                }
                await self._client.request("PUT", self._path(self.config.name), body=replaced)
                self.transitions = transitions
        except KubeApiError as exc:
            if exc.status in (409, 422):  # another candidate wrote first
                return False
            raise
        if decision is not Decision.RENEW:
            log.info(
                "leading as %s (Lease %s/%s)",
                self.identity,
                self.config.namespace,
                self.config.name,
            )
        self._renewed_at = asked_at  # measured from before the request: conservative
        return True

    async def acquire(self) -> None:
        """Until this candidate leads: one round every retry period."""
        announced = ""
        while True:
            try:
                if await self.try_once():
                    return
            except (KubeApiError, KubeUnavailable) as exc:
                log.warning("leader election: %s (retrying)", exc)
            holder = self._seen.holder if self._seen else ""
            if holder and holder != announced:
                log.info("waiting: %s leads", holder)
                announced = holder
            await asyncio.sleep(self.config.retry_s)

    async def keep(self) -> None:
        """Renew every retry period; return once leadership is lost — another holds
        the Lease, or the renew deadline passed without a successful renewal."""
        while True:
            await asyncio.sleep(self.config.retry_s)
            try:
                if not await self.try_once():
                    holder = self._seen.holder if self._seen else "?"
                    log.error("lost the Lease to %s", holder)
                    self._renewed_at = None
                    return
            except (KubeApiError, KubeUnavailable) as exc:
                log.warning("cannot renew the Lease: %s", exc)
            if not self.leading():
                log.error(
                    "no renewal for %.0fs (the renew deadline): stepping down",
                    self.config.renew_deadline_s,
                )
                return

    async def release(self) -> None:
        """Empty the holder (while it still names us) so a standby takes over now."""
        if self._renewed_at is None:
            return
        self._renewed_at = None
        try:
            lease, record = await self._read()
            if lease is None or record is None or record.holder != self.identity:
                return
            spec = {**(lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1}
            await self._client.request(
                "PUT", self._path(self.config.name), body={**lease, "spec": spec}
            )
            log.info("released the Lease %s/%s", self.config.namespace, self.config.name)
        except (KubeApiError, KubeUnavailable) as exc:
            log.warning("could not release the Lease: %s (the next leader waits it out)", exc)


__all__ = [
    "Decision",
    "LeaderElector",
    "LeaseConfig",
    "LeaseRecord",
    "decide",
    "identity",
    "micro_time",
]

"""The kopf handlers: thin. A RocketCluster is reconciled by one timer per object (one
reconciliation at a time, each tick from the observed state); RocketTopic and
RocketConsumerGroup are put into (and removed from) their cluster's catalogue; a
RocketUser gets its Secret (its cluster's tick puts it into the users Secret; its
Secret, owned by it, goes when it goes).
Everything they do lives in ``reconcile`` and ``catalogue``."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import httpx
import kopf

from rocketcluster.api import kube
from rocketcluster.operator.admin import AdminError
from rocketcluster.operator.catalogue import (
    CataloguePropagating,
    CatalogueReconciler,
    CatalogueRefused,
    CatalogueShared,
)
from rocketcluster.operator.kube.apply import Applier, ApplyMode, applier
from rocketcluster.operator.kube.client import KubeApiError, KubeClient, KubeUnavailable
from rocketcluster.operator.kube.connection import KubeConfigError, discover
from rocketcluster.operator.leader import LeaderElector
from rocketcluster.operator.reconcile import ClusterMemory, ClusterReconciler
from rocketcluster.operator.trust import AdminTrust
from rocketcluster.operator.users import UserRefused, UsersReconciler, UserWaiting

TICK_S = float(os.environ.get("ROCKETCLUSTER_TICK_SECONDS", "2"))
log = logging.getLogger("rocketcluster.operator")


@dataclass
class Services:
    """What every handler shares, made once at startup (kept in kopf's memo)."""

    client: KubeClient
    applier: Applier
    http: httpx.AsyncClient
    # https clients per cluster CA (spec.security.tls), built on ``http``'s behalf.
    trust: AdminTrust | None = None
    # The catalogue handlers' batched puts and shared lookups.
    catalogue: CatalogueShared = field(default_factory=CatalogueShared)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.peering.standalone = True
    # kopf's own lines become Events from WARNING up (a retry, a failure). At INFO every
    # handler run of every object posted two ("Handler succeeded", "Creation is
    # processed"): for 10,000 RocketTopic objects 20,000 Event writes, most of the
    # operator's API calls, saying what the Ready condition says. The reconciler's own
    # Events (rolls, scale, failovers) are posted explicitly and stay.
    settings.posting.level = logging.WARNING
    # Our status schema is ours alone: kopf keeps its bookkeeping in annotations.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=kube.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=kube.GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{kube.GROUP}/finalizer"
    settings.watching.server_timeout = 60
    try:
        connection = discover()
    except KubeConfigError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    client = KubeClient(connection)
    http = httpx.AsyncClient()
    memo.services = Services(
        client, applier(client, ApplyMode.from_env()), http, AdminTrust(client, http)
    )


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    services: Services | None = getattr(memo, "services", None)
    if services is not None:
        await services.http.aclose()
        if services.trust is not None:
            await services.trust.close()
        await services.client.close()


@kopf.on.login()
def login(**kwargs: Any) -> Any:
    """In a pod, the service account; elsewhere the kubeconfig."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.timer(kube.GROUP, kube.VERSION, "rocketclusters", interval=TICK_S, initial_delay=0.0)
async def reconcile_cluster(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    services: Services = memo.services
    memory: ClusterMemory = memo.setdefault("cluster_memory", ClusterMemory())

    def event(kind: str, reason: str, message: str) -> None:
        kopf.event(body, type=kind, reason=reason, message=message[:1000])

    leadership: LeaderElector | None = getattr(memo, "leadership", None)
    reconciler = ClusterReconciler(
        services.client,
        services.applier,
        services.http,
        event,
        services.trust,
        holder=leadership.identity if leadership is not None else "",
        leading=leadership.leading if leadership is not None else (lambda: True),
    )
    try:
        await reconciler.reconcile(dict(body), memory)
    except (KubeUnavailable, KubeApiError, AdminError) as exc:
        log.warning(
            "%s/%s: %s (next tick retries)", body.metadata.namespace, body.metadata.name, exc
        )


def _catalogue(memo: kopf.Memo) -> CatalogueReconciler:
    services: Services = memo.services
    return CatalogueReconciler(
        services.client, services.applier, services.http, services.trust, services.catalogue
    )


@kopf.on.resume(kube.GROUP, kube.VERSION, "rockettopics")
@kopf.on.create(kube.GROUP, kube.VERSION, "rockettopics")
@kopf.on.update(kube.GROUP, kube.VERSION, "rockettopics")
@kopf.on.resume(kube.GROUP, kube.VERSION, "rocketconsumergroups")
@kopf.on.create(kube.GROUP, kube.VERSION, "rocketconsumergroups")
@kopf.on.update(kube.GROUP, kube.VERSION, "rocketconsumergroups")
async def put_entry(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    try:
        await _catalogue(memo).put(dict(body))
    except CatalogueRefused as exc:
        raise kopf.PermanentError(str(exc)) from exc
    except CataloguePropagating as exc:
        raise kopf.TemporaryError(str(exc), delay=1) from exc
    except (KubeUnavailable, KubeApiError, AdminError) as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc


@kopf.on.delete(kube.GROUP, kube.VERSION, "rockettopics")
@kopf.on.delete(kube.GROUP, kube.VERSION, "rocketconsumergroups")
async def delete_entry(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    try:
        await _catalogue(memo).delete(dict(body))
    except (KubeUnavailable, KubeApiError, AdminError) as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc


@kopf.on.resume(kube.GROUP, kube.VERSION, "rocketusers")
@kopf.on.create(kube.GROUP, kube.VERSION, "rocketusers")
@kopf.on.update(kube.GROUP, kube.VERSION, "rocketusers")
async def put_user(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    services: Services = memo.services
    try:
        await UsersReconciler(services.client, services.applier).put(dict(body))
    except UserRefused as exc:
        raise kopf.PermanentError(str(exc)) from exc
    except UserWaiting as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc
    except (KubeUnavailable, KubeApiError) as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc

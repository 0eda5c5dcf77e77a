"""RocketTopic and RocketConsumerGroup: each puts one entry into its cluster's
catalogue on the controllers (which every broker group serves from), and takes it
out when deleted. Status says whether the cluster has it.

What only newer members understand waits for the feature gate the cluster's status
keeps (orchestrate/compat.py): entries are batched only once every controller takes
the batch, and a topic's ``trace`` is put only once every controller and broker reads
it — until then the topic is put without it and its status says it waits for the
upgrade (retried)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from rocketcluster.api import kube
from rocketcluster.api.catalogue import RocketConsumerGroup, RocketTopic, canonical_spec
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.features import Feature, reported
from rocketcluster.api.status import CatalogueStatus, ready_conditions
from rocketcluster.operator.admin import AdminError, BrokerAdmin, ControllerAdmin
from rocketcluster.operator.catalogue_batch import TOPICS, ClusterKey, PutBatcher
from rocketcluster.operator.kube.apply import Applier
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.observe import pod_state
from rocketcluster.operator.orchestrate import compat
from rocketcluster.operator.recent import Recent
from rocketcluster.operator.trust import AdminHttp, AdminTrust
from rocketcluster.operator.users import admin_token

# How long a put waits for every ready broker to serve it before it says Propagating
# (and kopf retries it), and how often it looks (the shared check's lifetime).
SERVED_WAIT_S = 5.0
SERVED_POLL_S = 0.5


class CatalogueRefused(ValueError):
    """The resource can never be put as it is (a person must change it)."""


class CatalogueWaiting(AdminError):
    """Not yet: the cluster or its controllers are not there (retried)."""


class CataloguePropagating(CatalogueWaiting):
    """In the catalogue, but not every running broker serves it yet (retried soon:
    brokers poll the catalogue every second or two)."""


class CatalogueWaitingForUpgrade(CatalogueWaiting):
    """In the catalogue without what some member's older code would refuse (a
    topic's ``trace``); put whole once every member reports it (retried)."""


@dataclass(frozen=True)
class Controllers:
    """A cluster's controllers as the handlers reach them, and the feature gate."""

    admin: ControllerAdmin
    features: compat.Gate


@dataclass(frozen=True)
class Entry:
    collection: str  # the controller admin API's collection
    name: str
    body: dict[str, Any]
    cluster: str


def entry_of(body: dict[str, Any]) -> Entry:
    meta = {"name": body["metadata"]["name"], "namespace": body["metadata"].get("namespace")}
    data = {"metadata": meta, "spec": body.get("spec") or {}}
    try:
        if body["kind"] == "RocketTopic":
            resource = RocketTopic.model_validate(data)
            topic = resource.topic()
            return Entry("topics", topic.name, canonical_spec(topic), resource.spec.cluster)
        group_resource = RocketConsumerGroup.model_validate(data)
        group = group_resource.consumer_group()
        return Entry(
            "consumer-groups", group.name, canonical_spec(group), group_resource.spec.cluster
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise CatalogueRefused(f"{body['kind']} {meta['name']}: {problems}") from exc


@dataclass
class CatalogueShared:
    """What every RocketTopic / RocketConsumerGroup handler shares (kept in the
    operator's Services): when thousands run at once, they make one catalogue command
    per thousand entries, one lookup of the cluster's controllers and token, and one
    round of broker checks, instead of one each (catalogue_batch.py, recent.py)."""

    puts: PutBatcher = field(default_factory=PutBatcher)
    # The controllers' addresses, https client and token, and the feature gate: a roll
    # moves them, an error forgets them.
    admins: Recent[ClusterKey, Controllers] = field(default_factory=lambda: Recent(2.0))
    # The catalogue version each ready broker pod serves: a handler that finds its own
    # version not yet served retries in a second, when this is stale again.
    served: Recent[ClusterKey, dict[str, int]] = field(default_factory=lambda: Recent(0.5))


class CatalogueReconciler:
    def __init__(
        self,
        client: KubeClient,
        applier: Applier,
        http: httpx.AsyncClient,
        trust: AdminTrust | None = None,
        shared: CatalogueShared | None = None,
    ) -> None:
        self._client = client
        self._applier = applier
        self._http = http
        self._trust = trust
        self._shared = shared or CatalogueShared()

    async def _admin(self, namespace: str, cluster: str) -> Controllers:
        return await self._shared.admins.get(
            (namespace, cluster), lambda: self._look_up_admin(namespace, cluster)
        )

    async def _look_up_admin(self, namespace: str, cluster: str) -> Controllers:
        found = await self._client.get(kube.API_VERSION, "RocketCluster", namespace, cluster)
        if found is None:
            raise CatalogueWaiting(f"RocketCluster {namespace}/{cluster} does not exist")
        http = AdminHttp(self._http)
        if self._trust is not None:
            try:
                spec = RocketCluster.model_validate(
                    {"metadata": found.get("metadata") or {}, "spec": found.get("spec") or {}}
                )
            except ValidationError as exc:
                raise CatalogueWaiting(f"RocketCluster {namespace}/{cluster} is invalid") from exc
            http = await self._trust.for_cluster(spec)
        token = await admin_token(self._client, found)
        pods = await self._client.list(
            "v1",
            "Pod",
            namespace,
            {kube.LABEL_CLUSTER: cluster, kube.LABEL_COMPONENT: kube.COMPONENT_CONTROLLER},
        )
        members: dict[int, str] = {}
        for pod in pods:
            name = (pod["metadata"].get("labels") or {}).get(kube.LABEL_MEMBER, "")
            ip = (pod.get("status") or {}).get("podIP")
            if ip and name.rsplit("-", 1)[-1].isdigit():
                members[int(name.rsplit("-", 1)[-1]) + 1] = ip
        if not members:
            raise CatalogueWaiting(f"the controllers of {cluster} are not running yet")
        admin = ControllerAdmin(http.client, members, http.server_name, token)
        features = compat.persisted(found.get("status"))
        if features is None:
            features = await _controllers_gate(admin)
        return Controllers(admin, features)

    async def put(self, body: dict[str, Any]) -> None:
        try:
            entry = entry_of(body)
        except CatalogueRefused as exc:
            await self._status(body, "", False, "InvalidSpec", str(exc))
            raise
        namespace = body["metadata"]["namespace"]
        key = (namespace, entry.cluster)
        waits = False
        try:
            controllers = await self._admin(namespace, entry.cluster)
            admin, features = controllers.admin, controllers.features
            spec = entry.body
            if entry.collection == TOPICS and compat.withheld(spec, features):
                spec, waits = compat.understood(spec, features), True
            version = await self._shared.puts.put(
                key, admin, entry.collection, spec, batch=features.catalogue_batch
            )
            previous = (body.get("status") or {}).get("name")
            if previous and previous != entry.name:
                await admin.delete(entry.collection, previous)
            behind = await self._wait_served(namespace, entry.cluster, version, admin)
        except AdminError as exc:
            self._shared.admins.forget(key)  # the controllers may have moved
            refused = exc.refused
            reason = "Refused" if refused else "ClusterUnavailable"
            await self._status(body, entry.name, False, reason, str(exc.detail or exc))
            if refused:
                raise CatalogueRefused(str(exc.detail or exc)) from exc
            raise
        if behind:
            message = f"in the catalogue (version {version}); not yet served by {', '.join(behind)}"
            await self._status(body, entry.name, False, "Propagating", message)
            raise CataloguePropagating(message)
        if waits:
            message = (
                f"in the catalogue without trace (version {version}): trace waits for every "
                "controller and broker to run a release that knows it (an upgrade under way)"
            )
            await self._status(body, entry.name, False, "WaitingForUpgrade", message)
            raise CatalogueWaitingForUpgrade(message)
        await self._status(body, entry.name, True, "InCatalogue", f"served by {entry.cluster}")

    async def _wait_served(
        self, namespace: str, cluster: str, version: int, admin: ControllerAdmin
    ) -> list[str]:
        """The brokers still behind ``version`` after up to SERVED_WAIT_S: brokers poll
        the catalogue every 1.5 s, so the handler waits for them (one shared check per
        cluster every half second) rather than write a Propagating status, fail, and
        come back through kopf's retry — for thousands of objects at once that was most
        of the operator's work."""
        deadline = asyncio.get_running_loop().time() + SERVED_WAIT_S
        while True:
            behind = await self._brokers_behind(namespace, cluster, version, admin)
            if not behind or asyncio.get_running_loop().time() >= deadline:
                return behind
            await asyncio.sleep(SERVED_POLL_S)

    async def _brokers_behind(
        self, namespace: str, cluster: str, version: int, admin: ControllerAdmin
    ) -> list[str]:
        """The ready broker pods that have not applied catalogue ``version`` yet (a
        broker that does not answer counts as behind; one that is not ready loads the
        catalogue when it starts)."""
        served = await self._shared.served.get(
            (namespace, cluster), lambda: self._served_versions(namespace, cluster, admin)
        )
        return sorted(name for name, applied in served.items() if applied < version)

    async def _served_versions(
        self, namespace: str, cluster: str, admin: ControllerAdmin
    ) -> dict[str, int]:
        """The catalogue version each ready broker pod serves, by pod name (-1: it did
        not answer)."""
        pods = await self._client.list(
            "v1",
            "Pod",
            namespace,
            {kube.LABEL_CLUSTER: cluster, kube.LABEL_COMPONENT: kube.COMPONENT_BROKER},
        )
        now = datetime.now(UTC)
        ready = [p for p in pods if (s := pod_state(p, now)).ready and s.ip and not s.deleting]

        async def applied(pod: dict[str, Any]) -> int:
            broker = BrokerAdmin(admin.http, pod["status"]["podIP"], admin.server_name, admin.token)
            info = await broker.broker()  # None when it does not answer
            return int((info or {}).get("catalogueVersion", -1))

        versions = await asyncio.gather(*(applied(p) for p in ready))
        return {p["metadata"]["name"]: v for p, v in zip(ready, versions, strict=True)}

    async def delete(self, body: dict[str, Any]) -> None:
        try:
            entry = entry_of(body)
        except CatalogueRefused:
            return  # never put
        name = (body.get("status") or {}).get("name") or entry.name
        try:
            controllers = await self._admin(body["metadata"]["namespace"], entry.cluster)
        except CatalogueWaiting:
            return  # the cluster is gone, and its catalogue with it
        await controllers.admin.delete(entry.collection, name)

    async def _status(
        self, body: dict[str, Any], name: str, ready: bool, reason: str, message: str
    ) -> None:
        status = CatalogueStatus(
            observed_generation=body["metadata"].get("generation"),
            conditions=ready_conditions(body, ready, reason, message),
            name=name,
        )
        wanted = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if body.get("status") == wanted:
            return  # a resume of an object that is as it was: no write (and no event)
        await self._applier.apply_status(body, wanted)


async def _controllers_gate(admin: ControllerAdmin) -> compat.Gate:
    """The gate of a cluster whose status keeps none yet (the reconciler writes it
    at its first tick; RocketTopic handlers may come first): from the controllers'
    ``/v1/cluster`` answers. The brokers' answers are the reconciler's to read, so a
    topic's ``trace`` waits for that."""
    views = await admin.cluster_views()
    reports = compat.Reports(
        controllers=tuple(
            reported(views[member]) if member in views else None for member in sorted(admin.members)
        )
    )
    found = compat.gate(reports, None)
    return compat.Gate(controllers=found.controllers - {Feature.TOPIC_TRACE})

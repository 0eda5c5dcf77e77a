"""Observation: the cluster as it is now, read from the API server (workloads, pods)
and from the cluster's own admin APIs (roles, broker ids, the controllers' views),
turned into the plain values the decisions take."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from rocketcluster.api import kube
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.features import reported
from rocketcluster.operator.admin import AdminError, BrokerAdmin, ControllerAdmin
from rocketcluster.operator.kube.client import KubeApiError, KubeClient
from rocketcluster.operator.orchestrate.compat import Report, Reports
from rocketcluster.operator.orchestrate.model import (
    ControllerObservation,
    GroupObservation,
    GroupView,
    MemberState,
    PodState,
)
from rocketcluster.operator.orchestrate.scale import Consumption, GroupContents, QueueRange
from rocketcluster.operator.trust import AdminHttp, AdminTrust


def _since(timestamp: str | None, now: datetime) -> float:
    if not timestamp:
        return 0.0
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (now - then).total_seconds())


def pod_state(
    pod: dict[str, Any],
    now: datetime,
    broker: dict[str, Any] | None = None,
    caught_up_ago_s: float | None = None,
) -> PodState:
    meta = pod.get("metadata", {})
    status = pod.get("status") or {}
    ready_cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    ready = bool(ready_cond and ready_cond.get("status") == "True")
    annotations = meta.get("annotations") or {}
    broker_id = None
    role = None
    if broker is not None:
        replication = broker.get("replication") or {}
        broker_id = replication.get("brokerId") or broker.get("brokerId")
        role = broker.get("role")
    return PodState(
        name=meta.get("name", ""),
        ready=ready,
        pod_hash=annotations.get(kube.ANNOTATION_POD_HASH),
        ip=status.get("podIP"),
        deleting=bool(meta.get("deletionTimestamp")),
        ready_for_s=_since(ready_cond.get("lastTransitionTime") if ready_cond else None, now)
        or _since(meta.get("creationTimestamp"), now),
        restarts=sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or []),
        broker_id=int(broker_id) if broker_id else None,
        role=role,
        caught_up_ago_s=caught_up_ago_s,
        node=(pod.get("spec") or {}).get("nodeName") or None,
    )


def _component(obj: dict[str, Any]) -> str | None:
    labels = obj.get("metadata", {}).get("labels") or {}
    value = labels.get(kube.LABEL_COMPONENT)
    return str(value) if value is not None else None


def is_controller_member(workload: dict[str, Any]) -> bool:
    """A rendered controller member's Deployment (the console's is a Deployment too)."""
    return workload.get("kind") == "Deployment" and _component(workload) == (
        kube.COMPONENT_CONTROLLER
    )


def orchestrated(workload: dict[str, Any]) -> bool:
    """A workload the operator rolls itself: a broker group's StatefulSet or a
    controller member's Deployment."""
    return workload.get("kind") == "StatefulSet" or is_controller_member(workload)


def slaves_caught_up(infos: list[dict[str, Any] | None]) -> dict[int, float | None] | None:
    """From a group's brokers' admin answers: the master's report of when each slave
    last caught up, by broker id; None when no master reports it (older brokers)."""
    for info in infos:
        if info is None or info.get("role") != "master":
            continue
        slaves = (info.get("replication") or {}).get("slaves") or {}
        if any("caughtUpAgoSeconds" in s for s in slaves.values()) or not slaves:
            return {int(b): s.get("caughtUpAgoSeconds") for b, s in slaves.items()}
    return None


def _caught_up(info: dict[str, Any] | None, by_id: dict[int, float | None] | None) -> float | None:
    broker_id = ((info or {}).get("replication") or {}).get("brokerId")
    if by_id is None or broker_id is None:
        return None
    ago = by_id.get(int(broker_id))
    return float(ago) if ago is not None else None


@dataclass
class Observed:
    """One tick's observation of a cluster."""

    workloads: dict[str, dict[str, Any]]  # name -> StatefulSet/Deployment in the API
    groups: dict[str, GroupObservation]  # every group with a StatefulSet or desired
    controllers: ControllerObservation | None
    controller_admin: ControllerAdmin | None
    catalogue: dict[str, Any] | None
    controller_error: str | None = None
    # The features each controller member and broker pod reports (None: no answer),
    # for the feature gate (orchestrate/compat.py).
    reports: Reports = field(default_factory=Reports)
    # Nodes marked unschedulable (cordoned, as by kubectl drain): None when the
    # operator may not list Nodes (no drain awareness; see nodes_warning).
    cordoned: frozenset[str] | None = None
    # Why Nodes could not be listed: set the first time only (one Warning event).
    nodes_warning: str | None = None


class Observer:
    def __init__(
        self, client: KubeClient, http: httpx.AsyncClient, trust: AdminTrust | None = None
    ) -> None:
        self._client = client
        self._trust = trust
        # The admin APIs' client for the cluster observed last (https with its CA when
        # it runs TLS: set by observe()).
        self._admin_http = AdminHttp(http)
        # security.auth: the cluster's admin token (set by the reconciler each tick).
        self.admin_token: str | None = None
        self._nodes_warned = False  # listing Nodes was refused, and said so once

    async def observe(
        self,
        cluster: RocketCluster,
        desired: dict[str, dict[str, Any]],
    ) -> Observed:
        """``desired``: the rendered workloads by name (their pod hashes)."""
        ns = cluster.metadata.namespace
        selector = {kube.LABEL_CLUSTER: cluster.name}
        if self._trust is not None:
            self._admin_http = await self._trust.for_cluster(cluster)
        pods, statefulsets, deployments = await asyncio.gather(
            self._client.list("v1", "Pod", ns, selector),
            self._client.list("apps/v1", "StatefulSet", ns, selector),
            self._client.list("apps/v1", "Deployment", ns, selector),
        )
        now = datetime.now(UTC)
        # Controller members only: the console's Deployment is no member (items of a
        # list may come without their kind, hence the label).
        members = [d for d in deployments if _component(d) == kube.COMPONENT_CONTROLLER]
        workloads = {w["metadata"]["name"]: w for w in statefulsets + members}
        controllers, admin = self._controllers(cluster, desired, workloads, pods, now)
        views: dict[str, dict[str, Any]] = {}
        catalogue = None
        error = None
        member_features: tuple[Report, ...] = tuple(None for _ in (controllers or _NONE).members)
        if admin is not None and admin.members:
            try:
                views = {g["group"]: g for g in await admin.groups()}
                catalogue = await admin.catalogue()
            except AdminError as exc:
                error = str(exc)
            controllers, member_features = await self._raft(controllers, admin)
        elif admin is not None:
            error = "no controller pod has an address yet"
        brokers: dict[str, tuple[Report, ...]] = {}
        groups = await self._groups(
            cluster, desired, workloads, pods, views, catalogue, now, admin, brokers
        )
        reports = Reports(controllers=member_features, groups=brokers)
        cordoned, nodes_warning = await self.cordoned()
        return Observed(
            workloads,
            groups,
            controllers,
            admin,
            catalogue,
            error,
            reports,
            cordoned=cordoned,
            nodes_warning=nodes_warning,
        )

    async def cordoned(self) -> tuple[frozenset[str] | None, str | None]:
        """The cordoned nodes (``spec.unschedulable``), listed at cluster scope, and
        a warning the first time the API refuses it (the chart grants the list in its
        discovery ClusterRole: without it, no drain awareness)."""
        try:
            answer = await self._client.request(
                "GET", "/api/v1/nodes", params={"fieldSelector": "spec.unschedulable=true"}
            )
        except KubeApiError as exc:
            if exc.status not in (401, 403, 404):
                return None, None  # a passing failure: next tick
            warning = None
            if not self._nodes_warned:
                self._nodes_warned = True
                warning = (
                    f"cannot list Nodes ({exc.status} {exc.reason}): a drained node's "
                    "master is not switched over first (grant nodes list, the chart's "
                    "rbac.clusterDiscovery)"
                )
            return None, warning
        return frozenset(
            str(n["metadata"]["name"])
            for n in (answer or {}).get("items") or []
            if (n.get("spec") or {}).get("unschedulable")
        ), None

    def _controllers(
        self,
        cluster: RocketCluster,
        desired: dict[str, dict[str, Any]],
        workloads: dict[str, dict[str, Any]],
        pods: list[dict[str, Any]],
        now: datetime,
    ) -> tuple[ControllerObservation | None, ControllerAdmin | None]:
        if cluster.spec.controller.replicas == 0:
            return None, None
        members = []
        addresses: dict[int, str] = {}
        names = {n for n, w in {**workloads, **desired}.items() if w.get("kind") == "Deployment"}
        for name in sorted(names, key=lambda n: int(n.rsplit("-", 1)[1])):
            index = int(name.rsplit("-", 1)[1])
            mine = [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get(kube.LABEL_MEMBER) == name
            ]
            live = [p for p in mine if not p["metadata"].get("deletionTimestamp")]
            candidates = live or mine
            chosen = candidates[-1] if candidates else None
            state = pod_state(chosen, now) if chosen is not None else None
            if state is not None and state.ip and not state.deleting:
                addresses[index + 1] = state.ip
            applied = workloads.get(name)
            members.append(
                MemberState(
                    index=index,
                    name=name,
                    desired_hash=_hash(desired.get(name)) or "",
                    applied_hash=_hash(applied) if applied else None,
                    pod=state,
                )
            )
        return ControllerObservation(tuple(members)), ControllerAdmin(
            self._admin_http.client, addresses, self._admin_http.server_name, self.admin_token
        )

    async def _raft(
        self, controllers: ControllerObservation | None, admin: ControllerAdmin
    ) -> tuple[ControllerObservation | None, tuple[Report, ...]]:
        """The members with their Raft views, and the features each reports (None:
        it did not answer)."""
        if controllers is None:
            return None, ()
        views = await admin.cluster_views()
        members = []
        features = tuple(
            reported(views[m.member_id]) if m.member_id in views else None
            for m in controllers.members
        )
        for m in controllers.members:
            view = views.get(m.member_id)
            if view is None:
                members.append(m)
                continue
            members.append(
                MemberState(
                    index=m.index,
                    name=m.name,
                    desired_hash=m.desired_hash,
                    applied_hash=m.applied_hash,
                    pod=m.pod,
                    leader_id=view.get("leader"),
                    term=(view.get("raft") or {}).get("term"),
                )
            )
        return ControllerObservation(tuple(members)), features

    async def _groups(
        self,
        cluster: RocketCluster,
        desired: dict[str, dict[str, Any]],
        workloads: dict[str, dict[str, Any]],
        pods: list[dict[str, Any]],
        views: dict[str, dict[str, Any]],
        catalogue: dict[str, Any] | None,
        now: datetime,
        admin: ControllerAdmin | None,
        reports: dict[str, tuple[Report, ...]] | None = None,
    ) -> dict[str, GroupObservation]:
        """``reports``: filled with the features each group's pods report (None: no
        answer; a group without pods: none)."""
        names = {n for n, w in {**workloads, **desired}.items() if w.get("kind") == "StatefulSet"}
        # A group the controllers still know, whose workload is gone (scaled in).
        names |= {g for g in views if kube.group_index(cluster.name, g) is not None}
        replicated = cluster.spec.controller.replicas > 0
        writable = {
            g: bool(info.get("writable", True))
            for g, info in ((catalogue or {}).get("groups") or {}).items()
        }
        out = {}
        for name in sorted(names):
            mine = [
                p for p in pods if (p["metadata"].get("labels") or {}).get(kube.LABEL_GROUP) == name
            ]
            infos = await asyncio.gather(*(self._broker_info(p) for p in mine))
            if reports is not None:
                reports[name] = tuple(None if i is None else reported(i) for i in infos)
            caught_up = slaves_caught_up(list(infos))
            states = tuple(
                pod_state(p, now, info, _caught_up(info, caught_up))
                for p, info in zip(mine, infos, strict=True)
            )
            workload = desired.get(name) or workloads.get(name) or {"spec": {"replicas": 0}}
            view = views.get(name)
            out[name] = GroupObservation(
                name=name,
                desired_hash=_hash(workload) or "",
                desired_replicas=int(workload["spec"].get("replicas", 1)),
                pods=states,
                view=GroupView(
                    master_id=view.get("masterId"),
                    master_epoch=int(view.get("masterEpoch", 0)),
                    sync_state_set=frozenset(int(b) for b in view.get("syncStateSet", [])),
                    sync_state_set_epoch=int(view.get("syncStateSetEpoch", 0)),
                    writable=writable.get(name, True),
                )
                if view is not None
                else None,
                min_in_sync=cluster.spec.brokers.replication.min_in_sync_replicas,
                replicated=replicated,
                catch_up_reported=caught_up is not None,
            )
        return out

    def _broker_admin(self, ip: str) -> BrokerAdmin:
        return BrokerAdmin(
            self._admin_http.client, ip, self._admin_http.server_name, self.admin_token
        )

    async def _broker_info(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or pod["metadata"].get("deletionTimestamp"):
            return None
        return await self._broker_admin(ip).broker()

    async def contents(self, master_ip: str) -> GroupContents:
        """What a group's master holds (for the drain check)."""
        broker = self._broker_admin(master_ip)
        queues = [
            QueueRange(q["topic"], q["queueId"], q["minOffset"], q["maxOffset"])
            for q in await broker.get_all("/v1/queues")
        ]
        consumption = [
            Consumption(r["group"], r["topic"], r["queueId"], r["committedOffset"], r["inflight"])
            for r in await broker.get_all("/v1/consumption")
        ]
        stats = await broker.get("/v1/stats")
        transactions = stats.get("transactions") or {}
        return GroupContents(
            queues=tuple(queues),
            consumption=tuple(consumption),
            pending_timers=int((stats.get("timers") or {}).get("pending", 0)),
            pending_transactions=int(transactions.get("PENDING", 0))
            if isinstance(transactions, dict)
            else 0,
        )


_NONE = ControllerObservation(())


def _hash(workload: dict[str, Any] | None) -> str | None:
    if workload is None:
        return None
    template = workload.get("spec", {}).get("template", {})
    annotations = template.get("metadata", {}).get("annotations") or {}
    value = annotations.get(kube.ANNOTATION_POD_HASH)
    return str(value) if value is not None else None

"""One reconciliation of a RocketCluster: a flat list of named steps, run on every
tick, each idempotent — render, apply, observe, sync the catalogue, roll the
controllers, roll and scale the broker groups, write the status.

Only one disruptive action happens per tick and cluster (a pod deleted, a master
handed over, a controller member rolled), and only after the observation says the
previous one has settled; the decisions themselves live in ``orchestrate``.

What a roll needs to resume lives in the RocketCluster's status (``status.rollout``,
``orchestrate/rollout.py``), written before each disruptive action on the condition
that the object is as this process last saw it: an operator restarted at any step, or
a standby that took over, goes on from there, and one that lost its lease cannot act.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from rocketcluster.api import kube
from rocketcluster.api.catalogue import canonical_spec
from rocketcluster.api.cluster import RocketCluster, SparkMode
from rocketcluster.api.status import (
    Condition,
    ConditionType,
    RocketClusterStatus,
    merge_conditions,
    now_rfc3339,
)
from rocketcluster.operator import failpoints, prune
from rocketcluster.operator.admin import AdminError, ControllerAdmin
from rocketcluster.operator.catalogue_batch import put_missing
from rocketcluster.operator.kube.apply import Applier, digest
from rocketcluster.operator.kube.client import (
    KubeApiError,
    KubeClient,
    KubeNotFound,
    resource_path,
)
from rocketcluster.operator.observe import (
    Observed,
    Observer,
    is_controller_member,
    orchestrated,
)
from rocketcluster.operator.orchestrate import compat
from rocketcluster.operator.orchestrate.assess import Assessment, assess
from rocketcluster.operator.orchestrate.broker_roll import next_group_step
from rocketcluster.operator.orchestrate.controller_roll import next_controller_step
from rocketcluster.operator.orchestrate.drain import next_drain_step
from rocketcluster.operator.orchestrate.model import GroupObservation
from rocketcluster.operator.orchestrate.rollout import Rollout
from rocketcluster.operator.orchestrate.scale import (
    FORCE_ANNOTATION,
    drain_problems,
    replica_scale_in_step,
)
from rocketcluster.operator.orchestrate.steps import Step, StepKind, blocked, done, wait
from rocketcluster.operator.render import RenderContext, canary, health_reports, render_cluster
from rocketcluster.operator.render.brokers import (
    client_endpoint,
    master_budget_name,
    pod_label_role_name,
    with_running_pods,
)
from rocketcluster.operator.render.tls import TlsSpecError
from rocketcluster.operator.trust import AdminTrust
from rocketcluster.operator.users import UsersReconciler

log = logging.getLogger(__name__)

FULL_APPLY_EVERY_S = 60.0
CONTROLLERS = "controllers"  # the controller members' part of a roll

SPARK_OPERATOR_MISSING = "SparkOperatorMissing"  # a Warning condition's and event's reason

EventSink = Callable[[str, str, str], None]  # (type Normal|Warning, reason, message)


@dataclass
class ClusterMemory:
    """What one operator process remembers about a cluster between ticks. Losing it
    (a restart) costs a re-apply, nothing else: the roll's state is in the status."""

    applied: dict[str, str] = field(default_factory=dict)  # object key -> digest
    last_full_apply: float = 0.0
    # status.rollout as this process last wrote or read it, and the resourceVersion
    # its next write is conditional on (the watch's copy of the object may lag).
    rollout: Rollout | None = None
    resource_version: str | None = None
    # Since when (monotonic) a drained master has waited for a successor, per group.
    drain_waiting: dict[str, float] = field(default_factory=dict)
    nodes_warned: bool = False
    last_status: str = ""
    # Per switchable part (prune.SWITCHABLE): what was rendered at its last prune.
    pruned: dict[str, frozenset[prune.ObjectKey]] = field(default_factory=dict)
    last_prune: float = 0.0
    # The feature gate as this process last wrote it to status.features (the watch's
    # copy may lag a write: a stale gate would flip what is rendered).
    features: compat.Gate | None = None
    spark_operator_warned: bool = False


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


class ClusterReconciler:
    def __init__(
        self,
        client: KubeClient,
        applier: Applier,
        http: httpx.AsyncClient,
        events: EventSink | None = None,
        trust: AdminTrust | None = None,
        *,
        holder: str = "",
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self._client = client
        self._applier = applier
        self._observer = Observer(client, http, trust)
        self._users = UsersReconciler(client, applier)
        self._events = events or (lambda kind, reason, message: None)
        # Who acts (the Lease identity), and whether it still may: checked before
        # every write of the roll's state, so a deposed leader never acts.
        self._holder = holder
        self._leading = leading

    async def reconcile(self, body: dict[str, Any], memory: ClusterMemory) -> RocketClusterStatus:
        try:
            return await self._reconcile(body, memory)
        except KubeApiError as exc:
            if exc.status == 403:  # the operator's RBAC lacks a verb: say which, where
                await self._forbidden(body, exc, memory)
            raise

    async def _forbidden(
        self, body: dict[str, Any], exc: KubeApiError, memory: ClusterMemory
    ) -> None:
        """The status as it was, with a Warning (reason Forbidden) quoting the API
        server: a person reads which verb on which resource the chart must grant."""
        old = RocketClusterStatus.model_validate(body.get("status") or {})
        warning = Condition(
            type=ConditionType.WARNING.value,
            status="True",
            reason="Forbidden",
            message=f"the operator was refused: {exc.message}"[:1000],
            observed_generation=(body.get("metadata") or {}).get("generation"),
        )
        kept = [c for c in old.conditions if c.type != ConditionType.WARNING.value]
        self._events("Warning", "Forbidden", exc.message)
        with contextlib.suppress(KubeApiError):
            await self._write_status(
                body, old.model_copy(update={"conditions": [*kept, warning]}), memory
            )

    async def _reconcile(self, body: dict[str, Any], memory: ClusterMemory) -> RocketClusterStatus:
        meta = body.get("metadata") or {}
        generation = meta.get("generation")
        if memory.rollout is None or memory.resource_version is None:
            memory.rollout = Rollout.from_status(body.get("status"))
            memory.resource_version = meta.get("resourceVersion")
        try:
            cluster = RocketCluster.model_validate(
                {"metadata": meta, "spec": body.get("spec") or {}}
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            status = assess(
                Assessment(generation, "", (), None, {}, invalid=f"invalid spec: {problems}")
            )
            await self._write_status(body, status, memory)
            return status
        # 1. render (and, with security.auth, its Secrets: users.py), with what every
        # member understands (status.features: orchestrate/compat.py)
        before = memory.features or compat.persisted(body.get("status"))
        try:
            rendered = render_cluster(cluster, RenderContext(features=before))
        except TlsSpecError as exc:  # e.g. TLS on without the Secret: say what to set
            status = assess(Assessment(generation, "", (), None, {}, invalid=str(exc)))
            await self._write_status(body, status, memory)
            return status
        rendered, notices = await self._optional_engines(cluster, rendered, memory)
        self._observer.admin_token = await self._users.sync(cluster)
        # What the orchestration rolls: broker groups and controller members (not the
        # console's Deployment, which rolls itself).
        workloads = {o["metadata"]["name"]: o for o in rendered if orchestrated(o)}
        # 2. observe what runs
        observed = await self._observer.observe(cluster, workloads)
        if observed.nodes_warning and not memory.nodes_warned:
            # said once per process: no drain awareness without Nodes
            self._events("Warning", "NodesUnreadable", observed.nodes_warning)
            memory.nodes_warned = True
        features = compat.gate(observed.reports, before)
        # 3. apply what needs no orchestration; workloads as the orchestration allows
        steps: dict[str, Step] = {}
        await self._apply(cluster, rendered, observed, memory, steps)
        await self._prune(cluster, rendered, memory)
        await self._clean_executors(cluster)
        # 4. topics and consumer groups of the manifest into the catalogue
        await self._sync_catalogue(cluster, observed, features)
        # 5. controllers first, then groups, one at a time
        await self._roll(cluster, observed, memory, steps)
        # 6. groups beyond the spec: drain, then remove
        leaving = await self._scale_in(cluster, body, observed, memory)
        # 7. status
        desired_groups = tuple(
            observed.groups[name]
            for name in sorted(workloads)
            if workloads[name]["kind"] == "StatefulSet" and name in observed.groups
        )
        status = assess(
            Assessment(
                generation=generation,
                image=cluster.spec.image,
                groups=desired_groups,
                controllers=observed.controllers,
                endpoints={g.name: client_endpoint(cluster, g.name) for g in desired_groups},
                steps=steps,
                leaving=leaving,
                notices=notices,
            )
        ).model_copy(update={"features": features.status()})
        await self._write_status(body, status, memory)
        memory.features = features
        return status

    # -- 3. apply ---------------------------------------------------------------------

    async def _apply(
        self,
        cluster: RocketCluster,
        rendered: list[dict[str, Any]],
        observed: Observed,
        memory: ClusterMemory,
        steps: dict[str, Step],
    ) -> None:
        full = time.monotonic() - memory.last_full_apply > FULL_APPLY_EVERY_S
        for obj in rendered:
            name = obj["metadata"]["name"]
            live = observed.workloads.get(name)
            stale_member = is_controller_member(obj) and live is not None
            if stale_member and _template_hash(live or {}) != _template_hash(obj):
                continue  # a controller member rolls only when the roller says so
            wanted = obj
            if obj["kind"] == "Role" and name == pod_label_role_name(cluster):
                running = (p.name for g in observed.groups.values() for p in g.pods if p.exists)
                wanted = with_running_pods(obj, running)
            if obj["kind"] == "StatefulSet" and live is not None:
                wanted = self._statefulset_as_allowed(obj, live, observed.groups.get(name), steps)
            key = _key(wanted)
            text = digest(wanted)
            if not full and memory.applied.get(key) == text:
                continue
            try:
                await self._applier.apply(wanted)
            except KubeApiError as exc:
                if not _monitoring_unavailable(wanted["apiVersion"], exc):
                    self._events("Warning", "ApplyFailed", f"{key}: {exc.message}")
                    raise
                # No Prometheus operator here (or no right to its kinds): the cluster
                # runs without this object; tried again at the next full apply.
                self._events("Warning", "MonitoringNotApplied", f"{key}: {exc.message}")
            memory.applied[key] = text
        if full:
            memory.last_full_apply = time.monotonic()

    def _statefulset_as_allowed(
        self,
        desired: dict[str, Any],
        live: dict[str, Any],
        group: GroupObservation | None,
        steps: dict[str, Step],
    ) -> dict[str, Any]:
        """The StatefulSet to apply: immutable fields as they are in the API, and the
        replica count lowered only once the scale-in is safe."""
        obj = {**desired, "spec": dict(desired["spec"])}
        for immutable in ("selector", "serviceName", "podManagementPolicy", "volumeClaimTemplates"):
            if immutable in live.get("spec", {}):
                obj["spec"][immutable] = live["spec"][immutable]
        want = int(desired["spec"]["replicas"])
        have = int(live.get("spec", {}).get("replicas", want))
        if want < have and group is not None:
            step = replica_scale_in_step(group, want)
            if step.kind is not StepKind.DONE:
                steps[f"{group.name} scale-in"] = step
                obj["spec"]["replicas"] = have
        return obj

    async def _prune(
        self, cluster: RocketCluster, rendered: list[dict[str, Any]], memory: ClusterMemory
    ) -> None:
        """Delete the monitoring and health report objects the spec no longer asks
        for: for a part whose rendered objects changed, and for all at every full
        apply."""
        due = time.monotonic() - memory.last_prune > FULL_APPLY_EVERY_S
        for part in prune.SWITCHABLE:
            wanted = [o for o in rendered if prune.belongs(o, part)]
            keys = frozenset(prune.object_key(o) for o in wanted)
            if keys == memory.pruned.get(part.component) and not due:
                continue
            for key in await prune.prune(self._client, cluster, part, wanted):
                self._events("Normal", part.removed_reason, f"{key[1]}/{key[2]}")
            memory.pruned[part.component] = keys
        if due:
            memory.last_prune = time.monotonic()

    async def _optional_engines(
        self, cluster: RocketCluster, rendered: list[dict[str, Any]], memory: ClusterMemory
    ) -> tuple[list[dict[str, Any]], tuple[tuple[str, str], ...]]:
        """healthReports.spark.mode sparkOperator: the ScheduledSparkApplication only
        where the API serves it (the Kubeflow Spark Operator's CRD); otherwise it is
        left out and the status says what to install (a Warning condition, and an
        event once per process)."""
        reports = cluster.spec.health_reports
        if reports is None or reports.spark.mode is not SparkMode.SPARK_OPERATOR:
            memory.spark_operator_warned = False
            return rendered, ()
        if await self._client.serves(
            health_reports.SPARK_OPERATOR_API, health_reports.SCHEDULED_SPARK_APPLICATION
        ):
            memory.spark_operator_warned = False
            return rendered, ()
        message = (
            f"healthReports.spark.mode is sparkOperator but this cluster has no "
            f"{health_reports.SPARK_OPERATOR_CRD} CRD: install the Kubeflow Spark Operator "
            "(or choose another mode); no health reports run until then"
        )
        if not memory.spark_operator_warned:
            self._events("Warning", SPARK_OPERATOR_MISSING, message)
            memory.spark_operator_warned = True
        kept = [o for o in rendered if o["kind"] != health_reports.SCHEDULED_SPARK_APPLICATION]
        return kept, ((SPARK_OPERATOR_MISSING, message),)

    async def _clean_executors(self, cluster: RocketCluster) -> None:
        """healthReports.spark.mode kubernetes: delete the executor pods a failed run
        left (their driver pod gone or not Running; health_reports.orphaned_executors)."""
        reports = cluster.spec.health_reports
        if reports is None or reports.spark.mode is not SparkMode.KUBERNETES:
            return
        ns = cluster.metadata.namespace
        pods = await self._client.list("v1", "Pod", ns, health_reports.pod_selector(cluster))
        for name in health_reports.orphaned_executors(pods):
            if await self._client.delete("v1", "Pod", ns, name):
                self._events("Normal", "SparkExecutorRemoved", f"{name}: its driver is gone")

    # -- 4. catalogue -----------------------------------------------------------------

    async def _sync_catalogue(
        self, cluster: RocketCluster, observed: Observed, features: compat.Gate
    ) -> None:
        catalogue = observed.catalogue
        admin = observed.controller_admin
        if catalogue is None or admin is None:
            return
        canary_topics, canary_groups = canary.catalogue_entries(cluster)  # spec.canary
        await put_missing(
            admin,
            catalogue,
            topics=[canonical_spec(t) for t in cluster.spec.topics] + canary_topics,
            groups=[canonical_spec(g) for g in cluster.spec.consumer_groups] + canary_groups,
            features=features,
        )

    # -- 5. rolls ---------------------------------------------------------------------

    async def _roll(
        self,
        cluster: RocketCluster,
        observed: Observed,
        memory: ClusterMemory,
        steps: dict[str, Step],
    ) -> None:
        rollout = memory.rollout or Rollout()
        acted = False
        if observed.controllers is not None:
            step = next_controller_step(observed.controllers, rolling=rollout.rolling(CONTROLLERS))
            steps[CONTROLLERS] = step
            await self._finish(cluster, CONTROLLERS, step, memory)
            if step.acts:
                acted = await self._act(cluster, CONTROLLERS, step, observed, memory)
            if step.kind is not StepKind.DONE:
                acted = True  # groups wait until the controllers are done
        attempts = rollout.attempts({n: g.desired_hash for n, g in observed.groups.items()})
        now = datetime.now(UTC)
        for name, group in sorted(observed.groups.items()):
            index = kube.group_index(cluster.name, name)
            if index is None or index >= cluster.spec.brokers.groups:
                continue  # leaving: drained, not rolled
            step = next_group_step(
                group,
                attempts,
                rolling=rollout.rolling(name),
                cordoned=observed.cordoned or frozenset(),
            )
            drain = self._drain_step(group, observed, memory)
            roll = True
            if drain.kind is StepKind.SWITCHOVER:
                step, roll = drain, False  # a drained master goes first, whatever the roll
            elif drain.kind is not StepKind.DONE and step.kind is StepKind.DONE:
                step, roll = drain, False
            if step.kind is StepKind.SWITCHOVER and (
                why := rollout.switchover_in_flight(name, now)
            ):
                step = wait(why)
            if acted:
                if step.kind is not StepKind.DONE:
                    steps[name] = wait("queued: one roll at a time")
                continue
            if step.kind is StepKind.BLOCKED and observed.controller_error:
                step = blocked(f"the controllers do not answer ({observed.controller_error})")
            steps.setdefault(name, step)
            if roll:
                await self._finish(cluster, name, step, memory)
            if step.acts:
                acted = await self._act(cluster, name, step, observed, memory, roll=roll)
            if step.kind is not StepKind.DONE:
                acted = True
        for name, step in list(steps.items()):
            if name.endswith(" scale-in") and step.acts and not acted:
                part = name.removesuffix(" scale-in")
                await self._act(cluster, part, step, observed, memory, roll=False)
                acted = True

    def _drain_step(
        self, group: GroupObservation, observed: Observed, memory: ClusterMemory
    ) -> Step:
        """What a drain asks of ``group`` (orchestrate/drain.py): hand its master over
        when the master's node is cordoned. The wait for a successor is timed here (a
        restart starts it again)."""
        step = next_drain_step(
            group,
            observed.cordoned or frozenset(),
            waiting_for_s=time.monotonic() - memory.drain_waiting.get(group.name, time.monotonic()),
        )
        if step.kind is StepKind.DONE or step.acts:
            memory.drain_waiting.pop(group.name, None)
        else:
            memory.drain_waiting.setdefault(group.name, time.monotonic())
        return step

    async def _finish(
        self, cluster: RocketCluster, part: str, step: Step, memory: ClusterMemory
    ) -> None:
        """A rolling part whose step is done has settled: say how long it took and
        stop holding the next part back."""
        rollout = memory.rollout or Rollout()
        if step.kind is not StepKind.DONE or not rollout.rolling(part):
            return
        started = rollout.started_at(part)
        if not await self._record(cluster, memory, rollout.finished(part)):
            return
        took = (datetime.now(UTC) - started).total_seconds() if started else 0.0
        self._events("Normal", "RollFinished", f"{part} rolled in {took:.1f}s")
        log.info("roll of %s finished in %.1fs", part, took)

    async def _record(self, cluster: RocketCluster, memory: ClusterMemory, new: Rollout) -> bool:
        """Write ``new`` as status.rollout, on the condition that the object has not
        changed since this process last read or wrote it. False — and the status as
        it is now adopted — when another wrote first or this process no longer leads:
        whoever calls must not act this tick."""
        if new == memory.rollout:
            return True
        if not self._leading():
            log.warning("not leading any more: %s is left alone", cluster.metadata.name)
            return False
        ns, name = cluster.metadata.namespace, cluster.metadata.name
        path = resource_path(kube.API_VERSION, "RocketCluster", ns, name) + "/status"
        patch = {
            "metadata": {"resourceVersion": memory.resource_version},
            "status": {"rollout": new.to_json()},
        }
        try:
            answer = await self._client.patch(path, patch)
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            fresh = await self._client.get(kube.API_VERSION, "RocketCluster", ns, name) or {}
            memory.rollout = Rollout.from_status(fresh.get("status"))
            memory.resource_version = (fresh.get("metadata") or {}).get("resourceVersion")
            log.info("%s changed meanwhile: the roll's next step waits a tick", name)
            return False
        memory.rollout = new
        memory.resource_version = (answer.get("metadata") or {}).get("resourceVersion")
        return True

    async def _act(
        self,
        cluster: RocketCluster,
        name: str,
        step: Step,
        observed: Observed,
        memory: ClusterMemory,
        *,
        roll: bool = True,
    ) -> bool:
        """Take ``step`` on part ``name``: its intent written first (and, for a
        roll's first action, the part's start), its Done after."""
        rollout = memory.rollout or Rollout()
        now = datetime.now(UTC)
        starting = roll and not rollout.rolling(name)
        intent = rollout.intent(name, step, now, self._holder)
        if roll:
            intent = intent.started(name, now)
        if not await self._record(cluster, memory, intent):
            return True  # nothing else moves this tick either
        if starting:
            self._events("Normal", "RollStarted", f"{name}: {step.reason}")
        failpoints.hit(f"before:{step.kind.value}")
        log.info("%s: %s (%s)", name, step.kind.value, step.reason)
        acted, outcome = await self._take(cluster, name, step, observed, memory)
        failpoints.hit(f"after:{step.kind.value}")
        await self._record(cluster, memory, outcome(intent.done(datetime.now(UTC))))
        return acted

    async def _take(
        self,
        cluster: RocketCluster,
        name: str,
        step: Step,
        observed: Observed,
        memory: ClusterMemory,
    ) -> tuple[bool, Callable[[Rollout], Rollout]]:
        """The action itself: whether it acted, and what its outcome changes in the
        roll's state (a switchover's failure count)."""
        ns = cluster.metadata.namespace
        unchanged: Callable[[Rollout], Rollout] = lambda r: r  # noqa: E731
        if step.kind is StepKind.DELETE_POD and step.pod:
            self._events("Normal", "RestartingPod", f"{step.pod}: {step.reason}")
            await self._client.delete("v1", "Pod", ns, step.pod)
            return True, unchanged
        if step.kind is StepKind.APPLY_MEMBER and step.pod:
            member = next(
                o
                for o in render_cluster(cluster)
                if o["kind"] == "Deployment" and o["metadata"]["name"] == step.pod
            )
            self._events("Normal", "RestartingController", f"{step.pod}: {step.reason}")
            await self._applier.apply(member)
            memory.applied[_key(member)] = digest(member)
            return True, unchanged
        admin = observed.controller_admin
        if admin is None:
            return False, unchanged
        if step.kind is StepKind.TRANSFER_LEADERSHIP:
            self._events("Normal", "TransferringLeadership", step.reason)
            try:
                await admin.transfer_leadership(step.target)
            except AdminError as exc:
                self._events("Warning", "LeadershipTransferFailed", str(exc))
            return True, unchanged
        if step.kind is StepKind.SWITCHOVER and step.target is not None:
            group = observed.groups.get(name)
            desired = group.desired_hash if group is not None else None
            return True, await self._switchover(name, step, admin, desired)
        return False, unchanged

    async def _switchover(
        self, group: str, step: Step, admin: ControllerAdmin, desired_hash: str | None
    ) -> Callable[[Rollout], Rollout]:
        assert step.target is not None
        self._events("Normal", "Switchover", step.reason)
        elect = asyncio.ensure_future(admin.elect(group, step.target))
        if failpoints.armed_directory() is not None:
            await asyncio.wait([elect], timeout=0.3)
            failpoints.hit("during:Switchover")
        try:
            answer = await elect
        except AdminError as exc:
            error = str(exc.detail or exc)
        else:
            master = ((answer or {}).get("group") or {}).get("masterId")
            if master == step.target:
                return lambda r: r.switchover_succeeded(group)
            error = f"broker {master} became master instead of {step.target}"
        self._events("Warning", "SwitchoverFailed", f"{group}: {error}")
        return lambda r: r.switchover_failed(group, desired_hash, error)

    # -- 6. scale-in of groups --------------------------------------------------------

    async def _scale_in(
        self,
        cluster: RocketCluster,
        body: dict[str, Any],
        observed: Observed,
        memory: ClusterMemory,
    ) -> dict[str, list[str]]:
        leaving: dict[str, list[str]] = {}
        wanted = cluster.spec.brokers.groups
        admin = observed.controller_admin
        for name, group in sorted(observed.groups.items(), reverse=True):
            index = kube.group_index(cluster.name, name)
            if index is None:
                continue
            if index < wanted:
                if admin is not None and group.view is not None and not group.view.writable:
                    await self._try(admin.set_writable(name, True), "Undrain", name)
                continue
            leaving[name] = await self._drain_or_remove(cluster, body, group, observed, memory)
        # A removal cut short (the operator stopped between two deletes) leaves objects
        # nobody observes any more: finish it from the status.
        for name in (memory.rollout or Rollout()).status.removing:
            if name not in observed.groups:
                await self._finish_removal(cluster, name, observed, memory)
        return leaving

    async def _drain_or_remove(
        self,
        cluster: RocketCluster,
        body: dict[str, Any],
        group: GroupObservation,
        observed: Observed,
        memory: ClusterMemory,
    ) -> list[str]:
        """One step of a leaving group: write-disable it, judge the drain, remove it,
        forget it. Returns what keeps it from going that a person should read (the
        ScaleDownBlocked warning); empty while it simply progresses."""
        admin = observed.controller_admin
        forced = (body["metadata"].get("annotations") or {}).get(FORCE_ANNOTATION) == "force"
        live_pods = [p for p in group.pods if p.exists]
        if group.name in (memory.rollout or Rollout()).status.removing:
            if live_pods:  # its pods are stopping; what a cut-short removal left goes
                await self._remove_group(cluster, group.name)
                return []
            await self._finish_removal(cluster, group.name, observed, memory)
            return []
        if live_pods:
            if admin is not None and (group.view is None or group.view.writable):
                await self._try(admin.set_writable(group.name, False), "Drain", group.name)
                return []  # write-disabled now; what is left is judged next tick
            problems = await self._drain_problems(group, cluster)
            if problems and not forced:
                return problems
            rollout = memory.rollout or Rollout()
            if not await self._record(cluster, memory, rollout.removing(group.name)):
                return []
            self._events(
                "Normal",
                "RemovingGroup",
                f"{group.name} is drained" + (" (forced)" if forced and problems else ""),
            )
            await self._remove_group(cluster, group.name)
            return []
        # Pods gone: the controllers forget the group.
        if admin is not None and group.view is not None:
            await self._try(admin.forget_group(group.name), "ForgetGroup", group.name)
        return []

    async def _finish_removal(
        self, cluster: RocketCluster, group: str, observed: Observed, memory: ClusterMemory
    ) -> None:
        """The last of a removal: every object deleted (again: a delete of what is gone
        is a no-op), the controllers forget the group, the status forgets the removal."""
        await self._remove_group(cluster, group)
        admin = observed.controller_admin
        if admin is None:
            return  # the controllers must forget it first; next tick
        try:
            await admin.forget_group(group)
        except AdminError as exc:
            self._events("Warning", "ForgetGroupFailed", f"{group}: {exc}")
            return
        await self._record(cluster, memory, (memory.rollout or Rollout()).removed(group))

    async def _drain_problems(self, group: GroupObservation, cluster: RocketCluster) -> list[str]:
        master = group.master_pod if group.replicated else next(iter(group.pods), None)
        if master is None or not master.ip:
            return [f"{group.name} has no master to check (an election is running)"]
        try:
            contents = await self._observer.contents(master.ip)
            return drain_problems(contents, *canary.drain_ignores(cluster))
        except AdminError as exc:
            return [f"the master of {group.name} does not answer: {exc}"]

    async def _remove_group(self, cluster: RocketCluster, group: str) -> None:
        """Delete the group's objects; its volumes go as ``storage.whenScaled`` says
        (the StatefulSet's own policy is switched to it first)."""
        ns = cluster.metadata.namespace
        policy = cluster.spec.brokers.storage.when_scaled.value
        with contextlib.suppress(KubeNotFound):  # deleted already (a removal resumed)
            await self._client.patch(
                f"/apis/apps/v1/namespaces/{ns}/statefulsets/{group}",
                {"spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": policy}}},
            )
        for api_version, kind, name in (
            ("apps/v1", "StatefulSet", group),
            ("policy/v1", "PodDisruptionBudget", group),
            ("policy/v1", "PodDisruptionBudget", master_budget_name(group)),
            ("v1", "Service", group),
            ("v1", "Service", kube.headless_service_name(group)),
            ("v1", "ConfigMap", kube.broker_config_name(group)),
        ):
            if await self._client.delete(api_version, kind, ns, name):
                failpoints.hit("after:RemoveGroupObject")

    async def _try(self, call: Any, reason: str, name: str) -> None:
        try:
            await call
        except AdminError as exc:
            self._events("Warning", f"{reason}Failed", f"{name}: {exc}")

    # -- 7. status --------------------------------------------------------------------

    async def _write_status(
        self, body: dict[str, Any], status: RocketClusterStatus, memory: ClusterMemory
    ) -> None:
        old = RocketClusterStatus.model_validate(body.get("status") or {})
        status = status.model_copy(
            update={
                "conditions": merge_conditions(old.conditions, status.conditions, now_rfc3339()),
                "features": status.features or old.features,  # kept by an early return
            }
        )
        # status.rollout is written apart, before each action, conditionally (_record)
        data = status.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"rollout"})
        text = digest(data)
        if text == memory.last_status:
            return
        ref = {
            "apiVersion": kube.API_VERSION,
            "kind": "RocketCluster",
            "metadata": {
                "name": body["metadata"]["name"],
                "namespace": body["metadata"]["namespace"],
            },
        }
        if not self._leading():
            return
        written = await self._applier.apply_status(ref, data)
        memory.last_status = text
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version:
            memory.resource_version = version


def _monitoring_unavailable(api_version: str, exc: KubeApiError) -> bool:
    """A Prometheus-operator kind the API does not serve (404) or let us use (403)."""
    return prune.unavailable(prune.MONITORING, api_version, exc)


async def prune_monitoring(
    client: KubeClient, cluster: RocketCluster, wanted: list[dict[str, Any]]
) -> list[tuple[str, str, str]]:
    """Delete the cluster's monitoring objects that are not in ``wanted`` (see
    :func:`prune.prune`). Returns what was deleted."""
    return await prune.prune(client, cluster, prune.MONITORING, wanted)


def _template_hash(workload: dict[str, Any]) -> str | None:
    annotations = (
        workload.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations") or {}
    )
    value = annotations.get(kube.ANNOTATION_POD_HASH)
    return str(value) if value is not None else None


__all__ = ["ClusterMemory", "ClusterReconciler", "done", "prune_monitoring", "put_missing"]

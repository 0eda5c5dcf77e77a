"""The steps of a cluster's life, as a user takes them (kubectl apply, patch, delete)
and as the suite and ``make demo-operator`` both run them: each returns what
happened and what it measured; the suite asserts on it, the demo tells it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketcluster.api import kube
from rocketcluster.ctl.workload import Workload, audit
from rocketcluster.e2e.k8s.operated import OperatedCluster, condition, wait_until
from rocketcluster.e2e.k8s.rollcheck import RollReport, check_roll
from rocketcluster.e2e.k8s.timeline import ClusterTimeline

READY_S = 240.0  # generous: 2 shared cores
ROLL_S = 900.0


@dataclass
class Ready:
    applied: str  # what kubectl said
    seconds: float
    status: dict[str, Any]


def apply_until_ready(cluster: OperatedCluster, manifest: Path) -> Ready:
    """``kubectl apply -f``, then ``kubectl wait --for=condition=Ready``, then until
    nothing is in progress."""
    started = time.monotonic()
    applied = cluster.apply(manifest)
    cluster.backend.kubectl(
        "wait",
        "--for=condition=Ready",
        f"rocketcluster/{cluster.name}",
        "-n",
        cluster.backend.namespace,
        f"--timeout={READY_S:.0f}s",
        timeout=READY_S + 30,
    )
    cluster.wait(cluster.healthy, READY_S, "a healthy cluster (Ready, not Progressing/Degraded)")
    return Ready(applied, time.monotonic() - started, cluster.status())


@dataclass
class KillFollowed:
    killed: str
    new_master: str
    seconds: float  # from the kill until status named the new master


def kill_master(cluster: OperatedCluster, group: str) -> KillFollowed:
    before = cluster.group_status(group)
    if not before or not before.get("master"):
        raise AssertionError(f"{group} has no master in status: {cluster.conditions_line()}")
    killed_at = time.monotonic()
    cluster.backend.kill_pod(before["master"])

    def moved() -> dict[str, Any] | None:
        now = cluster.group_status(group)
        return now if now and now.get("master") not in (None, before["master"]) else None

    after = wait_until(moved, 60, "a new master in status", cluster.conditions_line)
    return KillFollowed(before["master"], after["master"], time.monotonic() - killed_at)


@dataclass
class Roll:
    image: str
    seconds: float
    report: RollReport
    acknowledged: int
    lost: int
    send_errors: int


def roll_image_under_load(
    cluster: OperatedCluster,
    groups: list[str],
    tag: str,
    disrupt: Callable[[], AbstractContextManager[object]] | None = None,
) -> Roll:
    """Change ``spec.image`` while two official-client producers send, and check the
    roll against the realiser's (or the API's) pod events and the controllers' view;
    ``disrupt`` (e.g. :class:`~rocketcluster.e2e.k8s.operator_kills.OperatorKills`)
    runs beside the roll."""
    cluster.wait(cluster.healthy, READY_S, "a healthy cluster before the roll")
    spec = (cluster.resource() or {}).get("spec") or {}
    members = [
        kube.controller_member_name(cluster.name, i)
        for i in range(int((spec.get("controller") or {}).get("replicas", 3)))
    ]
    min_in_sync = int(
        ((spec.get("brokers") or {}).get("replication") or {}).get("minInSyncReplicas", 1)
    )
    broker_ids = cluster.broker_ids(groups)
    image = str(cluster.status().get("image", "")).rpartition(":")[0] + f":{tag}"
    workload = Workload(cluster.endpoints())
    with ClusterTimeline(lambda: cluster.member_ips(len(members))) as timeline:
        time.sleep(1.0)
        workload.start(producers=2)
        try:
            time.sleep(2.0)
            asked, started = time.time(), time.monotonic()
            with disrupt() if disrupt is not None else contextlib.nullcontext():
                cluster.patch({"image": image})
                cluster.wait(
                    lambda s: cluster.settled(s) and s.get("image") == image,
                    ROLL_S,
                    "the rolled cluster",
                )
            seconds = time.monotonic() - started
            time.sleep(2.0)
        finally:
            workload.stop()
    report = check_roll(
        cluster.backend.pod_events(),
        timeline,
        members=members,
        broker_ids=broker_ids,
        min_in_sync=min_in_sync,
        since=asked,
    )
    seen = audit(cluster.endpoints(), "audit", set(workload.acked))
    lost = len(set(workload.acked) - set(seen))
    return Roll(image, seconds, report, len(workload.acked), lost, len(workload.failures))


def images_by_component(cluster: OperatedCluster) -> set[tuple[str, str]]:
    """(component, image) of every container of the cluster's pods."""
    return {
        (p["metadata"]["labels"][kube.LABEL_COMPONENT], c["image"])
        for p in cluster.pods({})
        for c in p["spec"]["containers"]
    }


@dataclass
class ScaledOut:
    seconds: float
    restarted: list[str]  # pods that were running before and were replaced (none expected)
    on_new_group: list[str] = field(default_factory=list)  # ids a new producer sent there


def scale_out(cluster: OperatedCluster, groups: int) -> ScaledOut:
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods({})}
    started = time.monotonic()
    cluster.patch({"brokers": {"groups": groups}})
    cluster.wait(
        lambda s: cluster.settled(s) and s.get("masters") == f"{groups}/{groups}",
        READY_S,
        f"{groups} groups with a master",
    )
    seconds = time.monotonic() - started
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods({})}
    restarted = sorted(n for n, u in uids.items() if now.get(n) != u)
    newest = kube.broker_group_name(cluster.name, groups - 1)
    workload = Workload(cluster.endpoints())
    workload.start(producers=2)
    try:
        wait_until(
            lambda: sum(1 for g in workload.groups.values() if g == newest) >= 20,
            60,
            f"messages on {newest}",
            lambda: f"{len(workload.acked)} acknowledged, errors {workload.errors}",
        )
    finally:
        workload.stop()
    return ScaledOut(seconds, restarted, [m for m, g in workload.groups.items() if g == newest])


def scale_in_refused(cluster: OperatedCluster, groups: int) -> str:
    """Ask for fewer groups while the leaving one holds unconsumed messages: the
    Warning the operator answers with (nothing is deleted)."""
    cluster.patch({"brokers": {"groups": groups}})
    cluster.wait_condition("Warning", "True", 120, reason="ScaleDownBlocked")
    return str((condition(cluster.status(), "Warning") or {}).get("message", ""))


@dataclass
class Drained:
    consumed: int
    seconds: float  # from the consumers catching up until the group was gone
    retained_claims: list[str]


def drain_and_remove(cluster: OperatedCluster, leaving: str, ids: list[str]) -> Drained:
    """The consumers catch up on the leaving group; then the operator removes it."""
    # no waiting for the queues to run dry: once drained, the group may go at any tick
    seen = audit(cluster.group_endpoint(leaving), "billing", set(ids), dry_polls=0)
    caught_up = time.monotonic()
    wait_until(
        lambda: (
            cluster.backend.get("statefulset", leaving) is None and not cluster.group_pods(leaving)
        ),
        READY_S,
        f"{leaving} to be removed",
        cluster.conditions_line,
    )
    cluster.wait(
        lambda s: cluster.settled(s) and (condition(s, "Warning") or {}).get("status") == "False",
        READY_S,
        "the scale-in to finish",
    )
    claims = sorted(
        str(c["metadata"]["name"])
        for c in cluster.backend.objects("persistentvolumeclaims")
        if str(c["metadata"]["name"]).startswith(f"data-{leaving}-")
    )
    return Drained(len(set(ids) & set(seen)), time.monotonic() - caught_up, claims)


@dataclass
class Deleted:
    seconds: float
    claims_before: list[str]
    claims_after: list[str]


def delete_cluster(cluster: OperatedCluster) -> Deleted:
    claims_before = _claims(cluster)
    started = time.monotonic()
    cluster.backend.kubectl(
        "delete", "rocketcluster", cluster.name, "-n", cluster.backend.namespace
    )
    selector = f"{kube.LABEL_CLUSTER}={cluster.name}"
    for kind in ("pods", "statefulsets", "deployments", "services", "configmaps"):
        _wait_none(cluster, kind, selector)
    return Deleted(time.monotonic() - started, claims_before, _claims(cluster))


def _wait_none(cluster: OperatedCluster, kind: str, selector: str) -> None:
    def names() -> list[str]:
        return [str(o["metadata"]["name"]) for o in cluster.backend.objects(kind, selector)]

    wait_until(
        lambda: not names(), READY_S, f"every {kind} of {cluster.name} gone", lambda: str(names())
    )


def _claims(cluster: OperatedCluster) -> list[str]:
    return sorted(
        str(c["metadata"]["name"]) for c in cluster.backend.objects("persistentvolumeclaims")
    )

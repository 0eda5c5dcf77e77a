"""The realiser's workload controllers as pure plans: :func:`plan_statefulset` and
:func:`plan_deployment` driven pass by pass against a small in-memory cluster whose
pods the test starts, readies and lets go, as kubelet and the API server would."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from rocketcluster.e2e.kube.deployments import HASH_LABEL, plan_deployment
from rocketcluster.e2e.kube.statefulsets import (
    POD_INDEX_LABEL,
    POD_NAME_LABEL,
    REVISION_LABEL,
    StatefulSetPlan,
    claim_name,
    ordinal_of,
    plan_statefulset,
    revision_of,
)
from rocketcluster.e2e.kube.templates import (
    controlled_by,
    owner_reference,
    pod_from_template,
    template_hash,
)

NS = "ns"
NOW = "2026-01-01T00:00:00Z"


def _template(image: str = "web:1") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web"}, "annotations": {"a": "1"}},
        "spec": {
            "containers": [{"name": "web", "image": image, "command": ["web"]}],
            "volumes": [{"name": "config", "configMap": {"name": "cfg"}}],
        },
    }


def _sts(
    replicas: int = 3,
    *,
    policy: str = "OrderedReady",
    strategy: dict[str, Any] | None = None,
    retention: dict[str, str] | None = None,
    start: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "serviceName": "web-hl",
        "podManagementPolicy": policy,
        "updateStrategy": strategy or {"type": "OnDelete"},
        "selector": {"matchLabels": {"app": "web"}},
        "template": _template(),
        "volumeClaimTemplates": [
            {
                "metadata": {"name": "data", "labels": {"tier": "disk"}},
                "spec": {"resources": {"requests": {"storage": "1Gi"}}},
            }
        ],
    }
    if retention is not None:
        spec["persistentVolumeClaimRetentionPolicy"] = retention
    if start is not None:
        spec["ordinals"] = {"start": start}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS, "uid": "sts-uid", "generation": 1},
        "spec": spec,
    }


class Cluster:
    """Pods and claims as the API server holds them; :meth:`sync` runs one pass of
    the StatefulSet controller and carries its plan out (deletions only mark the pod
    terminating: kubelet has yet to stop it, see :meth:`let_go`)."""

    def __init__(self, sts: dict[str, Any]) -> None:
        self.sts = sts
        self.pods: dict[str, dict[str, Any]] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.revisions: dict[str, dict[str, Any]] = {}
        self.uids = itertools.count()
        self.plan = StatefulSetPlan()

    def sync(self) -> StatefulSetPlan:
        template = self.sts["spec"]["template"]
        self.revisions[revision_of(self.sts, template)] = copy.deepcopy(template)
        plan = plan_statefulset(
            self.sts,
            list(self.pods.values()),
            list(self.claims.values()),
            revisions=self.revisions,
        )
        for claim in plan.create_claims:
            assert claim["metadata"]["name"] not in self.claims
            claim["metadata"]["uid"] = f"claim-{next(self.uids)}"
            self.claims[claim["metadata"]["name"]] = claim
        for pod in plan.create_pods:
            assert pod["metadata"]["name"] not in self.pods
            pod["metadata"]["uid"] = f"pod-{next(self.uids)}"
            pod["status"] = {"phase": "Pending"}
            self.pods[pod["metadata"]["name"]] = pod
        for name in plan.delete_pods:
            self.pods[name]["metadata"]["deletionTimestamp"] = NOW
        for name in plan.delete_claims:
            del self.claims[name]
        for name, owners in plan.claim_owners.items():
            self.claims[name]["metadata"]["ownerReferences"] = owners
        self.sts["status"] = plan.status
        self.plan = plan
        return plan

    def run(self, *names: str, ready: bool = True) -> None:
        for name in names:
            self.pods[name]["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            }

    def fail(self, name: str) -> None:
        self.pods[name]["status"] = {"phase": "Failed"}

    def let_go(self, *names: str) -> None:
        """kubelet stopped the terminating pods: their objects go."""
        for name in names:
            assert self.pods[name]["metadata"].get("deletionTimestamp"), name
            del self.pods[name]

    def revision(self, name: str) -> str:
        return str(self.pods[name]["metadata"]["labels"][REVISION_LABEL])

    def change_template(self, image: str) -> None:
        self.sts["spec"]["template"] = _template(image)
        self.sts["metadata"]["generation"] += 1

    def bring_up(self) -> None:
        """Pass after pass, every created pod Running and Ready, until nothing changes."""
        for _ in range(20):
            plan = self.sync()
            self.run(*(p["metadata"]["name"] for p in plan.create_pods))
            if not (plan.create_pods or plan.delete_pods or plan.create_claims):
                return
        raise AssertionError("the StatefulSet did not settle")


def _created(plan: StatefulSetPlan) -> list[str]:
    return [p["metadata"]["name"] for p in plan.create_pods]


# --- StatefulSet: identity ------------------------------------------------------------


def test_pods_and_claims_are_named_and_labelled_by_ordinal() -> None:
    cluster = Cluster(_sts(2, policy="Parallel"))
    plan = cluster.sync()
    assert _created(plan) == ["web-0", "web-1"]
    assert [c["metadata"]["name"] for c in plan.create_claims] == ["data-web-0", "data-web-1"]
    pod = cluster.pods["web-1"]
    rev = revision_of(cluster.sts, cluster.sts["spec"]["template"])
    assert pod["metadata"]["labels"] == {
        "app": "web",
        POD_NAME_LABEL: "web-1",
        POD_INDEX_LABEL: "1",
        REVISION_LABEL: rev,
    }
    assert pod["metadata"]["annotations"] == {"a": "1"}
    assert pod["spec"]["hostname"] == "web-1" and pod["spec"]["subdomain"] == "web-hl"
    assert pod["spec"]["volumes"] == [
        {"name": "config", "configMap": {"name": "cfg"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}},
    ]
    assert controlled_by(pod, cluster.sts)
    claim = cluster.claims["data-web-1"]
    assert claim["metadata"]["labels"] == {"tier": "disk", "app": "web"}
    assert claim["spec"] == {"resources": {"requests": {"storage": "1Gi"}}}
    assert "ownerReferences" not in claim["metadata"]  # Retain by default
    assert rev == f"web-{template_hash(cluster.sts['spec']['template'])}"
    assert ordinal_of("web", "web-12") == 12 and ordinal_of("web", "web-x") is None
    assert ordinal_of("web", "webby-1") is None
    assert claim_name("data", "web", 3) == "data-web-3"


def test_ordinals_start_where_the_spec_says() -> None:
    cluster = Cluster(_sts(2, policy="Parallel", start=5))
    assert _created(cluster.sync()) == ["web-5", "web-6"]


def test_pods_of_another_owner_are_not_counted() -> None:
    cluster = Cluster(_sts(1))
    stranger = pod_from_template(
        _template(),
        name="web-0",
        namespace=NS,
        owner={**cluster.sts, "metadata": {**cluster.sts["metadata"], "uid": "other"}},
        labels={},
    )
    plan = plan_statefulset(cluster.sts, [stranger], [])
    assert _created(plan) == ["web-0"]


def test_orphaned_pods_of_its_own_name_and_selector_are_adopted() -> None:
    cluster = Cluster(_sts(3, policy="Parallel"))
    cluster.bring_up()
    for pod in cluster.pods.values():  # the StatefulSet was deleted with Orphan...
        del pod["metadata"]["ownerReferences"]
    del cluster.pods["web-2"]

    def copy_of(name: str, new_name: str, **labels: str) -> None:
        pod = copy.deepcopy(cluster.pods[name])
        pod["metadata"]["name"] = new_name
        pod["metadata"]["labels"].update(labels)
        cluster.pods[new_name] = pod

    copy_of("web-0", "web-9")  # adopted, then condemned
    copy_of("web-0", "webby-1")  # not named as its pods are
    copy_of("web-0", "web-5", app="other")  # not selected
    cluster.sts["metadata"]["uid"] = "sts-uid-2"  # ... and made again
    plan = cluster.sync()
    assert plan.adopt_pods == ["web-0", "web-1", "web-9"]
    assert _created(plan) == ["web-2"] and plan.delete_pods == ["web-9"]
    assert plan.status["replicas"] == 3 and plan.status["readyReplicas"] == 3


# --- StatefulSet: podManagementPolicy ---------------------------------------------------


def test_ordered_ready_starts_one_pod_at_a_time_after_the_previous_is_ready() -> None:
    cluster = Cluster(_sts(3))
    assert _created(cluster.sync()) == ["web-0"]
    assert _created(cluster.sync()) == []  # web-0 is Pending
    cluster.run("web-0", ready=False)
    assert _created(cluster.sync()) == []  # Running but not Ready
    cluster.run("web-0")
    assert _created(cluster.sync()) == ["web-1"]
    cluster.run("web-1")
    assert _created(cluster.sync()) == ["web-2"]
    cluster.run("web-2")
    plan = cluster.sync()
    assert not (plan.create_pods or plan.delete_pods)
    assert plan.status["readyReplicas"] == 3 and plan.status["replicas"] == 3


def test_parallel_starts_every_pod_at_once_and_replaces_a_lost_one_at_once() -> None:
    cluster = Cluster(_sts(3, policy="Parallel"))
    assert _created(cluster.sync()) == ["web-0", "web-1", "web-2"]
    cluster.run("web-0", "web-2")
    del cluster.pods["web-0"]  # force-deleted
    cluster.fail("web-2")
    plan = cluster.sync()
    assert _created(plan) == ["web-0"] and plan.delete_pods == ["web-2"]


def test_ordered_ready_waits_for_a_terminating_pod_before_going_on() -> None:
    cluster = Cluster(_sts(3))
    cluster.bring_up()
    cluster.pods["web-0"]["metadata"]["deletionTimestamp"] = NOW  # deleted by someone
    cluster.sts["spec"]["replicas"] = 4
    plan = cluster.sync()
    assert not plan.create_pods  # web-0 blocks web-3
    cluster.let_go("web-0")
    assert _created(cluster.sync()) == ["web-0"]
    cluster.run("web-0")
    assert _created(cluster.sync()) == ["web-3"]


def test_a_failed_pod_is_deleted_then_recreated_under_its_name() -> None:
    cluster = Cluster(_sts(2))
    cluster.bring_up()
    cluster.fail("web-0")
    old_uid = cluster.pods["web-0"]["metadata"]["uid"]
    assert cluster.sync().delete_pods == ["web-0"]
    assert not cluster.sync().delete_pods  # already terminating
    cluster.let_go("web-0")
    assert _created(cluster.sync()) == ["web-0"]
    assert cluster.pods["web-0"]["metadata"]["uid"] != old_uid


# --- StatefulSet: scaling ---------------------------------------------------------------


def test_ordered_ready_scale_down_removes_the_highest_ordinal_first_one_at_a_time() -> None:
    cluster = Cluster(_sts(4))
    cluster.bring_up()
    cluster.sts["spec"]["replicas"] = 2
    assert cluster.sync().delete_pods == ["web-3"]
    assert cluster.sync().delete_pods == []  # web-3 still terminating
    cluster.let_go("web-3")
    assert cluster.sync().delete_pods == ["web-2"]
    cluster.let_go("web-2")
    plan = cluster.sync()
    assert not plan.delete_pods and sorted(cluster.pods) == ["web-0", "web-1"]
    assert plan.status["replicas"] == 2
    # claims are kept (whenScaled: Retain by default)
    assert sorted(cluster.claims) == [f"data-web-{i}" for i in range(4)]


def test_ordered_ready_scale_down_waits_for_every_wanted_pod_to_be_ready() -> None:
    cluster = Cluster(_sts(3))
    cluster.bring_up()
    cluster.sts["spec"]["replicas"] = 2
    cluster.run("web-0", ready=False)
    assert cluster.sync().delete_pods == []
    cluster.run("web-0")
    assert cluster.sync().delete_pods == ["web-2"]


def test_ordered_ready_scale_down_takes_an_unhealthy_pod_only_if_it_is_the_first() -> None:
    cluster = Cluster(_sts(4))
    cluster.bring_up()
    cluster.sts["spec"]["replicas"] = 2
    cluster.run("web-2", ready=False)
    cluster.run("web-3", ready=False)
    assert cluster.sync().delete_pods == []  # web-3 is unhealthy and web-2 is first
    cluster.run("web-3")
    assert cluster.sync().delete_pods == ["web-3"]
    cluster.let_go("web-3")
    assert cluster.sync().delete_pods == ["web-2"]  # unhealthy, but the first one


def test_parallel_scale_down_removes_every_condemned_pod_at_once() -> None:
    cluster = Cluster(_sts(4, policy="Parallel"))
    cluster.bring_up()
    cluster.sts["spec"]["replicas"] = 1
    cluster.run("web-2", ready=False)
    assert cluster.sync().delete_pods == ["web-3", "web-2", "web-1"]


def test_when_scaled_delete_removes_claims_of_condemned_ordinals_once_their_pod_is_gone() -> None:
    cluster = Cluster(_sts(3, retention={"whenScaled": "Delete", "whenDeleted": "Retain"}))
    cluster.bring_up()
    cluster.sts["spec"]["replicas"] = 2
    plan = cluster.sync()
    assert plan.delete_pods == ["web-2"] and plan.delete_claims == []
    cluster.let_go("web-2")
    assert cluster.sync().delete_claims == ["data-web-2"]
    assert sorted(cluster.claims) == ["data-web-0", "data-web-1"]
    # scaled up again: a new claim for the new pod
    cluster.sts["spec"]["replicas"] = 3
    plan = cluster.sync()
    assert _created(plan) == ["web-2"]
    assert [c["metadata"]["name"] for c in plan.create_claims] == ["data-web-2"]


def test_a_pod_waits_for_its_claim_being_deleted_to_go_then_gets_a_new_one() -> None:
    cluster = Cluster(_sts(3, policy="Parallel"))
    cluster.bring_up()
    cluster.claims["data-web-2"]["metadata"]["deletionTimestamp"] = NOW
    cluster.pods["web-2"]["metadata"]["deletionTimestamp"] = NOW
    cluster.let_go("web-2")
    plan = cluster.sync()
    assert plan.create_pods == [] and plan.create_claims == []
    del cluster.claims["data-web-2"]  # pvc-protection let it go
    plan = cluster.sync()
    assert _created(plan) == ["web-2"]
    assert [c["metadata"]["name"] for c in plan.create_claims] == ["data-web-2"]


def test_a_pending_pod_gets_its_missing_claim_back() -> None:
    cluster = Cluster(_sts(1))
    cluster.sync()
    del cluster.claims["data-web-0"]
    plan = cluster.sync()
    assert [c["metadata"]["name"] for c in plan.create_claims] == ["data-web-0"]
    cluster.run("web-0")
    del cluster.claims["data-web-0"]
    assert cluster.sync().create_claims == []  # a running pod keeps what it has


@pytest.mark.parametrize("when_deleted", ["Delete", "Retain"])
def test_when_deleted_decides_whether_claims_are_owned_by_the_statefulset(
    when_deleted: str,
) -> None:
    cluster = Cluster(_sts(1, retention={"whenDeleted": when_deleted, "whenScaled": "Retain"}))
    cluster.sync()
    refs = cluster.claims["data-web-0"]["metadata"].get("ownerReferences")
    if when_deleted == "Delete":
        assert refs == [owner_reference(cluster.sts, controller=False)]
    else:
        assert not refs
    # the policy flips: the claim's owners follow
    other = "Retain" if when_deleted == "Delete" else "Delete"
    cluster.sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] = other
    plan = cluster.sync()
    expected = [] if other == "Retain" else [owner_reference(cluster.sts, controller=False)]
    assert plan.claim_owners == {"data-web-0": expected}
    assert cluster.sync().claim_owners == {}


# --- StatefulSet: updates ---------------------------------------------------------------


def test_on_delete_replaces_nothing_until_a_pod_is_deleted() -> None:
    cluster = Cluster(_sts(3))
    cluster.bring_up()
    old_rev = cluster.sts["status"]["currentRevision"]
    cluster.change_template("web:2")
    plan = cluster.sync()
    new_rev = plan.status["updateRevision"]
    assert new_rev != old_rev and plan.delete_pods == [] and plan.create_pods == []
    assert plan.status["currentRevision"] == old_rev
    assert plan.status["updatedReplicas"] == 0 and plan.status["currentReplicas"] == 3
    assert plan.status["observedGeneration"] == 2
    # the operator deletes web-1: it comes back from the new template
    cluster.pods["web-1"]["metadata"]["deletionTimestamp"] = NOW
    cluster.let_go("web-1")
    assert _created(cluster.sync()) == ["web-1"]
    assert cluster.revision("web-1") == new_rev and cluster.revision("web-0") == old_rev
    image = cluster.pods["web-1"]["spec"]["containers"][0]["image"]
    assert image == "web:2"
    cluster.run("web-1")
    for name in ("web-0", "web-2"):
        cluster.pods[name]["metadata"]["deletionTimestamp"] = NOW
        cluster.let_go(name)
    cluster.bring_up()
    status = cluster.sts["status"]
    # Every pod is updated, yet OnDelete never moves currentRevision (as Kubernetes).
    assert status["updatedReplicas"] == 3 and status["readyReplicas"] == 3
    assert status["currentRevision"] == old_rev and status["currentReplicas"] == 0
    assert status["updateRevision"] == new_rev


def test_rolling_update_replaces_the_highest_ordinal_first_each_after_the_last_is_ready() -> None:
    cluster = Cluster(_sts(3, strategy={"type": "RollingUpdate"}))
    cluster.bring_up()
    old_rev = cluster.sts["status"]["currentRevision"]
    cluster.change_template("web:2")
    for name in ("web-2", "web-1", "web-0"):
        assert cluster.sync().delete_pods == [name]
        assert cluster.sync().delete_pods == []  # terminating
        cluster.let_go(name)
        assert _created(cluster.sync()) == [name]
        assert cluster.sync().delete_pods == []  # not Ready yet
        assert cluster.sts["status"]["currentRevision"] == old_rev
        cluster.run(name)
    status = cluster.sync().status
    assert status["currentRevision"] == status["updateRevision"] != old_rev
    assert status["currentReplicas"] == 3 == status["updatedReplicas"]


def test_rolling_update_stops_at_the_partition_and_recreates_below_it_from_the_old_template() -> (
    None
):
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}
    cluster = Cluster(_sts(3, strategy=strategy))
    cluster.bring_up()
    old_rev = cluster.sts["status"]["currentRevision"]
    cluster.change_template("web:2")
    assert cluster.sync().delete_pods == ["web-2"]
    cluster.let_go("web-2")
    cluster.bring_up()
    assert cluster.sync().delete_pods == []  # web-1 and web-0 are below the partition
    assert cluster.revision("web-1") == old_rev
    # web-0 lost below the partition comes back at the current revision
    cluster.pods["web-0"]["metadata"]["deletionTimestamp"] = NOW
    cluster.let_go("web-0")
    cluster.sync()
    assert cluster.revision("web-0") == old_rev
    assert cluster.pods["web-0"]["spec"]["containers"][0]["image"] == "web:1"


def test_ordered_ready_rolling_update_waits_for_scale_down_and_readiness() -> None:
    cluster = Cluster(_sts(3, strategy={"type": "RollingUpdate"}))
    cluster.bring_up()
    cluster.change_template("web:2")
    cluster.sts["spec"]["replicas"] = 2
    assert cluster.sync().delete_pods == ["web-2"]  # scaling first
    cluster.let_go("web-2")
    cluster.run("web-0", ready=False)
    assert cluster.sync().delete_pods == []
    cluster.run("web-0")
    assert cluster.sync().delete_pods == ["web-1"]


def test_parallel_rolling_update_goes_on_past_an_unready_lower_pod() -> None:
    cluster = Cluster(_sts(3, policy="Parallel", strategy={"type": "RollingUpdate"}))
    cluster.bring_up()
    cluster.change_template("web:2")
    cluster.run("web-0", ready=False)
    assert cluster.sync().delete_pods == ["web-2"]
    cluster.let_go("web-2")
    plan = cluster.sync()
    assert _created(plan) == ["web-2"] and plan.delete_pods == []  # never past a new pod
    cluster.run("web-2", ready=False)
    assert cluster.sync().delete_pods == []  # nor past one that is not Ready


# --- StatefulSet: status ----------------------------------------------------------------


def test_status_counts_as_the_controller_does() -> None:
    cluster = Cluster(_sts(3, policy="Parallel"))
    assert cluster.sync().status["replicas"] == 0  # not created when the pass began
    plan = cluster.sync()
    assert plan.status["replicas"] == 3 and plan.status["readyReplicas"] == 0
    cluster.run("web-0", "web-1")
    cluster.run("web-2", ready=False)
    status = cluster.sync().status
    assert status["readyReplicas"] == 2 == status["availableReplicas"]
    assert status["updatedReplicas"] == 3 == status["currentReplicas"]
    # A terminating pod still Ready is counted as ready, not as current or updated.
    cluster.pods["web-0"]["metadata"]["deletionTimestamp"] = NOW
    status = cluster.sync().status
    assert status["replicas"] == 3 and status["readyReplicas"] == 2
    assert status["updatedReplicas"] == 2 == status["currentReplicas"]
    assert status["collisionCount"] == 0 and status["observedGeneration"] == 1


# --- Deployment -------------------------------------------------------------------------


def _deployment(strategy: dict[str, Any], replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "solo", "namespace": NS, "uid": "deploy-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": {"app": "web"}},
            "template": _template(),
        },
    }


class Deployed:
    def __init__(self, deploy: dict[str, Any]) -> None:
        self.deploy = deploy
        self.pods: dict[str, dict[str, Any]] = {}
        self.names = itertools.count()

    def sync(self) -> tuple[list[str], list[str]]:
        plan = plan_deployment(
            self.deploy,
            list(self.pods.values()),
            suffix=lambda: f"x{next(self.names)}",
            now=NOW,
        )
        for name in plan.delete_pods:
            self.pods[name]["metadata"]["deletionTimestamp"] = NOW
        for pod in plan.create_pods:
            pod["metadata"]["uid"] = pod["metadata"]["name"]
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
            self.pods[pod["metadata"]["name"]] = pod
        self.deploy["status"] = plan.status
        return [p["metadata"]["name"] for p in plan.create_pods], plan.delete_pods


def test_recreate_deletes_the_old_pods_before_it_creates_new_ones() -> None:
    world = Deployed(_deployment({"type": "Recreate"}, replicas=2))
    created, _ = world.sync()
    first_hash = template_hash(world.deploy["spec"]["template"])
    assert created == [f"solo-{first_hash}-x0", f"solo-{first_hash}-x1"]
    assert world.pods[created[0]]["metadata"]["labels"][HASH_LABEL] == first_hash
    world.deploy["spec"]["template"] = _template("web:2")
    assert world.sync() == ([], created)
    assert world.sync() == ([], [])  # the old pods are still terminating
    del world.pods[created[0]]
    assert world.sync() == ([], [])  # one is left
    del world.pods[created[1]]
    new_hash = template_hash(world.deploy["spec"]["template"])
    assert world.sync() == ([f"solo-{new_hash}-x2", f"solo-{new_hash}-x3"], [])


def test_recreate_replaces_a_deleted_current_pod_at_once_as_a_replica_set_does() -> None:
    world = Deployed(_deployment({"type": "Recreate"}))
    ((name,), _) = world.sync()
    world.pods[name]["metadata"]["deletionTimestamp"] = NOW
    created, deleted = world.sync()
    assert len(created) == 1 and deleted == []


def test_rolling_update_surges_then_removes_the_old_pod_once_the_new_is_ready() -> None:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    world = Deployed(_deployment(strategy))
    ((old,), _) = world.sync()
    world.deploy["spec"]["template"] = _template("web:2")
    created, deleted = world.sync()
    assert len(created) == 1 and deleted == []  # within replicas + maxSurge
    assert world.sync() == ([], [old])  # the new one is Ready: the old one goes
    assert world.sync() == ([], [])
    status = world.deploy["status"]
    assert status["updatedReplicas"] == 1 and status["readyReplicas"] == 1


def test_a_deployment_adopts_orphans_that_match_its_selector() -> None:
    world = Deployed(_deployment({"type": "Recreate"}))
    ((name,), _) = world.sync()
    del world.pods[name]["metadata"]["ownerReferences"]
    world.deploy["metadata"]["uid"] = "deploy-uid-2"
    plan = plan_deployment(world.deploy, list(world.pods.values()), suffix=str, now=NOW)
    assert plan.adopt_pods == [name] and plan.create_pods == [] and plan.delete_pods == []


def test_deployment_status_conditions() -> None:
    world = Deployed(_deployment({"type": "Recreate"}))
    world.sync()
    world.sync()
    status = world.deploy["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Available"]["status"] == "True"
    assert conditions["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conditions["Available"]["lastTransitionTime"] == NOW
    assert status["observedGeneration"] == 1 and status["unavailableReplicas"] == 0

"""A RocketCluster's life, driven the way users drive it: ``kubectl apply`` the example
manifest → Ready with masters in status → the official client produces and consumes
through the group Services → topics as resources, a hundred at once, and an operator
restart that resumes them all → a master's process dies and status follows the new
master → an image change rolls every pod in order under continuous load, losing
nothing → scale out to three groups → scale-in refused while the leaving group holds
unconsumed messages → drained scale-in → deletion leaves what the retention policy
says. The real operator, real controllers and real brokers, on the emulator + pod
realiser here (or a real cluster when one is configured)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT, CLIENT_PORT, CONTROLLER_PORT, HA_PORT
from rocketcluster.api.cluster import OPERATOR_POD_LABELS, controller_image_for
from rocketcluster.ctl.workload import Workload, consume, produce
from rocketcluster.e2e.k8s import steps
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.catalogue_bench import Bulk, measure_apply, measure_resume
from rocketcluster.e2e.k8s.operated import OperatedCluster, condition, wait_until
from rocketcluster.e2e.k8s.operator_kills import OperatorKills
from rocketcluster.e2e.k8s.operators import LEASE_ENV
from rocketcluster.e2e.kube.netprobe import probe, probe_pod

from .conftest import CATALOGUE, Journey, with_canary

pytestmark = pytest.mark.slow

GROUPS = ["prod-broker-0", "prod-broker-1"]
LEAVING = "prod-broker-2"
BULK = 100  # RocketTopic objects applied at once (make bench applies 10,000)
BULK_TIMEOUT_S = 300.0


def _names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(str(o["metadata"]["name"]) for o in objects)


def test_apply_becomes_ready_with_masters_in_status(journey: Journey, tmp_path: Path) -> None:
    cluster = journey.cluster
    ready = steps.apply_until_ready(cluster, with_canary(tmp_path))
    assert ready.applied == "rocketcluster.rocketcluster.io/prod created"
    status = ready.status
    assert status["masters"] == "2/2"
    assert (condition(status, "Degraded") or {}).get("status") == "False"
    groups = {g["name"]: g for g in status["groups"]}
    assert sorted(groups) == GROUPS
    for name, g in groups.items():
        assert g["readyReplicas"] == 3 and g["masterEpoch"] >= 1, g
        assert g["master"] in g["syncStateSet"], g
        assert g["endpoint"] == f"{kube.service_host(name, cluster.backend.namespace)}:8081"
    assert status["controller"]["leader"] in (1, 2, 3)
    # the printer columns a person sees
    table = cluster.backend.kubectl("get", "rocketclusters", "-n", cluster.backend.namespace)
    header, row = table.stdout.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "READY", "MASTERS"]
    assert row.split()[:3] == ["prod", "True", "2/2"]
    # each group's client Service selects exactly its master, labelled by the broker itself
    masters = cluster.pods({kube.LABEL_ROLE: kube.ROLE_MASTER})
    assert _names(masters) == sorted(g["master"] for g in groups.values())
    journey.done.add("ready")


def test_official_client_through_the_group_services(journey: Journey) -> None:
    cluster = journey.needs("ready")
    endpoints = cluster.endpoints()
    sent = produce(endpoints, 200)
    received = consume(endpoints, len(sent), group="billing")
    assert sorted(received) == sorted(sent)


def test_network_policies_admit_the_cluster_and_refuse_a_stranger(journey: Journey) -> None:
    """The NetworkPolicies the operator renders (spec.networkPolicies, on by default)
    are enforced by the realiser: a stranger pod, in the cluster's namespace or
    another, reaches the client port only — of a broker and of a group's Service —
    never the admin API (with elect), replication or the controllers; a pod labelled
    as the operator reaches the admin APIs. Every path the cluster itself used so far
    (replication, brokers to controllers, the operator's admin calls) was admitted:
    not one connection of a cluster pod was refused."""
    cluster = journey.needs("ready")
    backend = cluster.backend
    if not isinstance(backend, EmulatedBackend):
        pytest.skip("a real cluster's CNI enforces the policies; not observable from here")
    harness = backend.harness
    state = json.loads((harness.dir / "realiser.json").read_text())
    assert state["networkPolicies"] == "enforced", state
    assert all(n == 0 for n in harness.network_policy_refusals().values()), (
        harness.network_policy_refusals()
    )
    ns = backend.namespace
    names = {p["metadata"]["name"] for p in backend.objects("networkpolicy")}
    assert {"prod-brokers", "prod-controllers", f"{GROUPS[0]}-replication"} <= names, names
    harness.kubectl(
        "apply",
        "-f",
        "-",
        input="\n---\n".join(
            json.dumps(o)
            for o in (
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}},
                probe_pod("stranger", "stranger", ns),
                probe_pod("faraway", "stranger", "elsewhere"),
                probe_pod("operator-like", "", backend.identity.namespace, OPERATOR_POD_LABELS),
            )
        ),
    )
    broker = cluster.group_pods(GROUPS[0])[0]["status"]["podIP"]
    controller = cluster.member_ips(1)[0]
    service = (backend.get("service", GROUPS[0]) or {})["spec"]["clusterIP"]
    paths = {
        "broker client": (broker, CLIENT_PORT),
        "group Service": (service, CLIENT_PORT),
        "broker admin": (broker, ADMIN_PORT),
        "replication": (broker, HA_PORT),
        "controller Raft": (controller, CONTROLLER_PORT),
        "controller admin": (controller, ADMIN_PORT),
    }
    seen = {
        (src, path): probe(harness, src, host, port, where)["result"]
        for src, where in (("stranger", ns), ("faraway", "elsewhere"))
        for path, (host, port) in paths.items()
    }
    print(" ".join(f"{s}->{p}:{r}" for (s, p), r in sorted(seen.items())))
    for (src, path), result in seen.items():
        client = path in ("broker client", "group Service")
        assert (result != "refused") == client, (src, path, result)
    operator_ns = backend.identity.namespace
    for host, port in ((broker, ADMIN_PORT), (controller, ADMIN_PORT)):
        assert probe(harness, "operator-like", host, port, operator_ns)["result"] != "refused"
    for name, where in (("stranger", ns), ("faraway", "elsewhere"), ("operator-like", operator_ns)):
        harness.kubectl("delete", "pod", name, "-n", where, "--wait=false")


def test_topics_and_consumer_groups_as_resources(journey: Journey) -> None:
    """RocketTopic / RocketConsumerGroup go into the controllers' catalogue and every
    broker serves them without a restart."""
    cluster = journey.needs("ready")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods({})}
    ns = cluster.backend.namespace
    cluster.backend.kubectl("apply", "-n", ns, "-f", str(CATALOGUE))
    for ref in (
        "rockettopic/invoices",
        "rockettopic/ledger-entries",
        "rocketconsumergroup/invoicing",
    ):
        cluster.backend.kubectl(
            "wait", "--for=condition=Ready", ref, "-n", ns, "--timeout=120s", timeout=150
        )
    topic = cluster.backend.get("rockettopic", "ledger-entries") or {}
    assert topic["status"]["name"] == "Ledger_Entries"
    endpoints = cluster.endpoints()
    sent = produce(endpoints, 40, topic="invoices")
    got = consume(endpoints, len(sent), group="invoicing", topic="invoices")
    assert sorted(got) == sorted(sent)
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods({})} == uids


def test_topic_resources_in_bulk_and_an_operator_restart(journey: Journey) -> None:
    """A hundred RocketTopic objects in one apply: their handlers' puts go in a few
    batched catalogue commands, not one each, and every broker serves them all; a
    restarted operator resumes every object and changes nothing."""
    cluster = journey.needs("ready")
    bulk = Bulk(cluster, "bulk", BULK, print)
    applied = measure_apply(bulk, BULK_TIMEOUT_S, None)
    assert applied["servedByEveryBroker"] == BULK, applied
    assert applied["catalogueCommands"] <= BULK // 4, applied
    if isinstance(cluster.backend, EmulatedBackend):  # a real cluster's operator is a pod
        resumed = measure_resume(bulk, cluster.backend, BULK_TIMEOUT_S)
        assert resumed["catalogueCommands"] == 0, resumed
        assert resumed["stillReady"] == BULK, resumed


def test_status_follows_a_killed_master(journey: Journey) -> None:
    cluster = journey.needs("ready")
    followed = steps.kill_master(cluster, GROUPS[0])
    print(f"status named {followed.new_master} {followed.seconds:.1f}s after the kill")
    assert followed.seconds < 30
    # the killed broker comes back (as a slave) and the cluster settles again
    cluster.wait(cluster.healthy, steps.READY_S, "a healthy cluster after the kill")


def test_an_image_change_rolls_in_order_under_load(journey: Journey) -> None:
    """The roll goes on in order through six operator deaths (emulated backend): the
    leader SIGKILLed mid-roll, and an operator ended at each kind of step (before,
    during and after a switchover, between two groups, after a leadership transfer);
    each time the standby replica takes the Lease and resumes from the status."""
    cluster = journey.needs("ready")
    backend = cluster.backend
    kills: OperatorKills | None = None

    def disrupt() -> OperatorKills:
        nonlocal kills
        assert isinstance(backend, EmulatedBackend)
        kills = OperatorKills(backend, GROUPS)
        return kills

    emulated = isinstance(backend, EmulatedBackend)
    roll = steps.roll_image_under_load(
        cluster, GROUPS, "0.1.1-rolled", disrupt if emulated else None
    )
    print("\n".join(roll.report.lines()))
    if kills is not None:
        print("\n".join(kills.lines()))
        assert kills.errors == []
        assert kills.pending == [], "the roll ended before every operator death was tried"
        lease = float(LEASE_ENV["ROCKETCLUSTER_LEASE_DURATION_SECONDS"]) + float(
            LEASE_ENV["ROCKETCLUSTER_LEASE_RETRY_PERIOD_SECONDS"]
        )
        for takeover in kills.takeovers:
            assert takeover.seconds <= lease + 5, takeover
    assert roll.report.problems == []
    # brokers run the new spec.image, controllers its rocketcluster-controller twin
    assert steps.images_by_component(cluster) == {
        (kube.COMPONENT_BROKER, roll.image),
        (kube.COMPONENT_CONTROLLER, controller_image_for(roll.image)),
        ("canary", roll.image),  # from the brokers' image
    }
    assert roll.acknowledged > 100
    assert roll.lost == 0, f"{roll.lost} of {roll.acknowledged} acknowledged messages lost"
    journey.done.add("roll")


def _canary_metrics(cluster: OperatedCluster) -> dict[tuple[str, str], float]:
    """(metric with its labels but cluster, group) -> value, from the canary pod."""
    (pod,) = cluster.pods({kube.LABEL_COMPONENT: "canary"})
    text = cluster.http.get(f"http://{pod['status']['podIP']}:8091/metrics").text
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        match = re.match(r"^(rocketmq_canary_[a-z_]+)\{(.*)\} (\S+)$", line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        group = labels.pop("group", "")
        labels.pop("cluster", None)
        name = match.group(1) + "".join(f",{k}={v}" for k, v in sorted(labels.items()))
        found[(name, group)] = float(match.group(3))
    return found


def test_the_canary_probes_every_group_through_the_roll(journey: Journey) -> None:
    """spec.canary: a Deployment that sends and receives through each group's client
    Service every 2 s. After the roll (and its operator deaths) every group's last
    probes succeed; what failed during it is printed."""
    cluster = journey.needs("roll")

    def all_ok() -> dict[tuple[str, str], float] | None:
        metrics = _canary_metrics(cluster)
        ratios = {g: v for (n, g), v in metrics.items() if n == "rocketmq_canary_success_ratio"}
        return metrics if set(ratios) == set(GROUPS) and min(ratios.values()) >= 0.99 else None

    metrics = wait_until(all_ok, 120, "every group's canary succeeding", lambda: "")
    for group in GROUPS:
        results = {
            n.split("result=")[1]: int(v)
            for (n, g), v in metrics.items()
            if g == group and n.startswith("rocketmq_canary_probes_total,")
        }
        print(f"canary {group}: {results}")
        assert results.get("ok", 0) > 10, results


def test_scale_out_to_three_groups(journey: Journey) -> None:
    cluster = journey.needs("ready")
    scaled = steps.scale_out(cluster, 3)
    assert scaled.restarted == [], "scale-out restarted running pods"
    assert len(scaled.on_new_group) >= 20
    journey.on_new_group = scaled.on_new_group
    journey.done.add("scale-out")


def test_scale_in_is_refused_while_the_group_holds_unconsumed_messages(journey: Journey) -> None:
    cluster = journey.needs("scale-out")
    warning = steps.scale_in_refused(cluster, 2)
    # nobody has read the new group yet: the warning says so, with the count
    assert f"scale-in of {LEAVING} waits: topic orders holds" in warning, warning
    assert "unread messages that no consumer group has read" in warning, warning
    # it stays refused, and nothing of the group is deleted meanwhile
    time.sleep(5)
    assert cluster.backend.get("statefulset", LEAVING) is not None
    assert len(cluster.group_pods(LEAVING)) == 3
    assert (condition(cluster.status(), "Warning") or {}).get("reason") == "ScaleDownBlocked"
    journey.done.add("scale-in-refused")


def test_a_drained_group_is_removed(journey: Journey) -> None:
    """...even when the operator dies between two of the group's deletes (emulated
    backend: a failpoint): the next leader finishes the removal from status.rollout,
    although nothing of the group is observed any more."""
    cluster = journey.needs("scale-in-refused")
    backend = cluster.backend
    if isinstance(backend, EmulatedBackend):
        (backend.failpoints / "armed").write_text("after:RemoveGroupObject\n")
    try:
        drained = steps.drain_and_remove(cluster, LEAVING, journey.on_new_group)
    finally:
        if isinstance(backend, EmulatedBackend):
            (backend.failpoints / "armed").write_text("")
    assert drained.consumed == len(journey.on_new_group)
    assert cluster.status()["masters"] == "2/2"
    if isinstance(backend, EmulatedBackend):
        assert (backend.failpoints / "fired" / "after-RemoveGroupObject").exists()
    leftovers = (
        ("service", LEAVING),
        ("service", kube.headless_service_name(LEAVING)),
        ("configmap", kube.broker_config_name(LEAVING)),
        ("poddisruptionbudget", LEAVING),
        ("poddisruptionbudget", f"{LEAVING}-master"),
    )
    wait_until(
        lambda: all(cluster.backend.get(kind, name) is None for kind, name in leftovers),
        60,
        "every object of the removed group deleted",
        lambda: str([f"{k}/{n}" for k, n in leftovers if cluster.backend.get(k, n)]),
    )
    wait_until(
        lambda: (
            not ((cluster.resource() or {}).get("status", {}).get("rollout") or {}).get("removing")
        ),
        60,
        "status.rollout.removing emptied",
        lambda: str(((cluster.resource() or {}).get("status") or {}).get("rollout")),
    )
    assert drained.retained_claims == [f"data-{LEAVING}-{r}" for r in range(3)], (
        "whenScaled: Retain keeps the leaving group's volumes"
    )
    # a new producer's routes no longer name the group
    workload = Workload(cluster.endpoints())
    workload.start(producers=1)
    try:
        wait_until(lambda: len(workload.acked) >= 50, 60, "50 sends", lambda: str(workload.errors))
    finally:
        workload.stop()
    assert LEAVING not in set(workload.groups.values())


def test_deletion_leaves_what_the_retention_policy_says(journey: Journey) -> None:
    cluster = journey.needs("ready")
    deleted = steps.delete_cluster(cluster)
    # whenDeleted: Retain (the default) keeps every volume, brokers' and controllers'
    assert deleted.claims_after == deleted.claims_before
    assert any(c.startswith("prod-controller-") for c in deleted.claims_after)


def test_the_operator_and_the_brokers_needed_nothing_their_rbac_lacks(journey: Journey) -> None:
    """On the emulator every request is authorised as the API server does it: the
    operator runs as the chart's ServiceAccount under the chart's RBAC, each broker as
    its pod's ServiceAccount under the Role the operator renders. None was refused."""
    backend = journey.cluster.backend
    if not isinstance(backend, EmulatedBackend):
        pytest.skip("a real cluster's API server logs its own refusals (audit log)")
    refused = [
        r
        for r in backend.harness.forbidden_report()
        if r["user"].startswith("system:serviceaccount:")
    ]
    assert refused == [], refused[:5]

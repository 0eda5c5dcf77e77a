"""An upgrade across the consume-queue store change (issue #27), driven as users drive
it: a RocketCluster running the previous release (brokers whose stores hold a
preallocated file per queue), messages produced and partly consumed with the official
clients, then ``spec.image`` changed to today's release. The operator rolls one pod at
a time (the roll checker's rules: never below minInSyncReplicas, the master last and
switched over first); each broker's first start on the new code removes the old
queue files and rebuilds its queues from the commit log, saying so in its log; every
acknowledged message is readable afterwards and the consumer group goes on from its
committed offsets.

The previous release runs from its own tree: ``git archive`` of PREVIOUS_RELEASE (the
commit the store-level upgrade test's archive was written by), which the pod realiser
runs for pods of the previous image (``--host-source``), beside today's packages for
everything else. On a real cluster this needs that release's images pushed: not done
here (the emulator only).

Version skew (issue #30, item 6) during the same roll: the previous release knows no
PutCatalogueEntries command and refuses a topic's ``trace``, and reports no features.
For as long as members of both releases answer, RocketTopic objects are created one a
second (every half second while a new-code leader has a previous-release follower;
the first traces all) while every controller's catalogue is sampled twice a second:
answers at one Raft index always agree, no batch command is applied while a member of
the previous release runs, and the traced topic waits (WaitingForUpgrade) until every
controller and broker reads ``trace``, then is Ready with it everywhere."""

from __future__ import annotations

import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api import kube
from rocketcluster.api.broker_config import ADMIN_PORT
from rocketcluster.api.client.controller_admin import ControllerAdmin
from rocketcluster.api.cluster import controller_image_for
from rocketcluster.api.features import SUPPORTED, Feature
from rocketcluster.ctl.testing import quiet_official_client
from rocketcluster.ctl.workload import Workload, audit, consume, produce
from rocketcluster.e2e.k8s import steps
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.operated import OperatedCluster, condition, wait_until
from rocketcluster.e2e.k8s.skew import (
    SkewSampler,
    TopicsDuringRoll,
    disagreements,
    early_batches,
    last_without,
    previous_release_ran_until,
)
from rocketcluster.e2e.k8s.timeline import ClusterTimeline
from rocketcluster.e2e.kube.nodedrain import Disruptions, drain

from .conftest import REPO, one_group, operated

pytestmark = pytest.mark.slow

# The last release whose store kept a preallocated file per consume queue.
PREVIOUS_RELEASE = "a61208f94ad7a6b81c2c09330ef48d9d24fd3f87"
PREVIOUS_IMAGE = "ghcr.io/rocketcluster/rocketcluster-broker:0.0.9-previous"
NEW_TAG = "0.1.0-upgraded"
GROUP = "prod-broker-0"
TOPIC = "before-upgrade"  # the roll's own load goes to "orders"
PRODUCED = 200
CONSUMED_BEFORE = 80
MEMBERS = ("api", "broker", "controller")  # what the previous release's pods import


def previous_release_tree(into: Path) -> Path:
    """The previous release's packages, from this repository's history."""
    archive = into / "previous.tar"
    paths = [f"{member}/src" for member in MEMBERS]
    try:
        subprocess.run(
            ["git", "-C", str(REPO), "archive", "--output", str(archive), PREVIOUS_RELEASE, *paths],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.CalledProcessError as exc:
        pytest.fail(
            f"git archive of {PREVIOUS_RELEASE[:7]} failed ({exc.stderr.strip()}): the test "
            "needs the repository's history (a full clone, not --depth)"
        )
    tree = into / "previous"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():  # Debian's Python 3.11.2 has no extraction filters
            inside = (tree / member.name).resolve().is_relative_to(tree.resolve())
            assert inside and (member.isfile() or member.isdir()), member.name
        tar.extractall(tree)
    return tree


@pytest.fixture(scope="module")
def previous_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatedCluster]:
    quiet_official_client()
    work = tmp_path_factory.mktemp("upgrade")
    tree = previous_release_tree(work)
    sources = {PREVIOUS_IMAGE: tree, controller_image_for(PREVIOUS_IMAGE): tree}
    with operated(
        lambda: EmulatedBackend(work / "k8s", REPO / "crds", host_sources=sources, nodes=3)
    ) as cluster:
        yield cluster


@dataclass
class SkewRecord:
    """What the roll recorded for the version-skew tests after it."""

    started: float = 0.0
    sampler: SkewSampler | None = None
    topics: TopicsDuringRoll | None = None


@pytest.fixture(scope="module")
def skew() -> SkewRecord:
    return SkewRecord()


def _on_the_previous_release(spec: dict[str, Any]) -> None:
    spec["image"] = PREVIOUS_IMAGE
    spec["topics"].append({"name": TOPIC, "queues": 4})


def _broker_logs(cluster: OperatedCluster) -> dict[str, str]:
    backend = cluster.backend
    assert isinstance(backend, EmulatedBackend)
    logs = backend.harness.dir / "logs" / backend.namespace
    return {
        p["metadata"]["name"]: (logs / f"{p['metadata']['name']}_broker.log").read_text(
            errors="replace"
        )
        for p in cluster.group_pods(GROUP)
    }


def test_a_rolling_upgrade_rebuilds_every_store_and_keeps_every_message(
    previous_cluster: OperatedCluster, tmp_path: Path, skew: SkewRecord
) -> None:
    cluster = previous_cluster
    steps.apply_until_ready(cluster, one_group(tmp_path, _on_the_previous_release))
    endpoints = cluster.endpoints()
    ids = produce(endpoints, PRODUCED, topic=TOPIC)
    consumed = consume(endpoints, CONSUMED_BEFORE, group="billing", topic=TOPIC)
    assert len(consumed) >= CONSUMED_BEFORE
    logs = _broker_logs(cluster)
    assert len(logs) == 3 and not any("old layout" in text for text in logs.values())

    backend = cluster.backend
    assert isinstance(backend, EmulatedBackend)
    topics = TopicsDuringRoll(cluster, create=backend.harness.create)
    skew.started = time.time()
    with SkewSampler(cluster, on_round=topics.on_round) as sampler:
        skew.sampler, skew.topics = sampler, topics
        roll = steps.roll_image_under_load(cluster, [GROUP], NEW_TAG)
        topics.join(timeout=2 * topics.limit + 60)  # still applying: sampled to the end
    print("\n".join(roll.report.lines()))
    assert roll.report.problems == []
    assert roll.lost == 0, f"{roll.lost} of {roll.acknowledged} acknowledged during the roll lost"
    assert steps.images_by_component(cluster) == {
        (kube.COMPONENT_BROKER, roll.image),
        (kube.COMPONENT_CONTROLLER, controller_image_for(roll.image)),
    }
    # every broker's first start on the new code moved its store to the new layout
    for pod, text in _broker_logs(cluster).items():
        assert "consume queues in the old layout" in text, f"{pod} did not say it migrated"
    # every message acknowledged before the upgrade is there, at one place
    seen = audit(cluster.endpoints(), "audit", set(ids), topic=TOPIC)
    assert set(ids) <= set(seen), f"{len(set(ids) - set(seen))} of {PRODUCED} lost"
    assert all(len(places) == 1 for places in seen.values()), seen
    # the group goes on from its committed offsets: the rest, not what it acknowledged
    remaining = PRODUCED - len(set(consumed))
    rest = consume(cluster.endpoints(), remaining, group="billing", topic=TOPIC)
    assert set(consumed) | set(rest) >= set(ids)
    again = set(consumed) & set(rest)
    assert not again, f"{len(again)} acknowledged before the upgrade delivered again"


# -- version skew (issue #30, item 6): recorded by the roll above ----------------------


def _recorded(skew: SkewRecord) -> tuple[SkewSampler, TopicsDuringRoll]:
    if skew.sampler is None or skew.topics is None:
        pytest.fail("not run: needs the rolling upgrade above, which did not get to its roll")
    return skew.sampler, skew.topics


def test_during_the_roll_every_controller_answer_at_one_raft_index_agrees(
    skew: SkewRecord,
) -> None:
    sampler, topics = _recorded(skew)
    assert sampler.errors == [] and topics.errors == [], (sampler.errors, topics.errors)
    assert topics.started_at is not None, "no sampled moment had members of both releases"
    compared = [s for s in sampler.samples if s.applied is not None]
    old_until = last_without(compared, Feature.FEATURES) or 0.0
    window = [s for s in compared if s.leads and Feature.FEATURES in s.features]
    print(
        f"{len(topics.names)} RocketTopics applied while both releases ran; "
        f"{len(compared)} catalogue answers at a settled index from "
        f"{len({s.member for s in compared})} members; a new-code leader answered "
        f"{len([s for s in window if s.at <= old_until])} times while a member of the "
        "previous release still did"
    )
    assert len(topics.names) >= 5, topics.names
    assert {Feature.FEATURES in s.features for s in compared} == {True, False}
    assert disagreements(compared) == []


def test_no_catalogue_batch_while_a_member_of_the_previous_release_runs(
    previous_cluster: OperatedCluster, skew: SkewRecord
) -> None:
    sampler, _ = _recorded(skew)
    addresses = [f"{ip}:{ADMIN_PORT}" for ip in previous_cluster.member_ips(3)]
    with ControllerAdmin(addresses) as admin:
        events = admin.get("/v1/events", {"since": skew.started})
    old_until = previous_release_ran_until(
        sampler.samples, previous_cluster.backend.pod_events(), Feature.CATALOGUE_BATCH
    )
    kinds = [e.get("command") for e in events]
    print(
        f"catalogue commands since the roll began: {kinds.count('PutTopic')} PutTopic, "
        f"{kinds.count('PutCatalogueEntries')} PutCatalogueEntries; a member of the "
        f"previous release ran until {old_until}"
    )
    assert old_until is not None
    assert "PutTopic" in kinds, "no topic was put one at a time while both releases ran"
    assert early_batches(events, old_until) == []


def test_after_the_roll_the_traced_topic_is_ready_with_trace_everywhere(
    previous_cluster: OperatedCluster, skew: SkewRecord
) -> None:
    _, topics = _recorded(skew)
    cluster = previous_cluster

    def all_ready() -> list[str] | None:
        ready = [
            o["metadata"]["name"]
            for o in cluster.backend.objects("rockettopic", "skew=roll")
            if (found := condition(o.get("status") or {}, "Ready")) and found["status"] == "True"
        ]
        return ready if set(ready) >= set(topics.names) else None

    wait_until(all_ready, 180, "every RocketTopic of the roll Ready", cluster.conditions_line)
    # while a member of the previous release ran, the traced topic said it waits
    assert "WaitingForUpgrade" in topics.reasons, topics.reasons
    features = cluster.status().get("features") or {}
    assert set(features.get("controllers") or []) == SUPPORTED, features
    assert [g["name"] for g in features.get("groups") or []] == [GROUP], features
    assert set(features["groups"][0]["features"]) == SUPPORTED, features
    versions = []
    for ip in cluster.member_ips(3):
        catalogue = cluster.http.get(f"http://{ip}:{ADMIN_PORT}/v1/catalogue").json()
        by_name = {t["name"]: t for t in catalogue["topics"]}
        assert set(topics.names) <= set(by_name), sorted(set(topics.names) - set(by_name))
        assert by_name[topics.traced].get("trace") == "all", by_name[topics.traced]
        assert all("trace" not in by_name[n] for n in topics.names if n != topics.traced)
        versions.append(int(catalogue["version"]))
    assert len(versions) == 3
    for pod in cluster.group_pods(GROUP):  # every broker serves that catalogue
        info = cluster.broker(pod) or {}
        served = int(info.get("catalogueVersion", -1))
        assert served >= min(versions), (pod["metadata"]["name"], info)


# -- kubectl drain (issue #30, item 5), on the upgraded cluster's three nodes ----------


def test_a_drain_moves_one_broker_at_a_time_and_the_master_is_handed_over_first(
    previous_cluster: OperatedCluster,
) -> None:
    """``kubectl drain`` of the master's node under official-client load: the master's
    PodDisruptionBudget refuses its eviction (kubectl retries) until the operator has
    handed the master role to a caught-up slave on another node; the group never has
    two pods down at once; every acknowledged message is still there."""
    cluster = previous_cluster
    backend = cluster.backend
    assert isinstance(backend, EmulatedBackend)
    cluster.wait(cluster.healthy, steps.READY_S, "a healthy cluster before the drain")
    (group,) = [g for g in cluster.status()["groups"] if g["name"] == GROUP]
    master = str(group["master"])
    node = str((backend.get("pod", master) or {})["spec"]["nodeName"])
    ids = cluster.broker_ids([GROUP])[GROUP]
    workload = Workload(cluster.endpoints())
    selector = f"{kube.LABEL_GROUP}={GROUP}"
    with ClusterTimeline(lambda: cluster.member_ips(3)) as timeline:
        workload.start(producers=2)
        try:
            time.sleep(2.0)
            asked = time.time()
            with Disruptions(backend.harness, backend.namespace, selector, 3) as down:
                run = drain(backend.harness, node, timeout_s=300)
            cluster.wait(cluster.healthy, steps.READY_S, "a healthy cluster after the drain")
        finally:
            workload.stop()
            backend.kubectl("uncordon", node, check=False)
    print(
        f"drained {node} in {run.seconds:.0f}s: {run.refused} evictions refused and "
        f"retried, evicted {', '.join(run.evicted())}; at most {down.worst} of 3 "
        f"{GROUP} pods down over {down.looks} looks; {len(workload.acked)} acknowledged"
    )
    assert run.drained, run.output
    assert master in run.refused_pods(), run.output
    # the old master was no master any more when it was deleted
    deleted = [
        e.at
        for e in backend.pod_events()
        if e.kind == "deleting" and e.pod == master and e.at >= asked
    ]
    assert deleted, f"{master} was never deleted"
    seen = timeline.at(GROUP, deleted[0])
    assert seen is not None and seen.master_id not in (None, ids[master]), seen
    assert down.worst <= 1
    left = [p["metadata"]["name"] for p in cluster.pods({}) if p["spec"].get("nodeName") == node]
    assert left == [], f"still on the drained node: {left}"
    found = audit(cluster.endpoints(), "audit", set(workload.acked))
    lost = set(workload.acked) - set(found)
    assert not lost, f"{len(lost)} of {len(workload.acked)} acknowledged lost"

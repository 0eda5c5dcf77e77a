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
here (the emulator only)."""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api import kube
from rocketcluster.api.cluster import controller_image_for
from rocketcluster.ctl.testing import quiet_official_client
from rocketcluster.ctl.workload import audit, consume, produce
from rocketcluster.e2e.k8s import steps
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.operated import OperatedCluster

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
        lambda: EmulatedBackend(work / "k8s", REPO / "crds", host_sources=sources)
    ) as cluster:
        yield cluster


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
    previous_cluster: OperatedCluster, tmp_path: Path
) -> None:
    cluster = previous_cluster
    steps.apply_until_ready(cluster, one_group(tmp_path, _on_the_previous_release))
    endpoints = cluster.endpoints()
    ids = produce(endpoints, PRODUCED, topic=TOPIC)
    consumed = consume(endpoints, CONSUMED_BEFORE, group="billing", topic=TOPIC)
    assert len(consumed) >= CONSUMED_BEFORE
    logs = _broker_logs(cluster)
    assert len(logs) == 3 and not any("old layout" in text for text in logs.values())

    roll = steps.roll_image_under_load(cluster, [GROUP], NEW_TAG)
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

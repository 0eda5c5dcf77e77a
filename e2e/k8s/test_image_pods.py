"""Everything runs from the images ``make images`` builds: the operator from its image,
and, after ``kubectl apply`` of a RocketCluster whose ``spec.image`` is the local
broker image, every broker pod from that image (a store process and two front
processes) and every controller pod from its controller twin (the realiser's image
mode), each under ``buildah run`` as the image's non-root user. Then the official
client produces through the group Service while the master's pod is killed: a new
master takes over and no acknowledged message is lost (as many sends fail after the
client's retries around the kill as with single-process brokers: 562 against 564).

What this proves beyond the process-mode journey: the images' entry points, users,
environments and file systems are what the rendered pods need (config and
service-account files mounted read-only at Kubernetes' paths, data on a volume the
pod's fsGroup may write, nothing else written)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api import kube
from rocketcluster.api.cluster import controller_image_for
from rocketcluster.ctl.testing import quiet_official_client
from rocketcluster.ctl.workload import Workload, audit
from rocketcluster.e2e.images import tools
from rocketcluster.e2e.images.build import BuildError, build_images
from rocketcluster.e2e.images.catalogue import RUN_AS
from rocketcluster.e2e.images.plan import Settings, WorkspaceError
from rocketcluster.e2e.k8s import steps
from rocketcluster.e2e.k8s.backends import EmulatedBackend
from rocketcluster.e2e.k8s.operated import OperatedCluster, wait_until
from rocketcluster.e2e.kube import procfs

from .conftest import REPO, one_group, operated

GROUP = "prod-broker-0"
FRONTS = 2
FRONT_MODULE = "rocketcluster.broker.front"


def _two_fronts(spec: dict[str, Any]) -> None:
    """Brokers as a pod with cores to spare runs them: a store process and two front
    processes on the client port (the process-mode journey keeps one process)."""
    spec["brokers"]["frontProcesses"] = FRONTS


@pytest.fixture(scope="module")
def image_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatedCluster]:
    """The broker, controller and operator images (built, or cached when nothing
    changed), and an emulated cluster whose operator and pods run from them."""
    quiet_official_client()
    try:
        built = build_images(
            Settings(only=("broker", "controller", "operator")), root=REPO, out=sys.stderr
        )
    except (tools.ToolMissing, tools.CommandFailed, BuildError, WorkspaceError) as exc:
        pytest.fail(str(exc))
    tags = {b.plan.spec.name: b.plan.tag for b in built}
    with operated(
        lambda: EmulatedBackend(
            tmp_path_factory.mktemp("k8s-images"),
            REPO / "crds",
            image=tags["broker"],
            operator_image=tags["operator"],
        )
    ) as cluster:
        yield cluster


def _container_processes(cluster: OperatedCluster, pod: str) -> list[int]:
    """The processes a pod's container runs inside its image: below the realiser's
    ``buildah run`` of that pod, with a root other than the host's."""
    assert isinstance(cluster.backend, EmulatedBackend)
    harness = cluster.backend.harness
    runs = [
        r.pid
        for r in harness.realised_processes()
        if r.name.startswith(f"{cluster.backend.namespace}/{pod}/") and procfs.cmdline(r.pid)
    ]
    return [p for run in runs for p in procfs.descendants(run) if procfs.root(p) != "/"]


@pytest.mark.slow
@pytest.mark.images("broker", "controller", "operator")
@pytest.mark.timeout(1200)  # building the images on a fresh machine is part of it
def test_pods_run_from_their_images_and_a_killed_master_loses_nothing(
    image_cluster: OperatedCluster, tmp_path: Path
) -> None:
    cluster = image_cluster
    backend = cluster.backend
    assert isinstance(backend, EmulatedBackend)
    broker_image = str(backend.image)
    ready = steps.apply_until_ready(cluster, one_group(tmp_path, _two_fronts))
    print(f"Ready in {ready.seconds:.0f} s with pods from {broker_image}")

    # the operator that made it Ready runs from its image
    operator = [p for p in procfs.descendants(backend.operator.pid) if procfs.root(p) != "/"]
    assert any("rocketcluster-operator" in procfs.cmdline(p) for p in operator), operator
    assert {procfs.uid(p) for p in operator} == {RUN_AS}

    # every pod names its image and runs from it, as the image's user
    want = {
        kube.COMPONENT_BROKER: broker_image,
        kube.COMPONENT_CONTROLLER: controller_image_for(broker_image),
    }
    pods = cluster.pods({})
    assert len(pods) == 6, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        name = pod["metadata"]["name"]
        component = pod["metadata"]["labels"][kube.LABEL_COMPONENT]
        (container,) = pod["spec"]["containers"]
        assert container["image"] == want[component], name
        statuses = pod["status"]["containerStatuses"]
        assert [s["image"] for s in statuses] == [want[component]], name
        inside = _container_processes(cluster, name)
        assert inside, f"{name}: no process runs inside its image"
        assert {procfs.uid(p) for p in inside} == {RUN_AS}, name
        program = f"rocketcluster-{component}"
        assert any(program in procfs.cmdline(p) for p in inside), (name, program)
        if component == kube.COMPONENT_BROKER:  # its store process and two fronts
            fronts = [p for p in inside if FRONT_MODULE in procfs.cmdline(p)]
            assert len(fronts) == FRONTS, (name, [procfs.cmdline(p) for p in inside])

    # the official client produces through the group Service; the master's pod dies
    workload = Workload(cluster.endpoints())
    workload.start(producers=2)
    try:
        time.sleep(3.0)
        before, killed_at = len(workload.acked), time.time()
        followed = steps.kill_master(cluster, GROUP)
        print(
            f"killed {followed.killed}: status named {followed.new_master} "
            f"{followed.seconds:.1f} s later"
        )
        wait_until(
            lambda: len(workload.acked) > before + 200 or None,
            120,
            "writes acknowledged after the failover",
            cluster.conditions_line,
        )
    finally:
        workload.stop()
    assert followed.new_master != followed.killed
    seen = audit(cluster.endpoints(), "audit", set(workload.acked))
    lost = set(workload.acked) - set(seen)
    print(
        f"acknowledged {len(workload.acked)}, lost {len(lost)}; producers recovered "
        f"{workload.recovery_after(killed_at):.1f} s after the first failed send; "
        f"sends that failed after the client's retries: {workload.errors or 0}"
    )
    assert len(workload.acked) > 200
    assert lost == set(), f"{len(lost)} of {len(workload.acked)} acknowledged messages lost"

    # the killed pod comes back from its image, as a slave, and the group heals
    cluster.wait(cluster.healthy, steps.READY_S, "a healthy cluster after the kill")
    assert _container_processes(cluster, followed.killed)

"""The emulated chaos soak's view of the pods (rocketcluster.e2e.k8s.chaos_pods):
which pods are controllers and brokers, and at which addresses the probe finds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocketcluster.api import kube
from rocketcluster.ctl.local.state import LocalClusterState
from rocketcluster.e2e.k8s.chaos_pods import pod_process

LOGS = Path("/run/harness/logs")


def _pod(name: str, ip: str | None, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "status": {"podIP": ip} if ip else {}}


def test_a_broker_is_found_by_the_address_it_registers_with() -> None:
    pod = _pod(
        "chaos-broker-0-1",
        "127.10.128.4",
        **{kube.LABEL_COMPONENT: kube.COMPONENT_BROKER, kube.LABEL_GROUP: "chaos-broker-0"},
    )
    broker = pod_process(pod, [4242, 4250], "default", LOGS)
    assert broker is not None
    assert (broker.role, broker.group, broker.pid) == ("broker", "chaos-broker-0", 4242)
    assert broker.admin == "127.10.128.4:8080"
    state = LocalClusterState(name="chaos", directory=LOGS, processes=(broker,))
    # What the controllers list as the group's replicas ("client|ha"): the pod's IP.
    assert state.broker_serving("127.10.128.4:8081", "chaos-broker-0") == broker
    assert broker.addresses["dns-client"].startswith("chaos-broker-0-1.chaos-broker-0-headless.")
    assert broker.log_path == LOGS / "default" / "chaos-broker-0-1_broker.log"


def test_a_controller_answers_at_its_pod_address_and_its_members_service() -> None:
    pod = _pod(
        "chaos-controller-1-abc",
        "127.20.80.2",
        **{
            kube.LABEL_COMPONENT: kube.COMPONENT_CONTROLLER,
            kube.LABEL_MEMBER: "chaos-controller-1",
        },
    )
    controller = pod_process(pod, [], "default", LOGS)
    assert controller is not None
    assert (controller.role, controller.pid) == ("controller", 0)  # not running right now
    state = LocalClusterState(name="chaos", directory=LOGS, processes=(controller,))
    assert state.controller_admin_addresses() == ["127.20.80.2:8080"]
    member_service = kube.service_host("chaos-controller-1", "default")
    assert state.listening_at(f"{member_service}:8080") == controller


def test_other_pods_and_pods_without_an_address_are_not_processes_of_the_cluster() -> None:
    broker = {kube.LABEL_COMPONENT: kube.COMPONENT_BROKER, kube.LABEL_GROUP: "g"}
    assert pod_process(_pod("chaos-broker-0-0", None, **broker), [], "default", LOGS) is None
    assert (
        pod_process(
            _pod("chaos-console", "127.1.1.1", **{kube.LABEL_COMPONENT: "console"}),
            [],
            "default",
            LOGS,
        )
        is None
    )
    assert (
        pod_process(
            _pod("nameless-group", "127.1.1.2", **{kube.LABEL_COMPONENT: kube.COMPONENT_BROKER}),
            [],
            "default",
            LOGS,
        )
        is None
    )

"""NetworkPolicies enforced by the realiser (``--network-policies enforce``): real pods
(``python3`` HTTP servers), a policy admitting one of them to another, and the kernel's
answer to each connection a pod makes — the admitted pod connects, others get a reset
(in the namespace and from another one), the node is let through, a ClusterIP
Service keeps the client's address, a policy removed opens the pod again, the
refusals are counted (and reported at stop), and a stopped realiser leaves no chain
and no cgroup. The NetworkPolicies the operator renders for examples/cluster.yaml are
enforced on pods labelled as its brokers, controller, console and the chart's
operator: a stranger reaches the client port only, and every path the cluster uses
(replication, PrepareHandover, brokers to controllers, forwarding, the admin APIs)
still connects, seen at the caller's own address.

Every pod runs the same program on port 8000: ``GET /`` answers the address the
connection came from; ``GET /probe?host=H&port=P`` connects from inside the pod to
H:P and says what happened (``ok`` with the body, ``refused``, or ``closed``)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.api import kube as kube_names
from rocketcluster.api.broker_config import ADMIN_PORT, CLIENT_PORT, CONTROLLER_PORT, HA_PORT
from rocketcluster.api.cluster import OPERATOR_POD_LABELS, RocketCluster, load_manifest
from rocketcluster.e2e.kube import firewall, netpol, network
from rocketcluster.e2e.kube.binaries import Binaries
from rocketcluster.e2e.kube.harness import KubeHarness
from rocketcluster.e2e.kube.netprobe import PORT, WAIT_S, pod_ip, probe, probe_pod
from rocketcluster.e2e.kube.realiser import REFUSALS_FILE
from rocketcluster.operator.render import render_cluster
from rocketcluster.operator.render.brokers import group_names
from rocketcluster.operator.render.meta import labels

NS = "default"
OTHER = "elsewhere"
REPO = Path(__file__).resolve().parents[2]

POLICY: dict[str, Any] = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "server", "namespace": NS},
    "spec": {
        "podSelector": {"matchLabels": {"app": "server"}},
        "policyTypes": ["Ingress"],
        # a named port: resolved on the server pod
        "ingress": [
            {
                "from": [{"podSelector": {"matchLabels": {"app": "friend"}}}],
                "ports": [{"port": "http"}],
            }
        ],
    },
}


def _objects() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OTHER}},
        probe_pod("server", "server"),
        probe_pod("friend", "friend"),
        probe_pod("stranger", "stranger"),
        probe_pod("faraway", "friend", OTHER),  # the right label in the wrong namespace
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "server", "namespace": NS},
            "spec": {
                "selector": {"app": "server"},
                "ports": [{"name": "http", "port": 80, "targetPort": PORT}],
            },
        },
        POLICY,
        *_operand_objects(),
    ]


# --- the operator's own policies, on pods labelled as its operands --------------------------

ROCKET = "rocket"  # the RocketCluster's namespace
SYSTEM = "rocketcluster-system"  # the operator's
CLUSTER_PORTS = (CLIENT_PORT, ADMIN_PORT, HA_PORT, CONTROLLER_PORT)


def _rocket_cluster() -> RocketCluster:
    data = load_manifest(REPO / "examples" / "cluster.yaml").model_dump(mode="json", by_alias=True)
    data["metadata"]["namespace"] = ROCKET
    return RocketCluster.model_validate(data)


def _operand_objects() -> list[dict[str, Any]]:
    """Pods with the labels of prod's brokers (two of group 0, one of group 1), a
    controller, the console and the chart's operator, each serving the cluster's
    ports, and the NetworkPolicies the operator renders for prod."""
    cluster = _rocket_cluster()
    group0, group1 = group_names(cluster)[:2]

    def broker(group: str) -> dict[str, str]:
        return labels(cluster, kube_names.COMPONENT_BROKER, **{kube_names.LABEL_GROUP: group})

    operator = {**OPERATOR_POD_LABELS, "app.kubernetes.io/instance": "rc"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ROCKET}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}},
        probe_pod("b0", "", ROCKET, broker(group0), CLUSTER_PORTS),
        probe_pod("b0-slave", "", ROCKET, broker(group0), CLUSTER_PORTS),
        probe_pod("b1", "", ROCKET, broker(group1), CLUSTER_PORTS),
        probe_pod(
            "ctl", "", ROCKET, labels(cluster, kube_names.COMPONENT_CONTROLLER), CLUSTER_PORTS
        ),
        probe_pod("console", "", ROCKET, labels(cluster, "console")),
        probe_pod("operator", "", SYSTEM, operator),
        *(o for o in render_cluster(cluster) if o["kind"] == "NetworkPolicy"),
    ]


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory, binaries: Binaries) -> Iterator[KubeHarness]:
    with KubeHarness(
        tmp_path_factory.mktemp("netpol"), probe_period_cap=1.0, network_policies="enforce"
    ) as harness:
        harness.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in _objects()))
        yield harness


def _state(kube: KubeHarness) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((kube.dir / "realiser.json").read_text())
    return data


def _until(
    kube: KubeHarness, src: str, host: str, port: int, result: str, namespace: str = NS
) -> dict[str, Any]:
    """Probe until the answer is ``result`` (policies are level-triggered)."""

    def seen() -> dict[str, Any] | None:
        answer = probe(kube, src, host, port, namespace)
        return answer if answer["result"] == result else None

    return kube.wait_for(seen, WAIT_S, f"{namespace}/{src} -> {host}:{port} to be {result}")


def _servicepod_ip(kube: KubeHarness) -> str:
    return str((kube.get("services", NS, "server") or {})["spec"]["clusterIP"])


def test_the_realiser_says_it_enforces(kube: KubeHarness) -> None:
    assert _state(kube)["networkPolicies"] == "enforced", _state(kube)


def test_the_admitted_pod_connects_and_is_seen_at_its_own_address(kube: KubeHarness) -> None:
    server, friend = pod_ip(kube, "server"), pod_ip(kube, "friend")
    answer = _until(kube, "friend", server, PORT, "ok")
    assert answer["body"] == friend  # SNAT: the connection left from the pod's address


def test_another_pod_gets_a_reset(kube: KubeHarness) -> None:
    server = pod_ip(kube, "server")
    _until(kube, "stranger", server, PORT, "refused")
    # the same label in another namespace is not the policy's podSelector
    assert probe(kube, "faraway", server, PORT, OTHER)["result"] == "refused"
    # the stranger itself is not isolated: the server may reach it
    assert probe(kube, "server", pod_ip(kube, "stranger"), PORT)["body"] == server


def test_the_node_is_let_through(kube: KubeHarness) -> None:
    server = pod_ip(kube, "server")
    _until(kube, "stranger", server, PORT, "refused")
    with httpx.Client(trust_env=False, timeout=10.0) as client:
        assert client.get(f"http://{server}:{PORT}/").status_code == 200


def test_a_cluster_ip_service_keeps_the_clients_address(kube: KubeHarness) -> None:
    friend, server = pod_ip(kube, "friend"), pod_ip(kube, "server")
    _until(kube, "stranger", server, PORT, "refused")
    service = _servicepod_ip(kube)
    answer = _until(kube, "friend", service, 80, "ok")
    assert answer["body"] == friend
    # through the proxy the stranger is judged as itself: upstream refuses, the proxy
    # closes its side without an answer
    assert probe(kube, "stranger", service, 80)["result"] == "closed"


# (source namespace, source pod, destination pod in ROCKET, port): what the rendered
# policies allow — every path the cluster uses (render/network.py says who calls whom)
LEGITIMATE = [
    (NS, "stranger", "b0", CLIENT_PORT),  # clients: every namespace (clientNamespaces unset)
    (OTHER, "faraway", "b0", CLIENT_PORT),
    (ROCKET, "b0", "b1", CLIENT_PORT),  # forwarding to a master, cross-group receives
    (ROCKET, "b0-slave", "b0", HA_PORT),  # replication inside the group
    (ROCKET, "ctl", "b0", HA_PORT),  # a switchover's PrepareHandover
    (ROCKET, "b0", "ctl", CONTROLLER_PORT),  # registration, heartbeats, catalogue
    (ROCKET, "console", "b0", ADMIN_PORT),
    (ROCKET, "console", "ctl", ADMIN_PORT),
    (SYSTEM, "operator", "b0", ADMIN_PORT),
    (SYSTEM, "operator", "ctl", ADMIN_PORT),
]
REFUSED = [
    (NS, "stranger", "b0", ADMIN_PORT),
    (NS, "stranger", "b0", HA_PORT),
    (NS, "stranger", "ctl", CONTROLLER_PORT),
    (NS, "stranger", "ctl", ADMIN_PORT),
    (ROCKET, "b1", "b0", HA_PORT),  # another group's broker
    (ROCKET, "b0", "ctl", ADMIN_PORT),  # brokers are no admin peers
    (ROCKET, "console", "ctl", CONTROLLER_PORT),
    (SYSTEM, "operator", "b0", HA_PORT),
]


def test_the_operators_policies_refuse_strangers_and_keep_every_legitimate_path(
    kube: KubeHarness,
) -> None:
    b0 = pod_ip(kube, "b0", ROCKET)
    _until(kube, "stranger", b0, ADMIN_PORT, "refused")  # the policies are in place
    wrong = []
    for ns, src, dst, port in LEGITIMATE:
        answer = probe(kube, src, pod_ip(kube, dst, ROCKET), port, ns)
        if answer != {"result": "ok", "body": pod_ip(kube, src, ns)}:
            wrong.append((f"{ns}/{src} -> {dst}:{port}", answer))
    for ns, src, dst, port in REFUSED:
        answer = probe(kube, src, pod_ip(kube, dst, ROCKET), port, ns)
        if answer != {"result": "refused"}:
            wrong.append((f"{ns}/{src} -> {dst}:{port}", answer))
    assert not wrong


def test_refusals_are_counted_perprobe_pod(kube: KubeHarness) -> None:
    server = pod_ip(kube, "server")
    _until(kube, "stranger", server, PORT, "refused")
    refused = kube.network_policy_refusals()
    # every isolated pod has its counter; the server's counts the stranger's attempts
    assert set(refused) == {
        f"{NS}/server",
        *(f"{ROCKET}/{p}" for p in ("b0", "b0-slave", "b1", "ctl")),
    }
    assert refused[f"{NS}/server"] >= 1


def test_a_removed_policy_opens_the_pod_again(kube: KubeHarness) -> None:
    server, stranger = pod_ip(kube, "server"), pod_ip(kube, "stranger")
    _until(kube, "stranger", server, PORT, "refused")
    kube.delete("networkpolicies", NS, "server")
    assert _until(kube, "stranger", server, PORT, "ok")["body"] == stranger
    kube.create(POLICY)
    _until(kube, "stranger", server, PORT, "refused")


def test_stop_leaves_no_chain_and_no_cgroup(kube: KubeHarness) -> None:
    fw = _firewall(kube)
    assert fw.parent.is_dir() and any(fw.parent.iterdir())
    assert fw.filter_chain in _iptables_save()
    kube.stop()
    saved = _iptables_save()
    tag = firewall.block_tag(fw.block)
    assert tag not in saved, [line for line in saved.splitlines() if tag in line]
    assert not fw.parent.exists()
    # what the policies refused, reported at stop
    refused = json.loads((kube.dir / REFUSALS_FILE).read_text())
    assert refused[f"{NS}/server"] >= 1 and f"{ROCKET}/b0" in refused


# --- helpers ------------------------------------------------------------------------------


def _firewall(kube: KubeHarness) -> firewall.Firewall:
    """The realiser's firewall as seen from outside: its block's chains and cgroups."""
    block = ipaddress.ip_network(_state(kube)["podNetwork"])
    assert isinstance(block, ipaddress.IPv4Network)
    return firewall.Firewall(block, network.POD_NETWORK, network.SERVICE_NETWORK)


def _iptables_save() -> str:
    return subprocess.run(
        ["iptables-save"], capture_output=True, text=True, check=True, timeout=30
    ).stdout


# --- the firewall on its own: a block of our own, no realiser ----------------------------------


@pytest.fixture
def own_block() -> Iterator[ipaddress.IPv4Network]:
    block, fd = network.reserve_block(network.POD_NETWORK)
    try:
        yield block
    finally:
        os.close(fd)


def _lines(tag: str) -> list[str]:
    return [line for line in _iptables_save().splitlines() if tag in line]


def test_a_start_sweeps_what_a_killed_holder_left_and_except_chains_come_and_go(
    own_block: ipaddress.IPv4Network,
) -> None:
    tag = firewall.block_tag(own_block)
    server, friend = str(own_block.network_address + 2), str(own_block.network_address + 1)
    pods = [
        {
            "metadata": {"namespace": NS, "name": "s", "labels": {"app": "s"}},
            "status": {"podIP": server},
        },
        {
            "metadata": {"namespace": NS, "name": "f", "labels": {"app": "f"}},
            "status": {"podIP": friend},
        },
    ]
    blocked: dict[str, Any] = {
        "metadata": {"namespace": NS, "name": "p"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "s"}},
            "ingress": [
                {"from": [{"ipBlock": {"cidr": str(own_block), "except": [f"{friend}/32"]}}]}
            ],
        },
    }
    first = firewall.Firewall(own_block, network.POD_NETWORK, network.SERVICE_NETWORK)
    try:
        first.start()
        first.cgroup("uid-f", friend)
        rules = netpol.ruleset([blocked], pods, [])
        assert first.apply(rules, {"uid-f": friend})
        assert not first.apply(rules, {"uid-f": friend})  # same text: not written again
        assert any(f"RCNPE-{tag}-0" in line for line in _lines(tag))
        # the except chain goes with the ipBlock
        plain = {**blocked, "spec": {**blocked["spec"], "ingress": [{}]}}
        assert first.apply(netpol.ruleset([plain], pods, []), {"uid-f": friend})
        assert not any("RCNPE-" in line for line in _lines(tag))
        # a new holder of the block (the first one killed): everything is swept first
        second = firewall.Firewall(own_block, network.POD_NETWORK, network.SERVICE_NETWORK)
        second.start()
        assert first.parent.exists() and not (first.parent / "uid-f").exists()
        jumps = [line for line in _lines(tag) if line.startswith(("-A INPUT", "-A POSTROUTING"))]
        assert len(jumps) == 3, jumps  # INPUT once, POSTROUTING for pods and services
        assert not any("--to-source" in line for line in _lines(tag))
        second.stop()
    finally:
        first.sweep()
    assert _lines(tag) == []
    assert not first.parent.exists()

"""Which pods a Service lists, serves and sends traffic to, as Kubernetes' endpoints
controller, kube-proxy and CoreDNS decide it. Pure: the realiser writes the Endpoints
objects, runs the proxies and the DNS map from these answers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rocketcluster.e2e.kube import labels
from rocketcluster.e2e.kube.templates import (
    is_finished,
    is_ready,
    is_terminating,
    owner_reference,
)

PodIp = Callable[[str, str], str]  # (namespace, pod name) -> address


def selects(service: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    selector = (service.get("spec") or {}).get("selector")
    if not selector:
        return False
    same_ns = service["metadata"].get("namespace") == pod["metadata"].get("namespace")
    return same_ns and labels.matches(
        labels.from_match_labels(selector), pod["metadata"].get("labels")
    )


def listed(service: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether the pod appears in the Service's Endpoints at all (ready or not), as
    the endpoints controller decides: it has an address, has not finished, and is
    not terminating — unless the Service publishes not-ready addresses."""
    if is_finished(pod) or not (pod.get("status") or {}).get("podIP"):
        return False
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    return publish or not is_terminating(pod)


def serves(service: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether the Service sends traffic (and DNS answers) to the pod: a listed pod
    that is Ready and not terminating — or any listed pod when the Service publishes
    not-ready addresses (what Raft peers and replicas need), terminating included,
    as kube-proxy and CoreDNS treat such a Service's endpoints as ready."""
    if not listed(service, pod):
        return False
    if (service.get("spec") or {}).get("publishNotReadyAddresses"):
        return True
    return is_ready(pod) and not is_terminating(pod)


def target_port(pod: Mapping[str, Any], target: Any) -> int | None:
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


def proxy_targets(
    service: Mapping[str, Any],
    port: Mapping[str, Any],
    pods: list[dict[str, Any]],
    pod_ip: PodIp,
) -> list[tuple[str, int]]:
    """Where a ClusterIP Service's ``port`` sends a new connection: (address, port) of
    every pod it serves."""
    out = []
    for pod in pods:
        if selects(service, pod) and serves(service, pod):
            target = target_port(pod, port.get("targetPort", port.get("port")))
            if target is not None:
                meta = pod["metadata"]
                out.append((pod_ip(meta["namespace"], meta["name"]), target))
    return out


def proxied_ports(
    services: Iterable[Mapping[str, Any]],
) -> Iterator[tuple[str, str, str, Mapping[str, Any]]]:
    """(namespace, name, ClusterIP, port) of every TCP port kube-proxy forwards: the
    ports of ClusterIP Services with a selector (one without has no pods to pick)."""
    for svc in services:
        spec, meta = svc.get("spec") or {}, svc["metadata"]
        ip = spec.get("clusterIP")
        if not ip or ip == "None" or not spec.get("selector"):
            continue
        for port in spec.get("ports") or []:
            if port.get("protocol", "TCP") == "TCP":
                yield meta["namespace"], meta["name"], ip, port


def endpoints_object(service: Mapping[str, Any], subsets: list[dict[str, Any]]) -> dict[str, Any]:
    """A new Endpoints object of a Service, as the endpoints controller makes it: the
    Service's name and labels, owned by it (so it goes with it)."""
    meta = service["metadata"]
    return {
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels") or {}),
            "ownerReferences": [owner_reference(service, controller=False)],
        },
        "subsets": subsets,
    }


def subsets(
    service: Mapping[str, Any], pods: list[dict[str, Any]], pod_ip: PodIp, node: str
) -> list[dict[str, Any]]:
    """The Service's Endpoints subsets: served pods as addresses, listed but not
    served ones as notReadyAddresses, ports resolved against a selected pod."""
    spec, ns = service.get("spec") or {}, service["metadata"]["namespace"]
    ready: list[dict[str, Any]] = []
    not_ready: list[dict[str, Any]] = []
    for pod in pods:
        if not selects(service, pod) or not listed(service, pod):
            continue
        address: dict[str, Any] = {
            "ip": pod_ip(ns, pod["metadata"]["name"]),
            "nodeName": (pod.get("spec") or {}).get("nodeName") or node,
            "targetRef": {
                "kind": "Pod",
                "namespace": ns,
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
            },
        }
        if (pod.get("spec") or {}).get("hostname"):
            address["hostname"] = pod["spec"]["hostname"]
        (ready if serves(service, pod) else not_ready).append(address)
    sample = next(iter(p for p in pods if selects(service, p)), None)
    ports = []
    for port in spec.get("ports") or []:
        target = target_port(sample, port.get("targetPort")) if sample else None
        entry = {"port": target or port.get("port"), "protocol": port.get("protocol", "TCP")}
        if port.get("name"):
            entry["name"] = port["name"]
        ports.append(entry)
    subset: dict[str, Any] = {"ports": ports}
    if ready:
        subset["addresses"] = ready
    if not_ready:
        subset["notReadyAddresses"] = not_ready
    return [subset] if ready or not_ready else []

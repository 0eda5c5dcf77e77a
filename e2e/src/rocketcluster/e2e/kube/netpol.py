"""NetworkPolicy semantics, as pure data: from the policies, pods and namespaces of the
cluster, which pods are isolated for ingress and which (source, destination, port)
connections are allowed to them (:class:`Ruleset`). :mod:`firewall` turns it into
iptables rules; this module decides nothing about the host.

What Kubernetes specifies (networking.k8s.io/v1), and this follows:

- a pod is isolated for ingress once a policy of its namespace selects it
  (``spec.podSelector``; ``{}`` selects every pod) and has ``Ingress`` in its
  ``policyTypes`` (absent: ``Ingress``, plus ``Egress`` when ``egress`` is given);
  an isolated pod accepts only what some policy selecting it allows — policies add up;
- an ``ingress`` rule allows its ``from`` peers (absent or empty: every source) on its
  ``ports`` (absent or empty: every port); an empty ``ingress`` list allows nothing;
- a peer is ``podSelector`` (pods of the policy's namespace), ``namespaceSelector``
  (every pod of the selected namespaces), both (those pods of those namespaces), or
  ``ipBlock`` (``cidr`` minus ``except``);
- a port is a number or a container port's name (resolved per destination pod, so a
  pod without that name is not reached by it), optionally up to ``endPort``;
- a namespace always carries ``kubernetes.io/metadata.name: <name>``.

Not enforced (reported in :attr:`Ruleset.ignored`): egress rules and protocols other
than TCP. A pod always reaches itself, and traffic from the node is never judged here
(the firewall lets it through, as Kubernetes network plugins do).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NAME_LABEL = "kubernetes.io/metadata.name"
ANY = "0.0.0.0/0"
ALL_PORTS = (1, 65535)


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector against labels; ``{}`` matches everything, None
    nothing (callers say what an absent selector means)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], list(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


@dataclass(frozen=True, order=True)
class Allow:
    """TCP from ``src`` (a CIDR; :data:`ANY` for every source) minus ``excepts`` to
    ``dst`` (a pod address) on ports ``port``..``end_port``."""

    src: str
    dst: str
    port: int
    end_port: int
    excepts: tuple[str, ...] = ()

    def matches(self, src_ip: str, dst_ip: str, port: int) -> bool:
        if dst_ip != self.dst or not self.port <= port <= self.end_port:
            return False
        addr = ipaddress.ip_address(src_ip)
        if addr not in ipaddress.ip_network(self.src, strict=False):
            return False
        return not any(addr in ipaddress.ip_network(e, strict=False) for e in self.excepts)


@dataclass(frozen=True)
class Ruleset:
    isolated: frozenset[str] = frozenset()  # pod addresses isolated for ingress
    allowed: frozenset[Allow] = frozenset()
    # where each isolated address belongs (for reports): "namespace/pod"
    names: Mapping[str, str] = field(default_factory=dict, compare=False)
    ignored: tuple[str, ...] = field(default=(), compare=False)

    def allows(self, src_ip: str, dst_ip: str, port: int) -> bool:
        """Whether a TCP connection from a pod at ``src_ip`` to ``dst_ip:port`` is let
        through."""
        if dst_ip not in self.isolated or src_ip == dst_ip:
            return True
        return any(a.matches(src_ip, dst_ip, port) for a in self.allowed)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _ip(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed") or (pod.get("spec") or {}).get("hostNetwork"):
        return None
    ip = status.get("podIP")
    return str(ip) if ip else None


def namespace_labels(
    namespaces: Iterable[Mapping[str, Any]], names: Iterable[str]
) -> dict[str, dict[str, str]]:
    """Each namespace's labels, with the name label the API server always sets (also
    for a namespace a pod names that has no object)."""
    out: dict[str, dict[str, str]] = {n: {NAME_LABEL: n} for n in names}
    for ns in namespaces:
        name = _meta(ns).get("name", "")
        out[name] = {**(_meta(ns).get("labels") or {}), NAME_LABEL: name}
    return out


def _policy_types(spec: Mapping[str, Any]) -> list[str]:
    types = spec.get("policyTypes")
    if types:
        return list(types)
    return ["Ingress", *(["Egress"] if "egress" in spec else [])]


def _named_ports(pod: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") and port.get("protocol", "TCP") == "TCP":
                out[port["name"]] = int(port["containerPort"])
    return out


def _port_ranges(
    ports: list[Mapping[str, Any]] | None, pod: Mapping[str, Any], ignored: list[str], where: str
) -> list[tuple[int, int]]:
    if not ports:
        return [ALL_PORTS]
    out = []
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            ignored.append(f"{where}: protocol {entry.get('protocol')} is not enforced")
            continue
        port = entry.get("port")
        if port is None:
            out.append(ALL_PORTS)
        elif isinstance(port, str) and not port.isdigit():
            number = _named_ports(pod).get(port)
            if number is not None:
                out.append((number, number))
        else:
            first = int(port)
            out.append((first, int(entry.get("endPort") or first)))
    return out


def ruleset(
    policies: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    namespaces: Iterable[Mapping[str, Any]],
) -> Ruleset:
    pods = [p for p in pods if _ip(p)]
    ns_of = {id(p): _meta(p).get("namespace", "") for p in pods}
    ns_labels = namespace_labels(namespaces, set(ns_of.values()))
    isolated: set[str] = set()
    allowed: set[Allow] = set()
    names: dict[str, str] = {}
    ignored: list[str] = []
    for policy in policies:
        meta, spec = _meta(policy), policy.get("spec") or {}
        ns = meta.get("namespace", "")
        where = f"NetworkPolicy {ns}/{meta.get('name', '')}"
        types = _policy_types(spec)
        if "Egress" in types:
            ignored.append(f"{where}: egress is not enforced")
        if "Ingress" not in types:
            continue
        targets = [
            p
            for p in pods
            if ns_of[id(p)] == ns
            and selects(spec.get("podSelector") or {}, _meta(p).get("labels") or {})
        ]
        for target in targets:
            dst = str(_ip(target))
            isolated.add(dst)
            names[dst] = f"{ns}/{_meta(target).get('name', '')}"
            for rule in spec.get("ingress") or []:
                ranges = _port_ranges(rule.get("ports"), target, ignored, where)
                for src, excepts in _sources(rule.get("from"), ns, pods, ns_of, ns_labels):
                    for first, last in ranges:
                        allowed.add(Allow(src, dst, first, last, excepts))
    return Ruleset(frozenset(isolated), frozenset(allowed), names, tuple(dict.fromkeys(ignored)))


def _sources(
    peers: list[Mapping[str, Any]] | None,
    ns: str,
    pods: list[Mapping[str, Any]],
    ns_of: Mapping[int, str],
    ns_labels: Mapping[str, Mapping[str, str]],
) -> list[tuple[str, tuple[str, ...]]]:
    """(source CIDR, excepted CIDRs) of one rule's ``from``."""
    if not peers:
        return [(ANY, ())]
    out: list[tuple[str, tuple[str, ...]]] = []
    for peer in peers:
        block = peer.get("ipBlock")
        if block is not None:
            out.append(
                (
                    str(ipaddress.ip_network(block["cidr"], strict=False)),
                    tuple(
                        str(ipaddress.ip_network(e, strict=False))
                        for e in block.get("except") or []
                    ),
                )
            )
            continue
        pod_sel, ns_sel = peer.get("podSelector"), peer.get("namespaceSelector")
        for pod in pods:
            pod_ns = ns_of[id(pod)]
            if ns_sel is None:
                if pod_ns != ns:
                    continue
            elif not selects(ns_sel, ns_labels.get(pod_ns, {NAME_LABEL: pod_ns})):
                continue
            if pod_sel is not None and not selects(pod_sel, _meta(pod).get("labels") or {}):
                continue
            out.append((f"{_ip(pod)}/32", ()))
    return out

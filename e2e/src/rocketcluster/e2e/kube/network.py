"""The cluster network without network namespaces: addresses on the loopback range
and the DNS names a pod may use, as pure data.

Every pod gets its own address from :data:`POD_NETWORK` and every ClusterIP
Service one from :data:`SERVICE_NETWORK` — all of 127.0.0.0/8 reaches this host
on Linux, so a process can bind "its" address and peers can reach it. Addresses
are keyed by name and kept for the life of the allocator: a StatefulSet pod that
is recreated gets its old address back (its peers' configuration stays right), and
no two live objects share one.

The host is shared (several test sessions may each run an emulator and a
realiser), so each allocator draws from a block of the network that its process
holds alone: :func:`reserve_block` takes one under an ``flock``, which the kernel
releases when the process ends, however it ends.

The DNS side is :func:`dns_names` (what ``hosts.json`` lists) and
:func:`resolver` (what substitution asks, which also answers for pods that do not
exist yet, so a pod's configuration may name its peers before they start).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import random
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rocketcluster.api.kube import CLUSTER_DOMAIN, service_host

POD_NETWORK = ipaddress.IPv4Network("127.10.0.0/16")
SERVICE_NETWORK = ipaddress.IPv4Network("127.20.0.0/16")
BLOCK_PREFIX = 20  # 16 blocks of ~4000 addresses in each network
LOCK_DIR = Path(tempfile.gettempdir()) / "rocketcluster-kube-networks"


class AddressesExhausted(RuntimeError):
    """The network has no free address left for a new name."""


class IpAllocator:
    """Stable addresses by key (``ns/name``) from one network."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self.network = network
        self._by_key: dict[str, str] = {}
        self._taken: set[str] = set()
        self._next = int(network.network_address) + 1

    def allocate(self, key: str) -> str:
        if key in self._by_key:
            return self._by_key[key]
        last = int(self.network.broadcast_address)
        start = self._next
        while True:
            candidate = ipaddress.IPv4Address(self._next)
            self._next = (
                self._next + 1 if self._next < last - 1 else (int(self.network.network_address) + 1)
            )
            octet = int(candidate) & 0xFF
            if str(candidate) not in self._taken and octet not in (0, 255):
                break
            if self._next == start:
                raise AddressesExhausted(f"no free address in {self.network} for {key}")
        self._by_key[key] = str(candidate)
        self._taken.add(str(candidate))
        return str(candidate)

    def get(self, key: str) -> str | None:
        return self._by_key.get(key)

    def release(self, key: str) -> None:
        ip = self._by_key.pop(key, None)
        if ip is not None:
            self._taken.discard(ip)


def reserve_block(
    parent: ipaddress.IPv4Network,
    *,
    prefix: int = BLOCK_PREFIX,
    lock_dir: Path = LOCK_DIR,
    rng: random.Random | None = None,
) -> tuple[ipaddress.IPv4Network, int]:
    """A block of ``parent`` that no other process on this host holds, and the
    file descriptor whose lock holds it (close it, or exit, to let it go)."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        lock_dir.chmod(0o1777)  # shared by every user's sessions
    blocks = list(parent.subnets(new_prefix=prefix))
    (rng or random.Random()).shuffle(blocks)
    for block in blocks:
        path = lock_dir / f"{block.network_address}_{block.prefixlen}.lock"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return block, fd
    raise AddressesExhausted(f"every /{prefix} block of {parent} is taken on this host")


def service_names(name: str, namespace: str) -> list[str]:
    """The two spellings a name under a namespace's ``svc`` domain resolves by."""
    return [service_host(name, namespace), f"{name}.{namespace}.svc"]


def is_headless(service: Mapping[str, Any]) -> bool:
    return (service.get("spec") or {}).get("clusterIP") == "None"


def dns_names(
    services: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    statefulsets: Iterable[Mapping[str, Any]],
    pod_ip: Callable[[str, str], str],
    serves: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
    selects: Callable[[Mapping[str, Any], Mapping[str, Any]], bool],
) -> dict[str, str]:
    """Every DNS name a pod could use → its address.

    - ``<svc>.<ns>.svc[.cluster.local]`` → the ClusterIP, or for a headless Service the
      address of its first pod the Service serves (Ready, or any live pod with
      ``publishNotReadyAddresses``; a real resolver returns them all);
    - ``<host>.<subdomain>.<ns>.svc[.cluster.local]`` for pods whose hostname and
      subdomain are set, and for every ordinal a StatefulSet will have (before the pod
      exists, so peers can be configured in advance)."""
    pods = list(pods)
    out: dict[str, str] = {}
    for svc in services:
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        ip = spec.get("clusterIP")
        if is_headless(svc):
            chosen = sorted(
                (
                    p
                    for p in pods
                    if p["metadata"].get("namespace") == ns and selects(svc, p) and serves(svc, p)
                ),
                key=lambda p: p["metadata"]["name"],
            )
            ip = pod_ip(ns, chosen[0]["metadata"]["name"]) if chosen else None
        if ip and ip != "None":
            for dns in service_names(name, ns):
                out[dns] = ip
    for sts in statefulsets:
        meta, spec = sts.get("metadata") or {}, sts.get("spec") or {}
        ns, sub = meta.get("namespace", ""), spec.get("serviceName")
        if not sub:
            continue
        start = int((spec.get("ordinals") or {}).get("start", 0))
        for ordinal in range(start, start + int(spec.get("replicas", 1))):
            pod_name = f"{meta['name']}-{ordinal}"
            for dns in service_names(f"{pod_name}.{sub}", ns):
                out[dns] = pod_ip(ns, pod_name)
    for pod in pods:
        pod_meta, pod_spec = pod.get("metadata") or {}, pod.get("spec") or {}
        host, domain = pod_spec.get("hostname"), pod_spec.get("subdomain")
        if host and domain:
            pod_ns = pod_meta.get("namespace", "")
            for dns in service_names(f"{host}.{domain}", pod_ns):
                out[dns] = pod_ip(pod_ns, pod_meta["name"])
    return out


_POD_DNS = re.compile(
    r"^(?P<host>[a-z0-9-]+)\.(?P<sub>[a-z0-9-]+)\.(?P<ns>[a-z0-9-]+)\.svc"
    + rf"(\.{re.escape(CLUSTER_DOMAIN)})?\.?$"
)


def resolver(
    names: Mapping[str, str],
    cluster_ip_services: Callable[[str, str], bool],
    pod_ip: Callable[[str, str], str],
) -> Callable[[str], str | None]:
    """Look ``name`` up in ``names``; failing that, a pod-style name
    (``<host>.<sub>.<ns>.svc…``) whose ``<sub>`` is not a ClusterIP Service is taken to
    name the pod ``<host>`` (as StatefulSet pods are named), whose address is fixed now."""

    def resolve(name: str) -> str | None:
        name = name.rstrip(".")
        if name in names:
            return names[name]
        m = _POD_DNS.match(name)
        if m and not cluster_ip_services(m["ns"], m["sub"]):
            return pod_ip(m["ns"], m["host"])
        return None

    return resolve

"""The realiser's cluster network and node, in process: DNS names and addresses
(:mod:`network`), which Services list and send to which pods, address blocks shared
by several realisers on one host, probes against real sockets, kube-proxy, and the
volume provisioner — no child process is started."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rocketcluster.e2e.kube import network
from rocketcluster.e2e.kube.cache import Cache
from rocketcluster.e2e.kube.endpoints import listed, selects, serves
from rocketcluster.e2e.kube.kubelet import PodWorker
from rocketcluster.e2e.kube.network import IpAllocator
from rocketcluster.e2e.kube.patches import merge_patch
from rocketcluster.e2e.kube.probes import probe_once
from rocketcluster.e2e.kube.proxy import ServiceProxies
from rocketcluster.e2e.kube.realiser import Realiser
from rocketcluster.e2e.kube.resources import ResourceType
from rocketcluster.e2e.kube.volumes import claim_dir

# --- network ------------------------------------------------------------------------------


def _pod(
    name: str,
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    ip: str | None = "set",
    phase_: str = "Running",
    terminating: bool = False,
    subdomain: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels or {"app": "web"}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {
        "phase": phase_,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
    spec: dict[str, Any] = {}
    if subdomain:
        spec = {"hostname": name, "subdomain": subdomain}
    return {"metadata": meta, "spec": spec, "status": status}


def _service(name: str, cluster_ip: str = "None", publish: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"clusterIP": cluster_ip, "selector": {"app": "web"}}
    if publish:
        spec["publishNotReadyAddresses"] = True
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def test_which_pods_a_service_lists_and_sends_to() -> None:
    plain, publish = _service("s"), _service("p", publish=True)
    cases = {
        "ready": (_pod("a"), (True, True), (True, True)),
        "not ready": (_pod("a", ready=False), (True, False), (True, True)),
        "terminating": (_pod("a", terminating=True), (False, False), (True, True)),
        "no address yet": (_pod("a", ip=None), (False, False), (False, False)),
        "failed": (_pod("a", phase_="Failed"), (False, False), (False, False)),
        "succeeded": (_pod("a", phase_="Succeeded"), (False, False), (False, False)),
    }
    for case, (pod, on_plain, on_publish) in cases.items():
        assert (listed(plain, pod), serves(plain, pod)) == on_plain, case
        assert (listed(publish, pod), serves(publish, pod)) == on_publish, case
    assert selects(plain, _pod("a"))
    assert not selects(plain, _pod("a", labels={"app": "other"}))
    assert not selects({**plain, "spec": {"clusterIP": "None"}}, _pod("a"))  # no selector


def _ip(namespace: str, name: str) -> str:
    return {"web-0": "127.10.0.1", "web-1": "127.10.0.2", "web-2": "127.10.0.3"}[name]


def test_dns_names_of_services_and_statefulset_pods() -> None:
    sts = {
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"serviceName": "web", "replicas": 3},
    }
    pods = [_pod("web-0", ready=False, subdomain="web"), _pod("web-1", subdomain="web")]
    services = [
        _service("web"),
        _service("peers", publish=True),
        _service("lb", cluster_ip="127.20.0.9"),
    ]
    names = network.dns_names(services, pods, [sts], _ip, serves=serves, selects=selects)
    # a headless Service answers with a pod it serves: web-0 is not Ready
    assert names["web.ns.svc.cluster.local"] == names["web.ns.svc"] == "127.10.0.2"
    # ... unless it publishes not-ready addresses
    assert names["peers.ns.svc"] == "127.10.0.1"
    assert names["lb.ns.svc.cluster.local"] == "127.20.0.9"
    # every ordinal the StatefulSet will have, before its pod exists
    for i in range(3):
        assert names[f"web-{i}.web.ns.svc.cluster.local"] == f"127.10.0.{i + 1}"
    # a headless Service with nothing to serve has no name
    lonely = network.dns_names(
        [_service("web")], [_pod("web-0", ready=False)], [], _ip, serves=serves, selects=selects
    )
    assert "web.ns.svc" not in lonely


def test_the_resolver_answers_for_statefulset_pods_that_do_not_exist_yet() -> None:
    allocator = IpAllocator(network.POD_NETWORK)

    def pod_ip(namespace: str, name: str) -> str:
        return allocator.allocate(f"{namespace}/{name}")

    resolve = network.resolver({"lb.ns.svc": "127.20.0.9"}, lambda ns, name: name == "lb", pod_ip)
    assert resolve("lb.ns.svc") == "127.20.0.9"
    future = resolve("web-7.web.ns.svc.cluster.local.")
    assert future is not None and future == pod_ip("ns", "web-7")  # the pod will get it
    assert resolve("web-7.lb.ns.svc") is None  # lb is a ClusterIP Service, not a subdomain
    assert resolve("nothing.ns.svc") is None
    assert resolve("example.com") is None


def test_ip_allocator_is_stable_unique_and_skips_network_and_broadcast_octets() -> None:
    allocator = IpAllocator(network.POD_NETWORK)
    first = allocator.allocate("ns/web-0")
    assert allocator.allocate("ns/web-0") == first == "127.10.0.1"
    many = [allocator.allocate(f"ns/p{i}") for i in range(600)]
    assert len(set(many)) == 600 and first not in many
    assert all(ip.split(".")[-1] not in ("0", "255") for ip in many)
    assert allocator.get("ns/p0") == many[0] and allocator.get("ns/none") is None
    allocator.release("ns/p0")
    assert allocator.get("ns/p0") is None
    tiny = IpAllocator(ipaddress.IPv4Network("127.30.0.0/29"))
    addresses = {tiny.allocate(str(i)) for i in range(6)}
    assert addresses == {f"127.30.0.{i}" for i in range(1, 7)}  # not .0, not .7
    with pytest.raises(network.AddressesExhausted):
        tiny.allocate("one too many")


def test_address_blocks_are_held_by_one_process_at_a_time(tmp_path: Path) -> None:
    parent = ipaddress.IPv4Network("127.30.0.0/22")
    held = [network.reserve_block(parent, prefix=24, lock_dir=tmp_path) for _ in range(4)]
    try:
        assert sorted(str(block) for block, _ in held) == [f"127.30.{i}.0/24" for i in range(4)]
        with pytest.raises(network.AddressesExhausted):
            network.reserve_block(parent, prefix=24, lock_dir=tmp_path)
        block, fd = held.pop()
        os.close(fd)  # (or the process ends)
        again, fd = network.reserve_block(parent, prefix=24, lock_dir=tmp_path)
        held.append((again, fd))
        assert again == block
    finally:
        for _, fd in held:
            os.close(fd)


async def test_two_realisers_on_one_host_give_out_different_pod_addresses(
    tmp_path: Path,
) -> None:
    first = Realiser("http://127.0.0.1:9", tmp_path / "a")
    second = Realiser("http://127.0.0.1:9", tmp_path / "b")
    try:
        assert first.pod_network != second.pod_network
        assert first.pod_ip("ns", "web-0") != second.pod_ip("ns", "web-0")
        assert first.pod_network.subnet_of(network.POD_NETWORK)
    finally:
        await first.aclose()
        await second.aclose()


# --- probes against real sockets ---------------------------------------------------------


@pytest.fixture
async def web() -> AsyncIterator[int]:
    """A small HTTP server: /ok answers 200, anything else 500."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        ok = request.startswith(b"GET /ok ")
        writer.write(
            (b"HTTP/1.1 200 OK" if ok else b"HTTP/1.1 500 Oops")
            + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.30.250.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


async def test_probe_once_http_and_tcp(web: int) -> None:
    async with httpx.AsyncClient(trust_env=False) as http:

        async def probe(spec: dict[str, Any]) -> bool:
            return await probe_once(
                spec,
                pod_ip="127.30.250.1",
                ports={"admin": web},
                argv=None,
                env={},
                cwd=".",
                http=http,
                limit_s=2.0,
            )

        assert await probe({"httpGet": {"path": "/ok", "port": "admin"}})
        assert not await probe({"httpGet": {"path": "/bad", "port": web}})
        assert not await probe({"httpGet": {"path": "/ok", "port": "nope"}})
        assert await probe({"tcpSocket": {"port": web}})
        assert await probe({"grpc": {"port": web}})
        assert not await probe({"tcpSocket": {"port": 1}})
        assert not await probe({"exec": {"command": ["true"]}})  # no argv: nothing to run


async def test_the_realisers_probes_ignore_the_hosts_http_proxy(
    web: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    realiser = Realiser("http://127.0.0.1:9", tmp_path)
    try:
        ok = await probe_once(
            {"httpGet": {"path": "/ok", "port": web}},
            pod_ip="127.30.250.1",
            ports={},
            argv=None,
            env={},
            cwd=".",
            http=realiser.http,
            limit_s=2.0,
        )
        assert ok
    finally:
        await realiser.aclose()


# --- kube-proxy -----------------------------------------------------------------------------


async def test_the_proxy_round_robins_keeps_half_closed_connections_and_needs_endpoints() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # the whole request: the client half-closes
        port = writer.get_extra_info("sockname")[1]
        writer.write(b"%d got %d" % (port, len(data)))
        await writer.drain()
        writer.close()

    servers = [await asyncio.start_server(handle, "127.30.253.1", 0) for _ in range(2)]
    ports = [int(s.sockets[0].getsockname()[1]) for s in servers]
    endpoints: list[tuple[str, int]] = [("127.30.253.1", port) for port in ports]
    proxies = ServiceProxies()
    key = ("ns/svc", "127.30.254.1", 7000)
    await proxies.sync({key: lambda: list(endpoints)})

    async def ask() -> bytes:
        reader, writer = await asyncio.open_connection("127.30.254.1", 7000)
        writer.write(b"hello")
        writer.write_eof()
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return answer

    try:
        answers = [await ask() for _ in range(4)]
        assert sorted(answers) == sorted(b"%d got 5" % port for port in ports + ports)
        endpoints.clear()  # nothing Ready: the connection is closed at once
        with contextlib.suppress(ConnectionResetError):  # closed with the request unread
            assert await ask() == b""
        await proxies.sync({})
        with pytest.raises(OSError):
            await ask()
    finally:
        await proxies.close()
        for server in servers:
            server.close()
            await server.wait_closed()


# --- the realiser's volume provisioner ----------------------------------------------------


class FakeApi:
    """Answers the realiser's PATCHes as the API server would (a merge patch, a new
    resourceVersion), from the object in the realiser's cache."""

    def __init__(self, realiser: Realiser) -> None:
        self.realiser = realiser
        self.version = 100

    async def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        subresource: str | None = None,
        content_type: str = "",
    ) -> dict[str, Any]:
        current = self.realiser.cache.get(rt.plural, namespace or "", name)
        assert current is not None
        self.version += 1
        merged: dict[str, Any] = merge_patch(current, patch)
        merged["metadata"] = {**merged["metadata"], "resourceVersion": str(self.version)}
        return merged

    async def close(self) -> None:
        return None


def _claim(uid: str, version: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "data",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": str(version),
        },
        "spec": {"resources": {"requests": {"storage": "2Gi"}}},
        "status": {"phase": "Pending"},
    }


async def test_a_new_claim_under_a_reused_name_gets_an_empty_volume(tmp_path: Path) -> None:
    realiser = Realiser("http://127.0.0.1:9", tmp_path)
    await realiser.client.close()
    realiser.client = FakeApi(realiser)  # type: ignore[assignment]
    realiser.cache.synced.add("persistentvolumeclaims")
    try:
        realiser.cache.put("persistentvolumeclaims", _claim("uid-1", 1))
        await realiser._claims()
        bound = realiser.cache.get("persistentvolumeclaims", "ns", "data")
        assert bound is not None and bound["status"]["phase"] == "Bound"
        assert bound["status"]["capacity"] == {"storage": "2Gi"}
        assert bound["spec"]["volumeName"] == "pvc-uid-1"
        assert "kubernetes.io/pvc-protection" in bound["metadata"]["finalizers"]
        volume = claim_dir(tmp_path, "ns", "data")
        (volume / "old-state").write_text("from the first claim")
        # deleted and made again between two passes: the watch shows only the new one
        realiser.cache.put("persistentvolumeclaims", _claim("uid-2", 500))
        await realiser._claims()
        assert volume.is_dir() and list(volume.iterdir()) == []
    finally:
        await realiser.aclose()


# --- the realiser's cache, and what a change in it rewrites ------------------------------


def _named(name: str, version: int, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(version)}}


def test_the_cache_takes_newer_versions_only_and_counts_changes_per_plural() -> None:
    cache = Cache()
    for obj in (_named("b", 5), _named("a", 6), _named("c", 7, namespace="other")):
        cache.put("configmaps", obj)
    cache.put("secrets", _named("a", 8))
    assert [o["metadata"]["name"] for o in cache.list("configmaps")] == ["a", "b", "c"]
    assert [o["metadata"]["name"] for o in cache.list("configmaps", "ns")] == ["a", "b"]
    assert (cache.changes("configmaps"), cache.changes("secrets")) == (3, 1)
    cache.changed.clear()
    cache.put("configmaps", _named("a", 6))  # the watch's echo of a write already cached
    cache.put("configmaps", _named("a", 4))  # older
    assert not cache.changed.is_set() and cache.changes("configmaps") == 3
    cache.remove("configmaps", _named("a", 9))
    cache.put("configmaps", _named("a", 9))  # the deleted object itself, late
    assert cache.get("configmaps", "ns", "a") is None and cache.changes("configmaps") == 4
    cache.put("configmaps", _named("a", 10))  # made again
    assert cache.get("configmaps", "ns", "a") is not None and cache.changes("configmaps") == 5


async def test_volume_files_are_rewritten_when_what_they_are_made_of_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ConfigMap naming a Service is rewritten once the name has an address; a
    ConfigMap change and a label change (downward API) rewrite the files too; a
    pass in which none of that changed does not even compute them."""
    realiser = Realiser("http://127.0.0.1:9", tmp_path)
    items = [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
    pod: dict[str, Any] = {
        **_named("p", 1),
        "spec": {
            "containers": [{"name": "c", "command": ["true"]}],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "info", "downwardAPI": {"items": items}},
            ],
        },
    }
    pod["metadata"].update(uid="uid-files", labels={"role": "a"})
    config = {**_named("cfg", 2), "data": {"peers": "db = db.ns.svc:5432\n"}}
    db = {**_named("db", 3), "spec": {"clusterIP": "127.20.9.9", "ports": [{"port": 5432}]}}
    try:
        realiser.cache.put("pods", pod)
        realiser.cache.put("configmaps", config)
        worker = PodWorker(pod, realiser.pod_ip("ns", "p"), realiser.ctx)
        realiser.workers["uid-files"] = worker
        syncs: list[int] = []
        sync = worker._sync_volumes

        def counted() -> None:
            syncs.append(1)
            sync()

        monkeypatch.setattr(worker, "_sync_volumes", counted)
        peers, labels = (worker.dir / "volumes" / f for f in ("cfg/peers", "info/labels"))
        await realiser._kubelet()
        assert peers.read_text() == "db = db.ns.svc:5432\n"  # no such name yet
        assert labels.read_text() == 'role="a"'
        await realiser._kubelet()
        assert len(syncs) == 1

        realiser.cache.put("services", db)
        await realiser._network()
        assert peers.read_text() == "db = 127.20.9.9:5432\n"

        edited = {**_named("cfg", 4), "data": {"peers": "db = db.ns.svc:1\n"}}
        realiser.cache.put("configmaps", edited)
        realiser.cache.put("configmaps", {**edited})  # its watch echo
        await realiser._kubelet()
        assert peers.read_text() == "db = 127.20.9.9:1\n"
        done = len(syncs)
        await realiser._kubelet()
        assert len(syncs) == done

        relabelled = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "5"}}
        relabelled["metadata"]["labels"] = {"role": "b"}
        realiser.cache.put("pods", relabelled)
        await realiser._kubelet()
        assert labels.read_text() == 'role="b"'
    finally:
        await realiser.aclose()

"""TLS end to end on one local cluster (three controllers, a group of two replicas, the
group endpoint), every process with a certificate from the CA ``rocketctl local up``
makes: the official client over TLS, no plaintext on TLS ports, admin over https,
certificates reloaded without a restart, and members whose certificate comes from
another CA shut out (a replica cannot register or replicate, a controller member
cannot vote or join)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from cryptography import x509

from rocketcluster.api.client.controller import ControllerClient, ControllerUnavailable
from rocketcluster.api.client.lean import LeanClient, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.api.generated.ha_pb2_grpc import HAServiceStub
from rocketcluster.api.tls import ClientTls, TlsFiles, grpc_channel
from rocketcluster.ctl.local.runtime import LocalRuntime, admin_http
from rocketcluster.ctl.local.tls import LocalCA, certificate_serial
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, wait_for

TOPIC = "orders"
GROUP = "billing"
CLIENT_SCRIPT = Path(__file__).with_name("official_tls_client.py")


def tls_cluster() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "sec"},
            "spec": {
                "controller": {"replicas": 3},
                "brokers": {
                    "groups": 1,
                    "replicas": 2,
                    "replication": {"mode": "async"},
                },
                "topics": [{"name": TOPIC, "queues": 2}],
                "consumerGroups": [{"name": GROUP}],
                "security": {"tls": {"enabled": True}},
            },
        }
    )


@dataclass
class Secured:
    runtime: LocalRuntime
    state: dict[str, Any]

    @property
    def tls(self) -> ClientTls:
        tls = self.runtime.client_tls()
        assert tls is not None
        return tls

    @property
    def ca_file(self) -> Path:
        return Path(self.state["tls"]["caFile"])

    def proc(self, name: str) -> dict[str, Any]:
        return self.runtime.process(name)

    def config(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(Path(self.proc(name)["configPath"]).read_text())
        return data

    def get(self, name: str, path: str) -> Any:
        scheme, http = admin_http(self.state)
        with http:
            answer = http.get(f"{scheme}://{self.proc(name)['addresses']['admin']}{path}")
            answer.raise_for_status()
            return answer.json()

    def leader_view(self) -> dict[str, Any] | None:
        for member in ("sec-controller-0", "sec-controller-1", "sec-controller-2"):
            try:
                view: dict[str, Any] = self.get(member, "/v1/cluster")
            except httpx.HTTPError:
                continue
            if view["leader"] == view["self"]:
                return view
        return None

    def broker_named(self, role: str) -> tuple[str, int]:
        """(process name, broker id) of the group's broker in ``role``."""

        def find() -> tuple[str, int] | None:
            for name in ("sec-broker-0-0", "sec-broker-0-1"):
                with contextlib.suppress(httpx.HTTPError):
                    view = self.get(name, "/v1/broker")
                    if view["role"] == role:
                        return name, int(view["brokerId"])
            return None

        return wait_for(find, timeout=60, what=f"the {role}")

    def group(self) -> dict[str, Any]:
        view = wait_for(self.leader_view, timeout=60, what="a controller leader")
        name = f"sec-controller-{view['self'] - 1}"
        found: dict[str, Any] = self.get(name, "/v1/groups/sec-broker-0")
        return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    runtime = LocalRuntime(tmp_path_factory.mktemp("tls"))
    overrides = {**DISK_GUARDS_OFF, "ha": {"ackTimeoutMs": 500, "maxTimeNotCatchupMs": 1500}}
    state = runtime.up(tls_cluster(), overrides=overrides)
    try:
        secured = Secured(runtime, state)
        wait_for(lambda: len(secured.group()["syncStateSet"]) == 2, what="both replicas in sync")
        yield secured
    finally:
        runtime.down()


def rogue_files(cluster: Secured, name: str) -> TlsFiles:
    """A certificate for ``name``'s addresses from a CA nobody in the cluster trusts,
    beside the cluster's own CA bundle (so the rogue itself trusts the cluster: only
    the cluster's refusal of it is tested)."""
    rogue = LocalCA.ensure(cluster.runtime.directory / "rogue-ca", "rogue CA")
    issued = rogue.issue(name, [cluster.proc(name)["host"]], rogue.directory)
    return TlsFiles(ca_file=cluster.ca_file, cert_file=issued.cert_file, key_file=issued.key_file)


def restart_with_rogue_certificate(cluster: Secured, name: str) -> TlsFiles:
    """Stop ``name``, put a certificate from another CA in place of its own, start it."""
    cluster.runtime.kill(name)
    rogue = rogue_files(cluster, name)
    own = cluster.config(name)["tls"]
    shutil.copy(rogue.cert_file, own["certFile"])
    shutil.copy(rogue.key_file, own["keyFile"])
    cluster.runtime.restart(name, wait=False)
    return rogue


def served_serial(address: str, ca_file: Path, client: TlsFiles | None = None) -> int:
    """The serial of the certificate a new TLS connection to ``address`` is shown."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(["h2", "http/1.1"])
    if client is not None:
        context.load_cert_chain(client.cert_file, client.key_file)
    host, _, port = address.rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


# -- clients -------------------------------------------------------------------------


def test_official_client_produces_and_consumes_over_tls(cluster: Secured) -> None:
    """The unmodified official client with tls_enable=True, trusting the local CA the
    way its documentation allows (gRPC's default roots file), through the group
    endpoint (the proxy passes TLS through to the master)."""
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cluster.ca_file)}
    done = subprocess.run(
        [
            sys.executable,
            str(CLIENT_SCRIPT),
            "roundtrip",
            cluster.state["clientEndpoints"],
            TOPIC,
            GROUP,
            "20",
        ],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["sent"]) == 20
    assert set(result["received"]) == set(result["sent"])
    assert sorted(result["received"].values()) == sorted(f"tls-{i}" for i in range(20))


def test_plaintext_and_certificateless_clients_are_refused(cluster: Secured) -> None:
    master = cluster.proc(cluster.broker_named("master")[0])["addresses"]["client"]

    async def plaintext_send() -> None:
        async with LeanClient(master, timeout=5.0) as client:
            await client.send(TOPIC, [OutgoingMessage(b"plain")])

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        asyncio.run(plaintext_send())
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE

    async def with_tls() -> int:
        async with LeanClient(master, timeout=10.0, tls=cluster.tls) as client:
            entries = await client.send(TOPIC, [OutgoingMessage(b"over tls")])
        return int(entries[0].status.code)

    assert asyncio.run(with_tls()) == 20000  # the same port, with TLS: OK

    # The controller port is mutual TLS: trusting the CA is not enough.
    controllers = cluster.state["controllers"].split(";")

    async def replica_info(tls: ClientTls) -> None:
        client = ControllerClient(controllers, timeout=2.0, attempts=3, tls=tls)
        try:
            answer = await client.replica_info("sec-broker-0")
            assert answer.ok, answer
        finally:
            await client.close()

    asyncio.run(replica_info(cluster.tls))
    with pytest.raises(ControllerUnavailable):
        asyncio.run(replica_info(ClientTls(ca_file=cluster.ca_file)))


def test_admin_api_is_https_only(cluster: Secured) -> None:
    for proc in cluster.state["processes"]:
        address = proc["addresses"]["admin"]
        with httpx.Client(verify=cluster.tls.ssl_context(), timeout=5.0) as https:
            assert https.get(f"https://{address}/readyz").status_code == 200, proc["name"]
        with httpx.Client(timeout=5.0) as plain, pytest.raises(httpx.HTTPError):
            plain.get(f"http://{address}/readyz")
        # A client that does not trust the CA is refused by its own check.
        with httpx.Client(timeout=5.0) as untrusting, pytest.raises(httpx.ConnectError):
            untrusting.get(f"https://{address}/readyz")


# -- reload ----------------------------------------------------------------------------


def test_certificates_reload_without_restart(cluster: Secured) -> None:
    """A new certificate from the same CA in place of the old files (as cert-manager
    rewrites a mounted Secret): new connections to the client port, the HA port and
    the admin API present it; the process is the same one."""
    name = "sec-broker-0-1"
    proc = cluster.proc(name)
    config = cluster.config(name)
    own = TlsFiles.model_validate(config["tls"])
    ha = f"{proc['host']}:{config['haPort']}"
    ports = [proc["addresses"]["client"], proc["addresses"]["admin"], ha]
    client = cluster.tls.files
    before = certificate_serial(own.cert_file)
    assert {served_serial(a, cluster.ca_file, client) for a in ports} == {before}

    ca = LocalCA.ensure(cluster.ca_file.parent)
    hosts = [proc["host"], config["groupEndpoint"].rpartition(":")[0]]
    renewed = ca.issue(name, hosts, own.cert_file.parent)
    assert renewed.cert_file == own.cert_file
    after = certificate_serial(own.cert_file)
    assert after != before

    def renewed_everywhere() -> bool:
        return all(served_serial(a, cluster.ca_file, client) == after for a in ports)

    wait_for(renewed_everywhere, timeout=30, what="the renewed certificate on every port")
    assert cluster.proc(name)["pid"] == proc["pid"]
    assert name in {p["name"] for p in cluster.runtime.running()}
    # Still a working member: replication (mutual TLS both ways) carries on.
    assert len(cluster.group()["syncStateSet"]) == 2


# -- members with a certificate from another CA ---------------------------------------


def test_ha_port_refuses_a_certificate_from_another_ca(cluster: Secured) -> None:
    master_name, _ = cluster.broker_named("master")
    slave_name, slave_id = cluster.broker_named("slave")
    ha = f"{cluster.proc(master_name)['host']}:{cluster.config(master_name)['haPort']}"
    rogue = ClientTls(rogue_files(cluster, slave_name))

    async def replicate() -> None:
        async with grpc_channel(ha, rogue) as channel:
            handshake = hpb.SlaveMessage(
                handshake=hpb.Handshake(group="sec-broker-0", broker_id=slave_id, max_offset=0)
            )
            stub = HAServiceStub(channel)  # type: ignore[no-untyped-call]
            stream = stub.Replicate(iter([handshake]), timeout=10)
            async for _ in stream:
                pass

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        asyncio.run(replicate())
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


def test_replica_with_untrusted_certificate_cannot_join(cluster: Secured) -> None:
    """The slave comes back with a certificate from another CA: the controllers refuse
    its registration (it gives up and says why), the master's SyncStateSet shrinks to
    itself and does not grow again while messages are written."""
    master_name, master_id = cluster.broker_named("master")
    name, slave_id = cluster.broker_named("slave")
    restart_with_rogue_certificate(cluster, name)
    wait_for(
        lambda: name not in {p["name"] for p in cluster.runtime.running()},
        timeout=90,
        what="the rogue replica to give up",
    )
    log = Path(cluster.proc(name)["logPath"]).read_text()
    assert "broker failed to start: no controller leader answered" in log
    assert "check that this process's certificate comes from the cluster's CA" in log

    async def produce() -> int:
        endpoint = cluster.state["clientEndpoints"]
        async with LeanClient(endpoint, timeout=10.0, tls=cluster.tls) as client:
            entries = await client.send(TOPIC, [OutgoingMessage(b"x" * 100) for _ in range(50)])
        return sum(1 for e in entries if e.status.code == 20000)

    # Data it does not have: the master drops it from the set after maxTimeNotCatchup.
    assert asyncio.run(produce()) == 50
    wait_for(lambda: cluster.group()["syncStateSet"] == [master_id], what="the set to shrink")
    assert asyncio.run(produce()) == 50
    view = wait_for(cluster.leader_view, what="a leader")
    [replica] = [b for b in view["brokers"] if b["brokerId"] == slave_id]
    assert not replica["alive"]
    master = cluster.get(master_name, "/v1/broker")
    # What it last reported holding is behind the master's log: it never got the rest.
    assert replica["maxOffset"] < master["commitLog"]["maxOffset"]
    assert cluster.group()["syncStateSet"] == [master_id]
    status = master["replication"]
    assert status["inSync"] == [master_id], status
    assert not status["slaves"].get(str(slave_id), {}).get("connected"), status


def test_controller_member_with_untrusted_certificate_cannot_vote_or_join(
    cluster: Secured,
) -> None:
    """A follower comes back with a certificate from another CA: it never learns a
    leader, never receives the entries committed meanwhile, and its campaigns change
    nothing (same leader, same term)."""
    before = wait_for(cluster.leader_view, timeout=60, what="a leader")
    follower = next(m for m in before["members"] if m["id"] != before["leader"])
    name = f"sec-controller-{follower['id'] - 1}"
    rogue = restart_with_rogue_certificate(cluster, name)
    # Its admin API presents the rogue certificate: read it trusting the rogue CA.
    rogue_trust = ClientTls(ca_file=rogue.cert_file.parent / "ca.crt")
    address = cluster.proc(name)["addresses"]["admin"]

    def rogue_view() -> dict[str, Any] | None:
        with httpx.Client(verify=rogue_trust.ssl_context(), timeout=2.0) as http:
            try:
                view: dict[str, Any] = http.get(f"https://{address}/v1/cluster").json()
            except (httpx.HTTPError, ValueError):
                return None
        return view

    wait_for(rogue_view, timeout=60, what="the rogue member's admin API")
    scheme, http = admin_http(cluster.state)
    leader_admin = next(m["adminAddress"] for m in before["members"] if m["id"] == before["leader"])
    with http:
        put = http.put(
            f"{scheme}://{leader_admin}/v1/topics/after-rogue", json={"name": "after-rogue"}
        )
        assert put.status_code < 300, put.text
    after = wait_for(cluster.leader_view, what="a leader")

    # Its election timeout passes and it campaigns (pre-vote: nobody answers it).
    def campaigning_view() -> dict[str, Any] | None:
        view = rogue_view()
        return view if view and view["raft"]["state"] not in ("follower", "leader") else None

    campaigning = wait_for(campaigning_view, timeout=60, what="the rogue member campaigning")
    assert campaigning["raft"]["term"] <= before["raft"]["term"]
    view = rogue_view()
    assert view is not None
    assert view["leader"] is None and view["raft"]["state"] != "leader"
    assert view["raft"]["commit"] < after["raft"]["commit"]
    final = wait_for(cluster.leader_view, what="a leader")
    assert (final["leader"], final["raft"]["term"]) == (before["leader"], before["raft"]["term"])
    with httpx.Client(verify=rogue_trust.ssl_context(), timeout=2.0) as untrusted:
        assert untrusted.get(f"https://{address}/readyz").status_code == 503

"""The operator's admin calls to a cluster running TLS: https to the pod IP, the
certificate checked against ``ca.crt`` of the cluster's Secret (read through the API,
here the kmock emulator) for the name the shared certificate carries — against a real
broker serving https."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.local.tls import LocalCA
from rocketcluster.ctl.testing import DISK_GUARDS_OFF
from rocketcluster.operator.admin import AdminError, BrokerAdmin
from rocketcluster.operator.kube.client import KubeClient
from rocketcluster.operator.kube.connection import Connection
from rocketcluster.operator.render import tls
from rocketcluster.operator.trust import AdminTrust

SECRET = "sec-tls"


def _cluster(secret: str = SECRET) -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "sec", "namespace": "default"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1},
                "security": {"tls": {"enabled": True, "secretName": secret}},
            },
        }
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real broker with TLS; its certificate re-issued (picked up without a restart)
    to also name what a Kubernetes certificate would: its group's Service."""
    runtime = LocalRuntime(tmp_path_factory.mktemp("admin-tls"))
    state = runtime.up(_cluster(), overrides=DISK_GUARDS_OFF)
    try:
        [proc] = state["processes"]
        ca = LocalCA.ensure(runtime.directory / "tls")
        ca.issue(proc["name"], [proc["host"], tls.server_name(_cluster())], ca.directory / "issued")
        yield proc["host"], ca.ca_file
    finally:
        runtime.down()


@pytest.fixture
async def kube() -> AsyncIterator[KubeClient]:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        api.resources["v1/secrets"] = kmock.ResourceInfo(
            kind="Secret", verbs={"get", "create"}, namespaced=True
        )
        async with KubeClient(Connection(server=str(api.url).rstrip("/"))) as client:
            yield client


def _secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


async def test_the_operator_reaches_a_tls_broker_trusting_the_secret_ca(
    broker: tuple[str, Path], kube: KubeClient, tmp_path: Path
) -> None:
    ip, ca_file = broker
    await kube.create(_secret(SECRET, {"ca.crt": ca_file.read_bytes(), "tls.crt": b"x"}))
    async with httpx.AsyncClient() as plain:
        trust = AdminTrust(kube, plain)
        try:
            admin_http = await trust.for_cluster(_cluster())
            assert admin_http.server_name == "sec-broker-0.default.svc.cluster.local"
            admin = BrokerAdmin(admin_http.client, ip, admin_http.server_name)
            info = await admin.get("/v1/broker")
            assert info["group"] == "sec-broker-0"
            # The same call in plain http, as before TLS: refused.
            with pytest.raises(AdminError):
                await BrokerAdmin(plain, ip).get("/v1/broker")

            # A Secret whose CA did not sign the broker's certificate: no answer.
            other = LocalCA.ensure(tmp_path / "other", "other CA")
            await kube.create(_secret("other-tls", {"ca.crt": other.ca_file.read_bytes()}))
            stranger = await trust.for_cluster(_cluster("other-tls"))
            with pytest.raises(AdminError, match="CERTIFICATE_VERIFY_FAILED"):
                await BrokerAdmin(stranger.client, ip, stranger.server_name).get("/v1/broker")

            with pytest.raises(AdminError, match="default/missing does not exist"):
                await trust.for_cluster(_cluster("missing"))
        finally:
            await trust.close()

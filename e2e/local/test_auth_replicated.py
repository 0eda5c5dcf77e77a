"""security.auth on a replicated local cluster (a controller, one group of two
brokers, the group endpoint): the controller's admin API wants the token, the group
endpoint still finds the master (it sends the token), the official client works
through it, and a request sent to the slave is forwarded to the master with the
client's own signature — checked on both."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.model import Message
from rocketmq.v5.producer import Producer
from rocketmq.v5.util import Signature

from rocketcluster.api.auth import UsersFile
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.local.auth import local_admin_token, users_path
from rocketcluster.ctl.local.runtime import LocalRuntime
from rocketcluster.ctl.testing import DISK_GUARDS_OFF, quiet_official_client, wait_for
from rocketcluster.jobs.cluster import ClusterUnreachableError, ControllerApi, first_answering


def secured() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "vault"},
            "spec": {
                "controller": {"replicas": 1},
                "brokers": {"groups": 1, "replicas": 2, "replication": {"mode": "async"}},
                "topics": [{"name": "orders", "queues": 2}],
                "consumerGroups": [{"name": "billing"}],
                "security": {"auth": {"enabled": True}},
                "users": [
                    {"name": "app", "permissions": [{"topic": "orders", "actions": ["pub"]}]}
                ],
            },
        }
    )


class Secured:
    def __init__(self, runtime: LocalRuntime, state: dict[str, Any]) -> None:
        self.runtime = runtime
        self.state = state
        self.token = local_admin_token(runtime.directory)
        found = UsersFile.load(users_path(runtime.directory)).find("app")
        assert found is not None and self.token
        self.secret_key = found.secret_key

    def processes(self, role: str) -> list[dict[str, Any]]:
        return [p for p in self.state["processes"] if p["role"] == role]

    def broker_roles(self) -> dict[str, str] | None:
        roles = {}
        with httpx.Client(timeout=2, headers={"authorization": f"Bearer {self.token}"}) as http:
            for proc in self.processes("broker"):
                try:
                    roles[proc["addresses"]["client"]] = http.get(
                        f"http://{proc['addresses']['admin']}/v1/broker"
                    ).json()["role"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return None
        return roles if sorted(roles.values()) == ["master", "slave"] else None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    quiet_official_client()
    runtime = LocalRuntime(tmp_path_factory.mktemp("vault"))
    state = runtime.up(secured(), overrides={"segment_size": 16 << 20, **DISK_GUARDS_OFF})
    try:
        yield Secured(runtime, state)
    finally:
        runtime.down()


def test_the_controller_admin_api_wants_the_token(cluster: Secured) -> None:
    [controller] = cluster.processes("controller")
    base = f"http://{controller['addresses']['admin']}"
    with httpx.Client(base_url=base, timeout=10) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/v1/cluster").status_code == 401
        assert anonymous.get("/metrics").status_code == 401
        assert anonymous.put("/v1/topics/made", json={"name": "made"}).status_code == 401
    headers = {"authorization": f"Bearer {cluster.token}"}
    with httpx.Client(base_url=base, timeout=10, headers=headers) as admin:
        assert admin.get("/v1/cluster").status_code == 200
        assert "rocketmq_controller" in admin.get("/metrics").text


def test_the_official_client_through_the_group_endpoint(cluster: Secured) -> None:
    # The group endpoint follows the master it learns from the controllers' admin API.
    wait_for(cluster.broker_roles, timeout=60, what="a master and a slave")
    config = ClientConfiguration(
        cluster.state["clientEndpoints"], Credentials("app", cluster.secret_key), request_timeout=10
    )
    producer = Producer(config, ("orders",))
    producer.startup()
    try:
        message = Message()
        message.topic, message.body = "orders", b"through the group endpoint"
        assert producer.send(message).message_id
    finally:
        producer.shutdown()


def _send_to(endpoint: str, ak: str, sk: str) -> spb.SendMessageResponse:
    """A SendMessage straight to ``endpoint``, signed by the official client's signer."""
    config = ClientConfiguration(endpoint, Credentials(ak, sk))
    metadata = tuple(Signature.metadata(config, f"raw-{uuid.uuid4().hex[:8]}"))
    message = pb.Message(
        topic=pb.Resource(name="orders"),
        system_properties=pb.SystemProperties(message_id=uuid.uuid4().hex.upper()),
        body=b"via the slave",
    )
    with grpc.insecure_channel(endpoint) as channel:
        return MessagingServiceStub(channel).SendMessage(
            spb.SendMessageRequest(messages=[message]), metadata=metadata, timeout=10
        )


def test_a_slave_forwards_the_signed_request_to_the_master(cluster: Secured) -> None:
    roles = wait_for(cluster.broker_roles, timeout=60, what="a master and a slave")
    [slave] = [endpoint for endpoint, role in roles.items() if role == "slave"]
    answer = _send_to(slave, "app", cluster.secret_key)
    assert answer.status.code == pb.Code.OK, answer.status
    assert answer.entries[0].message_id
    refused = _send_to(slave, "app", "not-the-secret-key")
    assert refused.status.code == pb.Code.UNAUTHORIZED
    assert "wrong secret key" in refused.status.message


def test_the_spark_jobs_cluster_reader_sends_the_token(cluster: Secured) -> None:
    [controller] = cluster.processes("controller")
    address = controller["addresses"]["admin"]
    with pytest.raises(ClusterUnreachableError, match="401"):
        ControllerApi([address]).groups()
    [group] = ControllerApi([address], token=cluster.token).groups()
    with first_answering(group, cluster.token) as admin:
        assert admin.broker()["group"] == group.name  # an admin call with the token

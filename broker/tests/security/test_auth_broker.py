"""A broker with ``security.auth`` on, as the official Python client sees it: the right
access key and secret key work; wrong, unknown or missing ones get 40100 and the
client raises at once; a user without the permission gets 40300; the users file is
re-read without a restart; the admin API and /metrics want the admin token.

The transport is a parameter of the module's broker: TLS adds ``"tls"`` to
TRANSPORTS (and passes ``tls_enable`` through :func:`client_options`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer, SimpleConsumer
from rocketmq.v5.exception import ForbiddenException, UnauthorizedException
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer

from rocketcluster.api.auth import UserCredentials, UsersFile
from rocketcluster.api.client.lean import LeanClient, LeanClientError, OutgoingMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.users import PermissionSpec
from rocketcluster.ctl.local.auth import local_admin_token, users_path
from rocketcluster.ctl.testing import LocalBroker, local_broker, quiet_official_client, wait_for

TRANSPORTS = ["plain"]
USERS = [
    {
        "name": "orders-app",
        "permissions": [
            {"topic": "orders", "actions": ["pub", "sub"]},
            {"group": "billing", "actions": ["sub"]},
        ],
    },
    {"name": "auditor", "permissions": [{"topic": "orders", "actions": ["sub"]}]},
    {"name": "ops", "admin": True},
]


def secured_cluster() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "guarded"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": "sync"},
                "topics": [{"name": "orders", "queues": 2}, {"name": "audit", "queues": 1}],
                "consumerGroups": [{"name": "billing"}],
                "security": {"auth": {"enabled": True}},
                "users": USERS,
            },
        }
    )


@pytest.fixture(scope="module", params=TRANSPORTS)
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalBroker]:
    quiet_official_client()
    with local_broker(secured_cluster(), tmp_path_factory.mktemp("auth")) as handle:
        handle.state["transport"] = request.param
        yield handle


def client_options(broker: LocalBroker) -> dict[str, Any]:
    return {"tls_enable": broker.state.get("transport") == "tls"}


def secret_of(broker: LocalBroker, name: str) -> str:
    found = UsersFile.load(users_path(broker.runtime.directory)).find(name)
    assert found is not None
    return found.secret_key


def configuration(broker: LocalBroker, ak: str = "", sk: str = "") -> ClientConfiguration:
    return ClientConfiguration(broker.endpoints, Credentials(ak, sk), request_timeout=5)


def as_user(broker: LocalBroker, name: str) -> ClientConfiguration:
    return configuration(broker, name, secret_of(broker, name))


@contextlib.contextmanager
def producer(config: ClientConfiguration, broker: LocalBroker, *topics: str) -> Iterator[Producer]:
    p = Producer(config, topics, **client_options(broker))
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


def message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def test_right_credentials_produce_and_consume(broker: LocalBroker) -> None:
    config = as_user(broker, "orders-app")
    with producer(config, broker, "orders") as p:
        sent = {p.send(message("orders", f"m{i}".encode())).message_id for i in range(5)}
    consumer = SimpleConsumer(
        config,
        "billing",
        {"orders": FilterExpression()},
        await_duration=3,
        **client_options(broker),
    )
    consumer.startup()
    try:
        got: set[str] = set()
        deadline = time.monotonic() + 30
        while got != sent and time.monotonic() < deadline:
            for msg in consumer.receive(16, 10):
                consumer.ack(msg)
                got.add(msg.message_id)
        assert got == sent
    finally:
        consumer.shutdown()


@pytest.mark.parametrize(
    ("who", "reason"),
    [
        (("orders-app", "not-the-secret-key"), "wrong secret key"),
        (("nobody", "some-secret-key-123"), "unknown access key 'nobody'"),
        (("", ""), "no access key"),
    ],
    ids=["wrong-sk", "unknown-ak", "no-credentials"],
)
def test_bad_credentials_are_refused_at_once(
    broker: LocalBroker, who: tuple[str, str], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    # Client 5.1.2 logs the refused route (code and our reason) and raises a generic
    # "failed to fetch topic route" from the send: an answer, not a hang.
    with (
        producer(configuration(broker, *who), broker, "orders") as p,
        pytest.raises(Exception, match="failed to fetch topic:orders route"),
    ):
        p.send(message("orders", b"refused"))
    assert time.monotonic() - started < 60  # the client's own retries, not a hang
    refusals = [r.getMessage() for r in caplog.records if "40100" in r.getMessage()]
    assert refusals and all(reason in m for m in refusals), refusals


def test_refusals_reach_the_client_as_unauthorized(broker: LocalBroker) -> None:
    """A call whose status the client checks itself raises UnauthorizedException:
    a consumer whose key was valid at start and is wrong now (its ack is refused)."""
    good = as_user(broker, "orders-app")
    with producer(good, broker, "orders") as p:
        p.send(message("orders", b"to-ack"))
    consumer = SimpleConsumer(
        good, "billing", {"orders": FilterExpression()}, await_duration=3, **client_options(broker)
    )
    consumer.startup()
    try:
        [msg, *_] = wait_for(lambda: consumer.receive(1, 10), timeout=30, what="a message")
        # Same client, credentials replaced: what a rotated-away key looks like.
        good.credentials._Credentials__sk = "rotated-away"
        with pytest.raises(UnauthorizedException) as info:
            consumer.ack(msg)
        assert info.value.code == 40100
    finally:
        consumer.shutdown()


def test_missing_permission_is_forbidden(
    broker: LocalBroker, caplog: pytest.LogCaptureFixture
) -> None:
    # auditor may read "orders" (so its route is served) but not send to it.
    with producer(as_user(broker, "auditor"), broker, "orders", "audit") as p:
        with pytest.raises(ForbiddenException) as info:
            p.send(message("orders", b"nope"))
        assert info.value.code == 40300 and "no pub permission on topic 'orders'" in str(info.value)
        # Neither pub nor sub on "audit": not even its route.
        with pytest.raises(Exception, match="failed to fetch topic:audit route"):
            p.send(message("audit", b"nope"))
    assert any(
        "40300" in r.getMessage()
        and "neither pub nor sub permission on topic 'audit'" in r.getMessage()
        for r in caplog.records
    )


def test_rotation_and_new_users_without_restart(broker: LocalBroker) -> None:
    path = users_path(broker.runtime.directory)
    users = UsersFile.load(path)
    pid = broker.process["pid"]
    newcomer = UserCredentials(
        access_key="newcomer",
        secret_key="a-brand-new-secret-key-0001",
        permissions=[PermissionSpec.model_validate({"topic": "audit", "actions": ["pub"]})],
    )
    UsersFile(users=[*users.users, newcomer]).save(path)

    def sends() -> bool:
        """Whether newcomer's first key is accepted (client 5.1.2 reports a refused
        route as a generic exception)."""
        config = configuration(broker, "newcomer", newcomer.secret_key)
        try:
            with producer(config, broker, "audit") as p:
                return bool(p.send(message("audit", b"hello")).message_id)
        except UnauthorizedException:  # the key changed between its route and its send
            return False
        except Exception as exc:
            if "route" not in str(exc):
                raise
            return False

    assert wait_for(sends, timeout=30, interval=0.5, what="the new user to be accepted")
    rotated = newcomer.model_copy(update={"secret_key": "the-rotated-secret-key-0002"})
    UsersFile(users=[*users.users, rotated]).save(path)
    wait_for(lambda: not sends(), timeout=30, interval=0.5, what="the old key to be refused")
    with producer(configuration(broker, "newcomer", rotated.secret_key), broker, "audit") as p:
        assert p.send(message("audit", b"rotated")).message_id
    assert broker.process["pid"] == pid and broker.runtime.running()


def test_admin_api_and_metrics_need_the_token(broker: LocalBroker) -> None:
    base = f"http://{broker.admin_address}"
    token = local_admin_token(broker.runtime.directory)
    assert token
    topic = {"name": "made-by-admin", "queues": 1}
    with httpx.Client(base_url=base, timeout=10) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/readyz").status_code == 200
        refused = anonymous.post("/v1/topics", json=topic)
        assert refused.status_code == 401 and "admin token" in refused.json()["detail"]
        assert anonymous.get("/metrics").status_code == 401
        wrong = anonymous.post("/v1/topics", json=topic, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
    with httpx.Client(
        base_url=base, timeout=10, headers={"authorization": f"Bearer {token}"}
    ) as admin:
        assert admin.post("/v1/topics", json=topic).status_code == 201
        metrics = admin.get("/metrics")
        assert metrics.status_code == 200
        # Refusals are counted with the code the client read.
        assert 'response_code="40100"' in metrics.text and 'response_code="40300"' in metrics.text
    with broker.admin() as client:  # the typed client with the local cluster's token
        assert any(t["name"] == "made-by-admin" for t in client.topics())


async def test_the_lean_client_signs_like_the_official_one(broker: LocalBroker) -> None:
    """Our LeanClient (benchmarks, tools) signs as the official clients do."""
    key = secret_of(broker, "orders-app")
    async with LeanClient(broker.endpoints, credentials=("orders-app", key)) as client:
        entries = await client.send(
            "orders", [OutgoingMessage(b"lean-1"), OutgoingMessage(b"lean-2")]
        )
        assert [e.status.code for e in entries] == [20000, 20000]
    async with LeanClient(
        broker.endpoints, credentials=("orders-app", "wrong-key-0123456789")
    ) as client:
        with pytest.raises(LeanClientError) as info:
            await client.send("orders", [OutgoingMessage(b"refused")])
        assert info.value.code == 40100


async def test_batched_consume_asks_the_same_permissions(broker: LocalBroker) -> None:
    """ReceiveBatch and AckBatch (ConsumeService, what LeanClient receives and acks
    with) want sub on the topic and on the group, like ReceiveMessage and AckMessage:
    a user with sub on the topic only gets 40300, a wrong key 40100."""
    key = secret_of(broker, "orders-app")
    async with LeanClient(broker.endpoints, credentials=("orders-app", key)) as client:
        await client.send("orders", [OutgoingMessage(b"batched")])
        got: list[Any] = []
        for _ in range(40):
            got += await client.receive("billing", "orders", batch=64, poll_ms=500)
            if any(m.body == b"batched" for m in got):
                break
        assert any(m.body == b"batched" for m in got)
        assert client.uses_consume_service
        auditor = secret_of(broker, "auditor")  # sub on the topic, nothing on the group
        async with LeanClient(broker.endpoints, credentials=("auditor", auditor)) as other:
            with pytest.raises(LeanClientError) as info:
                await other.receive("billing", "orders", poll_ms=0)
            assert info.value.code == 40300
            with pytest.raises(LeanClientError) as info:
                await other.ack("billing", "orders", got)
            assert info.value.code == 40300
            assert other.uses_consume_service  # a refusal, not a missing service
        async with LeanClient(
            broker.endpoints, credentials=("orders-app", "wrong-key-0123456789")
        ) as wrong:
            with pytest.raises(LeanClientError) as info:
                await wrong.receive("billing", "orders", poll_ms=0)
            assert info.value.code == 40100
        entries = await client.ack("billing", "orders", got)
        assert [e.status.code for e in entries] == [20000] * len(got)


def test_streams_answer_a_refusal_first_and_close(broker: LocalBroker) -> None:
    """ReceiveMessage and Telemetry without credentials: one response carrying 40100,
    then the stream ends (no hang); a unary refusal keeps the fields the client reads."""
    metadata = (("x-mq-client-id", "raw-no-credentials"),)
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name="billing"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders"), id=0),
        batch_size=1,
    )
    receive.invisible_duration.FromSeconds(10)
    with grpc.insecure_channel(broker.endpoints) as channel:
        stub = MessagingServiceStub(channel)
        answers = list(stub.ReceiveMessage(receive, metadata=metadata, timeout=10))
        assert [a.status.code for a in answers] == [40100]
        telemetry = list(
            stub.Telemetry(iter([spb.TelemetryCommand()]), metadata=metadata, timeout=10)
        )
        assert [t.status.code for t in telemetry] == [40100]
        change = stub.ChangeInvisibleDuration(
            spb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name="billing"),
                topic=pb.Resource(name="orders"),
                receipt_handle="some-handle",
            ),
            metadata=metadata,
            timeout=10,
        )
        assert change.status.code == 40100 and change.receipt_handle == "some-handle"


class _Seen(MessageListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.ids: set[str] = set()

    def consume(self, message: Message) -> ConsumeResult:
        self.ids.add(message.message_id)
        return ConsumeResult.SUCCESS


def test_push_consumer_with_credentials(broker: LocalBroker) -> None:
    """The push consumer's calls (Telemetry settings, QueryAssignment, Heartbeat with
    its group, auto-renewed receives, acks) all pass for a user with sub on both."""
    config = as_user(broker, "orders-app")
    seen = _Seen()
    consumer = PushConsumer(config, "billing", seen, {"orders": FilterExpression()})
    consumer.startup()
    try:
        with producer(config, broker, "orders") as p:
            sent = {p.send(message("orders", f"push-{i}".encode())).message_id for i in range(5)}
        wait_for(lambda: sent <= seen.ids, timeout=60, what="the pushed messages")
    finally:
        consumer.shutdown()

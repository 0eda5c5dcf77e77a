"""Limits and bad input on the client port and the admin API, each met over real
gRPC (raw stubs or the official client) or HTTP against one broker process: every
limit answers with its clear error while another client keeps being served; a bad
name is refused with its status code and never reaches the disk."""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.exception import PayloadTooLargeException, TooManyRequestsException
from rocketmq.v5.producer import Producer

from rocketcluster.api.client.admin import AdminError
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.broker.messaging.admission import FRAME_MARGIN_BYTES
from rocketcluster.ctl.testing import LocalBroker, local_broker, quiet_official_client, wait_for

from .conftest import message, producer

MAX_MESSAGE = 65536
LIMITS = {
    "maxConnections": 50,
    "maxConnectionsPerAddress": 12,
    "maxConcurrentStreams": 16,
    "maxConcurrentRpcs": 40,
    "maxConnectionIdleSeconds": 2,
    "maxInflightRequestsPerClient": 6,
    "maxInflightBytesPerClient": 200_000,
}
Code = pb.Code


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    quiet_official_client()
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "limits"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"maxMessageBytes": MAX_MESSAGE, "clientLimits": LIMITS},
                "topics": [
                    {"name": "free", "queues": 2},
                    {"name": "small", "queues": 1, "maxMessageBytes": 1024},
                    {"name": "slow", "queues": 1, "maxProduceRate": 0.01},
                    {"name": "quiet", "queues": 1},
                ],
                "consumerGroups": [{"name": "g-limits"}],
            },
        }
    )
    with local_broker(cluster, tmp_path_factory.mktemp("limits")) as handle:
        yield handle


def meta(client: str) -> tuple[tuple[str, str], ...]:
    return (("x-mq-client-id", client),)


def raw_message(topic: str, body: bytes) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        system_properties=pb.SystemProperties(message_id=uuid.uuid4().hex.upper()),
        body=body,
    )


def send_raw(stub: MessagingServiceStub, client: str, topic: str, body: bytes) -> pb.Status:
    request = spb.SendMessageRequest(messages=[raw_message(topic, body)])
    response = stub.SendMessage(request, metadata=meta(client), timeout=15)
    return response.status


class Telemetry:
    """A Telemetry stream held open (an official client holds one per broker): its
    first answer says whether the broker admitted it."""

    def __init__(self, stub: MessagingServiceStub, client: str) -> None:
        self._out: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()
        settings = pb.Settings(
            client_type=pb.ClientType.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name="free")]),
        )
        self._out.put(spb.TelemetryCommand(settings=settings))
        self.call = stub.Telemetry(iter(self._out.get, None), metadata=meta(client), timeout=60)
        try:
            self.first: spb.TelemetryCommand = next(self.call)
        except grpc.RpcError:
            self.close()  # ends the thread that feeds the request stream
            raise

    @property
    def admitted(self) -> bool:
        return bool(self.first.status.code == Code.OK)

    def close(self) -> None:
        self._out.put(None)
        self.call.cancel()


@contextlib.contextmanager
def held_streams() -> Iterator[list[Telemetry]]:
    streams: list[Telemetry] = []
    try:
        yield streams
    finally:
        for s in streams:
            s.close()


@contextlib.contextmanager
def channel(broker: LocalBroker) -> Iterator[MessagingServiceStub]:
    # A channel of its own (not the process-wide subchannel pool): its own connection.
    ch = grpc.insecure_channel(broker.endpoints, options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        yield MessagingServiceStub(ch)
    finally:
        ch.close()


def test_topic_max_message_bytes(broker: LocalBroker) -> None:
    with producer(broker, "small", "free") as p:
        with pytest.raises(PayloadTooLargeException) as refused:
            p.send(message("small", b"x" * 1025))
        assert "1025 bytes exceeds the limit of 1024" in str(refused.value)
        assert p.send(message("small", b"x" * 1024)).message_id
        assert p.send(message("free", b"x" * 1025)).message_id  # the broker's limit


def test_oversized_frame_is_refused_by_grpc(broker: LocalBroker) -> None:
    with channel(broker) as stub, channel(broker) as other:
        with pytest.raises(grpc.RpcError) as refused:
            send_raw(stub, "big", "free", b"x" * (MAX_MESSAGE + FRAME_MARGIN_BYTES + 1))
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        status = send_raw(stub, "big", "free", b"x" * (MAX_MESSAGE + 1))
        assert status.code == Code.MESSAGE_BODY_TOO_LARGE, status
        assert send_raw(other, "other", "free", b"fine").code == Code.OK
    # The broker advertises its limit on the telemetry stream, so the official client
    # refuses before sending once it has the settings; a send that races ahead of them
    # is refused by the broker instead. Either way the error names the limit.
    with channel(broker) as stub, held_streams() as streams:
        streams.append(Telemetry(stub, "advertised"))
        assert streams[0].first.settings.publishing.max_body_size == MAX_MESSAGE
    with (
        producer(broker, "free") as p,
        pytest.raises(
            Exception,
            match=r"(exceeds the threshold, max size=65536|exceeds the limit of 65536 bytes)",
        ),
    ):
        p.send(message("free", b"x" * (MAX_MESSAGE + 1)))


def test_topic_produce_rate(broker: LocalBroker) -> None:
    with producer(broker, "slow", "free") as p:
        assert p.send(message("slow", b"first")).message_id  # the one-message burst
        with pytest.raises(TooManyRequestsException) as refused:
            p.send(message("slow", b"second"))
        assert "maxProduceRate" in str(refused.value)
        for i in range(5):  # other topics are not held back
            assert p.send(message("free", f"m{i}".encode())).message_id


def test_inflight_requests_per_client(broker: LocalBroker) -> None:
    limit = LIMITS["maxInflightRequestsPerClient"]
    with channel(broker) as stub, held_streams() as streams:
        for _ in range(limit):
            streams.append(Telemetry(stub, "greedy"))
        assert all(s.admitted for s in streams)
        extra = Telemetry(stub, "greedy")
        streams.append(extra)
        assert extra.first.status.code == Code.TOO_MANY_REQUESTS
        assert "maxInflightRequestsPerClient" in extra.first.status.message
        status = send_raw(stub, "greedy", "free", b"one too many")
        assert status.code == Code.TOO_MANY_REQUESTS
        assert send_raw(stub, "modest", "free", b"served").code == Code.OK
    # Their streams ended: the client is served again.
    with channel(broker) as stub:
        wait_for(
            lambda: send_raw(stub, "greedy", "free", b"again").code == Code.OK,
            what="the greedy client to be served once its streams closed",
        )


def _sent(p: Producer, topic: str) -> bool:
    try:
        return bool(p.send(message(topic, b"first")).message_id)
    except Exception:  # the official client raises a bare Exception for a route failure
        return False


def test_connections_per_address(broker: LocalBroker) -> None:
    limit = LIMITS["maxConnectionsPerAddress"]
    with producer(broker, "free") as p, contextlib.ExitStack() as stack:
        # The producer is served (its route known) before the address fills up: the
        # broker may still count the connections the tests before this one closed, and
        # a route the producer could not fetch at start-up would need a new connection.
        wait_for(lambda: _sent(p, "free"), what="the producer to be served")
        # The producer's connection is in use (its Telemetry stream): new connections
        # are refused when the address is at its limit, its requests are not.
        streams = stack.enter_context(held_streams())
        refused: Telemetry | None = None
        for i in range(limit + 1):
            stub = stack.enter_context(channel(broker))
            stream = Telemetry(stub, f"conn-{i}")
            streams.append(stream)
            if not stream.admitted:
                refused = stream
                break
        assert refused is not None, "no connection was refused"
        assert refused.first.status.code == Code.TOO_MANY_REQUESTS
        assert "maxConnectionsPerAddress" in refused.first.status.message
        assert p.send(message("free", b"still served")).message_id
    with channel(broker) as stub:
        wait_for(
            lambda: send_raw(stub, "later", "free", b"x").code == Code.OK,
            what="a new connection to be served once the others closed",
        )


def test_idle_connections_are_closed(broker: LocalBroker) -> None:
    """A connection without RPCs is closed by the broker after maxConnectionIdleSeconds
    (the channel falls back to IDLE), and the next call simply reconnects."""
    states: list[grpc.ChannelConnectivity] = []
    opened = grpc.insecure_channel(
        broker.endpoints, options=[("grpc.use_local_subchannel_pool", 1)]
    )
    opened.subscribe(states.append, try_to_connect=False)
    try:
        stub = MessagingServiceStub(opened)
        assert send_raw(stub, "idler", "free", b"x").code == Code.OK
        wait_for(
            lambda: (
                grpc.ChannelConnectivity.READY in states
                and states[-1] is grpc.ChannelConnectivity.IDLE
            ),
            timeout=60,
            what="the broker to close the idle connection",
        )
        assert send_raw(stub, "idler", "free", b"y").code == Code.OK
    finally:
        opened.unsubscribe(states.append)
        opened.close()


def test_inflight_bytes_per_client(broker: LocalBroker) -> None:
    """A long poll holding a large request keeps its bytes in flight: a second large
    request of the same client is refused until the poll ends."""
    with channel(broker) as stub, channel(broker) as other:
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name="g-limits"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="quiet"), id=0),
            attempt_id="a" * 150_000,
            auto_renew=True,
        )
        request.long_polling_timeout.FromSeconds(20)
        poll = stub.ReceiveMessage(request, metadata=meta("hoarder"), timeout=30)
        results: list[object] = []
        reader = threading.Thread(target=lambda: results.extend(_drain(poll)), daemon=True)
        reader.start()
        probe = b"p" * 60_000

        def refused() -> pb.Status | None:
            answer = send_raw(stub, "hoarder", "small", probe)  # admitted: too large
            return answer if answer.code != Code.MESSAGE_BODY_TOO_LARGE else None

        status = wait_for(refused, what="the long poll's bytes to be held")
        assert status.code == Code.TOO_MANY_REQUESTS, status
        assert "maxInflightBytesPerClient" in status.message
        assert send_raw(other, "thrifty", "free", probe).code == Code.OK
        poll.cancel()
        reader.join(30)
        wait_for(
            lambda: send_raw(stub, "hoarder", "small", probe).code == Code.MESSAGE_BODY_TOO_LARGE,
            what="the hoarder's bytes to be released",
        )


def _drain(call: object) -> list[object]:
    try:
        answers: list[object] = list(call)  # type: ignore[call-overload]
        return answers
    except grpc.RpcError as exc:
        return [exc]


def test_concurrent_rpcs_of_all_clients(broker: LocalBroker) -> None:
    """maximum_concurrent_rpcs: with every RPC slot held, gRPC refuses a new RPC at
    once (RESOURCE_EXHAUSTED); a slot freed serves the next one."""
    limit = LIMITS["maxConcurrentRpcs"]
    per_channel = LIMITS["maxConcurrentStreams"]
    with contextlib.ExitStack() as stack:
        streams = stack.enter_context(held_streams())
        stubs = [
            stack.enter_context(channel(broker)) for _ in range(-(-(limit + 1) // per_channel))
        ]
        refused: grpc.RpcError | None = None
        for i in range(limit + 1):
            try:
                streams.append(Telemetry(stubs[i // per_channel], f"many-{i}"))
            except grpc.RpcError as exc:
                refused = exc
                break
        assert refused is not None, "no RPC was refused"
        assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        streams.pop().close()

        def served() -> bool:
            try:
                return bool(send_raw(stubs[-1], "after-many", "free", b"x").code == Code.OK)
            except grpc.RpcError as exc:  # until the closed stream's slot is free
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                return False

        wait_for(served, what="a freed slot to serve the next RPC")


def test_concurrent_streams_per_connection(broker: LocalBroker) -> None:
    """grpc.max_concurrent_streams: the client does not get a stream beyond the
    limit while the others are open; another connection is served meanwhile."""
    limit = LIMITS["maxConcurrentStreams"]
    with channel(broker) as stub, channel(broker) as other, held_streams() as streams:
        for i in range(limit):
            streams.append(Telemetry(stub, f"stream-{i}"))
        assert all(s.admitted for s in streams)
        with pytest.raises(grpc.RpcError) as waited:
            stub.QueryRoute(
                spb.QueryRouteRequest(topic=pb.Resource(name="free")),
                metadata=meta("stream-extra"),
                timeout=2,
            )
        assert waited.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert send_raw(other, "elsewhere", "free", b"served").code == Code.OK
        streams.pop().close()
        route = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="free")),
            metadata=meta("stream-extra"),
            timeout=15,
        )
        assert route.status.code == Code.OK


def test_refusals_are_counted_by_limit(broker: LocalBroker) -> None:
    """After the tests above: each limit they met has its refusals counted."""
    text = httpx.get(f"http://{broker.admin_address}/metrics", timeout=15).text
    counted = {
        line.split('limit="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rocketmq_client_limit_refusals_total{")
    }
    for limit in ("maxInflightRequestsPerClient", "maxConnectionsPerAddress"):
        assert counted.get(limit, 0) >= 1, counted
    assert counted.get("maxInflightBytesPerClient", 0) >= 1, counted
    assert "rocketmq_client_connections{" in text


# -- names --------------------------------------------------------------------------


def bad_message(**fields: object) -> pb.Message:
    message = raw_message(str(fields.pop("topic", "free")), b"body")
    sp = message.system_properties
    for key, value in fields.items():
        if key == "keys":
            sp.keys.extend(value)
        elif key == "properties":
            message.user_properties.update(value)
        else:
            setattr(sp, key, value)
    return message


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"topic": "../escaped"}, Code.ILLEGAL_TOPIC),
        ({"topic": "a/b"}, Code.ILLEGAL_TOPIC),
        ({"topic": "free\n"}, Code.ILLEGAL_TOPIC),
        ({"topic": "free\x00"}, Code.ILLEGAL_TOPIC),
        ({"tag": "t\x00"}, Code.ILLEGAL_MESSAGE_TAG),
        ({"tag": "x" * 256}, Code.ILLEGAL_MESSAGE_TAG),
        ({"keys": ["two words"]}, Code.ILLEGAL_MESSAGE_KEY),
        ({"keys": ["k\x01"]}, Code.ILLEGAL_MESSAGE_KEY),
        ({"message_group": "g\n"}, Code.ILLEGAL_MESSAGE_GROUP),
        ({"message_id": "id\x02"}, Code.ILLEGAL_MESSAGE_ID),
        ({"message_id": "i" * 129}, Code.ILLEGAL_MESSAGE_ID),
        ({"properties": {"k\x01": "v"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"properties": {"": "v"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"properties": {"k": "v\x02w"}}, Code.BAD_REQUEST),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_bad_names_in_messages(broker: LocalBroker, fields: dict[str, object], code: int) -> None:
    with channel(broker) as stub:
        request = spb.SendMessageRequest(messages=[bad_message(**fields)])
        response = stub.SendMessage(request, metadata=meta("namer"), timeout=15)
        assert response.status.code == code, response.status
        assert response.status.message


def test_bad_names_in_other_requests(broker: LocalBroker) -> None:
    with channel(broker) as stub:
        ack = stub.AckMessage(
            spb.AckMessageRequest(
                group=pb.Resource(name="g-limits"),
                topic=pb.Resource(name="../escaped"),
                entries=[spb.AckMessageEntry(message_id="x", receipt_handle="h")],
            ),
            metadata=meta("namer"),
            timeout=15,
        )
        assert ack.status.code == Code.ILLEGAL_TOPIC, ack.status
        beat = stub.Heartbeat(
            spb.HeartbeatRequest(group=pb.Resource(name="g/../x")),
            metadata=meta("namer"),
            timeout=15,
        )
        assert beat.status.code == Code.ILLEGAL_CONSUMER_GROUP, beat.status
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name="../g"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="free"), id=0),
        )
        [answer] = stub.ReceiveMessage(request, metadata=meta("namer"), timeout=15)
        assert answer.status.code == Code.ILLEGAL_CONSUMER_GROUP
        route = stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="..")),
            metadata=meta("namer"),
            timeout=15,
        )
        assert route.status.code == Code.ILLEGAL_TOPIC
    data = Path(broker.process["configPath"]).parent.parent
    names = {p.name for p in data.parent.rglob("*")}
    assert "escaped" not in names
    assert not [n for n in names if any(ord(c) < 32 for c in n)]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/topics/free%0A", None),
        ("DELETE", "/v1/topics/a%00b", None),
        ("GET", "/v1/groups/%2E%2E", None),
        ("DELETE", "/v1/groups/bad%20group", None),
        ("GET", "/v1/groups/g%01/offsets", None),
        ("PUT", "/v1/groups/g-limits/offsets", {"topic": "../x", "queueId": 0, "offset": 0}),
        ("GET", "/v1/messages?topic=free&key=a%00b", None),
        ("GET", "/v1/messages?topic=..&key=k", None),
        ("GET", "/v1/messages/id%0A", None),
        ("GET", "/v1/topics/%2E%2E/queues/0/offset?time=0", None),
        ("POST", "/v1/topics", {"name": "a\\b"}),
        ("POST", "/v1/groups", {"name": "g\n"}),
    ],
)
def test_bad_names_on_the_admin_api(
    broker: LocalBroker, method: str, path: str, body: dict[str, object] | None
) -> None:
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=15) as http:
        answer = http.request(method, path, json=body)
        assert answer.status_code == 422, (answer.status_code, answer.text)
        assert "topic" in answer.text or "group" in answer.text or "message" in answer.text
        assert http.get("/v1/topics/free").status_code == 200


def test_the_admin_client_keeps_a_name_one_path_segment(broker: LocalBroker) -> None:
    """A name that reads as a path (``x/../../groups/g``) is sent as one segment and
    refused; it never turns into a request for another resource."""
    admin = broker.admin()
    try:
        for bad in ("x/../../groups/g-limits", "..", "a/b"):
            with pytest.raises(AdminError) as refused:
                admin.delete_topic(bad)
            assert refused.value.status in (404, 422), refused.value
        assert any(g["name"] == "g-limits" for g in admin.groups())
        with pytest.raises(AdminError) as refused:
            admin.topic("free\n")
        assert refused.value.status == 422 and "only letters" in refused.value.detail
    finally:
        admin.close()


def test_admin_request_bodies_are_bounded(broker: LocalBroker) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(40):
            yield b" " * 65536

    json_type = {"content-type": "application/json"}
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=30) as http:
        declared = http.post("/v1/topics", content=b" " * (2 << 20), headers=json_type)
        assert declared.status_code == 413 and "larger than" in declared.text
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=30) as http:
        streamed = http.post("/v1/topics", content=chunks(), headers=json_type)
        assert streamed.status_code == 413
    with httpx.Client(base_url=f"http://{broker.admin_address}", timeout=30) as http:
        assert http.post("/v1/groups", json={"name": "g-small-body"}).status_code == 201

"""Fuzzing the client request handlers of a live broker process over real gRPC:
random field values in every request the service takes, and mutated encodings of
valid requests. A fixed number of derandomized examples (bounded, reproducible).
Every answer carries a status code the protocol defines — never an internal error
for bad input, never an error escaping the handler — and the broker keeps serving
the official client afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.ctl.testing import LocalBroker, local_broker, quiet_official_client

from .conftest import message, producer, simple_consumer

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
META = (("x-mq-client-id", "fuzzer"),)
# Codes the service defines for requests (Code enum), minus the internal errors a
# bad request must never cause.
ANSWERS = {int(v.number) for v in pb.Code.DESCRIPTOR.values} - {
    pb.Code.CODE_UNSPECIFIED,
    pb.Code.INTERNAL_ERROR,
    pb.Code.INTERNAL_SERVER_ERROR,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    quiet_official_client()
    cluster = RocketCluster.model_validate(
        {
            "metadata": {"name": "fuzz"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"maxMessageBytes": 4096},
                "topics": [
                    {"name": "fz", "queues": 2, "messageType": "MIXED"},
                    {"name": "fz-fifo", "queues": 2, "messageType": "FIFO"},
                    {"name": "fz-after", "queues": 1},
                ],
                "consumerGroups": [
                    {"name": "g-fz"},
                    {"name": "g-fz-fifo", "fifo": True},
                    {"name": "g-after"},
                ],
            },
        }
    )
    with local_broker(cluster, tmp_path_factory.mktemp("fuzz")) as handle:
        yield handle


@pytest.fixture(scope="module")
def channel(broker: LocalBroker) -> Iterator[grpc.Channel]:
    opened = grpc.insecure_channel(broker.endpoints)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> MessagingServiceStub:
    return MessagingServiceStub(channel)


NAMES = st.one_of(
    st.sampled_from(
        ["fz", "fz-fifo", "g-fz", "g-fz-fifo", "", "..", "a/b", "%DLQ%g-fz", "x" * 300]
    ),
    st.text(max_size=20),
)
TEXT = st.one_of(st.text(max_size=40), st.sampled_from(["", " ", "a|b", "\x00", "k\x01v"]))
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
SECONDS = st.integers(-315_576_000_000, 315_576_000_000)


@st.composite
def resources(draw: st.DrawFn) -> pb.Resource:
    return pb.Resource(name=draw(NAMES), resource_namespace=draw(st.sampled_from(["", "ns"])))


@st.composite
def messages(draw: st.DrawFn) -> pb.Message:
    sp = pb.SystemProperties(
        message_id=draw(st.one_of(st.text(max_size=40), st.just("ID-FUZZ"))),
        tag=draw(TEXT),
        keys=draw(st.lists(TEXT, max_size=3)),
        message_group=draw(st.one_of(st.just(""), TEXT)),
        message_type=draw(st.integers(0, 6)),
        body_encoding=draw(st.integers(0, 3)),
        queue_id=draw(I32),
    )
    if draw(st.booleans()):
        sp.delivery_timestamp.seconds = draw(st.one_of(st.integers(0, 4_000_000_000), SECONDS))
    props = draw(st.dictionaries(TEXT, TEXT, max_size=3))
    return pb.Message(
        topic=draw(resources()),
        system_properties=sp,
        user_properties=props,
        body=draw(st.binary(max_size=5000)),
    )


def short_poll(request: Any, draw: st.DrawFn) -> None:
    request.long_polling_timeout.nanos = draw(st.integers(0, 200_000_000))


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "SendMessage",
                "ReceiveMessage",
                "AckMessage",
                "ChangeInvisibleDuration",
                "QueryRoute",
                "QueryAssignment",
                "Heartbeat",
                "EndTransaction",
                "RecallMessage",
                "ForwardMessageToDeadLetterQueue",
                "NotifyClientTermination",
                "QueryOffset",
            ]
        )
    )
    topic, group = draw(resources()), draw(resources())
    if kind == "SendMessage":
        return kind, spb.SendMessageRequest(messages=draw(st.lists(messages(), max_size=3)))
    if kind == "ReceiveMessage":
        request = spb.ReceiveMessageRequest(
            group=group,
            message_queue=pb.MessageQueue(topic=topic, id=draw(I32)),
            filter_expression=pb.FilterExpression(
                type=draw(st.integers(0, 3)), expression=draw(TEXT)
            ),
            batch_size=draw(st.one_of(st.integers(0, 40), I32)),
            auto_renew=draw(st.booleans()),
            attempt_id=draw(TEXT),
        )
        request.invisible_duration.seconds = draw(st.one_of(st.integers(0, 60), SECONDS))
        short_poll(request, draw)
        return kind, request
    if kind == "AckMessage":
        entries = [
            spb.AckMessageEntry(message_id=draw(TEXT), receipt_handle=draw(TEXT))
            for _ in range(draw(st.integers(0, 3)))
        ]
        return kind, spb.AckMessageRequest(group=group, topic=topic, entries=entries)
    if kind == "ChangeInvisibleDuration":
        request = spb.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=draw(TEXT), message_id=draw(TEXT)
        )
        request.invisible_duration.seconds = draw(SECONDS)
        return kind, request
    if kind == "QueryRoute":
        return kind, spb.QueryRouteRequest(topic=topic)
    if kind == "QueryAssignment":
        return kind, spb.QueryAssignmentRequest(topic=topic, group=group)
    if kind == "Heartbeat":
        return kind, spb.HeartbeatRequest(group=group, client_type=draw(st.integers(0, 8)))
    if kind == "EndTransaction":
        return kind, spb.EndTransactionRequest(
            topic=topic,
            message_id=draw(TEXT),
            transaction_id=draw(TEXT),
            resolution=draw(st.integers(0, 4)),
            source=draw(st.integers(0, 4)),
        )
    if kind == "RecallMessage":
        return kind, spb.RecallMessageRequest(topic=topic, recall_handle=draw(TEXT))
    if kind == "ForwardMessageToDeadLetterQueue":
        return kind, spb.ForwardMessageToDeadLetterQueueRequest(
            group=group,
            topic=topic,
            receipt_handle=draw(TEXT),
            message_id=draw(TEXT),
            delivery_attempt=draw(I32),
            max_delivery_attempts=draw(I32),
        )
    if kind == "NotifyClientTermination":
        return kind, spb.NotifyClientTerminationRequest(group=group)
    request = spb.QueryOffsetRequest(
        message_queue=pb.MessageQueue(topic=topic, id=draw(I32)),
        query_offset_policy=draw(st.integers(0, 4)),
    )
    request.timestamp.seconds = draw(st.one_of(st.integers(0, 4_000_000_000), SECONDS))
    return kind, request


def call(stub: MessagingServiceStub, kind: str, request: Any) -> list[Any]:
    method: Callable[..., Any] = getattr(stub, kind)
    if kind == "ReceiveMessage":
        return list(method(request, metadata=META, timeout=20))
    return [method(request, metadata=META, timeout=20)]


@FUZZ
@given(case=requests())
def test_random_requests_get_a_protocol_status(
    stub: MessagingServiceStub, case: tuple[str, Any]
) -> None:
    kind, request = case
    answers = call(stub, kind, request)
    statuses = [a.status for a in answers if a.HasField("status")]
    assert statuses, f"{kind} answered without a status"
    for status in statuses:
        assert status.code in ANSWERS, (kind, status.code, status.message, request)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    kind, request = draw(requests())
    raw = bytearray(request.SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        at = draw(st.integers(0, max(0, len(raw))))
        if op == "flip" and raw:
            raw[at % len(raw)] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del raw[at : at + draw(st.integers(1, 8))]
        else:
            raw[at:at] = draw(st.binary(min_size=1, max_size=8))
    return kind, bytes(raw)


@FUZZ
@given(case=mutated())
def test_mutated_encodings_get_a_status_or_a_grpc_refusal(
    channel: grpc.Channel, case: tuple[str, bytes]
) -> None:
    """Bytes that no longer parse are answered BAD_REQUEST; bytes that still parse are
    a request like any other."""
    kind, raw = case
    response_type = getattr(spb, f"{kind}Response")
    path = f"/apache.rocketmq.v2.MessagingService/{kind}"
    if kind == "ReceiveMessage":
        answers = list(
            channel.unary_stream(path, response_deserializer=response_type.FromString)(
                raw, metadata=META, timeout=20
            )
        )
    else:
        answers = [
            channel.unary_unary(path, response_deserializer=response_type.FromString)(
                raw, metadata=META, timeout=20
            )
        ]
    statuses = [a.status for a in answers if a.HasField("status")]
    assert statuses and all(s.code in ANSWERS for s in statuses), (kind, statuses)


@st.composite
def telemetry_commands(draw: st.DrawFn) -> bytes:
    settings = pb.Settings(
        client_type=draw(st.integers(0, 7)),
        publishing=pb.Publishing(topics=draw(st.lists(resources(), max_size=2))),
    )
    if draw(st.booleans()):
        settings.subscription.group.CopyFrom(draw(resources()))
        for _ in range(draw(st.integers(0, 2))):
            settings.subscription.subscriptions.add(
                topic=draw(resources()),
                expression=pb.FilterExpression(type=draw(st.integers(0, 3)), expression=draw(TEXT)),
            )
    settings.backoff_policy.max_attempts = draw(I32)
    raw = bytearray(spb.TelemetryCommand(settings=settings).SerializeToString())
    if draw(st.booleans()) and raw:  # and sometimes bytes that no longer parse
        at = draw(st.integers(0, len(raw) - 1))
        raw[at : at + 3] = draw(st.binary(min_size=1, max_size=3))
    return bytes(raw)


@FUZZ
@given(commands=st.lists(telemetry_commands(), min_size=1, max_size=2))
def test_telemetry_commands_are_answered(channel: grpc.Channel, commands: list[bytes]) -> None:
    """Each settings command gets its answer; bytes that are not a command end the
    stream with BAD_REQUEST; the stream always ends when the client's side does."""
    stream = channel.stream_stream(
        "/apache.rocketmq.v2.MessagingService/Telemetry",
        response_deserializer=spb.TelemetryCommand.FromString,
    )
    expected = 0  # answers: one per settings command, up to the first undecodable one
    for raw in commands:
        try:
            command = spb.TelemetryCommand.FromString(raw)
        except DecodeError:
            expected += 1
            break
        expected += command.HasField("settings")
    answers = list(stream(iter(commands), metadata=META, timeout=20))
    assert len(answers) == expected, answers
    for answer in answers:
        assert answer.status.code in ANSWERS, answer


def test_the_broker_serves_after_the_fuzz(broker: LocalBroker) -> None:
    with producer(broker, "fz-after") as p:
        sent = p.send(message("fz-after", b"after the fuzz"))
    with simple_consumer(broker, "g-after", "fz-after") as c:
        got = c.receive(16, 15)
        assert [m.message_id for m in got] == [sent.message_id]
        c.ack(got[0])

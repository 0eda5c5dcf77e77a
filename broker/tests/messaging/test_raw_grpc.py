"""Requests the official client would never send, over raw gRPC: each gets the
protocol's status code, and the broker keeps serving."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.ctl.testing import LocalBroker

META = (("x-mq-client-id", "raw-test-client"),)
Code = pb.Code


@pytest.fixture(scope="module")
def stub(broker: LocalBroker) -> Iterator[MessagingServiceStub]:
    channel = grpc.insecure_channel(broker.endpoints)
    try:
        yield MessagingServiceStub(channel)
    finally:
        channel.close()


def msg(topic: str = "raw", body: bytes = b"hello", **sp: object) -> pb.Message:
    system = pb.SystemProperties(message_id=sp.pop("message_id", uuid.uuid4().hex.upper()))
    for key, value in sp.items():
        if key == "keys":
            system.keys.extend(value)
        else:
            setattr(system, key, value)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=system, body=body)


def send(stub: MessagingServiceStub, *messages: pb.Message) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=messages), metadata=META, timeout=10)


def receive(
    stub: MessagingServiceStub,
    group: str,
    topic: str,
    *,
    sql: str | None = None,
    invisible_ms: int = 10_000,
    poll_ms: int = 0,
    timeout: float = 10,
) -> list[spb.ReceiveMessageResponse]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        batch_size=16,
    )
    if sql is not None:
        request.filter_expression.type = pb.FilterType.SQL
        request.filter_expression.expression = sql
    request.invisible_duration.FromMilliseconds(invisible_ms)
    request.long_polling_timeout.FromMilliseconds(poll_ms)
    return list(stub.ReceiveMessage(request, metadata=META, timeout=timeout))


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (msg(body=b""), Code.MESSAGE_BODY_EMPTY),
        (msg(body=b"x" * 65537), Code.MESSAGE_BODY_TOO_LARGE),
        (msg(topic="nope"), Code.TOPIC_NOT_FOUND),
        (msg(topic="bad topic"), Code.ILLEGAL_TOPIC),
        (msg(message_group="g"), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (msg(topic="ordered", message_group="x" * 64), Code.ILLEGAL_MESSAGE_GROUP),
        (msg(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (msg(keys=["  "]), Code.ILLEGAL_MESSAGE_KEY),
        (msg(message_id=""), Code.ILLEGAL_MESSAGE_ID),
    ],
    ids=[
        "empty",
        "too-large",
        "unknown-topic",
        "bad-topic",
        "type",
        "group-len",
        "tag",
        "key",
        "id",
    ],
)
def test_invalid_messages_get_their_status(
    stub: MessagingServiceStub, message: pb.Message, code: int
) -> None:
    response = send(stub, message)
    assert response.status.code == code, response.status
    assert response.entries[0].status.code == code


def test_reserved_property_names_are_refused(stub: MessagingServiceStub) -> None:
    message = msg()
    message.user_properties["UNIQ_KEY"] = "spoofed"
    assert send(stub, message).status.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_a_batch_reports_each_message(stub: MessagingServiceStub) -> None:
    good = [msg(body=f"b{i}".encode()) for i in range(3)]
    response = send(stub, good[0], msg(body=b""), good[1], good[2])
    assert response.status.code == Code.MULTIPLE_RESULTS
    codes = [e.status.code for e in response.entries]
    assert codes == [Code.OK, Code.MESSAGE_BODY_EMPTY, Code.OK, Code.OK]


def test_missing_client_id_is_refused(stub: MessagingServiceStub) -> None:
    response = stub.SendMessage(spb.SendMessageRequest(messages=[msg()]), timeout=10)
    assert response.status.code == Code.CLIENT_ID_REQUIRED


def test_receive_errors(stub: MessagingServiceStub) -> None:
    [answer] = receive(stub, "no-group", "raw")
    assert answer.status.code == Code.CONSUMER_GROUP_NOT_FOUND
    [answer] = receive(stub, "g-raw", "raw", sql="a = ")
    assert answer.status.code == Code.ILLEGAL_FILTER_EXPRESSION
    assert "position" in answer.status.message
    [answer] = receive(stub, "g-raw", "raw", invisible_ms=0)
    assert answer.status.code == Code.ILLEGAL_INVISIBLE_TIME


def test_receipt_handles_are_checked(stub: MessagingServiceStub) -> None:
    ack = stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="g-raw"),
            topic=pb.Resource(name="raw"),
            entries=[spb.AckMessageEntry(message_id="x", receipt_handle="garbage!!")],
        ),
        metadata=META,
        timeout=10,
    )
    assert ack.status.code == Code.INVALID_RECEIPT_HANDLE
    request = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="g-raw"), topic=pb.Resource(name="raw"), receipt_handle="AAAA"
    )
    request.invisible_duration.FromSeconds(5)
    change = stub.ChangeInvisibleDuration(request, metadata=META, timeout=10)
    assert change.status.code == Code.INVALID_RECEIPT_HANDLE
    assert change.receipt_handle == "AAAA"  # the client stores it before the status


def test_ack_with_an_older_handle_still_works(stub: MessagingServiceStub) -> None:
    send(stub, msg(body=b"renewed"))
    answers = receive(stub, "g-raw", "raw", invisible_ms=30_000, poll_ms=5000)
    delivered = [a.message for a in answers if a.HasField("message")]
    assert delivered, answers
    old = delivered[0].system_properties.receipt_handle
    request = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="g-raw"), topic=pb.Resource(name="raw"), receipt_handle=old
    )
    request.invisible_duration.FromSeconds(60)
    change = stub.ChangeInvisibleDuration(request, metadata=META, timeout=10)
    assert change.status.code == Code.OK and change.receipt_handle != old
    entries = [
        spb.AckMessageEntry(receipt_handle=a.system_properties.receipt_handle) for a in delivered
    ]
    entries[0] = spb.AckMessageEntry(receipt_handle=old)
    ack = stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="g-raw"), topic=pb.Resource(name="raw"), entries=entries
        ),
        metadata=META,
        timeout=10,
    )
    assert ack.status.code == Code.OK, ack


def test_long_poll_wakes_on_arrival_and_respects_the_deadline(stub: MessagingServiceStub) -> None:
    results: list[list[spb.ReceiveMessageResponse]] = []
    waiter = threading.Thread(
        target=lambda: results.append(receive(stub, "g-raw", "raw", poll_ms=20_000, timeout=30))
    )
    waiter.start()
    time.sleep(1.0)
    send(stub, msg(body=b"wake up"))
    waiter.join(timeout=25)
    assert not waiter.is_alive()
    bodies = [a.message.body for a in results[0] if a.HasField("message")]
    assert b"wake up" in bodies
    # A long poll longer than the call's deadline ends with a status, not an error.
    answers = receive(stub, "g-raw", "raw", poll_ms=30_000, timeout=2)
    assert [a.status.code for a in answers] == [Code.MESSAGE_NOT_FOUND]


def test_unoffered_rpcs_say_so(stub: MessagingServiceStub) -> None:
    answer = stub.UpdateOffset(spb.UpdateOffsetRequest(), metadata=META, timeout=10)
    assert answer.status.code == Code.NOT_IMPLEMENTED
    [pulled] = list(stub.PullMessage(spb.PullMessageRequest(), metadata=META, timeout=10))
    assert pulled.status.code == Code.NOT_IMPLEMENTED


def test_garbage_bytes_get_bad_request_and_the_broker_keeps_serving(
    broker: LocalBroker, stub: MessagingServiceStub
) -> None:
    channel = grpc.insecure_channel(broker.endpoints)
    raw_call = channel.unary_unary(
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        request_serializer=lambda b: b,
        response_deserializer=spb.SendMessageResponse.FromString,
    )
    for junk in (b"\xff\xff\xff\xff", b"\x0a\x05abc", bytes(range(256))):
        answer = raw_call(junk, metadata=META, timeout=10)
        assert answer.status.code == Code.BAD_REQUEST, answer
        assert "could not be decoded" in answer.status.message
    channel.close()
    assert send(stub, msg(body=b"still fine")).status.code == Code.OK

"""A receive that finds nothing on the group it asked is answered by a group that has
messages for the consumer group (messaging/cross_group.py), over raw gRPC against two
real standalone brokers, each its own group and each listing the other in its routes.

Before cross-group receives, a receive at an empty group waited out its whole long
poll and answered MESSAGE_NOT_FOUND while the other group held the backlog: with an
official client choosing a group per receive, a drain stalled (issue #25)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.cluster import RocketCluster
from rocketcluster.broker.messaging.cross_group import BORROW_HEADER
from rocketcluster.broker.messaging.receipt import decode_handle
from rocketcluster.ctl.testing import LocalBroker, local_broker, wait_for

META = (("x-mq-client-id", "cross-group-test"),)
Code = pb.Code
LONG_POLL_S = 20  # what a receive at an empty group would wait without the fix


def _cluster() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "cross"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 2, "replicas": 1, "flush": "async"},
                "topics": [
                    {"name": "orders", "queues": 2},
                    {"name": "later", "queues": 2},
                    {"name": "doomed", "queues": 2},
                    {"name": "pushed", "queues": 2},
                    {"name": "ledger", "queues": 2, "messageType": "FIFO"},
                ],
                "consumerGroups": [
                    {"name": "billing"},
                    {"name": "retries"},
                    {"name": "dead", "maxDeliveryAttempts": 3},
                    {"name": "pushers"},
                    {"name": "ledger-readers", "fifo": True},
                ],
            },
        }
    )


class Brokers:
    def __init__(self, handle: LocalBroker) -> None:
        self.handle = handle
        self.procs = sorted(
            (p for p in handle.state["processes"] if p["role"] == "broker"),
            key=lambda p: str(p["name"]),
        )
        self._channels = [grpc.insecure_channel(p["addresses"]["client"]) for p in self.procs]
        self.stubs = [MessagingServiceStub(c) for c in self._channels]

    @property
    def names(self) -> list[str]:
        return [str(p["name"]) for p in self.procs]

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def admin(self, i: int, path: str) -> Any:
        return httpx.get(f"http://{self.procs[i]['addresses']['admin']}{path}", timeout=5).json()

    def offsets(self, i: int, group: str, topic: str) -> list[dict[str, Any]]:
        return [r for r in self.admin(i, f"/v1/groups/{group}/offsets") if r["topic"] == topic]

    def metric(self, i: int, name: str) -> float:
        text = httpx.get(f"http://{self.procs[i]['addresses']['admin']}/metrics", timeout=5).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name + "{") or line.startswith(name + " ")
        )


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    with local_broker(_cluster(), tmp_path_factory.mktemp("cross")) as handle:
        b = Brokers(handle)
        try:
            yield b
        finally:
            b.close()


def _send(stub: MessagingServiceStub, topic: str, count: int, group: str = "") -> list[str]:
    ids = []
    for i in range(count):
        mid = uuid.uuid4().hex.upper()
        system = pb.SystemProperties(message_id=mid, message_group=group)
        message = pb.Message(
            topic=pb.Resource(name=topic), system_properties=system, body=f"m{i}".encode()
        )
        answer = stub.SendMessage(
            spb.SendMessageRequest(messages=[message]), metadata=META, timeout=10
        )
        assert answer.status.code == Code.OK, answer.status
        ids.append(mid)
    return ids


def _receive(
    stub: MessagingServiceStub,
    group: str,
    topic: str,
    *,
    batch: int = 32,
    invisible_ms: int = 30_000,
    poll_s: float = LONG_POLL_S,
    auto_renew: bool = False,
    metadata: tuple[tuple[str, str], ...] = META,
) -> tuple[list[pb.Message], int, float]:
    """The messages, the status code and how long the call took."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        batch_size=batch,
        auto_renew=auto_renew,
    )
    if not auto_renew:
        request.invisible_duration.FromMilliseconds(invisible_ms)
    request.long_polling_timeout.FromMilliseconds(int(poll_s * 1000))
    began = time.monotonic()
    answer = list(stub.ReceiveMessage(request, metadata=metadata, timeout=poll_s + 10))
    took = time.monotonic() - began
    status = next(r.status.code for r in answer if r.HasField("status"))
    return [r.message for r in answer if r.HasField("message")], status, took


def _ack(
    stub: MessagingServiceStub,
    group: str,
    topic: str,
    messages: list[pb.Message],
    metadata: tuple[tuple[str, str], ...] = META,
) -> spb.AckMessageResponse:
    entries = [
        spb.AckMessageEntry(
            message_id=m.system_properties.message_id,
            receipt_handle=m.system_properties.receipt_handle,
        )
        for m in messages
    ]
    request = spb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic), entries=entries
    )
    answer: spb.AckMessageResponse = stub.AckMessage(request, metadata=metadata, timeout=10)
    return answer


def test_an_empty_group_answers_with_the_backlog_of_another_at_once(brokers: Brokers) -> None:
    empty, full = brokers.stubs
    sent = set(_send(full, "orders", 40))
    got, status, took = _receive(empty, "billing", "orders")
    assert status == Code.OK
    assert len(got) == 32
    # Answered from the other group, not after this group's long poll.
    assert took < LONG_POLL_S / 2, f"answered after {took:.1f}s"
    owners = {decode_handle(m.system_properties.receipt_handle).group for m in got}
    assert owners == {brokers.names[1]}

    # The client acknowledges where it received (the group it asked): passed on.
    answer = _ack(empty, "billing", "orders", got)
    assert answer.status.code == Code.OK, answer
    rest, status, _ = _receive(empty, "billing", "orders")
    assert status == Code.OK and len(rest) == 8
    assert _ack(empty, "billing", "orders", rest).status.code == Code.OK
    assert {m.system_properties.message_id for m in got + rest} == sent
    rows = brokers.offsets(1, "billing", "orders")
    assert sum(r["lag"] for r in rows) == 0, rows
    assert brokers.metric(0, "rocketmq_cross_group_received_messages_total") == 40
    assert brokers.metric(0, "rocketmq_cross_group_passed_on_total") == 2
    # Nothing stayed behind on either side: no lag, nothing in flight or ready.
    for i in (0, 1):
        rows = brokers.offsets(i, "billing", "orders")
        assert all(r["lag"] == r["inflight"] == r["ready"] == 0 for r in rows), rows


def test_local_messages_come_first_and_a_long_poll_waits_only_when_no_group_has_any(
    brokers: Brokers,
) -> None:
    a, b = brokers.stubs
    mine = set(_send(a, "later", 3))
    _send(b, "later", 3)
    got, _, _ = _receive(a, "retries", "later")
    assert {m.system_properties.message_id for m in got} == mine  # its own, not borrowed
    _ack(a, "retries", "later", got)
    got, _, _ = _receive(a, "retries", "later")  # now the other group's
    assert {decode_handle(m.system_properties.receipt_handle).group for m in got} == {
        brokers.names[1]
    }
    _ack(a, "retries", "later", got)
    got, status, took = _receive(a, "retries", "later", poll_s=1.5)
    assert (got, status) == ([], Code.MESSAGE_NOT_FOUND)
    assert took >= 1.2  # nothing anywhere: the long poll is served in full


def test_invisibility_changes_and_dead_letters_reach_the_group_that_delivered(
    brokers: Brokers,
) -> None:
    a, b = brokers.stubs
    [mid] = _send(b, "doomed", 1)
    [msg], _, _ = _receive(a, "dead", "doomed", invisible_ms=60_000)
    request = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="dead"),
        topic=pb.Resource(name="doomed"),
        receipt_handle=msg.system_properties.receipt_handle,
        message_id=mid,
    )
    request.invisible_duration.FromMilliseconds(1000)
    changed = a.ChangeInvisibleDuration(request, metadata=META, timeout=10)
    assert changed.status.code == Code.OK, changed.status
    assert decode_handle(changed.receipt_handle).group == brokers.names[1]
    again = wait_for(
        lambda: _receive(a, "dead", "doomed", poll_s=0.5)[0], timeout=30, what="a redelivery"
    )
    assert [m.system_properties.message_id for m in again] == [mid]
    assert again[0].system_properties.delivery_attempt == 2

    forward = spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="dead"),
        topic=pb.Resource(name="doomed"),
        receipt_handle=again[0].system_properties.receipt_handle,
        message_id=mid,
        delivery_attempt=2,
        max_delivery_attempts=3,
    )
    moved = a.ForwardMessageToDeadLetterQueue(forward, metadata=META, timeout=10)
    assert moved.status.code == Code.OK, moved.status
    dlq = brokers.admin(1, "/v1/topics/%25DLQ%25dead")
    assert sum(q["maxOffset"] for q in dlq["queueOffsets"]) == 1, dlq


def test_a_passed_on_request_is_never_passed_on_again(brokers: Brokers) -> None:
    a, b = brokers.stubs
    _send(b, "orders", 1)
    [msg], _, _ = _receive(a, "billing", "orders")
    # As if group 1 had passed it here: group 0 must not send it back (one hop).
    looped = _ack(a, "billing", "orders", [msg], metadata=(*META, (BORROW_HEADER, "x")))
    assert looped.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    assert "passed on once already" in looped.entries[0].status.message
    # A borrowed receive is answered from the local queues only, without waiting.
    _send(b, "orders", 1)
    got, status, took = _receive(a, "billing", "orders", metadata=(*META, (BORROW_HEADER, "x")))
    assert (got, status) == ([], Code.MESSAGE_NOT_FOUND)
    assert took < LONG_POLL_S / 2
    # A handle of a group the cluster does not list is refused with its name.
    unknown = msg.system_properties.receipt_handle
    handle = decode_handle(unknown)._replace(group="nowhere").encode()
    msg.system_properties.receipt_handle = handle
    answer = _ack(a, "billing", "orders", [msg])
    assert answer.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    assert "'nowhere'" in answer.entries[0].status.message
    # The real handle still acknowledges both messages.
    msg.system_properties.receipt_handle = unknown
    assert _ack(a, "billing", "orders", [msg]).status.code == Code.OK
    got, _, _ = _receive(a, "billing", "orders")
    assert _ack(a, "billing", "orders", got).status.code == Code.OK


def test_push_consumers_receive_from_every_group_themselves(brokers: Brokers) -> None:
    """Auto-renewed receives (push consumers) do not borrow: QueryAssignment already
    gives them one assignment per group."""
    a, b = brokers.stubs
    _send(b, "pushed", 2)
    got, status, _ = _receive(a, "pushers", "pushed", auto_renew=True, poll_s=1)
    assert (got, status) == ([], Code.MESSAGE_NOT_FOUND)
    got, status, _ = _receive(b, "pushers", "pushed", auto_renew=True, poll_s=1)
    assert status == Code.OK and len(got) == 2
    _ack(b, "pushers", "pushed", got)


def test_fifo_order_holds_across_groups(brokers: Brokers) -> None:
    """A FIFO group's messages of one message group come in order, one in flight at a
    time per queue, when the other group serves them."""
    a, b = brokers.stubs
    ids = _send(b, "ledger", 5, group="account-7")
    seen: list[str] = []
    while len(seen) < len(ids):
        got, status, _ = _receive(a, "ledger-readers", "ledger", batch=1, poll_s=1)
        assert status == Code.OK, status
        # While this delivery is in flight, the queue gives nothing more.
        blocked, _, _ = _receive(a, "ledger-readers", "ledger", batch=1, poll_s=0.2)
        assert blocked == []
        seen += [m.system_properties.message_id for m in got]
        assert _ack(a, "ledger-readers", "ledger", got).status.code == Code.OK
    assert seen == ids


def test_a_group_that_cannot_answer_costs_a_receive_nothing_but_its_wait(
    tmp_path: Path,
) -> None:
    """The other group down: a receive at this one long-polls as before and answers
    MESSAGE_NOT_FOUND (no error), and the next ones do not ask the dead group again."""
    with local_broker(_cluster(), tmp_path) as handle:
        alone = Brokers(handle)
        try:
            handle.runtime.kill(alone.names[1])
            for _ in range(3):
                got, status, took = _receive(alone.stubs[0], "billing", "orders", poll_s=1)
                assert (got, status) == ([], Code.MESSAGE_NOT_FOUND)
                assert took < 5
            log = Path(alone.procs[0]["logPath"]).read_text()
            assert log.count("not asking broker group") == 1, log[-2000:]
        finally:
            alone.close()


def test_with_cross_group_receives_off_an_empty_group_waits_out_its_long_poll(
    tmp_path: Path,
) -> None:
    """``messaging.crossGroupReceive: false`` gives the behaviour before the fix: the
    receive waits its whole long poll at the empty group and answers nothing while the
    other group holds the consumer group's messages — what stalled the drain."""
    overrides = {"messaging": {"crossGroupReceive": False}}
    with local_broker(_cluster(), tmp_path, overrides) as handle:
        pair = Brokers(handle)
        try:
            _send(pair.stubs[1], "orders", 5)
            got, status, took = _receive(pair.stubs[0], "billing", "orders", poll_s=2)
            assert (got, status) == ([], Code.MESSAGE_NOT_FOUND)
            assert took >= 1.5
            rows = pair.offsets(1, "billing", "orders")
            assert rows == []  # the group never asked the other broker
        finally:
            pair.close()

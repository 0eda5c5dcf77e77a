"""ConsumeService (ReceiveBatch / AckBatch) on a real standalone broker, as LeanClient
uses it: every message once, with the fields the official protocol gives; an
unacknowledged one back with the next attempt; receipts usable by MessagingService
too; bad requests answered with the protocol's codes; and LeanClient against a server
without the service (the canned benchmark server) falls back to ReceiveMessage."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.client.batch_codec import RECEIPT, RECEIPT_SIZE
from rocketcluster.api.client.lean import LeanClient, LeanClientError, OutgoingMessage
from rocketcluster.api.client.lean_message import LeanMessage
from rocketcluster.api.cluster import RocketCluster
from rocketcluster.api.generated import consume_pb2 as cpb
from rocketcluster.api.generated.consume_pb2_grpc import ConsumeServiceStub
from rocketcluster.broker.messaging.codes import Code
from rocketcluster.broker.messaging.consume_service import MAX_REPLY_BYTES
from rocketcluster.ctl.bench.client_bench import CannedServer
from rocketcluster.ctl.testing import LocalBroker, local_broker

METADATA = (("x-mq-client-id", "batch-test"),)


def _cluster() -> RocketCluster:
    return RocketCluster.model_validate(
        {
            "metadata": {"name": "batch"},
            "spec": {
                "controller": {"replicas": 0},
                "brokers": {"groups": 1, "replicas": 1, "flush": "async"},
                "topics": [
                    {"name": "many", "queues": 4},
                    {"name": "again", "queues": 2},
                    {"name": "bad", "queues": 1},
                    {"name": "shared", "queues": 2},
                    {"name": "big", "queues": 2},
                ],
                "consumerGroups": [
                    {"name": "g-many"},
                    {"name": "g-again"},
                    {"name": "g-bad"},
                    {"name": "g-shared"},
                    {"name": "g-big"},
                ],
            },
        }
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    with local_broker(_cluster(), tmp_path_factory.mktemp("batch")) as handle:
        yield handle


async def _drain(
    client: LeanClient,
    group: str,
    topic: str,
    want: int,
    *,
    ack: bool = True,
    batch: int = 32,
    invisible_ms: int = 30_000,
) -> list[LeanMessage]:
    got: list[LeanMessage] = []
    deadline = time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        some = await client.receive(
            group, topic, batch=batch, invisible_ms=invisible_ms, poll_ms=500
        )
        got += some
        if some and ack:
            entries = await client.ack(group, topic, some)
            assert [e.status.code for e in entries] == [Code.OK] * len(some)
            assert [e.message_id for e in entries] == [m.message_id for m in some]
    return got


def _rpc_count(broker: LocalBroker, rpc: str) -> float:
    text = httpx.get(f"http://{broker.admin_address}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rocketmq_rpc_latency_count") and f'request_code="{rpc}"' in line
    )


async def test_every_message_once_with_its_fields_then_nothing(broker: LocalBroker) -> None:
    receives_before = _rpc_count(broker, "ReceiveBatch")
    async with LeanClient(broker.endpoints) as client:
        sent: dict[str, OutgoingMessage] = {}
        for i in range(10):
            batch = [
                OutgoingMessage(
                    f"body-{i}-{k}".encode() * (k + 1),
                    tag=f"t{k % 3}",
                    keys=(f"k{i}", f"k{k}"),
                    properties={"n": str(i * 100 + k), "empty": ""},
                )
                for k in range(30)
            ]
            entries = await client.send("many", batch)
            assert all(e.status.code == Code.OK for e in entries)
            sent.update({e.message_id: out for e, out in zip(entries, batch, strict=True)})
        got = await _drain(client, "g-many", "many", len(sent), batch=64)
        assert client.uses_consume_service
        assert sorted(m.message_id for m in got) == sorted(sent)  # each exactly once
        for msg in got:
            out = sent[msg.message_id]
            assert msg.body == out.body
            sp = msg.system_properties
            assert (sp.tag, list(sp.keys), msg.user_properties) == (
                out.tag,
                list(out.keys),
                out.properties,
            )
            assert sp.delivery_attempt == 1
            assert 0 <= sp.queue_id < 4
            assert msg.topic == "many"
            assert msg.store_timestamp_ms >= msg.born_timestamp_ms > 0
        per_queue: dict[int, list[int]] = {}
        for msg in got:
            per_queue.setdefault(msg.queue_id, []).append(msg.queue_offset)
        for offsets in per_queue.values():  # no gaps, no repeats within a queue
            assert sorted(offsets) == list(range(len(offsets)))
        assert await client.receive("g-many", "many", poll_ms=300) == []
    assert _rpc_count(broker, "ReceiveBatch") > receives_before  # not the fallback


async def test_unacknowledged_messages_come_back_with_the_next_attempt(
    broker: LocalBroker,
) -> None:
    async with LeanClient(broker.endpoints) as client:
        entries = await client.send("again", [OutgoingMessage(f"a{i}".encode()) for i in range(6)])
        ids = {e.message_id for e in entries}
        first = await _drain(client, "g-again", "again", 6, ack=False, invisible_ms=500)
        assert {m.message_id for m in first} == ids
        assert {m.delivery_attempt for m in first} == {1}
        half = first[:3]
        assert all(e.status.code == Code.OK for e in await client.ack("g-again", "again", half))
        second = await _drain(client, "g-again", "again", 3, invisible_ms=30_000)
        assert {m.message_id for m in second} == ids - {m.message_id for m in half}
        assert {m.delivery_attempt for m in second} == {2}
        # An acknowledged receipt acknowledges again (idempotent), as AckMessage does.
        assert all(e.status.code == Code.OK for e in await client.ack("g-again", "again", half))
        assert await client.receive("g-again", "again", poll_ms=700) == []


async def test_batch_receipts_work_in_messaging_service(broker: LocalBroker) -> None:
    """A receipt from ReceiveBatch, as text, is the handle AckMessage and
    ChangeInvisibleDuration take (a client rolled back to the official protocol)."""
    async with LeanClient(broker.endpoints) as client:
        await client.send("again", [OutgoingMessage(b"cross-1"), OutgoingMessage(b"cross-2")])
        got = await _drain(client, "g-again", "again", 2, ack=False)
        assert sorted(m.body for m in got) == [b"cross-1", b"cross-2"]
    with grpc.insecure_channel(broker.endpoints) as channel:
        stub = MessagingServiceStub(channel)
        change = stub.ChangeInvisibleDuration(
            spb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name="g-again"),
                topic=pb.Resource(name="again"),
                receipt_handle=got[0].receipt_handle,
                message_id=got[0].message_id,
            ),
            metadata=METADATA,
            timeout=10,
        )
        assert change.status.code == Code.OK
        ack = spb.AckMessageRequest(
            group=pb.Resource(name="g-again"), topic=pb.Resource(name="again")
        )
        for msg in got:
            ack.entries.add(message_id=msg.message_id, receipt_handle=msg.receipt_handle)
        answer = stub.AckMessage(ack, metadata=METADATA, timeout=10)
        assert answer.status.code == Code.OK, answer.status.message


async def test_concurrent_acks_share_requests_and_keep_their_own_answers(
    broker: LocalBroker,
) -> None:
    async with LeanClient(broker.endpoints) as client:
        await client.send("shared", [OutgoingMessage(f"s{i}".encode()) for i in range(64)])
        got = await _drain(client, "g-shared", "shared", 64, ack=False, batch=64)
        assert len(got) == 64
        chunks = [got[i : i + 8] for i in range(0, 64, 8)]
        never = RECEIPT.pack(1, 0, 10**9, 1, 1, 1)  # a message never delivered
        forged = LeanMessage("shared", never, 0, 10**9, 1, 0, 0, b"", b"")
        chunks[3] = [*chunks[3][:2], forged, *chunks[3][2:]]
        before = client.ack_requests
        answers = await asyncio.gather(*(client.ack("g-shared", "shared", c) for c in chunks))
        assert client.ack_requests - before < len(chunks)  # shared requests
        for chunk, entries in zip(chunks, answers, strict=True):
            expected = [Code.INVALID_RECEIPT_HANDLE if m is forged else Code.OK for m in chunk]
            assert [e.status.code for e in entries] == expected
            assert [e.message_id for e in entries] == [m.message_id for m in chunk]
        assert await client.receive("g-shared", "shared", poll_ms=300) == []


async def test_an_answer_stops_at_its_byte_budget_and_holds_nothing_back(
    broker: LocalBroker,
) -> None:
    """One answer is one frame: 64 messages of 300 KiB must not become 19 MiB. What the
    budget leaves out is not delivered either — with a 10-minute invisible time, any
    message marked delivered but not sent would not come back within the test."""
    kib = 1024
    async with LeanClient(broker.endpoints) as client:
        bodies = {f"big-{i}".encode() + bytes(300 * kib) for i in range(20)}
        for chunk in (list(bodies)[i : i + 4] for i in range(0, 20, 4)):
            entries = await client.send("big", [OutgoingMessage(b) for b in chunk])
            assert all(e.status.code == Code.OK for e in entries)

        async def receive(max_bytes: int) -> list[LeanMessage]:
            got = await client.receive(
                "g-big", "big", batch=64, invisible_ms=600_000, poll_ms=500, max_bytes=max_bytes
            )
            if got:
                await client.ack("g-big", "big", got)
            return got

        answers: list[list[LeanMessage]] = []
        deadline = time.monotonic() + 60
        for max_bytes in (0, 1000 * kib, 1000):  # the default (4 MiB), 1000 KiB, less than one
            answers.append(await receive(max_bytes))
        while sum(map(len, answers)) < len(bodies) and time.monotonic() < deadline:
            answers.append(await receive(1000))
        sizes = [len(a) for a in answers]
        # 300 KiB each: 4 MiB holds 13 whole and the 14th crosses; 1000 KiB: 3, then the
        # 4th; a budget below one message still brings one.
        assert sizes[:3] == [14, 4, 1], sizes
        got = [m.body for a in answers for m in a]
        assert sorted(got) == sorted(bodies)  # all of them, each once, none held back
        assert await client.receive("g-big", "big", poll_ms=300) == []


def test_bad_requests_get_the_protocols_codes(broker: LocalBroker) -> None:
    with grpc.insecure_channel(broker.endpoints) as channel:
        stub = ConsumeServiceStub(channel)  # type: ignore[no-untyped-call]

        def receive(**kw: object) -> int:
            fields = {"group": "g-bad", "topic": "bad", "batch_size": 8, "invisible_ms": 5000}
            request = cpb.ReceiveBatchRequest(**{**fields, **kw})  # type: ignore[arg-type]
            reply = stub.ReceiveBatch(request, metadata=METADATA, timeout=10)
            assert reply.count == 0 and not reply.records
            return int(reply.status.code)

        def ack(receipts: bytes, **kw: str) -> cpb.AckBatchReply:
            fields = {"group": "g-bad", "topic": "bad", **kw}
            request = cpb.AckBatchRequest(receipts=receipts, **fields)
            reply: cpb.AckBatchReply = stub.AckBatch(request, metadata=METADATA, timeout=10)
            return reply

        assert receive(topic="no-such-topic") == Code.TOPIC_NOT_FOUND
        assert receive(group="no-such-group") == Code.CONSUMER_GROUP_NOT_FOUND
        assert receive(batch_size=1_000_000) == Code.BAD_REQUEST
        assert receive(batch_size=0) == Code.BAD_REQUEST
        assert receive(invisible_ms=1) == Code.ILLEGAL_INVISIBLE_TIME
        assert receive(max_bytes=-1) == Code.BAD_REQUEST
        assert receive(max_bytes=MAX_REPLY_BYTES + 1) == Code.BAD_REQUEST
        assert receive(sql=True, expression="a >") == Code.ILLEGAL_FILTER_EXPRESSION
        assert receive() == Code.MESSAGE_NOT_FOUND  # an empty topic: nothing, no error
        assert receive(batch_size=1) == Code.MESSAGE_NOT_FOUND
        assert ack(b"").status.code == Code.INVALID_RECEIPT_HANDLE
        assert ack(b"x" * (RECEIPT_SIZE + 1)).status.code == Code.INVALID_RECEIPT_HANDLE
        never = RECEIPT.pack(1, 0, 10**9, 1, 1, 1)  # an offset never delivered
        wrong_version = RECEIPT.pack(9, 0, 0, 1, 1, 1)
        no_queue = RECEIPT.pack(1, 7, 0, 1, 1, 1)  # the topic has one queue
        reply = ack(never + wrong_version + no_queue)
        assert reply.status.code == Code.INVALID_RECEIPT_HANDLE
        assert [(f.index, f.status.code) for f in reply.failed] == [
            (i, Code.INVALID_RECEIPT_HANDLE) for i in range(3)
        ]
        assert ack(never, topic="no-such-topic").status.code == Code.TOPIC_NOT_FOUND
        assert ack(never, group="no-such-group").status.code == Code.CONSUMER_GROUP_NOT_FOUND
        assert ack(never * 5000).status.code == Code.BAD_REQUEST  # too many receipts
        # Bytes that are no request at all: answered, not a gRPC error.
        raw = channel.unary_unary(
            "/rocketcluster.consume.v1.ConsumeService/ReceiveBatch",
            response_deserializer=cpb.ReceiveBatchReply.FromString,
        )
        assert raw(b"\xff\xff\xff", metadata=METADATA, timeout=10).status.code == Code.BAD_REQUEST
        # No client id: refused as MessagingService refuses it.
        request = cpb.ReceiveBatchRequest(group="g-bad", topic="bad", batch_size=1)
        assert stub.ReceiveBatch(request, timeout=10).status.code == Code.CLIENT_ID_REQUIRED


async def test_lean_client_errors_carry_the_code(broker: LocalBroker) -> None:
    async with LeanClient(broker.endpoints) as client:
        with pytest.raises(LeanClientError) as info:
            await client.receive("g-bad", "no-such-topic")
        assert info.value.code == Code.TOPIC_NOT_FOUND


def test_without_consume_service_the_client_falls_back_to_receive_message() -> None:
    """The canned benchmark server with MessagingService only (a broker from before
    ConsumeService, during a roll): LeanClient receives and acks over it."""
    canned = CannedServer(messaging_only=True)

    async def run() -> tuple[list[LeanMessage], list[int], bool]:
        async with LeanClient(canned.endpoint) as client:
            got = await client.receive("g", "t", batch=5)
            fell_back = not client.uses_consume_service
            entries = await client.ack("g", "t", got)
            return got, [e.status.code for e in entries], fell_back

    try:
        got, codes, fell_back = asyncio.run(run())
    finally:
        canned.stop()
    assert fell_back
    assert len(got) == 5 and all(len(m.body) == 1024 for m in got)
    assert {m.receipt_handle for m in got} == {"canned"}  # its handle, as it was given
    assert codes == [Code.OK] * 5


def test_the_canned_ceiling_serves_consume_service() -> None:
    """The benchmark's ceiling for lean_consume runs in the shape LeanClient uses."""
    canned = CannedServer()

    async def run() -> tuple[list[LeanMessage], list[int], bool]:
        async with LeanClient(canned.endpoint) as client:
            got = await client.receive("g", "t", batch=7)
            entries = await client.ack("g", "t", got)
            return got, [e.status.code for e in entries], client.uses_consume_service

    try:
        got, codes, batched = asyncio.run(run())
    finally:
        canned.stop()
    assert batched
    assert [m.queue_offset for m in got] == list(range(7))
    assert all(len(m.body) == 1024 and m.message_id for m in got)
    assert codes == [Code.OK] * 7

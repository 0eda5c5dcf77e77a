"""LeanClient: a small asyncio client of the RocketMQ 5 protocol for tools and benchmarks.

Unlike the official client it sends several messages per SendMessage, receives and
acknowledges in batches — one frame per batch over our ConsumeService (consume.proto),
falling back to ReceiveMessage/AckMessage against a broker without it — and lets the
caller keep many requests in flight on one grpc.aio channel: one RPC (or one frame)
per message would cap a broker near 3k msgs/s (DESIGN §9).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.auth import SIGNATURE_ALGORITHM
from rocketcluster.api.client.ack_batcher import AckBatcher
from rocketcluster.api.client.batch_codec import unpack_messages
from rocketcluster.api.client.lean_message import ACK_OK, AckEntry, AckStatus, LeanMessage
from rocketcluster.api.generated import consume_pb2 as cpb
from rocketcluster.api.generated.consume_pb2_grpc import ConsumeServiceStub
from rocketcluster.api.tls import ClientTls, grpc_channel

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
]


# After an UNIMPLEMENTED (a broker without ConsumeService), the official protocol for
# this long before ConsumeService is tried again.
OFFICIAL_RECHECK_S = 30.0
# AckBatch answers that carry per-receipt results (the others fail the whole request).
_ACK_ANSWERED = frozenset({pb.Code.OK, pb.Code.MULTIPLE_RESULTS})


class LeanClientError(RuntimeError):
    def __init__(self, rpc: str, status: pb.Status) -> None:
        super().__init__(f"{rpc}: {pb.Code.Name(status.code)} ({status.code}): {status.message}")
        self.code = status.code
        self.message = status.message


@dataclass
class OutgoingMessage:
    body: bytes
    tag: str = ""
    keys: Sequence[str] = ()
    message_group: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    message_id: str = ""


def new_message_id() -> str:
    return uuid.uuid4().hex.upper()


class LeanClient:
    def __init__(
        self,
        endpoint: str,
        *,
        client_id: str | None = None,
        timeout: float = 10.0,
        tls: ClientTls | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        """``credentials``: (access key, secret key) for a cluster with security.auth;
        requests are signed as the official clients sign them, once a second."""
        self.endpoint = endpoint
        self.client_id = client_id or f"lean-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.timeout = timeout
        self._channel = grpc_channel(endpoint, tls, CHANNEL_OPTIONS)
        self._stub = MessagingServiceStub(self._channel)
        consume = ConsumeServiceStub(self._channel)
        self._receive_batch = consume.ReceiveBatch
        self._ack_batch = consume.AckBatch
        self._acks = AckBatcher(self._send_acks)
        self._official_until = 0.0
        self._base: tuple[tuple[str, str], ...] = (
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "PYTHON"),
        )
        self._credentials = credentials
        self._signed_at = -1
        self._signed: tuple[tuple[str, str], ...] = self._base

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...]:
        if self._credentials is None:
            return self._base
        second = int(time.time())
        if second != self._signed_at:
            ak, sk = self._credentials
            date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
            signature = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest()
            authorization = (
                f"{SIGNATURE_ALGORITHM} Credential={ak}, SignedHeaders=x-mq-date-time, "
                f"Signature={signature}"
            )
            self._signed = (
                *self._base,
                ("x-mq-date-time", date),
                ("authorization", authorization),
            )
            self._signed_at = second
        return self._signed

    async def close(self) -> None:
        await self._channel.close()

    async def wait_ready(self) -> None:
        """Until the connection is up (bound it with ``asyncio.timeout``). A call on a
        channel that is still connecting fails at once with UNAVAILABLE, and gRPC gives
        one attempt to connect 20 s: a broker just restarted on a starved machine may
        need several."""
        await self._channel.channel_ready()

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def query_route(self, topic: str) -> list[pb.MessageQueue]:
        """The topic's queues, each with the endpoint that serves it (what the official
        clients ask before their first send or receive, and every 30 s after)."""
        response = await self._stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)),
            metadata=self._metadata,
            timeout=self.timeout,
        )
        if response.status.code != pb.Code.OK:
            raise LeanClientError("QueryRoute", response.status)
        return list(response.message_queues)

    async def heartbeat(self, group: str = "") -> None:
        """What every official client sends every 10 s (a consumer names its group)."""
        response = await self._stub.Heartbeat(
            spb.HeartbeatRequest(
                group=pb.Resource(name=group) if group else None,
                client_type=pb.ClientType.SIMPLE_CONSUMER if group else pb.ClientType.PRODUCER,
            ),
            metadata=self._metadata,
            timeout=self.timeout,
        )
        if response.status.code != pb.Code.OK:
            raise LeanClientError("Heartbeat", response.status)

    async def send(
        self, topic: str, messages: Sequence[OutgoingMessage]
    ) -> list[spb.SendResultEntry]:
        """Send ``messages`` in one request; raises when the request as a whole fails,
        returns the per-message entries (each with its own status) otherwise."""
        request = spb.SendMessageRequest()
        for out in messages:
            msg = request.messages.add()
            msg.topic.name = topic
            msg.body = out.body
            sp = msg.system_properties
            sp.message_id = out.message_id or new_message_id()
            if out.tag:
                sp.tag = out.tag
            if out.keys:
                sp.keys.extend(out.keys)
            if out.message_group:
                sp.message_group = out.message_group
                sp.message_type = pb.MessageType.FIFO
            else:
                sp.message_type = pb.MessageType.NORMAL
            sp.body_encoding = pb.Encoding.IDENTITY
            sp.born_timestamp.GetCurrentTime()
            for key, value in out.properties.items():
                msg.user_properties[key] = value
        response = await self._stub.SendMessage(
            request, metadata=self._metadata, timeout=self.timeout
        )
        if response.status.code not in (pb.Code.OK, pb.Code.MULTIPLE_RESULTS):
            raise LeanClientError("SendMessage", response.status)
        return list(response.entries)

    async def receive(
        self,
        group: str,
        topic: str,
        *,
        batch: int = 32,
        invisible_ms: int = 30_000,
        poll_ms: int = 0,
        sql: str | None = None,
        tag: str = "*",
        max_bytes: int = 0,
    ) -> list[LeanMessage]:
        """Up to ``batch`` messages, waiting up to ``poll_ms`` for the first: one
        ReceiveBatch (ConsumeService), or ReceiveMessage from a broker without it.

        ``max_bytes`` bounds the bodies and properties of one ReceiveBatch answer (0:
        the broker's default, 4 MiB); the first message comes whatever its size."""
        if self._batch_protocol():
            request = cpb.ReceiveBatchRequest(
                group=group,
                topic=topic,
                batch_size=batch,
                invisible_ms=invisible_ms,
                long_polling_ms=poll_ms,
                sql=sql is not None,
                expression=sql if sql is not None else tag,
                max_bytes=max_bytes,
            )
            try:
                reply = await self._receive_batch(
                    request, metadata=self._metadata, timeout=self.timeout + poll_ms / 1000
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._no_batch_protocol()
            else:
                code = reply.status.code
                if code != pb.Code.OK:
                    if code == pb.Code.MESSAGE_NOT_FOUND:
                        return []
                    raise LeanClientError("ReceiveBatch", reply.status)
                return [
                    LeanMessage(topic, *packed)
                    for packed in unpack_messages(reply.records, reply.count)
                ]
        return await self._receive_official(group, topic, batch, invisible_ms, poll_ms, sql, tag)

    async def _receive_official(
        self,
        group: str,
        topic: str,
        batch: int,
        invisible_ms: int,
        poll_ms: int,
        sql: str | None,
        tag: str,
    ) -> list[LeanMessage]:
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            batch_size=batch,
        )
        request.filter_expression.type = pb.FilterType.SQL if sql else pb.FilterType.TAG
        request.filter_expression.expression = sql or tag
        request.invisible_duration.FromMilliseconds(invisible_ms)
        request.long_polling_timeout.FromMilliseconds(poll_ms)
        messages = []
        call = self._stub.ReceiveMessage(
            request, metadata=self._metadata, timeout=self.timeout + poll_ms / 1000
        )
        async for response in call:
            if response.HasField("status") and response.status.code not in (
                pb.Code.OK,
                pb.Code.MESSAGE_NOT_FOUND,
            ):
                raise LeanClientError("ReceiveMessage", response.status)
            if response.HasField("message"):
                messages.append(LeanMessage.from_pb(response.message))
        return messages

    async def ack(self, group: str, topic: str, messages: Sequence[LeanMessage]) -> list[AckEntry]:
        """Acknowledge ``messages`` in one request; returns the per-entry results (in
        the order of ``messages``)."""
        if not messages:
            return []
        if self._batch_protocol():
            try:
                answer = await self._acks.ack(group, topic, b"".join([m.receipt for m in messages]))
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._no_batch_protocol()
            else:
                if not answer.failed and answer.status.code not in _ACK_ANSWERED:
                    raise LeanClientError("AckBatch", answer.status)
                entries = [AckEntry(m, ACK_OK) for m in messages]
                for index, status in answer.failed:
                    entries[index] = AckEntry(
                        messages[index], AckStatus(status.code, status.message)
                    )
                return entries
        return await self._ack_official(group, topic, messages)

    async def _ack_official(
        self, group: str, topic: str, messages: Sequence[LeanMessage]
    ) -> list[AckEntry]:
        request = spb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic)
        )
        for msg in messages:
            request.entries.add(message_id=msg.message_id, receipt_handle=msg.receipt_handle)
        response = await self._stub.AckMessage(
            request, metadata=self._metadata, timeout=self.timeout
        )
        if response.status.code not in (pb.Code.OK, pb.Code.MULTIPLE_RESULTS):
            raise LeanClientError("AckMessage", response.status)
        return [
            AckEntry(e.message_id, AckStatus(e.status.code, e.status.message))
            for e in response.entries
        ]

    async def _send_acks(self, group: str, topic: str, receipts: bytes) -> cpb.AckBatchReply:
        request = cpb.AckBatchRequest(group=group, topic=topic, receipts=receipts)
        reply: cpb.AckBatchReply = await self._ack_batch(
            request, metadata=self._metadata, timeout=self.timeout
        )
        return reply

    @property
    def ack_requests(self) -> int:
        """AckBatch requests made so far (concurrent acks share them)."""
        return self._acks.requests

    @property
    def uses_consume_service(self) -> bool:
        """Whether receive and ack go over ConsumeService right now (False for a while
        after a broker answered UNIMPLEMENTED)."""
        return self._batch_protocol()

    def _batch_protocol(self) -> bool:
        """Whether to try ConsumeService: yes unless the broker lately answered
        UNIMPLEMENTED (an older broker during a roll; asked again after a while)."""
        return time.monotonic() >= self._official_until

    def _no_batch_protocol(self) -> None:
        self._official_until = time.monotonic() + OFFICIAL_RECHECK_S

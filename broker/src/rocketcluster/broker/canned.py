"""The benchmark ceiling: a MessagingService that answers without doing any work.

SendMessage answers OK for every message without storing it; ReceiveMessage answers
with ready-made messages; AckMessage answers OK; so do ConsumeService's ReceiveBatch and
AckBatch (LeanClient's receive and ack), unless started with ``--messaging-only``.
Routes and Telemetry are answered as a broker does, so the official client runs
against it unchanged. Comparing the real broker with this server, driven by the same
client in the same run, shows what the broker's own work costs.

Beside it, on the same port, the transport limit: a generic service with no protobuf at
all (``Raw``, served without (de)serializers). ``Stream`` answers as many pre-built 1 KiB
``bytes`` messages as its request asks for (a 4-byte big-endian count); ``Batch`` takes
any bytes and answers their length (4 bytes, big-endian); ``Fetch`` answers as many
1 KiB messages as asked for in one ``bytes`` answer (a batched receive's shape).
Nothing but yielding per message: what grpc.aio itself carries on this machine.

``python -m rocketcluster.broker.canned --host H --port P``
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rocketcluster.api.client.batch_codec import encode_properties, pack_message
from rocketcluster.api.generated import consume_pb2 as cpb
from rocketcluster.api.generated import consume_pb2_grpc
from rocketcluster.broker.messaging.codes import OK_STATUS

QUEUES = 8
BODY = b"x" * 1024
RAW_SERVICE = "rocketcluster.bench.Raw"
RAW_STREAM = f"/{RAW_SERVICE}/Stream"
RAW_BATCH = f"/{RAW_SERVICE}/Batch"
RAW_FETCH = f"/{RAW_SERVICE}/Fetch"


class CannedServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, host: str, port: int) -> None:
        self._broker = pb.Broker(
            name="canned",
            id=0,
            endpoints=pb.Endpoints(
                scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host=host, port=port)]
            ),
        )
        self._message = pb.Message(body=BODY)
        sp = self._message.system_properties
        sp.body_encoding = pb.Encoding.IDENTITY
        sp.body_digest.type = pb.DigestType.CRC32
        sp.body_digest.checksum = "00000000"
        sp.delivery_attempt = 1
        sp.message_type = pb.MessageType.NORMAL
        sp.receipt_handle = "canned"
        sp.store_timestamp.GetCurrentTime()
        sp.born_timestamp.GetCurrentTime()
        self._batches: dict[tuple[str, int], list[spb.ReceiveMessageResponse]] = {}

    def _queues(self, topic: pb.Resource) -> list[pb.MessageQueue]:
        return [
            pb.MessageQueue(
                topic=topic,
                id=q,
                permission=pb.Permission.READ_WRITE,
                broker=self._broker,
                accept_message_types=[pb.MessageType.NORMAL, pb.MessageType.FIFO],
            )
            for q in range(QUEUES)
        ]

    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: Any
    ) -> spb.QueryRouteResponse:
        return spb.QueryRouteResponse(status=OK_STATUS, message_queues=self._queues(request.topic))

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: Any
    ) -> spb.QueryAssignmentResponse:
        queue = self._queues(request.topic)[0]
        queue.id = -1
        return spb.QueryAssignmentResponse(
            status=OK_STATUS, assignments=[pb.Assignment(message_queue=queue)]
        )

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        return spb.HeartbeatResponse(status=OK_STATUS)

    async def NotifyClientTermination(
        self, request: Any, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        return spb.NotifyClientTerminationResponse(status=OK_STATUS)

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        async for command in request_iterator:
            if command.HasField("settings"):
                reply = pb.Settings()
                reply.CopyFrom(command.settings)
                reply.metric.on = False
                if command.settings.client_type == pb.ClientType.PRODUCER:
                    reply.publishing.max_body_size = 4 * 1024 * 1024
                else:
                    reply.subscription.long_polling_timeout.FromSeconds(20)
                    reply.subscription.receive_batch_size = 32
                    reply.backoff_policy.max_attempts = 16
                    reply.backoff_policy.customized_backoff.next.add(seconds=1)
                yield spb.TelemetryCommand(status=OK_STATUS, settings=reply)

    async def SendMessage(
        self, request: spb.SendMessageRequest, context: Any
    ) -> spb.SendMessageResponse:
        entries = [
            spb.SendResultEntry(
                status=OK_STATUS, message_id=m.system_properties.message_id, offset=0
            )
            for m in request.messages
        ]
        return spb.SendMessageResponse(status=OK_STATUS, entries=entries)

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        for response in self._batch(request.message_queue.topic.name, request.batch_size or 32):
            yield response

    def _batch(self, topic: str, size: int) -> list[spb.ReceiveMessageResponse]:
        """Ready-made answers, built once per (topic, size): no work per request."""
        key = (topic, size)
        cached = self._batches.get(key)
        if cached is None:
            cached = [spb.ReceiveMessageResponse(status=OK_STATUS)]
            for i in range(size):
                message = pb.Message()
                message.CopyFrom(self._message)
                message.topic.name = topic
                message.system_properties.message_id = f"{i:032X}"
                cached.append(spb.ReceiveMessageResponse(message=message))
            done = spb.ReceiveMessageResponse()
            done.delivery_timestamp.GetCurrentTime()
            cached.append(done)
            self._batches[key] = cached
        return cached

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: Any
    ) -> spb.AckMessageResponse:
        entries = [
            spb.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=OK_STATUS
            )
            for e in request.entries
        ]
        return spb.AckMessageResponse(status=OK_STATUS, entries=entries)


class CannedConsume:
    """ConsumeService (consume.proto) answering ready-made packed batches: the ceiling
    of LeanClient's receive and ack in the shape it uses against a broker (one unary
    ReceiveBatch per batch, one unary AckBatch)."""

    def __init__(self) -> None:
        self._replies: dict[tuple[str, int], cpb.ReceiveBatchReply] = {}
        self._ok = cpb.AckBatchReply(status=cpb.Status(code=pb.Code.OK, message="OK"))

    async def ReceiveBatch(
        self, request: cpb.ReceiveBatchRequest, context: Any
    ) -> cpb.ReceiveBatchReply:
        size = request.batch_size or 32
        key = (request.topic, size)
        reply = self._replies.get(key)
        if reply is None:
            parts: list[bytes] = []
            for i in range(size):
                props = encode_properties({"UNIQ_KEY": f"{i:032X}"})
                pack_message(parts, 0, i, 1, i, 0, 0, 0, props, BODY)
            reply = cpb.ReceiveBatchReply(
                status=cpb.Status(code=pb.Code.OK, message="OK"),
                count=size,
                records=b"".join(parts),
                invisible_ms=request.invisible_ms,
            )
            self._replies[key] = reply
        return reply

    async def AckBatch(self, request: cpb.AckBatchRequest, context: Any) -> cpb.AckBatchReply:
        return self._ok


async def _raw_stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for _ in range(int.from_bytes(request, "big")):
        yield BODY


async def _raw_batch(request: bytes, context: Any) -> bytes:
    return len(request).to_bytes(4, "big")


async def _raw_fetch(request: bytes, context: Any) -> bytes:
    return BODY * int.from_bytes(request, "big")


def raw_handler() -> grpc.GenericRpcHandler:
    """The transport limit: bytes in, bytes out, no (de)serializers."""
    return grpc.method_handlers_generic_handler(
        RAW_SERVICE,
        {
            "Stream": grpc.unary_stream_rpc_method_handler(_raw_stream),
            "Batch": grpc.unary_unary_rpc_method_handler(_raw_batch),
            "Fetch": grpc.unary_unary_rpc_method_handler(_raw_fetch),
        },
    )


async def serve(host: str, port: int, consume_service: bool = True) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    service_pb2_grpc.add_MessagingServiceServicer_to_server(CannedServicer(host, port), server)
    if consume_service:
        add_consume = consume_pb2_grpc.add_ConsumeServiceServicer_to_server
        add_consume(CannedConsume(), server)  # type: ignore[no-untyped-call]
    server.add_generic_rpc_handlers((raw_handler(),))
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    print(f"READY {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description="A MessagingService that does no work.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--messaging-only",
        action="store_true",
        help="without ConsumeService (a broker from before it, as LeanClient's fallback sees)",
    )
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port, consume_service=not args.messaging_only))


if __name__ == "__main__":
    main()

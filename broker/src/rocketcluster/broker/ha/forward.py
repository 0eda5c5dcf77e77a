"""Forwarder: a broker that is not its group's master passes client requests on to
the master and relays the answer, so a client holding a connection to a demoted or
slave broker keeps working until its routes move on. A master also passes requests
to another group's endpoint with it (messaging/cross_group.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

from rocketcluster.api.tls import ChannelPool, ClientTls

CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.enable_retries", 0),
]
FORWARDED_HEADERS = {
    "x-mq-client-id",
    "x-mq-namespace",
    "x-mq-language",
    "x-mq-client-version",
    "x-mq-date-time",
    "x-mq-request-id",
    "authorization",
    # A request one broker group passes to another (messaging/cross_group.py): kept
    # when the other group's slave forwards it to its master.
    "x-rc-borrowed",
}
# What marks a request one broker forwarded to its own group's master: that master
# serves it, whatever it thinks of its role.
FORWARDED = (("x-rc-forwarded", "1"),)


class Forwarder:
    def __init__(self, tls: ClientTls | None = None) -> None:
        # The master's client port speaks TLS when on; channels follow cert renewals.
        self._channels = ChannelPool(tls, CHANNEL_OPTIONS)

    def _stub(self, endpoint: str) -> MessagingServiceStub:
        return MessagingServiceStub(self._channels.channel(endpoint))

    @staticmethod
    def _metadata(
        context: Any, headers: tuple[tuple[str, str], ...]
    ) -> tuple[tuple[str, str], ...]:
        found = []
        for key, value in context.invocation_metadata() or ():
            if key in FORWARDED_HEADERS:
                found.append((key, value if isinstance(value, str) else value.decode()))
        return (*found, *headers)

    @staticmethod
    def _timeout(context: Any, default: float, cap: float | None) -> float:
        remaining = context.time_remaining() or default
        return remaining if cap is None else min(remaining, cap)

    async def unary(
        self,
        endpoint: str,
        method: str,
        request: Any,
        context: Any,
        *,
        headers: tuple[tuple[str, str], ...] = FORWARDED,
        within: float | None = None,
    ) -> Any:
        """``method`` at ``endpoint`` with the client's identity headers and
        ``headers``, within the call's own deadline (and ``within`` seconds)."""
        call = getattr(self._stub(endpoint), method)
        return await call(
            request,
            metadata=self._metadata(context, headers),
            timeout=self._timeout(context, 10.0, within),
        )

    async def stream(
        self,
        endpoint: str,
        method: str,
        request: Any,
        context: Any,
        *,
        headers: tuple[tuple[str, str], ...] = FORWARDED,
        within: float | None = None,
    ) -> AsyncIterator[Any]:
        call = getattr(self._stub(endpoint), method)
        async for response in call(
            request,
            metadata=self._metadata(context, headers),
            timeout=self._timeout(context, 30.0, within),
        ):
            yield response

    async def call(
        self, endpoint: str, path: str, request: Any, reply_type: Any, context: Any
    ) -> Any:
        """A unary call of another service on the master's client port (ConsumeService:
        messaging/consume_service.py), relayed like the MessagingService ones."""
        call = self._channels.channel(endpoint).unary_unary(
            path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=reply_type.FromString,
        )
        return await call(
            request,
            metadata=self._metadata(context, FORWARDED),
            timeout=self._timeout(context, 10.0, None),
        )

    async def close(self) -> None:
        await self._channels.close()

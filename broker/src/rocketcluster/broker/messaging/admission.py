"""ClientAdmission: the client port's per-client limits (api/limits.py), as the
MessagingService's method handlers wrapping the servicer (no gRPC interceptor).

Every RPC is admitted or refused before its handler runs. A refused one gets the
protocol's answer — a response whose ``status`` is TOO_MANY_REQUESTS (42900) naming
the limit — and is never queued, so a client over its limits learns it at once while
every other client keeps being served. What is counted, all while an RPC is in
progress (admitted, handler not yet finished):

- connections: distinct gRPC peers (``ip:port``, one per HTTP/2 connection) with at
  least one RPC in progress, in total and per client IP — gRPC Python has no accept
  hook, so an extra connection is refused RPC by RPC, not at accept;
- in-flight requests per client id (``x-mq-client-id``; the peer when it is missing),
  streams included (a Telemetry stream counts for its whole life);
- in-flight request bytes per client id (the request message's encoded size, from
  the unary request): one request always passes when the client holds nothing.

A request whose bytes do not decode is answered BAD_REQUEST in a response's status
(gRPC alone would end the call UNKNOWN with the decoder's exception); a Telemetry
stream ends there, with that answer.

RPCs of all clients together are bounded by gRPC itself (``maximum_concurrent_rpcs``:
RESOURCE_EXHAUSTED before the RPC reaches the broker), and so are streams per
connection (``grpc.max_concurrent_streams``, ``server_options``): a client that has
learnt the limit waits for a free stream, but one that opens many at once (the
official clients' route refresh: every topic at once) has the excess refused with
REFUSED_STREAM, so the default sits above the topics one client uses.

The bookkeeping is a few dict updates per RPC, none per message.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.api.limits import ClientLimits
from rocketcluster.broker.call_headers import header
from rocketcluster.broker.messaging.codes import Code, status
from rocketcluster.broker.metrics import BrokerMetrics

SERVICE = "apache.rocketmq.v2.MessagingService"
CLIENT_ID_HEADER = "x-mq-client-id"
# Above the largest request the limits let through: a body of max_message_bytes and
# the properties, keys and names around it (a few KiB; 16 KiB of user properties).
FRAME_MARGIN_BYTES = 256 * 1024


def server_options(limits: ClientLimits, max_message_bytes: int) -> list[tuple[str, int]]:
    """gRPC server options of the client port that enforce limits in gRPC itself: a
    frame larger than any acceptable request is refused (RESOURCE_EXHAUSTED) before
    it is buffered whole, the streams of one connection are capped, and a connection
    idle for long is closed."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes + FRAME_MARGIN_BYTES),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        ("grpc.max_connection_idle_ms", limits.max_connection_idle_seconds * 1000),
    ]


def peer_address(peer: str) -> str:
    """The client IP of a gRPC peer (``ipv4:1.2.3.4:5678``, ``ipv6:[::1]:5678``)."""
    return peer.rsplit(":", 1)[0] if peer.count(":") > 1 else peer


class Refusal(NamedTuple):
    limit: str  # the ClientLimits field, as the manifest spells it
    message: str


class AdmissionLedger:
    """What clients hold now; ``enter`` admits or names the limit it would break."""

    def __init__(self, limits: ClientLimits) -> None:
        self.limits = limits
        self._peer_rpcs: dict[str, int] = {}
        self._address_peers: dict[str, int] = {}
        self._client_rpcs: dict[str, int] = {}
        self._client_bytes: dict[str, int] = {}
        self.refusals: dict[str, int] = {}  # by limit, since the start

    @property
    def connections(self) -> int:
        return len(self._peer_rpcs)

    def enter(self, peer: str, client: str, size: int) -> Refusal | None:
        """Admit one RPC (and count it) or say which limit refuses it."""
        refusal = self._check(peer, client, size)
        if refusal is not None:
            self.refusals[refusal.limit] = self.refusals.get(refusal.limit, 0) + 1
            return refusal
        peer_rpcs = self._peer_rpcs.get(peer, 0)
        if not peer_rpcs:
            address = peer_address(peer)
            self._address_peers[address] = self._address_peers.get(address, 0) + 1
        self._peer_rpcs[peer] = peer_rpcs + 1
        self._client_rpcs[client] = self._client_rpcs.get(client, 0) + 1
        self._client_bytes[client] = self._client_bytes.get(client, 0) + size
        return None

    def _check(self, peer: str, client: str, size: int) -> Refusal | None:
        lim = self.limits
        if peer not in self._peer_rpcs:
            if len(self._peer_rpcs) >= lim.max_connections:
                return Refusal(
                    "maxConnections",
                    f"the broker has {len(self._peer_rpcs)} client connections in use, "
                    f"its limit (clientLimits.maxConnections = {lim.max_connections})",
                )
            address = peer_address(peer)
            if self._address_peers.get(address, 0) >= lim.max_connections_per_address:
                return Refusal(
                    "maxConnectionsPerAddress",
                    f"address {address} has {lim.max_connections_per_address} connections "
                    f"in use (clientLimits.maxConnectionsPerAddress): reuse a channel",
                )
        rpcs = self._client_rpcs.get(client, 0)
        if rpcs >= lim.max_inflight_requests_per_client:
            return Refusal(
                "maxInflightRequestsPerClient",
                f"client {client!r} has {rpcs} requests in progress "
                f"(clientLimits.maxInflightRequestsPerClient = "
                f"{lim.max_inflight_requests_per_client}): wait for answers before sending more",
            )
        held = self._client_bytes.get(client, 0)
        if held and held + size > lim.max_inflight_bytes_per_client:
            return Refusal(
                "maxInflightBytesPerClient",
                f"client {client!r} has {held} request bytes in progress; {size} more would "
                f"exceed clientLimits.maxInflightBytesPerClient = "
                f"{lim.max_inflight_bytes_per_client}",
            )
        return None

    def leave(self, peer: str, client: str, size: int) -> None:
        """Release what ``enter`` admitted."""
        _decrement(self._client_rpcs, client, 1)
        _decrement(self._client_bytes, client, size)
        if _decrement(self._peer_rpcs, peer, 1) == 0:
            _decrement(self._address_peers, peer_address(peer), 1)


def _decrement(table: dict[str, int], key: str, amount: int) -> int:
    left = table.get(key, 0) - amount
    if left > 0:
        table[key] = left
    else:
        table.pop(key, None)
    return max(left, 0)


def reply_with_status(response_type: Any, status_type: Any, refusal: pb.Status) -> Any:
    if status_type is not pb.Status:  # another service's Status (code, message)
        refusal = status_type(code=refusal.code, message=refusal.message)
    return response_type(status=refusal)


class Undecodable(NamedTuple):
    """What the wrapped deserializer hands on for bytes that are not a request."""

    error: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except DecodeError as exc:
            return Undecodable(str(exc))

    return decode


def _passing_bytes(response_type: Any) -> Callable[[Any], bytes]:
    serialize = response_type.SerializeToString

    def encode(response: Any) -> bytes:
        return response if type(response) is bytes else serialize(response)

    return encode


def undecodable_status(method: str, request: Undecodable) -> pb.Status:
    return status(
        Code.BAD_REQUEST,
        f"the {method} request could not be decoded ({request.error}): send a valid "
        "apache.rocketmq.v2 message",
    )


def _client_of(context: Any) -> str:
    return header(context, CLIENT_ID_HEADER)


class ClientAdmission:
    """The client port's MessagingService handlers, each admitted by the ledger before
    the servicer's method runs.

    Not a grpc.aio ServerInterceptor: with one registered, grpc.aio finds every
    call's handler through a chain of Python coroutines, and an interceptor that
    wraps the handler builds a new one (and its closures) per call — about 3.4 µs
    more per call than this path in a microbenchmark; end to end, on a loaded
    2-core machine, the difference stayed within the noise. ``handler`` instead
    builds the service's method handlers once, at start, each wrapping the
    servicer's method (the AuthGuard when auth is on, so a flood is refused before
    any signature check) with one extra call frame; its request deserializers never
    raise (``Undecodable``)."""

    def __init__(self, limits: ClientLimits, metrics: BrokerMetrics | None = None) -> None:
        self.ledger = ledger = AdmissionLedger(limits)
        self._observe = metrics.observe_rpc if metrics is not None else None
        if metrics is not None:
            metrics.gauge(
                "rocketmq_client_connections",
                "Client connections with RPCs in progress (clientLimits.maxConnections)",
                lambda: [({}, float(ledger.connections))],
            )
            metrics.counter(
                "rocketmq_client_limit_refusals",
                "RPCs refused TOO_MANY_REQUESTS by a client limit",
                lambda: [({"limit": k}, float(v)) for k, v in sorted(ledger.refusals.items())],
            )

    def handler(
        self,
        servicer: Any,
        service: ServiceDescriptor | None = None,
        messages: Any = spb,
        status_type: Any = pb.Status,
        raw_replies: bool = False,
        raw_requests: bool = False,
    ) -> grpc.GenericRpcHandler:
        """MessagingService's handlers for ``servicer`` (the methods the generated
        ``add_MessagingServiceServicer_to_server`` would register), admission first.
        Another service on the client port (``service``, its messages module and its
        Status type; e.g. ConsumeService) is admitted by the same ledger.
        ``raw_replies``: the servicer answers with the response's bytes (a front
        process's relay), sent as they are; refusals are still messages.
        ``raw_requests``: the servicer takes the request's bytes undecoded (a front
        whose store process decodes them anyway: no auth check needs their fields);
        their size is what the byte limits count, and bytes that do not decode are
        answered by the store process as they are here."""
        if service is None:
            service = spb.DESCRIPTOR.services_by_name["MessagingService"]
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method in service.methods:
            name = method.name
            request_type = getattr(messages, method.input_type.name)
            response_type = getattr(messages, method.output_type.name)
            reply = functools.partial(reply_with_status, response_type, status_type)
            inner = getattr(servicer, name)
            decode = None if raw_requests else _tolerant(request_type.FromString)
            encode = (
                _passing_bytes(response_type) if raw_replies else response_type.SerializeToString
            )
            if method.client_streaming and method.server_streaming:
                handlers[name] = grpc.stream_stream_rpc_method_handler(
                    self._stream_stream(name, reply, inner),
                    request_deserializer=decode,
                    response_serializer=encode,
                )
            elif method.server_streaming:
                handlers[name] = grpc.unary_stream_rpc_method_handler(
                    self._unary_stream(name, reply, inner),
                    request_deserializer=decode,
                    response_serializer=encode,
                )
            elif not method.client_streaming:
                handlers[name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(name, reply, inner),
                    request_deserializer=decode,
                    response_serializer=encode,
                )
            # client streaming: the service has none
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    def _refused(self, method: str, refusal: Refusal) -> pb.Status:
        if self._observe is not None:
            self._observe(method, Code.TOO_MANY_REQUESTS, 0.0)
        return status(Code.TOO_MANY_REQUESTS, refusal.message)

    def _unary(
        self, method: str, reply: Callable[[pb.Status], Any], inner: Any
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        ledger = self.ledger

        async def behavior(request: Any, context: Any) -> Any:
            if type(request) is Undecodable:
                return reply(undecodable_status(method, request))
            peer = context.peer()
            key = _client_of(context) or peer
            size = len(request) if type(request) is bytes else request.ByteSize()
            refusal = ledger.enter(peer, key, size)
            if refusal is not None:
                return reply(self._refused(method, refusal))
            try:
                return await inner(request, context)
            finally:
                ledger.leave(peer, key, size)

        return behavior

    def _unary_stream(
        self, method: str, reply: Callable[[pb.Status], Any], inner: Any
    ) -> Callable[[Any, Any], AsyncIterator[Any]]:
        ledger = self.ledger

        async def behavior(request: Any, context: Any) -> AsyncIterator[Any]:
            if type(request) is Undecodable:
                yield reply(undecodable_status(method, request))
                return
            peer = context.peer()
            key = _client_of(context) or peer
            size = len(request) if type(request) is bytes else request.ByteSize()
            refusal = ledger.enter(peer, key, size)
            if refusal is not None:
                yield reply(self._refused(method, refusal))
                return
            try:
                async for response in inner(request, context):
                    yield response
            finally:
                ledger.leave(peer, key, size)

        return behavior

    def _stream_stream(
        self, method: str, reply: Callable[[pb.Status], Any], inner: Any
    ) -> Callable[[Any, Any], AsyncIterator[Any]]:
        ledger = self.ledger

        async def behavior(requests: Any, context: Any) -> AsyncIterator[Any]:
            peer = context.peer()
            key = _client_of(context) or peer
            refusal = ledger.enter(peer, key, 0)
            if refusal is not None:
                yield reply(self._refused(method, refusal))
                return
            bad: list[Undecodable] = []
            try:
                async for response in inner(_until_undecodable(requests, bad), context):
                    yield response
                if bad:  # the stream ended at bytes that are not a command: say so
                    yield reply(undecodable_status(method, bad[0]))
            finally:
                ledger.leave(peer, key, 0)

        return behavior


async def _until_undecodable(requests: AsyncIterator[Any], bad: list[Undecodable]) -> Any:
    """The client's stream up to its first undecodable message (noted in ``bad``)."""
    async for request in requests:
        if type(request) is Undecodable:
            bad.append(request)
            return
        yield request

"""AuthInterceptor: authentication and ACLs in front of ``MessagingService``, as a
grpc.aio server interceptor, so the messaging service itself stays unaware of users.

Every RPC is authenticated from its headers; then the request names the resources it
touches and the permission each needs:

- SendMessage, RecallMessage, EndTransaction: pub on the topic;
- ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue,
  QueryAssignment: sub on the topic and sub on the group;
- QueryRoute: pub or sub on the topic;
- QueryOffset, PullMessage, GetOffset, UpdateOffset: sub on the topic (and on the group
  when one is named);
- Heartbeat, Telemetry, NotifyClientTermination, SyncLiteSubscription: a valid user.

A refusal is an answer, not a gRPC error: the method's own response type with
``status`` 40100 (UNAUTHORIZED) or 40300 (FORBIDDEN); a streaming RPC gets it as its
first and only response. A slave forwarding a request to its master passes the
client's ``authorization`` and ``x-mq-date-time`` on (ha/forward.py): the master checks
the same signature again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.api.users import Action
from rocketcluster.broker.security.auth import (
    Authenticator,
    AuthError,
    Kind,
    Principal,
    require,
    require_any,
)

log = logging.getLogger(__name__)

SERVICE_PREFIX: Final = "/apache.rocketmq.v2.MessagingService/"

Check = Callable[[Principal, Any], None]
Observe = Callable[[str, int, float], None]


def _pub_topic(principal: Principal, request: Any) -> None:
    require(principal, Kind.TOPIC, request.topic.name, Action.PUB)


def _send(principal: Principal, request: spb.SendMessageRequest) -> None:
    topic = None
    for message in request.messages:  # usually one; every distinct topic is checked
        if message.topic.name != topic:
            topic = message.topic.name
            require(principal, Kind.TOPIC, topic, Action.PUB)


def _sub_topic_and_group(principal: Principal, request: Any) -> None:
    require(principal, Kind.TOPIC, request.topic.name, Action.SUB)
    require(principal, Kind.GROUP, request.group.name, Action.SUB)


def _receive(principal: Principal, request: spb.ReceiveMessageRequest) -> None:
    require(principal, Kind.TOPIC, request.message_queue.topic.name, Action.SUB)
    require(principal, Kind.GROUP, request.group.name, Action.SUB)


def _route(principal: Principal, request: spb.QueryRouteRequest) -> None:
    require_any(principal, request.topic.name)


def _queue_read(principal: Principal, request: Any) -> None:
    require(principal, Kind.TOPIC, request.message_queue.topic.name, Action.SUB)
    group = getattr(request, "group", None)
    if group is not None and group.name:
        require(principal, Kind.GROUP, group.name, Action.SUB)


def _authenticated(principal: Principal, request: Any) -> None:
    return None


CHECKS: Final[dict[str, Check]] = {
    "SendMessage": _send,
    "RecallMessage": _pub_topic,
    "EndTransaction": _pub_topic,
    "ReceiveMessage": _receive,
    "AckMessage": _sub_topic_and_group,
    "ChangeInvisibleDuration": _sub_topic_and_group,
    "ForwardMessageToDeadLetterQueue": _sub_topic_and_group,
    "QueryAssignment": _sub_topic_and_group,
    "QueryRoute": _route,
    "QueryOffset": _queue_read,
    "PullMessage": _queue_read,
    "GetOffset": _queue_read,
    "UpdateOffset": _queue_read,
    "Heartbeat": _authenticated,
    "Telemetry": _authenticated,
    "NotifyClientTermination": _authenticated,
    "SyncLiteSubscription": _authenticated,
}


def _response_type(method: str) -> Any:
    return spb.TelemetryCommand if method == "Telemetry" else getattr(spb, f"{method}Response")


def _refusal(method: str, request: Any, error: AuthError) -> Any:
    response = _response_type(method)(status=pb.Status(code=error.code, message=error.message))
    if method == "ChangeInvisibleDuration":
        # The client stores the returned handle before it checks the status.
        response.receipt_handle = request.receipt_handle
    return response


def _headers(context: Any) -> tuple[str, str]:
    authorization = date = ""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            authorization = value if isinstance(value, str) else value.decode()
        elif key == "x-mq-date-time":
            date = value if isinstance(value, str) else value.decode()
    return authorization, date


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps each MessagingService handler once (cached per method) with the check.

    ``authenticator`` returns the current Authenticator (the users file reloads
    without a restart); ``observe`` records refused calls in the RPC metrics as the
    service records its own answers."""

    def __init__(
        self, authenticator: Callable[[], Authenticator], observe: Observe | None = None
    ) -> None:
        self._authenticator = authenticator
        self._observe = observe
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(SERVICE_PREFIX):
            return handler
        cached = self._wrapped.get(details.method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(details.method[len(SERVICE_PREFIX) :], handler)
        self._wrapped[details.method] = (handler, wrapped)
        return wrapped

    def _check(self, method: str, request: Any, context: Any) -> Any:
        """None when the call may go on, else the refusal to answer with."""
        started = time.perf_counter()
        try:
            authorization, date = _headers(context)
            principal = self._authenticator().authenticate(authorization, date)
            check = CHECKS.get(method)
            if check is None:
                raise AuthError(40300, f"{method} is not open to clients when auth is on")
            if request is not None:
                check(principal, request)
            return None
        except AuthError as error:
            if self._observe is not None:
                self._observe(method, error.code, time.perf_counter() - started)
            return _refusal(method, request, error)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        check = self._check
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: Any) -> Any:
                refusal = check(method, request, context)
                if refusal is not None:
                    return refusal
                return await inner_uu(request, context)

            return grpc.unary_unary_rpc_method_handler(unary_unary, **options)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                refusal = check(method, request, context)
                if refusal is not None:
                    yield refusal
                    return
                async for response in inner_us(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(unary_stream, **options)
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            async def stream_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
                refusal = check(method, None, context)
                if refusal is not None:
                    yield refusal
                    return
                async for response in inner_ss(requests, context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(stream_stream, **options)
        return handler  # client streaming: the service has none

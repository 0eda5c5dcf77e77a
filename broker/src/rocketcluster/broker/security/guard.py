"""AuthGuard: authentication and ACLs in front of ``MessagingService``, wrapping the
servicer's methods, so the messaging service itself stays unaware of users.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rocketcluster.api.users import Action
from rocketcluster.broker.call_headers import header
from rocketcluster.broker.security.auth import (
    Authenticator,
    AuthError,
    Kind,
    Principal,
    require,
    require_any,
)

log = logging.getLogger(__name__)

Check = Callable[[Principal, Any], None]
Observe = Callable[[str, int, float], None]
Refuse = Callable[[str, Any, "AuthError"], Any]


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
    return header(context, "authorization"), header(context, "x-mq-date-time")


STREAMING: Final = {"ReceiveMessage": "unary_stream", "PullMessage": "unary_stream"}
BIDI: Final = frozenset({"Telemetry"})


class AuthGuard:
    """The MessagingService servicer behind the check: an object with the servicer's
    RPC methods, each wrapped once (at start) with authentication and the ACL check.

    Not a grpc.aio ServerInterceptor: with any interceptor registered, grpc.aio looks
    up every call's handler through a Python coroutine (a no-op interceptor measured
    4.9k → 2.2k unary calls/s at 64 in flight here, on a quiet moment of a shared
    machine); wrapping the methods costs one extra call frame.

    ``authenticator`` returns the current Authenticator (the users file reloads
    without a restart); ``observe`` records refused calls in the RPC metrics as the
    service records its own answers."""

    def __init__(
        self,
        servicer: Any,
        authenticator: Callable[[], Authenticator],
        observe: Observe | None = None,
        checks: Mapping[str, Check] = CHECKS,
        refusal: Refuse | None = None,
    ) -> None:
        """``checks`` and ``refusal``: another service's methods, ACL checks and refusal
        answers (ConsumeService: messaging/consume_service.py); MessagingService's
        by default."""
        self._authenticator = authenticator
        self._observe = observe
        self._checks = checks
        self._refusal = refusal or _refusal
        for method in checks:
            inner = getattr(servicer, method)
            wrapped: Any
            if method in BIDI:
                wrapped = self._bidi(method, inner)
            elif method in STREAMING:
                wrapped = self._unary_stream(method, inner)
            else:
                wrapped = self._unary(method, inner)
            setattr(self, method, wrapped)

    def _check(self, method: str, request: Any, context: Any) -> Any:
        """None when the call may go on, else the refusal to answer with."""
        started = time.perf_counter()
        try:
            authorization, date = _headers(context)
            principal = self._authenticator().authenticate(authorization, date)
            if request is not None:
                self._checks[method](principal, request)
            return None
        except AuthError as error:
            if self._observe is not None:
                self._observe(method, error.code, time.perf_counter() - started)
            return self._refusal(method, request, error)

    def _unary(self, method: str, inner: Any) -> Callable[[Any, Any], Awaitable[Any]]:
        check = self._check

        async def unary(request: Any, context: Any) -> Any:
            refusal = check(method, request, context)
            if refusal is not None:
                return refusal
            return await inner(request, context)

        return unary

    def _unary_stream(self, method: str, inner: Any) -> Callable[[Any, Any], AsyncIterator[Any]]:
        check = self._check

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            refusal = check(method, request, context)
            if refusal is not None:
                yield refusal
                return
            async for response in inner(request, context):
                yield response

        return unary_stream

    def _bidi(self, method: str, inner: Any) -> Callable[[Any, Any], AsyncIterator[Any]]:
        check = self._check

        async def stream_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
            refusal = check(method, None, context)
            if refusal is not None:
                yield refusal
                return
            async for response in inner(requests, context):
                yield response

        return stream_stream

"""MessagingServicer: ``apache.rocketmq.v2.MessagingService`` on grpc.aio.

Thin by design: each RPC checks its request, calls the service that owns the
behaviour (send, pop, timers, transactions, clients) and turns expected failures into
the response's ``status`` (never a gRPC error): the official clients read the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import CoroutineType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rocketcluster.api.names import group_name_problem, topic_name_problem
from rocketcluster.broker.call_headers import header
from rocketcluster.broker.messaging import queries
from rocketcluster.broker.messaging.codes import (
    OK,
    OK_STATUS,
    Code,
    ForeignReceipt,
    MessagingError,
    status,
)
from rocketcluster.broker.messaging.convert import duration_ms, to_pb
from rocketcluster.broker.messaging.cross_group import borrowed_from
from rocketcluster.broker.messaging.filters import FilterSyntaxError
from rocketcluster.broker.messaging.send import SendOutcome, accepted_types

if TYPE_CHECKING:
    from rocketcluster.broker.messaging.runtime import MessagingRuntime

log = logging.getLogger(__name__)

R = TypeVar("R")
DEFAULT_BATCH = 32
MAX_BATCH = 1024
DEADLINE_MARGIN_S = 0.3


def receive_filter(rt: MessagingRuntime, sql: bool, expression: str) -> Any:
    """The filter of a receive request (ReceiveMessage and ConsumeService.ReceiveBatch)."""
    try:
        return rt.filters.get("SQL" if sql else "TAG", expression)
    except FilterSyntaxError as exc:
        raise MessagingError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from exc


def checked_invisible_ms(rt: MessagingRuntime, auto_renew: bool, invisible_ms: int) -> int:
    """A receive's invisible time, within the broker's bounds (0 when auto-renewed)."""
    if auto_renew:
        return 0
    tuning = rt.tuning
    if not tuning.min_invisible_ms <= invisible_ms <= tuning.max_invisible_ms:
        raise MessagingError(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"invisible duration must be within [{tuning.min_invisible_ms}, "
            f"{tuning.max_invisible_ms}] ms",
        )
    return invisible_ms


def checked_batch(batch: int) -> int:
    if not 0 < batch <= MAX_BATCH:
        raise MessagingError(
            Code.BAD_REQUEST, f"batch size must be within [1, {MAX_BATCH}], not {batch}"
        )
    return batch


def long_poll_seconds(rt: MessagingRuntime, long_polling_ms: int, context: Any) -> float:
    """How long a receive may wait for messages: the client's wish, capped by the
    broker and by the call's own deadline (minus a margin to answer in time)."""
    wait = min(max(long_polling_ms, 0), rt.tuning.long_polling_max_ms) / 1000
    remaining = context.time_remaining()
    if remaining is not None:
        wait = min(wait, max(0.0, remaining - DEADLINE_MARGIN_S))
    return wait


# RPCs that change what the master holds: during a handover they wait at the write gate
# (ha/handover.py), and only then is it decided whether to handle or forward them.
GATED_RPCS = frozenset(
    {"SendMessage", "EndTransaction", "RecallMessage", "ForwardMessageToDeadLetterQueue"}
)


def topic_named(name: str) -> str:
    """A topic name a request carries without needing the topic to exist (acks,
    transactions): still a valid name, or ILLEGAL_TOPIC."""
    problem = topic_name_problem(name) if name else None
    if problem:
        raise MessagingError(Code.ILLEGAL_TOPIC, f"topic {name[:200]!r}: {problem}")
    return name


def client_id_of(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    client_id = header(context, "x-mq-client-id")
    if not client_id:
        raise MessagingError(Code.CLIENT_ID_REQUIRED, "the x-mq-client-id header is required")
    return client_id


def _peer(context: Any) -> str:
    """The client's address as gRPC names it ("ipv4:10.0.0.7:52114"), relayed by a
    front process; "" when the context has none (a test's stand-in)."""
    peer = getattr(context, "peer", None)
    address = peer() if peer is not None else ""
    return address if isinstance(address, str) else ""


def send_response(outcomes: list[SendOutcome]) -> spb.SendMessageResponse:
    """A SendMessage answer: one entry per message. The common OK entry takes the
    shared OK Status (copied in C by ``add``) and only the fields it sets; setting the
    status field by field cost ~40% more per message."""
    response = spb.SendMessageResponse()
    add = response.entries.add
    failed = 0
    for o in outcomes:
        if o.code == OK and o.message == "OK":
            if o.transaction_id or o.recall_handle:
                add(
                    status=OK_STATUS,
                    message_id=o.message_id,
                    transaction_id=o.transaction_id,
                    offset=o.offset,
                    recall_handle=o.recall_handle,
                )
            else:
                add(status=OK_STATUS, message_id=o.message_id, offset=o.offset)
            continue
        add(
            status=pb.Status(code=o.code, message=o.message),
            message_id=o.message_id,
            transaction_id=o.transaction_id,
            offset=o.offset,
            recall_handle=o.recall_handle,
        )
        failed += o.code != OK
    if not failed:
        response.status.CopyFrom(OK_STATUS)
    elif len(outcomes) == 1:
        response.status.CopyFrom(response.entries[0].status)
    else:
        response.status.CopyFrom(
            status(Code.MULTIPLE_RESULTS, f"{failed} messages failed; see the entries")
        )
    return response


@dataclass(slots=True)
class _Acked:
    """An AckMessage's entries acknowledged here, before the journal wait."""

    response: spb.AckMessageResponse
    failed: int = 0
    foreign: dict[str, list[int]] = field(default_factory=dict)  # group -> entries

    def unrecorded(self, error: MessagingError) -> None:
        """The journal write failed: every entry acknowledged here failed with it."""
        for result in self.response.entries:
            if result.status.code == OK:
                result.status.CopyFrom(error.to_status())
                self.failed += 1


class MessagingServicer(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, runtime: MessagingRuntime) -> None:
        self._rt = runtime
        self._gate = runtime.store.write_gate

    # -- helpers -----------------------------------------------------------------

    async def _unary(
        self,
        rpc: str,
        context: grpc.aio.ServicerContext[Any, Any],
        build: Callable[[pb.Status], R],
        handler: Callable[[str], Any],
        request: Any = None,
    ) -> R:
        started = time.perf_counter()
        code = Code.OK
        try:
            client_id = client_id_of(context)
            if self._gate.closed and rpc in GATED_RPCS:
                # A handover: wait, then find this broker master still (handle) or a
                # slave that knows the new master (forward) — a pause, not an error.
                await self._gate.passage()
            master = self._rt.forward_to() if request is not None else None
            if master is not None and not header(context, "x-rc-forwarded"):
                return await self._rt.forwarder.unary(master, rpc, request, context)  # type: ignore[no-any-return]
            result = handler(client_id)
            if type(result) is CoroutineType:  # an async handler (cheaper than iscoroutine)
                result = await result
            # A refused write (HA_NOT_AVAILABLE, SLAVE_PERSISTENCE_TIMEOUT …) is an answer,
            # not an exception: the metric counts the code the client reads.
            code = result.status.code
            return result  # type: ignore[no-any-return]
        except MessagingError as exc:
            code = exc.code
            return build(exc.to_status())
        except Exception as exc:
            log.exception("%s failed", rpc)
            code = Code.INTERNAL_ERROR
            return build(status(Code.INTERNAL_ERROR, f"{rpc} failed: {exc}"))
        finally:
            self._rt.metrics.observe_rpc(rpc, code, time.perf_counter() - started)

    def _queue(
        self, topic_name: str, namespace: str, qid: int, group: str | None = None
    ) -> pb.MessageQueue:
        topic = self._rt.registry.require_topic(topic_name)
        return pb.MessageQueue(
            topic=pb.Resource(resource_namespace=namespace, name=topic_name),
            id=qid,
            permission=self._rt.routes.permission(group),
            broker=self._rt.broker_pb(group),
            accept_message_types=accepted_types(topic),
        )

    async def _pass_on(self, owner: str, rpc: str, request: Any, context: Any) -> Any:
        """``request``, whose receipt handle broker group ``owner`` minted, answered
        there (cross_group.py)."""
        return await self._rt.cross_group.pass_on(
            owner, rpc, request, context, borrowed=bool(borrowed_from(context))
        )

    async def _ack_elsewhere(
        self,
        owner: str,
        request: spb.AckMessageRequest,
        indexes: list[int],
        response: spb.AckMessageResponse,
        context: Any,
    ) -> int:
        """Acknowledge the entries at ``indexes`` at broker group ``owner``, which
        delivered them; their results go into ``response``. Returns how many failed."""
        part = spb.AckMessageRequest(group=request.group, topic=request.topic)
        part.entries.extend(request.entries[i] for i in indexes)
        try:
            answer = await self._pass_on(owner, "AckMessage", part, context)
            results = list(answer.entries)
            if len(results) != len(indexes):  # an answer without entries: its status
                results = [spb.AckMessageResultEntry(status=answer.status) for _ in indexes]
        except MessagingError as exc:
            results = [spb.AckMessageResultEntry(status=exc.to_status()) for _ in indexes]
        failed = 0
        for i, result in zip(indexes, results, strict=True):
            response.entries[i].status.CopyFrom(result.status)
            if result.receipt_handle:
                response.entries[i].receipt_handle = result.receipt_handle
            failed += result.status.code != OK
        return failed

    # -- routes and clients --------------------------------------------------------

    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: Any
    ) -> spb.QueryRouteResponse:
        def handle(client_id: str) -> spb.QueryRouteResponse:
            name = request.topic.name
            topic = self._rt.registry.require_topic(name)
            ns = request.topic.resource_namespace
            # Topics live on every broker group: a queue per group and queue id, each
            # at its group's endpoint (the one that follows the group's master), READ
            # only for a write-disabled group (routes.py).
            queues = self._rt.routes.message_queues(topic, ns, accepted_types(topic))
            return spb.QueryRouteResponse(status=OK_STATUS, message_queues=queues)

        return await self._unary(
            "QueryRoute", context, lambda s: spb.QueryRouteResponse(status=s), handle
        )

    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        def handle(client_id: str) -> spb.HeartbeatResponse:
            problem = group_name_problem(request.group.name) if request.group.name else None
            if problem:
                raise MessagingError(
                    Code.ILLEGAL_CONSUMER_GROUP,
                    f"consumer group {request.group.name[:300]!r}: {problem}",
                )
            self._rt.clients.touch(
                client_id, group=request.group.name, client_type=request.client_type
            )
            return spb.HeartbeatResponse(status=OK_STATUS)

        return await self._unary(
            "Heartbeat", context, lambda s: spb.HeartbeatResponse(status=s), handle
        )

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: Any
    ) -> spb.QueryAssignmentResponse:
        def handle(client_id: str) -> spb.QueryAssignmentResponse:
            group = self._rt.registry.require_group(request.group.name)
            topic = self._rt.registry.require_topic(request.topic.name)
            ns = request.topic.resource_namespace
            qids = range(topic.queues) if group.fifo else [-1]
            assignments = [
                pb.Assignment(message_queue=self._queue(topic.name, ns, q)) for q in qids
            ]
            return spb.QueryAssignmentResponse(status=OK_STATUS, assignments=assignments)

        return await self._unary(
            "QueryAssignment",
            context,
            lambda s: spb.QueryAssignmentResponse(status=s),
            handle,
            request,
        )

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        async def handle(client_id: str) -> spb.NotifyClientTerminationResponse:
            self._rt.pop.release_client(client_id)
            self._rt.clients.remove(client_id)
            await self._rt.pop.recorded("releasing the client's deliveries")
            return spb.NotifyClientTerminationResponse(status=OK_STATUS)

        return await self._unary(
            "NotifyClientTermination",
            context,
            lambda s: spb.NotifyClientTerminationResponse(status=s),
            handle,
        )

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        try:
            client_id = client_id_of(context)
        except MessagingError as exc:
            yield spb.TelemetryCommand(status=exc.to_status())
            return
        outbox = self._rt.clients.open_stream(client_id, _peer(context))

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if command.HasField("settings"):
                        reply = self._rt.settings_reply(client_id, command.settings)
                        outbox.put_nowait(spb.TelemetryCommand(status=OK_STATUS, settings=reply))
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("telemetry stream of %s failed", client_id)
            finally:
                outbox.put_nowait(spb.TelemetryCommand())  # an empty command ends the stream

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                command = await outbox.get()
                if not command.ListFields():
                    break
                yield command
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self._rt.clients.close_stream(client_id, outbox)

    # -- producing -----------------------------------------------------------------

    async def SendMessage(
        self, request: spb.SendMessageRequest, context: Any
    ) -> spb.SendMessageResponse:
        async def handle(client_id: str) -> spb.SendMessageResponse:
            if not request.messages:
                raise MessagingError(Code.BAD_REQUEST, "no messages in the request")
            outcomes = await self._rt.send.send(
                list(request.messages), client_id, peer=_peer(context)
            )
            self._rt.after_send(outcomes)
            return send_response(outcomes)

        return await self._unary(
            "SendMessage", context, lambda s: spb.SendMessageResponse(status=s), handle, request
        )

    async def SendMessages(
        self, calls: list[tuple[spb.SendMessageRequest, Any]]
    ) -> list[spb.SendMessageResponse]:
        """Several SendMessage calls answered together (a front process's calls of one
        loop turn): their messages stored as one batch. Calls that are not the common
        case — during a handover, on a broker that forwards to its master, without a
        client id or messages — go one by one, as SendMessage."""
        if self._gate.closed or self._rt.forward_to() is not None:
            return list(await asyncio.gather(*(self.SendMessage(r, c) for r, c in calls)))
        started = time.perf_counter()
        answers: list[spb.SendMessageResponse | None] = [None] * len(calls)
        batch: list[tuple[Any, str]] = []
        indexes: list[int] = []
        peers: dict[str, str] = {}
        for i, (request, context) in enumerate(calls):
            client_id = header(context, "x-mq-client-id")
            if not client_id or not request.messages:
                answers[i] = await self.SendMessage(request, context)  # its refusal
                continue
            batch.append((request.messages, client_id))
            indexes.append(i)
            peers[client_id] = _peer(context)
        if batch:
            try:
                results = await self._rt.send.send_requests(batch, peers)
            except Exception as exc:
                log.exception("SendMessage (a batch of %d) failed", len(batch))
                failed = status(Code.INTERNAL_ERROR, f"SendMessage failed: {exc}")
                results = []
                for i in indexes:
                    answers[i] = spb.SendMessageResponse(status=failed)
            after_send = self._rt.after_send
            observe = self._rt.metrics.observe_rpc
            elapsed = time.perf_counter() - started
            for i, outcomes in zip(indexes, results, strict=False):
                after_send(outcomes)
                response = answers[i] = send_response(outcomes)
                observe("SendMessage", response.status.code, elapsed)
            if not results:
                for _ in indexes:
                    observe("SendMessage", Code.INTERNAL_ERROR, elapsed)
        return [a for a in answers if a is not None]

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: Any
    ) -> spb.EndTransactionResponse:
        async def handle(client_id: str) -> spb.EndTransactionResponse:
            await self._rt.transactions.end(
                request.transaction_id,
                request.message_id,
                topic_named(request.topic.name),
                request.resolution,
            )
            return spb.EndTransactionResponse(status=OK_STATUS)

        return await self._unary(
            "EndTransaction",
            context,
            lambda s: spb.EndTransactionResponse(status=s),
            handle,
            request,
        )

    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: Any
    ) -> spb.RecallMessageResponse:
        def handle(client_id: str) -> spb.RecallMessageResponse:
            self._rt.registry.require_topic(request.topic.name)
            message_id = self._rt.timers.recall(request.topic.name, request.recall_handle)
            return spb.RecallMessageResponse(status=OK_STATUS, message_id=message_id)

        return await self._unary(
            "RecallMessage", context, lambda s: spb.RecallMessageResponse(status=s), handle, request
        )

    # -- consuming -----------------------------------------------------------------

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        started = time.perf_counter()
        code = Code.OK
        try:
            client_id = client_id_of(context)
            rt = self._rt
            master = rt.forward_to()
            if master is not None and not header(context, "x-rc-forwarded"):
                async for forwarded in rt.forwarder.stream(
                    master, "ReceiveMessage", request, context
                ):
                    yield forwarded
                return
            group = rt.registry.require_group(request.group.name)
            topic = rt.registry.require_topic(request.message_queue.topic.name)
            expression = request.filter_expression
            flt = receive_filter(rt, expression.type == pb.FilterType.SQL, expression.expression)
            invisible_ms = checked_invisible_ms(
                rt, request.auto_renew, duration_ms(request.invisible_duration)
            )
            batch = checked_batch(request.batch_size or DEFAULT_BATCH)
            wait = long_poll_seconds(rt, duration_ms(request.long_polling_timeout), context)
            rt.clients.touch(client_id, group=group.name)
            # As the Java proxy does, the queue named in the request only picks the
            # broker: the broker pops from all of the topic's queues (-1), so a simple
            # consumer's round-robin over queues never strands messages.
            receive = functools.partial(
                rt.pop.receive,
                group,
                topic,
                -1,
                flt,
                batch,
                invisible_ms,
                auto_renew=request.auto_renew,
                client_id=client_id,
            )
            borrowed_by = borrowed_from(context)
            if borrowed_by:
                wait = 0.0  # the group that asked does the waiting
            may_borrow = not request.auto_renew and not borrowed_by
            waited_from = time.monotonic()
            deliveries = await receive(wait_seconds=0.0 if may_borrow else wait)
            if not deliveries and may_borrow:
                # Nothing readable here: another group's backlog for this consumer
                # group is served now instead of after a long poll (cross_group.py).
                borrowed = await rt.cross_group.borrow(request, context)
                if borrowed:
                    for response in borrowed:
                        yield response
                    return
                waited = time.monotonic() - waited_from
                deliveries = await receive(wait_seconds=max(0.0, wait - waited))
            if not deliveries:
                code = Code.MESSAGE_NOT_FOUND
                yield spb.ReceiveMessageResponse(
                    status=status(Code.MESSAGE_NOT_FOUND, "no new message")
                )
                return
            yield spb.ReceiveMessageResponse(status=OK_STATUS)
            ns = request.group.resource_namespace
            for d in deliveries:
                response = spb.ReceiveMessageResponse()
                to_pb(
                    d.message,
                    namespace=ns,
                    receipt_handle=d.handle,
                    attempt=d.attempt,
                    store_host=rt.store_host,
                    invisible_ms=d.invisible_ms,
                    into=response.message,
                )
                yield response
            # The push consumer reads the transport delivery time from this last
            # response and fails the whole batch without it (client 5.1.2).
            delivered_at = spb.ReceiveMessageResponse()
            delivered_at.delivery_timestamp.GetCurrentTime()
            yield delivered_at
            rt.metrics.delivered(topic.name, group.name, deliveries)
        except MessagingError as exc:
            code = exc.code
            yield spb.ReceiveMessageResponse(status=exc.to_status())
        except Exception as exc:
            log.exception("ReceiveMessage failed")
            code = Code.INTERNAL_ERROR
            yield spb.ReceiveMessageResponse(status=status(Code.INTERNAL_ERROR, str(exc)))
        finally:
            self._rt.metrics.observe_rpc("ReceiveMessage", code, time.perf_counter() - started)

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: Any
    ) -> spb.AckMessageResponse:
        async def handle(client_id: str) -> spb.AckMessageResponse:
            acked = self._ack_entries(request)
            try:  # one journal write (shared with concurrent acks) before the answer
                await self._rt.pop.recorded("the acknowledgement")
            except MessagingError as exc:
                acked.unrecorded(exc)
            return await self._acked(request, acked, context)

        return await self._unary(
            "AckMessage", context, lambda s: spb.AckMessageResponse(status=s), handle, request
        )

    async def AckMessages(
        self, calls: list[tuple[spb.AckMessageRequest, Any]]
    ) -> list[spb.AckMessageResponse]:
        """Several AckMessage calls answered together (a front process's calls of one
        read): every entry acknowledged, then one wait for the journal for all of them.
        On a broker that forwards to its master they go one by one, as AckMessage."""
        if self._rt.forward_to() is not None:
            return list(await asyncio.gather(*(self.AckMessage(r, c) for r, c in calls)))
        started = time.perf_counter()
        answers: list[spb.AckMessageResponse | None] = [None] * len(calls)
        pending: list[tuple[int, _Acked]] = []
        for i, (request, context) in enumerate(calls):
            try:
                client_id_of(context)
                pending.append((i, self._ack_entries(request)))
            except MessagingError as exc:
                answers[i] = spb.AckMessageResponse(status=exc.to_status())
        if pending:
            try:
                await self._rt.pop.recorded("the acknowledgement")
            except MessagingError as exc:
                for _, acked in pending:
                    acked.unrecorded(exc)
        for i, acked in pending:
            request, context = calls[i]
            try:
                answers[i] = await self._acked(request, acked, context)
            except Exception as exc:
                log.exception("AckMessage failed")
                answers[i] = spb.AckMessageResponse(
                    status=status(Code.INTERNAL_ERROR, f"AckMessage failed: {exc}")
                )
        observe = self._rt.metrics.observe_rpc
        elapsed = time.perf_counter() - started
        out = []
        for answer in answers:
            assert answer is not None
            observe("AckMessage", answer.status.code, elapsed)
            out.append(answer)
        return out

    def _ack_entries(self, request: spb.AckMessageRequest) -> _Acked:
        """Acknowledge what this broker group delivered of ``request``'s entries (not
        yet recorded); note the entries another group delivered."""
        group = self._rt.registry.require_group(request.group.name)
        topic = topic_named(request.topic.name)
        acked = _Acked(spb.AckMessageResponse())
        add = acked.response.entries.add
        for i, entry in enumerate(request.entries):  # built in place: runs per message
            handle_text = entry.receipt_handle
            result = add(message_id=entry.message_id, receipt_handle=handle_text)
            try:
                self._rt.pop.ack(group.name, topic, handle_text)
                result.status.code = OK
                result.status.message = "OK"
            except ForeignReceipt as exc:
                acked.foreign.setdefault(exc.group, []).append(i)
            except MessagingError as exc:
                result.status.CopyFrom(exc.to_status())
                acked.failed += 1
        return acked

    async def _acked(
        self, request: spb.AckMessageRequest, acked: _Acked, context: Any
    ) -> spb.AckMessageResponse:
        """The answer, once this group's acks are recorded: the other groups' entries
        acknowledged where they were delivered, and the overall status."""
        response = acked.response
        failed = acked.failed
        for owner, indexes in acked.foreign.items():
            failed += await self._ack_elsewhere(owner, request, indexes, response, context)
        if not failed:
            response.status.CopyFrom(OK_STATUS)
        elif len(response.entries) == 1:
            response.status.CopyFrom(response.entries[0].status)
        else:
            response.status.CopyFrom(status(Code.MULTIPLE_RESULTS, f"{failed} entries failed"))
        return response

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        async def handle(client_id: str) -> spb.ChangeInvisibleDurationResponse:
            group = self._rt.registry.require_group(request.group.name)
            invisible = duration_ms(request.invisible_duration)
            if not 0 <= invisible <= self._rt.tuning.max_invisible_ms:
                raise MessagingError(Code.ILLEGAL_INVISIBLE_TIME, "invisible duration out of range")
            try:
                handle_text = self._rt.pop.change_invisible(
                    group.name, topic_named(request.topic.name), request.receipt_handle, invisible
                )
            except ForeignReceipt as exc:
                return await self._pass_on(exc.group, "ChangeInvisibleDuration", request, context)
            await self._rt.pop.recorded("the new invisibility")
            return spb.ChangeInvisibleDurationResponse(status=OK_STATUS, receipt_handle=handle_text)

        # The client stores the returned handle before it checks the status: always
        # return one (the old one when the change failed).
        return await self._unary(
            "ChangeInvisibleDuration",
            context,
            lambda s: spb.ChangeInvisibleDurationResponse(
                status=s, receipt_handle=request.receipt_handle
            ),
            handle,
            request,
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        async def handle(client_id: str) -> spb.ForwardMessageToDeadLetterQueueResponse:
            group = self._rt.registry.require_group(request.group.name)
            try:
                await self._rt.pop.forward_to_dead_letter(
                    group.name, topic_named(request.topic.name), request.receipt_handle
                )
            except ForeignReceipt as exc:
                return await self._pass_on(
                    exc.group, "ForwardMessageToDeadLetterQueue", request, context
                )
            return spb.ForwardMessageToDeadLetterQueueResponse(status=OK_STATUS)

        return await self._unary(
            "ForwardMessageToDeadLetterQueue",
            context,
            lambda s: spb.ForwardMessageToDeadLetterQueueResponse(status=s),
            handle,
            request,
        )

    # -- not offered -------------------------------------------------------------

    def _unsupported(self, rpc: str) -> pb.Status:
        return status(
            Code.NOT_IMPLEMENTED,
            f"{rpc} is not offered by this broker: use ReceiveMessage/AckMessage (POP)",
        )

    async def PullMessage(
        self, request: spb.PullMessageRequest, context: Any
    ) -> AsyncIterator[spb.PullMessageResponse]:
        yield spb.PullMessageResponse(status=self._unsupported("PullMessage"))

    async def UpdateOffset(
        self, request: spb.UpdateOffsetRequest, context: Any
    ) -> spb.UpdateOffsetResponse:
        return spb.UpdateOffsetResponse(status=self._unsupported("UpdateOffset"))

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Any) -> spb.GetOffsetResponse:
        return spb.GetOffsetResponse(status=self._unsupported("GetOffset"))

    async def QueryOffset(
        self, request: spb.QueryOffsetRequest, context: Any
    ) -> spb.QueryOffsetResponse:
        """A queue's first or next offset, or the first stored at or after a time —
        tiered data included (what "consume from this time on" resets to)."""

        async def handle(client_id: str) -> spb.QueryOffsetResponse:
            rt = self._rt
            queue = request.message_queue
            topic = rt.registry.require_topic(queue.topic.name)
            if not 0 <= queue.id < topic.queues:
                raise MessagingError(
                    Code.BAD_REQUEST, f"topic {topic.name!r} has no queue {queue.id}"
                )
            lo, hi = rt.store.queue_offsets(topic.name, queue.id)
            policy = request.query_offset_policy
            if policy == pb.QueryOffsetPolicy.BEGINNING:
                offset = lo
            elif policy == pb.QueryOffsetPolicy.END:
                offset = hi
            else:
                time_ms = request.timestamp.seconds * 1000 + request.timestamp.nanos // 1_000_000
                offset = await queries.offset_for_time(
                    rt.store, rt.tier, topic.name, queue.id, time_ms
                )
            return spb.QueryOffsetResponse(status=OK_STATUS, offset=offset)

        return await self._unary(
            "QueryOffset", context, lambda s: spb.QueryOffsetResponse(status=s), handle, request
        )

    async def SyncLiteSubscription(
        self, request: spb.SyncLiteSubscriptionRequest, context: Any
    ) -> spb.SyncLiteSubscriptionResponse:
        return spb.SyncLiteSubscriptionResponse(status=self._unsupported("SyncLiteSubscription"))

"""ConsumeServicer: ``rocketcluster.consume.v1.ConsumeService`` — batched receive and
ack for our LeanClient, on the client port beside MessagingService.

A ReceiveMessage call streams one frame and builds one protobuf Message per delivered
message; on grpc.aio that, not the POP bookkeeping, was most of the broker's CPU per
consumed message (DESIGN §9). ReceiveBatch answers one frame with the messages packed
as bytes (api/client/batch_codec.py); AckBatch takes every receipt of a batch in one
``bytes`` field and commits each queue once. Both go through the same PopService as
the official RPCs — deliveries and acks are journalled and replicated before the
answer, retries and dead letters work as there — and a slave forwards them to its
master as it forwards the official ones. Authentication, ACLs (sub on topic and
group) and client limits wrap this servicer as they wrap MessagingService.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import grpc

from rocketcluster.api.auth import AuthProcessConfig, WatchedFile
from rocketcluster.api.client.batch_codec import (
    HEADER,
    RECEIPT,
    RECEIPT_SIZE,
    RECEIPT_VERSION,
)
from rocketcluster.api.generated import consume_pb2 as cpb
from rocketcluster.api.names import group_name_problem
from rocketcluster.api.users import Action
from rocketcluster.broker.call_headers import header
from rocketcluster.broker.messaging.admission import ClientAdmission
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.service import (
    MAX_BATCH,
    checked_batch,
    checked_invisible_ms,
    client_id_of,
    long_poll_seconds,
    receive_filter,
    topic_named,
)
from rocketcluster.broker.security import guard_servicer
from rocketcluster.broker.security.auth import Authenticator, AuthError, Kind, Principal, require
from rocketcluster.broker.security.guard import Check, Observe

if TYPE_CHECKING:
    from rocketcluster.broker.messaging.runtime import MessagingRuntime

log = logging.getLogger(__name__)

SERVICE = "rocketcluster.consume.v1.ConsumeService"
FORWARDED_HEADER = "x-rc-forwarded"
MAX_ACK = MAX_BATCH * 4  # receipts per AckBatch: a few receives' worth
MIB = 1024 * 1024
DEFAULT_REPLY_BYTES = 4 * MIB  # ReceiveBatch's byte budget when the request names none
MAX_REPLY_BYTES = 64 * MIB  # the most a request may ask for (the largest message size)
R = TypeVar("R")


def _status(code: int, message: str) -> cpb.Status:
    return cpb.Status(code=code, message=message)


OK_STATUS = _status(Code.OK, "OK")


def checked_reply_bytes(max_bytes: int) -> int:
    """The byte budget of one ReceiveBatch answer: it is one gRPC frame, held whole
    in memory on both sides, so 1,024 large messages must not become one answer."""
    if max_bytes == 0:
        return DEFAULT_REPLY_BYTES
    if not 0 < max_bytes <= MAX_REPLY_BYTES:
        raise MessagingError(
            Code.BAD_REQUEST,
            f"max_bytes must be within [1, {MAX_REPLY_BYTES}] (0: {DEFAULT_REPLY_BYTES}), "
            f"not {max_bytes}",
        )
    return max_bytes


def _forwarded(context: Any) -> bool:
    return bool(header(context, FORWARDED_HEADER))


class ConsumeServicer:
    def __init__(self, runtime: MessagingRuntime) -> None:
        self._rt = runtime

    async def _call(
        self,
        rpc: str,
        request: Any,
        context: Any,
        reply_type: Callable[..., R],
        handle: Callable[[str], Awaitable[R]],
    ) -> R:
        """Forward to the master when this broker is not it; turn expected failures
        into the reply's status; one RPC metric per call."""
        started = time.perf_counter()
        code = Code.OK
        try:
            client_id = client_id_of(context)
            master = self._rt.forward_to()
            if master is not None and not _forwarded(context):
                reply: Any = await self._rt.forwarder.call(
                    master, f"/{SERVICE}/{rpc}", request, reply_type, context
                )
            else:
                reply = await handle(client_id)
            code = reply.status.code
            return reply  # type: ignore[no-any-return]
        except MessagingError as exc:
            code = exc.code
            return reply_type(status=_status(exc.code, exc.message))
        except Exception as exc:
            log.exception("%s failed", rpc)
            code = Code.INTERNAL_ERROR
            return reply_type(status=_status(Code.INTERNAL_ERROR, f"{rpc} failed: {exc}"))
        finally:
            self._rt.metrics.observe_rpc(rpc, code, time.perf_counter() - started)

    async def ReceiveBatch(
        self, request: cpb.ReceiveBatchRequest, context: Any
    ) -> cpb.ReceiveBatchReply:
        async def handle(client_id: str) -> cpb.ReceiveBatchReply:
            rt = self._rt
            group = rt.registry.require_group(request.group)
            topic = rt.registry.require_topic(request.topic)
            flt = receive_filter(
                rt, request.sql, request.expression or ("" if request.sql else "*")
            )
            invisible_ms = checked_invisible_ms(rt, request.auto_renew, request.invisible_ms)
            batch = checked_batch(request.batch_size)
            max_bytes = checked_reply_bytes(request.max_bytes)
            wait = long_poll_seconds(rt, request.long_polling_ms, context)
            rt.clients.touch(client_id, group=group.name)
            deliveries = await rt.pop.receive(
                group,
                topic,
                -1,
                flt,
                batch,
                invisible_ms,
                auto_renew=request.auto_renew,
                client_id=client_id,
                wait_seconds=wait,
                max_bytes=max_bytes,
            )
            if not deliveries:
                return cpb.ReceiveBatchReply(
                    status=_status(Code.MESSAGE_NOT_FOUND, "no new message")
                )
            parts: list[bytes] = []
            add = parts.append
            pack = HEADER.pack
            for d in deliveries:  # the one per-message loop: a pack and three appends
                msg = d.message
                r = d.receipt
                props = msg.raw_properties  # as stored: no decode, no re-encode
                body = msg.body
                add(
                    pack(
                        RECEIPT_VERSION,
                        r.queue_id,
                        r.queue_offset,
                        r.attempt,
                        r.nonce,
                        r.deadline_ms,
                        msg.born_timestamp,
                        msg.store_timestamp,
                        msg.queue_id,
                        msg.queue_offset,
                        len(props),
                        len(body),
                    )
                )
                add(props)
                add(body)
            rt.metrics.delivered(topic.name, group.name, deliveries)
            return cpb.ReceiveBatchReply(
                status=OK_STATUS,
                count=len(deliveries),
                records=b"".join(parts),
                invisible_ms=deliveries[0].invisible_ms,
            )

        return await self._call("ReceiveBatch", request, context, cpb.ReceiveBatchReply, handle)

    async def AckBatch(self, request: cpb.AckBatchRequest, context: Any) -> cpb.AckBatchReply:
        async def handle(client_id: str) -> cpb.AckBatchReply:
            rt = self._rt
            problem = group_name_problem(request.group) if request.group else None
            if problem:
                raise MessagingError(
                    Code.ILLEGAL_CONSUMER_GROUP,
                    f"consumer group {request.group[:300]!r}: {problem}",
                )
            group = rt.registry.require_group(request.group)
            topic = rt.registry.require_topic(topic_named(request.topic))
            raw = request.receipts
            if not raw or len(raw) % RECEIPT_SIZE:
                raise MessagingError(
                    Code.INVALID_RECEIPT_HANDLE,
                    f"receipts must be a non-empty sequence of {RECEIPT_SIZE}-byte receipts, "
                    f"got {len(raw)} bytes",
                )
            count = len(raw) // RECEIPT_SIZE
            if count > MAX_ACK:
                raise MessagingError(
                    Code.BAD_REQUEST, f"at most {MAX_ACK} receipts per AckBatch, got {count}"
                )
            receipts: list[tuple[int, int]] = []
            bad: dict[int, MessagingError] = {}
            for i, (version, qid, offset, *_rest) in enumerate(RECEIPT.iter_unpack(raw)):
                if version != RECEIPT_VERSION:
                    bad[i] = MessagingError(
                        Code.INVALID_RECEIPT_HANDLE, f"receipt version {version} is unknown"
                    )
                    receipts.append((-1, 0))
                else:
                    receipts.append((qid, offset))
            failed = rt.pop.ack_many(group.name, topic, receipts)
            failed.update(bad)
            try:  # one journal write (shared with concurrent acks) before the answer
                await rt.pop.recorded("the acknowledgement")
            except MessagingError as journal_error:
                if len(failed) == len(receipts):
                    raise
                for i in range(len(receipts)):
                    failed.setdefault(i, journal_error)
            reply = cpb.AckBatchReply()
            for i in sorted(failed):
                error = failed[i]
                reply.failed.add(index=i, status=_status(error.code, error.message))
            if not failed:
                reply.status.CopyFrom(OK_STATUS)
            elif len(failed) == len(receipts) and len({e.code for e in failed.values()}) == 1:
                first = next(iter(failed.values()))
                reply.status.CopyFrom(_status(first.code, first.message))
            else:
                reply.status.CopyFrom(
                    _status(Code.MULTIPLE_RESULTS, f"{len(failed)} of {len(receipts)} failed")
                )
            return reply

        return await self._call("AckBatch", request, context, cpb.AckBatchReply, handle)


# -- the client port's handler: authentication, ACLs, client limits --------------------


def _sub_topic_and_group(principal: Principal, request: Any) -> None:
    require(principal, Kind.TOPIC, request.topic, Action.SUB)
    require(principal, Kind.GROUP, request.group, Action.SUB)


CHECKS: Final[dict[str, Check]] = {
    "ReceiveBatch": _sub_topic_and_group,
    "AckBatch": _sub_topic_and_group,
}
_REPLIES: Final[dict[str, Any]] = {
    "ReceiveBatch": cpb.ReceiveBatchReply,
    "AckBatch": cpb.AckBatchReply,
}


def _refusal(method: str, request: Any, error: AuthError) -> Any:
    return _REPLIES[method](status=_status(error.code, error.message))


def consume_handler(
    runtime: MessagingRuntime,
    auth: AuthProcessConfig,
    admission: ClientAdmission,
    observe: Observe | None = None,
    users: WatchedFile[Authenticator] | None = None,
) -> grpc.GenericRpcHandler:
    """ConsumeService on the client port, behind the same auth (``users``: the source
    MessagingService's guard reads) and the same client-limit ledger."""
    return guarded_consume_handler(ConsumeServicer(runtime), auth, admission, observe, users)


def guarded_consume_handler(
    servicer: Any,
    auth: AuthProcessConfig,
    admission: ClientAdmission,
    observe: Observe | None = None,
    users: WatchedFile[Authenticator] | None = None,
    raw_replies: bool = False,
    raw_requests: bool = False,
) -> grpc.GenericRpcHandler:
    """ConsumeService's handlers for ``servicer`` (ours, or a front process's relay:
    ``raw_replies``, ``raw_requests``), behind auth and admission."""
    guarded = guard_servicer(servicer, auth, observe, CHECKS, _refusal, users)
    descriptor = cpb.DESCRIPTOR.services_by_name["ConsumeService"]
    return admission.handler(
        guarded,
        descriptor,
        cpb,
        cpb.Status,
        raw_replies=raw_replies,
        raw_requests=raw_requests,
    )

"""A message's server-side trace as this broker holds it (messaging/trace.py): the
events of RMQ_SYS_TRACE_DATA keyed by the message's id, local and tiered. A console
asks every broker of a cluster and merges the answers by time."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from rocketcluster.api.names import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPIC_PREFIX, MessageId
from rocketcluster.broker.messaging import queries
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.messaging.trace import TRACE_TOPIC, read_trace
from rocketcluster.broker.store import StoredMessage

# Events one answer holds at most (a message redelivered 1,000 times has ~2,000).
MAX_EVENTS = 5000
_COPIES = (SYSTEM_TOPIC_PREFIX, DLQ_PREFIX, RETRY_PREFIX)


def _original(found: list[StoredMessage]) -> StoredMessage | None:
    """The message as its producer sent it, not a copy the broker made of it (a dead
    letter, a delay message's wait in the timer topic)."""
    for msg in found:
        if not msg.topic.startswith(_COPIES):
            return msg
    return None


def trace_router(rt: MessagingRuntime) -> APIRouter:
    router = APIRouter(tags=["messages"])
    store = rt.store

    @router.get("/v1/messages/{message_id}/trace")
    async def message_trace(message_id: MessageId) -> dict[str, Any]:
        """The trace events of a message this broker holds, by time: ``sent``,
        ``stored``, ``replicated``, ``delivered``, ``acked``, ``expired``,
        ``dead-lettered``, ``resent`` (each with ``type``, ``time`` in epoch ms,
        ``broker``, ``group`` and the fields of its type). ``traced``: whether this
        broker traces the message now (its topic's ``trace`` and the id's sample);
        null when the message is not stored here. 404 when neither the message nor
        any event of it is."""

        async def lookup(key: str) -> list[StoredMessage]:
            return await queries.lookup_by_key(store, rt.tier, TRACE_TOPIC, key, MAX_EVENTS)

        events = await read_trace(lookup, message_id)
        message = _original(await queries.lookup_by_id(store, rt.tier, message_id))
        if not events and message is None:
            raise HTTPException(
                404,
                detail=f"this broker holds neither message {message_id!r} nor any trace "
                "event of it (another broker group may: ask each)",
            )
        traced = rt.trace.wants(message.topic, message_id) if message is not None else None
        return {"messageId": message_id, "events": events, "traced": traced}

    return router

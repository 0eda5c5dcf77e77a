"""A consumer group's dead-letter queue: its messages a page at a time, and resending
them to the group (messaging/dead_letters.py: to the origin topic, for that group
only, with its delivery attempts starting over)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Self

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rocketcluster.api.names import GroupName, MessageId, dlq_topic
from rocketcluster.broker.admin.views import (
    from_messaging,
    message_view,
    read_queue,
    require_group,
    require_master,
)
from rocketcluster.broker.messaging import dead_letters, queries
from rocketcluster.broker.messaging.codes import MessagingError
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.store import StoredMessage

MAX_DLQ_PAGE: Final = 100
DEFAULT_DLQ_PAGE: Final = 20


class ResendRequest(BaseModel):
    """Which dead letters to resend: by message id, or every one (not both)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    message_ids: list[MessageId] | None = Field(
        None, alias="messageIds", min_length=1, max_length=dead_letters.MAX_RESEND
    )
    all: bool = False

    @model_validator(mode="after")
    def _one_choice(self) -> Self:
        if (self.message_ids is not None) == self.all:
            raise ValueError('give either "messageIds" or "all": true')
        return self


class _TraceResent:
    """Resent dead letters into the message traces (messaging/trace.py)."""

    def __init__(self, rt: MessagingRuntime, by: str) -> None:
        self._rt = rt
        self._by = by

    def resent(self, group: str, dead: StoredMessage, copy: dead_letters.Resent) -> None:
        self._rt.trace.record_resent(
            copy.message_id,
            topic=copy.topic,
            consumer_group=group,
            from_topic=dead.topic,
            by=self._by,
        )


def _dead_letter_view(msg: StoredMessage) -> dict[str, Any]:
    return {
        **message_view(msg),
        "originTopic": dead_letters.origin_topic(msg),
        "originMessageId": msg.msg_id,  # a dead letter keeps its message's id
        "attempts": dead_letters.delivery_attempts(msg),
    }


def dlq_router(rt: MessagingRuntime) -> APIRouter:
    router = APIRouter(tags=["consumer groups"])
    store = rt.store

    def bounds(group: str) -> dead_letters.DlqBounds:
        topic = rt.registry.get_topic(dlq_topic(group))
        return dead_letters.dlq_bounds(store, group, topic.queues if topic else 0)

    @router.get("/v1/groups/{name}/dlq")
    async def dead_letter_queue(
        name: GroupName,
        from_offset: Annotated[int, Query(alias="from", ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_DLQ_PAGE)] = DEFAULT_DLQ_PAGE,
    ) -> dict[str, Any]:
        """The group's dead letters from offset ``from`` (continue from
        ``nextOffset``); a group that has none yet has an empty one."""
        require_group(rt, name)
        extent = bounds(name)
        got = (
            await read_queue(
                rt,
                extent.topic,
                dead_letters.DLQ_QUEUE,
                from_offset,
                limit,
                what="these dead letters",
            )
            if extent.max_offset > extent.min_offset
            else queries.QueueRead([], max(from_offset, extent.min_offset))
        )
        return {
            "group": name,
            "topic": extent.topic,
            "count": extent.count,
            "minOffset": extent.min_offset,
            "maxOffset": extent.max_offset,
            "nextOffset": got.next_offset,
            "messages": [_dead_letter_view(m) for m in got.messages],
        }

    @router.post("/v1/groups/{name}/dlq/resend")
    async def resend_dead_letters(
        name: GroupName, body: ResendRequest, request: Request
    ) -> dict[str, Any]:
        """Put dead letters back on their origin topics for this group only (other
        groups of the topic skip them); each keeps its message id and gets the
        group's delivery attempts anew. The copies in the DLQ stay."""
        require_master(rt, "resending dead letters")
        require_group(rt, name)
        extent = bounds(name)
        not_found: list[str] = []
        if body.all:
            if extent.count > dead_letters.MAX_RESEND:
                raise HTTPException(
                    422,
                    detail=f"the DLQ of {name!r} holds {extent.count} messages, more than "
                    f"{dead_letters.MAX_RESEND} at once: resend them by messageIds, a page "
                    "at a time",
                )
            dead = (
                await read_queue(
                    rt,
                    extent.topic,
                    dead_letters.DLQ_QUEUE,
                    extent.min_offset,
                    dead_letters.MAX_RESEND,
                    what="these dead letters",
                )
            ).messages
        else:
            dead = []
            for message_id in dict.fromkeys(body.message_ids or []):
                copies = [
                    m
                    for m in await queries.lookup_by_id(store, rt.tier, message_id)
                    if m.topic == extent.topic
                ]
                if copies:
                    dead.append(max(copies, key=lambda m: m.queue_offset))  # the newest
                else:
                    not_found.append(message_id)
        try:
            by = f"admin API ({request.client.host})" if request.client else "admin API"
            resent = await dead_letters.resend(rt, name, dead, _TraceResent(rt, by))
        except MessagingError as exc:
            raise from_messaging(exc) from exc
        return {"resent": [r.to_json() for r in resent], "notFound": not_found}

    return router

"""Browsing a topic's messages: a queue from an offset, every queue over a span of
store times, one message's whole body. The local store first, then the tier for
what local retention removed (messaging/queries.py)."""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, HTTPException, Path, Query, Response

from rocketcluster.api.names import TopicName
from rocketcluster.broker.admin.views import (
    message_view,
    read_queue,
    require_queue,
    require_topic,
)
from rocketcluster.broker.messaging import queries
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.store import StoredMessage

MAX_BROWSE: Final = 100
DEFAULT_BROWSE: Final = 20
MAX_TIME_RANGE: Final = 200
DEFAULT_TIME_RANGE: Final = 50

QueueId = Annotated[int, Path(ge=0, description="queue id")]


def browse_router(rt: MessagingRuntime) -> APIRouter:
    router = APIRouter(tags=["messages"])
    store = rt.store

    @router.get("/v1/topics/{name}/queues/{queue_id}/messages")
    async def browse_queue(
        name: TopicName,
        queue_id: QueueId,
        from_offset: Annotated[int, Query(alias="from", ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_BROWSE)] = DEFAULT_BROWSE,
    ) -> dict[str, Any]:
        """Up to ``limit`` messages of a queue from offset ``from`` (from the queue's
        first when ``from`` is below it; none at or after its end); continue from
        ``nextOffset``."""
        require_queue(rt, name, queue_id)
        lo, hi = store.queue_offsets(name, queue_id)
        got = await read_queue(rt, name, queue_id, from_offset, limit)
        return {
            "topic": name,
            "queueId": queue_id,
            "minOffset": lo,
            "maxOffset": hi,
            "nextOffset": got.next_offset,
            "messages": [message_view(m) for m in got.messages],
        }

    @router.get("/v1/topics/{name}/messages")
    async def browse_time_range(
        name: TopicName,
        start: Annotated[int, Query(ge=0, description="epoch ms, inclusive")],
        end: Annotated[int, Query(ge=0, description="epoch ms, inclusive")],
        limit: Annotated[int, Query(ge=1, le=MAX_TIME_RANGE)] = DEFAULT_TIME_RANGE,
    ) -> dict[str, Any]:
        """The first ``limit`` messages of every queue of the topic stored between
        ``start`` and ``end``, by store time; ``truncated`` when there are more."""
        if start > end:
            raise HTTPException(400, detail=f"start ({start}) is after end ({end})")
        topic = require_topic(rt, name)
        found: list[StoredMessage] = []
        for qid in range(topic.queues):
            offset = await queries.offset_for_time(store, rt.tier, name, qid, start)
            got = await read_queue(rt, name, qid, offset, limit + 1, until_ms=end)
            found += got.messages
        found.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
        return {
            "topic": name,
            "start": start,
            "end": end,
            "messages": [message_view(m) for m in found[:limit]],
            "truncated": len(found) > limit,
        }

    @router.get(
        "/v1/topics/{name}/queues/{queue_id}/messages/{offset}/body",
        response_class=Response,
        responses={200: {"content": {"application/octet-stream": {}}}},
    )
    async def message_body(
        name: TopicName, queue_id: QueueId, offset: Annotated[int, Path(ge=0)]
    ) -> Response:
        """The whole body of the message at ``offset``, as a file."""
        require_queue(rt, name, queue_id)
        lo, hi = store.queue_offsets(name, queue_id)
        if not lo <= offset < hi:
            raise HTTPException(
                404, detail=f"queue {queue_id} of {name!r} holds offsets [{lo}, {hi}), not {offset}"
            )
        got = await read_queue(rt, name, queue_id, offset, 1)
        if not got.messages or got.messages[0].queue_offset != offset:
            raise HTTPException(
                404, detail=f"the message at offset {offset} of {name}/{queue_id} is gone"
            )
        return Response(
            got.messages[0].body,
            media_type="application/octet-stream",
            headers={
                "Content-Disposition": f'attachment; filename="{name}-{queue_id}-{offset}.bin"'
            },
        )

    return router

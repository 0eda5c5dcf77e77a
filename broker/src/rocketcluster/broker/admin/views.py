"""What the admin API shows of a stored message, and the checks its message and
group routes share: names that must exist (404), writes only on the master (409).
"""

from __future__ import annotations

import base64
from typing import Any, Final

from fastapi import HTTPException

from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging import queries
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.messaging.runtime import MessagingRuntime
from rocketcluster.broker.store import StoredMessage

PREVIEW_BYTES: Final = 4096


def message_view(msg: StoredMessage) -> dict[str, Any]:
    """A message as JSON: its place, ids, tag and keys, the user's properties apart
    from the broker's (``systemProperties``: message id, tag, keys, DLQ and
    transaction markers …), and the first PREVIEW_BYTES of its body (``bodyText``
    when they are UTF-8; the whole body: GET …/messages/{offset}/body)."""
    body = msg.body[:PREVIEW_BYTES]
    try:
        text: str | None = body.decode()
    except UnicodeDecodeError:
        text = None
    props = msg.properties
    return {
        "messageId": msg.msg_id,
        "topic": msg.topic,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.physical_offset,
        "tag": msg.tag,
        "keys": list(msg.keys),
        "properties": {k: v for k, v in props.items() if k not in prop.RESERVED},
        "systemProperties": {k: v for k, v in props.items() if k in prop.RESERVED},
        "bornHost": props.get(prop.BORN_HOST),
        # The record does not carry the host that stored it (RocketMQ's does).
        "storeHost": None,
        "bornTimestamp": msg.born_timestamp,
        "storeTimestamp": msg.store_timestamp,
        "bodySize": len(msg.body),
        "bodyTruncated": len(msg.body) > PREVIEW_BYTES,
        "bodyCrc32": f"{msg.body_crc:08X}",
        "bodyText": text,
        "bodyBase64": base64.b64encode(body).decode(),
    }


# Status codes the messaging layer answers with, as HTTP statuses: the protocol's codes
# are the HTTP status times 100 plus a detail, except these.
_HTTP_STATUS: Final = {
    Code.FORBIDDEN: 409,  # the catalogue write-disables this broker group (a drain)
    Code.HA_NOT_AVAILABLE: 503,
    Code.MASTER_PERSISTENCE_TIMEOUT: 503,
    Code.SLAVE_PERSISTENCE_TIMEOUT: 503,
    Code.PROXY_TIMEOUT: 503,
    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: 422,
    Code.MESSAGE_BODY_EMPTY: 400,
    Code.MESSAGE_PROPERTIES_TOO_LARGE: 413,
}


def http_error(code: int, message: str) -> HTTPException:
    status = _HTTP_STATUS.get(code) or code // 100
    if not 400 <= status <= 599:
        status = 500
    return HTTPException(status, detail=message)


def from_messaging(exc: MessagingError) -> HTTPException:
    return http_error(exc.code, exc.message)


def require_topic(rt: MessagingRuntime, name: str) -> TopicSpec:
    topic = rt.registry.get_topic(name)
    if topic is None:
        raise HTTPException(404, detail=f"topic {name!r} does not exist")
    return topic


def require_queue(rt: MessagingRuntime, name: str, queue_id: int) -> TopicSpec:
    topic = require_topic(rt, name)
    if not 0 <= queue_id < topic.queues:
        raise HTTPException(
            404, detail=f"topic {name!r} has no queue {queue_id} (queues 0-{topic.queues - 1})"
        )
    return topic


def require_group(rt: MessagingRuntime, name: str) -> ConsumerGroupSpec:
    group = rt.registry.get_group(name)
    if group is None:
        raise HTTPException(404, detail=f"consumer group {name!r} does not exist")
    return group


def require_master(rt: MessagingRuntime, what: str) -> None:
    """A write through the admin API is the master's: a slave answers 409 and names
    its master when it knows it."""
    role = rt.role
    if role is None or role.is_master():
        return
    master = role.master_client_endpoint
    where = (
        f"its master (client endpoint {master})"
        if master
        else "its master (none is known right now; retry shortly)"
    )
    raise HTTPException(
        409,
        detail=f"{what}: this broker is a {role.role} of group {rt.config.group}; "
        f"send it to the admin API of {where}",
    )


async def read_queue(
    rt: MessagingRuntime,
    topic: str,
    queue_id: int,
    offset: int,
    limit: int,
    *,
    what: str = "these messages",
    until_ms: int | None = None,
) -> queries.QueueRead:
    """``queries.read_queue`` for an endpoint: the tier failing (the only thing that
    raises there: what it alone holds is unreadable) answers 503 naming ``what``."""
    try:
        return await queries.read_queue(
            rt.store, rt.tier, topic, queue_id, offset, limit, until_ms=until_ms
        )
    except Exception as exc:
        raise HTTPException(503, detail=f"the tier holds {what} and cannot be read: {exc}") from exc

"""A test message sent from the admin API: it takes the path of a client's
SendMessage (SendService: size limit, names, reserved properties, the topic's message
type, the write gate and the replication wait), so it is stored and delivered as a
client's message is. Its id is made as the official clients make theirs."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from typing import Any, Final, Self

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.v5.util.message_id_codec import MessageIdCodec

from rocketcluster.api.names import TopicName
from rocketcluster.broker.admin.views import (
    http_error,
    require_master,
    require_queue,
    require_topic,
)
from rocketcluster.broker.messaging.codes import OK
from rocketcluster.broker.messaging.runtime import MessagingRuntime

ADMIN_CLIENT_ID: Final = "rocketcluster-admin-api"
LANDED_WAIT_S: Final = 5.0  # how long the answer waits to see the message dispatched


class TestMessage(BaseModel):
    """One message; the body as text (UTF-8) or base64, exactly one of them."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    body: str | None = None
    body_base64: str | None = Field(None, alias="bodyBase64")
    keys: list[str] = Field(default_factory=list, max_length=64)
    tag: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)
    queue_id: int | None = Field(None, alias="queueId", ge=0)

    @model_validator(mode="after")
    def _one_body(self) -> Self:
        if (self.body is None) == (self.body_base64 is None):
            raise ValueError("give exactly one of body (text) and bodyBase64")
        if self.body_base64 is not None:
            try:
                base64.b64decode(self.body_base64, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"bodyBase64 is not base64: {exc}") from exc
        return self

    def payload(self) -> bytes:
        if self.body_base64 is not None:
            return base64.b64decode(self.body_base64, validate=True)
        return (self.body or "").encode()


def _message(topic: str, sent: TestMessage, born_host: str) -> pb.Message:
    msg = pb.Message()
    msg.topic.name = topic
    msg.body = sent.payload()
    sp = msg.system_properties
    sp.message_id = MessageIdCodec().next_message_id()
    sp.message_type = pb.MessageType.NORMAL
    if sent.tag is not None:
        sp.tag = sent.tag
    sp.keys.extend(sent.keys)
    if born_host:
        sp.born_host = born_host
    now_ms = int(time.time() * 1000)
    sp.born_timestamp.seconds = now_ms // 1000
    sp.born_timestamp.nanos = (now_ms % 1000) * 1_000_000
    msg.user_properties.update(sent.properties)
    return msg


def send_router(rt: MessagingRuntime) -> APIRouter:
    router = APIRouter(tags=["messages"])

    @router.post("/v1/topics/{name}/messages", status_code=201)
    async def send_test_message(
        name: TopicName, sent: TestMessage, request: Request
    ) -> dict[str, Any]:
        """Send one NORMAL message to the topic (on the master; a slave answers 409
        naming it); its id, queue, offset and store time."""
        require_master(rt, "sending a message")
        if sent.queue_id is None:
            require_topic(rt, name)
        else:
            require_queue(rt, name, sent.queue_id)
        client = request.client.host if request.client is not None else ""
        msg = _message(name, sent, client)
        outcomes = await rt.send.send([msg], ADMIN_CLIENT_ID, queue_id=sent.queue_id)
        rt.after_send(outcomes)
        outcome = outcomes[0]
        if outcome.code != OK:
            raise http_error(outcome.code, outcome.message)
        queue_id, store_timestamp = await _landed(rt, name, outcome.message_id, outcome.offset)
        return {
            "messageId": outcome.message_id,
            "topic": name,
            "queueId": queue_id if queue_id is not None else sent.queue_id,
            "queueOffset": outcome.offset,
            "storeTimestamp": store_timestamp,
        }

    return router


async def _landed(
    rt: MessagingRuntime, topic: str, message_id: str, offset: int
) -> tuple[int | None, int | None]:
    """The queue and store time of a message just stored, once it is dispatched
    (consumers see it then; with replication, once the slaves confirmed it): (None,
    None) when that takes longer than LANDED_WAIT_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LANDED_WAIT_S
    while (landed := rt.send.recent.get(topic, message_id)) is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return None, None
        await rt.notifier.wait(topic, min(remaining, 0.2))
    cq = rt.store.queues.get(topic, landed.queue_id)
    entry = None if cq is None else cq.get(landed.queue_offset)
    if entry is None or landed.queue_offset != offset:
        return landed.queue_id, None
    return landed.queue_id, rt.store.commitlog.store_timestamp(entry.physical_offset)

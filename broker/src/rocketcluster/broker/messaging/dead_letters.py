"""A consumer group's dead letters as the admin API shows and resends them.

A message that used up a group's delivery attempts is copied to ``%DLQ%<group>``
(queue 0, ``PopService``) with its origin topic, the group and the attempts. Resending
it puts a copy back on its origin topic for that group only: the copy keeps the
message id (its history goes on) and carries ``__RESEND_GROUP=<group>``; the POP path
treats it as filtered out for every other group of the topic (``_wanted`` in
pop.py), so they skip it as they skip a tag their subscription does not take. It is a
new message of the queue, so the group gets its full delivery attempts again. The
DLQ copy stays where it is: a dead-letter queue is a topic, and nothing is deleted
from a topic; resending it twice delivers it twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.names import dlq_topic
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.codes import Code, MessagingError, put_code
from rocketcluster.broker.messaging.convert import copy_to, message_type_of
from rocketcluster.broker.store import MessageStore, MessageToStore, StoredMessage
from rocketcluster.broker.store.record import SysFlag

if TYPE_CHECKING:
    from rocketcluster.broker.messaging.runtime import MessagingRuntime

DLQ_QUEUE: Final = 0  # dead letters are written to queue 0 of %DLQ%<group>
MAX_RESEND: Final = 1000  # messages one resend request may name (or "all" may cover)
RESEND_BATCH_BYTES: Final = 16 << 20  # bodies stored per put (one replication wait)
# Properties of the dead letter the resent copy does not carry (its DLQ bookkeeping).
_DROPPED: Final = (
    prop.ORIGIN_TOPIC,
    prop.ORIGIN_GROUP,
    prop.DLQ_DELIVERY_ATTEMPTS,
    prop.RESEND_GROUP,
)
_FIFO: Final = int(pb.MessageType.FIFO)


@dataclass(frozen=True, slots=True)
class DlqBounds:
    topic: str
    count: int  # messages in the DLQ (max - min over its queues)
    min_offset: int  # of queue 0, where dead letters are written
    max_offset: int


def dlq_bounds(store: MessageStore, group: str, queues: int) -> DlqBounds:
    """The extent of ``group``'s DLQ topic (``queues``: its queue count, 0 when the
    topic was never created)."""
    topic = dlq_topic(group)
    count = 0
    for qid in range(queues):
        lo, hi = store.queue_offsets(topic, qid)
        count += hi - lo
    lo, hi = store.queue_offsets(topic, DLQ_QUEUE) if queues else (0, 0)
    return DlqBounds(topic, count, lo, hi)


@dataclass(frozen=True, slots=True)
class Resent:
    message_id: str
    topic: str
    queue_id: int
    queue_offset: int

    def to_json(self) -> dict[str, object]:
        return {
            "messageId": self.message_id,
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
        }


class ResendObserver(Protocol):
    """Told about each dead letter once its copy is stored again (message traces)."""

    def resent(self, group: str, dead: StoredMessage, copy: Resent) -> None: ...


def origin_topic(dead: StoredMessage) -> str | None:
    return dead.properties.get(prop.ORIGIN_TOPIC)


def delivery_attempts(dead: StoredMessage) -> int | None:
    raw = dead.properties.get(prop.DLQ_DELIVERY_ATTEMPTS, "")
    return int(raw) if raw.isdigit() else None


async def resend(
    rt: MessagingRuntime,
    group: str,
    dead: Sequence[StoredMessage],
    observer: ResendObserver | None = None,
) -> list[Resent]:
    """Store a copy of each dead letter of ``group`` on its origin topic, for that
    group only, the way sends are stored (refused without enough in-sync replicas,
    answered once replicated); the copies in the order of ``dead``.

    Raises MessagingError: FORBIDDEN while the catalogue write-disables this broker
    group, TOPIC_NOT_FOUND when an origin topic is gone (nothing is stored then),
    BAD_REQUEST for a message that is no dead letter, the write's failure otherwise
    (copies of earlier batches stay stored)."""
    refusal = rt.send.write_refusal
    if refusal is not None:
        raise MessagingError(Code.FORBIDDEN, refusal)
    records = [_copy(rt, group, msg) for msg in dead]
    out: list[Resent] = []
    for batch in _batches(records):
        result = await rt.write_system([r for r, _ in batch])
        if not result.ok:
            raise MessagingError(
                put_code(result.status),
                f"storing the resent messages failed after {len(out)} of {len(records)}: "
                f"{result.reason or result.status.value}",
            )
        for (record, msg), stored in zip(batch, result.records, strict=True):
            copy = Resent(record.msg_id, record.topic, record.queue_id, stored.queue_offset)
            out.append(copy)
            if observer is not None:
                observer.resent(group, msg, copy)
    return out


def _copy(
    rt: MessagingRuntime, group: str, dead: StoredMessage
) -> tuple[MessageToStore, StoredMessage]:
    origin = origin_topic(dead)
    if not origin or dead.properties.get(prop.ORIGIN_GROUP, group) != group:
        raise MessagingError(
            Code.BAD_REQUEST, f"message {dead.msg_id} is not a dead letter of group {group!r}"
        )
    topic = rt.registry.get_topic(origin)
    if topic is None:
        raise MessagingError(
            Code.TOPIC_NOT_FOUND,
            f"topic {origin!r} of dead letter {dead.msg_id} no longer exists: nothing resent",
        )
    fifo = message_type_of(dead) == _FIFO
    queue_id = rt.send.queue_for(topic, dead.properties.get(prop.MESSAGE_GROUP, ""))
    record = copy_to(
        dead,
        topic.name,
        queue_id,
        drop=_DROPPED,
        extra={prop.RESEND_GROUP: group},
        sys_flag=int(SysFlag.FIFO) if fifo else 0,
    )
    return record, dead


def _batches(
    records: list[tuple[MessageToStore, StoredMessage]],
) -> Iterator[list[tuple[MessageToStore, StoredMessage]]]:
    batch: list[tuple[MessageToStore, StoredMessage]] = []
    size = 0
    for item in records:
        if batch and size + len(item[0].body) > RESEND_BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item[0].body)
    if batch:
        yield batch

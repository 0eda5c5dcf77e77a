"""The rows of a stats snapshot (api/stats.py), from the store and the consume state.

Plain functions over the store's structures and the time passed in, so tests check
them on a real store with known answers and the publisher only schedules them.

What is reported: every queue of every topic except the broker's own ``RMQ_SYS_*``
topics (the stats topic itself, the timer and transaction-half topics, whose records
no consumer reads directly); retry and dead-letter topics are included. Consumer rows
come from the live consume state, and from the committed offsets kept in the metadata
for the groups not seen since this broker started or became master: a stopped consumer
must keep showing its lag across a restart or a failover.

``retry``: this broker retries in place (POP): a nacked or expired delivery waits in
its queue for redelivery, and no ``%RETRY%`` topic is written by the broker. A row's
retry count is therefore its messages waiting for redelivery; on a row of the group's
own ``%RETRY%<group>`` topic (one an application created) it is everything the group
has not consumed there.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass

from rocketcluster.api.names import SYSTEM_TOPIC_PREFIX, retry_topic
from rocketcluster.api.stats import StatsSnapshot, snapshot_head
from rocketcluster.api.topics import TopicSpec
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.stats.reads import ReadRecorder
from rocketcluster.broker.stats.rows import ConsumerRow, QueueRow, SegmentRow
from rocketcluster.broker.stats.segments import ShareRow
from rocketcluster.broker.store import CommitLog, StoreError
from rocketcluster.broker.store.consumequeue import ConsumeQueue, ConsumeQueueTable

StateKey = tuple[str, str, int]  # consumer group, topic, queue id
QueueKey = tuple[str, int]
SegmentKey = tuple[str, int, int]  # topic, queue id, segment


def reported(topic: str) -> bool:
    """Whether a topic's queues appear in snapshots (not the broker's own topics)."""
    return not topic.startswith(SYSTEM_TOPIC_PREFIX)


def entry_store_time(cq: ConsumeQueue | None, index: int, clog: CommitLog) -> int | None:
    """Store time of message ``index`` of ``cq``; None when the queue has no such one."""
    if cq is None:
        return None
    try:
        entry = cq.get(index)
    except (StoreError, ValueError):  # the queue was deleted meanwhile (a deleted topic)
        return None
    return None if entry is None else clog.store_timestamp(entry.physical_offset)


@dataclass(frozen=True, slots=True)
class Position:
    """Where one group stands on one queue."""

    committed: int
    inflight: int = 0
    waiting: int = 0  # delivered, visible again, not yet redelivered


def positions(
    states: Mapping[StateKey, QueueConsumeState],
    offsets: Mapping[StateKey, int],
    served_groups: Container[str],
    now_ms: int,
) -> dict[StateKey, Position]:
    """Live consume state first; a saved committed offset of a served group otherwise."""
    out: dict[StateKey, Position] = {}
    for key, state in states.items():
        inflight = state.inflight_count(now_ms)
        expired = len(state.inflight) - inflight
        out[key] = Position(state.committed, inflight, len(state.waiting) + expired)
    for key, committed in offsets.items():
        if key not in out and key[0] in served_groups:
            out[key] = Position(committed)
    return out


def topic_queue_keys(topics: Iterable[TopicSpec]) -> list[QueueKey]:
    """Every queue of the served ``topics``, without the broker's own topics."""
    return [(t.name, q) for t in topics if reported(t.name) for q in range(t.queues)]


def retired_queue_keys(
    queues: Iterable[ConsumeQueue], served: Container[QueueKey]
) -> list[QueueKey]:
    """Queues the store holds that no served topic names (a retired topic's messages
    still take space), without the broker's own topics."""
    return [
        key
        for cq in queues
        if reported(cq.topic) and (key := (cq.topic, cq.queue_id)) not in served
    ]


def queue_stats(
    keys: Iterable[QueueKey],
    table: ConsumeQueueTable,
    clog: CommitLog,
    reads: ReadRecorder,
    previous: Mapping[QueueKey, QueueRow] | None = None,
) -> list[QueueRow]:
    """A row per queue. A row of ``previous`` (the last snapshot's) whose offsets and
    last read are unchanged is reused as it is: its store times are those of the same
    entries, and reading them again costs two commit-log reads a queue, which with
    100,000 queues was most of a snapshot. (Only a truncated log rewrites entries
    under the same offsets; the publisher starts over when it becomes master.)"""
    rows = []
    for topic, qid in keys:
        cq = table.get(topic, qid)
        lo, hi = (cq.min_index, cq.max_index) if cq is not None else (0, 0)
        last_read = reads.queue(topic, qid)
        prev = previous.get((topic, qid)) if previous else None
        if (
            prev is not None
            and prev.min_offset == lo
            and prev.max_offset == hi
            and prev.last_read_time == last_read
        ):
            rows.append(prev)
            continue
        rows.append(
            QueueRow(
                topic,
                qid,
                lo,
                hi,
                head_store_time=entry_store_time(cq, lo, clog) if hi > lo else None,
                tail_store_time=entry_store_time(cq, hi - 1, clog) if hi > lo else None,
                last_read_time=last_read,
            )
        )
    return rows


def consumer_stats(
    where: Mapping[StateKey, Position], table: ConsumeQueueTable, clog: CommitLog
) -> list[ConsumerRow]:
    rows = []
    for (group, topic, qid), pos in sorted(where.items()):
        if not reported(topic):
            continue
        cq = table.get(topic, qid)
        lo, hi = (cq.min_index, cq.max_index) if cq is not None else (0, 0)
        # Below the queue's start, retention took what the group never read: its
        # oldest unconsumed message is the head.
        oldest = max(pos.committed, lo)
        own_retry = topic == retry_topic(group)
        rows.append(
            ConsumerRow(
                group,
                topic,
                qid,
                pos.committed,
                lo,
                hi,
                committed_store_time=entry_store_time(cq, oldest, clog) if oldest < hi else None,
                inflight=pos.inflight,
                retry=max(0, hi - oldest) if own_retry else pos.waiting,
            )
        )
    return rows


def segment_stats(
    shares: Iterable[ShareRow],
    reads: ReadRecorder,
    tiered_below: Callable[[str, int], float] | None = None,
    segment_size: int = 0,
    previous: Mapping[SegmentKey, SegmentRow] | None = None,
) -> list[SegmentRow]:
    """``tiered_below(topic, queue)``: the commit-log offset below which the queue's
    messages are all in the tier; a row is tiered when its whole segment is below.
    A row of ``previous`` equal in every field is reused (nothing built or encoded again)."""

    def tiered(row: ShareRow) -> bool:
        return tiered_below is not None and row.segment + segment_size <= tiered_below(
            row.topic, row.queue_id
        )

    out = []
    for row in shares:
        if not reported(row.topic):
            continue
        share, last_read, in_tier = row.share, reads.segment(row.segment), tiered(row)
        prev = previous.get((row.topic, row.queue_id, row.segment)) if previous else None
        if (
            prev is not None
            and prev.bytes == share.bytes
            and prev.messages == share.messages
            and prev.min_store_time == share.min_store_time
            and prev.max_store_time == share.max_store_time
            and prev.last_read_time == last_read
            and prev.tiered == in_tier
        ):
            out.append(prev)
            continue
        out.append(
            SegmentRow(
                row.topic,
                row.queue_id,
                row.segment,
                share.bytes,
                share.messages,
                min_store_time=share.min_store_time,
                max_store_time=share.max_store_time,
                last_read_time=last_read,
                tiered=in_tier,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Identity:
    cluster: str
    broker_group: str
    broker_id: int


def snapshot_head_of(identity: Identity, now_ms: int) -> dict[str, object]:
    """What every body of the snapshot taken at ``now_ms`` repeats, as the format's
    model writes it."""
    return snapshot_head(
        StatsSnapshot(
            time=now_ms,
            cluster=identity.cluster,
            broker_group=identity.broker_group,
            broker_id=identity.broker_id,
        )
    )

"""StatsPublisherService: the master appends a stats snapshot to the stats topic every
``statsIntervalSeconds``.

Written through the broker's normal write path (the replication gate, the store, the
wait for in-sync replicas), so the snapshots are replicated like any data, trimmed by
the same retention, and a master elected after a failover goes on appending to the
same topic. Only a master publishes; a slave keeps no counting state worth anything
(its log may be truncated when it follows a new master), so counting starts over when
a broker becomes master. A publish that fails (a full disk, the role lost mid-way) is
logged when the reason changes, retried at the next interval, and never stops the
service.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.stats import ROW_KINDS, STATS_TOPIC, pack_bodies
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.registry import TopicRegistry
from rocketcluster.broker.stats import collect
from rocketcluster.broker.stats.collect import Identity, QueueKey, SegmentKey, StateKey
from rocketcluster.broker.stats.reads import ReadRecorder
from rocketcluster.broker.stats.rows import ConsumerRow, QueueRow, SegmentRow
from rocketcluster.broker.stats.segments import SegmentTracker
from rocketcluster.broker.store import MessageStore, MessageToStore, PutResult, StoreError
from rocketcluster.broker.store.consumequeue import ConsumeQueue
from rocketcluster.broker.store.record import encode_properties

log = logging.getLogger(__name__)
T = TypeVar("T")

# Work between two yields to the loop: a broker with many queues keeps serving while
# a snapshot is built.
SCAN_CHUNK = 65_536  # consume-queue entries counted
ROWS_PER_STEP = 512  # queue or consumer rows built: ~1.5 ms of the loop
STATS_QUEUE = 0
_PROPERTIES = {prop.MESSAGE_TYPE: str(int(pb.MessageType.NORMAL))}

Writer = Callable[[Sequence[MessageToStore]], Awaitable[PutResult]]


@dataclass(frozen=True, slots=True)
class StatsSources:
    """What a snapshot is built from."""

    store: MessageStore
    registry: TopicRegistry
    states: Callable[[], Mapping[StateKey, QueueConsumeState]]
    reads: ReadRecorder
    identity: Callable[[], Identity]
    # Tiered storage: the commit-log offset below which a queue's messages are all in
    # the tier (segment rows say whether the tier holds their part); None: no tier.
    tiered_below: Callable[[str, int], float] | None = None


@dataclass(frozen=True, slots=True)
class SnapshotRows:
    """One snapshot as a broker builds it: the head every body repeats and the rows,
    each with its JSON."""

    head: dict[str, object]
    queues: list[QueueRow]
    consumers: list[ConsumerRow]
    segments: list[SegmentRow]

    @property
    def count(self) -> int:
        return len(self.queues) + len(self.consumers) + len(self.segments)

    def bodies_input(self) -> list[tuple[str, bytes]]:
        """``(kind, row JSON)`` in the order bodies hold them."""
        kinds: dict[str, list[QueueRow] | list[ConsumerRow] | list[SegmentRow]] = {
            "queues": self.queues,
            "consumers": self.consumers,
            "segments": self.segments,
        }
        return [(kind, row.json) for kind in ROW_KINDS for row in kinds[kind]]


@dataclass(frozen=True, slots=True)
class Published:
    """One snapshot appended: its time, messages, rows and what it cost."""

    time: int
    messages: int
    rows: int
    first_offset: int  # queue offset of its first message in the stats topic
    collect_seconds: float
    write_seconds: float


class StatsPublisherService:
    def __init__(
        self,
        sources: StatsSources,
        write: Writer,
        active: Callable[[], bool],
        *,
        interval_s: float,
        max_body: int,
    ) -> None:
        if interval_s < 0:
            raise ValueError(f"statsIntervalSeconds must be >= 0 (0 disables), not {interval_s}")
        self._sources = sources
        self._write = write
        self._active = active
        self.interval_s = interval_s
        self.max_body = max_body
        clog = sources.store.commitlog
        self.tracker = SegmentTracker(clog.segment_size, clog.store_timestamp)
        # The last snapshot's rows (each holds its JSON): a row nothing changed in is
        # neither read from the store nor built nor encoded again (issue #27: with
        # 100,000 queues a snapshot took ~10 s of CPU and held the loop for 5 s).
        self._queue_rows: dict[QueueKey, QueueRow] = {}
        self._segment_rows_last: dict[SegmentKey, SegmentRow] = {}
        self.failure: str | None = None  # why the last publish failed, until one works
        self.last: Published | None = None
        self._was_active = False
        self._min_offset_seen = -1  # the commit log's start the tracker last dropped below

    async def run(self) -> None:
        """Publish every interval while this broker is master; no-op when disabled."""
        if self.interval_s == 0:
            return
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            # A fixed rate (the cost of a snapshot does not push the next one back), as
            # the readers' windows count snapshots.
            due = max(due + self.interval_s, loop.time())
            await asyncio.sleep(due - loop.time())
            active = self._active()
            if active and not self._was_active:
                self.reset()  # the log may differ from what was counted before
            self._was_active = active
            if not active:
                continue
            try:
                published = await self.publish_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(f"{type(exc).__name__}: {exc}", exc)
                continue
            if published is not None:
                self._recovered()

    def reset(self) -> None:
        """Count and read everything again at the next snapshot."""
        self.tracker.reset()
        self._queue_rows.clear()
        self._segment_rows_last.clear()
        self._min_offset_seen = -1

    async def publish_once(self, now_ms: int | None = None) -> Published | None:
        """Collect and append one snapshot; None (and the reason in ``failure``) when
        the write was refused."""
        started = time.monotonic()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        snapshot = await self.collect(now)
        # Pure work on rows nothing changes any more: in a thread, which yields the
        # interpreter to the loop every few milliseconds.
        bodies = await asyncio.to_thread(
            pack_bodies, snapshot.head, snapshot.bodies_input(), max_body=self.max_body
        )
        collected = time.monotonic()
        topic = self._sources.registry.ensure_system_topic(STATS_TOPIC)
        messages = [_stats_message(topic.name, body, now) for body in bodies]
        result = await self._write(messages)
        if not result.ok:
            self._failed(f"{result.status.value}: {result.reason}")
            return None
        self.last = Published(
            now,
            len(messages),
            snapshot.count,
            result.records[0].queue_offset,
            collected - started,
            time.monotonic() - collected,
        )
        return self.last

    async def collect(self, now_ms: int) -> SnapshotRows:
        src = self._sources
        store = src.store
        present = list(store.queues)  # a copy of the references: ~1 ms for 100,000
        segments = await self._segment_rows(present)
        keys: list[QueueKey] = []  # the served topics' queues in name order, then the rest
        served: set[QueueKey] = set()
        async for some_topics in _parts(src.registry.topics(), ROWS_PER_STEP // 8):
            their_keys = collect.topic_queue_keys(some_topics)
            keys += their_keys
            served.update(their_keys)
        async for some_queues in _parts(present):
            keys += collect.retired_queue_keys(some_queues, served)
        queues: list[QueueRow] = []
        rows: dict[QueueKey, QueueRow] = {}
        last = self._queue_rows
        async for some_keys in _parts(keys):
            built = collect.queue_stats(some_keys, store.queues, store.commitlog, src.reads, last)
            rows.update(((q.topic, q.queue_id), q) for q in built)
            queues += built
        self._queue_rows = rows
        groups = {g.name for g in src.registry.groups()}
        where = collect.positions(src.states(), store.metadata.all_offsets(), groups, now_ms)
        positions = sorted(where.items())
        consumers: list[ConsumerRow] = []
        async for step in _parts(positions):
            consumers += collect.consumer_stats(dict(step), store.queues, store.commitlog)
        head = collect.snapshot_head_of(src.identity(), now_ms)
        return SnapshotRows(head, queues, consumers, segments)

    async def _segment_rows(self, queues: Sequence[ConsumeQueue]) -> list[SegmentRow]:
        """Bring the per-segment counts of ``queues`` (every queue the store holds) up
        to date, yielding to the loop between chunks (the first scan after a start
        reads every consume queue). Nothing here walks all the queues at once: with
        100,000 of them one pass is 30-250 ms the loop would not serve."""
        store = self._sources.store
        reads = self._sources.reads
        tracker = self.tracker
        clog = store.commitlog
        present: list[ConsumeQueue] = []
        async for part in _parts(queues):
            present += [cq for cq in part if collect.reported(cq.topic)]
        budget = SCAN_CHUNK
        for n, cq in enumerate(present, 1):
            while True:
                try:
                    budget -= tracker.advance(cq, clog.min_offset, budget)
                except (StoreError, ValueError):
                    break  # the queue went away meanwhile (a deleted topic)
                if budget > 0:
                    break  # caught up with this queue
                budget = SCAN_CHUNK
                await asyncio.sleep(0)
            if n % ROWS_PER_STEP == 0:  # queues with nothing new cost no budget
                await asyncio.sleep(0)
        if len(tracker) > len(present):  # a topic was deleted: forget its queues
            ids = {(cq.topic, cq.queue_id) for cq in present}
            tracker.keep_only(ids)
            reads.forget_queues(ids)
            await asyncio.sleep(0)
        if clog.min_offset != self._min_offset_seen:  # retention deleted segments
            tracker.drop_below(clog.min_offset)
            reads.forget_segments_below(clog.min_offset)
            self._min_offset_seen = clog.min_offset
            await asyncio.sleep(0)
        rows: list[SegmentRow] = []
        by_key: dict[SegmentKey, SegmentRow] = {}
        last = self._segment_rows_last
        async for part in _parts(present):
            shares = tracker.rows_of((cq.topic, cq.queue_id) for cq in part)
            built = collect.segment_stats(
                shares, reads, self._sources.tiered_below, clog.segment_size, last
            )
            by_key.update(((r.topic, r.queue_id, r.segment), r) for r in built)
            rows += built
        self._segment_rows_last = by_key
        return rows

    def status(self) -> dict[str, object]:
        """For the admin API: whether snapshots go out, and the last one's cost."""
        last = self.last
        return {
            "intervalSeconds": self.interval_s,
            "failure": self.failure,
            "last": None
            if last is None
            else {
                "time": last.time,
                "messages": last.messages,
                "rows": last.rows,
                "offset": last.first_offset,
                "collectSeconds": round(last.collect_seconds, 6),
                "writeSeconds": round(last.write_seconds, 6),
            },
        }

    def _failed(self, reason: str, exc: BaseException | None = None) -> None:
        if reason != self.failure:
            log.warning(
                "publishing broker stats to %s failed (%s); retrying every %.1fs",
                STATS_TOPIC,
                reason,
                self.interval_s,
                exc_info=exc,
            )
        self.failure = reason

    def _recovered(self) -> None:
        if self.failure is not None:
            log.info("publishing broker stats to %s works again", STATS_TOPIC)
        self.failure = None


def _stats_message(topic: str, body: bytes, now_ms: int) -> MessageToStore:
    msg_id = uuid.uuid4().hex.upper()
    properties = encode_properties({**_PROPERTIES, prop.MESSAGE_ID: msg_id})
    return MessageToStore(
        topic, STATS_QUEUE, body, properties, born_timestamp=now_ms, msg_id=msg_id
    )


async def _parts(items: Sequence[T], size: int = 0) -> AsyncIterator[Sequence[T]]:
    """``items`` in slices of ``size`` (0: ROWS_PER_STEP) with a turn of the loop after
    each: a broker with many queues keeps serving while a snapshot is built."""
    size = size or ROWS_PER_STEP
    for start in range(0, len(items), size):
        yield items[start : start + size]
        await asyncio.sleep(0)

"""Housekeeping: the store's periodic work on one asyncio task.

Every tick: refresh disk usage and retry a stalled dispatch; every checkpoint
interval: flush consume queues, the index and consumer offsets (on a worker thread),
then write the checkpoint; every retention interval: apply the retention policy (its
pass over every queue a page at a time, its database work on the worker thread).
Checkpoint and retention run one after the other, so files are never deleted while a
flush is touching them.

Cancelling the task does not stop a flush already on its worker thread (a thread
cannot be cancelled), so stopping also fences the thread: it waits for a flush in
progress and keeps any later one from starting. Only then may the store close the
files the flush writes: a SQLite connection closed under a running transaction
crashes the process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from rocketcluster.api.tasks import cancel_and_wait
from rocketcluster.broker.store.commitlog import CommitLog
from rocketcluster.broker.store.config import DiskFullPolicy, StoreConfig
from rocketcluster.broker.store.consumequeue import ConsumeQueueTable, Edges
from rocketcluster.broker.store.consumption import needed_from, unconsumed_below
from rocketcluster.broker.store.errors import DiskFullError
from rocketcluster.broker.store.index import IndexService
from rocketcluster.broker.store.metadata import MetadataStore
from rocketcluster.broker.store.retention import RetentionDecision, SegmentInfo, plan_retention
from rocketcluster.broker.store.tier_view import TierView

log = logging.getLogger(__name__)

TICK_SECONDS = 0.2
RETENTION_PAGE = 1024  # queues retention forgets between two turns of the event loop
T = TypeVar("T")


class HousekeptStore(Protocol):
    """What housekeeping reads and calls of the MessageStore that owns it."""

    @property
    def config(self) -> StoreConfig: ...
    @property
    def commitlog(self) -> CommitLog: ...
    @property
    def queues(self) -> ConsumeQueueTable: ...
    @property
    def index(self) -> IndexService: ...
    @property
    def metadata(self) -> MetadataStore: ...
    @property
    def closed(self) -> bool: ...
    @property
    def dispatched_offset(self) -> int: ...
    @property
    def disk_used_ratio(self) -> float: ...
    @property
    def disk_total_bytes(self) -> int: ...
    def refresh_disk_usage(self) -> None: ...
    def retry_stalled_dispatch(self) -> None: ...
    @property
    def tier(self) -> TierView | None: ...
    @property
    def bookkeeping_topics(self) -> frozenset[str]: ...
    @property
    def subscribers(self) -> Callable[[], Mapping[str, set[str]]]: ...
    def write_checkpoint(self, *, clean: bool, logics: int | None = None) -> None: ...


class Housekeeping:
    def __init__(self, store: HousekeptStore) -> None:
        self._store = store
        self._task: asyncio.Task[None] | None = None
        self._flushing = threading.Lock()  # held by a flush on its worker thread
        self._fenced = False  # set under _flushing: no flush may start any more
        self._last_checkpoint = time.monotonic()
        self._last_retention = time.monotonic()
        self.last_retention: RetentionDecision | None = None
        self.deleted_segments = 0
        self.deleted_bytes = 0  # commit-log bytes retention removed since the start
        self.held_by_tier = 0  # segments the last run kept because they are not uploaded
        self.held_for_consumers = 0  # segments the last run kept for consumers (reject)
        self.deleted_unconsumed = 0  # messages removed that no consumer group had read
        self._disk_full = False  # the last tick failed for want of disk space

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-housekeeping")

    def abandon(self) -> None:
        """Cancel the task and fence its flush thread, blocking for at most one flush:
        what ``MessageStore.abandon`` (synchronous) needs before it closes the files."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._fence()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await asyncio.to_thread(self._fence)

    def _fence(self) -> None:
        with self._flushing:
            self._fenced = True

    async def _run(self) -> None:
        cfg = self._store.config
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                self._store.refresh_disk_usage()
                self._store.retry_stalled_dispatch()
                now = time.monotonic()
                if now - self._last_checkpoint >= cfg.checkpoint_interval_ms / 1000:
                    self._last_checkpoint = now
                    await self.checkpoint()
                if now - self._last_retention >= cfg.retention_interval_ms / 1000:
                    self._last_retention = now
                    await self.apply_retention_paced()
                self._disk_full = False
            except asyncio.CancelledError:
                raise
            except DiskFullError as exc:
                # Consume queues, offsets and the checkpoint stay in memory and are
                # written once there is room: say so once, not a traceback a tick.
                if not self._disk_full:
                    log.warning("store housekeeping waits for disk space: %s", exc)
                self._disk_full = True
            except Exception:
                log.exception("store housekeeping failed; retrying next tick")

    async def _off_loop(self, work: Callable[[], T]) -> T | None:
        """``work`` on a worker thread, unless the store is closing (None then): the
        fence waits for it, and keeps it from starting once the store closes."""

        def fenced() -> T | None:
            with self._flushing:
                if self._fenced:
                    return None
                return work()

        return await asyncio.to_thread(fenced)

    async def checkpoint(self) -> None:
        store = self._store
        covered = min(store.dispatched_offset, store.index.indexed_offset)

        def flush() -> bool:
            store.queues.flush()
            store.index.sync()
            return True

        if not await self._off_loop(flush) or store.closed:
            return  # the store is closing: its close writes the last checkpoint
        store.metadata.persist_offsets()
        store.write_checkpoint(clean=False, logics=covered)

    def apply_retention(self, now: float | None = None) -> RetentionDecision:
        """Apply the retention policy now, all at once (the admin API's run)."""
        decision, new_min, removed = self._remove_segments(now)
        if new_min is not None:
            queues = self._store.queues
            edges = queues.edges()
            self._count_unconsumed(new_min, edges)
            queues.delete_before_physical(new_min, edges)
            self._after_queues(decision, new_min, removed)
        return decision

    async def apply_retention_paced(self, now: float | None = None) -> RetentionDecision:
        """The periodic run: the same as :meth:`apply_retention`, but the pass over
        every queue gives the event loop back every RETENTION_PAGE queues and reads
        and writes the database on a worker thread. At 100,000 queues the pass held
        the loop for 1.5-2 s (the bounds query ~1.1 s, the queues ~0.5 s, the deletes
        ~0.4 s): the worst send of the scale benchmark. Readers meanwhile skip the
        entries below the log's new start (MessageStore.get_messages)."""
        decision, new_min, removed = self._remove_segments(now)
        if new_min is None:
            return decision
        queues = self._store.queues
        edges = await self._off_loop(lambda: queues.edges(own_connection=True))
        if edges is None:
            return decision  # closing: recovery forgets what is below the log's start
        self._count_unconsumed(new_min, edges)
        every = list(queues)
        cuts: list[tuple[int, int]] = []
        for start in range(0, len(every), RETENTION_PAGE):
            cuts += queues.retention_cuts(new_min, edges, every[start : start + RETENTION_PAGE])
            await asyncio.sleep(0)
        await self._off_loop(lambda: queues.drop_before(cuts))
        self._after_queues(decision, new_min, removed)
        return decision

    def _remove_segments(
        self, now: float | None = None
    ) -> tuple[RetentionDecision, int | None, int]:
        """Plan retention and delete the commit-log segments it gives up: the decision,
        the log's new start when segments went (None: nothing deleted), how many."""
        store = self._store
        cfg = store.config
        clog = store.commitlog
        infos = []
        for seg in clog.segments:
            try:
                mtime = seg.path.stat().st_mtime
            except FileNotFoundError:
                continue
            infos.append(SegmentInfo(seg.base, seg.end, mtime))
        tier = store.tier
        needed = None
        if (
            tier is None
            and cfg.disk_full is DiskFullPolicy.REJECT
            and (store.disk_used_ratio > cfg.disk_max_used_ratio or cfg.max_store_bytes is not None)
        ):
            # Space-driven deletion may be due: keep what consumer groups still need
            # (the walk over every queue only when the disk or the store is too full).
            # With a tier, held_from keeps what it lacks and consumers read the rest
            # from it: nothing they need is lost.
            needed = needed_from(
                store.queues,
                store.metadata.all_offsets(),
                store.bookkeeping_topics,
                store.subscribers(),
            )
            if needed is None:
                needed = clog.write_offset  # every queue is consumed to its end
        decision = plan_retention(
            infos,
            now=time.time() if now is None else now,
            retention_hours=cfg.retention_hours,
            flushed_offset=min(clog.flushed_offset, store.dispatched_offset),
            disk_used_ratio=store.disk_used_ratio,
            disk_max_used_ratio=cfg.disk_max_used_ratio,
            segment_size=clog.segment_size,
            disk_total_bytes=store.disk_total_bytes,
            max_store_bytes=cfg.max_store_bytes,
            held_from=None if tier is None else tier.held_from(),
            needed_from=needed,
        )
        self.last_retention = decision
        if decision.held_by_tier and not self.held_by_tier:
            log.warning(
                "retention holds %d segment(s) back: their messages are not in the tier yet",
                decision.held_by_tier,
            )
        self.held_by_tier = decision.held_by_tier
        if decision.held_for_consumers and not self.held_for_consumers:
            log.warning(
                "retention keeps %d segment(s) consumer groups have not consumed although "
                "the disk (%.0f%% full) or the store is over its ceiling (diskFull: reject): "
                "writes are refused above %.0f%%",
                decision.held_for_consumers,
                store.disk_used_ratio * 100,
                cfg.disk_full_ratio * 100,
            )
        self.held_for_consumers = decision.held_for_consumers
        if not decision.delete_count:
            return decision, None, 0
        removed = clog.delete_head_segments(decision.delete_count)
        self.deleted_segments += len(removed)
        self.deleted_bytes += sum(seg.size for seg in removed)
        return decision, clog.min_offset, len(removed)

    def _count_unconsumed(self, new_min: int, edges: Edges) -> None:
        """Count the messages below the log's new start no consumer group had read
        (the queues still hold their entries: their cut comes next). With a tier they
        are not lost: it has every one of them (held_from), and reads fall back to it."""
        store = self._store
        if store.tier is not None:
            return
        lost = unconsumed_below(
            store.queues,
            store.metadata.all_offsets(),
            store.bookkeeping_topics,
            new_min,
            edges,
            store.subscribers(),
        )
        if lost:
            self.deleted_unconsumed += lost
            log.warning(
                "retention removed %d message(s) no consumer group had read (below %d)",
                lost,
                new_min,
            )

    def _after_queues(self, decision: RetentionDecision, new_min: int, removed: int) -> None:
        """What follows the queues: the index's tables below the log (and the tier),
        the disk's fill level, the log line."""
        store = self._store
        tier = store.tier
        tiered = None if tier is None else tier.lowest_physical()
        store.index.drop_tables_below(new_min if tiered is None else min(new_min, tiered))
        store.refresh_disk_usage()
        log.info(
            "retention removed %d segment(s) (%s); commit log now starts at %d",
            removed,
            ", ".join(decision.reasons),
            new_min,
        )

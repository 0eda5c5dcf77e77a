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
from collections.abc import Callable
from typing import Protocol, TypeVar

from rocketcluster.api.tasks import cancel_and_wait
from rocketcluster.broker.store.commitlog import CommitLog
from rocketcluster.broker.store.config import StoreConfig
from rocketcluster.broker.store.consumequeue import ConsumeQueueTable
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
            except asyncio.CancelledError:
                raise
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
            self._store.queues.delete_before_physical(new_min)
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
        )
        self.last_retention = decision
        if decision.held_by_tier and not self.held_by_tier:
            log.warning(
                "retention holds %d segment(s) back: their messages are not in the tier yet",
                decision.held_by_tier,
            )
        self.held_by_tier = decision.held_by_tier
        if not decision.delete_count:
            return decision, None, 0
        removed = clog.delete_head_segments(decision.delete_count)
        self.deleted_segments += len(removed)
        self.deleted_bytes += sum(seg.size for seg in removed)
        return decision, clog.min_offset, len(removed)

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

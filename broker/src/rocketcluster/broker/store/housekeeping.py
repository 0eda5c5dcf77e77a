"""Housekeeping: the store's periodic work on one asyncio task.

Every tick: refresh disk usage and retry a stalled dispatch; every checkpoint
interval: flush consume queues, the index and consumer offsets (on a worker thread),
then write the checkpoint; every retention interval: apply the retention policy.
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
from typing import Protocol

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
                    self.apply_retention()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("store housekeeping failed; retrying next tick")

    async def checkpoint(self) -> None:
        store = self._store
        covered = min(store.dispatched_offset, store.index.indexed_offset)

        def flush() -> bool:
            with self._flushing:
                if self._fenced:
                    return False
                store.queues.flush()
                store.index.sync()
                return True

        if not await asyncio.to_thread(flush) or store.closed:
            return  # the store is closing: its close writes the last checkpoint
        store.metadata.persist_offsets()
        store.write_checkpoint(clean=False, logics=covered)

    def apply_retention(self, now: float | None = None) -> RetentionDecision:
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
        if decision.delete_count:
            removed = clog.delete_head_segments(decision.delete_count)
            self.deleted_segments += len(removed)
            self.deleted_bytes += sum(seg.size for seg in removed)
            new_min = clog.min_offset
            store.queues.delete_before_physical(new_min)
            tiered = None if tier is None else tier.lowest_physical()
            store.index.drop_tables_below(new_min if tiered is None else min(new_min, tiered))
            store.refresh_disk_usage()
            log.info(
                "retention removed %d segment(s) (%s); commit log now starts at %d",
                len(removed),
                ", ".join(decision.reasons),
                new_min,
            )
        return decision

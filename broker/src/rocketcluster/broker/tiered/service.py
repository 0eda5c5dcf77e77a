"""TieredStorage: the tier as the rest of the broker sees it.

It runs one task. On the master: upload what is due, delete from the tier whole
segments past ``remoteRetentionHours``, and — on becoming master — first learn from
the backend what the previous master uploaded (the committed positions the new
master continues from). On a slave: refresh the catalogue now and then, so that its
own local retention knows what is safe to delete. A backend outage stops none of
this from retrying and never reaches a client write: uploads wait (with backoff),
local retention holds what is not uploaded yet, reads fall back to local data.

For readers it answers: where does a queue start (the tier's first offset when reads
may use it), should this read go to the tier (the read policy), the messages there,
the queue offset for a store time, and a message by its commit-log position (lookups
by key or id, whose index entries outlive the local log while the tier holds them).
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketcluster.api.tasks import cancel_and_wait
from rocketcluster.api.tiered_spec import TieredReadPolicy, TieredStorageSpec
from rocketcluster.broker.store import MessageStore
from rocketcluster.broker.store.consumequeue import ConsumeQueue
from rocketcluster.broker.store.record import StoredMessage
from rocketcluster.broker.tiered.backend import BackendError, TierBackend
from rocketcluster.broker.tiered.cache import SegmentCache
from rocketcluster.broker.tiered.catalog import TierCatalog
from rocketcluster.broker.tiered.policy import read_from_tier
from rocketcluster.broker.tiered.reader import TierReader
from rocketcluster.broker.tiered.segment import SegmentFormatError
from rocketcluster.broker.tiered.uploader import Uploader
from rocketcluster.broker.tiered.worker import init_worker, warm_up

log = logging.getLogger(__name__)

TICK_S = 0.2
MAX_BACKOFF_S = 30.0
SLAVE_REFRESH_S = 30.0
REMOTE_RETENTION_EVERY_S = 600.0


@dataclass(frozen=True)
class TierTimings:
    """How often the background work runs (tests shorten them)."""

    slave_refresh_s: float = SLAVE_REFRESH_S
    remote_retention_every_s: float = REMOTE_RETENTION_EVERY_S


class TieredStorage:
    def __init__(
        self,
        spec: TieredStorageSpec,
        store: MessageStore,
        backend: TierBackend,
        *,
        cluster: str,
        group: str,
        writer: str,
        is_master: Callable[[], bool],
        timings: TierTimings | None = None,
        on_fetch: Callable[[float], None] | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.backend = backend
        self.timings = timings or TierTimings()
        self._is_master = is_master
        self.catalog = TierCatalog(backend, cluster, group, store.metadata)
        self.uploader = Uploader(
            store,
            self.catalog,
            backend,
            batch_bytes=spec.upload_batch_bytes,
            interval_s=spec.upload_interval_seconds,
            writer=writer,
            spec_json=spec.model_dump_json(),
        )
        self.cache = SegmentCache(spec.read_ahead_bytes)
        self.reader = TierReader(self.catalog, backend, self.cache, on_fetch)
        self._task: asyncio.Task[None] | None = None
        self._was_master = False
        self._refreshed = False
        self._backoff_until = 0.0
        self._failures = 0
        self._last_refresh = 0.0
        self._last_remote_retention = time.monotonic()
        self.remote_deleted_segments = 0
        self.last_error = ""
        self.healthy = True  # False while the backend fails

    @property
    def policy(self) -> TieredReadPolicy:
        return self.spec.read_policy

    # -- lifecycle ---------------------------------------------------------------

    def start(self, *, worker_process: bool = True) -> None:
        """Run the background work; segments are written by a worker process of this
        broker (worker.py), or on threads with ``worker_process`` False."""
        if worker_process:
            # One process: started now (below), so it is up before the first upload
            # and set to die with this broker before the broker could be killed.
            self.uploader.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=init_worker,
                initargs=(os.getpid(),),
            )
            # Start (and import) the workers now, not at the first upload.
            self.uploader.pool.submit(warm_up, self.uploader.spec_json)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tiered-storage")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self.reader.close()
        pool, self.uploader.pool = self.uploader.pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    async def _run(self) -> None:
        uploaded = 0
        while True:
            # A pass that uploaded goes on at once (one segment per queue per pass: a
            # backlog catches up without waiting a tick per segment).
            await asyncio.sleep(0 if uploaded else TICK_S)
            uploaded = 0
            if time.monotonic() < self._backoff_until:
                continue
            try:
                uploaded = await self.step()
            except asyncio.CancelledError:
                raise
            except (BackendError, SegmentFormatError) as exc:
                self._failed(exc)
            except Exception as exc:
                log.exception("tiered storage step failed")
                self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        delay = min(MAX_BACKOFF_S, TICK_S * 2**self._failures)
        self._backoff_until = time.monotonic() + delay
        message = f"{type(exc).__name__}: {exc}"
        if message != self.last_error or self.healthy:
            log.warning(
                "tier backend %s: %s (retrying in %.1fs)", self.backend.describe(), message, delay
            )
        self.last_error = message
        self.healthy = False

    async def step(self) -> int:
        """One round of the background work; returns segments uploaded. Raises what
        the backend raised (the loop backs off and retries)."""
        master = self._is_master()
        now = time.monotonic()
        uploaded = 0
        if master and (not self._was_master or not self._refreshed):
            await self.refresh()  # continue from what the backend confirms
        elif not master and now - self._last_refresh >= self.timings.slave_refresh_s:
            await self.refresh()
        self._was_master = master
        if master:
            uploaded = await self.uploader.upload_once()
            if now - self._last_remote_retention >= self.timings.remote_retention_every_s:
                self._last_remote_retention = now
                await self.apply_remote_retention()
        if not self.healthy:
            log.info("tier backend %s answers again", self.backend.describe())
        self.healthy = True
        self._failures = 0
        return uploaded

    async def refresh(self) -> None:
        result = await asyncio.to_thread(self.catalog.refresh)
        self._refreshed = True
        self._last_refresh = time.monotonic()
        if result.added or result.removed:
            log.info(
                "tier catalogue refreshed from %s: %d objects, %d new, %d gone",
                self.backend.describe(),
                result.objects,
                result.added,
                result.removed,
            )

    async def flush(self) -> int:
        """Upload everything pending now, whatever the batch size and interval (tools,
        tests, a clean shutdown). Only on the master."""
        if not self._is_master():
            return 0
        total = 0
        try:
            if not self._refreshed:
                await self.refresh()
            while uploaded := await self.uploader.upload_once(force=True):
                total += uploaded
        except (BackendError, SegmentFormatError) as exc:
            self._failed(exc)  # status and metrics say so, as for a background upload
            raise
        return total

    # -- remote retention ----------------------------------------------------------

    async def apply_remote_retention(self, now_ms: int | None = None) -> int:
        """Delete, per queue, the head segments whose newest message is older than
        ``remoteRetentionHours``. Returns how many went."""
        horizon = (now_ms if now_ms is not None else int(time.time() * 1000)) - int(
            self.spec.remote_retention_hours * 3600 * 1000
        )
        deleted = 0
        for tier in self.catalog:
            expired = []
            for header in tier.segments:
                if header.max_store_time >= horizon:
                    break
                expired.append(header)
            if not expired:
                continue
            names = [self.catalog.name_of(h) for h in expired]
            await asyncio.to_thread(self.backend.delete, names)
            self.catalog.forget(tier.topic, tier.queue_id, expired[-1].start)
            deleted += len(expired)
        if deleted:
            self.remote_deleted_segments += deleted
            log.info("remote retention deleted %d tier segment(s)", deleted)
        return deleted

    # -- what readers ask ------------------------------------------------------------

    def queue_start(self, topic: str, queue_id: int) -> int | None:
        """The tier's first offset of a queue when reads may use the tier."""
        if self.policy is TieredReadPolicy.DISABLE:
            return None
        tier = self.catalog.get(topic, queue_id)
        return None if tier is None else tier.start

    def wants(self, cq: ConsumeQueue, offset: int) -> bool:
        """Whether the read of ``offset`` of ``cq`` goes to the tier."""
        if self.policy is TieredReadPolicy.DISABLE:
            return False
        tier = self.catalog.get(cq.topic, cq.queue_id)
        if tier is None or tier.find(offset) is None:
            return False
        clog = self.store.commitlog
        entry = cq.get(offset)
        on_disk = entry is not None and entry.physical_offset >= clog.min_offset
        in_memory = None
        if entry is not None and on_disk and self.policy is TieredReadPolicy.NOT_IN_MEM:
            in_memory = clog.resident(entry.physical_offset, entry.size)
        return read_from_tier(self.policy, in_tier=True, on_disk=on_disk, in_memory=in_memory)

    async def read(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[StoredMessage]:
        return await self.reader.read(topic, queue_id, offset, max_count)

    def fell_back(self) -> None:
        self.reader.counters.fallbacks += 1

    def resume_at(self, topic: str, queue_id: int, offset: int) -> int | None:
        """The first offset at or after ``offset`` the tier holds (past a hole)."""
        tier = self.catalog.get(topic, queue_id)
        found = None if tier is None else tier.first_at_or_after(offset)
        return None if found is None else max(found.start, offset)

    async def offset_for_time(self, topic: str, queue_id: int, time_ms: int) -> int | None:
        """The first offset of the queue's tier stored at or after ``time_ms``; None
        when the tier holds nothing that new (the local store answers then)."""
        tier = self.catalog.get(topic, queue_id)
        if tier is None or self.policy is TieredReadPolicy.DISABLE:
            return None
        for header in tier.segments:
            if header.max_store_time < time_ms:
                continue
            if header.min_store_time >= time_ms:
                return header.start
            messages = await self.reader.segment(header)
            return next(m.queue_offset for m in messages if m.store_timestamp >= time_ms)
        return None

    async def message_at(self, physical_offset: int, size: int) -> StoredMessage | None:
        """The message a commit-log position named before local retention removed it
        (an index entry), found through the segments' commit-log ranges (which grow
        with the offsets of each queue: one binary search per queue)."""
        if self.policy is TieredReadPolicy.DISABLE:
            return None
        for tier in self.catalog:
            i = bisect.bisect_right(tier.segments, physical_offset, key=lambda s: s.min_physical)
            if i == 0 or tier.segments[i - 1].max_physical < physical_offset:
                continue
            for msg in await self.reader.segment(tier.segments[i - 1]):
                if msg.physical_offset == physical_offset and msg.size == size:
                    return msg
        return None

    # -- what local retention asks -----------------------------------------------------

    def held_from(self) -> int | None:
        """The commit-log offset from which local data is not yet all in the tier:
        local retention deletes only segments that end at or before it. None: every
        queue's data is in the tier."""
        pending = [
            p for cq in list(self.store.queues) if (p := self._first_pending(cq)) is not None
        ]
        return min(pending) if pending else None

    def uploaded_below(self, topic: str, queue_id: int) -> float:
        """The commit-log offset below which every message of the queue is in the
        tier (infinity when all of them are)."""
        cq = self.store.queues.get(topic, queue_id)
        if cq is None:
            return 0.0
        first = self._first_pending(cq)
        return float("inf") if first is None else float(first)

    def _first_pending(self, cq: ConsumeQueue) -> int | None:
        """The commit-log offset of the queue's oldest message not in the tier."""
        begin = self.uploader.begin_of(cq)
        entry = cq.get(begin) if begin < cq.max_index else None
        return None if entry is None else entry.physical_offset

    def lowest_physical(self) -> int | None:
        """The oldest commit-log position the tier still holds a message of (index
        entries from there on stay: lookups reach the tier through them)."""
        starts = [t.segments[0].min_physical for t in self.catalog if t.segments]
        return min(starts) if starts else None

    # -- what people and metrics ask ---------------------------------------------------

    def lag(self) -> tuple[int, float]:
        """(commit-log bytes not yet all in the tier, seconds the oldest of them has
        waited) — 0 and 0 when everything is uploaded."""
        held = self.held_from()
        clog = self.store.commitlog
        if held is None or held < clog.min_offset:
            return 0, 0.0
        lag_bytes = max(0, self.store.dispatched_offset - held)
        stored = clog.store_timestamp(held)
        age = max(0.0, time.time() - stored / 1000) if stored else 0.0
        return lag_bytes, age

    def status(self) -> dict[str, Any]:
        lag_bytes, lag_s = self.lag()
        up = self.uploader.counters
        rd = self.reader.counters
        queues = []
        for tier in sorted(self.catalog, key=lambda t: (t.topic, t.queue_id)):
            if not tier.segments:
                continue
            queues.append(
                {
                    "topic": tier.topic,
                    "queueId": tier.queue_id,
                    "startOffset": tier.start,
                    "committedOffset": tier.end,
                    "segments": len(tier.segments),
                    "bytes": tier.bytes,
                    "oldestStoreTime": tier.segments[0].min_store_time,
                    "holes": [list(h) for h in tier.holes()],
                }
            )
        return {
            "enabled": True,
            "backend": self.backend.describe(),
            "readPolicy": self.policy.value,
            "uploading": self._is_master(),
            "healthy": self.healthy,
            "lastError": self.last_error,
            "lagBytes": lag_bytes,
            "lagSeconds": round(lag_s, 3),
            "pendingMessages": sum(self.uploader.pending().values()),
            "tierBytes": sum(q["bytes"] for q in queues),
            "segments": sum(q["segments"] for q in queues),
            "uploads": {
                "segments": up.segments,
                "messages": up.messages,
                "bytes": up.bytes,
                "adopted": up.adopted,
                "errors": up.errors,
                "lastError": up.last_error,
            },
            "reads": {
                "reads": rd.reads,
                "messages": rd.messages,
                "fetches": rd.fetches,
                "fetchedBytes": rd.fetched_bytes,
                "cacheBytes": self.cache.bytes,
                "cacheHits": self.cache.hits,
                "fallbacks": rd.fallbacks,
                "errors": rd.errors,
                "lastError": rd.last_error,
            },
            "remoteRetention": {
                "hours": self.spec.remote_retention_hours,
                "deletedSegments": self.remote_deleted_segments,
            },
            "queues": queues,
        }
